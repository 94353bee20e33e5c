"""XLSX/XLSM to Markdown (SPEC §2): one `## <sheet>` section per visible sheet, one GFM
table per rectangular block of cells.

Reading: openpyxl in read-only mode with `data_only=True` (formulas as their cached
values). Read-only worksheets do not expose merged ranges and pad every row up to the
*declared* dimension (a sheet may claim 1,048,576 rows and 16,384 columns), so each sheet
is streamed once through openpyxl's own worksheet parser: it yields only the rows that
exist in the XML and collects `<mergeCells>` on the way. Only non-empty cells are kept
(sparse), so memory and time follow the real content, not the declared used range, and
the cell limit is enforced while streaming.

Layout: merged ranges are filled (top-left value copied into every cell), then the sheet
splits into rectangular blocks of cells separated by empty rows and columns (see
`_blocks`), which come out top to bottom, then left to right. Per block:
- a first row holding one value only (a title, usually a merged label across the block)
  becomes a paragraph above the table;
- a block of a single cell is a paragraph, not a one-cell table;
- the header is the block's first row, unless that row holds only numbers, dates or
  booleans (it is data then): the column letters become the header.
Charts drawn on a sheet follow its tables as title + cached data table; chartsheets
(a sheet that is only a chart) are skipped with a warning.
"""

from __future__ import annotations

import io
import warnings
from datetime import date, datetime, time, timedelta
from typing import Any

import openpyxl
from openpyxl.chartsheet import Chartsheet
from openpyxl.packaging.relationship import get_dependents, get_rels_path
from openpyxl.utils import get_column_letter, range_boundaries
from openpyxl.worksheet._reader import WorkSheetParser

from chunking.text import Anchor
from config.errors import ErrorCode
from normalizers.base import (
    NormalizeContext,
    NormalizedDocument,
    check_zip_limits,
    iso_datetime,
    register,
)
from normalizers.charts import chart_markdown, parse_chart_xml
from normalizers.tables import format_number, gfm_table

XLSX_MIMES = (
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    "application/vnd.ms-excel.sheet.macroEnabled.12",
)

_DRAWING_REL = "http://schemas.openxmlformats.org/officeDocument/2006/relationships/drawing"
_CHART_REL = "http://schemas.openxmlformats.org/officeDocument/2006/relationships/chart"

Grid = dict[int, dict[int, Any]]  # row -> column -> value; only non-empty cells
Block = tuple[int, int, int, int]  # first row, last row, first column, last column


@register("xlsx", extensions=(".xlsx", ".xlsm"), mimes=XLSX_MIMES)
def normalize_xlsx(data: bytes, ctx: NormalizeContext) -> NormalizedDocument:
    check_zip_limits(data, ctx)
    with warnings.catch_warnings():
        # openpyxl warns about every extension it does not model (data validation, slicers)
        warnings.simplefilter("ignore")
        workbook = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
        try:
            return _convert_workbook(workbook, ctx)
        finally:
            workbook.close()


def _convert_workbook(workbook: Any, ctx: NormalizeContext) -> NormalizedDocument:
    parts: list[str] = []
    anchors: list[Anchor] = []
    notes: list[str] = []
    sheets: list[str] = []
    offset = 0
    for name in workbook.sheetnames:
        sheet = workbook[name]
        if sheet.sheet_state != "visible" and not ctx.limits.include_hidden_sheets:
            continue
        if isinstance(sheet, Chartsheet):
            notes.append(f"chartsheet {name!r} skipped: charts are not tabulated")
            continue
        body = _sheet_markdown(sheet, ctx)
        section = f"## {name}\n\n{body}\n\n" if body else f"## {name}\n\n"
        anchors.append(Anchor(offset, "sheet", name))
        sheets.append(name)
        parts.append(section)
        offset += len(section)
    props = workbook.properties
    return NormalizedDocument(
        markdown="".join(parts),
        title=props.title or None,
        author=props.creator or props.lastModifiedBy or None,
        created_at=iso_datetime(props.created),
        updated_at=iso_datetime(props.modified),
        metadata={"sheets": sheets},
        anchors=tuple(anchors),
        warnings=tuple(notes),
    )


# --- reading one sheet ---------------------------------------------------------------


def _sheet_markdown(sheet: Any, ctx: NormalizeContext) -> str:
    grid = _read_grid(sheet, ctx)
    blocks = [_block_markdown(grid, block) for block in _blocks(grid)]
    return "\n\n".join(blocks + _sheet_charts(sheet))


def _sheet_charts(sheet: Any) -> list[str]:
    """Charts drawn on the sheet (title and cached data), after its tables."""
    archive = sheet.parent._archive
    names = set(archive.namelist())
    charts: list[str] = []
    for drawing in _related(archive, names, sheet._worksheet_path, _DRAWING_REL):
        for chart in _related(archive, names, drawing, _CHART_REL):
            text = chart_markdown(parse_chart_xml(archive.read(chart)))
            if text:
                charts.append(text)
    return charts


def _related(archive: Any, names: set[str], part: str, rel_type: str) -> list[str]:
    """Zip paths of the parts `part` links to with relationships of `rel_type`."""
    rels_path = get_rels_path(part)
    if rels_path not in names:
        return []
    return [
        r.target for r in get_dependents(archive, rels_path).find(rel_type) if r.target in names
    ]


def _read_grid(sheet: Any, ctx: NormalizeContext) -> Grid:
    """Stream the sheet's XML once: non-empty cells, then merged ranges filled."""
    limit = ctx.limits.max_sheet_cells
    grid: Grid = {}
    count = 0
    workbook = sheet.parent
    # The same parser and arguments openpyxl's read-only worksheet uses internally.
    with sheet._get_source() as source:
        parser = WorkSheetParser(
            source,
            sheet._shared_strings,
            data_only=True,
            epoch=workbook.epoch,
            date_formats=workbook._date_formats,
            timedelta_formats=workbook._timedelta_formats,
        )
        for row_index, cells in parser.parse():
            values = {c["column"]: c["value"] for c in cells if _present(c["value"])}
            if not values:
                continue
            count += len(values)
            if count > limit:
                raise _too_many_cells(ctx, sheet.title, limit)
            grid[row_index] = values
        merged = parser.merged_cells
    for merge in merged.mergeCell if merged is not None else ():
        count += _fill_merge(grid, merge.ref)
        if count > limit:
            raise _too_many_cells(ctx, sheet.title, limit)
    return grid


def _present(value: Any) -> bool:
    return value is not None and not (isinstance(value, str) and not value.strip())


def _fill_merge(grid: Grid, ref: str) -> int:
    """Copy a merged range's top-left value into every cell of it; returns cells added."""
    min_col, min_row, max_col, max_row = range_boundaries(ref)
    value = grid.get(min_row, {}).get(min_col)
    if value is None:
        return 0
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
    return " ".join(text.split())


def _is_data(value: Any) -> bool:
    return isinstance(value, int | float | bool | date | time | timedelta)


def _cell_text(value: Any) -> str:
    """A cell value as text: ISO 8601 dates (date only at midnight), numbers without
    binary float noise (Excel keeps 15 significant digits), TRUE/FALSE."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, float):
        return format_number(value)
    if isinstance(value, datetime):
        if value.time() == time(0):
            return value.date().isoformat()
        return value.isoformat(timespec="milliseconds" if value.microsecond else "seconds")
    if isinstance(value, date | time):
        return value.isoformat()
    return str(value)
