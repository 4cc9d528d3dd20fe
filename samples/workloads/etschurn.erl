%% etschurn: ETS insert/delete churn over many tables (workload (c), ets_alloc).
%%
%% Each worker owns TABLES tables, fills them to ROWS rows in total (a peak), then deletes
%% random rows down to a tenth and keeps inserting and deleting at that size. Rows are copied
%% into ets_alloc, so the survivors sit scattered over the carriers of the peak
%% (docs/erts/tuning.md §1 R5; erlang-questions 2019-02, the ETS delete experiment).
%%
%% Run: erl -sname NAME -noshell -pa DIR -eval 'etschurn:main()'
%% Environment: FRAG_COOKIE (cookie); TABLES (default 50); ROWS per worker (default 300000).
-module(etschurn).
-export([main/0]).
-include("wl.hrl").

main() ->
    cookie(),
    Tables = env_int("TABLES", 50),
    Rows = env_int("ROWS", 300000),
    run_workers(fun(Phase) -> step(Phase, Tables, Rows) end, [peak, delete, churn]),
    say("ready"),
    idle().

step(peak, Tables, Rows) ->
    Tabs = list_to_tuple([ets:new(t, [set, public]) || _ <- lists:seq(1, Tables)]),
    put(tabs, Tabs),
    [ets:insert(element(1 + K rem Tables, Tabs), row(K)) || K <- lists:seq(0, Rows - 1)],
    ok;
step(delete, Tables, Rows) ->
    Tabs = get(tabs),
    [ets:delete(element(1 + K rem Tables, Tabs), K)
     || K <- lists:seq(0, Rows - 1), rand:uniform(10) > 1],
    ok;
step(churn, Tables, Rows) ->
    Tabs = get(tabs),
    lists:foreach(fun(_) ->
                          K = rand:uniform(Rows) - 1,
                          T = element(1 + K rem Tables, Tabs),
                          case ets:member(T, K) of
                              true -> ets:delete(T, K);
                              false -> ets:insert(T, row(K))
                          end
                  end, lists:seq(1, Rows div 10)).

%% A row of 100-300 bytes of terms (a small record with a list payload).
row(K) ->
    {K, {user, K, lists:seq(1, 5 + rand:uniform(25))}}.
