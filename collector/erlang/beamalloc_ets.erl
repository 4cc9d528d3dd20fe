%% beamalloc_ets: the ETS tables of a target, read-only (docs/erts/memory-categories.md §2).
%%
%% Runs on OUR hidden node, never on the target, like beamalloc_procs. Started as
%%   erl -hidden ... -run beamalloc_ets main Target DeadlineMs MaxTables Top
%% with the cookie on stdin (beamalloc_link). On the target only BIFs run, inside the processes
%% erpc spawns there: ets:all/0, erlang:system_info(wordsize), erlang:memory(ets), and
%% ets:info/1 of each table through lists:map with an external fun (no code of ours is loaded
%% there); the owners of the reported tables are named by erlang:pid_to_list/1 on the target,
%% so a pid reads as the target itself writes it. Nothing is written to any table, none is
%% fixed or traversed. Prints one line "BEAMALLOC-RESULT " ++ base64(term_to_binary(Reply)):
%% {ok, [{count, N}, {read, R}, {words, W}, {wordsize, Ws}, {memory_ets, Bytes},
%%       {tables, [{Name, Id, Owner, Type, Words, Objects, Protection}]}]}, the Top largest
%% tables of the first MaxTables; tables deleted meanwhile are left out of `read`.
-module(beamalloc_ets).
-export([main/1]).

-define(CHUNK, 2000).
-define(TEXT, 100).

main([TargetS, DeadlineS, MaxS, TopS]) ->
    Deadline = list_to_integer(DeadlineS),
    Target = list_to_atom(TargetS),
    Work = fun() -> scan(Target, list_to_integer(MaxS), list_to_integer(TopS)) end,
    Reply = try beamalloc_link:one_shot(Target, Deadline, Work)
            catch C:R -> {error, agent_crash,
                          iolist_to_binary(io_lib:format("~0p:~0P", [C, R, 12]))}
            end,
    beamalloc_link:reply_and_quit(Reply).

scan(Target, Max, Top) ->
    WsReq = erpc:send_request(Target, erlang, system_info, [wordsize]),
    MemReq = erpc:send_request(Target, erlang, memory, [ets]),
    All = beamalloc_procs:call(Target, ets, all, []),
    Read = lists:sublist(All, Max),
    Reqs = [erpc:send_request(Target, lists, map, [fun ets:info/1, C]) || C <- chunks(Read)],
    Infos = lists:append([beamalloc_procs:response(R) || R <- Reqs]),
    Rows = [row(I) || I <- Infos, is_list(I)],
    Largest = lists:sublist(lists:reverse(lists:keysort(5, Rows)), Top),
    Owners = beamalloc_procs:call(Target, lists, map, [fun erlang:pid_to_list/1,
                                       [O || {_, _, O, _, _, _, _} <- Largest]]),
    Tables = [{N, Id, list_to_binary(O), T, W, S, P}
              || {{N, Id, _, T, W, S, P}, O} <- lists:zip(Largest, Owners)],
    {ok, [{count, length(All)}, {read, length(Rows)},
          {words, lists:sum([W || {_, _, _, _, W, _, _} <- Rows])},
          {wordsize, beamalloc_procs:response(WsReq)},
          {memory_ets, beamalloc_procs:response(MemReq)}, {tables, Tables}]}.

row(I) ->
    {text(proplists:get_value(name, I)), text(proplists:get_value(id, I)),
     proplists:get_value(owner, I), proplists:get_value(type, I),
     proplists:get_value(memory, I), proplists:get_value(size, I),
     proplists:get_value(protection, I)}.

%% A name or id as text, bounded (a table id is a reference on OTP 21+).
text(X) -> iolist_to_binary(string:slice(io_lib:format("~0p", [X]), 0, ?TEXT)).

chunks([]) -> [];
chunks(L) when length(L) =< ?CHUNK -> [L];
chunks(L) -> {H, T} = lists:split(?CHUNK, L), [H | chunks(T)].

