"""XLSX/XLSM to Markdown (docs/sources.md#normalization-contract): one `## <sheet>` section per
visible sheet, one GFM table per rectangular block of cells.

Reading is streaming and read-only. openpyxl reads the workbook parts (sheet list and
states, shared strings, styles for date formats, the 1900/1904 epoch, core properties);
`load_workbook` itself is not used because, in read-only mode, it parses every sheet
without a `<dimension>` element in full just to size it, and its worksheets pad each
row up to the *declared* used range (a sheet may claim 1,048,576 rows and 16,384
columns) and hide merged ranges. Each sheet's XML is instead streamed once with lxml's
`iterparse` (C; openpyxl's own parser is pure-Python ElementTree and several times
slower), keeping only non-empty cells with their cached values (`data_only` semantics:
a formula is its cached `<v>`, never its source) and collecting `<mergeCell>` ranges.
Memory and time follow the real content, not the declared used range, and the cell
limit is enforced while streaming.

Layout: merged ranges are filled (top-left value copied into every cell), then the sheet
splits into rectangular blocks of cells separated by empty rows and columns (see
`_blocks`), which come out top to bottom, then left to right. Per block:
- a first row holding one value only (a title, usually a merged label across the block)
  becomes a paragraph above the table;
- a block holding one value only (a single cell, a merged range) is a paragraph, not a
  table;
- the header is the block's first row, unless that row holds only numbers, dates or
  booleans (it is data then): the column letters become the header.
Charts (on a sheet, or a chartsheet) are title + cached data, placed among the blocks
where they are drawn (their anchor cell); with a picture reader, the sheet's pictures
follow (alt text, then the text the picture shows, named by its anchor cell: the
drawing parts are read from the zip, as read-only openpyxl loads no images); cell
comments (notes, and threaded comments with their replies) close the sheet's section as
a block quote.

Readers, best first (`normalizers.fallback`): openpyxl's workbook parts as above; when
openpyxl rejects the workbook (unusual style records, say), python-calamine reads the
cell values (merged cells filled; no charts, comments or number formats); last, a
LibreOffice round trip. The words of the cell strings are checked against the
Markdown (`normalizers.selfcheck`).
"""

from __future__ import annotations

import io
import posixpath
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from typing import IO, Any
from zipfile import ZipFile

from lxml import etree
from openpyxl.packaging.relationship import get_rels_path
from openpyxl.reader.excel import ExcelReader
from openpyxl.styles.numbers import BUILTIN_FORMATS_MAX_SIZE, builtin_format_code
from openpyxl.styles.stylesheet import apply_stylesheet
from openpyxl.utils import (
    column_index_from_string,
    coordinate_to_tuple,
    get_column_letter,
    range_boundaries,
)
from openpyxl.utils.datetime import from_excel, from_ISO8601

from config.errors import ErrorCode
from config.safe_parsing import iterparse_xml, xml_root
from normalizers.charts import chart_markdown
from normalizers.fallback import Reader, first_that_reads, office_round_trip
from normalizers.libreoffice import XLSX_ROUND_TRIP
from normalizers.model import (
    AnchoredMarkdown,
    NormalizeContext,
    NormalizedDocument,
    PictureText,
)
from normalizers.ooxml import (
    IMAGE_FILE_NAME,
    check_zip_limits,
    iso_datetime,
    media_part,
    without_doctypes,
)
from normalizers.selfcheck import loss_warning, word_loss
from normalizers.tables import (
    comment_line,
    escape_block_start,
    format_number,
    gfm_table,
    one_line,
)

_MAIN = "{http://schemas.openxmlformats.org/spreadsheetml/2006/main}"
_ROW, _CELL, _VALUE, _INLINE = f"{_MAIN}row", f"{_MAIN}c", f"{_MAIN}v", f"{_MAIN}is"
_TEXT, _PHONETIC, _MERGE = f"{_MAIN}t", f"{_MAIN}rPh", f"{_MAIN}mergeCell"
_COMMENT = f"{_MAIN}comment"
# The parts whose text the workbook's Markdown holds (DOCTYPEs are removed from these).
_TEXT_PARTS = ("xl/sharedStrings", "xl/worksheets/", "xl/comments", "xl/threadedComments/",
               "xl/charts/", "xl/persons/", "xl/drawings/", "xl/workbook")  # fmt: skip
_REVISION_UID = "{http://schemas.microsoft.com/office/spreadsheetml/2014/revision}uid"
_THREADED = "{http://schemas.microsoft.com/office/spreadsheetml/2018/threadedcomments}"
_XDR = "{http://schemas.openxmlformats.org/drawingml/2006/spreadsheetDrawing}"
_CHART_REF = "{http://schemas.openxmlformats.org/drawingml/2006/chart}chart"
_REL_ID = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}id"
_EMBED = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}embed"
_PICTURE, _PICTURE_PROPERTIES = f"{_XDR}pic", f"{_XDR}nvPicPr/{_XDR}cNvPr"
# A picture's description that is only a label ("Picture", what openpyxl writes for
# every image) describes nothing.
_GENERIC_LABEL = re.compile(r"(?:picture|image)(?: \d+)?", re.IGNORECASE)
_MAX_COLUMNS = 16_384  # XFD: a column past it has no letters
_BLIP = f"{_XDR}blipFill/{{http://schemas.openxmlformats.org/drawingml/2006/main}}blip"
# A date and time written as Excel shows it, "2024-01-05 14:30:00": ISO 8601's date and
# time with RFC 3339's readable space for its "T", which would glue the day to the hour.
_DATE_TIME_SEPARATOR = " "
# Number format codes that show a time of day: h or s outside quotes, escapes, [colours].
_FORMAT_LITERALS = re.compile(r'"[^"]*"|\\.|\[[^\]]*\]')
_TIME_CODES = re.compile(r"[hs]", re.IGNORECASE)

Grid = dict[int, dict[int, Any]]  # row -> column -> value; only non-empty cells
Block = tuple[int, int, int, int]  # first row, last row, first column, last column


@dataclass(frozen=True)
class _Book:
    """What reading cells needs from the workbook parts."""

    archive: ZipFile
    parts: frozenset[str]
    shared_strings: Sequence[str]
    epoch: datetime
    date_styles: frozenset[int]
    time_styles: frozenset[int]  # date styles that show the time of day
    timedelta_styles: frozenset[int]
    percent_styles: frozenset[int]


def normalize_xlsx(data: bytes, ctx: NormalizeContext) -> NormalizedDocument:
    check_zip_limits(data, ctx)  # a broken zip directory or a zip bomb ends here
    return first_that_reads(_READERS, data, ctx)


def _read_with_openpyxl(data: bytes, ctx: NormalizeContext) -> NormalizedDocument:
    with warnings.catch_warnings():
        # openpyxl warns about every extension it does not model (data validation, slicers)
        warnings.simplefilter("ignore")
        reader = ExcelReader(
            io.BytesIO(without_doctypes(data, _TEXT_PARTS)), read_only=True, data_only=True
        )
        try:
            reader.read_manifest()
            reader.read_strings()
            reader.read_workbook()
            reader.read_properties()
            apply_stylesheet(reader.archive, reader.wb)
            return _convert_workbook(reader, ctx)
        finally:
            reader.archive.close()


def _convert_workbook(reader: Any, ctx: NormalizeContext) -> NormalizedDocument:
    workbook = reader.wb
    date_styles = frozenset(workbook._date_formats)
    book = _Book(
        archive=reader.archive,
        parts=frozenset(reader.valid_files),
        shared_strings=reader.shared_strings,
        epoch=workbook.epoch,
        date_styles=date_styles,
        time_styles=frozenset(
            i
            for i in date_styles
            if _TIME_CODES.search(
                _FORMAT_LITERALS.sub("", _format_code(workbook, workbook._cell_styles[i]))
            )
        ),
        timedelta_styles=frozenset(workbook._timedelta_formats),
        percent_styles=frozenset(
            i
            for i, style in enumerate(workbook._cell_styles)
            if "%" in _format_code(workbook, style)
        ),
    )
    persons = _persons(
        book, [r.target for r in reader.parser.rels.values() if r.Type.endswith("/person")]
    )
    out = AnchoredMarkdown("sheet")
    sheets: list[str] = []
    strings: list[str] = []  # the cells' own text, for the self-check
    for sheet, rel in reader.parser.find_sheets():
        if rel.target not in book.parts:
            continue
        if sheet.state not in (None, "visible") and not ctx.limits.include_hidden_sheets:
            continue
        is_chartsheet = rel.Type.endswith("/chartsheet")
        grid = {} if is_chartsheet else _read_grid(book, rel.target, sheet.name, ctx, strings)
        placed = [(b[0], b[2], 0, _block_markdown(grid, b)) for b in _blocks(grid)]
        links = _links(book, rel.target)
        anchors = _anchors(book, links)
        placed.extend((row, col, 1, chart) for row, col, chart in _sheet_charts(anchors, book))
        blocks = [markdown for *_, markdown in sorted(placed, key=lambda p: p[:3])]
        if ctx.pictures is not None:
            blocks += _sheet_pictures(anchors, book, ctx.pictures)
        comments = _sheet_comments(book, links, persons)
        out.add(sheet.name, _section(sheet.name, blocks + ([comments] if comments else [])))
        sheets.append(sheet.name)
    props = workbook.properties
    loss = loss_warning(word_loss(strings, out.markdown), "the cells' text")
    return NormalizedDocument(
        markdown=out.markdown,
        title=props.title or None,
        author=props.creator or props.lastModifiedBy or None,
        created_at=iso_datetime(props.created),
        updated_at=iso_datetime(props.modified),
        metadata={"sheets": sheets},
        anchors=out.anchors,
        warnings=(loss,) if loss else (),
    )


def _section(sheet: str, blocks: list[str]) -> str:
    body = "\n\n".join(blocks)
    return f"## {sheet}\n\n{body}\n\n" if body else f"## {sheet}\n\n"


# --- the values-only fallback -----------------------------------------------------------


def _read_with_calamine(data: bytes, ctx: NormalizeContext) -> NormalizedDocument:
    """Cell values through python-calamine (its own parser of every part), merged
    ranges filled; the blocks come out as from openpyxl, without charts or comments."""
    from python_calamine import CalamineWorkbook, SheetTypeEnum, SheetVisibleEnum

    data = without_doctypes(data, _TEXT_PARTS)
    _check_used_ranges(data, ctx)
    workbook = CalamineWorkbook.from_filelike(io.BytesIO(data))
    out = AnchoredMarkdown("sheet")
    sheets: list[str] = []
    strings: list[str] = []
    for meta in workbook.sheets_metadata:
        if meta.visible != SheetVisibleEnum.Visible and not ctx.limits.include_hidden_sheets:
            continue
        grid: Grid = {}
        if meta.typ == SheetTypeEnum.WorkSheet:
            grid = _calamine_grid(workbook.get_sheet_by_name(meta.name), meta.name, ctx, strings)
        out.add(meta.name, _section(meta.name, [_block_markdown(grid, b) for b in _blocks(grid)]))
        sheets.append(meta.name)
    loss = loss_warning(word_loss(strings, out.markdown), "the cells' text")
    return NormalizedDocument(
        markdown=out.markdown,
        metadata={"sheets": sheets},
        anchors=out.anchors,
        warnings=(loss,) if loss else (),
    )


def _calamine_grid(sheet: Any, name: str, ctx: NormalizeContext, strings: list[str]) -> Grid:
    top, left = sheet.start or (0, 0)  # 0-based; to_python() starts at the first used cell
    grid: Grid = {}
    count = 0
    for r, row in enumerate(sheet.to_python(), start=top + 1):
        values = {c: v for c, v in enumerate(row, start=left + 1) if _present(v)}
        if values:
            count += len(values)
            if count > ctx.limits.max_sheet_cells:
                raise _too_many_cells(ctx, name, ctx.limits.max_sheet_cells)
            grid[r] = values
            strings.extend(v for v in values.values() if isinstance(v, str))
    merges = [
        (r0 + 1, r1 + 1, c0 + 1, c1 + 1) for (r0, c0), (r1, c1) in sheet.merged_cell_ranges or ()
    ]
    _fill_merges(grid, merges, count, name, ctx)
    return grid


def _check_used_ranges(data: bytes, ctx: NormalizeContext) -> None:
    """python-calamine holds a sheet's whole used range in memory, empty cells included
    (two cells at A1 and Z200000 take 350 MB): refuse a worksheet whose range spans more
    cells than limits.max_sheet_cells before it loads. One streaming pass over the
    cell references of each worksheet part."""
    limit = ctx.limits.max_sheet_cells
    with ZipFile(io.BytesIO(data)) as archive:
        for name in archive.namelist():
            if not (name.startswith("xl/worksheets/") and name.endswith(".xml")):
                continue
            with archive.open(name) as source:
                rows, cols = _used_range(source)
            if rows * cols > limit:
                raise ctx.fail(
                    ErrorCode.TOO_LARGE,
                    f"{name} spans {rows:,} x {cols:,} cells, over limits.max_sheet_cells "
                    f"({limit:,}) for the values-only reader (openpyxl could not read it)",
                )


def _used_range(source: IO[bytes]) -> tuple[int, int]:
    """(rows, columns) of the box around a worksheet's cells."""
    low_row = low_col = 1 << 31
    high_row = high_col = 0
    row = column = 0
    events = iterparse_xml(source, ("start", "end"), (_ROW, _CELL))
    for event, element in events:
        if element.tag == _ROW:
            if event == "start":
                row, column = int(element.get("r") or row + 1), 0
                continue
            element.clear()
            while element.getprevious() is not None:
                del element.getparent()[0]
        elif event == "end":
            ref = element.get("r")
            column = column_index_from_string(ref.rstrip("0123456789")) if ref else column + 1
            low_row, high_row = min(low_row, row), max(high_row, row)
            low_col, high_col = min(low_col, column), max(high_col, column)
    return (high_row - low_row + 1, high_col - low_col + 1) if high_row else (0, 0)


_OPENPYXL = Reader("openpyxl", _read_with_openpyxl)
_READERS = (
    _OPENPYXL,
    Reader("python-calamine (cell values only)", _read_with_calamine),
    office_round_trip(XLSX_ROUND_TRIP, _OPENPYXL),
)


def _format_code(workbook: Any, style: Any) -> str:
    """The number format of a cell style (built-in ids, then the workbook's own)."""
    if style.numFmtId < BUILTIN_FORMATS_MAX_SIZE:
        return builtin_format_code(style.numFmtId) or ""
    custom: Sequence[str] = workbook._number_formats
    index = style.numFmtId - BUILTIN_FORMATS_MAX_SIZE
    return custom[index] if index < len(custom) else ""


@dataclass(frozen=True)
class _Link:
    type: str  # the relationship type
    target: str  # zip path of the part linked to
    id: str


def _links(book: _Book, part: str) -> list[_Link]:
    """The relationships of `part`, read with lxml (openpyxl's descriptor-based reader
    costs more than a small sheet), targets resolved to zip paths."""
    rels_path = get_rels_path(part)
    if rels_path not in book.parts:
        return []
    folder = posixpath.dirname(part)
    links = []
    for rel in xml_root(book.archive.read(rels_path)):
        target = rel.get("Target", "")
        if rel.get("TargetMode") == "External" or not target:
            continue
        path = target.lstrip("/") if target.startswith("/") else posixpath.join(folder, target)
        links.append(_Link(rel.get("Type", ""), posixpath.normpath(path), rel.get("Id", "")))
    return [link for link in links if link.target in book.parts]


def _related(links: list[_Link], rel_type: str) -> list[str]:
    """Targets of the links whose type ends with `rel_type` (the type's namespace
    differs between Office versions)."""
    return [link.target for link in links if link.type.endswith(rel_type)]


@dataclass(frozen=True)
class _Anchor:
    """One drawing anchor of a sheet: the 1-based row and column of the cell it starts
    at (None: an absolute anchor, or a chartsheet's), its element, and the drawing's
    relationship targets by id."""

    row: int | None
    col: int | None
    element: etree._Element
    targets: dict[str, str]


def _anchors(book: _Book, links: list[_Link]) -> list[_Anchor]:
    anchors = []
    for drawing in _related(links, "/drawing"):
        targets = {link.id: link.target for link in _links(book, drawing)}
        for element in xml_root(book.archive.read(drawing)):
            start = element.find(f"{_XDR}from")
            row = int(start.findtext(f"{_XDR}row") or 0) + 1 if start is not None else None
            col = int(start.findtext(f"{_XDR}col") or 0) + 1 if start is not None else None
            anchors.append(_Anchor(row, col, element, targets))
    return anchors


def _sheet_charts(anchors: list[_Anchor], book: _Book) -> list[tuple[int, int, str]]:
    """Charts drawn on the sheet (title and cached data), each with the 1-based row and
    column of the cell its drawing is anchored at (1, 1 without one: a chartsheet)."""
    charts: list[tuple[int, int, str]] = []
    for anchor in anchors:
        for reference in anchor.element.iter(_CHART_REF):
            chart = anchor.targets.get(reference.get(_REL_ID, ""))
            text = chart_markdown(xml_root(book.archive.read(chart))) if chart else ""
            if text:
                charts.append((anchor.row or 1, anchor.col or 1, text))
    return charts


def _cell_name(row: int | None, col: int | None) -> str:
    """ "B4" for 1-based `row` and `col`; "" where there is no cell (or none that has a
    name: a column past the last)."""
    if row is None or col is None or not 0 < col <= _MAX_COLUMNS:
        return ""
    return f"{get_column_letter(col)}{row}"


def _sheet_pictures(anchors: list[_Anchor], book: _Book, pictures: PictureText) -> list[str]:
    """The sheet's pictures by their anchor cell, top to bottom, left to right: each
    picture's alt text, then what it shows, named by its media part and cell."""
    found: list[tuple[int, int, str]] = []
    for anchor in anchors:
        cell = _cell_name(anchor.row, anchor.col)
        at = f" at {cell}" if cell else ""
        for picture in anchor.element.iter(_PICTURE):
            descr = picture.find(_PICTURE_PROPERTIES)
            alt = one_line(descr.get("descr", "")) if descr is not None else ""
            if IMAGE_FILE_NAME.fullmatch(alt) or _GENERIC_LABEL.fullmatch(alt):
                alt = ""
            blocks = [f"Image{at}: {escape_block_start(alt)}"] if alt else []
            blip = picture.find(_BLIP)
            media = anchor.targets.get(blip.get(_EMBED, "")) if blip is not None else None
            data = media_part(book.archive, media) if media else None
            shown = pictures.text(data, posixpath.basename(media) + at) if media and data else ""
            blocks += [shown] if shown else []
            found.extend((anchor.row or 0, anchor.col or 0, block) for block in blocks)
    found.sort(key=lambda item: item[:2])  # stable: a picture's alt text before its text
    return [block for *_, block in found]


# --- comments ------------------------------------------------------------------------


def _persons(book: _Book, parts: list[str]) -> dict[str, str]:
    """Threaded comments' authors: person id -> display name."""
    return {
        person.get("id", ""): person.get("displayName", "")
        for part in parts
        if part in book.parts
        for person in xml_root(book.archive.read(part)).iter(f"{_THREADED}person")
    }


def _sheet_comments(book: _Book, links: list[_Link], persons: dict[str, str]) -> str:
    """The sheet's cell comments as one block quote, in cell order: notes (legacy
    comments) and threaded comments with their replies. Excel writes a note for every
    threaded comment too, for older versions, holding a boilerplate copy: skipped."""
    found: list[tuple[tuple[int, int], str]] = []
    threaded: set[str] = set()
    for part in _related(links, "/threadedComment"):
        root = xml_root(book.archive.read(part))
        for comment in root.iter(f"{_THREADED}threadedComment"):
            threaded.add(comment.get("id", ""))
            ref = comment.get("ref", "")
            kind = "Reply" if comment.get("parentId") else f"Comment on {ref}"
            author = persons.get(comment.get("personId", ""), "")
            text = comment.findtext(f"{_THREADED}text") or ""
            found.append((_cell_position(ref), comment_line(kind, author, comment.get("dT"), text)))
    for part in _related(links, "/comments"):
        root = xml_root(book.archive.read(part))
        authors = [a.text or "" for a in root.iter(f"{_MAIN}author")]
        for comment in root.iter(_COMMENT):
            if comment.get(_REVISION_UID) in threaded:
                continue
            ref = comment.get("ref", "")
            author_id = int(comment.get("authorId") or 0)
            author = authors[author_id] if 0 <= author_id < len(authors) else ""
            text = "".join(
                t.text or "" for t in comment.iter(_TEXT) if t.getparent().tag != _PHONETIC
            )
            line = comment_line(f"Comment on {ref}", _note_author(author), None, text)
            found.append((_cell_position(ref), line))
    found.sort(key=lambda item: item[0])  # stable: replies stay after their comment
    return "\n>\n".join("> " + line for _, line in found if line)


def _cell_position(ref: str) -> tuple[int, int]:
    try:
        row, col = coordinate_to_tuple(ref)
    except (ValueError, TypeError):
        return (0, 0)
    return row, col


def _note_author(author: str) -> str:
    """A note's author; "tc={id}" is the placeholder Excel writes for threaded ones."""
    return "" if author.startswith("tc=") else author


# --- reading one sheet ---------------------------------------------------------------


def _read_grid(
    book: _Book, part: str, sheet: str, ctx: NormalizeContext, strings: list[str]
) -> Grid:
    """Stream the sheet's XML once: non-empty cells, then merged ranges filled. The
    text cells' values are added to `strings` (merged copies not counted)."""
    limit = ctx.limits.max_sheet_cells
    grid: Grid = {}
    merges: list[Block] = []
    count = 0
    with book.archive.open(part) as source:
        for row_index, values in _rows(source, book, merges):
            if values:
                count += len(values)
                if count > limit:
                    raise _too_many_cells(ctx, sheet, limit)
                grid[row_index] = values
                strings.extend(v for v in values.values() if isinstance(v, str))
    _fill_merges(grid, merges, count, sheet, ctx)
    return grid


def _fill_merges(
    grid: Grid, merges: list[Block], count: int, sheet: str, ctx: NormalizeContext
) -> None:
    """Fill every merged range, counting the copies against the sheet's cell limit
    (`count` cells it holds already)."""
    limit = ctx.limits.max_sheet_cells
    for merge in merges:
        count += _fill_merge(grid, merge, room=limit - count)
        if count > limit:
            raise _too_many_cells(ctx, sheet, limit)


def _rows(source: IO[bytes], book: _Book, merges: list[Block]) -> Any:
    """Yield (row number, {column: value}) for each `<row>`; collect merged ranges."""
    events = iterparse_xml(source, ("end",), (_ROW, _MERGE))
    row_index = 0
    for _, element in events:
        if element.tag == _MERGE:
            min_col, min_row, max_col, max_row = range_boundaries(element.get("ref", ""))
            merges.append((min_row, max_row, min_col, max_col))
            continue
        row_index = int(element.get("r") or row_index + 1)
        values: dict[int, Any] = {}
        column = 0
        for cell in element.iterchildren(_CELL):
            ref = cell.get("r")
            column = column_index_from_string(ref.rstrip("0123456789")) if ref else column + 1
            value = _cell_value(cell, book)
            if _present(value):
                values[column] = value
        # Free what was parsed: the row and everything before it.
        element.clear()
        while element.getprevious() is not None:
            del element.getparent()[0]
        yield row_index, values


def _cell_value(cell: Any, book: _Book) -> Any:
    """The cell's cached value, typed like openpyxl's `data_only` reading."""
    kind = cell.get("t", "n")
    if kind == "inlineStr":
        inline = cell.find(_INLINE)
        if inline is None:
            return None
        return "".join(t.text or "" for t in inline.iter(_TEXT) if t.getparent().tag != _PHONETIC)
    raw = cell.findtext(_VALUE)
    if raw is None or raw == "":
        return None  # an empty styled cell, or a formula nobody calculated
    if kind == "s":
        return book.shared_strings[int(raw)]
    if kind == "b":
        return raw.strip() in ("1", "true")
    if kind == "d":
        return from_ISO8601(raw)
    if kind != "n":
        return raw  # "str" (formula text result), "e" (#DIV/0! and friends)
    number: int | float = float(raw) if any(ch in raw for ch in ".eE") else int(raw)
    style = int(cell.get("s", 0))
    if style in book.date_styles:
        try:
            value = from_excel(number, book.epoch, timedelta=style in book.timedelta_styles)
        except (OverflowError, ValueError):
            return number  # a serial outside the calendar: keep the number
        if style in book.time_styles and isinstance(value, datetime):
            return _DateAndTime.combine(value.date(), value.time())
        return value
    if style in book.percent_styles:
        return _Percent(number)
    return number


class _Percent(float):
    """A number shown as a percentage (0.25 in a `0%` cell reads "25%")."""


class _DateAndTime(datetime):
    """A date whose number format shows the time, midnight included ("00:00:00")."""


def _present(value: Any) -> bool:
    return value is not None and not (isinstance(value, str) and not value.strip())


def _fill_merge(grid: Grid, merge: Block, room: int) -> int:
    """Copy a merged range's top-left value into every cell of it; returns cells added.
    A range with more cells than `room` is not filled (one spanning a whole sheet would
    take minutes): its size is returned, which puts the sheet over its cell limit."""
    min_row, max_row, min_col, max_col = merge
    value = grid.get(min_row, {}).get(min_col)
    if value is None:
        return 0
    area: int = (max_row - min_row + 1) * (max_col - min_col + 1) - 1
    if area > room:
        return area
    added = 0
    for row in range(min_row, max_row + 1):
        cells = grid.setdefault(row, {})
        for col in range(min_col, max_col + 1):
            if col not in cells:
                cells[col] = value
                added += 1
    return added


def _too_many_cells(ctx: NormalizeContext, sheet: str, limit: int) -> Exception:
    return ctx.fail(
        ErrorCode.TOO_LARGE,
        f"sheet {sheet!r} holds more than limits.max_sheet_cells ({limit:,}) non-empty cells",
    )


# --- blocks ----------------------------------------------------------------------------


def _blocks(grid: Grid) -> list[Block]:
    """Rectangular blocks of non-empty cells, in reading order (top to bottom, then left
    to right). Cells touching by an edge belong together (connected components, found
    row by row over runs of adjacent cells, so a dense sheet costs one run per row); the
    bounding boxes of components that overlap are merged, so a table with empty cells
    inside stays one table while diagonally placed tables stay apart."""
    sets = _BoxSets()
    previous_row, previous_runs = -1, list[tuple[int, int, int]]()
    for row in sorted(grid):
        runs = [
            (cols[0], cols[-1], sets.add([row, row, cols[0], cols[-1]]))
            for cols in _runs(sorted(grid[row]))
        ]
        if previous_row == row - 1:
            i = j = 0
            while i < len(previous_runs) and j < len(runs):
                above, below = previous_runs[i], runs[j]
                if above[0] <= below[1] and below[0] <= above[1]:
                    sets.union(above[2], below[2])
                if above[1] < below[1]:
                    i += 1
                else:
                    j += 1
        previous_row, previous_runs = row, runs
    boxes = _merge_overlapping(sets.boxes())
    return [(b[0], b[1], b[2], b[3]) for b in sorted(boxes, key=lambda b: (b[0], b[2]))]


class _BoxSets:
    """Union-find over boxes [first row, last row, first col, last col]; each set's root
    holds the bounding box of the set."""

    def __init__(self) -> None:
        self._parent: list[int] = []
        self._box: list[list[int]] = []

    def add(self, box: list[int]) -> int:
        self._parent.append(len(self._parent))
        self._box.append(box)
        return len(self._parent) - 1

    def root(self, i: int) -> int:
        while self._parent[i] != i:
            self._parent[i] = self._parent[self._parent[i]]
            i = self._parent[i]
        return i

    def union(self, a: int, b: int) -> bool:
        ra, rb = self.root(a), self.root(b)
        if ra == rb:
            return False
        self._parent[rb] = ra
        x, y = self._box[ra], self._box[rb]
        self._box[ra] = [min(x[0], y[0]), max(x[1], y[1]), min(x[2], y[2]), max(x[3], y[3])]
        return True

    def boxes(self) -> list[list[int]]:
        return [box for i, box in enumerate(self._box) if self._parent[i] == i]


def _merge_overlapping(boxes: list[list[int]]) -> list[list[int]]:
    """Merge overlapping boxes until none overlap (a merged box can reach new ones).
    Each round looks row by row at the boxes covering that row, sorted by first column:
    a box overlaps an earlier one exactly when it starts before the furthest column
    reached so far. A component is at least as tall as it has rows, so a round costs
    no more than the sheet has cells, however many small blocks there are."""
    while True:
        sets = _BoxSets()
        by_row: dict[int, list[int]] = {}
        for box in boxes:
            index = sets.add(box)
            for row in range(box[0], box[1] + 1):
                by_row.setdefault(row, []).append(index)
        merged = False
        for indices in by_row.values():
            if len(indices) < 2:
                continue
            indices.sort(key=lambda i: boxes[i][2])
            reach, holder = -1, -1
            for i in indices:
                if boxes[i][2] <= reach:
                    merged = sets.union(holder, i) or merged
                if boxes[i][3] > reach:
                    reach, holder = boxes[i][3], i
        if not merged:
            return boxes
        boxes = sets.boxes()


def _runs(indices: list[int]) -> list[list[int]]:
    """Consecutive runs of ascending integers: [1, 2, 5, 6] -> [[1, 2], [5, 6]]."""
    runs: list[list[int]] = []
    for i in indices:
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs


def _block_markdown(grid: Grid, block: Block) -> str:
    first_row, last_row, first_col, last_col = block
    rows = [
        [grid.get(r, {}).get(c) for c in range(first_col, last_col + 1)]
        for r in range(first_row, last_row + 1)
    ]
    distinct = {_cell_text(v) for row in rows for v in row if v is not None}
    if len(distinct) == 1:  # a single cell, or a merged range filled with its value
        return _paragraph(distinct.pop())
    out: list[str] = []
    distinct_first = {_cell_text(v) for v in rows[0] if v is not None}
    if len(distinct_first) == 1 and len(rows[0]) > 1:
        out.append(_paragraph(distinct_first.pop()))  # a title above the table
        rows = rows[1:]
    texts = [[_cell_text(v) for v in row] for row in rows]
    if all(_is_data(v) for v in rows[0] if v is not None):
        header = [get_column_letter(c) for c in range(first_col, last_col + 1)]
        out.append(gfm_table(header, texts))
    else:
        out.append(gfm_table(texts[0], texts[1:]))
    return "\n\n".join(out)


def _paragraph(text: str) -> str:
    return escape_block_start(one_line(text))


def _is_data(value: Any) -> bool:
    return isinstance(value, int | float | bool | date | time | timedelta)


def _cell_text(value: Any) -> str:
    """A cell value as text: ISO 8601 dates (date only at midnight), numbers without
    binary float noise (Excel keeps 15 significant digits), percentages as shown, TRUE/FALSE."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, _Percent):
        return format_number(value * 100) + "%"
    if isinstance(value, float):
        return format_number(value)
    if isinstance(value, datetime):
        if value.time() == time(0) and not isinstance(value, _DateAndTime):
            return value.date().isoformat()
        timespec = "milliseconds" if value.microsecond else "seconds"
        return value.isoformat(sep=_DATE_TIME_SEPARATOR, timespec=timespec)
    if isinstance(value, date | time):
        return value.isoformat()
    return str(value)
