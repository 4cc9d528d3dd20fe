%% beamalloc_link: what beamalloc_agent and beamalloc_session share on our hidden node: reading
%% the cookie, connecting to a target, and telling why a connection failed.
%%
%% A failed net_kernel:connect_node/1 says only `false`. To give the user the reason, setup/1
%% installs a logger handler that records the failed handshakes net_kernel reports in verbose mode
%% (they come through error_logger:info_report/1, so the report sits under the `report` key), and
%% why_not/3 asks epmd on the target's host whether the node exists; a node that exists and
%% failed our handshake at the challenge ack rejected the cookie (the digest check).
-module(beamalloc_link).
-export([setup/0, log/2, read_cookie/0, run/4, wait/4]).

%% Remove the default handler (standard_io carries our result lines only) and start recording
%% failed handshakes. Returns the table run/4 reads them from.
setup() ->
    _ = logger:remove_handler(default),
    ok = logger:set_primary_config(level, info),
    _ = net_kernel:verbose(1),
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
    case erl_epmd:names(Host) of
        {ok, Names} ->
            case lists:keymember(Name, 1, Names) of
                false ->
                    {error, no_such_node, [list_to_binary(N) || {N, _} <- Names]};
                true ->
                    Reasons = [R || {T, R} <- ets:tab2list(Failures), T >= Since],
                    case [R || {recv_challenge_ack_failed, _} = R <- Reasons] of
                        [_ | _] -> {error, bad_cookie, <<>>};
                        [] -> {error, connect_failed,
                               iolist_to_binary(io_lib:format("~0P", [Reasons, 12]))}
                    end
            end;
        {error, Why} ->
            {error, host_unreachable, iolist_to_binary(io_lib:format("~0p", [Why]))}
    end.

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
