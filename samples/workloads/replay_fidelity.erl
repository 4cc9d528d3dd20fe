%% replay_fidelity: perform exactly the binary allocations and frees listed in a file, so that a
%% test can replay the same sequence through refalloc and compare with what the node reports
%% (tests/refalloc/test_fidelity.py).
%%
%% Ops file, one op per line: "a Id Size" allocates a refc binary of Size bytes with
%% binary:copy/2 (one binary_alloc block: Binary header + Size, docs/erts/alloc_util.md §3.1), "f Id" drops
%% it. A refc binary is freed when its last reference is garbage collected, so every free is a
%% removal from the process's map followed by a major collection: the frees happen one by one, in
%% file order. Run with +S 1, so everything happens in binary_alloc instance 1 (§2.4).
%%
%% Output file: {Before, After} as Erlang text, each erlang:system_info({allocator,
%% binary_alloc}); Before is taken once the ops are parsed and every process collected (it also resets "max since last", so
%% After's middle values are the peaks of the workload, §6.1).
%%
%% Run: erl -noshell +S 1 FLAGS -pa DIR -run replay_fidelity main OPS OUT
-module(replay_fidelity).
-export([main/1]).

main([OpsFile, OutFile]) ->
    Ops = parse(OpsFile),
    %% Binaries that boot, code loading and the parse left as garbage in any process would be
    %% freed at some GC during the run; collect them all now so that the blocks present at
    %% Before stay put (the test replays them as live from the start).
    [erlang:garbage_collect(P) || P <- processes()],
    Before = erlang:system_info({allocator, binary_alloc}),
    run(Ops, #{}),
    After = erlang:system_info({allocator, binary_alloc}),
    ok = file:write_file(OutFile, io_lib:format("~p.~n", [{Before, After}])),
    halt(0).

parse(File) ->
    {ok, Bin} = file:read_file(File),
    Lines = string:lexemes(binary_to_list(Bin), "\n"),
    [op(string:lexemes(L, " ")) || L <- Lines].

op(["a", Id, Size]) -> {a, list_to_integer(Id), list_to_integer(Size)};
op(["f", Id]) -> {f, list_to_integer(Id)}.

run([], Held) ->
    Held;
run([{a, Id, Size} | Rest], Held) ->
    run(Rest, Held#{Id => binary:copy(<<0>>, Size)});
run([{f, Id} | Rest], Held) ->
    Held1 = maps:remove(Id, Held),
    erlang:garbage_collect(),
    run(Rest, Held1).
