"""DOCX steps 2 and 3: pandoc reads the rewritten package into its JSON AST, which is
simplified and written as GFM.

The AST rewrite: tables become plain grids (merged cells copied into every cell they
cover, cell content flattened to one line) so the writer emits GFM pipe tables instead
of raw HTML; images become their alt text (and, with a picture reader, the picture's
text follows the block that shows it: `place_pictures`); code blocks become fenced
blocks; list items become tight; adjacent bullet lists merge and adjacent numbered
lists alternate "1."/"1)" to stay apart; checkbox paragraphs become task list items.
The writer emits GFM without raw HTML, math as `$...$`/`$$...$$`.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import pypandoc

from config.errors import ErrorCode
from normalizers.model import NormalizeContext
from normalizers.tables import NESTED_CELL_SEPARATOR, NESTED_ROW_SEPARATOR

_WRITER = "gfm-raw_html-tex_math_gfm+tex_math_dollars"
# Pandoc's heap may grow to a few times the (already limited) decompressed package size.
_HEAP_PER_DECOMPRESSED_BYTE = 8
_MIN_HEAP_BYTES = 2 * 1024**3
_CHECKBOXES = MappingProxyType({"☐": False, "☒": True, "☑": True})
_NO_ATTR: tuple[Any, ...] = ("", (), ())  # serialized as JSON arrays


@dataclass(frozen=True)
class PandocBody:
    markdown: str
    first_heading: str | None  # the text of the first level-1 heading
    warnings: tuple[str, ...]


def pandoc_markdown(
    package: bytes, ctx: NormalizeContext, picture_text: Callable[[str], str] | None = None
) -> PandocBody:
    """The body of a (rewritten) DOCX package as GFM: read to pandoc's AST, simplified,
    written; both pandoc runs share one time budget. `picture_text` gives the Markdown
    of the picture an image's target names (see `place_pictures`)."""
    deadline = time.monotonic() + ctx.limits.conversion_timeout_s
    heap = max(_MIN_HEAP_BYTES, _HEAP_PER_DECOMPRESSED_BYTE * ctx.limits.max_decompressed_bytes)
    ast_json, read_warnings = run_pandoc(
        ["-f", "docx", "-t", "json", "--track-changes=accept"], package, ctx, deadline, heap
    )
    ast = json.loads(ast_json)
    blocks = ast["blocks"]
    if picture_text is not None:
        blocks = place_pictures(blocks, picture_text)
    blocks = rewrite(blocks)
    ast["blocks"] = blocks
    ast["meta"] = {}
    markdown, write_warnings = run_pandoc(
        ["-f", "json", "-t", _WRITER, "--wrap=none"],
        json.dumps(ast).encode(),
        ctx,
        deadline,
        heap,
    )
    return PandocBody(
        markdown=drop_list_separators(markdown.decode("utf-8")),
        first_heading=first_heading_text(blocks),
        warnings=tuple(read_warnings + write_warnings),
    )


def run_pandoc(
    args: list[str], stdin: bytes, ctx: NormalizeContext, deadline: float, heap_bytes: int
) -> tuple[bytes, list[str]]:
    """Run pandoc sandboxed (no file or network access) with what is left of the time
    budget; every failure is the document's, never the process's."""
    try:
        pandoc = pypandoc.get_pandoc_path()
    except OSError as exc:
        raise ctx.fail(
            ErrorCode.UNSUPPORTED_FORMAT,
            f"pandoc is not available ({exc}); pip install pypandoc-binary",
        ) from None
    remaining = deadline - time.monotonic()
    command = [pandoc, "+RTS", f"-M{heap_bytes}", "-RTS", "--sandbox", *args]
    try:
        if remaining <= 0:
            raise subprocess.TimeoutExpired(command, 0)
        result = subprocess.run(command, input=stdin, capture_output=True, timeout=remaining)
    except subprocess.TimeoutExpired:
        # The same bytes would time out again: the document is over the processing
        # budget (too large or too complex), not damaged.
        raise ctx.fail(
            ErrorCode.TOO_LARGE,
            f"pandoc did not finish within limits.conversion_timeout_s "
            f"({ctx.limits.conversion_timeout_s:g} s)",
        ) from None
    stderr = result.stderr.decode("utf-8", "replace").strip()
    if result.returncode != 0:
        if "heap overflow" in stderr.lower() or "heap exhausted" in stderr.lower():
            raise ctx.fail(ErrorCode.TOO_LARGE, f"pandoc ran out of its {heap_bytes:,}-byte heap")
        first_line = stderr.splitlines()[0][:500] if stderr else "no message"  # no backtrace
        raise ctx.fail(
            ErrorCode.CORRUPT, f"pandoc could not read it (exit {result.returncode}): {first_line}"
        )
    warnings = [line for line in stderr.splitlines() if line.startswith("[WARNING]")]
    return result.stdout, warnings


# --- step 2: AST rewrite --------------------------------------------------------------


# Blocks holding blocks: a picture's text goes after the inner block that shows it.
_CONTAINERS = frozenset({"BulletList", "OrderedList", "BlockQuote", "Div", "Figure"})


def place_pictures(
    blocks: list[dict[str, Any]], picture_text: Callable[[str], str]
) -> list[dict[str, Any]]:
    """After each block that shows pictures, their Markdown (`picture_text` of each
    image's target, in document order) as raw GFM: inside a list item or quote, after
    the paragraph there; after a table for pictures in its cells (a cell is one line)."""
    out: list[dict[str, Any]] = []
    for block in blocks:
        kind = block["t"]
        if kind in _CONTAINERS:
            out.append(_place_inside(block, picture_text))
            continue
        out.append(block)
        texts = [text for target in _image_targets(block) if (text := picture_text(target))]
        if texts:
            out.append({"t": "RawBlock", "c": ["gfm", "\n\n".join(texts)]})
    return out


def _place_inside(block: dict[str, Any], picture_text: Callable[[str], str]) -> dict[str, Any]:
    kind, content = block["t"], block["c"]
    if kind == "BulletList":
        return {"t": kind, "c": [place_pictures(item, picture_text) for item in content]}
    if kind == "OrderedList":
        items = [place_pictures(item, picture_text) for item in content[1]]
        return {"t": kind, "c": [content[0], items]}
    if kind == "BlockQuote":
        return {"t": kind, "c": place_pictures(content, picture_text)}
    if kind == "Div":
        return {"t": kind, "c": [content[0], place_pictures(content[1], picture_text)]}
    # a Figure: its body shows the picture, its caption follows
    return {"t": kind, "c": [content[0], content[1], place_pictures(content[2], picture_text)]}


def _image_targets(node: Any) -> list[str]:
    """The targets of the images anywhere in `node`, in document order."""
    if isinstance(node, list):
        return [target for item in node for target in _image_targets(item)]
    if isinstance(node, dict):
        if node.get("t") == "Image":
            return [node["c"][2][0]]
        if node.get("t") in _LEAVES:
            return []
        return _image_targets(node.get("c"))
    return []


# Nodes with nothing inside to rewrite: most of a document's nodes, skipped cheaply.
_LEAVES = frozenset({"Str", "Space", "SoftBreak", "LineBreak", "Code", "Math"})


def rewrite(node: Any) -> Any:
    """Bottom-up rewrite of pandoc's JSON AST (see the module docstring)."""
    if isinstance(node, list):
        items = [rewrite(item) for item in node]
        if items and all(isinstance(i, dict) and "t" in i for i in items):
            return _rewrite_sequence(items)
        return items
    if isinstance(node, dict):
        if node.get("t") in _LEAVES:
            return node
        return {key: rewrite(value) for key, value in node.items()}
    return node


def _rewrite_sequence(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for item in items:
        kind = item["t"]
        content: Any = item.get("c")
        if kind == "Image":
            out.extend(content[1])  # alt text only: no base64, no media paths
        elif kind in ("Underline", "SmallCaps"):
            out.extend(content)
        elif kind in ("Span", "Div"):
            out.extend(content[1])
        elif kind == "Figure":
            out.extend(content[2] + content[1][1])  # body, then caption
        elif kind == "RawBlock" and content[0] == "gfm":
            out.append(item)  # a picture's text from `place_pictures`
        elif kind in ("RawInline", "RawBlock"):
            continue  # no raw HTML/OpenXML in the output
        elif kind == "CodeBlock":
            out.append(_fenced_code(content[1]))
        elif kind == "Table":
            out.extend(_simple_table(item))
        elif kind in ("Para", "Plain") and (task := _checkbox_item(content)) is not None:
            _append_merging_lists(out, {"t": "BulletList", "c": [[task]]})
        elif kind in ("BulletList", "OrderedList"):
            _append_merging_lists(out, _tight_list(item))
        else:
            _append_merging_lists(out, item)
    return out


def _tight_list(item: dict[str, Any]) -> dict[str, Any]:
    """Word list items are paragraphs, which pandoc writes as a loose list (blank lines
    between items); an item's leading paragraph becomes plain text to keep it tight."""
    items = item["c"] if item["t"] == "BulletList" else item["c"][1]
    for blocks in items:
        if blocks and blocks[0]["t"] == "Para":
            blocks[0] = {"t": "Plain", "c": blocks[0]["c"]}
    return item


def _append_merging_lists(out: list[dict[str, Any]], item: dict[str, Any]) -> None:
    """Adjacent bullet lists merge. Adjacent numbered lists stay apart (each keeps its own
    numbering) by alternating "1." and "1)", which CommonMark reads as separate lists;
    the writer's separator between them is then dropped by `drop_list_separators`."""
    previous = out[-1] if out else None
    if previous is not None and item["t"] == previous["t"] == "BulletList":
        previous["c"] = previous["c"] + item["c"]
        return
    if previous is not None and item["t"] == previous["t"] == "OrderedList":
        start, style, delimiter = item["c"][0]
        after_period = previous["c"][0][2]["t"] != "OneParen"
        delimiter = {"t": "OneParen" if after_period else "Period"}
        item = {"t": "OrderedList", "c": [[start, style, delimiter], item["c"][1]]}
    out.append(item)


# What the writer puts between adjacent lists: an HTML comment, or without raw HTML a
# paragraph holding only a no-break space.
_LIST_SEPARATORS = frozenset({"<!-- -->", "&nbsp;"})
_FENCE = re.compile(r"^(`{3,}|~{3,})")


def drop_list_separators(markdown: str) -> str:
    """Remove the separators pandoc writes between adjacent lists (outside code)."""
    lines: list[str] = []
    fence: str | None = None
    for line in markdown.split("\n"):
        opener = _FENCE.match(line)
        if fence is None and opener:
            fence = opener.group(1)
        elif (
            fence is not None and line.strip().startswith(fence) and set(line.strip()) == {fence[0]}
        ):
            fence = None
        elif fence is None and line in _LIST_SEPARATORS:
            continue
        lines.append(line)
    return "\n".join(lines)


def _checkbox_item(inlines: list[dict[str, Any]]) -> dict[str, Any] | None:
    """A paragraph starting with a checkbox glyph becomes a task list item (the GFM
    writer prints `- [ ]`/`- [x]` for list items starting with these glyphs)."""
    if not inlines or inlines[0]["t"] != "Str":
        return None
    first: str = inlines[0]["c"]
    glyph = first[:1]
    if glyph not in _CHECKBOXES:
        return None
    rest = inlines[1:] if first == glyph else [{"t": "Str", "c": first[1:]}, *inlines[1:]]
    while rest and rest[0]["t"] == "Space":
        rest = rest[1:]
    marker = "☒" if _CHECKBOXES[glyph] else "☐"
    return {"t": "Plain", "c": [{"t": "Str", "c": marker}, {"t": "Space"}, *rest]}


def _fenced_code(code: str) -> dict[str, Any]:
    longest = max((len(m) for m in re.findall(r"`+", code)), default=0)
    fence = "`" * max(3, longest + 1)
    return {"t": "RawBlock", "c": ["gfm", f"{fence}\n{code}\n{fence}"]}


def _simple_table(table: dict[str, Any]) -> list[dict[str, Any]]:
    """The caption's blocks, then a grid every row of which has every column, merged
    cells repeated in each cell they cover, each cell one line, one header row: the
    first row where Word marks one (pandoc's table head), else an empty one, so that a
    data row is never taken for column names."""
    _attr, caption, _colspecs, head, bodies, foot = table["c"]
    has_header = bool(head[1])
    rows = list(head[1])
    for body in bodies:
        rows.extend(body[2])
        rows.extend(body[3])
    rows.extend(foot[1])
    grid: dict[tuple[int, int], list[dict[str, Any]]] = {}
    width = 0
    for r, row in enumerate(rows):
        c = 0
        for cell in row[1]:
            while (r, c) in grid:
                c += 1
            _cell_attr, _align, row_span, col_span, blocks = cell
            inlines = _cell_inlines(blocks)
            for dr in range(max(1, row_span)):
                for dc in range(max(1, col_span)):
                    grid[(r + dr, c + dc)] = inlines
            c += max(1, col_span)
        width = max(width, c)
    caption_blocks: list[dict[str, Any]] = caption[1]
    if width == 0:
        return caption_blocks
    table_rows = [
        [_NO_ATTR, [_simple_cell(grid.get((r, c), [])) for c in range(width)]]
        for r in range(len(rows))
    ]
    empty_row = [_NO_ATTR, [_simple_cell([]) for _ in range(width)]]
    colspecs = [[{"t": "AlignDefault"}, {"t": "ColWidthDefault"}] for _ in range(width)]
    simple = {
        "t": "Table",
        "c": [
            _NO_ATTR,
            [None, []],
            colspecs,
            [_NO_ATTR, table_rows[:1] if has_header else [empty_row]],
            [[_NO_ATTR, 0, [], table_rows[1:] if has_header else table_rows]],
            [_NO_ATTR, []],
        ],
    }
    return [*caption_blocks, simple]


def _simple_cell(inlines: list[dict[str, Any]]) -> list[Any]:
    blocks = [{"t": "Plain", "c": inlines}] if inlines else []
    return [_NO_ATTR, {"t": "AlignDefault"}, 1, 1, blocks]


def _cell_inlines(blocks: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """A cell's blocks as one line: paragraphs joined by spaces, list items marked."""
    return _join((_block_inlines(block) for block in blocks), [])


def _block_inlines(block: dict[str, Any]) -> list[dict[str, Any]]:
    kind: str = block["t"]
    content: Any = block.get("c")
    if kind in ("Plain", "Para"):
        return _one_line(content)
    if kind == "Header":
        return _one_line(content[2])
    if kind == "LineBlock":
        return _join([_one_line(line) for line in content], [])
    if kind == "RawBlock" and content[0] == "gfm":  # a fenced code block from above
        code = content[1].split("\n", 1)[-1].rsplit("\n", 1)[0]
        return [{"t": "Code", "c": [_NO_ATTR, " ".join(code.split())]}]
    if kind in ("BlockQuote", "Div"):
        return _cell_inlines(content[-1] if kind == "Div" else content)
    if kind in ("BulletList", "OrderedList"):
        items = content if kind == "BulletList" else content[1]
        start = 1 if kind == "BulletList" else content[0][0]
        return _join(
            (
                [
                    {"t": "Str", "c": "•" if kind == "BulletList" else f"{n}."},
                    {"t": "Space"},
                    *_cell_inlines(item),
                ]
                for n, item in enumerate(items, start=start)
            ),
            [],
        )
    if kind == "DefinitionList":
        return _cell_inlines(
            [{"t": "Plain", "c": term} for term, _ in content]
            + [b for _, definitions in content for d in definitions for b in d]
        )
    if kind == "Table":  # a nested table, already simple: "a; b / c; d" (see tables.py)
        _a, _c, _s, head, bodies, _f = content
        rows = head[1] + [row for body in bodies for row in body[3]]
        lines = [_row_inlines([_cell_inlines(cell[4]) for cell in row[1]]) for row in rows]
        return _join(lines, [{"t": "Str", "c": NESTED_ROW_SEPARATOR.strip()}, {"t": "Space"}])
    return []


def _row_inlines(cells: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """A nested table's row: its non-empty cells, `NESTED_CELL_SEPARATOR` between them."""
    out: list[dict[str, Any]] = []
    for cell in cells:
        if not cell:
            continue
        if out:
            out.extend([{"t": "Str", "c": NESTED_CELL_SEPARATOR.strip()}, {"t": "Space"}])
        out.extend(cell)
    return out


def _join(
    parts: Iterable[list[dict[str, Any]]], separator: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Non-empty parts joined by a space, `separator` and the space it ends with."""
    out: list[dict[str, Any]] = []
    for part in parts:
        if not part:
            continue
        if out:
            out.extend([{"t": "Space"}, *separator])
        out.extend(part)
    return out


def _one_line(inlines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Line breaks become spaces (a pipe table row is one line), recursively."""
    out: list[dict[str, Any]] = []
    for inline in inlines:
        kind = inline["t"]
        if kind in ("LineBreak", "SoftBreak"):
            out.append({"t": "Space"})
        elif kind in ("Emph", "Strong", "Strikeout", "Superscript", "Subscript"):
            out.append({"t": kind, "c": _one_line(inline["c"])})
        elif kind in ("Link", "Quoted", "Cite"):
            content = list(inline["c"])
            content[1] = _one_line(content[1])
            out.append({"t": kind, "c": content})
        else:
            out.append(inline)
    return out


def _plain_text(inlines: Iterable[dict[str, Any]]) -> str:
    parts: list[str] = []
    for inline in inlines:
        kind: str = inline["t"]
        content: Any = inline.get("c")
        if kind == "Str":
            parts.append(content)
        elif kind in ("Space", "SoftBreak", "LineBreak"):
            parts.append(" ")
        elif kind in ("Code", "Math"):
            parts.append(content[1])
        elif kind in ("Emph", "Strong", "Strikeout", "Superscript", "Subscript"):
            parts.append(_plain_text(content))
        elif kind in ("Link", "Quoted", "Cite"):
            parts.append(_plain_text(content[1]))
    return " ".join("".join(parts).split())


def first_heading_text(blocks: list[dict[str, Any]]) -> str | None:
    for block in blocks:
        if block["t"] == "Header" and block["c"][0] == 1:
            return _plain_text(block["c"][2]) or None
    return None
