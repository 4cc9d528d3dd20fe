"""Hold a name in epmd from Python (its ALIVE2_REQ), as a node does while it is up.

Used to take beamalloc's pooled names before it runs, and to stand for a node that dies in the
middle of our handshake: epmd lists the name and hands out its port for as long as the
registering connection stays open (the epmd protocol, erts/doc "Distribution Protocol").
"""

from __future__ import annotations

import socket
import struct


def register(name: str, port: int, hidden: bool = False) -> socket.socket:
    """Register `name` at `port` with the local epmd; the name is listed until the socket is
    closed. Raises RuntimeError when epmd refuses (the name is taken)."""
    s = socket.create_connection(("127.0.0.1", 4369), timeout=5)
    body = (struct.pack(">BHBBHH", 120, port, 72 if hidden else 77, 0, 6, 5)
            + struct.pack(">H", len(name)) + name.encode() + struct.pack(">H", 0))
    s.sendall(struct.pack(">H", len(body)) + body)
    head = s.recv(2)
    if len(head) < 2 or head[0] not in (118, 121) or head[1] != 0:
        s.close()
        raise RuntimeError(f"epmd refused {name}: {head!r}")
    return s
