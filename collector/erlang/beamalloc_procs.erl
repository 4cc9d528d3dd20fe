%% beamalloc_procs: who holds the memory, read from a target's processes (docs/processes.md).
%%
%% Runs on OUR hidden node, never on the target, like beamalloc_agent. Started as
%%   erl -hidden ... -run beamalloc_procs main Target DeadlineMs scan MaxProcs BudgetMs Top
%%   erl -hidden ... -run beamalloc_procs main Target DeadlineMs probe Pid1 Pid2 ...
%% with the cookie on stdin, distribution started and the node's life tied to its stdin by
%% beamalloc_link:start/1, as the agent's. Prints one line
%% "BEAMALLOC-RESULT " ++ base64(term_to_binary(Reply)) and halts; Reply is {ok, [{Key, Value}]}
%% or {error, Kind, Detail} as the agent's (collector/live.py turns errors into one line).
%%
%% scan: read-only. On the target only BIFs run, inside the processes erpc spawns there:
%% erlang:processes/0, erlang:system_info/1, erlang:memory/1, erlang:whereis/1 (through lists:map)
%% and erlang:process_info/2 with a fixed item list (through lists:zipwith, an external fun: no
%% code of ours is loaded there, `lists` is loaded at boot). No message is sent to any process of
%% the target, none is suspended or collected (process_info/2 of another process is a signal that
%% process handles itself: a few reductions, docs/processes.md "What is never done to the
%% target"). On OTP 25, where process_info has no
%% {dictionary, Key} item, the '$initial_call' proc_lib keeps is resolved with
%% proc_lib:translate_initial_call/1 for the reported processes only (see resolve/3).
%%
%% probe: the one action that changes the target (`--gc-probe N`): erlang:garbage_collect/1 of
%% each given process, one at a time, each measured before and after.
-module(beamalloc_procs).
-export([main/1, scan/4, probe/2]).
%% The erpc helpers, shared with beamalloc_ets (compiled into the same ebin).
-export([call/4, response/1]).

%% Pids per erpc request, and requests in flight at once: a chunk is one process_info call per
%% pid on one target scheduler. Of 2,000-20,000 pids with 1-4 in flight, 10,000 with 2 read
%% 300,000 processes fastest on this 2-core machine (1.0-1.8 s against 1.4-2.2 s for 4,000 with
%% 3, at load 9-12; tests/bench/bench_processes.py measures the whole scan).
-define(CHUNK, 10000).
-define(IN_FLIGHT, 2).
%% The first pass, every process read: what the totals, the groups and the ranking need.
%% reductions: with message_queue_len, each process's activity (ProcessTable.activity), which two
%% reads compare to tell idle processes (analyzer/holders.py).
-define(PASS1, [memory, total_heap_size, message_queue_len, initial_call, status, binary,
                reductions]).
%% The second pass, the reported processes only: the issue's fixed item list.
-define(ITEMS, [memory, heap_size, total_heap_size, binary, message_queue_len, registered_name,
                initial_call, current_function, status, reductions, garbage_collection,
                garbage_collection_info]).

-record(r, {pid, memory, total_heap, mq, initial_call, idle, bin_bytes, bin_count, bin_refs,
            bin_exclusive, reds}).

main([TargetS, DeadlineS | Args]) ->
    Deadline = list_to_integer(DeadlineS),
    Target = list_to_atom(TargetS),
    Reply = try run(Target, Deadline, Args)
            catch C:R -> {error, agent_crash, iolist_to_binary(io_lib:format("~0p:~0P", [C, R, 12]))}
            end,
    beamalloc_link:reply_and_quit(Reply).

run(Target, Deadline, Args) ->
    Work = case Args of
               ["scan", MaxS, BudgetS, TopS] ->
                   fun() -> scan(Target, list_to_integer(MaxS), list_to_integer(BudgetS),
                                 list_to_integer(TopS)) end;
               ["probe" | Pids] ->
                   fun() -> probe(Target, Pids) end
           end,
    beamalloc_link:one_shot(Target, Deadline, Work).

%% ---- the scan ----------------------------------------------------------------------------

%% Two passes. The first reads every process (or the sample, below) with the few items the
%% totals, the groups and the ranking need (?PASS1); the second reads the fixed item list
%% (?ITEMS) of the processes worth reporting only: the Top largest by each measure. At 300,000
%% processes the full list for all would cost the target several seconds of process_info and
%% us the decoding of 200 MB (tests/bench/bench_processes.py).
%%
%% At most MaxProcs processes are read, and no new chunk is asked for once BudgetMs have passed
%% since the first (the first is always asked for). Registered processes come first (the usual
%% suspects, few); the others follow as a systematic sample spread over the whole process table
%% (pids are in creation order, so every chunk holds old and young processes alike), so that
%% whatever the budget cuts off leaves a fair sample.
scan(Target, MaxProcs, BudgetMs, Top) ->
    StartUs = os:system_time(microsecond),
    OtpReq = erpc:send_request(Target, erlang, system_info, [otp_release]),
    WsReq = erpc:send_request(Target, erlang, system_info, [wordsize]),
    NamesReq = erpc:send_request(Target, erlang, registered, []),
    Pids = call(Target, erlang, processes, []),
    Otp = list_to_integer(response(OtpReq)),
    Wordsize = response(WsReq),
    Names = response(NamesReq),
    Named = [{P, N} || {N, P} <- lists:zip(Names, call(Target, lists, map,
                                                       [fun erlang:whereis/1, Names])),
                       is_pid(P)],
    Count = length(Pids),
    ListedUs = os:system_time(microsecond),
    Order = order(Pids, [P || {P, _} <- Named], MaxProcs),
    Bins = ets:new(bins, [set, private]),
    ChunksUs = os:system_time(microsecond),
    %% OTP 26+: proc_lib's '$initial_call' for the groups too, one dictionary key each
    Pass1 = case Otp >= 26 of
                true -> ?PASS1 ++ [{dictionary, '$initial_call'}];
                false -> ?PASS1
            end,
    {Recs, Asked, Dead} = chunks({Target, Pass1}, Order,
                                 erlang:monotonic_time(millisecond) + BudgetMs, Bins),
    ReadUs = os:system_time(microsecond),
    {UniqueCount, UniqueBytes} = ets:foldl(fun({_, S}, {C, B}) -> {C + 1, B + S} end, {0, 0},
                                           Bins),
    ets:delete(Bins),
    Shown = resolve(Target, Otp, details(Target, Otp, top(Recs, Top))),
    MemBinary = call(Target, erlang, memory, [binary]),
    ShownUs = os:system_time(microsecond),
    Totals = totals(Recs),
    Groups = groups(Recs, maps:from_list(Named)),
    Done = os:system_time(microsecond),
    {ok, [{node, Target}, {otp_release, Otp}, {wordsize, Wordsize},
          {count, Count}, {asked, Asked}, {scanned, Asked - Dead}, {died, Dead},
          {complete, Asked =:= Count},
          {budget, [{max_processes, MaxProcs}, {budget_ms, BudgetMs}, {top, Top}]},
          {memory_binary, MemBinary},
          {binaries, [{count, UniqueCount}, {bytes, UniqueBytes}]},
          {totals, Totals},
          {records, Shown},
          {groups, Groups},
          {activity, activity(Recs)},
          {sampled_at_us, (StartUs + Done) div 2},
          {scan_us, Done - StartUs},
          %% where the time went (tests/bench/bench_processes.py)
          {timings, [{listed, ListedUs - StartUs}, {ordered, ChunksUs - ListedUs},
                     {read, ReadUs - ChunksUs}, {reported, ShownUs - ReadUs},
                     {summed, Done - ShownUs}]}]}.

%% The chunks to read: named processes first, then the rest: all of them, or MaxProcs of them
%% taken at an even stride from a random offset (systematic sampling over the process table).
order(Pids, Named, MaxProcs) ->
    NamedSet = maps:from_keys(Named, true),
    Rest = [P || P <- Pids, not maps:is_key(P, NamedSet)],
    Head = lists:sublist(Named, MaxProcs),
    Left = MaxProcs - length(Head),
    N = length(Rest),
    Tail = if
               Left >= N -> Rest;
               Left =< 0 -> [];
               true ->
                   T = list_to_tuple(Rest),
                   Off = rand:uniform(),
                   [element(1 + trunc((I + Off) * N / Left), T) || I <- lists:seq(0, Left - 1)]
           end,
    split(Head) ++ interleave(Tail).

%% The pids as chunks that each spread over the whole list (chunk S holds every Stride-th pid
%% from the S-th): a scan stopped by the time budget after K of Stride chunks has read K
%% processes in every Stride, not the oldest ones.
interleave([]) -> [];
interleave(Pids) ->
    N = length(Pids),
    Stride = max(1, (N + ?CHUNK - 1) div ?CHUNK),
    T = list_to_tuple(Pids),
    [[element(I, T) || I <- lists:seq(S, N, Stride)] || S <- lists:seq(1, Stride)].

chunks(Ctx, Order, Deadline, Bins) ->
    chunks(Ctx, Order, Deadline, Bins, [], [], 0, 0).

chunks({Target, Items} = Ctx, Order, Deadline, Bins, InFlight, Acc, Asked, Dead)
  when Order =/= [], length(InFlight) < ?IN_FLIGHT ->
    case Asked =:= 0 orelse erlang:monotonic_time(millisecond) < Deadline of
        true ->
            [Chunk | Rest] = Order,
            Req = erpc:send_request(Target, lists, zipwith,
                                    [fun erlang:process_info/2, Chunk,
                                     lists:duplicate(length(Chunk), Items)]),
            chunks(Ctx, Rest, Deadline, Bins, InFlight ++ [{Req, Chunk}], Acc,
                   Asked + length(Chunk), Dead);
        false ->
            drain(InFlight, Bins, Acc, Asked, Dead)
    end;
chunks(_Ctx, [], _Deadline, Bins, InFlight, Acc, Asked, Dead) ->
    drain(InFlight, Bins, Acc, Asked, Dead);
chunks(Ctx, Order, Deadline, Bins, [{Req, Chunk} | InFlight], Acc, Asked, Dead) ->
    {Recs, D} = reduce(Chunk, response(Req), Bins, Acc, 0),
    chunks(Ctx, Order, Deadline, Bins, InFlight, Recs, Asked, Dead + D).

drain([], _Bins, Acc, Asked, Dead) -> {Acc, Asked, Dead};
drain([{Req, Chunk} | InFlight], Bins, Acc, Asked, Dead) ->
    {Recs, D} = reduce(Chunk, response(Req), Bins, Acc, 0),
    drain(InFlight, Bins, Recs, Asked, Dead + D).

%% Chunks of ?CHUNK pids at most, in order.
split([]) -> [];
split(L) when length(L) =< ?CHUNK -> [L];
split(L) -> {C, Rest} = lists:split(?CHUNK, L), [C | split(Rest)].

%% One record per live process; a process that died since processes/0 answers undefined and is
%% skipped (counted in `died`).
reduce([], [], _Bins, Acc, Dead) -> {Acc, Dead};
reduce([_ | Pids], [undefined | Infos], Bins, Acc, Dead) ->
    reduce(Pids, Infos, Bins, Acc, Dead + 1);
reduce([Pid | Pids], [[{memory, M}, {total_heap_size, TH}, {message_queue_len, Q},
                       {initial_call, IC0}, {status, S}, {binary, BL}, {reductions, Reds} | Dict]
                      | Infos], Bins,
       Acc, Dead) ->
    {Bytes, Count, Excl} = bins(BL, Bins),
    IC = case Dict of
             [{{dictionary, '$initial_call'}, {_, _, _} = D}] -> D;
             _ -> IC0
         end,
    %% idle: waiting with nothing to handle (analyzer/holders.py, the same definition)
    Idle = S =:= waiting andalso Q =:= 0,
    reduce(Pids, Infos, Bins, [#r{pid = Pid, memory = M, total_heap = TH, mq = Q,
                                  initial_call = IC, idle = Idle, bin_bytes = Bytes,
                                  bin_count = Count,
                                  bin_refs = length(BL), bin_exclusive = Excl, reds = Reds}
                                | Acc], Dead).

%% {Bytes, Count, ExclusiveBytes} of the distinct refc binaries in a process_info binary list.
%% A process may reference one binary several times (one ProcBin per reference): each counts
%% once per process, and once across processes in the Bins table (none when Bins is none).
%% Exclusive: no holder but this process (its refcount is its references here), so a collection
%% that finds the references dead frees the binary.
bins([], _Bins) -> {0, 0, 0};
bins(BL, Bins) ->
    Own = lists:foldl(fun({Addr, Size, Refc}, Acc) ->
                              case Acc of
                                  #{Addr := {Sz, Rc, K}} -> Acc#{Addr := {Sz, Rc, K + 1}};
                                  _ -> Acc#{Addr => {Size, Refc, 1}}
                              end
                      end, #{}, BL),
    Bins =/= none andalso ets:insert(Bins, [{A, Sz} || {A, {Sz, _, _}} <- maps:to_list(Own)]),
    maps:fold(fun(_, {Sz, Rc, K}, {B, C, E}) when Rc =< K -> {B + Sz, C + 1, E + Sz};
                 (_, {Sz, _, _}, {B, C, E}) -> {B + Sz, C + 1, E}
              end, {0, 0, 0}, Own).

%% The union of the Top largest by each measure the analysis ranks (analyzer/holders.py ranks
%% again and applies its thresholds; this only bounds what travels).
top(Recs, Top) ->
    Keys = [#r.bin_bytes, #r.bin_exclusive, #r.total_heap, #r.memory, #r.mq],
    Tops = lists:foldl(fun(R, Acc) -> [keep(element(K, R), R#r.pid, T, Top)
                                       || {K, T} <- lists:zip(Keys, Acc)] end,
                       [{0, 0, gb_sets:empty()} || _ <- Keys], Recs),
    lists:usort([P || {_, _, S} <- Tops, {_, P} <- gb_sets:to_list(S)]).

%% The Top largest non-zero {Value, Pid} seen so far, with their count and smallest value, in
%% one pass (a full sort of 300,000 records per measure cost a tenth of a second each); most
%% values are not above the smallest kept and cost one comparison.
keep(0, _Pid, T, _Top) -> T;
keep(V, Pid, {N, Min, S}, Top) when N < Top ->
    {N + 1, case N of 0 -> V; _ -> min(V, Min) end, gb_sets:add({V, Pid}, S)};
keep(V, Pid, {N, Min, S}, _Top) when V > Min ->
    {_, Rest} = gb_sets:take_smallest(S),
    S1 = gb_sets:add({V, Pid}, Rest),
    {{Min1, _}, _} = gb_sets:take_smallest(S1),
    {N, Min1, S1};
keep(_V, _Pid, T, _Top) -> T.

%% The fixed item list of the reported processes, read again (the first pass is a moment
%% older); one that died in between is left out.
details(_Target, _Otp, []) -> [];
details(Target, Otp, Pids) ->
    Items = case Otp >= 26 of
                true -> ?ITEMS ++ [{dictionary, '$initial_call'}];
                false -> ?ITEMS
            end,
    Infos = call(Target, lists, zipwith, [fun erlang:process_info/2, Pids,
                                          lists:duplicate(length(Pids), Items)]),
    [detail(P, I) || {P, I} <- lists:zip(Pids, Infos), I =/= undefined].

detail(Pid, [{memory, M}, {heap_size, H}, {total_heap_size, TH}, {binary, BL},
             {message_queue_len, Q}, {registered_name, N}, {initial_call, IC},
             {current_function, CF}, {status, S}, {reductions, R}, {garbage_collection, GC},
             {garbage_collection_info, GI} | Dict]) ->
    {Bytes, Count, Excl} = bins(BL, none),
    DictCall = case Dict of
                   [{{dictionary, '$initial_call'}, {_, _, _} = D}] -> D;
                   _ -> undefined
               end,
    [{pid, pid_text(Pid)}, {name, case N of [] -> undefined; _ -> N end}, {initial_call, IC},
     {dict_initial_call, DictCall}, {current_function, CF}, {status, S}, {reductions, R},
     {memory, M}, {heap_size, H}, {total_heap_size, TH}, {message_queue_len, Q},
     {binary_bytes, Bytes}, {binary_count, Count}, {binary_refs, length(BL)},
     {binary_exclusive_bytes, Excl},
     {minor_gcs, prop(minor_gcs, GC)}, {fullsweep_after, prop(fullsweep_after, GC)},
     {min_heap_size, prop(min_heap_size, GC)}, {min_bin_vheap_size, prop(min_bin_vheap_size, GC)},
     %% words: used young heap, its data that survived the last collection, used old heap...
     {gc_info, [{K, prop(K, GI)} || K <- [heap_size, recent_size, old_heap_size, stack_size,
                                          heap_block_size, old_heap_block_size, mbuf_size,
                                          bin_vheap_size, bin_old_vheap_size]]}].

prop(K, L) ->
    case lists:keyfind(K, 1, L) of
        {K, V} when is_integer(V) -> V;
        _ -> 0
    end.

%% OTP 25 has no {dictionary, Key} item: for the reported proc_lib processes only, ask
%% proc_lib:translate_initial_call/1 on the target. It copies that process's dictionary into the
%% erpc process there (freed when the call returns) and sends back just {M, F, Arity}: the
%% dictionary itself (it can hold secrets) never leaves the target.
resolve(_Target, Otp, Recs) when Otp >= 26 -> Recs;
resolve(Target, _Otp, Recs) ->
    Lib = [R || R <- Recs, proplists:get_value(initial_call, R) =:= {proc_lib, init_p, 5}],
    Calls = case Lib of
                [] -> #{};
                _ -> Ps = [Text || R <- Lib, {pid, Text} <- [lists:keyfind(pid, 1, R)]],
                     Real = call(Target, lists, map, [fun erlang:list_to_pid/1,
                                                      [binary_to_list(T) || T <- Ps]]),
                     maps:from_list(lists:zip(Ps, call(Target, lists, map,
                                                       [fun proc_lib:translate_initial_call/1,
                                                        Real])))
            end,
    [case maps:get(proplists:get_value(pid, R), Calls, none) of
         {M, F, A} when {M, F, A} =/= {proc_lib, init_p, 5} ->
             lists:keystore(dict_initial_call, 1, R, {dict_initial_call, {M, F, A}});
         _ -> R
     end || R <- Recs].

%% Every scanned process's {reductions, message_queue_len}, packed: 20 bytes a process
%% (<<Number:32, Serial:32, Reductions:64, Queue:32>>, its pid's number and serial as the target
%% prints <0.Number.Serial>), not 300,000 tuples that each name the target's node again.
activity(Recs) ->
    << <<(pid_words(P))/binary, R:64, Q:32>> || #r{pid = P, reds = R, mq = Q} <- Recs >>.

%% A local pid's number and serial: the 8 bytes before the creation that ends its external form.
pid_words(Pid) ->
    B = term_to_binary(Pid),
    binary:part(B, byte_size(B) - 12, 8).

totals(Recs) ->
    {M, H, Q, B, IC, IH} =
        lists:foldl(fun(#r{memory = M, total_heap = H, mq = Q, bin_refs = B, idle = I},
                        {M0, H0, Q0, B0, IC0, IH0}) ->
                            {M0 + M, H0 + H, Q0 + Q, B0 + B, IC0 + idle(I, 1), IH0 + idle(I, H)}
                    end, {0, 0, 0, 0, 0, 0}, Recs),
    [{memory, M}, {total_heap_size, H}, {message_queue_len, Q}, {binary_refs, B},
     {idle_count, IC}, {idle_total_heap_size, IH}].

idle(true, N) -> N;
idle(false, _) -> 0.

%% Per initial call (proc_lib's '$initial_call' on OTP 26+; on OTP 25 it is only read for the
%% reported processes, see resolve/2): count, memory, heap words, queued messages, binary bytes
%% (summed per process: a binary two members share counts twice here), the idle members and
%% their heap words, and up to three registered names.
groups(Recs, Named) ->
    G = lists:foldl(fun(#r{initial_call = Key} = R, Acc) ->
                            {C, M, H, Q, B, Ns, IC, IH} = maps:get(Key, Acc, {0, 0, 0, 0, 0, [],
                                                                              0, 0}),
                            Ns1 = case Named of
                                      #{R#r.pid := N} when length(Ns) < 3 -> [N | Ns];
                                      _ -> Ns
                                  end,
                            Acc#{Key => {C + 1, M + R#r.memory, H + R#r.total_heap, Q + R#r.mq,
                                         B + R#r.bin_bytes, Ns1, IC + idle(R#r.idle, 1),
                                         IH + idle(R#r.idle, R#r.total_heap)}}
                    end, #{}, Recs),
    Sorted = lists:reverse(lists:keysort(2, [{K, M, V} || {K, {_, M, _, _, _, _, _, _} = V}
                                                             <- maps:to_list(G)])),
    [[{initial_call, K}, {count, C}, {memory, M}, {total_heap_size, H},
      {message_queue_len, Q}, {binary_bytes, B}, {names, lists:reverse(Ns)},
      {idle_count, IC}, {idle_total_heap_size, IH}]
     || {K, _, {C, M, H, Q, B, Ns, IC, IH}} <- lists:sublist(Sorted, 200)].

%% "<0.123.0>" as the target itself prints the pid (ours would show our index for its node).
pid_text(Pid) ->
    [_Node, X, Y] = string:lexemes(pid_to_list(Pid), "<.>"),
    iolist_to_binary(["<0.", X, ".", Y, ">"]).

%% ---- the probe ---------------------------------------------------------------------------

%% For each pid ("<0.X.Y>", the target's own spelling), in the order given, one at a time:
%% its binary list and heap, erlang:memory(binary); erlang:garbage_collect/1; the same again.
%% A pid that is dead (or dies in between) is reported as such and nothing is done to it.
probe(Target, PidTexts) ->
    Ws = call(Target, erlang, system_info, [wordsize]),
    {ok, [{wordsize, Ws}, {probe, [probe_one(Target, T) || T <- PidTexts]}]}.

probe_one(Target, Text) ->
    %% list_to_pid/1 refuses a pid the target's table could never hold: no such process either
    case try {ok, call(Target, erlang, list_to_pid, [Text])}
         catch error:{exception, badarg, _} -> none
         end of
        none -> [{pid, list_to_binary(Text)}, {dead, true}];
        {ok, Pid} -> probe_pid(Target, Text, Pid)
    end.

probe_pid(Target, Text, Pid) ->
    %% memory(binary) right around the collection: the lists travel outside that window
    Before = call(Target, erlang, process_info, [Pid, [binary, total_heap_size,
                                                       registered_name]]),
    B0 = call(Target, erlang, memory, [binary]),
    T0 = erlang:monotonic_time(microsecond),
    Collected = Before =/= undefined andalso call(Target, erlang, garbage_collect, [Pid]),
    Us = erlang:monotonic_time(microsecond) - T0,
    B1 = settle(Target, call(Target, erlang, memory, [binary]), 50),
    After = call(Target, erlang, process_info, [Pid, [binary, total_heap_size]]),
    case {Collected, Before, After} of
        {true, [{binary, L0}, {total_heap_size, H0}, {registered_name, N}],
         [{binary, L1}, {total_heap_size, H1}]} ->
            [{pid, list_to_binary(Text)}, {name, case N of [] -> undefined; _ -> N end},
             {binary_before, bin_list(L0)}, {binary_after, bin_list(L1)},
             %% the bytes of binaries it referenced alone and no longer does: freed
             {freed_exclusive, freed(L0, L1)},
             {heap_before, H0}, {heap_after, H1},
             {memory_binary_before, B0}, {memory_binary_after, B1}, {gc_us, Us}];
        _ ->  % dead before, or died in between
            [{pid, list_to_binary(Text)}, {dead, true}]
    end.

%% erlang:memory(binary) once it stops falling (every 20 ms, at most Tries times): a binary
%% freed by a collection on one scheduler but allocated in another's instance is queued to its
%% owner and counted until the owner frees it, in its next allocation or aux work
%% (docs/erts/alloc_util.md §4.9).
settle(_Target, Last, 0) -> Last;
settle(Target, Last, Tries) ->
    timer:sleep(20),
    case call(Target, erlang, memory, [binary]) of
        Now when Now < Last -> settle(Target, Now, Tries - 1);
        Now -> Now
    end.

%% {Count, Bytes} of the distinct binaries in a process_info binary list.
bin_list(L) ->
    M = maps:from_list([{A, S} || {A, S, _} <- L]),
    {map_size(M), lists:sum(maps:values(M))}.

freed(L0, L1) ->
    After = maps:from_list([{A, true} || {A, _, _} <- L1]),
    Refs = lists:foldl(fun({A, _, _}, M) -> maps:update_with(A, fun(K) -> K + 1 end, 1, M) end,
                       #{}, L0),
    Gone = maps:from_list([{A, {S, Rc}} || {A, S, Rc} <- L0, not maps:is_key(A, After)]),
    lists:sum([S || {A, {S, Rc}} <- maps:to_list(Gone), Rc =< maps:get(A, Refs)]).

%% ---- erpc --------------------------------------------------------------------------------

call(Target, M, F, A) ->
    response(erpc:send_request(Target, M, F, A)).

response(Req) ->
    receive {nodedown, _} -> throw(nodedown)
    after 0 -> erpc:receive_response(Req, infinity)
    end.
