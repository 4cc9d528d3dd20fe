#!/usr/bin/env escript
%% An independent, Erlang-side implementation of recon_alloc's formulas (docs/erts/recon-formulas.md §0.2-§1),
%% used by tests/live/test_live_numbers.py to check beamalloc's Python numbers on live data.
%% Input: a file holding beamalloc's raw live term ([{memory, M}, {allocators, [{A, Info}]}, ...]).
%% Output, one line each: "totals Used Allocated" and
%% "frag Alloc N SbcsUsage MbcsUsage SB SC MB MC" in fragmentation(current) order.
-mode(compile).

-define(UTIL, [temp_alloc, eheap_alloc, binary_alloc, ets_alloc, driver_alloc, sl_alloc,
               ll_alloc, fix_alloc, std_alloc]).

main([File]) ->
    {ok, [Raw]} = file:consult(File),
    Allocs = proplists:get_value(allocators, Raw),
    Insts = [{{A, N}, Props} || {A, Info} <- Allocs, lists:member(A, ?UTIL),
                                {instance, N, Props} <- Info],
    Used = lists:sum([size_of(P, blocks_size) || {_, P} <- Insts]),
    Alloc = lists:sum([size_of(P, carriers_size) || {_, P} <- Insts]),
    io:format("totals ~b ~b~n", [Used, Alloc]),
    Rows = [frag(K, P) || {K, P} <- Insts],
    lists:foreach(fun({_W, {A, N}, [SU, MU, SB, SC, MB, MC]}) ->
                          io:format("frag ~s ~b ~s ~s ~b ~b ~b ~b~n",
                                    [A, N, f(SU), f(MU), SB, SC, MB, MC])
                  end, lists:reverse(lists:sort(Rows))).

f(X) when is_float(X) -> float_to_list(X, [short]).

%% The per-type block lists of OTP >= 23 summed into recon's old-style totals.
total(Section, blocks) -> sum_types(Section, count);
total(Section, blocks_size) -> sum_types(Section, size);
total(Section, Key) -> element(1, value(Section, Key)).

sum_types(Section, Which) ->
    case proplists:get_value(blocks, Section) of
        L when is_list(L) ->
            lists:sum([element(2, lists:keyfind(Which, 1, Stats)) || {_Type, Stats} <- L]);
        _ -> 0
    end.

value(Section, Key) ->
    case lists:keyfind(Key, 1, Section) of
        {Key, C, _, _} -> {C};
        {Key, C} -> {C};
        false -> {0}
    end.

%% current mbcs include the carrier pool (container_value/4).
mbcs(P, Key) ->
    Pool = case proplists:get_value(mbcs_pool, P) of
               undefined -> 0;
               PoolSec -> total(PoolSec, Key)
           end,
    total(proplists:get_value(mbcs, P), Key) + Pool.

sbcs(P, Key) -> total(proplists:get_value(sbcs, P), Key).

size_of(P, Key) -> sbcs(P, Key) + mbcs(P, Key).

usage(0, 0) -> 1.0;
usage(B, C) -> B / C.

frag(K, P) ->
    SB = sbcs(P, blocks_size), SC = sbcs(P, carriers_size),
    MB = mbcs(P, blocks_size), MC = mbcs(P, carriers_size),
    SU = usage(SB, SC), MU = usage(MB, MC),
    {(1 - SU) * SC + (1 - MU) * MC, K, [SU, MU, SB, SC, MB, MC]}.
