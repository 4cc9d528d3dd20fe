%% healthy: a mixed node at a steady state (workload (e)): nothing to tune.
%%
%% Each worker keeps a constant live set (binaries, ETS rows, a few hundred processes with
%% small heaps) and churns it at constant size, with no peak. Usage stays high, so the
%% recommender must say "healthy" and set no flag (issue 3, must-hold 1).
%%
%% Run: erl -sname NAME -noshell -pa DIR -eval 'healthy:main()'
%% Environment: FRAG_COOKIE (cookie); LIVE items per worker (default 20000).
-module(healthy).
-export([main/0]).
-include("wl.hrl").

main() ->
    cookie(),
    Live = env_int("LIVE", 20000),
    run_workers(fun(Phase) -> step(Phase, Live) end, [fill, churn, churn]),
    say("ready"),
    idle().

step(fill, Live) ->
    Tab = ets:new(t, [set, private]),
    put(tab, Tab),
    [ets:insert(Tab, {K, binary(100, 1500), lists:seq(1, 10)}) || K <- lists:seq(1, Live)],
    put(procs, [spawn(fun() -> hold(lists:seq(1, 500)) end) || _ <- lists:seq(1, 200)]);
step(churn, Live) ->
    Tab = get(tab),
    [ets:insert(Tab, {rand:uniform(Live), binary(100, 1500), lists:seq(1, 10)})
     || _ <- lists:seq(1, Live)],
    [P ! stop || P <- get(procs)],
    put(procs, [spawn(fun() -> hold(lists:seq(1, 500)) end) || _ <- get(procs)]).

hold(Data) ->
    receive stop -> length(Data) end.
