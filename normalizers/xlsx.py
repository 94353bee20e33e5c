"""XLSX/XLSM to Markdown (SPEC §2): one `## <sheet>` section per visible sheet, one GFM
table per rectangular block of cells.

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
- a block of a single cell is a paragraph, not a one-cell table;
- the header is the block's first row, unless that row holds only numbers, dates or
  booleans (it is data then): the column letters become the header.
Charts (on a sheet, or a chartsheet) follow the sheet's tables as title + cached data.
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from typing import IO, Any
from zipfile import ZipFile

from lxml import etree
from openpyxl.packaging.relationship import get_dependents, get_rels_path
from openpyxl.reader.excel import ExcelReader
from openpyxl.styles.numbers import BUILTIN_FORMATS_MAX_SIZE, builtin_format_code
from openpyxl.styles.stylesheet import apply_stylesheet
from openpyxl.utils import column_index_from_string, get_column_letter, range_boundaries
from openpyxl.utils.datetime import from_excel, from_ISO8601

from config.errors import ErrorCode
from normalizers.base import (
    AnchoredMarkdown,
    NormalizeContext,
    NormalizedDocument,
    check_zip_limits,
    iso_datetime,
    register,
)
from normalizers.charts import chart_markdown, parse_xml_part
from normalizers.tables import escape_block_start, format_number, gfm_table, one_line

XLSX_MIMES = (
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    "application/vnd.ms-excel.sheet.macroEnabled.12",
)

_REL = "http://schemas.openxmlformats.org/officeDocument/2006/relationships/"
_MAIN = "{http://schemas.openxmlformats.org/spreadsheetml/2006/main}"
_ROW, _CELL, _VALUE, _INLINE = f"{_MAIN}row", f"{_MAIN}c", f"{_MAIN}v", f"{_MAIN}is"
_TEXT, _PHONETIC, _MERGE = f"{_MAIN}t", f"{_MAIN}rPh", f"{_MAIN}mergeCell"

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
    timedelta_styles: frozenset[int]
    percent_styles: frozenset[int]


@register("xlsx", extensions=(".xlsx", ".xlsm"), mimes=XLSX_MIMES)
def normalize_xlsx(data: bytes, ctx: NormalizeContext) -> NormalizedDocument:
    check_zip_limits(data, ctx)
    with warnings.catch_warnings():
        # openpyxl warns about every extension it does not model (data validation, slicers)
        warnings.simplefilter("ignore")
        reader = ExcelReader(io.BytesIO(data), read_only=True, data_only=True)
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
    book = _Book(
        archive=reader.archive,
        parts=frozenset(reader.valid_files),
        shared_strings=reader.shared_strings,
        epoch=workbook.epoch,
        date_styles=frozenset(workbook._date_formats),
        timedelta_styles=frozenset(workbook._timedelta_formats),
        percent_styles=frozenset(
            i
            for i, style in enumerate(workbook._cell_styles)
            if "%" in _format_code(workbook, style)
        ),
    )
    out = AnchoredMarkdown("sheet")
    sheets: list[str] = []
    for sheet, rel in reader.parser.find_sheets():
        if rel.target not in book.parts:
            continue
        if sheet.state not in (None, "visible") and not ctx.limits.include_hidden_sheets:
            continue
        is_chartsheet = rel.Type.endswith("/chartsheet")
        grid = {} if is_chartsheet else _read_grid(book, rel.target, sheet.name, ctx)
        blocks = [_block_markdown(grid, block) for block in _blocks(grid)]
        body = "\n\n".join(blocks + _sheet_charts(book, rel.target))
        out.add(sheet.name, f"## {sheet.name}\n\n{body}\n\n" if body else f"## {sheet.name}\n\n")
        sheets.append(sheet.name)
    props = workbook.properties
    return NormalizedDocument(
        markdown=out.markdown,
        title=props.title or None,
        author=props.creator or props.lastModifiedBy or None,
        created_at=iso_datetime(props.created),
        updated_at=iso_datetime(props.modified),
        metadata={"sheets": sheets},
        anchors=out.anchors,
    )


def _format_code(workbook: Any, style: Any) -> str:
    """The number format of a cell style (built-in ids, then the workbook's own)."""
    if style.numFmtId < BUILTIN_FORMATS_MAX_SIZE:
        return builtin_format_code(style.numFmtId) or ""
    custom: Sequence[str] = workbook._number_formats
    index = style.numFmtId - BUILTIN_FORMATS_MAX_SIZE
    return custom[index] if index < len(custom) else ""


def _sheet_charts(book: _Book, sheet_part: str) -> list[str]:
    """Charts drawn on the sheet (title and cached data), after its tables."""
    charts: list[str] = []
    for drawing in _related(book, sheet_part, "drawing"):
        for chart in _related(book, drawing, "chart"):
            text = chart_markdown(parse_xml_part(book.archive.read(chart)))
            if text:
                charts.append(text)
    return charts


def _related(book: _Book, part: str, kind: str) -> list[str]:
    """Zip paths of the parts that `part` links to with relationships of type `kind`."""
    rels_path = get_rels_path(part)
    if rels_path not in book.parts:
        return []
    rels = get_dependents(book.archive, rels_path).find(_REL + kind)
    return [r.target for r in rels if r.target in book.parts]


# --- reading one sheet ---------------------------------------------------------------


def _read_grid(book: _Book, part: str, sheet: str, ctx: NormalizeContext) -> Grid:
    """Stream the sheet's XML once: non-empty cells, then merged ranges filled."""
    limit = ctx.limits.max_sheet_cells
    grid: Grid = {}
    merges: list[str] = []
    count = 0
    with book.archive.open(part) as source:
        for row_index, values in _rows(source, book, merges):
            if values:
                count += len(values)
                if count > limit:
                    raise _too_many_cells(ctx, sheet, limit)
                grid[row_index] = values
    for ref in merges:
        count += _fill_merge(grid, ref, room=limit - count)
        if count > limit:
            raise _too_many_cells(ctx, sheet, limit)
    return grid


def _rows(source: IO[bytes], book: _Book, merges: list[str]) -> Any:
    """Yield (row number, {column: value}) for each `<row>`; collect merge refs."""
    events = etree.iterparse(
        source, events=("end",), tag=(_ROW, _MERGE), resolve_entities=False, no_network=True
    )
    row_index = 0
    for _, element in events:
        if element.tag == _MERGE:
            merges.append(element.get("ref", ""))
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
            return from_excel(number, book.epoch, timedelta=style in book.timedelta_styles)
        except (OverflowError, ValueError):
            return number  # a serial outside the calendar: keep the number
    if style in book.percent_styles:
        return _Percent(number)
    return number


class _Percent(float):
    """A number shown as a percentage (0.25 in a `0%` cell reads "25%")."""


def _present(value: Any) -> bool:
    return value is not None and not (isinstance(value, str) and not value.strip())


def _fill_merge(grid: Grid, ref: str, room: int) -> int:
    """Copy a merged range's top-left value into every cell of it; returns cells added.
    A range with more cells than `room` is not filled (one spanning a whole sheet would
    take minutes): its size is returned, which puts the sheet over its cell limit."""
    min_col, min_row, max_col, max_row = range_boundaries(ref)
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
    out: list[str] = []
    distinct_first = {_cell_text(v) for v in rows[0] if v is not None}
    if len(rows) > 1 and len(distinct_first) == 1 and len(rows[0]) > 1:
        out.append(_paragraph(distinct_first.pop()))  # a title above the table
        rows = rows[1:]
    if len(rows) == 1 and len(rows[0]) == 1:
        out.append(_paragraph(_cell_text(rows[0][0])))
        return "\n\n".join(out)
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
        if value.time() == time(0):
            return value.date().isoformat()
        return value.isoformat(timespec="milliseconds" if value.microsecond else "seconds")
    if isinstance(value, date | time):
        return value.isoformat()
    return str(value)
