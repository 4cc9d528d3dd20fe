"""The docs the output cites, linked from the web UI and the report (issue 15 item 5):
webui/docs.py serves the shipped documents with each heading's anchor; the snapshot page's
citations link there, the static report's to the installed files."""

from __future__ import annotations

import io
import re
from html import unescape

import pytest
from recommend_fixtures import SNAPS

from beamalloc import citations
from beamalloc.webui import docs
from beamalloc.webui.app import create_app


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    return create_app(tmp_path_factory.mktemp("d") / "w.db").test_client()


def _upload(client, name: str) -> str:
    data = (SNAPS / f"{name}.json").read_bytes()
    r = client.post("/upload", data={"file": (io.BytesIO(data), f"{name}.json")})
    return client.get(r.headers["Location"]).text


@pytest.mark.parametrize("name", ["frag", "heapchurn"])
def test_every_cited_doc_link_on_a_page_lands_on_its_section(client, name: str) -> None:
    page = _upload(client, name)
    links = set(re.findall(r'href="(/docs/[^"#]+)(?:#([^"]+))?"', page))
    assert links, "the page links no cited document"
    for path, anchor in links:
        r = client.get(unescape(path))
        assert r.status_code == 200, path
        if anchor:
            assert f'id="{anchor}"' in r.text, (path, anchor)


def test_the_served_docs_are_the_shipped_ones_and_nothing_else(client) -> None:
    tuning = "docs/erts/tuning.md".removeprefix("docs/")  # as the page names it
    assert tuning in docs.index() and "docs/processes.md".removeprefix("docs/") in docs.index()
    for bad in ("../setup.cfg", "..%2Fsetup.cfg", "erts/../../README", "nope.txt",
                "/etc/passwd", "erts"):
        assert client.get(f"/docs/{bad}", follow_redirects=True).status_code == 404, bad
    page = client.get(f"/docs/{tuning}").text
    heads = [citations.heading(ln) for ln in
             (citations.DOCS_DIR / tuning).read_text().splitlines()]
    for _, text in filter(None, heads):  # every heading carries the anchor citations gives it
        assert f'id="{citations.slug(text)}"' in page


def test_the_report_links_the_installed_files(tmp_path) -> None:
    from beamalloc.analyzer.analysis import analyze
    from beamalloc.collector.sources import read_file
    from beamalloc.htmlreport.html import write_report

    snap = read_file(str(SNAPS / "frag.json"))
    out = tmp_path / "r.html"
    write_report([analyze(snap)], str(out), snapshots=[snap])
    links = re.findall(r'href="(file://[^"#]+)', out.read_text())
    assert links and all(u.startswith(citations.DOCS_DIR.as_uri()) for u in links), links[:3]


def test_markdown_is_rendered_not_shown(client) -> None:
    """Tables, emphasis and code render as HTML (issue 26 item 4): no `| --- |` row, no literal
    `**`, a wide table in its scrolling box; a document's raw HTML is escaped, never run."""
    page = client.get("/docs/recommend.md").text
    article = page[page.index('<article class="doc">'):page.index("</article>")]
    assert '<div class="table-scroll"><table>' in article and "<th>" in article
    assert "|---|" not in article.replace(" ", "") and "**" not in article
    assert "<code>" in article and "<strong>" in article
    md = "page" + ".md"  # not a citation of ours
    html = docs.render(md, "# T\n\n<script>alert(1)</script> [a](javascript:alert(1))\n")
    assert "<script>" not in html and "javascript:" not in html.split("href=")[-1][:20]
    assert docs.render("t.tsv", "a\t<b>") == "<pre>a\t&lt;b&gt;</pre>"
