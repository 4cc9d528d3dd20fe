%% beamalloc_agent: runs on the hidden node that beamalloc starts, never on the target.
%%
%% Started as `erl -hidden -sname beamalloc_<random> ... -run beamalloc_agent main Target DeadlineMs`.
%% Reads the cookie from stdin (hex, one line), so it never appears in any argv, sets it for the
%% target only, connects, and calls BIFs there through erpc. Nothing is loaded on the target:
%% erpc spawns a process there that runs erpc:execute_call/4 (kernel's erpc is loaded at boot)
%% and the calls are BIFs or os:getpid/0 (also loaded at boot). Connecting and telling why a
%% connection failed are beamalloc_link's, shared with beamalloc_session.
%%
%% Prints exactly one line, "BEAMALLOC-RESULT " ++ base64(term_to_binary(Reply, [compressed])),
%% then halts:
%%   {ok, [{Key, Value}]}                  the collected terms, see collect/1
%%   {error, Kind, Detail}                 Kind :: no_cookie | bad_cookie | no_such_node
%%                                           | host_unreachable | connect_failed | nodedown
%%                                           | call_failed | timeout | agent_crash
%% The Python side (collector/live.py) turns an error into its one-line message. Details are node
%% names, epmd answers and exit reasons; a crash reason can quote arguments, so live.py scrubs
%% the cookie from free-form details.
-module(beamalloc_agent).
-export([main/1, collect/1]).

-define(MARK, "BEAMALLOC-RESULT ").

main([TargetS, DeadlineS]) ->
    put(main_us, os:system_time(microsecond)),  % for the bench: when boot ended
    Deadline = list_to_integer(DeadlineS),  % Unix time in ms (the caller's clock)
    Target = list_to_atom(TargetS),
    Reply = try run(Target, Deadline)
            catch C:R -> {error, agent_crash, iolist_to_binary(io_lib:format("~0p:~0P", [C, R, 12]))}
            end,
    %% Allocator statistics are mostly repeated atoms and small numbers: zlib level 1 shrinks a
    %% +S 64 node's 700 kB to 14 kB in 2 ms, sparing base64 (plain Erlang in OTP 25) 40 ms.
    Bin = term_to_binary(Reply, [{compressed, 1}]),
    io:put_chars(standard_io, [?MARK, base64:encode(Bin), $\n]),
    erlang:halt(0).

run(Target, Deadline) ->
    Failures = beamalloc_link:setup(),
    case beamalloc_link:read_cookie() of
        {ok, Cookie} ->
            true = erlang:set_cookie(Target, Cookie),  % for this target only
            Main = self(),
            MainUs = get(main_us),
            Collect = fun() -> put(main_us, MainUs), collect(Target) end,
            {Pid, Ref} = spawn_monitor(fun() ->
                                           Main ! {self(), beamalloc_link:run(Main, Target,
                                                                              Failures, Collect)}
                                       end),
            Left = Deadline - os:system_time(millisecond),
            beamalloc_link:wait(Pid, Ref, erlang:monotonic_time(millisecond) + Left, connecting);
        Error ->
            Error
    end.

%% One erpc request per BIF, all in flight at once: each system_info({allocator, A}) gathers
%% every scheduler's instance on the target, so the wall time is about the slowest call rather
%% than the sum. The allocator list is only known after alloc_util_allocators answers.
%% The one thing these calls change on the target is the "max since last call" element of each
%% statistic, which every system_info({allocator, _}) resets (alloc_util.md §6.1), as any
%% poller such as recon_alloc does.
collect(Target) ->
    Simple = [{memory, erlang, memory, []},
              {otp_release, erlang, system_info, [otp_release]},
              {version, erlang, system_info, [version]},
              {wordsize, erlang, system_info, [wordsize]},
              {schedulers, erlang, system_info, [schedulers]},
              {os_pid, os, getpid, []}],
    UtilReq = erpc:send_request(Target, erlang, system_info, [alloc_util_allocators]),
    Started = os:system_time(microsecond),
    Fixed = [sys_alloc, mseg_alloc, erts_mmap, alloc_util],
    Reqs1 = [{K, erpc:send_request(Target, M, F, A)} || {K, M, F, A} <- Simple]
        ++ [{{allocator, A}, erpc:send_request(Target, erlang, system_info, [{allocator, A}])}
            || A <- Fixed],
    Utils = response(UtilReq),
    Reqs2 = [{{allocator, A}, erpc:send_request(Target, erlang, system_info, [{allocator, A}])}
             || A <- Utils],
    Results = [{K, response(R)} || {K, R} <- Reqs1 ++ Reqs2],
    Done = os:system_time(microsecond),
    Scalars = [{K, V} || {K, V} <- Results, is_atom(K)],
    Allocs = [{A, V} || {{allocator, A}, V} <- Results],
    {ok, [{node, Target}, {alloc_util_allocators, Utils} | Scalars]
         ++ [{allocators, Allocs},
             {sampled_at_us, (Started + Done) div 2},
             %% where the time went, in Unix microseconds (tests/bench/bench_snapshot_s64.py)
             {timings, [{main, get(main_us)}, {connected, get(connected_us)},
                        {calls_sent, Started}, {replies_in, Done}]},
             {collect_us, Done - Started}]}.

response(Req) ->
    receive {nodedown, _} -> throw(nodedown)
    after 0 -> erpc:receive_response(Req, infinity)
    end.
