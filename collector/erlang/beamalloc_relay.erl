%% beamalloc_relay: our hidden node where our own client (collector/dist.py) cannot go (TLS and
%% other -proto_dist): it only RELAYS calls. Every request is a call the Python side would make
%% over its own connection; the scans, the snapshot and their reply checks are Python's, one copy
%% for both transports (collector/collect.py, processes.py, ets.py).
%%
%% Protocol (lines on stdin/stdout):
%%   first line in:  the cookie, hex-encoded (never in argv); it becomes this node's cookie, so
%%                   every target (a whole cluster shares one) is reached with it
%%   request in:     base64(term_to_binary(Req)), one line:
%%                     {connect, Id, Target, TimeoutMs}: connect, and answer {ok, Pid} (a pid of
%%                       the target: its node name and creation, for the pids we send back) or
%%                       {error, Kind, Detail} (beamalloc_link:run/4 says why a connection failed)
%%                     {call, Id, Target, M, F, A, TimeoutMs}: erpc:call/5 there, answered
%%                       {ok, Result} with Result as rex would give it ({badrpc, {'EXIT', X}} for
%%                       an exception, so one reading serves both transports), or {error, Kind,
%%                       Detail} for a node gone or a call timed out
%%   reply out:      "BEAMALLOC-RESULT Id " ++ base64(term_to_binary(Reply, [compressed]))
%%   ready / start failure: the reply to Id 0, {ok, OurNode} or {error, Kind, Detail} (no cookie,
%%                   distribution could not start); after a failure the node halts
%%   end of stdin:   the node halts, so it never outlives the Python process that started it,
%%                   even one killed with SIGKILL.
%% Each request runs in its own process: one stalled target never delays the others. Nothing is
%% loaded on a target: erpc runs the requested function in a process of its own there, as rex
%% does for our own client.
-module(beamalloc_relay).
-export([main/0]).

-define(MARK, "BEAMALLOC-RESULT ").

main() ->
    Failures = beamalloc_link:setup(),
    case beamalloc_link:start() of
        {ok, Cookie} ->
            true = erlang:set_cookie(Cookie),
            reply(0, {ok, node()}),
            loop(Failures);
        Error ->
            reply(0, Error),
            beamalloc_link:quit(2)
    end.

loop(Failures) ->
    case io:get_line(standard_io, "") of
        Line when is_list(Line); is_binary(Line) ->
            %% our own Python process writes these lines: a line it did not write is dropped
            _ = try binary_to_term(base64:decode(string:trim(Line))) of
                    Req -> spawn(fun() -> serve(Req, Failures) end)
                catch _:_ -> ok
                end,
            loop(Failures);
        _ ->  % eof: whoever started us is gone
            beamalloc_link:quit(0)
    end.

serve({connect, Id, Target, TimeoutMs}, Failures) when is_atom(Target) ->
    Me = self(),
    Deadline = erlang:monotonic_time(millisecond) + TimeoutMs,
    Fun = fun() -> {ok, erpc:call(Target, erlang, whereis, [init], max(1, TimeoutMs))} end,
    {Pid, Ref} = spawn_monitor(fun() ->
                                   Me ! {self(), beamalloc_link:run(Me, Target, Failures, Fun)}
                               end),
    reply(Id, beamalloc_link:wait(Pid, Ref, Deadline, connecting));
serve({call, Id, Target, M, F, A, TimeoutMs}, _Failures) ->
    reply(Id, call(Target, M, F, A, TimeoutMs));
serve(_, _) ->
    ok.

%% rex's answer shapes (rpc:call/4): a thrown value is the result, an exit or an error is
%% {badrpc, {'EXIT', Reason}} (an error's Reason with its stack).
call(Target, M, F, A, TimeoutMs) ->
    try erpc:call(Target, M, F, A, max(1, TimeoutMs)) of
        V -> {ok, V}
    catch
        error:{exception, R, S} -> {ok, {badrpc, {'EXIT', {R, S}}}};
        exit:{exception, R} -> {ok, {badrpc, {'EXIT', R}}};
        throw:V -> {ok, V};
        error:{erpc, timeout} -> {error, timeout, collecting};
        error:{erpc, noconnection} -> {error, nodedown, <<>>};
        C:R -> {error, call_failed, iolist_to_binary(io_lib:format("~0p:~0P", [C, R, 12]))}
    end.

%% Compressed (zlib level 1): allocator statistics are mostly repeated atoms and small numbers, a
%% +S 64 node's 700 kB shrink to 14 kB in 2 ms, sparing base64 (plain Erlang in OTP 25) 40 ms.
%% minor_version 2: atoms as UTF-8 (OTP 25's default writes latin-1 ATOM_EXT), as distribution
%% writes them, so a pid or a port in a reply has the bytes our client's replies have.
reply(Id, Reply) ->
    Bin = term_to_binary(Reply, [{compressed, 1}, {minor_version, 2}]),
    io:put_chars(standard_io, [?MARK, integer_to_list(Id), $\s, base64:encode(Bin), $\n]).
