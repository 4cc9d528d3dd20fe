"""`beamalloc serve`: the web UI over the watch store, uploads and compare (webui/)."""

from __future__ import annotations

import argparse
import os
from typing import Any

from beamalloc.cli.context import Context
from beamalloc.errors import InputError


def add_parser(sub: Any) -> None:
    p = sub.add_parser("serve", help="the web UI over the watch store, uploads and compare")
    p.add_argument("--store", metavar="DB",
                   help="SQLite file written by watch (default $XDG_DATA_HOME/beamalloc/watch.db)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1; anything else needs --token)")
    p.add_argument("--port", type=int, default=8050,
                   help="port to listen on (default 8050; 0: one the OS picks, printed)")
    p.add_argument("--token", metavar="TOKEN",
                   help="required on every request (else $BEAMALLOC_TOKEN); needed off loopback")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, ctx: Context) -> int:
    from beamalloc.timeseries.store import default_path
    from beamalloc.webui.app import serve

    token = args.token or os.environ.get("BEAMALLOC_TOKEN") or None
    port = args.port if args.port != 0 else _free_port(args.host)
    serve(args.store or str(default_path()), args.host, port, token)
    return 0


def _free_port(host: str) -> int:
    """`serve --port 0`: a port the OS picks, as `watch --prometheus HOST:0` does. It is bound
    here and released just before the web server binds it again (the server prints it); should
    another process take it in between, the server says it cannot listen, in one line."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            return int(s.getsockname()[1])
    except OSError as e:
        raise InputError(f"cannot listen on {host}: {e.strerror or e}") from None
