%% wl.hrl: helpers shared by the workloads in this folder, included by each (-include("wl.hrl"))
%% so that a workload stays one module that beamalloc.demo.WorkloadNode compiles alone.
%%
%% run_workers/2 starts one worker per scheduler, bound to it (so each uses its own allocator
%% instances), runs the phases in lock step, and finally settles: refc binaries are freed only
%% when the last reference goes, and a reference on a process heap goes only with a garbage
%% collection, so every worker collects, waits and collects again before "ready".
%%
%% stdin_loop/1 drives the eBPF tests' workloads (binchurn, binlife): one command per line of
%% standard input, split into words, each answered by one line, Handle(Words); "quit" or the end of
%% the input halts the node.
-compile({nowarn_unused_function, [{cookie, 0}, {env_int, 2}, {run_workers, 2},
                                   {run_workers, 3}, {worker, 3}, {worker_loop, 2},
                                   {settle, 0}, {binary, 2}, {say, 1}, {idle, 0},
                                   {stdin_loop, 1}]}).

stdin_loop(Handle) ->
    case io:get_line("") of
        eof -> halt(0);
        {error, _} -> halt(0);
        Line ->
            case string:lexemes(string:trim(Line), " ") of
                ["quit"] -> halt(0);
                Words -> io:format("~s~n", [Handle(Words)]), stdin_loop(Handle)
            end
    end.

cookie() ->
    case os:getenv("FRAG_COOKIE") of
        false -> ok;
        Cookie -> erlang:set_cookie(node(), list_to_atom(Cookie))
    end.

env_int(Name, Default) ->
    case os:getenv(Name) of
        false -> Default;
        V -> list_to_integer(V)
    end.

run_workers(Step, Phases) ->
    run_workers(Step, Phases, erlang:system_info(schedulers)).

run_workers(Step, Phases, Workers) ->
    Parent = self(),
    Schedulers = erlang:system_info(schedulers),
    Pids = [spawn_opt(fun() -> worker(Parent, Step, I) end,
                      [link, {scheduler, 1 + (I rem Schedulers)}])
            || I <- lists:seq(0, Workers - 1)],
    lists:foreach(fun(Phase) ->
                          [P ! {step, Phase} || P <- Pids],
                          [receive {done, P, Phase} -> ok end || P <- Pids],
                          say(atom_to_list(Phase))
                  end, Phases ++ [settle]),
    Pids.

worker(Parent, Step, I) ->
    rand:seed(exsss, {I, 17, 42}),
    worker_loop(Parent, Step).

worker_loop(Parent, Step) ->
    receive
        {step, settle} ->
            settle(),
            Parent ! {done, self(), settle};
        {step, Phase} ->
            Step(Phase),
            erlang:garbage_collect(),
            Parent ! {done, self(), Phase}
    end,
    worker_loop(Parent, Step).

settle() ->
    erlang:garbage_collect(),
    timer:sleep(300),
    erlang:garbage_collect().

%% A refc binary (larger than 64 bytes, so it lives in binary_alloc) of Min..Max bytes.
binary(Min, Max) ->
    binary:copy(<<"x">>, Min + rand:uniform(Max - Min + 1) - 1).

say(Line) ->
    io:format("~s~n", [Line]).

idle() ->
    receive stop -> ok end.
