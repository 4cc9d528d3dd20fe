%% holders: processes, not allocators, hold the memory (issue 12). Five named holders:
%%
%%   leaky_router  received ROUTER (40,000) messages carrying a 1,000-byte refc binary each and
%%                 dropped them, with no garbage collection since: its heap (min_heap_size
%%                 2 Mwords) and binary virtual heap (min_bin_vheap_size 8 Mwords) are large
%%                 enough that nothing triggers one. Every byte is dead; a GC frees them all.
%%   bin_cache     keeps CACHE (10,000) binaries of 1,000 bytes in a map: live, a GC frees nothing.
%%   msg_queue     took a peak of PEAK (20,000) messages with a 1,000-byte binary each, kept 5 % in
%%                 its state (a queue) and has collected since: what it holds is live.
%%   idle_worker_N WORKERS (100) workers; each built a list of WORK (20,000) elements once, its heap
%%                 grew for it, and it now idles with that heap full of garbage (no collection
%%                 since): hibernation or a GC would give the heap back.
%%   slow_consumer never receives; a producer sends it 10 small messages every 2 ms: a mailbox
%%                 that grows (by some 4,000 a second).
%% Every binary is made by a helper that then collects, so each holder is the binary's only
%% holder. Prints "ready" when all are in place, then one line per command on stdin is not read:
%% the node idles.
%%
%% Run: erl -sname NAME -noshell -pa DIR -eval 'holders:main()'
%% Environment: FRAG_COOKIE; ROUTER, CACHE, PEAK, WORKERS, WORK (see above).
-module(holders).
-export([main/0]).
-include("wl.hrl").

main() ->
    cookie(),
    Router = spawn_opt(fun() -> router() end,
                       [{min_heap_size, 2 * 1024 * 1024}, {min_bin_vheap_size, 8 * 1024 * 1024}]),
    register(leaky_router, Router),
    feed(Router, env_int("ROUTER", 40000)),
    register(bin_cache, spawn(fun() -> cache(#{}) end)),
    feed(whereis(bin_cache), env_int("CACHE", 10000)),
    Queue = spawn(fun() -> queue(queue:new(), 0) end),
    register(msg_queue, Queue),
    feed(Queue, env_int("PEAK", 20000)),
    Work = env_int("WORK", 20000),
    [register(list_to_atom("idle_worker_" ++ integer_to_list(I)),
              spawn(fun() -> worker(Work) end))
     || I <- lists:seq(1, env_int("WORKERS", 100))],
    Consumer = spawn(fun() -> receive never_sent -> ok end end),
    register(slow_consumer, Consumer),
    spawn(fun() -> produce(Consumer, 0) end),
    %% every holder has its messages: ask each in turn (the answer comes after the feed)
    [begin P ! {sync, self()}, receive {synced, P} -> ok end end
     || P <- [Router, whereis(bin_cache), Queue]],
    timer:sleep(500),
    erlang:garbage_collect(),
    say("ready"),
    idle().

%% N messages with a fresh 1,000-byte refc binary each, sent from a process that collects
%% afterwards: the receiver's reference is the only one left.
feed(To, N) ->
    {Pid, Ref} = spawn_monitor(fun() ->
                                       [To ! {item, I, binary:copy(<<"x">>, 1000)}
                                        || I <- lists:seq(1, N)],
                                       erlang:garbage_collect()
                               end),
    receive {'DOWN', Ref, process, Pid, _} -> ok end.

router() ->
    receive
        {item, _, _Bin} -> router();  % routed nowhere, dropped: the reference stays until a GC
        {sync, From} -> From ! {synced, self()}, router()
    end.

cache(M) ->
    receive
        {item, I, Bin} -> cache(M#{I => Bin});
        {sync, From} -> From ! {synced, self()}, cache(M)
    end.

%% Keeps one message in 20 (5 %) of the peak; collects once the peak is over.
queue(Q, N) ->
    receive
        {item, I, Bin} when I rem 20 =:= 0 -> queue(queue:in(Bin, Q), N + 1);
        {item, _, _} -> queue(Q, N + 1);
        {sync, From} ->
            erlang:garbage_collect(),
            From ! {synced, self()},
            queue(Q, N)
    end.

worker(Work) ->
    L = lists:seq(1, Work),
    Sum = lists:sum(L),
    receive stop -> Sum end.

produce(To, I) ->
    [To ! {tick, I, K} || K <- lists:seq(1, 10)],
    timer:sleep(2),
    produce(To, I + 1).
