%% churn: the one class where +M flags are the cure (issue 22), binary_alloc.
%%
%% Each worker (one per scheduler, bound to it) keeps a base set of 600-1000 byte refc binaries in
%% its own ETS table and churns it (replaces random members), takes a spike to CHURN_SPIKE times
%% the base, drops back to the base keeping random survivors, and then, by CHURN_MODE:
%%
%%   turnover  the churn goes on until every survivor has been replaced CHURN_AFTER times over
%%             (each key rewritten once per pass, in random order): a strategy that packs new
%%             blocks low (ageffcbf, aoffcbf with migration) empties the spike's carriers; bf
%%             without migration drops the new blocks into the holes of every carrier;
%%   kept      the survivors stay for good: no strategy can empty the carriers they pin.
%%
%% With CHURN_LOAD=N (binaries per second per worker, default 0) the turnover goes on after
%% "ready" at that rate, so that two snapshots a few seconds apart see it.
%%
%% Run: erl -sname NAME -noshell -pa DIR -eval 'churn:main()'
%% Environment: FRAG_COOKIE sets the cookie (kept out of argv); CHURN_BASE the base set over all
%% workers (default 20000); CHURN_SPIKE (default 15); CHURN_MODE (default turnover); CHURN_AFTER
%% (default 2). Prints each phase and "ready" once settled.
-module(churn).
-export([main/0]).
-include("wl.hrl").

main() ->
    cookie(),
    Schedulers = erlang:system_info(schedulers),
    Per = max(1, env_int("CHURN_BASE", 20000) div Schedulers),
    Spike = env_int("CHURN_SPIKE", 15),
    After = case os:getenv("CHURN_MODE", "turnover") of
                "kept" -> 0;
                "turnover" -> env_int("CHURN_AFTER", 2)
            end,
    Load = env_int("CHURN_LOAD", 0),
    Pids = run_workers(fun(Phase) -> step(Phase, Per, Spike, After, Load) end,
                       [base, churn, spike, drop, 'after']),
    say("ready"),
    [P ! {step, load} || Load > 0, P <- Pids],
    idle().

%% Each step runs in a worker bound to one scheduler; its table is in the process dictionary.
step(base, Per, _Spike, _After, _Load) ->
    Tab = ets:new(live, [set, private]),
    put(tab, Tab),
    fill(Tab, 0, Per);
step(churn, Per, _Spike, _After, _Load) ->
    random_churn(get(tab), Per, 2 * Per);
step(spike, Per, Spike, _After, _Load) ->
    fill(get(tab), Per, Per * (Spike - 1));
step(drop, Per, _Spike, _After, _Load) ->
    Tab = get(tab),
    Size = ets:info(Tab, size),
    Kept = [ets:lookup_element(Tab, K, 2) || K <- lists:sublist(shuffle(lists:seq(0, Size - 1)), Per)],
    %% Re-inserting the survivors under 0..Per-1 moves references only: their bytes stay where
    %% the spike put them, scattered over all its carriers.
    ets:delete_all_objects(Tab),
    lists:foldl(fun(Bin, K) -> ets:insert(Tab, {K, Bin}), K + 1 end, 0, Kept),
    ok;
step('after', Per, _Spike, After, _Load) ->
    [replace_all(get(tab), shuffle(lists:seq(0, Per - 1))) || _ <- lists:seq(1, After)],
    ok;
step(load, Per, _Spike, _After, Load) ->
    %% Steady traffic: Load replacements a second, in slices of a tenth of a second.
    Tab = get(tab),
    Slice = max(1, Load div 10),
    load_loop(Tab, Per, Slice).

load_loop(Tab, Per, Slice) ->
    random_churn(Tab, Per, Slice),
    erlang:garbage_collect(),
    timer:sleep(100),
    load_loop(Tab, Per, Slice).

fill(_Tab, _Key, N) when N =< 0 -> ok;
fill(Tab, Key, N) ->
    ets:insert(Tab, {Key, binary(600, 1000)}),
    fill(Tab, Key + 1, N - 1).

random_churn(_Tab, _Size, 0) -> ok;
random_churn(Tab, Size, N) ->
    ets:insert(Tab, {rand:uniform(Size) - 1, binary(600, 1000)}),
    N rem 5000 =:= 0 andalso erlang:garbage_collect(),
    random_churn(Tab, Size, N - 1).

replace_all(_Tab, []) -> ok;
replace_all(Tab, [K | Ks]) ->
    ets:insert(Tab, {K, binary(600, 1000)}),
    K rem 5000 =:= 0 andalso erlang:garbage_collect(),
    replace_all(Tab, Ks).

shuffle(L) ->
    [X || {_, X} <- lists:sort([{rand:uniform(), X} || X <- L])].
