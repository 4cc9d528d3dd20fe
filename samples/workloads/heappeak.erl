%% heappeak: a short peak of large process heaps (eheap_alloc).
%%
%% Each worker spawns PROCS processes that each build a heap of several MB (a batch job, a
%% large reply being assembled), then all of them exit but KEEP, which stay with heaps of about
%% 2 MB: those live in single-block carriers (above the default sbct), and the peak's carriers
%% go back to the OS when their heaps go. What remains is a few large heaps: raising sbct would
%% move them into multiblock carriers that can only grow the waste (docs/erts/tuning.md §1 R7).
%%
%% Run: erl -sname NAME -noshell -pa DIR -eval 'heappeak:main()'
%% Environment: FRAG_COOKIE (cookie); PROCS per worker (default 40); KEEP per worker (default 2).
-module(heappeak).
-export([main/0]).
-include("wl.hrl").

main() ->
    cookie(),
    Procs = env_int("PROCS", 40),
    Keep = env_int("KEEP", 2),
    run_workers(fun(Phase) -> step(Phase, Procs, Keep) end, [peak, exit]),
    say("ready"),
    idle().

step(peak, Procs, _Keep) ->
    Self = self(),
    Sched = erlang:system_info(scheduler_id),
    Pids = [spawn_opt(fun() -> job(Self, N) end, [{scheduler, Sched}])
            || N <- lists:seq(1, Procs)],
    [receive {built, P} -> ok end || P <- Pids],
    put(pids, Pids);
step(exit, _Procs, Keep) ->
    {Stay, Stop} = lists:split(Keep, get(pids)),
    [P ! stop || P <- Stop],
    put(pids, Stay),
    timer:sleep(200).

%% A job: the first few keep about 2 MB of heap (120,000 list cells); the others build 4-8 MB.
job(Parent, N) when N =< 2 ->
    hold(Parent, lists:seq(1, 120000));
job(Parent, _N) ->
    hold(Parent, lists:seq(1, 250000 + rand:uniform(250000))).

hold(Parent, Heap) ->
    erlang:garbage_collect(),
    Parent ! {built, self()},
    receive stop -> length(Heap) end.
