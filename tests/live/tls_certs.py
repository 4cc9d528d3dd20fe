"""Certificates for TLS distribution tests, made with openssl (docs/access.md, "TLS
distribution"): a CA and one node certificate for this host (the same one serves both ends, as in
many clusters), the key 0600 as openssl writes it, and an option file that verifies both peers,
so that a client without the certificate is refused."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_tls(d: Path, host: str) -> dict[str, Path]:
    """{"dir", "optfile", "key"} in directory `d`."""
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
             "ca.pem", "-days", "2", "-subj", "/CN=beamalloc test CA", cwd=d)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "node.key", "-out", "node.csr",
             "-subj", f"/CN={host}", cwd=d)
    (d / "ext.cnf").write_text(f"subjectAltName=DNS:{host},DNS:localhost,IP:127.0.0.1,IP:::1\n")
    _openssl("x509", "-req", "-in", "node.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", "node.pem", "-days", "2", "-extfile", "ext.cnf", cwd=d)
    os.chmod(d / "node.key", 0o600)
    common = (f'{{certfile, "{d}/node.pem"}}, {{keyfile, "{d}/node.key"}}, '
              f'{{cacertfile, "{d}/ca.pem"}}, {{verify, verify_peer}}')
    (d / "dist.conf").write_text(
        f"[{{server, [{common}, {{fail_if_no_peer_cert, true}}]}},\n"
        f" {{client, [{common}]}}].\n")
    return {"dir": d, "optfile": d / "dist.conf", "key": d / "node.key"}
