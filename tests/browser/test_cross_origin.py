"""A page of another origin posts to the web UI, in a real Chromium (issue 25 item 9): in
no-token loopback mode the upload used to be accepted, so any page the operator opened could
send the UI a decompression bomb. The browser's own request, with the headers Chromium really
sends (Sec-Fetch-Site, Origin), must get the 403; the same form on the UI's own origin works."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

import pytest
from selenium.webdriver.common.by import By

from .pages import wait_for

pytestmark = pytest.mark.slow


@pytest.fixture
def evil_site(server: str) -> Iterator[str]:
    """A page on another port (another origin, the same site) whose form posts to the UI."""
    page = (f'<!doctype html><form id="f" method="post" enctype="multipart/form-data" '
            f'action="{server}/upload"><textarea name="file">x</textarea></form>'
            '<script>document.getElementById("f").submit()</script>').encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *args: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/"
    srv.shutdown()
    srv.server_close()


def test_a_cross_origin_form_post_is_refused(browser, server, evil_site):
    browser.get(evil_site)
    wait_for(browser, f"return location.href.startsWith('{server}/upload')")
    body = browser.find_element(By.TAG_NAME, "body").text
    assert "refuses changes requested by another site's page" in body
