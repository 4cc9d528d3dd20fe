%% beamalloc_session: a long-lived hidden node that snapshots many targets on request.
%%
%% `beamalloc watch` and `beamalloc snapshot --cluster` start it once instead of one
%% beamalloc_agent per snapshot: a hidden node costs 0.3-0.5 s to boot, too much for 1 s sampling.
%% Like the agent it runs on our side, loads nothing on the targets and only calls BIFs there
%% through erpc: a snapshot is beamalloc_agent:collect/1, compiled into the same ebin.
%%
%% Protocol (lines on stdin/stdout):
%%   first line in:  the cookie, hex-encoded (never in argv); it becomes this node's cookie, so
%%                   every target (a whole cluster shares one) is reached with it
%%   request in:     "Id snap Node TimeoutMs" | "Id nodes Node TimeoutMs"
%%   reply out:      "BEAMALLOC-RESULT Id " ++ base64(term_to_binary(Reply))
%%                   snap:  {ok, [{Key, Value}]} as beamalloc_agent's, or {error, Kind, Detail}
%%                   nodes: {ok, [Node]} (the target's nodes(), the target first) or an error
%%   end of stdin:   the node halts, so it never outlives the Python process that started it,
%%                   even one killed with SIGKILL.
%% Each request runs in its own process with its own deadline: one stalled target never delays
%% the requests for the others.
-module(beamalloc_session).
-export([main/0, log/2]).

-define(MARK, "BEAMALLOC-RESULT ").

main() ->
    _ = logger:remove_handler(default),  % standard_io carries our replies only
    ok = logger:set_primary_config(level, info),
    _ = net_kernel:verbose(1),
    Failures = ets:new(setup_failures, [public, ordered_set]),
    ok = logger:add_handler(beamalloc_session, ?MODULE, #{config => Failures}),
    case read_cookie() of
        {ok, Cookie} ->
            true = erlang:set_cookie(Cookie),
            loop(Failures);
        error ->
            erlang:halt(2)
    end.

%% logger callback: remember net_kernel's reports of failed connection setups (they come through
%% error_logger:info_report/1), to tell a rejected cookie from other failed connects.
log(#{msg := {report, #{report := {net_kernel, {'EXIT', _, Reason}}}}}, #{config := Tab}) ->
    ets:insert(Tab, {erlang:monotonic_time(), Reason}),
    ok;
log(#{msg := {report, {net_kernel, {'EXIT', _, Reason}}}}, #{config := Tab}) ->
    ets:insert(Tab, {erlang:monotonic_time(), Reason}),
    ok;
log(_, _) ->
    ok.

read_cookie() ->
    case io:get_line(standard_io, "") of
        Line when is_list(Line); is_binary(Line) ->
            try binary:decode_hex(string:trim(unicode:characters_to_binary(Line))) of
                <<>> -> error;
                Bin -> {ok, binary_to_atom(Bin, utf8)}
            catch _:_ -> error
            end;
        _ -> error
    end.

loop(Failures) ->
    case io:get_line(standard_io, "") of
        Line when is_list(Line); is_binary(Line) ->
            case string:lexemes(unicode:characters_to_list(Line), " \n") of
                [Id, Kind, Node, TimeoutMs] ->
                    spawn(fun() -> request(Id, Kind, list_to_atom(Node),
                                           list_to_integer(TimeoutMs), Failures) end);
                _ -> ok
            end,
            loop(Failures);
        _ ->  % eof: whoever started us is gone
            erlang:halt(0)
    end.

request(Id, Kind, Target, TimeoutMs, Failures) ->
    Me = self(),
    {Pid, Ref} = spawn_monitor(fun() -> Me ! {self(), work(Me, Kind, Target, Failures)} end),
    Reply = wait(Pid, Ref, TimeoutMs, connecting),
    io:put_chars(standard_io, [?MARK, Id, $\s, base64:encode(term_to_binary(Reply)), $\n]).

wait(Pid, Ref, TimeoutMs, Stage) ->
    receive
        {Pid, Reply} ->
            erlang:demonitor(Ref, [flush]),
            Reply;
        {stage, NewStage} ->
            wait(Pid, Ref, TimeoutMs, NewStage);
        {'DOWN', Ref, process, Pid, Why} ->
            {error, agent_crash, iolist_to_binary(io_lib:format("~0P", [Why, 12]))}
    after TimeoutMs ->
        exit(Pid, kill),
        {error, timeout, Stage}
    end.

work(Parent, Kind, Target, Failures) ->
    Since = erlang:monotonic_time(),
    case net_kernel:connect_node(Target) of
        true ->
            Parent ! {stage, collecting},
            erlang:monitor_node(Target, true),
            try
                case Kind of
                    "snap" -> beamalloc_agent:collect(Target);
                    "nodes" -> {ok, [Target | erpc:call(Target, erlang, nodes, [])]}
                end
            catch
                error:{erpc, noconnection} -> {error, nodedown, <<>>};
                throw:nodedown -> {error, nodedown, <<>>};
                Class:Reason -> {error, call_failed,
                                 iolist_to_binary(io_lib:format("~0p:~0P", [Class, Reason, 12]))}
            end;
        _ ->
            why_not(Target, Since, Failures)
    end.

%% The same classification as beamalloc_agent:why_not/1: ask epmd on the target's host, then
%% look for a handshake that failed at the challenge ack (the cookie digest check).
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
