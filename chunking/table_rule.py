"""A markdown-it block rule for GFM tables that emits only `table_open`/`table_close`.

The chunker needs a table's lines, not its cells: markdown-it's own rule emits a row
token, a cell token and an inline token per cell, about half of all tokens on
table-heavy documents and a third of the parse time. Whether a table starts is decided
by markdown-it's rule itself (in silent mode, which stops before the body); the body
ends where that rule ends it: at a blank line, a line indented less than the table or
as code, a line another block would start (its terminator rules), or once too many
cells would be filled in.
"""

from __future__ import annotations

from markdown_it import MarkdownIt
from markdown_it.rules_block import StateBlock
from markdown_it.rules_block.table import MAX_AUTOCOMPLETED_CELLS
from markdown_it.rules_block.table import table as markdown_it_table


def table_lines_only(md: MarkdownIt) -> None:
    """Plugin: replace the `table` block rule."""
    md.block.ruler.at("table", _table, {"alt": ["paragraph", "reference"]})


def _columns(line: str) -> int:
    """Cells of a row: unescaped pipes, less the leading and trailing ones."""
    body = line.strip()
    count = body.count("|") - body.count("\\|") + 1
    return count - body.startswith("|") - (body.endswith("|") and not body.endswith("\\|"))


def _table(state: StateBlock, start_line: int, end_line: int, silent: bool) -> bool:
    if not markdown_it_table(state, start_line, end_line, True):
        return False
    if silent:
        return True
    src = state.src
    header = src[state.bMarks[start_line] + state.tShift[start_line] : state.eMarks[start_line]]
    column_count = _columns(header)
    terminators = state.md.block.ruler.getRules("blockquote")
    old_parent = state.parentType
    state.parentType = "table"
    autocompleted = 0
    line = start_line + 2
    while line < end_line:
        if state.sCount[line] < state.blkIndent:
            break
        if any(rule(state, line, end_line, True) for rule in terminators):
            break
        text = src[state.bMarks[line] + state.tShift[line] : state.eMarks[line]].strip()
        if not text or state.is_code_block(line):
            break
        autocompleted += column_count - _columns(text)
        if autocompleted > MAX_AUTOCOMPLETED_CELLS:
            break
        line += 1
    token = state.push("table_open", "table", 1)
    token.map = [start_line, line]
    state.push("table_close", "table", -1)
    state.parentType = old_parent
    state.line = line
    return True
