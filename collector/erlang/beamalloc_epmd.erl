%% beamalloc_epmd: the epmd module of our hidden node when the target runs without epmd
%% (docs/access.md, "epmd-less targets").
%%
%% A node started with `-start_epmd false -erl_epmd_port P` listens on port P and registers with
%% no epmd, so asking its host's epmd for its port finds nothing. beamalloc passes that port as
%% `-beamalloc_dist_port P` and this module (`-epmd_module beamalloc_epmd`) answers P for every
%% node we connect to: the nodes of an epmd-less cluster all listen on the one port they were
%% given. Everything else is kernel's erl_epmd: our own node still registers its pooled name with
%% the epmd of our host (beamalloc_link picks a name epmd does not list), and listens on a port
%% of its own (not P, which the target may hold on this very host).
-module(beamalloc_epmd).
-export([start_link/0, register_node/2, register_node/3, port_please/2, port_please/3,
         listen_port_please/2, names/0, names/1, address_please/3, dist_port/0]).

%% The distribution handshake version the port answer carries: 6, that of OTP 23 and later
%% (OTP 26 made it the only one).
-define(DIST_VERSION, 6).

start_link() -> erl_epmd:start_link().

register_node(Name, Port) -> erl_epmd:register_node(Name, Port).

register_node(Name, Port, Family) -> erl_epmd:register_node(Name, Port, Family).

port_please(Name, Host) -> port_please(Name, Host, infinity).

port_please(Name, Host, Timeout) ->
    case dist_port() of
        undefined -> erl_epmd:port_please(Name, Host, Timeout);
        Port -> {port, Port, ?DIST_VERSION}
    end.

%% Our own listen port: chosen by the OS, as without this module (erl_epmd would answer P
%% when -erl_epmd_port is set, which we never set on our node).
listen_port_please(Name, Host) -> erl_epmd:listen_port_please(Name, Host).

names() -> erl_epmd:names().

names(Host) -> erl_epmd:names(Host).

address_please(Name, Host, Family) -> erl_epmd:address_please(Name, Host, Family).

%% The target's port from `-beamalloc_dist_port P`, or undefined.
dist_port() ->
    case init:get_argument(beamalloc_dist_port) of
        {ok, [[P]]} -> list_to_integer(P);
        _ -> undefined
    end.
