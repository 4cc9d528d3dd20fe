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
%%   request in:     "Id snap Node TimeoutMs [CarrierCap]" | "Id nodes Node TimeoutMs"
%%                   (CarrierCap > 0: also read per-carrier data, see beamalloc_agent:carriers/3)
%%   reply out:      "BEAMALLOC-RESULT Id " ++ base64(term_to_binary(Reply, [{compressed, 1}]))
%%                   snap:  {ok, [{Key, Value}]} as beamalloc_agent's, or {error, Kind, Detail}
%%                   nodes: {ok, [Node]} (the target's nodes(), the target first) or an error
%%   end of stdin:   the node halts, so it never outlives the Python process that started it,
%%                   even one killed with SIGKILL.
%%   start failure:  "BEAMALLOC-RESULT 0 " ++ base64(term_to_binary({error, Kind, Detail})) and
%%                   the node halts (no cookie, or distribution could not start).
%% Each request runs in its own process with its own deadline: one stalled target never delays
%% the requests for the others.
-module(beamalloc_session).
-export([main/0]).

-define(MARK, "BEAMALLOC-RESULT ").

main() ->
    Failures = beamalloc_link:setup(),
    case beamalloc_link:start(false) of
        {ok, Cookie} ->
            true = erlang:set_cookie(Cookie),
            loop(Failures);
        Error ->
            io:put_chars(standard_io, [?MARK, "0 ", base64:encode(term_to_binary(Error)), $\n]),
            beamalloc_link:quit(2)
    end.

loop(Failures) ->
    case io:get_line(standard_io, "") of
        Line when is_list(Line); is_binary(Line) ->
            case string:lexemes(unicode:characters_to_list(Line), " \n") of
                [Id, Kind, Node, TimeoutMs | Cap] when length(Cap) =< 1 ->
                    spawn(fun() -> request(Id, Kind, list_to_atom(Node),
                                           list_to_integer(TimeoutMs),
                                           list_to_integer(hd(Cap ++ ["0"])), Failures) end);
                _ -> ok
            end,
            loop(Failures);
        _ ->  % eof: whoever started us is gone
            beamalloc_link:quit(0)
    end.

request(Id, Kind, Target, TimeoutMs, Cap, Failures) ->
    Me = self(),
    Deadline = erlang:monotonic_time(millisecond) + TimeoutMs,
    Call = case Kind of
               "snap" -> fun() -> beamalloc_agent:collect(Target, Cap) end;
               "nodes" -> fun() -> {ok, [Target | erpc:call(Target, erlang, nodes, [])]} end;
               _ -> fun() -> {error, call_failed, <<"unknown request">>} end
           end,
    {Pid, Ref} = spawn_monitor(fun() ->
                                   Me ! {self(), beamalloc_link:run(Me, Target, Failures, Call)}
                               end),
    Reply = beamalloc_link:wait(Pid, Ref, Deadline, connecting),
    %% compressed, as the agent's (beamalloc_link:reply_and_quit/1 says why): base64 of a
    %% +S 64 node's 700 kB took most of a watch's sample
    Bin = term_to_binary(Reply, [{compressed, 1}]),
    io:put_chars(standard_io, [?MARK, Id, $\s, base64:encode(Bin), $\n]).
