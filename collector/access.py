"""How our hidden node reaches a target that is not run like a test node (docs/access.md).

beamalloc's hidden node is a BEAM of its own (docs/robustness.md, "The design choice"), so
it speaks whatever distribution the target speaks once it is given the same flags the operator
gives their own nodes:

- `proto_dist`: the distribution carrier, `-proto_dist inet_tls` (TLS), `inet6_tcp` (IPv6),
  `inet6_tls`; OTP appends `_dist` to find the module;
- `ssl_dist_optfile`: the TLS option file (`-ssl_dist_optfile`), an Erlang term file of
  `{server, Opts}` and `{client, Opts}`;
- long names need no option: a target whose host has a dot or a colon (an IPv6 address) is a
  long name (`-name`), and our node takes one too (net_kernel refuses to mix the two; a long-named
  node refuses a host without a dot, so `app@localhost` is reached with a short name);
- `epmd_port`: the port epmd listens on (ERL_EPMD_PORT), here and on the target's host;
- `dist_port`: the target runs without epmd (`-start_epmd false -erl_epmd_port P`): connect to
  port P directly, through collector/erlang/beamalloc_epmd.erl.

The CLI builds one Access per run (from_args(), kept in its Context) and passes it to every
collector call; library callers may pass one to live.snapshot_node() or session.Session().
Without one, the BEAMALLOC_* environment variables below are read (current(); and
ERL_EPMD_PORT, which the hidden node inherits as any erl would).

The TLS option file and the files it names are read here, by the user running beamalloc, and
copied into the hidden node's private directory (prepare_tls()): run as root, the hidden node runs
as `nobody` and could not read them where they are, and the operator's files are never made
readable by anyone else.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, fields
from pathlib import Path

from beamalloc.collector.cookie import Cookie, resolve_cookie
from beamalloc.errors import InputError

ENV_PROTO_DIST = "BEAMALLOC_PROTO_DIST"
ENV_SSL_DIST_OPTFILE = "BEAMALLOC_SSL_DIST_OPTFILE"
ENV_DIST_PORT = "BEAMALLOC_DIST_PORT"
ENV_EPMD_PORT = "ERL_EPMD_PORT"

#: The option file is a handful of lines; anything larger is not one.
MAX_OPTFILE = 1 << 20
#: ssl options whose value is a file the hidden node must read (ssl(3), "Common options").
FILE_OPTIONS = ("certfile", "keyfile", "cacertfile", "dhfile")
_FILE_OPT = re.compile(
    r"\b(" + "|".join(FILE_OPTIONS) + r")(\s*(?:,|=>)\s*)"
    r"(\"(?:[^\"\\]|\\.)*\"|<<\s*\"(?:[^\"\\]|\\.)*\"\s*>>)")
_PROTO = re.compile(r"[a-z][a-z0-9_]*\Z")


class AccessError(InputError):
    """An access option that cannot work (one line, exit 2)."""


@dataclass(frozen=True)
class Access:
    proto_dist: str | None = None
    ssl_dist_optfile: str | None = None
    epmd_port: int | None = None
    dist_port: int | None = None
    #: --cookie-file (None: the environment's sources, collector/cookie.py); read by cookie()
    cookie_file: str | None = None
    #: the cookie, once cookie() has read it: never shown (repr) nor compared
    _cookie: Cookie | None = field(default=None, init=False, repr=False, compare=False)

    def cookie(self) -> Cookie:
        """The cookie to present to the targets, resolved once for this Access: the CLI's
        Context carries one Access, so every collector call of one command presents the one
        cookie read once (a cookie file rewritten meanwhile does not change it mid-command)."""
        if self._cookie is None:
            object.__setattr__(self, "_cookie", resolve_cookie(self.cookie_file))
        assert self._cookie is not None
        return self._cookie

    def __post_init__(self) -> None:
        if self.proto_dist is not None and not _PROTO.match(self.proto_dist):
            raise AccessError(f"--proto-dist takes a module prefix such as inet_tls or "
                              f"inet6_tcp, got {self.proto_dist!r}")
        if self.proto_dist and self.proto_dist.endswith("_dist"):
            raise AccessError(f"--proto-dist takes the prefix without _dist (as erl's "
                              f"-proto_dist does): {self.proto_dist[:-5]}")
        for what, port in (("--epmd-port", self.epmd_port), ("--dist-port", self.dist_port)):
            if port is not None and not 0 < port < 65536:
                raise AccessError(f"{what} takes a TCP port (1-65535), got {port}")
        if self.ssl_dist_optfile and not self.tls:
            raise AccessError(f"--ssl-dist-optfile is for TLS distribution, not "
                              f"--proto-dist {self.proto_dist}")

    @property
    def proto(self) -> str:
        """The carrier: inet_tcp unless told, inet_tls when only an option file is given."""
        return self.proto_dist or ("inet_tls" if self.ssl_dist_optfile else "inet_tcp")

    @property
    def tls(self) -> bool:
        return self.proto.endswith("_tls")

    @property
    def ipv6(self) -> bool:
        return self.proto.startswith("inet6")

    def describe(self) -> str:
        """What a failed connection used, for its message: 'over inet_tls, epmd-less port P'."""
        parts = [] if self.proto == "inet_tcp" else [f"over {self.proto}"]
        if self.dist_port:
            parts.append(f"epmd-less, port {self.dist_port}")
        elif self.epmd_port:
            parts.append(f"epmd port {self.epmd_port}")
        return ", ".join(parts)


def is_long_host(host: str) -> bool:
    """A dotted host or an IPv6 address is a long name's host (`erl -name`)."""
    return "." in host or ":" in host


def _port(value: str, name: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise AccessError(f"${name} must be a TCP port number, got {value[:20]!r}") from None


def from_env(env: dict[str, str] | None = None) -> Access:
    env = dict(os.environ) if env is None else env
    epmd = env.get(ENV_EPMD_PORT, "").strip()
    dist = env.get(ENV_DIST_PORT, "").strip()
    return Access(
        proto_dist=env.get(ENV_PROTO_DIST, "").strip() or None,
        ssl_dist_optfile=env.get(ENV_SSL_DIST_OPTFILE, "").strip() or None,
        epmd_port=_port(epmd, ENV_EPMD_PORT) if epmd else None,
        dist_port=_port(dist, ENV_DIST_PORT) if dist else None,
    )


def current() -> Access:
    """The access of a caller that passed none: the environment's (no state of this module;
    the CLI passes its Context's Access explicitly)."""
    return from_env()


def merge(base: Access, **given: object) -> Access:
    """`base` with the options given on a command line (None: not given) in its place."""
    mine = {f.name: getattr(base, f.name) for f in fields(base) if f.init}
    return Access(**{**mine, **{k: v for k, v in given.items() if v is not None}})


def from_args(args: object) -> Access:
    """The access of a CLI run: `--proto-dist`, `--ssl-dist-optfile`, `--epmd-port`,
    `--dist-port`, `--cookie-file` (argparse dests of the same names; absent or None: not
    given) over the environment's."""
    return merge(from_env(), **{k: getattr(args, k, None) for k in
                                ("proto_dist", "ssl_dist_optfile", "epmd_port", "dist_port",
                                 "cookie_file")})


# ---- the hidden node's side --------------------------------------------------------------

def node_args(access: Access, tls_optfile: str | None) -> list[str]:
    """erl arguments for the hidden node (before -run); `tls_optfile`: our private copy."""
    args: list[str] = []
    if access.proto != "inet_tcp":
        args += ["-proto_dist", access.proto]
    if tls_optfile:
        args += ["-ssl_dist_optfile", tls_optfile]
    if access.dist_port:
        args += ["-epmd_module", "beamalloc_epmd", "-beamalloc_dist_port", str(access.dist_port)]
    return args


def node_env(access: Access) -> dict[str, str]:
    return {ENV_EPMD_PORT: str(access.epmd_port)} if access.epmd_port else {}


def loopback(access: Access) -> str:
    """The interface our node accepts connections on, as an Erlang tuple (nobody needs to
    reach us)."""
    return "{0,0,0,0,0,0,0,1}" if access.ipv6 else "{127,0,0,1}"


def prepare_tls(access: Access, into: Path, owner: tuple[int, int] | None) -> str | None:
    """Copy the TLS option file and every file it names into `into` (created, 0700, owned by
    `owner` when the node runs as another user), the copy naming the copies; return the
    copy's path, or None without TLS options.

    Read by us, as the user running beamalloc; relative paths are taken from our working
    directory (the hidden node's is /). A file that cannot be read is one line, exit 2.
    """
    src = access.ssl_dist_optfile
    if not src:
        return None
    path = Path(src).expanduser()
    text = _read(path, "the TLS option file").decode("utf-8", "replace")
    into.mkdir(mode=0o700)
    copies: list[Path] = []

    def copy(m: re.Match[str]) -> str:
        key, sep, lit = m.group(1), m.group(2), m.group(3)
        binary = lit.startswith("<<")
        inner = lit[lit.index('"') + 1:lit.rindex('"')]
        name = re.sub(r"\\(.)", r"\1", inner)
        target = Path(name).expanduser()
        if not target.is_absolute():
            target = Path.cwd() / target
        data = _read(target, key, f" (named in the TLS option file {path})")
        dest = into / f"{len(copies)}-{key}.pem"
        dest.write_bytes(data)
        copies.append(dest)
        quoted = '"' + str(dest).replace("\\", "\\\\").replace('"', '\\"') + '"'
        return f"{key}{sep}{'<<' + quoted + '>>' if binary else quoted}"

    out = _FILE_OPT.sub(copy, text)
    optfile = into / "ssl_dist.conf"
    optfile.write_text(out, encoding="utf-8")
    copies.append(optfile)
    for f in copies:
        os.chmod(f, 0o400)
    if owner is not None:
        for f in (into, *copies):
            os.chown(f, *owner)
    return str(optfile)


def _read(path: Path, what: str, where: str = "") -> bytes:
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_OPTFILE + 1)
    except FileNotFoundError:
        raise AccessError(f"{what} {path} does not exist{where}") from None
    except IsADirectoryError:
        raise AccessError(f"{what} {path} is a directory{where}") from None
    except OSError as e:
        raise AccessError(f"cannot read {what} {path}{where}: {e.strerror}") from None
    if len(data) > MAX_OPTFILE:
        raise AccessError(f"{what} {path} is over {MAX_OPTFILE >> 20} MiB{where}: not a TLS "
                          "option file or certificate")
    return data
