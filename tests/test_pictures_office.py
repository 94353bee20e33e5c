"""Pictures inside DOCX, PPTX and XLSX files become their text where they stand: files
written by python-docx, python-pptx and openpyxl holding PNGs of real text (Pillow in
a real font), read by the real picture reader with real tesseract."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Callable

import docx
import pytest
from docx.oxml import parse_xml
from docx.shared import Inches
from openpyxl import Workbook
from openpyxl.drawing.image import Image as SheetImage
from pptx import Presentation
from pptx.util import Inches as SlideInches

from config.settings import PicturesSettings
from normalizers.base import normalize_bytes
from normalizers.docx import normalize_docx
from normalizers.docx.package import prepare_package
from normalizers.docx.pictures import ReadOnce, ShownPictures
from normalizers.docx.walk import walk_markdown
from normalizers.model import NormalizeContext, NormalizedDocument
from normalizers.pictures import PictureReader
from normalizers.pptx import normalize_pptx
from normalizers.xlsx import normalize_xlsx
from tasks.outcome import PictureTally
from tests.picture_helpers import oversized_picture, text_picture

Normalize = Callable[[bytes, NormalizeContext], NormalizedDocument]


def reader() -> PictureReader:
    return PictureReader(PicturesSettings(), languages="eng")  # type: ignore[call-arg]


def read(normalize: Normalize, data: bytes, name: str) -> tuple[str, PictureReader]:
    pictures = reader()
    return normalize(data, NormalizeContext(name, pictures=pictures)).markdown, pictures


def without_reader(normalize: Normalize, data: bytes, name: str) -> str:
    return normalize(data, NormalizeContext(name)).markdown


def in_order(markdown: str, *parts: str) -> bool:
    """Each part found after the one before it."""
    at = 0
    for part in parts:
        found = markdown.find(part, at)
        if found < 0:
            return False
        at = found + len(part)
    return True


def section(doc: NormalizedDocument, value: int | str) -> str:
    """The Markdown of the section anchored as `value` (a slide, a sheet)."""
    starts = [anchor.offset for anchor in doc.anchors] + [len(doc.markdown)]
    index = next(i for i, anchor in enumerate(doc.anchors) if anchor.value == value)
    return doc.markdown[starts[index] : starts[index + 1]]


# --- DOCX ---------------------------------------------------------------------------


def make_docx(*, pictures: bool, alt: str = "") -> bytes:
    document = docx.Document()
    document.add_paragraph("Quarterly report opening paragraph.")
    if pictures:
        shape = document.add_picture(
            io.BytesIO(text_picture(["INVOICE TOTAL 4711"])), width=Inches(5)
        )
        if alt:
            shape._inline.docPr.set("descr", alt)
    document.add_paragraph("Closing paragraph after the screenshot.")
    table = document.add_table(rows=1, cols=2)
    table.cell(0, 0).text = "Left cell"
    cell = table.cell(0, 1).paragraphs[0]
    if pictures:
        cell.add_run().add_picture(io.BytesIO(text_picture(["WAREHOUSE CODE 815"])))
    document.add_paragraph("Last words of the document.")
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def test_docx_picture_text_follows_the_paragraph_that_shows_it_after_its_alt_text() -> None:
    markdown, pictures = read(
        normalize_docx, make_docx(pictures=True, alt="Invoice scan"), "r.docx"
    )
    assert in_order(
        markdown,
        "Quarterly report opening paragraph.",
        "Invoice scan",
        "> *Picture (image1.png):*",
        "> INVOICE TOTAL 4711",
        "Closing paragraph after the screenshot.",
    ), markdown
    # a picture in a table cell: after the table (a pipe table row is one line)
    assert in_order(markdown, "| Left cell", "> WAREHOUSE CODE 815", "Last words"), markdown
    assert pictures.counts.read == 2


def test_docx_without_a_reader_is_unchanged_by_its_pictures() -> None:
    with_pictures = without_reader(normalize_docx, make_docx(pictures=True), "r.docx")
    assert with_pictures == without_reader(normalize_docx, make_docx(pictures=False), "r.docx")
    assert "INVOICE" not in with_pictures


def test_docx_alt_text_stays_without_a_reader() -> None:
    markdown = without_reader(
        normalize_docx, make_docx(pictures=True, alt="Invoice scan"), "r.docx"
    )
    assert in_order(markdown, "opening paragraph", "Invoice scan", "Closing paragraph")
    assert "INVOICE" not in markdown


def test_docx_broken_picture_is_skipped_and_the_document_still_reads() -> None:
    source = make_docx(pictures=True)
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(source)) as archive, zipfile.ZipFile(out, "w") as target:
        for info in archive.infolist():
            broken = info.filename == "word/media/image1.png"
            target.writestr(info, b"not a picture at all" if broken else archive.read(info))
    markdown, pictures = read(normalize_docx, out.getvalue(), "r.docx")
    assert "Closing paragraph after the screenshot." in markdown
    assert "INVOICE" not in markdown
    assert "> WAREHOUSE CODE 815" in markdown
    assert pictures.counts.skipped["unreadable"] == 1


def test_docx_picture_over_the_pixel_limit_is_skipped_as_large_and_counted() -> None:
    document = docx.Document()
    document.add_paragraph("A poster follows.")
    document.add_picture(io.BytesIO(oversized_picture()), width=Inches(5))
    document.add_picture(io.BytesIO(text_picture(["INVOICE TOTAL 4711"])))
    out = io.BytesIO()
    document.save(out)
    doc = normalize_bytes(out.getvalue(), "poster.docx", pictures=reader())
    assert "A poster follows." in doc.markdown and "> INVOICE TOTAL 4711" in doc.markdown
    assert doc.metadata["pictures"]["read"] == 1
    assert doc.metadata["pictures"]["skipped"] == {"large": 1}
    tally = PictureTally()  # what the run's report counts
    tally.add_document(doc.metadata)
    assert tally.summary()["skipped"] == {"large": 1}


# A legacy (VML) picture, as Word wrote them before DrawingML and still writes for some
# objects: a w:pict shape whose v:imagedata names the image relationship.
_VML_RUN = (
    '<w:r xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main" '
    'xmlns:v="urn:schemas-microsoft-com:vml" '
    'xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships">'
    '<w:pict><v:shape id="legacy" style="width:400pt;height:60pt">'
    '<v:imagedata r:id="{rel_id}"/></v:shape></w:pict></w:r>'
)


def make_vml_docx() -> bytes:
    document = docx.Document()
    document.add_paragraph("Before the legacy picture.")
    rel_id, _ = document.part.get_or_add_image(io.BytesIO(text_picture(["LEGACY VML PICTURE"])))
    document.add_paragraph()._p.append(parse_xml(_VML_RUN.format(rel_id=rel_id)))
    document.add_paragraph("After the legacy picture.")
    document.add_picture(io.BytesIO(text_picture(["MODERN DRAWING PICTURE"])))
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def test_docx_vml_and_drawingml_pictures_both_read_in_place() -> None:
    markdown, _ = read(normalize_docx, make_vml_docx(), "v.docx")
    assert in_order(
        markdown,
        "Before the legacy picture.",
        "> LEGACY VML PICTURE",
        "After the legacy picture.",
        "> MODERN DRAWING PICTURE",
    ), markdown


def test_docx_walk_places_pictures_and_a_second_rendering_gets_the_text_already_read() -> None:
    """python-docx's walk (the reader after pandoc) places pictures as pandoc does; the
    document's reader reads each picture once however many renderings show it."""
    data = make_vml_docx()
    pictures = reader()
    once = ReadOnce(pictures)
    package = prepare_package(data, NormalizeContext("v.docx")).data
    first = walk_markdown(package, ShownPictures(data, once).text)
    second = walk_markdown(package, ShownPictures(data, once).text)
    assert first == second
    assert in_order(
        first, "Before the legacy picture.", "> LEGACY VML PICTURE", "After the legacy picture."
    ), first
    assert "> MODERN DRAWING PICTURE" in first
    assert pictures.counts.read == 2 and not pictures.counts.skipped


# --- PPTX ---------------------------------------------------------------------------


def make_pptx(*, pictures: bool) -> bytes:
    deck = Presentation()
    logo = text_picture(["ACME LOGO"])
    slides = [("Revenue", "FIRST SLIDE CHART"), ("Operations", "SECOND SLIDE DIAGRAM")]
    for number, (title, words) in enumerate(slides, 1):
        slide = deck.slides.add_slide(deck.slide_layouts[5])  # title only
        slide.shapes.title.text = title
        slide.shapes.add_textbox(SlideInches(1), SlideInches(1.5), SlideInches(6), SlideInches(1))
        slide.shapes[-1].text_frame.text = f"Text above the picture {number}."
        if not pictures:
            continue
        slide.shapes.add_picture(io.BytesIO(logo), SlideInches(8), SlideInches(0.1))
        # slide 2 holds its picture in a group
        shapes = slide.shapes.add_group_shape().shapes if number == 2 else slide.shapes
        picture = shapes.add_picture(
            io.BytesIO(text_picture([words])), SlideInches(1), SlideInches(3), SlideInches(7)
        )
        picture._element.nvPicPr.cNvPr.set("descr", f"Diagram of slide {number}")
    caption = deck.slides.add_slide(deck.slide_layouts[8])  # picture with caption
    caption.shapes.title.text = "Photo"
    caption.placeholders[2].text_frame.text = "The caption under the photo."
    if pictures:
        photo = io.BytesIO(text_picture(["PLACEHOLDER PHOTO TEXT"]))
        caption.placeholders[1].insert_picture(photo)
    out = io.BytesIO()
    deck.save(out)
    return out.getvalue()


def test_pptx_pictures_read_in_their_slide_and_the_logo_on_every_slide_once() -> None:
    pictures = reader()
    doc = normalize_pptx(make_pptx(pictures=True), NormalizeContext("d.pptx", pictures=pictures))
    first, second = section(doc, 1), section(doc, 2)
    assert in_order(
        first, "Text above the picture 1.", "Diagram of slide 1", "> FIRST SLIDE CHART"
    ), first
    assert in_order(
        second, "Text above the picture 2.", "Diagram of slide 2", "> SECOND SLIDE DIAGRAM"
    ), second
    assert "SECOND" not in first
    assert "> PLACEHOLDER PHOTO TEXT" in section(doc, 3)  # a picture placeholder's picture
    assert doc.markdown.count("ACME LOGO") == 1
    assert "ACME LOGO" in first  # read where it first stands (top right: before the text)
    assert pictures.counts.skipped["repeat"] == 1


def test_pptx_without_a_reader_keeps_alt_text_only() -> None:
    with_pictures = without_reader(normalize_pptx, make_pptx(pictures=True), "d.pptx")
    plain = without_reader(normalize_pptx, make_pptx(pictures=False), "d.pptx")
    alt_lines = ["Image: Diagram of slide 1\n\n", "Image: Diagram of slide 2\n\n"]
    stripped = with_pictures
    for line in alt_lines:
        assert line in stripped
        stripped = stripped.replace(line, "")
    assert stripped == plain
    assert "CHART" not in with_pictures


# --- XLSX ---------------------------------------------------------------------------


def make_xlsx(*, pictures: bool, alt: str = "") -> bytes:
    """A workbook with a picture on its second sheet; `alt`: the picture's description
    (openpyxl writes "Picture" for every image; Excel writes what its user typed)."""
    book = Workbook()
    sales = book.active
    sales.title = "Sales"
    sales.append(["Region", "Total"])
    sales.append(["North", 5])
    stock = book.create_sheet("Stock")
    stock.append(["Item", "Count"])
    stock.append(["Bolts", 40])
    if pictures:
        stock.add_image(SheetImage(io.BytesIO(text_picture(["SHELF LABEL 2024"]))), "C5")
    book.create_sheet("Summary").append(["Nothing drawn here"])
    out = io.BytesIO()
    book.save(out)
    if not alt:
        return out.getvalue()
    described = io.BytesIO()
    with (
        zipfile.ZipFile(io.BytesIO(out.getvalue())) as archive,
        zipfile.ZipFile(described, "w") as target,
    ):
        for info in archive.infolist():
            blob = archive.read(info)
            if info.filename.startswith("xl/drawings/drawing"):
                blob = blob.replace(b'descr="Picture"', f'descr="{alt}"'.encode())
            target.writestr(info, blob)
    return described.getvalue()


def test_xlsx_pictures_close_their_sheet_named_by_the_anchor_cell() -> None:
    pictures = reader()
    data = make_xlsx(pictures=True, alt="Shelf label photo")
    doc = normalize_xlsx(data, NormalizeContext("b.xlsx", pictures=pictures))
    stock = section(doc, "Stock")
    assert in_order(
        stock, "| Bolts | 40 |", "Image at C5: Shelf label photo", "> *Picture (image1.png at C5):*"
    ), stock
    assert "> SHELF LABEL 2024" in stock
    assert "SHELF" not in section(doc, "Sales") + section(doc, "Summary")
    assert pictures.counts.read == 1


def test_xlsx_label_for_a_description_is_no_alt_text() -> None:
    markdown, _ = read(normalize_xlsx, make_xlsx(pictures=True), "b.xlsx")
    assert "> SHELF LABEL 2024" in markdown
    assert "Image at" not in markdown


def test_xlsx_without_a_reader_is_unchanged_by_its_pictures() -> None:
    data = make_xlsx(pictures=True, alt="Shelf label photo")
    with_pictures = without_reader(normalize_xlsx, data, "b.xlsx")
    assert with_pictures == without_reader(normalize_xlsx, make_xlsx(pictures=False), "b.xlsx")


@pytest.mark.parametrize(
    ("normalize", "make", "name"),
    [(normalize_docx, make_docx, "r.docx"), (normalize_xlsx, make_xlsx, "b.xlsx")],
)
def test_a_reader_that_reads_nothing_adds_nothing_but_alt_text(
    normalize: Normalize, make: Callable[..., bytes], name: str
) -> None:
    """OCR off (no languages, no captioner): the reader reads no text."""
    silent = PictureReader(PicturesSettings(), languages=None)  # type: ignore[call-arg]
    markdown = normalize(make(pictures=True), NormalizeContext(name, pictures=silent)).markdown
    assert "> *Picture" not in markdown
    assert silent.counts.read >= 1


@pytest.mark.parametrize(
    ("make", "name", "read", "skipped"),
    [
        (make_docx, "r.docx", 2, {}),
        (make_pptx, "d.pptx", 4, {"repeat": 1}),  # the logo on slide 2
        (make_xlsx, "b.xlsx", 1, {}),
    ],
)
def test_the_documents_picture_counts_reach_its_metadata(
    make: Callable[..., bytes], name: str, read: int, skipped: dict[str, int]
) -> None:
    """Through the normalizers' entry, as a run calls them (format told by the bytes)."""
    doc = normalize_bytes(make(pictures=True), name, pictures=reader())
    assert doc.metadata["pictures"]["read"] == read
    assert doc.metadata["pictures"].get("skipped", {}) == skipped
