%% heapchurn: process heaps after a peak of many processes (workload (d), eheap_alloc).
%%
%% Each worker spawns PROCS processes on its scheduler; each builds a heap of 20-60 KB and
%% waits. Then all but one in STRAGGLE exit (a connection storm that ends, with a few
%% long-lived sessions). Heaps are freed when a process exits; the stragglers' heaps keep the
%% peak's carriers (docs/erts/tuning.md §1 R4).
%%
%% Run: erl -sname NAME -noshell -pa DIR -eval 'heapchurn:main()'
%% Environment: FRAG_COOKIE (cookie); PROCS per worker (default 2500); STRAGGLE (default 40).
-module(heapchurn).
-export([main/0]).
-include("wl.hrl").

main() ->
    cookie(),
    Procs = env_int("PROCS", 2500),
    Straggle = env_int("STRAGGLE", 40),
    run_workers(fun(Phase) -> step(Phase, Procs, Straggle) end, [peak, exit]),
    say("ready"),
    idle().

step(peak, Procs, _Straggle) ->
    Self = self(),
    Sched = erlang:system_info(scheduler_id),
    Pids = [spawn_opt(fun() -> session(Self) end, [{scheduler, Sched}])
            || _ <- lists:seq(1, Procs)],
    [receive {built, P} -> ok end || P <- Pids],
    put(pids, Pids);
step(exit, _Procs, Straggle) ->
    Numbered = lists:zip(lists:seq(1, length(get(pids))), get(pids)),
    {Keep, Stop} = lists:partition(fun({N, _}) -> N rem Straggle =:= 0 end, Numbered),
    [P ! stop || {_, P} <- Stop],
    put(pids, [P || {_, P} <- Keep]),
    timer:sleep(200).

%% A session: a heap of 1200-3600 list cells (20-60 KB), kept until told to stop.
session(Parent) ->
    Heap = lists:seq(1, 1200 + rand:uniform(2400)),
    Parent ! {built, self()},
    receive stop -> length(Heap) end.
