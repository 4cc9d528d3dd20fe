%% beamalloc_agent: runs on the hidden node that beamalloc starts, never on the target.
%%
%% Started as `erl -hidden -sname beamalloc_<random> ... -run beamalloc_agent main Target DeadlineMs`.
%% Reads the cookie from stdin (hex, one line), so it never appears in any argv, sets it for the
%% target only, connects, and calls BIFs there through erpc. Nothing is loaded on the target:
%% erpc spawns a process there that runs erpc:execute_call/4 (kernel's erpc is loaded at boot)
%% and the calls are BIFs or os:getpid/0 (also loaded at boot).
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
-export([main/1, log/2, collect/1]).

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
    quiet_logger(),
    case read_cookie() of
        {ok, Cookie} ->
            Main = self(),
            MainUs = get(main_us),
            {Pid, Ref} = spawn_monitor(fun() ->
                                           put(main_us, MainUs),
                                           Main ! {self(), work(Main, Target, Cookie)}
                                       end),
            wait(Pid, Ref, Target, Deadline, connecting);
        Error ->
            Error
    end.

%% The default handler prints to standard_io, which carries our one result line: remove it, and
%% keep only the handshake failures that net_kernel's verbose mode reports, to tell a rejected
%% cookie from other failed connects.
quiet_logger() ->
    _ = logger:remove_handler(default),
    ok = logger:set_primary_config(level, info),
    _ = net_kernel:verbose(1),
    ok.

%% logger handler callback: forward net_kernel's reports of failed connection setups. They come
%% through error_logger:info_report/1, so the report sits under the `report` key.
log(#{msg := {report, #{report := {net_kernel, {'EXIT', _, Reason}}}}}, #{config := Main}) ->
    Main ! {setup_failed, Reason},
    ok;
log(#{msg := {report, {net_kernel, {'EXIT', _, Reason}}}}, #{config := Main}) ->
    Main ! {setup_failed, Reason},
    ok;
log(_, _) ->
    ok.

read_cookie() ->
    case io:get_line(standard_io, "") of
        Line when is_list(Line); is_binary(Line) ->
            Hex = string:trim(unicode:characters_to_binary(Line)),
            try binary:decode_hex(Hex) of
                <<>> -> {error, no_cookie, <<>>};
                Bin -> {ok, binary_to_atom(Bin, utf8)}
            catch _:_ -> {error, no_cookie, <<"cookie not hex-encoded">>}
            end;
        _ -> {error, no_cookie, <<>>}
    end.

wait(Pid, Ref, Target, Deadline, Stage) ->
    Left = max(0, Deadline - os:system_time(millisecond)),
    receive
        {Pid, Reply} ->
            erlang:demonitor(Ref, [flush]),
            Reply;
        {stage, NewStage} ->
            wait(Pid, Ref, Target, Deadline, NewStage);
        {'DOWN', Ref, process, Pid, Why} ->
            {error, agent_crash, iolist_to_binary(io_lib:format("~0P", [Why, 12]))}
    after Left ->
        exit(Pid, kill),
        {error, timeout, Stage}
    end.

work(Main, Target, Cookie) ->
    ok = logger:add_handler(beamalloc_agent, ?MODULE, #{config => self()}),
    true = erlang:set_cookie(Target, Cookie),
    case net_kernel:connect_node(Target) of
        true ->
            put(connected_us, os:system_time(microsecond)),
            Main ! {stage, collecting},
            erlang:monitor_node(Target, true),
            try collect(Target)
            catch
                error:{erpc, noconnection} -> {error, nodedown, <<>>};
                throw:nodedown -> {error, nodedown, <<>>};
                Class:Reason -> {error, call_failed,
                                 iolist_to_binary(io_lib:format("~0p:~0P", [Class, Reason, 12]))}
            end;
        _ ->
            why_not(Target)
    end.

%% Why did connect_node/1 fail? Ask epmd on the target's host (what net_adm:names/1 reads), then
%% look at the handshake: a node that is registered and closes the connection right after our
%% challenge reply has rejected the cookie (the digest check of the distribution handshake).
why_not(Target) ->
    [Name, Host] = string:split(atom_to_list(Target), "@"),
    case erl_epmd:names(Host) of
        {ok, Names} ->
            case lists:keymember(Name, 1, Names) of
                false ->
                    {error, no_such_node, [list_to_binary(N) || {N, _} <- Names]};
                true ->
                    Reasons = setup_failures([]),
                    case lists:any(fun is_auth_failure/1, Reasons) of
                        true -> {error, bad_cookie, <<>>};
                        false -> {error, connect_failed,
                                  iolist_to_binary(io_lib:format("~0P", [Reasons, 12]))}
                    end
            end;
        {error, Why} ->
            {error, host_unreachable, iolist_to_binary(io_lib:format("~0p", [Why]))}
    end.

setup_failures(Acc) ->
    receive {setup_failed, R} -> setup_failures([R | Acc])
    after 0 -> lists:reverse(Acc)
    end.

is_auth_failure({recv_challenge_ack_failed, _}) -> true;
is_auth_failure(_) -> false.

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
