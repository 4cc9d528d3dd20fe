%% binspike: a burst of binaries that leaves a few stragglers behind (workload (a'), binary_alloc).
%%
%% Each worker keeps a small long-lived set, then takes a burst of 600-1000 byte refc binaries
%% (a queue filling up during a traffic peak), then drops the burst except one binary in
%% STRAGGLE (a few messages that something keeps referring to). The stragglers are spread evenly
%% in time, so they are spread evenly over the carriers the burst created: with big carriers
%% every carrier keeps one and none can go back to the OS; with small carriers most carriers
%% hold none and are freed (docs/erts/tuning.md §1 R3, the logplex case).
%%
%% Run: erl -sname NAME -noshell -pa DIR -eval 'binspike:main()'
%% Environment: FRAG_COOKIE sets the cookie (kept out of argv); BURST binaries per worker
%% (default 100000); STRAGGLE (default 4000). Prints each phase and "ready" once settled.
-module(binspike).
-export([main/0]).
-include("wl.hrl").

main() ->
    cookie(),
    Burst = env_int("BURST", 100000),
    Straggle = env_int("STRAGGLE", 4000),
    run_workers(fun(Phase) -> step(Phase, Burst, Straggle) end,
                   [base, burst, drop, churn]),
    say("ready"),
    idle().

%% Each step runs in a worker bound to one scheduler; its state lives in the process dictionary.
step(base, _Burst, _Straggle) ->
    put(live, [binary(600, 1000) || _ <- lists:seq(1, 2000)]);
step(burst, Burst, _Straggle) ->
    put(burst, [binary(600, 1000) || _ <- lists:seq(1, Burst)]);
step(drop, _Burst, Straggle) ->
    {Kept, _} = lists:foldl(fun(B, {Acc, N}) when N rem Straggle =:= 0 -> {[B | Acc], N + 1};
                               (_, {Acc, N}) -> {Acc, N + 1}
                            end, {[], 0}, erase(burst)),
    put(stragglers, Kept);
step(churn, _Burst, _Straggle) ->
    %% steady traffic after the peak: replace the long-lived set twice
    [put(live, [binary(600, 1000) || _ <- get(live)]) || _ <- [1, 2]],
    ok.
