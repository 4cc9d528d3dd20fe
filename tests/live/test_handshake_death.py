"""A node that dies during our handshake is said to have died, not to never have existed.

A real node cannot be made to die at that exact moment, so this is the one fault played by a
stand-in: a name registered with the real epmd (as a node does) whose listener, once our hidden
node has connected and sent its name, leaves epmd and then drops the connection: what a node
killed mid-handshake does. Before, the message was "no node named X" (epmd, asked after the
failure, no longer knew it).
"""

from __future__ import annotations

import secrets
import socket
import threading
import time

import pytest

from beamalloc.collector import live
from live.conftest import HOST
from live.epmd_names import register

pytestmark = pytest.mark.live


def test_node_gone_mid_handshake(marker) -> None:
    srv = socket.create_server(("0.0.0.0", 0))
    name = f"t_dying_{secrets.token_hex(3)}"
    reg = register(name, srv.getsockname()[1])
    seen: list[bytes] = []

    def die_in_handshake() -> None:
        conn, _ = srv.accept()
        seen.append(conn.recv(1024))  # the hidden node's send_name
        reg.close()  # the node leaves epmd...
        time.sleep(0.3)
        conn.close()  # ...and the handshake

    t = threading.Thread(target=die_in_handshake, daemon=True)
    t.start()
    try:
        with pytest.raises(live.NodeError) as ei:
            live.snapshot_node(f"{name}@{HOST}", "C" + secrets.token_hex(8), timeout=10)
    finally:
        reg.close()
        srv.close()
    assert seen and b"beamalloc_" in seen[0], "the handshake never began"
    msg = str(ei.value)
    assert msg.startswith(f"node {name}@{HOST} went away during the connection handshake"), msg
    assert "\n" not in msg
