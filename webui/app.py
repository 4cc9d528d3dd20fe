"""The web UI: a Flask app factory, its security rules, and the production server (waitress).

Security (issue 6, must-hold 2): the server binds 127.0.0.1 unless told otherwise, and anywhere
else it requires a token, checked on every request; without a token, only loopback Host headers
are answered (a page on another site cannot reach it through DNS rebinding). Templates escape
every string; a Content-Security-Policy without inline scripts is a second wall. Static assets
are served from memory, so no request path is ever a file path. A request that changes state
(any method but GET and HEAD: an upload) from another origin is refused in every mode, token or
not: without it, any page the operator opened could post a file to a loopback UI (issue 25).
"""

from __future__ import annotations

import hmac
import ipaddress
import os
from typing import Any
from urllib.parse import urlencode, urlsplit

from flask import Flask, Response, current_app, redirect, render_template, request

from beamalloc.errors import InputError
from beamalloc.webui.data import Data

#: Uploads larger than this are refused before they are read (a 64-scheduler snapshot is ~2 MB;
#: crash dumps are larger, but only their allocator sections matter).
UPLOAD_LIMIT = 64 << 20
TOKEN_COOKIE = "beamalloc_token"
LOOPBACK_NAMES = {"localhost", "127.0.0.1", "::1"}

CSP = ("default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
       "img-src 'self' data: blob:; connect-src 'self'; form-action 'self'; "
       "frame-ancestors 'none'; base-uri 'none'")


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def create_app(store_path: str | os.PathLike[str] | None = None, token: str | None = None,
               upload_limit: int = UPLOAD_LIMIT) -> Flask:
    from beamalloc.webui import assets, compare, docs, filters, nodes, snapshots, whatif

    app = Flask(__name__, static_folder=None)
    app.config["MAX_CONTENT_LENGTH"] = upload_limit
    app.config["MAX_FORM_MEMORY_SIZE"] = upload_limit
    app.extensions["beamalloc"] = Data(store_path)
    app.extensions["beamalloc_token"] = token
    app.register_blueprint(assets.bp)
    app.register_blueprint(nodes.bp)
    app.register_blueprint(snapshots.bp)
    app.register_blueprint(compare.bp)
    app.register_blueprint(whatif.bp)
    app.register_blueprint(docs.bp)
    app.before_request(_check_access)
    app.after_request(_headers)
    app.register_error_handler(404, _not_found)
    app.register_error_handler(413, _too_large)
    app.register_error_handler(InputError, _bad_input)
    app.jinja_env.globals["upload_limit"] = upload_limit
    filters.install(app.jinja_env)
    # the pages an operator opens first, compiled now rather than in their first request
    # (~80 ms of a cold nodes page on a loaded machine, issue 28 item 5)
    for name in FIRST_PAGES:
        app.jinja_env.get_template(name)
    return app


#: Templates compiled when the app is made (the first pages and what they extend or include).
FIRST_PAGES = ("base.html", "nodes.html", "node.html", "_node_holders.html")


def _hostname(host: str) -> str:
    """The name part of a Host header: `[::1]:8050` → `::1`, `localhost:8050` → `localhost`."""
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


#: Methods that change nothing: the only ones another origin may send us.
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def _cross_origin() -> bool:
    """Does a state-changing request come from a page of another origin? Browsers say so in
    Sec-Fetch-Site, which decides when present; without it (an older browser), Origin, else
    Referer, must be the UI's own scheme and host:port (`null`, from a sandbox or a data: URL,
    is not). A request with none of them is no browser's (curl, the test client): CSRF needs
    a browser."""
    if request.method in SAFE_METHODS:
        return False
    site = request.headers.get("Sec-Fetch-Site")
    if site is not None:
        return site not in ("same-origin", "none")
    source = request.headers.get("Origin") or request.headers.get("Referer")
    if source is None:
        return False
    try:
        parts = urlsplit(source)
        return (parts.scheme, parts.netloc) != (request.scheme, request.host)
    except ValueError:
        return True


def _check_access() -> Any:
    if _cross_origin():
        return Response("beamalloc serve refuses changes requested by another site's page\n",
                        403, mimetype="text/plain")
    token = current_app.extensions["beamalloc_token"]
    if token is None:
        if not is_loopback(_hostname(request.host)):
            return Response("beamalloc serve answers only to localhost without --token\n",
                            403, mimetype="text/plain")
        return None
    given = request.args.get("token")
    if given is not None and hmac.compare_digest(given.encode(), token.encode()):
        # Trade the URL's token for a cookie, and drop it from the address bar and history.
        rest = [(k, v) for k, v in request.args.items(multi=True) if k != "token"]
        resp = redirect(request.path + ("?" + urlencode(rest) if rest else ""), 303)
        resp.set_cookie(TOKEN_COOKIE, token, httponly=True, samesite="Strict")
        return resp
    auth = request.headers.get("Authorization", "")
    candidates = [request.cookies.get(TOKEN_COOKIE, ""),
                  auth[7:] if auth.startswith("Bearer ") else ""]
    if any(c and hmac.compare_digest(c.encode(), token.encode()) for c in candidates):
        return None
    return Response("token required: open the URL that beamalloc serve printed "
                    "(…/?token=…) or send Authorization: Bearer TOKEN\n", 401,
                    mimetype="text/plain")


def _headers(resp: Response) -> Response:
    resp.headers["Content-Security-Policy"] = CSP
    resp.headers["X-Content-Type-Options"] = "nosniff"
    # same-origin, not no-referrer: under no-referrer a browser's own form POST carries
    # `Origin: null`, which _cross_origin could not tell from a sandboxed attacker's
    resp.headers["Referrer-Policy"] = "same-origin"
    resp.headers.setdefault("Cache-Control", "no-store")
    return resp


def _not_found(e: Exception) -> tuple[str, int]:
    msg = getattr(e, "description", None) or "not found"
    return render_template("error.html", title="Not found", message=msg), 404


def _too_large(e: Exception) -> tuple[str, int]:
    from beamalloc.units import human

    limit = current_app.config["MAX_CONTENT_LENGTH"]
    return render_template("upload.html", error=f"The file is larger than the upload limit "
                           f"of {human(limit)}."), 413


def _bad_input(e: InputError) -> tuple[str, int]:
    return render_template("error.html", title="Bad input", message=str(e)), 400


def serve(store_path: str | None, host: str, port: int, token: str | None) -> None:
    """Run the app under waitress until interrupted."""
    import waitress

    if token is None and not is_loopback(host):
        raise InputError(f"binding {host} exposes the UI to the network: give --token "
                         "(or BEAMALLOC_TOKEN), or bind 127.0.0.1")
    if not 0 < port < 65536:
        raise InputError(f"--port must be between 1 and 65535, got {port}")
    if store_path and os.path.exists(store_path):
        from beamalloc.timeseries.store import Store

        Store(store_path, readonly=True).close()  # a bad store: one line now, not a 500 later
    app = create_app(store_path, token)
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{port}/" + (f"?token={token}" if token else "")
    print(f"beamalloc: serving {store_path or 'no store'} on {url}", flush=True)
    try:
        waitress.serve(app, host=host, port=port, threads=8, ident="beamalloc",
                       clear_untrusted_proxy_headers=True)
    except OSError as e:
        raise InputError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
