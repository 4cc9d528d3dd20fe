"""Options several subcommands share: their arguments, help texts and value types. Defaults the
parser shows come from beamalloc/limits.py, so building the parser imports no stage."""

from __future__ import annotations

import argparse

from beamalloc.limits import MAX_CARRIERS, MAX_PROCESSES

#: `analyze` and `recommend` are short by default (issue 26 item 2).
DETAILS_HELP = "print every table and section, not only the answer and what it rests on"

#: "Numbers are human (MiB with the bytes on request)" (issue 26 item 2).
BYTES_HELP = ("print the exact bytes beside each size of the tables and notes, 155.2 MiB "
              "(162,738,176 B); the answer's first lines stay as they are")

SOURCE_HELP = (
    "a node name (app@host) or a file: beamalloc JSON, a recon_alloc snapshot "
    "file, an allocator dump, an erl_crash.dump or a `beamalloc snippet` file ('-' reads "
    "standard input)"
)


def non_negative(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {n}")
    return n


def positive(text: str) -> int:
    n = non_negative(text)
    if n == 0:
        raise argparse.ArgumentTypeError("must be 1 or more, got 0")
    return n


def process_options(p: argparse.ArgumentParser, probe: bool = True) -> None:
    """Who holds the memory (docs/processes.md): a live node's processes are read, read-only,
    unless --no-processes; --gc-probe is the one option that changes the node."""
    p.add_argument("--no-processes", action="store_true", help="do not read the processes (nor "
                   "the ETS tables) of a live node or the process sections of a crash dump")
    p.add_argument("--max-processes", type=positive, default=MAX_PROCESSES, metavar="N",
                   help=f"read at most N processes of a live node: the registered ones and a "
                   f"fair sample of the rest (default {MAX_PROCESSES:,})")
    if probe:
        p.add_argument("--gc-probe", type=non_negative, default=0, metavar="N",
                       help="CHANGES THE NODE: garbage-collect its N strongest idle holders, one "
                       "at a time, and measure what each releases (default 0: none)")


def node_options(p: argparse.ArgumentParser) -> None:
    """How to reach a node: its cookie, patience, how much to read, and the distribution's
    transport. A command with these options may connect (main() then builds its access)."""
    p.add_argument(
        "--cookie-file",
        metavar="FILE",
        help="file holding the Erlang cookie (else $BEAMALLOC_COOKIE, "
        "else ~/.erlang.cookie); the cookie never appears in argv or output",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=10.0,
        metavar="S",
        help="give up on a node after this many seconds (default 10)",
    )
    p.add_argument(
        "--max-carriers",
        type=non_negative,
        default=MAX_CARRIERS,
        metavar="N",
        help="read at most N carriers of a live node with OTP's instrument:carriers/1, "
        f"whole allocator instances, largest first (default {MAX_CARRIERS}; 0: none)",
    )
    # How our hidden node reaches the node (docs/access.md); else $BEAMALLOC_PROTO_DIST,
    # $BEAMALLOC_SSL_DIST_OPTFILE, $ERL_EPMD_PORT, $BEAMALLOC_DIST_PORT.
    p.add_argument("--proto-dist", metavar="MOD", help="the node's -proto_dist: inet_tls (TLS), "
                   "inet6_tcp (IPv6), inet6_tls (default inet_tcp)")
    p.add_argument("--ssl-dist-optfile", metavar="FILE", help="the TLS option file the node's "
                   "cluster uses (-ssl_dist_optfile); alone, it means --proto-dist inet_tls")
    p.add_argument("--epmd-port", type=int, metavar="PORT",
                   help="epmd listens on PORT, here and on the node's host (ERL_EPMD_PORT)")
    p.add_argument("--dist-port", type=int, metavar="PORT", help="the node runs without epmd "
                   "(-start_epmd false -erl_epmd_port PORT): connect to PORT directly")
