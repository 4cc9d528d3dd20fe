%% poolstuck: a carrier pool that no instance can reuse (docs/erts/alloc_util.md §5.1, rule R16).
%%
%% A process bound to scheduler 1 takes PARK binaries of 60 KB in binary_alloc and keeps every
%% other one: its carriers fall to about half full, below acul (60 % by default), and go to the
%% pool with 60 KB holes and nothing larger. Then, ROUNDS times, a process bound to scheduler 2
%% takes PER binaries of SIZE bytes (200 KB, under binary_alloc's sbct of 512 KB, so in
%% multiblock carriers) and exits: each round needs new carriers, each new carrier is a fetch
%% attempt first, and no pooled carrier has a free block of SIZE, so every attempt passes over
%% all of them (skip_size) and fails (`fail`, or `fail_shared` past 100 carriers); the carriers
%% the round made are freed when it exits, so the next round asks again. The parked binaries are
%% kept (persistent_term), so the pool stays as it is while it is read.
%%
%% The other way round, a healthy pool: `+MBacfml 524288` keeps a carrier out of the pool unless
%% it has a free block of 512 KB; its carriers stay with scheduler 1's instance and the pool
%% keeps none of them.
%%
%% Run: erl -sname NAME -noshell -pa DIR -eval 'poolstuck:main()' (2 schedulers or more)
%% Environment: FRAG_COOKIE (cookie); PARK (default 4000), ROUNDS (default 500), PER (default
%% 10), SIZE (default 200000 bytes). Prints "parked", "rounds" and "ready" once settled.
-module(poolstuck).
-export([main/0]).
-include("wl.hrl").

main() ->
    cookie(),
    Park = env_int("PARK", 4000),
    Rounds = env_int("ROUNDS", 500),
    Per = env_int("PER", 10),
    Size = env_int("SIZE", 200000),
    Kept = on(1, fun() ->
                         Bins = [binary:copy(<<I:8>>, 60000) || I <- lists:seq(1, Park)],
                         K = [B || {B, N} <- lists:zip(Bins, lists:seq(1, Park)), N rem 2 =:= 0],
                         erlang:garbage_collect(),
                         K
                 end),
    persistent_term:put(poolstuck, Kept),
    erlang:garbage_collect(),
    say("parked"),
    [on(2, fun() -> length([binary:copy(<<R:8>>, Size) || _ <- lists:seq(1, Per)]) end)
     || R <- lists:seq(1, Rounds)],
    say("rounds"),
    settle(),
    say("ready"),
    idle().

%% F() in a process bound to scheduler S (so it uses S's allocator instances); its result.
on(S, F) ->
    Self = self(),
    P = spawn_opt(fun() -> Self ! {self(), F()} end, [{scheduler, S}, link]),
    receive {P, R} -> R end.
