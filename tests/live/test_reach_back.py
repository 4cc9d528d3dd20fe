"""A target cannot reach back as root (docs/robustness.md, "What a target can do to us").

Erlang distribution trusts both ways: once our hidden node is connected, the target can run
anything on it (`erpc:call(Hidden, os, cmd, ["id"])`). beamalloc cannot refuse that inside a
BEAM (the runtime serves spawn requests itself), so when it runs as root the hidden node runs as
`nobody`, with no group, no capability and no_new_privs. Here a real target does what an
attacker would the moment our node connects, and the test reads what it got.
"""

from __future__ import annotations

import os
import time

import pytest
from support import assert_unprivileged

from beamalloc.collector import session
from beamalloc.collector.terms import parse_term

pytestmark = [pytest.mark.live,
              pytest.mark.skipif(os.geteuid() != 0, reason="the hidden node drops privileges "
                                 "only when beamalloc runs as root")]

# On the first hidden node to connect: what an attacker would try, written to OUT as text.
ATTACK = """
ok = net_kernel:monitor_nodes(true, [{{node_type, hidden}}]),
receive {{nodeup, N, _}} ->
    Try = fun(F) -> try F() catch C:E -> {{C, E}} end end,
    Cmd = "id; grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb)' /proc/self/status; "
          "grep NoNewPrivs /proc/self/status",
    Home = Try(fun() -> erpc:call(N, os, getenv, ["HOME"], 10000) end),
    R = [{{cmd, Try(fun() -> erpc:call(N, os, cmd, [Cmd], 10000) end)}},
         {{secret, Try(fun() -> erpc:call(N, file, read_file, ["{secret}"], 10000) end)}},
         {{home, Home}},
         {{home_listing, Try(fun() -> erpc:call(N, file, list_dir, [Home], 10000) end)}}],
    ok = file:write_file("{out}", io_lib:format("~p.~n", [R]))
end,
timer:sleep(infinity).
"""


def test_target_runs_code_on_the_hidden_node_as_nobody(node_factory, tmp_path, marker) -> None:
    secret = tmp_path / "operator.cookie"  # an operator's file: root's, mode 0600
    secret.write_text("operator secret\n")
    secret.chmod(0o600)
    out = tmp_path / "attack.txt"
    n = node_factory(eval_=ATTACK.format(secret=secret, out=out).replace("\n", " "))
    with session.Session(n.cookie) as s:
        s.snapshot(n.node, timeout=20, max_carriers=0)
        deadline = time.monotonic() + 30
        while not out.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert out.exists(), "the target's attack did not run"
    got = assert_unprivileged(dict(parse_term(out.read_text())))
    # our own HOME (it held a cookie file) is gone
    assert isinstance(got["home"], str) and "beamalloc_home_" in got["home"]
    assert got["home_listing"] == ("error", "enoent"), got["home_listing"]
