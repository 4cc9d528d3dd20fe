%% binchurn: allocation-heavy binary traffic, driven line by line from standard input.
%%
%% Workers send 1 KB refc binaries to a partner (each binary is a binary_alloc block, > 64 bytes
%% so off the process heap); the receiver drops it and garbage collection frees it. This is the
%% workload of the eBPF tests and bench (docs/ebpf.md): it idles between commands so that the
%% allocator `calls` counters read before and after a command bracket exactly its traffic.
%%
%% Run: erl -noshell -pa DIR -eval 'binchurn:main()'   (optionally -sname NAME)
%% Commands (one per line on stdin; each answer is one line on stdout):
%%   burst P N    P worker pairs, N binaries sent per worker  -> "done Sent"
%%   run P MS     P worker pairs for MS milliseconds          -> "done Sent"
%%   paced P RATE MS  P pairs sending RATE binaries/s in all, for MS ms (not CPU-bound, so
%%                the count does not depend on how fast the node runs) -> "done Sent"
%%   keep N SIZE  keep N binaries of SIZE bytes alive (ETS)   -> "done N"
%%   spawn N      N short-lived processes, each growing its heap once: at least 2N eheap_alloc
%%                allocations however the schedulers interleave -> "done N"
%%   calls        alloc calls per allocator, summed over instances
%%                  -> "calls binary_alloc A F R eheap_alloc A F R ..."
%%   blocks       block count and bytes per allocator (mbcs + sbcs + pool)
%%                  -> "blocks binary_alloc Count Bytes ..."
%%   quit
%% Prints "ready" once started.
-module(binchurn).
-export([main/0]).
-include("wl.hrl").

main() ->
    ets:new(keep, [named_table, public, set]),
    io:format("ready~n"),
    stdin_loop(fun(Cmd) -> reply(catch command(Cmd)) end).

reply(Words) when is_list(Words) ->
    lists:join(" ", [to_s(W) || W <- Words]);
reply(Other) ->
    io_lib:format("error ~0p", [Other]).

to_s(A) when is_atom(A) -> atom_to_list(A);
to_s(I) when is_integer(I) -> integer_to_list(I);
to_s(S) -> S.

command(["burst", P, N]) ->
    Sent = pairs(list_to_integer(P), {count, list_to_integer(N)}),
    ["done", Sent];
command(["run", P, Ms]) ->
    Sent = pairs(list_to_integer(P), {until, erlang:monotonic_time(millisecond)
                                            + list_to_integer(Ms)}),
    ["done", Sent];
command(["paced", P, Rate, Ms]) ->
    Np = list_to_integer(P),
    PerTick = max(1, list_to_integer(Rate) div Np div 100),  % 10 ms ticks
    Ticks = list_to_integer(Ms) div 10,
    ["done", pairs(Np, {paced, PerTick, Ticks})];
command(["keep", N, Size]) ->
    Bin = binary:copy(<<"k">>, list_to_integer(Size)),
    [ets:insert(keep, {I, binary:copy(Bin)}) || I <- lists:seq(1, list_to_integer(N))],
    ["done", N];
command(["spawn", N]) ->
    Parent = self(),
    Count = list_to_integer(N),
    %% In batches of 100 so that the live process count stays small.
    lists:foreach(
      fun(_) ->
              Pids = [spawn_link(fun() -> grow(Parent) end) || _ <- lists:seq(1, 100)],
              [receive {grown, Pid} -> ok end || Pid <- Pids]
      end, lists:seq(1, Count div 100)),
    ["done", Count - Count rem 100];
command(["calls"]) ->
    ["calls" | lists:append([[A | calls(A)] || A <- allocators()])];
command(["blocks"]) ->
    ["blocks" | lists:append([[A | blocks(A)] || A <- allocators()])].

allocators() ->
    erlang:system_info(alloc_util_allocators).

%% {calls, [{A_alloc, G, N}, {A_free, ..}, {A_realloc, ..}, {mseg_alloc, ..} ...]}: the count
%% is G * 10^9 + N (docs/erts/alloc_util.md §6.1).
calls(A) ->
    Totals = lists:foldl(
               fun({instance, _, Info}, [Al, Fr, Re]) ->
                       Cs = proplists:get_value(calls, Info, []),
                       [Al + c(Cs, 1), Fr + c(Cs, 2), Re + c(Cs, 3)];
                  (_, Acc) -> Acc
               end, [0, 0, 0], info(A)),
    Totals.

c(Cs, I) when length(Cs) >= I ->
    {_, G, N} = lists:nth(I, Cs),
    G * 1000000000 + N;
c(_, _) -> 0.

blocks(A) ->
    lists:foldl(
      fun({instance, _, Info}, [C0, S0]) ->
              {C1, S1} = section_blocks(Info),
              [C0 + C1, S0 + S1];
         (_, Acc) -> Acc
      end, [0, 0], info(A)).

section_blocks(Info) ->
    lists:foldl(
      fun(Sec, {C, S}) ->
              Props = proplists:get_value(Sec, Info, []),
              lists:foldl(fun({_Type, Stats}, {C2, S2}) ->
                                  {C2 + cur(count, Stats), S2 + cur(size, Stats)}
                          end, {C, S}, proplists:get_value(blocks, Props, []))
      end, {0, 0}, [mbcs, sbcs, mbcs_pool]).

cur(Key, Stats) ->
    case lists:keyfind(Key, 1, Stats) of
        {Key, V} -> V;
        {Key, V, _, _} -> V;
        false -> 0
    end.

info(A) ->
    case erlang:system_info({allocator, A}) of
        L when is_list(L) -> L;
        _ -> []
    end.

%% A 1000-element list outgrows the default 233-word heap: one heap at spawn, one more at the
%% garbage collection that grows it (both eheap_alloc blocks).
grow(Parent) ->
    L = lists:seq(1, 1000),
    Parent ! {grown, self()},
    length(L).

%% P pairs: a sender makes 1 KB binaries and sends each to its receiver, which drops it.
pairs(P, Limit) ->
    Parent = self(),
    Pids = [spawn_link(fun() -> sender(Parent, Limit) end) || _ <- lists:seq(1, P)],
    lists:sum([receive {sent, Pid, K} -> K end || Pid <- Pids]).

sender(Parent, Limit) ->
    Rx = spawn_link(fun receiver/0),
    K = send(Rx, Limit, 0),
    Rx ! {stop, self()},
    receive stopped -> ok end,
    Parent ! {sent, self(), K}.

send(Rx, {paced, PerTick, Ticks}, 0) ->
    T0 = erlang:monotonic_time(millisecond),
    lists:foreach(fun(I) ->
                          [Rx ! binary:copy(<<"x">>, 1024) || _ <- lists:seq(1, PerTick)],
                          Wait = T0 + I * 10 - erlang:monotonic_time(millisecond),
                          Wait > 0 andalso timer:sleep(Wait)
                  end, lists:seq(1, Ticks)),
    PerTick * Ticks;
send(_Rx, {count, N}, N) -> N;
send(Rx, {until, T} = L, K) when K band 1023 =:= 0 ->
    case erlang:monotonic_time(millisecond) >= T of
        true -> K;
        false -> Rx ! binary:copy(<<"x">>, 1024), send(Rx, L, K + 1)
    end;
send(Rx, L, K) ->
    Rx ! binary:copy(<<"x">>, 1024),
    send(Rx, L, K + 1).

receiver() ->
    receive
        {stop, From} -> erlang:garbage_collect(), From ! stopped;
        _Bin -> receiver()
    end.
