%% beamalloc_agent: runs on the hidden node that beamalloc starts, never on the target.
%%
%% Started as `erl -hidden ... -run beamalloc_agent main Target DeadlineMs [CarrierCap]`, without
%% distribution: beamalloc_link:start/1 reads the cookie from stdin (hex, one line), so it never
%% appears in any argv, starts distribution under a pooled name and halts the node when stdin
%% ends (the Python process that holds it is gone). The cookie is set for the target only; the
%% agent connects and calls BIFs there through erpc. Nothing is loaded on the target:
%% erpc spawns a process there that runs erpc:execute_call/4 (kernel's erpc is loaded at boot)
%% and the calls are BIFs or os:getpid/0 (also loaded at boot). The one exception is per-carrier
%% data (CarrierCap > 0): OTP's own instrument module (tools application; runtime_tools from OTP
%% 27) is called there and loads from the target's own code path on first use, as any
%% `instrument:carriers()` typed in a shell would (docs/snapshot-schema.md, "carriers").
%% Connecting and telling why a connection failed are beamalloc_link's, shared with
%% beamalloc_session.
%%
%% Prints exactly one line, "BEAMALLOC-RESULT " ++ base64(term_to_binary(Reply, [compressed])),
%% then halts:
%%   {ok, [{Key, Value}]}                  the collected terms, see collect/1
%%   {error, Kind, Detail}                 Kind :: no_cookie | bad_cookie | no_such_node
%%                                           | host_unreachable | connect_failed | nodedown
%%                                           | call_failed | timeout | agent_crash
%%                                           | names_in_use | no_distribution
%% The Python side (collector/live.py) turns an error into its one-line message. Details are node
%% names, epmd answers and exit reasons; a crash reason can quote arguments, so live.py scrubs
%% the cookie from free-form details.
-module(beamalloc_agent).
-export([main/1, collect/2]).

%% instrument:carriers/1 histograms: free blocks from 256 B (the scan doubles the start it is
%% given, erl_alloc_util.c gather_cinfo) in 18 doubling buckets, the last one open from ~32 MiB.
-define(HIST_START, 128).
-define(HIST_WIDTH, 18).
%% instrument:allocations/1 walks every block again: it is skipped (and said so) when the tagged
%% allocators hold more blocks than this (a 2 GiB binary_alloc of 1 KB binaries has 2 M; the walk
%% costs the target about 70 ms per million blocks on this machine, tests/bench/bench_carriers.py).
-define(MAX_TAGGED_BLOCKS, 500000).
%% Ports named in a snapshot at most (collector/instrument.py MAX_PORT_NAMES).
-define(MAX_PORT_NAMES, 10).

main([TargetS, DeadlineS]) ->
    main([TargetS, DeadlineS, "0"]);
main([TargetS, DeadlineS, CapS]) ->
    put(main_us, os:system_time(microsecond)),  % for the bench: when boot ended
    Deadline = list_to_integer(DeadlineS),  % Unix time in ms (the caller's clock)
    Target = list_to_atom(TargetS),
    Cap = list_to_integer(CapS),
    Reply = try run(Target, Deadline, Cap)
            catch C:R -> {error, agent_crash, iolist_to_binary(io_lib:format("~0p:~0P", [C, R, 12]))}
            end,
    beamalloc_link:reply_and_quit(Reply).

run(Target, Deadline, Cap) ->
    MainUs = get(main_us),
    beamalloc_link:one_shot(Target, Deadline,
                            fun() -> put(main_us, MainUs), collect(Target, Cap) end).

%% One erpc request per BIF, all in flight at once: each system_info({allocator, A}) gathers
%% every scheduler's instance on the target, so the wall time is about the slowest call rather
%% than the sum. The allocator list is only known after alloc_util_allocators answers.
%% The one thing these calls change on the target is the "max since last call" element of each
%% statistic, which every system_info({allocator, _}) resets (docs/erts/alloc_util.md §6.1), as any
%% poller such as recon_alloc does.
%% With Cap > 0 the carriers are read afterwards, see carriers/3.
collect(Target, Cap) ->
    Simple = [{memory, erlang, memory, []},
              {otp_release, erlang, system_info, [otp_release]},
              {version, erlang, system_info, [version]},
              {wordsize, erlang, system_info, [wordsize]},
              {schedulers, erlang, system_info, [schedulers]},
              {process_limit, erlang, system_info, [process_limit]},
              {port_limit, erlang, system_info, [port_limit]},
              {process_count, erlang, system_info, [process_count]},
              {port_count, erlang, system_info, [port_count]},
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
    Otp = proplists:get_value(otp_release, Scalars),
    Carriers = carriers(Target, [{A, V} || {A, V} <- Allocs, lists:member(A, Utils)], Cap,
                        Otp),
    {ok, [{node, Target}, {alloc_util_allocators, Utils} | Scalars]
         ++ [{allocators, Allocs} | Carriers]
         ++ [
             {sampled_at_us, (Started + Done) div 2},
             %% where the time went, in Unix microseconds (tests/bench/bench_snapshot_s64.py)
             {timings, [{main, get(main_us)}, {connected, get(connected_us)},
                        {calls_sent, Started}, {replies_in, Done}]},
             {collect_us, Done - Started}]}.

%% Per-carrier data through OTP's instrument:carriers/1, one request per allocator instance
%% (scheduler id N scans instance N; 0 is the instance of non-scheduler threads and of the
%% allocators that have one instance), all in flight at once. Each scan runs as aux work on the
%% scheduler owning the instance and yields between carriers.
%%
%% The cap bounds what the target builds and sends: the carrier counts system_info just gave
%% decide which instances are read, whole instances, largest carrier bytes first, until Cap
%% carriers are taken; the rest is reported as skipped with its count. Allocation tags
%% (instrument:allocations/1) are read for the allocators that have them on (atags), the same way.
%% From OTP 27 the tags are asked per port (flags [per_port], OTP-18577): a driver's blocks
%% are then its port's, and the heaviest ports are named by erlang:port_info(Port, name)
%% (collector/instrument.py port_origins picks the same ones).
carriers(_Target, _Allocs, Cap, _Otp) when Cap =< 0 ->
    [];
carriers(Target, Allocs, Cap, Otp) ->
    Insts = lists:sort(fun({_, _, N1, S1}, {_, _, N2, S2}) -> {S1, N1} >= {S2, N2} end,
                       [{A, I, N, S} || {A, Info} <- Allocs, is_list(Info),
                                        {instance, I, Props} <- Info,
                                        {N, S} <- [carrier_count(Props)], N > 0]),
    {Take, Skip} = take(Insts, Cap, [], []),
    ByInst = lists:foldl(fun({A, I, _, _}, M) -> maps:update_with(I, fun(L) -> [A | L] end,
                                                                   [A], M) end,
                         #{}, Take),
    Started = os:system_time(microsecond),
    Reqs = [{I, erpc:send_request(Target, instrument, carriers,
                                  [#{scheduler_ids => [I], allocator_types => lists:reverse(As),
                                     histogram_start => ?HIST_START,
                                     histogram_width => ?HIST_WIDTH}])}
            || {I, As} <- lists:sort(maps:to_list(ByInst))],
    Tagged = [A || {A, Info} <- Allocs, is_list(Info), atags_on(Info)],
    TaggedBlocks = lists:sum([block_count(Props) || {A, Info} <- Allocs, lists:member(A, Tagged),
                                                    {instance, _, Props} <- Info]),
    AReq = case Tagged of
               [] -> none;
               _ when TaggedBlocks > ?MAX_TAGGED_BLOCKS -> {skipped, TaggedBlocks};
               _ -> erpc:send_request(Target, instrument, allocations,
                                      [maps:merge(#{allocator_types => Tagged,
                                                    histogram_start => ?HIST_START,
                                                    histogram_width => ?HIST_WIDTH},
                                                  per_port(Otp))])
           end,
    Got = [{I, instrument_response(R)} || {I, R} <- Reqs],
    Tags = case AReq of
               none -> none;
               {skipped, _} -> AReq;
               _ -> instrument_response(AReq)
           end,
    [{carriers, Got},
     {carriers_skipped, [{A, I, N} || {A, I, N, _} <- Skip]},
     {carriers_cap, Cap},
     {carrier_hist, {?HIST_START, ?HIST_WIDTH}},
     {allocation_tags, Tags},
     {port_names, port_names(Target, Tags)},
     {carriers_us, os:system_time(microsecond) - Started}].

per_port(Otp) ->
    case catch list_to_integer(Otp) of
        N when is_integer(N), N >= 27 -> #{flags => [per_port]};
        _ -> #{}
    end.

%% The MAX_PORT_NAMES ports with the most tagged blocks (weighted by their bucket), named.
port_names(Target, {ok, {_, _, Hists}}) when is_map(Hists) ->
    Weight = fun(Types) -> lists:sum([W || H <- maps:values(Types), is_tuple(H),
                                           {I, C} <- lists:zip(lists:seq(0, tuple_size(H) - 1),
                                                               tuple_to_list(H)),
                                           W <- [C bsl I]]) end,
    Ports = [P || {_, P} <- lists:sublist(lists:sort([{-Weight(T), P} || {P, T} <- maps:to_list(Hists),
                                                                        is_port(P), is_map(T)]),
                                          ?MAX_PORT_NAMES)],
    case Ports of
        [] -> [];
        _ -> try erpc:call(Target, lists, zipwith,
                           [fun erlang:port_info/2, Ports, [name || _ <- Ports]]) of
                 Names when length(Names) =:= length(Ports) -> lists:zip(Ports, Names);
                 _ -> []
             catch _:_ -> []  % the names are a courtesy: the tags stand without them
             end
    end;
port_names(_Target, _) ->
    [].

take([], _Left, Take, Skip) -> {Take, lists:reverse(Skip)};
take([{_, _, N, _} = X | Rest], Left, Take, Skip) when N =< Left ->
    take(Rest, Left - N, [X | Take], Skip);
take([X | Rest], Left, Take, Skip) -> take(Rest, Left, Take, [X | Skip]).

%% Carriers and their bytes of one instance: mbcs + sbcs + the pooled carriers it owns (the scan
%% lists a pooled carrier under the instance that created it, erl_alloc_util.c blockscan).
carrier_count(Props) ->
    {C1, S1} = section(mbcs, Props),
    {C2, S2} = section(sbcs, Props),
    {C3, S3} = section(mbcs_pool, Props),
    {C1 + C2 + C3, S1 + S2 + S3}.

block_count(Props) ->
    lists:sum([stat(count, L) || Key <- [mbcs, sbcs, mbcs_pool],
                                 {K, Sec} <- Props, K =:= Key, is_list(Sec),
                                 {blocks, Types} <- Sec, is_list(Types),
                                 {_Type, L} <- Types, is_list(L)]).

section(Key, Props) ->
    case lists:keyfind(Key, 1, Props) of
        {Key, L} when is_list(L) -> {stat(carriers, L), stat(carriers_size, L)};
        _ -> {0, 0}
    end.

%% A value of 2^63 or more is a signed counter of the VM gone negative, printed unsigned
%% (binary_alloc's mbcs_pool carriers: 18446744073709551513 is -103): never summed, as
%% collector/live.py and beamalloc/snapshot.py (`wrapped`) read it.
stat(Key, L) ->
    case lists:keyfind(Key, 1, L) of
        {Key, V} when is_integer(V), V >= 0, V < 1 bsl 63 -> V;
        {Key, V, _, _} when is_integer(V), V >= 0, V < 1 bsl 63 -> V;
        _ -> 0
    end.

atags_on(Info) ->
    lists:any(fun({instance, _, Props}) ->
                      case lists:keyfind(options, 1, Props) of
                          {options, Os} -> lists:member({atags, true}, Os);
                          _ -> false
                      end;
                 (_) -> false
              end, Info).

%% {ok, Result} | {error, Reason} | {exception, Class, Reason}: a target without the instrument
%% module (no tools application in its code path) answers undef, which is not a failed snapshot.
instrument_response(Req) ->
    try response(Req)
    catch error:{exception, Reason, _Stack} -> {exception, error, Reason};
          exit:{exception, Reason} -> {exception, exit, Reason};
          throw:Value -> {exception, throw, Value}
    end.

response(Req) ->
    receive {nodedown, _} -> throw(nodedown)
    after 0 -> erpc:receive_response(Req, infinity)
    end.
