%% frag: fragment binary_alloc the way a traffic spike does.
%%
%% Steady churn of 600-1000 byte refc binaries (each lives in binary_alloc, not on a process
%% heap, because it is larger than 64 bytes), a spike to ten times the live set, a random drop
%% back to the base, then churn again. The survivors of the drop are scattered over every
%% carrier the spike created, so those carriers cannot be returned to the OS: allocated stays
%% near the peak while used falls back to the base (docs/erts/tuning.md, the post-spike case).
%%
%% Run: erl -sname NAME -noshell -pa DIR -eval 'frag:main()'
%% Environment: FRAG_COOKIE sets the node's cookie (kept out of argv); FRAG_BASE the live set
%% (default 20000 binaries); FRAG_WORKERS the number of processes (default: one per scheduler).
%% Prints one line per phase and "ready" once the node has settled; then it idles until halted.
-module(frag).
-export([main/0, run/2]).

-define(MIN_SIZE, 600).
-define(MAX_SIZE, 1000).
-define(SPIKE, 10).

main() ->
    case os:getenv("FRAG_COOKIE") of
        false -> ok;
        Cookie -> erlang:set_cookie(node(), list_to_atom(Cookie))
    end,
    Base = env_int("FRAG_BASE", 20000),
    Workers = env_int("FRAG_WORKERS", erlang:system_info(schedulers)),
    run(Base, Workers),
    say("ready"),
    idle().

env_int(Name, Default) ->
    case os:getenv(Name) of
        false -> Default;
        V -> list_to_integer(V)
    end.

%% Each worker owns a slice of the live set in its own ETS table, keyed 0..Size-1, so its
%% binaries are allocated by the binary_alloc instance of the scheduler it runs on.
run(Base, Workers) ->
    Parent = self(),
    Per = max(1, Base div Workers),
    Schedulers = erlang:system_info(schedulers),
    Pids = [spawn_opt(fun() -> worker(Parent, Per) end,
                      [link, {scheduler, 1 + (I rem Schedulers)}])
            || I <- lists:seq(0, Workers - 1)],
    Phases = [{churn, Per}, {spike, Per * ?SPIKE}, {drop, Per}, {churn, Per}],
    lists:foreach(fun({Phase, _} = Step) ->
                          [P ! {step, Step} || P <- Pids],
                          [receive {done, P, Phase} -> ok end || P <- Pids],
                          say(atom_to_list(Phase))
                  end, Phases),
    [P ! settle || P <- Pids],
    [receive {settled, P} -> ok end || P <- Pids],
    ok.

worker(Parent, Per) ->
    rand:seed(exsss, {erlang:phash2(self()), 17, 42}),
    Tab = ets:new(live, [set, private]),
    fill(Tab, 0, Per),
    worker_loop(Parent, Tab).

worker_loop(Parent, Tab) ->
    receive
        {step, {Phase, N}} ->
            step(Phase, Tab, N),
            erlang:garbage_collect(),
            Parent ! {done, self(), Phase},
            worker_loop(Parent, Tab);
        settle ->
            %% Refc binaries are freed when the last reference goes, and a reference on this
            %% process's heap goes only with a garbage collection: collect, wait, collect again.
            erlang:garbage_collect(),
            timer:sleep(200),
            erlang:garbage_collect(),
            Parent ! {settled, self()},
            worker_loop(Parent, Tab)
    end.

%% churn: replace 2N random members; spike: grow the live set to N; drop: keep N random ones.
step(churn, Tab, N) ->
    Size = ets:info(Tab, size),
    churn(Tab, Size, 2 * N);
step(spike, Tab, N) ->
    Size = ets:info(Tab, size),
    fill(Tab, Size, N - Size);
step(drop, Tab, N) ->
    Size = ets:info(Tab, size),
    Survivors = lists:sublist(shuffle(lists:seq(0, Size - 1)), N),
    Kept = [ets:lookup_element(Tab, K, 2) || K <- Survivors],
    %% Deleting every entry and re-inserting the survivors under 0..N-1 moves references only:
    %% the survivors' bytes stay where the spike put them, scattered over all its carriers.
    ets:delete_all_objects(Tab),
    lists:foldl(fun(Bin, K) -> ets:insert(Tab, {K, Bin}), K + 1 end, 0, Kept),
    ok.

fill(_Tab, _Key, N) when N =< 0 -> ok;
fill(Tab, Key, N) ->
    ets:insert(Tab, {Key, new_binary()}),
    fill(Tab, Key + 1, N - 1).

churn(_Tab, _Size, 0) -> ok;
churn(Tab, Size, N) ->
    ets:insert(Tab, {rand:uniform(Size) - 1, new_binary()}),
    N rem 5000 =:= 0 andalso erlang:garbage_collect(),
    churn(Tab, Size, N - 1).

new_binary() ->
    binary:copy(<<"x">>, ?MIN_SIZE + rand:uniform(?MAX_SIZE - ?MIN_SIZE + 1) - 1).

shuffle(L) ->
    [X || {_, X} <- lists:sort([{rand:uniform(), X} || X <- L])].

say(Line) ->
    io:format("~s~n", [Line]).

idle() ->
    receive stop -> ok end.
