%% feeley: dead data in idle heaps (issue 24 item 7). The program of Figure 8 of Feeley, "A Case
%% for the Unified Heap Approach to Erlang Memory Management": a chain of PROCS (10,000)
%% processes; each builds a list of CHAIN (500) 4-tuples it never uses again, spawns its child
%% and waits for it. The deepest one waits forever, so every process stays waiting.
%%
%% Each heap grew to hold the chain while it was built (233 -> 4,181 words, 32.7 KiB on 64-bit)
%% and nothing makes an idle process collect again: the words in use since its last collection
%% are the dead chain, not live data. A collection of every process gives back some 90 % of
%% erlang:memory(processes); the allocators see full carriers (eheap_alloc's blocks are in use).
%%
%% Prints "ready" once the deepest process is waiting, then idles.
%% Run: erl -sname NAME -noshell -pa DIR -eval 'feeley:main()'
%% Environment: FRAG_COOKIE; PROCS, CHAIN (see above).
-module(feeley).
-export([main/0]).
-include("wl.hrl").

main() ->
    cookie(),
    Top = self(),
    Chain = env_int("CHAIN", 500),
    spawn(fun() -> link_of(env_int("PROCS", 10000), Chain, Top) end),
    receive deepest -> ok end,
    say("ready"),
    idle().

%% One process of the chain: the garbage first, then the child, then wait for it (forever).
link_of(1, Chain, Top) ->
    _ = tuples(Chain, []),
    Top ! deepest,
    receive stop -> ok end;
link_of(N, Chain, Top) ->
    _ = tuples(Chain, []),
    Child = spawn(fun() -> link_of(N - 1, Chain, Top) end),
    Ref = monitor(process, Child),
    receive {'DOWN', Ref, process, Child, _} -> ok end.

tuples(0, Acc) -> Acc;
tuples(N, Acc) -> tuples(N - 1, {N, N + 1, N + 2, Acc}).
