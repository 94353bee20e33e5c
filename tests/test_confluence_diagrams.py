"""Diagrams and pictures on Confluence pages, Cloud and Data Center, through the `ingest`
flow against the local Confluence API: a draw.io diagram, one shown from another page
(`inc-drawio`), a Gliffy diagram and a screenshot are found by words that stand only
inside them, their hits cite the page; diagram attachments and their PNG previews are
no documents of their own; a new version of the diagram alone re-indexes its page and
fetches nothing else; a diagram whose attachment is gone leaves a note and a warning,
and the page still indexes. The connector's incremental poll brings a page whose diagram
changed, and leaves out a shown file over `attachment_max_bytes` with a warning.

The diagrams are real files (tests/corpus/diagrams/drawio, Apache-2.0: draw.io's
examples, among them a Gliffy diagram); the screenshot is text drawn in a real font
(tests/picture_helpers.py) and read by the real tesseract.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from connectors.base import SourceDocument
from connectors.confluence import ConfluenceConnector
from connectors.confluence.settings import ConfluenceSettings
from flows.cli import main
from normalizers.base import normalize_bytes
from normalizers.registry import supported_extensions
from testkit.confluence_api import (
    DRAWIO_MEDIA_TYPE,
    GLIFFY_MEDIA_TYPE,
    FakeConfluence,
    confluence_api,
    drawio_macro,
    gliffy_macro,
    image_markup,
)
from testkit.tiny_model import tiny_model_dir
from tests.picture_helpers import text_picture
from tests.test_flow import Workspace, prefect_api, workspace

# fixtures used by name
__all__ = ["confluence_api", "prefect_api", "tiny_model_dir", "workspace"]

# Every test runs flows on a temporary Prefect API: outside the fast lane.
pytestmark = [pytest.mark.usefixtures("prefect_api"), pytest.mark.slow]

CORPUS = Path(__file__).parent / "corpus" / "diagrams" / "drawio"
BPMN = (CORPUS / "bpmn-translation-process.drawio").read_bytes()
C4 = (CORPUS / "C4.drawio").read_bytes()
FLOWCHART = (CORPUS / "flowchart.drawio.svg").read_bytes()
SWOT = (CORPUS / "Learndrawio.gliffy").read_bytes()
# Words that stand only inside each diagram (its labels), never in a page body.
IN_BPMN = "Translate graphics and format"
IN_C4 = "Sends SMS notifications of problems"
IN_FLOWCHART = "Bulb burned out"
IN_SWOT = "Hierarchical corporate structure"
IN_SCREENSHOT = "Marmalade observatory opens"


def preview_png() -> bytes:
    """A PNG like the preview the apps keep beside a diagram (its pixels are not read)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    pixels = zlib.compress(b"\x00\xff\xff\xff")
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")
    )


def diagram_name(api: FakeConfluence, name: str) -> str:
    """draw.io names the attachment without an extension on Data Center, with `.drawio`
    on Cloud."""
    return f"{name}.drawio" if api.layout == "cloud" else name


def add_diagram(
    api: FakeConfluence, page: str, name: str, data: bytes, media_type: str, when: datetime
) -> str:
    """The diagram's attachment and its PNG preview beside it, as the apps keep them."""
    attachment = api.add_attachment(page, name, data, media_type, when=when)
    api.add_attachment(page, f"{name}.png", preview_png(), "image/png", when=when)
    return attachment


def connector(api: FakeConfluence, **overrides: Any) -> ConfluenceConnector:
    """The connector as a run builds it for the space ENG: every extension the
    normalizers read is wanted (`.drawio` and `.png` among them)."""
    values = {
        "url": api.base_url,
        "cloud": api.layout == "cloud",
        "username": api.username if api.layout == "cloud" else None,
        "spaces": ["ENG"],
        "requests_per_second": 1000.0,
    }
    return ConfluenceConnector(
        ConfluenceSettings.model_validate(values | overrides),
        api.token,
        attachment_extensions=supported_extensions(),
    )


def hits(space: Workspace, query: str, mode: str | None, capsys: Any) -> list[dict[str, Any]]:
    space.activate()
    capsys.readouterr()
    args = ["search", query, "--limit", "3", "--json"] + (["--mode", mode] if mode else [])
    assert main(args) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]


def texts(space: Workspace, document_id: str) -> str:
    return "\n".join(
        p["md_text"] for p in space.points().values() if p["document_id"] == document_id
    )


@pytest.mark.parametrize("layout", ["cloud", "dc"])
def test_diagram_words_find_their_page_and_a_lost_diagram_does_not_fail_it(
    workspace: Callable[..., Workspace],
    confluence_api: Callable[..., FakeConfluence],
    capsys: pytest.CaptureFixture[str],
    layout: str,
) -> None:
    api = confluence_api(layout)
    stamp = datetime.now(UTC) - timedelta(days=1)
    api.add_space("ARCH", "Architecture")
    process = api.add_page("ARCH", "Translation workflow", "<p>placeholder</p>", when=stamp)
    name = diagram_name(api, "translation-process")
    add_diagram(api, process, name, BPMN, DRAWIO_MEDIA_TYPE, stamp)
    add_diagram(api, process, "SWOT", SWOT, GLIFFY_MEDIA_TYPE, stamp)
    api.content[process].body = (
        "<h1>Translation workflow</h1><p>How content reaches other languages.</p>"
        f"<h2>Process</h2><p>The steps, drawn:</p>{drawio_macro(api, name, process)}"
        f"<h2>Market</h2>{gliffy_macro(api, 'SWOT', process)}"
    )
    lamp = api.add_page("ARCH", "Lamp repair", "<p>placeholder</p>", when=stamp)
    lamp_name = diagram_name(api, "lamp")
    add_diagram(api, lamp, lamp_name, FLOWCHART, DRAWIO_MEDIA_TYPE, stamp)
    api.content[lamp].body = f"<p>Troubleshooting.</p>{drawio_macro(api, lamp_name, lamp)}"
    overview = api.add_page(
        "ARCH",
        "Support overview",
        "<h2>Lamps</h2><p>Shown from the repair page:</p>"
        + drawio_macro(api, lamp_name, lamp, include=True),
        when=stamp,
    )
    broken = api.add_page(
        "ARCH",
        "Retired design",
        f"<p>The old design.</p>{drawio_macro(api, diagram_name(api, 'old-design'), '1')}",
        when=stamp,
    )
    board = api.add_page(
        "ARCH",
        "Status board",
        "<h2>Today</h2>" + image_markup("board.png", "The board this morning"),
        when=stamp,
    )
    screenshot = api.add_attachment(
        board, "board.png", text_picture([IN_SCREENSHOT]), "image/png", when=stamp
    )
    # the same screenshot shown on another page, named by its page's title
    api.content[overview].body += "<h2>Board</h2>" + image_markup(
        "board.png", "Board", page=("ARCH", "Status board")
    )

    space = workspace(api=api)
    state, summary = space.run(source="confluence", targets=["ARCH"])
    assert state.is_completed() and summary["failed"] == [], summary["failed"]
    # No diagram attachment (Cloud's `.drawio` is a wanted extension), preview or picture
    # is a document of its own: the pages that show them hold their text.
    assert screenshot not in set(space.documents())
    assert set(space.documents()) == {process, lamp, overview, broken, board}

    page_url = f"{api.base_url}{api._web_path(api.content[process])}"
    for phrase, page in ((IN_BPMN, process), (IN_SWOT, process), (IN_FLOWCHART, lamp)):
        for mode in (None, "lexical"):
            found = hits(space, phrase, mode, capsys)
            assert found and found[0]["document_id"] == page, (phrase, mode, found)
            assert found[0]["citation_url"].startswith(
                f"{api.base_url}{api._web_path(api.content[page])}"
            )
    # A diagram's chunks carry its heading, one level below the section it stands in.
    bpmn_hit = hits(space, IN_BPMN, None, capsys)[0]
    assert bpmn_hit["citation_url"].startswith(page_url)
    assert bpmn_hit["headings_path"][:3] == [
        "Translation workflow",
        "Process",
        f"Diagram: {name}",
    ]
    swot_hit = hits(space, IN_SWOT, "lexical", capsys)[0]
    assert swot_hit["headings_path"][:3] == ["Translation workflow", "Market", "Diagram: SWOT"]
    assert IN_FLOWCHART in texts(space, overview)  # inc-drawio: the other page's diagram

    board_url = f"{api.base_url}{api._web_path(api.content[board])}"
    for mode in (None, "lexical"):
        by_id = {h["document_id"]: h for h in hits(space, IN_SCREENSHOT, mode, capsys)}
        assert board in by_id and by_id[board]["citation_url"].startswith(board_url), mode
    assert "The board this morning" in texts(space, board)
    assert IN_SCREENSHOT in texts(space, overview)  # another page's picture, by title

    assert "could not be read" in texts(space, broken)
    warned = [w for w in summary["warnings"] if w["document_id"] == broken]
    assert warned and "old-design" in json.dumps(warned)


@pytest.mark.parametrize("layout", ["cloud", "dc"])
def test_a_new_diagram_version_alone_reindexes_its_page_and_fetches_nothing_else(
    workspace: Callable[..., Workspace],
    confluence_api: Callable[..., FakeConfluence],
    capsys: pytest.CaptureFixture[str],
    layout: str,
) -> None:
    api = confluence_api(layout)
    stamp = datetime.now(UTC) - timedelta(days=1)
    api.add_space("ARCH", "Architecture")
    page = api.add_page("ARCH", "Plant monitoring", "<p>placeholder</p>", when=stamp)
    name = diagram_name(api, "monitoring")
    diagram = add_diagram(api, page, name, BPMN, DRAWIO_MEDIA_TYPE, stamp)
    api.content[page].body = f"<h2>Design</h2>{drawio_macro(api, name, page)}"
    other = api.add_page("ARCH", "Plain page", "<p>Nothing drawn here.</p>", when=stamp)

    space = workspace(api=api)
    state, summary = space.run(source="confluence", targets=["ARCH"])
    assert state.is_completed() and summary["failed"] == []
    assert IN_BPMN in texts(space, page)

    api.requests.clear()
    state, summary = space.run(source="confluence", targets=["ARCH"])
    assert state.is_completed() and summary["unchanged"] == summary["seen"] == 2
    assert api.requests["download"] == 0

    api.edit(diagram, data=C4)  # a new version of the attachment; the page is untouched
    api.requests.clear()
    before = space.documents()
    state, summary = space.run(source="confluence", targets=["ARCH"])
    assert state.is_completed() and summary["failed"] == []
    assert (summary["changed"], summary["unchanged"]) == (1, 1)
    assert space.documents()[other] == before[other]
    assert api.requests["download"] == 1  # the diagram, not its preview, nothing else
    assert IN_C4 in texts(space, page) and IN_BPMN not in texts(space, page)
    assert hits(space, IN_C4, "lexical", capsys)[0]["document_id"] == page


@pytest.mark.parametrize("layout", ["cloud", "dc"])
def test_poll_brings_the_page_whose_diagram_changed_and_not_the_diagram(
    confluence_api: Callable[..., FakeConfluence], layout: str
) -> None:
    api = confluence_api(layout)
    stamp = datetime.now(UTC) - timedelta(days=3)
    api.add_space("ENG", "Engineering")
    page = api.add_page("ENG", "Plant monitoring", "<p>placeholder</p>", when=stamp)
    name = diagram_name(api, "monitoring")
    diagram = add_diagram(api, page, name, BPMN, DRAWIO_MEDIA_TYPE, stamp)
    api.content[page].body = drawio_macro(api, name, page)
    api.add_page("ENG", "Plain page", "<p>Nothing drawn here.</p>", when=stamp)
    conn = connector(api)
    listed = {ref.document_id: ref.version for ref in conn.list_refs().refs}
    last_sync = datetime.now(UTC)

    api.edit(diagram, data=C4)
    changed = list(connector(api).poll(last_sync))  # in a process that did not list
    assert [ref.document_id for ref in changed] == [page]
    relisted = {ref.document_id: ref.version for ref in conn.list_refs().refs}
    assert changed[0].version == relisted[page] != listed[page]
    (fetched,) = conn.fetch_many(changed)
    assert isinstance(fetched, SourceDocument) and fetched.ref.version == relisted[page]
    assert fetched.attachments == {name: C4}


@pytest.mark.parametrize("layout", ["cloud", "dc"])
def test_a_shown_file_over_the_size_limit_is_left_out_with_a_warning(
    confluence_api: Callable[..., FakeConfluence], layout: str
) -> None:
    api = confluence_api(layout)
    api.add_space("ENG", "Engineering")
    page = api.add_page("ENG", "Plant monitoring", "<p>placeholder</p>")
    add_diagram(api, page, "monitoring", BPMN, DRAWIO_MEDIA_TYPE, datetime.now(UTC))
    api.content[page].body = drawio_macro(api, "monitoring", page) + gliffy_macro(api, "SWOT", page)
    api.add_attachment(page, "SWOT", SWOT, GLIFFY_MEDIA_TYPE)
    limit = (len(BPMN) + len(SWOT)) // 2
    small, large = sorted([("monitoring", BPMN), ("SWOT", SWOT)], key=lambda f: len(f[1]))
    conn = connector(api, attachment_max_bytes=limit)
    (ref,) = [r for r in conn.list_refs().refs if r.document_id == page]
    api.requests.clear()
    source = conn.fetch(ref)
    assert source.attachments == {small[0]: small[1]}
    assert api.requests["download"] == 1  # the large one is not downloaded at all
    (warning,) = source.warnings
    assert large[0] in warning and "attachment_max_bytes" in warning


def normalized(body: str, attachments: dict[str, bytes], page_id: str = "100") -> str:
    return normalize_bytes(
        body.encode(),
        "Page.confluence",
        fmt="confluence",
        locator=page_id,
        container="ENG",
        attachments=attachments,
    ).markdown


def test_a_diagram_heads_its_text_below_the_enclosing_heading_or_at_the_top() -> None:
    api = FakeConfluence("dc")  # writes the macros only: no server is started
    top = normalized(drawio_macro(api, "flow", "100"), {"flow": FLOWCHART})
    assert top.startswith("# Diagram: flow\n\n## Page-1\n\n- Lamp doesn't work")
    nested = normalized(
        "<h1>A</h1><h3>B</h3>" + gliffy_macro(api, "SWOT", "100") + "<h2>C</h2><p>after</p>",
        {"SWOT": SWOT},
    )
    assert "### B\n\n#### Diagram: SWOT\n\n##### SWOT\n\n- SWOT Analysis" in nested
    assert nested.rstrip().endswith("## C\n\nafter")  # the page's next section is its own


def test_a_diagram_in_a_table_cell_stays_on_its_line_and_a_broken_one_leaves_a_note() -> None:
    api = FakeConfluence("cloud")
    cell = normalized(
        f"<table><tbody><tr><td>{drawio_macro(api, 'flow', '100')}</td><td>x</td></tr>"
        "</tbody></table>",
        {"flow": FLOWCHART},
    )
    (row,) = [line for line in cell.splitlines() if "Diagram: flow" in line]
    assert row.startswith("| **Diagram: flow**") and "Bulb burned out?" in row
    broken = normalized(drawio_macro(api, "flow", "100"), {"flow": BPMN[:300]})
    assert "# Diagram: flow" in broken and "could not be read" in broken
    # another page's diagram is looked up under that page's id, never this page's file
    included = drawio_macro(api, "flow", "200", include=True)
    assert "could not be read" in normalized(included, {"flow": FLOWCHART})
    assert IN_FLOWCHART in normalized(included, {"200/flow": FLOWCHART})


@pytest.mark.parametrize("layout", ["cloud", "dc"])
def test_a_fetch_without_a_listing_finds_pictures_the_page_names_by_its_own_title(
    confluence_api: Callable[..., FakeConfluence], layout: str
) -> None:
    api = confluence_api(layout)
    api.add_space("ENG", "Engineering")
    page = api.add_page("ENG", "Status board", "<p>placeholder</p>")
    shot = text_picture([IN_SCREENSHOT])
    api.add_attachment(page, "board.png", shot, "image/png")
    api.content[page].body = image_markup("board.png", page=("ENG", "Status board"))
    (ref,) = [r for r in connector(api).list_refs().refs if r.document_id == page]
    source = connector(api).fetch(ref)  # a process (a worker) that did not list
    assert source.attachments == {"ENG:Status board/board.png": shot}
    assert source.warnings == () and source.ref.version == ref.version
