%% scatter: a burst of binaries whose survivors are scattered for good (binary_alloc).
%%
%% Each worker takes a burst of 1-3 KB refc binaries (a cache or a queue filling up during a
%% peak) and keeps a random one in KEEP_EVERY for good (entries that stay referenced): no churn
%% follows, so nothing moves. The survivors are spread over every carrier the burst created,
%% a few dozen in each, so no carrier size and no placement strategy gives those carriers back:
%% the memory goes only when the survivors do (copied out, or their holder restarted).
%%
%% Run: erl -sname NAME -noshell -pa DIR -eval 'scatter:main()'
%% Environment: FRAG_COOKIE (cookie); BURST binaries per worker (default 150000); KEEP_EVERY
%% (default 20: a random 5 % survives). Prints each phase and "ready" once settled.
-module(scatter).
-export([main/0]).
-include("wl.hrl").

main() ->
    cookie(),
    Burst = env_int("BURST", 150000),
    KeepEvery = env_int("KEEP_EVERY", 20),
    run_workers(fun(Phase) -> step(Phase, Burst, KeepEvery) end, [burst, drop]),
    say("ready"),
    idle().

step(burst, Burst, _KeepEvery) ->
    put(burst, [binary(1000, 3000) || _ <- lists:seq(1, Burst)]);
step(drop, _Burst, KeepEvery) ->
    put(kept, [B || B <- erase(burst), rand:uniform(KeepEvery) =:= 1]).
