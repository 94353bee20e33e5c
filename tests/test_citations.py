"""Deep links (docs/sources.md#deep-links): Confluence heading anchors as
Cloud and Data Center build them, matched to the chunker's headings, checked against the
anchors the local Confluence API renders; files cite their `file://` URL, a PDF its page.
The flow's payloads are checked in tests/test_flow.py (full run)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from config.settings import ChunkingSettings, LimitsSettings
from connectors.base import DocumentRef, SourceDocument
from connectors.confluence import ConfluenceConnector
from connectors.confluence.anchors import PageHeading, match_headings, page_headings
from connectors.confluence.comments import COMMENTS_OPENING
from connectors.confluence.settings import ConfluenceSettings
from tasks.stages import chunk_normalized, local_file_source, normalize_source
from testkit.confluence_api import FakeConfluence, build_fixture, confluence_api, rendered_anchors
from tests.fixtures_pdf import plain_pdf
from tests.test_confluence_connector import connector

__all__ = ["confluence_api"]  # the fixture factory, used by name below

Factory = Callable[..., FakeConfluence]
LIMITS = LimitsSettings()  # type: ignore[call-arg]


def anchors(storage: str, *, cloud: bool, title: str = "Install Guide") -> list[str | None]:
    return [h.anchor for h in page_headings(storage, cloud=cloud, title=title)]


def test_cloud_anchors_keep_case_and_punctuation_with_dashes_for_spaces() -> None:
    storage = (
        "<h1>Release Notes (2.0)</h1><h2>Установка  пакета</h2><h2>Notes</h2>"
        "<table><tr><td><h3>Notes</h3></td></tr></table><h2>Notes</h2>"
        '<h2>Step <ac:structured-macro ac:name="anchor"><ac:parameter ac:name="">x'
        "</ac:parameter></ac:structured-macro>one</h2>"
        '<ac:structured-macro ac:name="code"><ac:plain-text-body><![CDATA[<h2>not one</h2>]]>'
        "</ac:plain-text-body></ac:structured-macro>"
        "<h4>Tom &amp; <em>Jerry</em>&nbsp;show</h4><h2>?!</h2><h2>\N{ROCKET}</h2><h2> </h2>"
    )
    assert anchors(storage, cloud=True) == [
        "Release-Notes-(2.0)",
        "Установка-пакета",
        "Notes",
        "Notes.1",  # a heading in a table counts too
        "Notes.2",
        "x",  # its anchor macro's
        "Tom-&-Jerry-show",
        None,  # only punctuation
        None,  # only an emoji
        None,  # empty
    ]


def test_data_center_anchors_prefix_the_title_and_drop_whitespace() -> None:
    storage = (
        "<h2>Step 1</h2><h2>Известные проблемы</h2><h3>Step 1</h3><h2>(a) b-c</h2>"
        + md2conf_heading("h2", "step-1", "Step 1")
        + "<h2>Step 1</h2>"
    )
    assert anchors(storage, cloud=False) == [
        "InstallGuide-Step1",
        "InstallGuide-Известныепроблемы",
        "InstallGuide-Step1.1",
        "InstallGuide-(a)b-c",
        "InstallGuide-step-1",  # its anchor macro's
        "InstallGuide-Step1.3",  # the heading with the macro kept its generated id
    ]


def md2conf_heading(tag: str, anchor: str, text: str) -> str:
    """A heading as md2conf publishes it with heading anchors on: an anchor macro first."""
    return (
        f'<{tag}><ac:structured-macro ac:name="anchor" ac:schema-version="1">'
        f'<ac:parameter ac:name="">{anchor}</ac:parameter></ac:structured-macro>{text}</{tag}>'
    )


@pytest.mark.parametrize("layout", ["cloud", "dc"])
def test_headings_with_anchor_macros_cite_the_macro_the_page_shows(
    confluence_api: Factory, layout: str, chunking_settings: ChunkingSettings
) -> None:
    api = confluence_api(layout)
    api.add_space("ENG", "Engineering")
    body = (
        md2conf_heading("h1", "agent-setup", "Agent setup")
        + "<p>Set the agent up once per host.</p>"
        + md2conf_heading("h2", "install-the-agent", "Install the <em>agent</em>")
        + "<p>"
        + "Run the installer as root and wait for the service to start. " * 25
        + "</p>"
        + md2conf_heading("h2", "configure", "Configure")
        + "<p>"
        + "Edit the agent file and restart the service after each change. " * 25
        + "</p>"
    )
    page_id = api.add_page("ENG", "Agent Setup", body)
    conn = connector(api, spaces=["ENG"])
    ref = next(r for r in conn.list_refs().refs if r.document_id == page_id)
    page = conn.fetch(ref)
    document = chunk_normalized(
        page, normalize_source(page, LIMITS), chunking_settings, "default", conn
    )
    shown = rendered_anchors(api, page_id)
    prefix = "" if layout == "cloud" else "AgentSetup-"
    cited = {
        chunk.headings_path[-1]: unquote(urlsplit(chunk.citation_url or "").fragment)
        for chunk in document.chunks
    }
    assert cited == {
        "Agent setup": prefix + "agent-setup",
        "Install the *agent*": prefix + "install-the-agent",
        "Configure": prefix + "configure",
    }
    assert set(cited.values()) <= shown


def test_markdown_headings_find_their_page_heading_in_order() -> None:
    page = [
        PageHeading("Install pkg on Linux", "a"),
        PageHeading("Notes", "b"),
        PageHeading("Notes", "c"),  # in a table: not a Markdown heading
        PageHeading("Notes", "d"),
    ]
    markdown = ["Install `pkg` on [Linux](http://x)", "Notes", "Notes", "Comments", "Notes"]
    # the appended comments section and anything past the page's headings cite the page
    assert match_headings(page, markdown) == ["a", "b", "c", None, "d"]


def test_headings_in_comment_bodies_never_take_a_page_heading() -> None:
    conn = ConfluenceConnector(
        ConfluenceSettings.model_validate(
            {"url": "https://acme.atlassian.net/wiki", "username": "me@acme.com"}
        ),
        "t0ken",
    )
    body = "<h2>Scope</h2><table><tr><td><h3>Risks</h3></td></tr></table>"
    page = SourceDocument(
        ref=DocumentRef("1", "1", "confluence", kind="page"),
        data=(body + COMMENTS_OPENING + "<p>bob:</p><h3>Risks</h3>").encode(),
        filename="p.confluence",
        source_url="https://acme.atlassian.net/wiki/spaces/X/pages/1/P",
        title="P",
    )
    links = conn.heading_links(page, ["Scope", "Comments", "Risks"])
    assert links == [f"{page.source_url}#Scope", None, None]


@pytest.mark.parametrize("layout", ["cloud", "dc"])
def test_every_chunk_of_a_page_cites_an_anchor_the_page_shows(
    confluence_api: Factory, layout: str, chunking_settings: ChunkingSettings
) -> None:
    api = confluence_api(layout)
    fx = build_fixture(api)
    api.add_comment(fx["notes"], "<h2>Highlights</h2><p>Also the docs got better.</p>")
    conn = connector(api)
    refs = {ref.document_id: ref for ref in conn.list_refs().refs}
    page = conn.fetch(refs[fx["notes"]])
    assert page.breadcrumbs == ("Engineering", "Engineering Home", "Release Notes")
    assert conn.fetch(refs[fx["txt"]]).breadcrumbs == (*page.breadcrumbs, "changelog.txt")
    assert [w.split(" has ")[0] for w in page.warnings] == ["heading '?!'", "heading '🚀'"]
    document = chunk_normalized(
        page, normalize_source(page, LIMITS), chunking_settings, "default", conn
    )
    shown = rendered_anchors(api, fx["notes"])
    assert len(shown) == 6
    cited: set[str] = set()
    for chunk in document.chunks:
        url = urlsplit(chunk.citation_url or "")
        assert chunk.citation_url and chunk.citation_url.startswith(page.source_url or "-")
        assert chunk.breadcrumbs == page.breadcrumbs
        nearest = chunk.headings_path[-1] if chunk.headings_path else None
        if nearest in (None, "?!", "\N{ROCKET}", "Comments") or "Comments" in chunk.headings_path:
            assert not url.fragment, (chunk.headings_path, chunk.citation_url)
        else:
            assert unquote(url.fragment) in shown, (chunk.headings_path, chunk.citation_url)
            cited.add(unquote(url.fragment))
    # the sections that are chunks of their own, the second "Notes" counted after the one
    # in the table (which the Markdown shows as a table cell)
    assert len(cited) >= 4 and any(
        anchor.endswith("-Notes.2") or anchor == "Notes.2" for anchor in cited
    )


def test_files_cite_their_url_and_a_pdf_its_page(
    tmp_path: Path, chunking_settings: ChunkingSettings
) -> None:
    pdf = tmp_path / "report.pdf"
    pdf.write_bytes(plain_pdf(40))
    source = local_file_source(pdf)
    document = chunk_normalized(
        source, normalize_source(source, LIMITS), chunking_settings, "default"
    )
    assert {chunk.page_start for chunk in document.chunks} > {1}
    for chunk in document.chunks:
        assert chunk.citation_url == f"{pdf.resolve().as_uri()}#page={chunk.page_start}"
        assert chunk.breadcrumbs == ("report.pdf",)
    text = tmp_path / "notes.md"
    text.write_text("# Notes\n\nPlain text.\n")
    source = SourceDocument(
        ref=local_file_source(text).ref,
        data=text.read_bytes(),
        filename="notes.md",
        file_path=str(text),
        breadcrumbs=("docs", "team", "notes.md"),
    )
    (chunk,) = chunk_normalized(
        source, normalize_source(source, LIMITS), chunking_settings, "default"
    ).chunks
    assert chunk.citation_url == text.resolve().as_uri()  # no anchors for files
    assert chunk.breadcrumbs == ("docs", "team", "notes.md")
