%% bigbin: large binaries above sbct (workload (b), Lukas Larsson's "Case 1: Large binaries").
%%
%% Each worker keeps LIVE binaries of 1.2-2 MB and replaces a random one CHURN times. Every
%% binary is larger than sbct (512 KiB), so each gets a single-block carrier of its own: one
%% mseg_alloc (mmap, or a cache hit) per allocation. Most of binary_alloc's bytes sit in sbcs
%% (docs/erts/tuning.md §1 R7).
%%
%% Run: erl -sname NAME -noshell -pa DIR -eval 'bigbin:main()'
%% Environment: FRAG_COOKIE (cookie, kept out of argv); LIVE (default 10); CHURN (default 2000).
-module(bigbin).
-export([main/0]).
-include("wl.hrl").

main() ->
    cookie(),
    Live = env_int("LIVE", 10),
    Churn = env_int("CHURN", 2000),
    run_workers(fun(Phase) -> step(Phase, Live, Churn) end, [fill, churn]),
    say("ready"),
    idle().

step(fill, Live, _Churn) ->
    put(live, list_to_tuple([big() || _ <- lists:seq(1, Live)]));
step(churn, Live, Churn) ->
    lists:foreach(fun(N) ->
                          put(live, setelement(rand:uniform(Live), get(live), big())),
                          %% the replaced binary goes with the next collection
                          N rem 20 =:= 0 andalso erlang:garbage_collect()
                  end, lists:seq(1, Churn)).

big() ->
    binary(1200 * 1024, 2000 * 1024).
