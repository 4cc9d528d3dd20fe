%% spikes: bursts of binaries that each leave a few stragglers behind, one burst per command
%% on standard input, for `recommend --trace` (tests/ebpf/test_traced_recommend.py): a node
%% that has had one spike is snapshotted, the next spike is traced, and the prediction replays
%% the traced spike from the snapshot's carriers.
%%
%% Each worker (one per scheduler, bound to it) allocates N refc binaries of 600-1000 bytes, keeps
%% one in KEEP for good (in allocation order, so evenly spread over the burst's carriers: the
%% binspike shape) and drops the rest; then every process is collected.
%%
%% Run: erl -sname NAME -noshell -pa DIR -eval 'spikes:main()'
%% Environment: FRAG_COOKIE (cookie). Commands (one per line; each answer is one line):
%%   spike N KEEP      one burst on every worker            -> "done Kept"
%%   quit
%% Prints "ready" once started.
-module(spikes).
-export([main/0]).
-include("wl.hrl").

main() ->
    cookie(),
    Workers = [spawn_opt(fun() -> keeper([]) end,
                         [{scheduler, S}]) || S <- lists:seq(1, erlang:system_info(schedulers))],
    say("ready"),
    stdin_loop(fun(Cmd) -> catch command(Cmd, Workers) end).

command(["spike", N, Keep], Workers) ->
    Self = self(),
    [W ! {spike, list_to_integer(N), list_to_integer(Keep), Self} || W <- Workers],
    Kept = lists:sum([receive {kept, W, K} -> K end || W <- Workers]),
    [erlang:garbage_collect(P) || P <- processes()],
    io_lib:format("done ~b", [Kept]).

%% A worker keeps its stragglers in its own state; the burst lives only while it is built.
keeper(Kept) ->
    receive
        {spike, N, Keep, From} ->
            Burst = [binary(600, 1000) || _ <- lists:seq(1, N)],
            New = [B || {I, B} <- lists:zip(lists:seq(1, N), Burst), I rem Keep =:= 0],
            erlang:garbage_collect(),
            From ! {kept, self(), length(New)},
            keeper(New ++ Kept)
    end.
