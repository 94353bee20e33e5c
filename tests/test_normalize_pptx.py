"""PPTX normalizer: a deck built with python-pptx, exact Markdown, bad input, corpus recall."""

from __future__ import annotations

import io
import time

import pytest
from lxml import etree
from PIL import Image
from pptx import Presentation
from pptx.chart.data import CategoryChartData
from pptx.enum.chart import XL_CHART_TYPE
from pptx.opc.constants import CONTENT_TYPE as CT
from pptx.opc.constants import RELATIONSHIP_TYPE as RT
from pptx.opc.package import Part
from pptx.opc.packuri import PackURI
from pptx.oxml import parse_xml
from pptx.oxml.ns import qn
from pptx.util import Inches

from config.errors import ErrorCode, IngestError
from markdown_text import Anchor
from normalizers.base import normalize_bytes
from testkit.corpus import DOCLING
from tests.word_recall import word_recall

CORPUS = DOCLING / "pptx"


def _png() -> io.BytesIO:
    buffer = io.BytesIO()
    Image.new("RGB", (4, 4), "red").save(buffer, format="PNG")
    buffer.seek(0)
    return buffer


def _text_box(shapes, paragraphs: list[str], numbered: bool = False) -> None:
    frame = shapes.add_textbox(Inches(1), Inches(1), Inches(4), Inches(1)).text_frame
    frame.text = paragraphs[0]
    for text in paragraphs[1:]:
        frame.add_paragraph().text = text
    if numbered:
        for paragraph in frame.paragraphs:
            properties = paragraph._p.get_or_add_pPr()
            etree.SubElement(properties, qn("a:buAutoNum"), type="arabicPeriod")


def _deck_bytes() -> bytes:
    deck = Presentation()
    deck.core_properties.author = "Paula Presenter"
    layouts = deck.slide_layouts

    cover = deck.slides.add_slide(layouts[0])
    cover.shapes.title.text = "Quarterly Review"
    cover.placeholders[1].text = "Prepared by Finance"

    agenda = deck.slides.add_slide(layouts[1])
    agenda.shapes.title.text = "Agenda"
    body = agenda.placeholders[1].text_frame
    body.text = "Revenue"
    for text, level in (("Europe", 1), ("Germany", 2), ("Asia", 1), ("Costs", 0)):
        paragraph = body.add_paragraph()
        paragraph.text, paragraph.level = text, level
    notes = agenda.notes_slide.notes_text_frame
    notes.text = "Speak slowly."
    notes.add_paragraph().text = "Mention the targets."

    numbers = deck.slides.add_slide(layouts[5])
    numbers.shapes.title.text = "Numbers"
    table = numbers.shapes.add_table(3, 3, Inches(1), Inches(2), Inches(6), Inches(2)).table
    for r, row in enumerate(
        [["Region", "Quarter", ""], ["North", "1", "2"], ["South|East", "3", "4"]]
    ):
        for c, text in enumerate(row):
            table.cell(r, c).text = text
    table.cell(0, 1).merge(table.cell(0, 2))
    group = numbers.shapes.add_group_shape()  # added after the table, placed above it
    _text_box(group.shapes, ["Grouped caption"])
    picture = group.shapes.add_picture(_png(), Inches(5), Inches(5), Inches(1), Inches(1))
    picture._element.nvPicPr.cNvPr.set("descr", "Bar chart of sales")
    group.shapes.add_picture(_png(), Inches(6), Inches(5), Inches(1), Inches(1))  # file name only

    loose = deck.slides.add_slide(layouts[6])
    _text_box(loose.shapes, ["1. Not a list"])
    _text_box(loose.shapes, ["First", "Second"], numbered=True)
    data = CategoryChartData()  # type: ignore[no-untyped-call]
    data.categories = ["Mon", "Tue"]
    data.add_series("Visitors", (5, 7.5))  # type: ignore[no-untyped-call]
    chart = loose.shapes.add_chart(
        XL_CHART_TYPE.COLUMN_CLUSTERED, Inches(1), Inches(3), Inches(4), Inches(3), data
    ).chart
    chart.has_title = True
    chart.chart_title.text_frame.text = "Weekly visitors"

    buffer = io.BytesIO()
    deck.save(buffer)
    return buffer.getvalue()


EXPECTED = """\
## Slide 1: Quarterly Review

Prepared by Finance

## Slide 2: Agenda

- Revenue
  - Europe
    - Germany
  - Asia
- Costs

> Notes: Speak slowly.
>
> Mention the targets.

## Slide 3: Numbers

Grouped caption

Image: Bar chart of sales

| Region | Quarter | Quarter |
| --- | --- | --- |
| North | 1 | 2 |
| South\\|East | 3 | 4 |

## Slide 4

1\\. Not a list

1. First
2. Second

Weekly visitors (bar chart)

|  | Visitors |
| --- | --- |
| Mon | 5 |
| Tue | 7.5 |
"""


def test_deck_converts_to_exact_markdown() -> None:
    doc = normalize_bytes(_deck_bytes(), "review.pptx")
    assert doc.markdown == EXPECTED
    assert doc.title == "Quarterly Review"  # no core title: slide 1's title
    assert doc.author == "Paula Presenter"
    assert doc.page_count == 4
    assert doc.warnings == ()
    assert doc.anchors == tuple(
        Anchor(EXPECTED.index(f"## Slide {n}"), "slide", n) for n in range(1, 5)
    )


def test_body_placeholder_whose_layout_turns_bullets_off_holds_paragraphs() -> None:
    deck = Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[2])  # Section Header: lvl1 buNone
    slide.shapes.title.text = "Part two"
    body = slide.placeholders[1].text_frame
    body.text = "Where we stand."
    body.add_paragraph().text = "What comes next."
    buffer = io.BytesIO()
    deck.save(buffer)
    doc = normalize_bytes(buffer.getvalue(), "sections.pptx")
    assert doc.markdown == "## Slide 1: Part two\n\nWhere we stand.\n\nWhat comes next.\n"


def test_unreadable_shape_is_a_warning_not_a_failed_deck() -> None:
    deck = Presentation(io.BytesIO(_deck_bytes()))
    frame = next(s for s in deck.slides[2].shapes if s.has_table)
    tbl = frame._element.graphic.graphicData.find(qn("a:tbl"))
    tbl.getparent().remove(tbl)  # a table frame without its table
    buffer = io.BytesIO()
    deck.save(buffer)
    doc = normalize_bytes(buffer.getvalue(), "broken.pptx")
    assert "| Region |" not in doc.markdown
    assert "Grouped caption" in doc.markdown and "## Slide 4" in doc.markdown
    assert len(doc.warnings) == 1
    assert doc.warnings[0].startswith("slide 3: shape 'Table")


_NS = (
    'xmlns:p="http://schemas.openxmlformats.org/presentationml/2006/main" '
    'xmlns:a="http://schemas.openxmlformats.org/drawingml/2006/main" '
    'xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships" '
    'xmlns:dgm="http://schemas.openxmlformats.org/drawingml/2006/diagram"'
)


def _diagram_point(kind: str, *runs: str) -> str:
    text = "".join(f"<a:r><a:t>{run}</a:t></a:r>" for run in runs)
    return f'<dgm:pt modelId="{runs[0]}" type="{kind}"><dgm:t><a:p>{text}</a:p></dgm:t></dgm:pt>'


def test_smartart_nodes_become_a_list() -> None:
    deck = Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[5])
    slide.shapes.title.text = "Process"
    points = (
        _diagram_point("doc", "whole diagram")
        + _diagram_point("node", "Plan")
        + _diagram_point("parTrans", "connector")
        + _diagram_point("node", "Build", " it")
    )
    data = f"<dgm:dataModel {_NS}><dgm:ptLst>{points}</dgm:ptLst></dgm:dataModel>"
    part = Part(
        PackURI("/ppt/diagrams/data1.xml"), CT.DML_DIAGRAM_DATA, deck.part.package, data.encode()
    )
    rel_id = slide.part.relate_to(part, RT.DIAGRAM_DATA)
    slide.shapes._spTree.append(
        parse_xml(
            f'<p:graphicFrame {_NS}><p:nvGraphicFramePr><p:cNvPr id="9" name="Diagram 1"/>'
            "<p:cNvGraphicFramePr/><p:nvPr/></p:nvGraphicFramePr><p:xfrm>"
            '<a:off x="0" y="1500000"/><a:ext cx="100" cy="100"/></p:xfrm><a:graphic>'
            '<a:graphicData uri="http://schemas.openxmlformats.org/drawingml/2006/diagram">'
            f'<dgm:relIds r:dm="{rel_id}" r:lo="" r:qs="" r:cs=""/></a:graphicData></a:graphic>'
            "</p:graphicFrame>"
        )
    )
    buffer = io.BytesIO()
    deck.save(buffer)
    doc = normalize_bytes(buffer.getvalue(), "smartart.pptx")
    assert doc.markdown == "## Slide 1: Process\n\n- Plan\n- Build it\n"


def test_truncated_deck_is_corrupt() -> None:
    data = _deck_bytes()
    with pytest.raises(IngestError) as caught:
        normalize_bytes(data[: len(data) // 3], "cut.pptx")
    assert caught.value.code is ErrorCode.CORRUPT
    assert caught.value.subject == "cut.pptx"


def test_unrecognized_shape_in_corpus_keeps_its_text() -> None:
    name = "powerpoint_unrecognized_shape.pptx"
    doc = normalize_bytes((CORPUS / name).read_bytes(), name)
    assert "Text in an unrecognized shape" in doc.markdown
    assert "## Slide 3: Next Steps" in doc.markdown


def test_review_comments_close_their_slide() -> None:
    name = "powerpoint_comments.pptx"
    doc = normalize_bytes((CORPUS / name).read_bytes(), name)
    assert doc.markdown.startswith(
        "## Slide 1: Test Slide With Comments\n\n"
        "Docling converts messy documents into structured data and simplifies downstream "
        "document and AI processing by detecting tables, formulas, reading order, OCR, and "
        "much more.\n\n"
        "> Comment by John Reviewer on 2026-01-01: This is a sample reviewer comment\n>\n"
        "> Reply by Jane Smith on 2026-06-18: This is a sample response\n\n"
        "## Slide 2: Start\n\n"
    )


_MODERN = "http://schemas.microsoft.com/office/powerpoint/2018/8/main"


def test_modern_comments_with_their_replies() -> None:
    """PowerPoint 365 writes threaded comments in its own parts: ppt/authors.xml and
    ppt/comments/modernComment_*.xml, the replies inside their comment."""
    deck = Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[5])
    slide.shapes.title.text = "Budget"
    authors = (
        f'<p188:authorLst xmlns:p188="{_MODERN}">'
        '<p188:author id="{A1}" name="Ana Lyst" initials="AL" userId="ana"/>'
        '<p188:author id="{B2}" name="Bo Ss" initials="BS" userId="bo"/></p188:authorLst>'
    )
    comments = (
        f'<p188:cmLst xmlns:p188="{_MODERN}" '
        'xmlns:a="http://schemas.openxmlformats.org/drawingml/2006/main">'
        '<p188:cm id="{C1}" authorId="{A1}" created="2026-01-02T03:04:05">'
        "<p188:replyLst>"
        '<p188:reply id="{R1}" authorId="{B2}" created="2026-01-03T03:04:05">'
        "<p188:txBody><a:bodyPr/><a:p><a:r><a:t>Agreed, cut it.</a:t></a:r></a:p>"
        "</p188:txBody></p188:reply></p188:replyLst>"
        "<p188:txBody><a:bodyPr/><a:p><a:r><a:t>Is the travel line</a:t></a:r></a:p>"
        "<a:p><a:r><a:t>still needed?</a:t></a:r></a:p></p188:txBody></p188:cm></p188:cmLst>"
    )
    package = deck.part.package
    authors_part = Part(
        PackURI("/ppt/authors.xml"),
        "application/vnd.ms-powerpoint.authors+xml",
        package,
        authors.encode(),
    )
    deck.part.relate_to(
        authors_part, "http://schemas.microsoft.com/office/2018/10/relationships/authors"
    )
    comments_part = Part(
        PackURI("/ppt/comments/modernComment_100_0.xml"),
        "application/vnd.ms-powerpoint.comments+xml",
        package,
        comments.encode(),
    )
    slide.part.relate_to(
        comments_part, "http://schemas.microsoft.com/office/2018/10/relationships/comments"
    )
    buffer = io.BytesIO()
    deck.save(buffer)
    doc = normalize_bytes(buffer.getvalue(), "modern.pptx")
    assert doc.markdown == (
        "## Slide 1: Budget\n\n"
        "> Comment by Ana Lyst on 2026-01-02: Is the travel line still needed?\n>\n"
        "> Reply by Bo Ss on 2026-01-03: Agreed, cut it.\n"
    )


# Word recall (exact LCS) against Docling's reference, measured with this converter
# (floors just under the measurement). Below 0.97 and why: powerpoint_comments - Docling
# writes each comment as "[author: John Reviewer (JR), time: 2026-01-01T00:00:00]": the
# labels "author" and "time" are not in the deck, the initials and the time of day are
# attributes PowerPoint does not show in the text (we write "Comment by John Reviewer on
# 2026-01-01"); pptx_chart - Docling's "Other chart" for a 3-D bar chart.
RECALL_FLOORS = {
    "powerpoint_bad_text.pptx": 0.99,
    "powerpoint_comments.pptx": 0.82,
    "powerpoint_issue_2663.pptx": 0.99,
    "powerpoint_malformed_pictures.pptx": 0.99,
    "powerpoint_sample.pptx": 0.99,
    "powerpoint_unrecognized_shape.pptx": 0.99,
    "powerpoint_with_image.pptx": 0.99,
    "pptx_chart.pptx": 0.96,
}


def test_corpus_is_complete() -> None:
    inputs = {p.name for p in CORPUS.iterdir() if p.suffix == ".pptx"}
    assert inputs == set(RECALL_FLOORS)


@pytest.mark.parametrize("name", sorted(RECALL_FLOORS))
def test_corpus_file_converts_with_recall(name: str) -> None:
    start = time.perf_counter()
    doc = normalize_bytes((CORPUS / name).read_bytes(), name)
    assert time.perf_counter() - start < 10
    reference = (CORPUS / f"{name}.md").read_text(encoding="utf-8")
    assert word_recall(reference, doc.markdown) >= RECALL_FLOORS[name]
    assert doc.markdown.startswith("## Slide 1")
    assert doc.warnings == ()  # the self-check finds every word of the slides' text
