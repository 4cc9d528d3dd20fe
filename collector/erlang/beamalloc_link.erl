%% beamalloc_link: the life of our hidden node (beamalloc_relay runs on it): reading the cookie,
%% starting distribution under a pooled name, leaving nothing behind, connecting to a target, and
%% telling why a connection failed.
%%
%% The node boots without distribution; start/1 starts it under the first of ?POOL fixed names
%% (beamalloc_1 ... beamalloc_16) that epmd on this host does not list, so a target learns at most
%% ?POOL atoms from all our runs on one host (docs/robustness.md, "What we change on a
%% target"); epmd refuses a name already registered, so two concurrent runs never share one.
%% Once distribution is up, our modules are loaded and the throw-away HOME (it held only the
%% compiled modules and the random cookie file net_kernel writes there) is deleted: a run killed
%% with SIGKILL leaves no directory behind. quit/1 deletes it too, for the paths that end earlier.
%%
%% A failed net_kernel:connect_node/1 says only `false`. To give the user the reason, setup/0
%% installs a logger handler that records the failed handshakes net_kernel reports in verbose mode
%% (they come through error_logger:info_report/1, so the report sits under the `report` key), and
%% why_not/3 asks epmd on the target's host whether the node exists; a node that exists and
%% failed our handshake at the challenge ack rejected the cookie (the digest check).
-module(beamalloc_link).
-export([setup/0, log/2, start/0, quit/1, run/4, wait/4]).

-define(POOL, 16).

%% Remove the default handler (standard_io carries our result lines only) and start recording
%% failed handshakes. Returns the table run/4 reads them from.
setup() ->
    _ = logger:remove_handler(default),
    ok = logger:set_primary_config(level, info),
    Failures = ets:new(setup_failures, [public, ordered_set]),
    ok = logger:add_handler(?MODULE, ?MODULE, #{config => Failures}),
    Failures.

%% logger handler callback.
log(#{msg := {report, #{report := {net_kernel, {'EXIT', _, Reason}}}}}, #{config := Tab}) ->
    ets:insert(Tab, {erlang:monotonic_time(), Reason}),
    ok;
log(#{msg := {report, {net_kernel, {'EXIT', _, Reason}}}}, #{config := Tab}) ->
    ets:insert(Tab, {erlang:monotonic_time(), Reason}),
    ok;
log(_, _) ->
    ok.

%% Read the cookie, start distribution, drop HOME. The relay reads its requests from stdin and
%% halts at its end (the kernel closes it when the Python process that started us dies, however
%% it dies).
start() ->
    case read_cookie() of
        {ok, Cookie} ->
            case start_dist() of
                ok ->
                    _ = net_kernel:verbose(1),  % failed handshakes reach the log (why_not/3)
                    seal(),
                    {ok, Cookie};
                Error -> Error
            end;
        Error ->
            Error
    end.

%% Delete the throw-away HOME (only one of ours: its name says so), then halt at once.
quit(Status) ->
    drop_home(),
    erlang:halt(Status).

drop_home() ->
    case os:getenv("HOME") of
        false -> ok;
        Home ->
            case lists:prefix("beamalloc_home_", filename:basename(Home)) of
                true -> _ = file:del_dir_r(Home), ok;
                false -> ok
            end
    end.

%% Every module of ours loaded now (they live in HOME), then HOME goes, all but HOME/tls: our
%% copy of the TLS option file and of the certificates it names, which ssl reads again for each
%% new connection (collector/access.py prepare_tls/3); quit/1 deletes it with the rest.
seal() ->
    Dir = filename:dirname(code:which(?MODULE)),
    _ = [code:ensure_loaded(list_to_atom(filename:basename(F, ".beam")))
         || F <- filelib:wildcard(filename:join(Dir, "*.beam"))],
    case os:getenv("HOME") of
        false -> ok;
        Home ->
            case filelib:is_dir(filename:join(Home, "tls")) of
                true ->
                    {ok, Names} = file:list_dir(Home),
                    _ = [file:del_dir_r(filename:join(Home, N)) || N <- Names, N =/= "tls"],
                    ok;
                false ->
                    drop_home()
            end
    end.

%% Long names when Python passed `-beamalloc_host Host` (the target uses long names).
start_dist() ->
    {Domain, Suffix} = case init:get_argument(beamalloc_host) of
                           {ok, [[Host]]} -> {longnames, "@" ++ Host};
                           _ -> {shortnames, ""}
                       end,
    case registered_names() of
        {ok, Taken} ->
            Free = [N || I <- lists:seq(1, ?POOL),
                         N <- ["beamalloc_" ++ integer_to_list(I)],
                         not lists:member(N, Taken)],
            start_dist(Free, Domain, Suffix);
        Error ->
            Error
    end.

start_dist([], _Domain, _Suffix) ->
    {error, names_in_use, ?POOL};
start_dist([Name | Rest], Domain, Suffix) ->
    case net_kernel:start([list_to_atom(Name ++ Suffix), Domain]) of
        {ok, _} -> ok;
        {error, Reason} ->
            %% Taken meanwhile by another run (epmd lists it now): try the next. Anything else
            %% (a TLS option file ssl refuses, an unknown -proto_dist) fails every name alike.
            case registered_names() of
                {ok, Taken} ->
                    case lists:member(Name, Taken) of
                        true -> start_dist(Rest, Domain, Suffix);
                        false -> {error, no_distribution,
                                  iolist_to_binary(io_lib:format("~0P", [Reason, 14]))}
                    end;
                Error ->
                    Error
            end
    end.

%% Names epmd on this host lists; epmd is started first when none runs, as `erl -sname` would.
registered_names() ->
    case erl_epmd:names() of
        {ok, Names} -> {ok, [N || {N, _} <- Names]};
        {error, _} ->
            Epmd = case os:find_executable("epmd") of
                       false -> filename:join([code:root_dir(), "bin", "epmd"]);
                       Path -> Path
                   end,
            Port = open_port({spawn_executable, Epmd}, [{args, ["-daemon"]}, exit_status]),
            receive {Port, {exit_status, _}} -> ok after 5000 -> ok end,
            registered_names(20)
    end.

registered_names(0) ->
    {error, no_distribution, <<"epmd is not running on this host and could not be started">>};
registered_names(N) ->
    case erl_epmd:names() of
        {ok, Names} -> {ok, [Nm || {Nm, _} <- Names]};
        {error, _} -> timer:sleep(50), registered_names(N - 1)
    end.

%% The cookie comes as one hex line on stdin, so that it is in no argv.
read_cookie() ->
    case io:get_line(standard_io, "") of
        Line when is_list(Line); is_binary(Line) ->
            try binary:decode_hex(string:trim(unicode:characters_to_binary(Line))) of
                <<>> -> {error, no_cookie, <<>>};
                Bin -> {ok, binary_to_atom(Bin, utf8)}
            catch _:_ -> {error, no_cookie, <<"cookie not hex-encoded">>}
            end;
        _ -> {error, no_cookie, <<>>}
    end.

%% In the calling process: connect to Target and return Fun(), or the reason it failed as
%% {error, Kind, Detail}. Parent gets {stage, collecting} once connected (for wait/4's timeout
%% message); the connect time is left in the process dictionary as connected_us.
run(Parent, Target, Failures, Fun) ->
    Since = erlang:monotonic_time(),
    case net_kernel:connect_node(Target) of
        true ->
            put(connected_us, os:system_time(microsecond)),
            Parent ! {stage, collecting},
            erlang:monitor_node(Target, true),
            try Fun()
            catch
                error:{erpc, noconnection} -> {error, nodedown, <<>>};
                throw:nodedown -> {error, nodedown, <<>>};
                Class:Reason -> {error, call_failed,
                                 iolist_to_binary(io_lib:format("~0p:~0P", [Class, Reason, 12]))}
            end;
        _ ->
            why_not(Target, Since, Failures)
    end.

why_not(Target, Since, Failures) ->
    [Name, Host] = string:split(atom_to_list(Target), "@"),
    %% An epmd-less target: no epmd to ask, only the handshake reports (or none: nothing
    %% listens on the port).
    Listed = case beamalloc_epmd:dist_port() of
                 undefined -> erl_epmd:names(Host);
                 _ -> epmd_less
             end,
    case Listed of
        epmd_less ->
            Reasons = [R || {T, R} <- ets:tab2list(Failures), T >= Since],
            case {[R || {recv_challenge_ack_failed, _} = R <- Reasons], handshake(Reasons)} of
                {[_ | _], _} -> {error, bad_cookie, <<>>};
                {[], []} -> {error, connect_failed, <<"no node answered on that port">>};
                {[], Handshake} -> {error, connect_failed,
                                    iolist_to_binary(io_lib:format("~0P", [Handshake, 12]))}
            end;
        {ok, Names} ->
            Reasons = [R || {T, R} <- ets:tab2list(Failures), T >= Since],
            Handshake = handshake(Reasons),
            case lists:keymember(Name, 1, Names) of
                false when Handshake =/= [] ->
                    %% the handshake began, so epmd gave us its port: the node died meanwhile
                    {error, died_in_handshake,
                     iolist_to_binary(io_lib:format("~0P", [Handshake, 8]))};
                false ->
                    {error, no_such_node, [list_to_binary(N) || {N, _} <- Names]};
                true ->
                    case [R || {recv_challenge_ack_failed, _} = R <- Reasons] of
                        [_ | _] -> {error, bad_cookie, <<>>};
                        [] -> {error, connect_failed,
                               iolist_to_binary(io_lib:format("~0P", [Reasons, 12]))}
                    end
            end;
        {error, Why} ->
            {error, host_unreachable, iolist_to_binary(io_lib:format("~0p", [Why]))}
    end.

%% The failed steps that reached the node: a setup that ended in plain `shutdown` or found no
%% port with epmd (inet_tls_dist reports that as port_please_failed) never reached it.
handshake(Reasons) ->
    [R || R <- Reasons, R =/= shutdown,
          not (is_tuple(R) andalso element(1, R) =:= port_please_failed)].

%% The reply of the worker Pid (monitored by Ref) by Deadline (erlang:monotonic_time(millisecond));
%% past it the worker is killed and the reply says at which stage it was.
wait(Pid, Ref, Deadline, Stage) ->
    Left = max(0, Deadline - erlang:monotonic_time(millisecond)),
    receive
        {Pid, Reply} ->
            erlang:demonitor(Ref, [flush]),
            Reply;
        {stage, NewStage} ->
            wait(Pid, Ref, Deadline, NewStage);
        {'DOWN', Ref, process, Pid, Why} ->
            {error, agent_crash, iolist_to_binary(io_lib:format("~0P", [Why, 12]))}
    after Left ->
        exit(Pid, kill),
        {error, timeout, Stage}
    end.
