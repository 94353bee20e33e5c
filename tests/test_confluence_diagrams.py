"""Diagrams on Confluence pages, Cloud and Data Center, through the `ingest` flow against
the local Confluence API: a draw.io diagram, one shown from another page (`inc-drawio`)
and a Gliffy diagram are found by words that stand only inside them, their hits cite
the page; their attachments and PNG previews are no documents of their own; a new
version of the diagram alone re-indexes its page and fetches nothing else; a diagram
whose attachment is gone leaves a note and a warning, and the page still indexes.

The diagrams are real files (tests/corpus/diagrams/drawio, Apache-2.0: draw.io's
examples, among them a Gliffy diagram).
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

from flows.cli import main
from tests.confluence_api import (
    DRAWIO_MEDIA_TYPE,
    GLIFFY_MEDIA_TYPE,
    FakeConfluence,
    confluence_api,
    drawio_macro,
    gliffy_macro,
)
from tests.test_flow import Workspace, prefect_api, workspace
from tests.tiny_model import tiny_model_dir

# fixtures used by name
__all__ = ["confluence_api", "prefect_api", "tiny_model_dir", "workspace"]

pytestmark = pytest.mark.usefixtures("prefect_api")

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

    space = workspace(api=api)
    state, summary = space.run(source="confluence", targets=["ARCH"])
    assert state.is_completed() and summary["failed"] == [], summary["failed"]
    # Only pages are documents: no diagram attachment (Cloud's `.drawio` is a wanted
    # extension), no preview.
    assert set(space.documents()) == {process, lamp, overview, broken}

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
