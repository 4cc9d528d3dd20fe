%% binlife: the whole life of a set of refc binaries on every scheduler, driven from standard
%% input, for the end-to-end test of `beamalloc trace -o` + refalloc (tests/ebpf/test_e2e_replay.py,
%% docs/ebpf.md "End to end").
%%
%% A fresh node settles (every process collected, so nothing from boot is freed later), the
%% tracer attaches, then `run` makes W workers (spread over the schedulers) build up a store of
%% binaries of mixed sizes in a public ETS table, drop most of them from other workers (frees of
%% blocks another scheduler's instance owns, docs/erts/alloc_util.md §4.9), churn, and drop to a small
%% remainder that stays alive. Sizes: lognormal around 2 KB, 8 % 20-200 KB, 1 % 0.6-1.5 MB
%% (single-block carriers under the default sbct of 512 KB).
%%
%% Run: erl -noshell -pa DIR -eval 'binlife:main()'
%% Commands (one per line; each answer is one line):
%%   settle            collect every process            -> "settled"
%%   info              binary_alloc's system_info, one line of Erlang text (~w); it also begins a
%%                     new "max since last call" period (§6.1)  -> "info [...]"
%%   mark              begin a new "max since last call" period   -> "marked"
%%   run W N SEED      W workers, N binaries each       -> "done Allocs Frees Kept"
%%   quit
%% Prints "ready" once started.
-module(binlife).
-export([main/0]).
-include("wl.hrl").

main() ->
    ets:new(store, [named_table, public, set, {write_concurrency, true}]),
    io:format("ready~n"),
    stdin_loop(fun(Cmd) -> catch command(Cmd) end).

command(["settle"]) ->
    [erlang:garbage_collect(P) || P <- processes()],
    "settled";
command(["info"]) ->
    io_lib:format("info ~w", [erlang:system_info({allocator, binary_alloc})]);
command(["mark"]) ->
    erlang:system_info({allocator, binary_alloc}),
    "marked";
command(["run", W, N, Seed]) ->
    Nw = list_to_integer(W),
    Parent = self(),
    Ws = [spawn_opt(fun() -> worker(Parent, I, Nw, list_to_integer(N),
                                    list_to_integer(Seed)) end,
                    [link, {scheduler, 1 + I rem erlang:system_info(schedulers)}])
          || I <- lists:seq(0, Nw - 1)],
    Res = [receive {done, Pid, R} -> R end || Pid <- Ws],
    {A, F} = lists:foldl(fun({A1, F1}, {A0, F0}) -> {A0 + A1, F0 + F1} end, {0, 0}, Res),
    [erlang:garbage_collect(P) || P <- processes()],
    io_lib:format("done ~b ~b ~b", [A, F, ets:info(store, size)]).

%% Phases, each ended by a barrier so that the workers move together: build (N allocations),
%% drop 70 % (keys of the next worker: its blocks live in another instance), churn (N/2 frees
%% of own keys, each followed by an allocation), drop to 10 % of N (own keys).
worker(Parent, I, Nw, N, Seed) ->
    rand:seed(exsss, {Seed, I, 7}),
    Next = (I + 1) rem Nw,
    A1 = build(I, 0, N),
    barrier(Nw),
    F1 = drop(Next, N, N * 7 div 10),
    barrier(Nw),
    {A2, F2} = churn(I, N, N div 2),
    barrier(Nw),
    F3 = drop_to(I, N + N div 2, N div 10),
    erlang:garbage_collect(),
    Parent ! {done, self(), {A1 + A2, F1 + F2 + F3}}.

barrier(Nw) ->
    K = ets:update_counter(store, barrier, 1, {barrier, 0}),
    wait_for(((K - 1) div Nw + 1) * Nw).

wait_for(Target) ->
    case ets:lookup(store, barrier) of
        [{barrier, V}] when V >= Target -> ok;
        _ -> timer:sleep(5), wait_for(Target)
    end.

size() ->
    R = rand:uniform(),
    if R < 0.01 -> 600000 + rand:uniform(900000);
       R < 0.09 -> 20000 + rand:uniform(180000);
       true -> min(60000, max(100, round(math:exp(7.5 + rand:normal()))))
    end.

%% One binary_alloc block each: binary:copy/2 of more than 64 bytes is a refc binary.
build(_I, K, K) -> K;
build(I, K, N) ->
    ets:insert(store, {{I, K}, binary:copy(<<7>>, size())}),
    case K rem 64 of 63 -> erlang:garbage_collect(); _ -> ok end,
    build(I, K + 1, N).

drop(Owner, Range, Count) ->
    R = lists:sum([del({Owner, rand:uniform(Range) - 1}) || _ <- lists:seq(1, Count)]),
    erlang:garbage_collect(),
    R.

del(Key) ->
    case ets:take(store, Key) of
        [] -> 0;
        _ -> 1
    end.

churn(I, N, Steps) ->
    lists:foldl(fun(S, {A, F}) ->
                        F1 = del({I, rand:uniform(N) - 1}),
                        ets:insert(store, {{I, N + S}, binary:copy(<<7>>, size())}),
                        case S rem 64 of 63 -> erlang:garbage_collect(); _ -> ok end,
                        {A + 1, F + F1}
                end, {0, 0}, lists:seq(0, Steps - 1)).

drop_to(I, Range, Keep) ->
    Mine = [K || K <- lists:seq(0, Range - 1), ets:member(store, {I, K})],
    Drop = lists:sublist(shuffle(Mine), max(0, length(Mine) - Keep)),
    F = lists:sum([del({I, K}) || K <- Drop]),
    erlang:garbage_collect(),
    F.

shuffle(L) ->
    [X || {_, X} <- lists:sort([{rand:uniform(), X} || X <- L])].
