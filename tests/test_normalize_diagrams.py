"""Diagrams (draw.io, Gliffy, Visio) as documents, read from real files (see
tests/corpus/diagrams/README.md): page headings, labels grouped by container, and
`Source → Target: label` connections; broken files are CORRUPT."""

from __future__ import annotations

import base64
import json
import re
import struct
import zipfile
import zlib
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import lxml.html
import pytest
from lxml import etree

from config.errors import ErrorCode, IngestError
from connectors.files import FilesConnector, FilesSettings
from flows.cli import main
from normalizers.base import normalize_bytes
from normalizers.detection import detect_format
from normalizers.diagrams import diagram_markdown
from normalizers.diagrams.sniff import diagram_format
from normalizers.libreoffice import LIBREOFFICE_APT_INSTALL
from testkit.corpus import DIAGRAMS
from tests.word_recall import words

DRAWIO = DIAGRAMS / "drawio"
C4 = DRAWIO / "C4.drawio"
BPMN = DRAWIO / "bpmn-translation-process.drawio"
FLOWCHART_SVG = DRAWIO / "flowchart.drawio.svg"
GLIFFY = DRAWIO / "Learndrawio.gliffy"
CONNECTORS_VSDX = DIAGRAMS / "vsdx" / "test4_connectors.vsdx"
VSD = DIAGRAMS / "vsd" / "Visio11TextFieldsWithUnits.vsd"
ROOT = Path(__file__).resolve().parents[1]
THREAT_MODEL = ROOT / "samples" / "docs" / "architecture" / "threat-model.drawio"


def bag_recall(reference: str, markdown: str) -> float:
    """The share of the reference's words the Markdown holds, in any order (a diagram's
    XML order is not its reading order)."""
    wanted, found = Counter(words(reference)), Counter(words(markdown))
    return sum(min(n, found[w]) for w, n in wanted.items()) / sum(wanted.values())


def normalize(path: Path, name: str | None = None) -> str:
    return normalize_bytes(path.read_bytes(), name or path.name).markdown


def page_models(mxfile: bytes) -> list[etree._Element]:
    """Each page's mxGraphModel, inflated here the way draw.io documents its compression."""
    models = []
    for diagram in etree.fromstring(mxfile).iterfind("diagram"):
        model = diagram.find("mxGraphModel")
        if model is None:
            raw = zlib.decompress(base64.b64decode(diagram.text or ""), -15)
            model = etree.fromstring(unquote(raw.decode()).encode())
        models.append(model)
    return models


def label_words(models: list[etree._Element]) -> str:
    """What the pages say: cells' values, wrappers' labels and the attributes their
    placeholders name, HTML reduced to its text by lxml."""
    texts = []
    for model in models:
        for element in model.iter("mxCell", "object", "UserObject"):
            label = element.get("value" if element.tag == "mxCell" else "label") or ""
            if element.get("placeholders") == "1":
                for name, value in element.attrib.items():
                    label = label.replace(f"%{name}%", value)
            if label.strip():
                texts.append(" ".join(lxml.html.fromstring(f"<div>{label}</div>").itertext()))
    return "\n".join(texts)


def flowchart_mxfile() -> bytes:
    """The mxfile XML the flowchart's editable SVG carries."""
    return str(etree.parse(str(FLOWCHART_SVG)).getroot().get("content")).encode()


def png_with_text_chunk(kind: bytes, body: bytes) -> bytes:
    """A 1x1 PNG with one text chunk, written here from the PNG specification."""

    def chunk(name: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + name + data + struct.pack(">I", zlib.crc32(name + data))
        )

    header = struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0)
    pixels = zlib.compress(b"\x00\x00")
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(kind, body)
        + chunk(b"IDAT", pixels)
        + chunk(b"IEND", b"")
    )


def drawio_png(kind: bytes = b"tEXt") -> bytes:
    """draw.io's editable PNG: the mxfile XML URL-encoded in a chunk keyed `mxfile`."""
    text = quote(flowchart_mxfile().decode(), safe="~()*!.'").encode()
    if kind == b"zTXt":
        return png_with_text_chunk(kind, b"mxfile\0\0" + zlib.compress(text))
    return png_with_text_chunk(kind, b"mxfile\0" + text)


# --- draw.io -------------------------------------------------------------------------


def test_c4_pages_fill_placeholders_and_name_connections() -> None:
    doc = normalize_bytes(C4.read_bytes(), C4.name)
    md = doc.markdown
    headings = [line for line in md.splitlines() if line.startswith("# ")]
    assert headings == ["# C4 Context", "# C4 Container", "# C4 Component", "# C4 Class"]
    assert "- Support Staff [Person] Monitors the production line\n" in md
    assert (
        "- API Service [Container: Java/Python] → Database [Container: Time Series Database (Influx)]: Makes API calls to [REST API]\n"
        in md
    )
    assert (
        "- Support Staff [Person] Monitors the production line → Status Dashboard [Software System]\n"
        in md
    )
    assert "%c4" not in md and "html=1" not in md and "mxCell" not in md
    assert (doc.page_count, doc.metadata["diagram_pages"], doc.metadata["format"]) == (
        4,
        4,
        "drawio",
    )
    assert [(a.kind, a.value) for a in doc.anchors] == [("page", n) for n in (1, 2, 3, 4)]
    assert bag_recall(label_words(page_models(C4.read_bytes())), md) >= 0.97


def test_placeholders_are_filled_from_the_nearest_ancestor_that_has_them() -> None:
    kanban = normalize_bytes((DRAWIO / "kanban-examples.drawio").read_bytes(), "k.drawio")
    # a card's %status% is its column's attribute, as draw.io shows it
    assert "- Task 4 In progress\n" in kanban.markdown
    assert "- Task 1 New\n" in kanban.markdown
    metadata = normalize_bytes((DRAWIO / "metadata.xml").read_bytes(), "metadata.xml")
    # ... and the root cell's, for any cell of the page
    assert "This diagram was created by John Doe. Current revision is v1.0." in metadata.markdown


def test_swimlanes_group_their_labels_and_edge_labels_stay() -> None:
    md = normalize(BPMN)
    assert md.startswith("# Existing Translation Process\n")
    assert "**Original Language**\n\n- Task received\n- Create content\n" in md
    assert (
        "**Target Language**\n\n- Every day\n- Check for new content in original language\n" in md
    )
    assert "- New content? → Every day: No\n" in md
    assert bag_recall(label_words(page_models(BPMN.read_bytes())), md) >= 0.97


def test_labels_on_edges_and_named_layers() -> None:
    path = DRAWIO / "drawio-text-connectors-example.xml"
    md = normalize(path)
    # Both edges' labels are child cells of the edge (connectable="0"), one of them HTML.
    assert "- Text in a shape → Text in a shape: 1. Text 2.Text\n" in md
    assert (
        "- Text in a shape wraps automatically → Text in a shape wraps automatically: Break text on connectors over multiple lines manually\n"
        in md
    )
    assert bag_recall(label_words(page_models(path.read_bytes())), md) == 1.0
    swot = normalize(DRAWIO / "SWOT.xml")
    assert swot.startswith("# Page-1\n\n**Untitled Layer**\n\n- SWOT Analysis\n- Internal\n")


def test_plain_page_with_html_labels() -> None:
    path = DRAWIO / "example_mapping.xml"
    md = normalize(path)
    assert md == "# Page-1\n\n- Story\n- Rule\n- Examples\n"
    assert bag_recall(label_words(page_models(path.read_bytes())), md) == 1.0


def test_empty_lanes_keep_their_names_as_labels_of_their_pool() -> None:
    md = normalize(DRAWIO / "swimlanes.xml")
    assert md == "# Page-1\n\n**Pool**\n\n- Lane 1\n- Lane 2\n- Lane 3\n"


def test_editable_svg_and_png_exports() -> None:
    expected = normalize(FLOWCHART_SVG)
    assert "- Lamp plugged in? → Plug in lamp: No\n" in expected
    assert "- Bulb burned out? → Replace Bulb: Yes\n" in expected
    for kind in (b"tEXt", b"zTXt"):
        png = drawio_png(kind)
        assert diagram_format(png) == "drawio"
        assert detect_format(png, "flowchart.drawio.png") == "drawio"
        assert normalize_bytes(png, "flowchart.drawio.png").markdown == expected
    plain = png_with_text_chunk(b"tEXt", b"Software\0a paint program")
    assert diagram_format(plain) is None  # a picture: not claimed as a diagram


def test_empty_diagram_is_an_empty_document() -> None:
    doc = normalize_bytes((DRAWIO / "notion-template.drawio.svg").read_bytes(), "empty.drawio.svg")
    assert (doc.markdown, doc.metadata["diagram_pages"]) == ("", 1)


def test_bare_graph_model_and_names_that_say_nothing() -> None:
    model = etree.tostring(page_models((DRAWIO / "example_mapping.xml").read_bytes())[0])
    assert (
        normalize_bytes(model, "page.xml").markdown == "# Page 1\n\n- Story\n- Rule\n- Examples\n"
    )
    # No extension, a name and MIME type that say nothing: the content decides.
    assert detect_format(C4.read_bytes(), "attachment", "application/octet-stream") == "drawio"


@pytest.mark.parametrize(
    ("name", "damage", "expected"),
    [
        ("C4.drawio", lambda b: b[: len(b) // 2], "not well-formed"),
        ("C4.drawio", lambda b: b.replace(b"7ZxZd6M2FIB", b"7ZxZd6M2F!B", 1), "not base64"),
        ("C4.drawio", lambda b: b.replace(b"7ZxZd6M2FIB", b"AAAAAAAAAAA", 1), "does not inflate"),
        ("flowchart.drawio.svg", lambda b: b[:3000], "not well-formed"),
        ("C4.drawio", lambda b: b"just some notes", "the extension says DRAWIO"),
    ],
)
def test_broken_drawio_is_corrupt(name: str, damage, expected: str) -> None:
    with pytest.raises(IngestError) as caught:
        normalize_bytes(damage((DRAWIO / name).read_bytes()), name)
    assert caught.value.code == ErrorCode.CORRUPT
    assert expected in caught.value.message


def test_broken_png_chunk_is_corrupt() -> None:
    png = png_with_text_chunk(b"zTXt", b"mxfile\0\0" + b"not a zlib stream")
    with pytest.raises(IngestError) as caught:
        normalize_bytes(png, "broken.drawio.png")
    assert caught.value.code == ErrorCode.CORRUPT
    assert "zTXt chunk does not inflate" in caught.value.message


# --- Gliffy --------------------------------------------------------------------------


def gliffy_texts(objects: list[dict[str, Any]]) -> list[str]:
    texts = []
    for obj in objects:
        graphic = obj.get("graphic") or {}
        if graphic.get("type") == "Text":
            texts.append(" ".join(lxml.html.fromstring(graphic["Text"]["html"]).itertext()))
        texts += gliffy_texts(obj.get("children") or [])
    return texts


def test_gliffy_shapes_text() -> None:
    md = normalize(GLIFFY)
    assert md.startswith("# Learndrawio\n\n- SWOT Analysis - Company A\n")
    document = json.loads(GLIFFY.read_bytes())
    assert bag_recall("\n".join(gliffy_texts(document["stage"]["objects"])), md) >= 0.97


def test_gliffy_lines_layers_and_groups() -> None:
    """The real diagram with what Gliffy writes for a line joining two of its shapes
    (its `constraints`), a second layer and a group (an object holding objects)."""
    document = json.loads(GLIFFY.read_bytes())
    objects = document["stage"]["objects"]
    by_id = {obj["id"]: obj for obj in objects}
    label = {key: value for key, value in by_id[682].items() if key != "id"}  # a Text object
    label["graphic"] = json.loads(
        json.dumps(label["graphic"]).replace("SWOT Analysis - Company A", "sells to")
    )
    objects.append(
        {
            "id": 900,
            "x": 0.0,
            "y": 0.0,
            "uid": "com.gliffy.shape.basic.basic_v1.default.line",
            "graphic": {"type": "Line", "Line": {"strokeWidth": 2.0}},
            "children": [{**label, "id": 901}],
            "constraints": {
                "constraints": [],
                "startConstraint": {
                    "type": "StartPositionConstraint",
                    "StartPositionConstraint": {"nodeId": 689, "py": 0.5, "px": 1.0},
                },
                "endConstraint": {
                    "type": "EndPositionConstraint",
                    "EndPositionConstraint": {"nodeId": 693, "py": 0.5, "px": 0.0},
                },
            },
            "layerId": "pLCvWOu3OMtT",
        }
    )
    group = {
        "id": 902,
        "x": 900.0,
        "y": 900.0,
        "uid": "com.gliffy.shape.basic.basic_v1.default.group",
        "graphic": None,
        "children": [by_id[694 - 1]],
        "layerId": "second",
    }
    objects.remove(by_id[693])
    objects.append(group)
    document["stage"]["layers"].append(
        {
            "guid": "second",
            "order": 1,
            "name": "Notes",
            "active": False,
            "locked": False,
            "visible": True,
            "nodeIndex": 0,
        }
    )
    md = normalize_bytes(json.dumps(document).encode(), "swot").markdown
    top, notes = md.split("**Notes**")
    assert "**Layer 0**" in top and "- Internal (Internal)\n" in top  # a text on a shape
    assert notes.startswith("\n\n- External\n")  # the grouped shape's text, in its layer
    assert notes.endswith("**Connections**\n\n- Internal → External: sells to\n")


def test_broken_gliffy_is_corrupt() -> None:
    data = GLIFFY.read_bytes()
    for broken, expected in (
        (data[:5000], "not valid Gliffy JSON"),
        (b'{"contentType":"application/gliffy+json"}', "without a stage"),
    ):
        with pytest.raises(IngestError) as caught:
            normalize_bytes(broken, "diagram.gliffy")
        assert caught.value.code == ErrorCode.CORRUPT
        assert expected in caught.value.message


# --- Visio ---------------------------------------------------------------------------


def test_vsdx_connectors_become_connections() -> None:
    doc = normalize_bytes(CONNECTORS_VSDX.read_bytes(), CONNECTORS_VSDX.name)
    pages = doc.markdown.split("# Page-")[1:]
    assert [page.split("\n")[0] for page in pages] == ["1", "2", "3"]
    assert (
        pages[0]
        == "1\n\n- Shape A\n- Shape B\n- Shape C\n\n**Connections**\n\n- Shape B → Shape C\n- Shape A → Shape B\n\n"
    )
    assert "- Shape A → Shape B: A to B\n" in pages[1]
    assert "- Shape B → Shape C: B to C\n" in pages[1]
    assert "A to B" not in pages[1].split("**Connections**")[0]  # said once, in its connection
    assert doc.metadata["diagram_pages"] == 3


def test_vsdx_groups_and_empty_pages() -> None:
    md = normalize(DIAGRAMS / "vsdx" / "test10_nested_shapes.vsdx")
    assert md == (
        "# Page-1\n\n- Nested Shape Example\n\n**Shape 1 › Shape 1.1**\n\n- Shape 1.1.1\n- Shape 1.1.2\n\n"
        "**Shape 1 › Shape 1.2**\n\n- Shape 1.2.1\n- Shape 1.2.2\n"
    )
    doc = normalize_bytes((DIAGRAMS / "vsdx" / "test1.vsdx").read_bytes(), "test1.vsdx")
    assert [line for line in doc.markdown.splitlines() if line.startswith("#")] == [
        "# Page-1",
        "# Page-3",
    ]
    assert "- Shape was here already" in doc.markdown
    assert (doc.page_count, doc.metadata["diagram_pages"]) == (3, 3)


def test_vsdx_bag_recall() -> None:
    for path in sorted((DIAGRAMS / "vsdx").glob("*.vsdx")):
        with zipfile.ZipFile(path) as archive:
            texts = [
                "".join(text.itertext())
                for name in archive.namelist()
                if name.startswith("visio/pages/page") and name.endswith(".xml")
                for text in etree.fromstring(archive.read(name)).iter("{*}Text")
            ]
        assert bag_recall("\n".join(texts), normalize(path)) == 1.0, path.name


def test_broken_vsdx_is_corrupt() -> None:
    data = CONNECTORS_VSDX.read_bytes()
    with pytest.raises(IngestError) as caught:
        normalize_bytes(data[: len(data) // 2], "cut.vsdx")
    assert caught.value.code == ErrorCode.CORRUPT


def test_vsd_through_libreoffice() -> None:
    doc = normalize_bytes(VSD.read_bytes(), VSD.name)
    assert doc.markdown.startswith("# Page-1\n\n")
    for label in (
        "- Number 1 without unit 1\n",
        "- 1 Ciceros 1 c\n",
        "- Number 100 with [%] unit 100%\n",
    ):
        assert label in doc.markdown
    assert (doc.metadata["converted_with"], doc.metadata["diagram_pages"]) == ("libreoffice", 1)


def test_vsd_without_libreoffice_is_unsupported(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # a PATH without soffice
    with pytest.raises(IngestError) as caught:
        normalize_bytes(VSD.read_bytes(), VSD.name)
    assert caught.value.code == ErrorCode.UNSUPPORTED_FORMAT
    assert LIBREOFFICE_APT_INSTALL in caught.value.message


# --- the shared entry points -----------------------------------------------------------


def test_diagram_markdown_for_attachments() -> None:
    """Confluence attachments: no extension, headings below the page's own."""
    md = diagram_markdown(C4.read_bytes(), "C4 model", heading_level=3)
    assert md.startswith("### C4 Context\n\n") and "\n### C4 Class\n" in md
    assert diagram_markdown(GLIFFY.read_bytes(), "swot").startswith("# swot\n")
    assert "- Shape A → Shape B: A to B" in diagram_markdown(CONNECTORS_VSDX.read_bytes(), "flow")
    for data, code in (
        (b"just text", ErrorCode.UNSUPPORTED_FORMAT),
        (C4.read_bytes()[:4000], ErrorCode.CORRUPT),
    ):
        with pytest.raises(IngestError) as caught:
            diagram_markdown(data, "attachment")
        assert caught.value.code == code


def test_files_connector_reads_diagrams(tmp_path: Path) -> None:
    share = tmp_path / "share"
    share.mkdir()
    (share / "flow.drawio.png").write_bytes(drawio_png())
    (share / "flow.drawio.svg").write_bytes(FLOWCHART_SVG.read_bytes())
    (share / "c4.drawio").write_bytes(C4.read_bytes())
    (share / "links.vsdx").write_bytes(CONNECTORS_VSDX.read_bytes())
    connector = FilesConnector(FilesSettings.model_validate({}), [share])
    read = {}
    for ref in connector.list_refs().refs:
        source = connector.fetch(ref)
        read[source.filename] = normalize_bytes(source.data, source.filename).metadata["format"]
    assert read == {
        "flow.drawio.png": "drawio",
        "flow.drawio.svg": "drawio",
        "c4.drawio": "drawio",
        "links.vsdx": "vsdx",
    }


def test_cli_normalizes_a_drawio_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c4.drawio"
    path.write_bytes(C4.read_bytes())
    assert main(["normalize", str(path)]) == 0
    out = capsys.readouterr().out
    assert (
        out.startswith("# C4 Context\n")
        and "- Support Staff [Person] Monitors the production line → Status Dashboard [Software System]"
        in out
    )


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(list(args)) == 0
    return capsys.readouterr().out


def test_a_table_drawn_in_drawio_is_a_markdown_table(capsys: pytest.CaptureFixture[str]) -> None:
    """The threat model's lists with a key column (an entity's rows with an ID part)."""
    out = cli(capsys, "normalize", str(THREAT_MODEL))
    assert (
        "**Assets**\n\n| ID | Description |\n| --- | --- |\n"
        "| A01 | User Credentials |\n| A02 | Credit card data |\n"
    ) in out
    assert "| T03 | Compromised payment partner |\n" in out
    assert "Assets ›" not in out and "- ID\n" not in out


def test_drawio_tables_with_and_without_a_name() -> None:
    """draw.io's own table shape (rows of cells): a named one under its name; one whose
    cells hold shapes (a story map's grid) is no table, and none of its words are lost."""
    kanban = normalize(DRAWIO / "kanban-examples.drawio")
    assert (
        "**To do**\n\n| Medium | Task 1 |\n| --- | --- |\n| Low | Task 2 |\n|  | Task 3 |\n"
        in kanban
    )
    assert "- Task 4 In progress\n" in kanban  # a board of lanes stays lanes
    assert (
        bag_recall(label_words(page_models(THREAT_MODEL.read_bytes())), normalize(THREAT_MODEL))
        == 1.0
    )


def test_badges_stay_with_the_shapes_they_sit_on(capsys: pytest.CaptureFixture[str]) -> None:
    out = cli(capsys, "normalize", str(THREAT_MODEL))
    dfd = out.split("\n# PFD\n")[0]
    for line in (
        "- Payment Partner (T03)",
        "- User (T01)",
        "- Website (C01, A01, A02)",
        "- Order Processor (A02, A01)",
        "- Users (A01, C02)",
    ):
        assert f"{line}\n" in dfd
    assert not re.search(r"^- [ACT]\d\d$", out, re.MULTILINE)  # no badge on its own


def test_labels_belong_to_the_shape_they_lie_within(capsys: pytest.CaptureFixture[str]) -> None:
    """Gliffy's SWOT writes each box's items as text objects beside the box, not in it;
    draw.io's threat model draws its trust zones as boxes around the shapes."""
    swot = cli(capsys, "normalize", str(GLIFFY))
    items = [line[2:] for line in swot.splitlines() if line.startswith("- ")]
    for letter, title, first in (
        ("S", "Strengths", "• Engineering team"),
        ("W", "Weaknesses", "• Hierarchical corporate structure"),
        ("O", "Opportunities", "• Emerging economies"),
        ("T", "Threats", "• Low cost competitors"),
    ):
        at = items.index(title)
        assert items[at - 1] == letter and items[at + 1].startswith(first)
    threats = cli(capsys, "normalize", str(THREAT_MODEL))
    assert "**Internet › User's Network (T02) › User's Machine**\n\n- User (T01)\n" in threats
    assert "**Data Center (Protected) (C03) › Data Center (Restricted)**\n\n- Payments\n" in threats


def test_a_group_without_text_inside_is_a_label_not_an_empty_heading(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A Visio stencil's group (a switch, a router) has its name and drawn parts only."""
    out = cli(capsys, "normalize", str(CONNECTORS_VSDX))
    assert out.endswith("# Page-3\n\n- 01\n- Switch\n- Router\n- 02\n")


def test_no_chunk_holds_two_pages_of_a_diagram(capsys: pytest.CaptureFixture[str]) -> None:
    """The quickstart's small budgets merge small sections; never across a diagram's page,
    so every chunk cites the page it comes from."""
    config = str(ROOT / "samples" / "quickstart.yaml")
    lines = cli(capsys, "chunk", "--config", config, str(THREAT_MODEL)).splitlines()
    chunks = [json.loads(line) for line in lines]
    names = {1: "DFD", 2: "PFD", 3: "Attack Tree"}
    assert {c["page_start"] for c in chunks} == set(names)
    for chunk in chunks:
        page = chunk["page_start"]
        assert chunk["page_end"] == page and chunk["headings_path"] == [names[page]]
        assert chunk["citation_url"].endswith(f"#page={page}")
    table = cli(capsys, "chunk", str(CONNECTORS_VSDX), "--format", "table")
    assert re.findall(r"│ (Page-\d) ", table) == ["Page-1", "Page-2", "Page-3"]
