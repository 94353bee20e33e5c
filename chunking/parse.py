"""Markdown -> blocks with char offsets (markdown-it-py, block level only).

Only the block parser runs: inline parsing is not needed to find block boundaries and
would double the cost. A large document is parsed in segments (`segments`), so its
tokens never all exist at once. Text markdown-it consumes without a token (link reference
definitions, stray lines) is kept as a paragraph so every character stays covered.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import lru_cache
from types import FunctionType, MappingProxyType

from markdown_it import MarkdownIt
from markdown_it.token import Token
from mdit_py_plugins.amsmath import amsmath_plugin
from mdit_py_plugins.dollarmath import dollarmath_plugin

from chunking.blocks import Block, BlockType, ListItem
from chunking.segments import SEGMENT_CHARS, segment_lines
from chunking.table_rule import table_lines_only

_OPEN_TYPES: Mapping[str, BlockType] = MappingProxyType(
    {
        "paragraph_open": BlockType.PARAGRAPH,
        "bullet_list_open": BlockType.LIST,
        "ordered_list_open": BlockType.LIST,
        "table_open": BlockType.TABLE,
        "blockquote_open": BlockType.QUOTE,
        "heading_open": BlockType.HEADING,
    }
)
_LEAF_TYPES: Mapping[str, BlockType] = MappingProxyType(
    {
        "fence": BlockType.CODE,
        "code_block": BlockType.CODE,
        "html_block": BlockType.HTML,
        "math_block": BlockType.MATH,
        "math_block_label": BlockType.MATH,
        "amsmath": BlockType.MATH,
        "hr": BlockType.RULE,
    }
)
# Blocks inside a list item that a list split must keep whole or split by their own rule.
_ATOM_TYPES: Mapping[str, BlockType] = MappingProxyType(
    {
        "fence": BlockType.CODE,
        "code_block": BlockType.CODE,
        "table_open": BlockType.TABLE,
        "math_block": BlockType.MATH,
        "math_block_label": BlockType.MATH,
        "amsmath": BlockType.MATH,
        "html_block": BlockType.HTML,
    }
)


@lru_cache(maxsize=4)
def _parser(dollar_math: bool, environments: bool) -> MarkdownIt:
    """The block parser; a math rule only where the text could hold its math (each is
    tried at every block start, a tenth of the parse on documents without any)."""
    md = MarkdownIt("commonmark").enable("table").use(table_lines_only)
    if dollar_math:
        md.use(dollarmath_plugin, double_inline=False)
    if environments:
        md.use(amsmath_plugin)
    # Link reference definitions matter to inline parsing only: without the rule they
    # are paragraphs, which cover the same text.
    md.disable(["inline", "text_join", "reference"], ignoreInvalid=True)
    for rule in md.block.ruler.__rules__:
        md.block.ruler.at(rule.name, _quiet(rule.fn), {"alt": rule.alt})
    return md


class _Silent:
    def debug(self, *args: object) -> None:
        """Nothing: markdown-it's block rules log every call at debug level."""


def _quiet(rule: Callable[..., bool]) -> Callable[..., bool]:
    """The rule without its debug logging: markdown-it's block rules call `LOGGER.debug`
    each time they are tried (hundreds of thousands of calls on a large document); a
    copy of the function whose globals hold a silent logger skips that, leaving
    markdown-it's own modules as they are."""
    if not isinstance(rule, FunctionType) or "LOGGER" not in rule.__globals__:
        return rule
    quiet = FunctionType(
        rule.__code__,
        {**rule.__globals__, "LOGGER": _Silent()},
        rule.__name__,
        rule.__defaults__,
        rule.__closure__,
    )
    quiet.__kwdefaults__ = rule.__kwdefaults__
    return quiet


def line_starts(text: str) -> list[int]:
    starts = [0]
    find = text.find
    pos = find("\n")
    while pos != -1:
        starts.append(pos + 1)
        pos = find("\n", pos + 1)
    return starts


def parse_blocks(text: str) -> list[Block]:
    dollar_math, environments = "$$" in text, "\\begin{" in text
    parser = _parser(dollar_math, environments)
    starts = line_starts(text)
    length = len(text)

    def span(line_from: int, line_to: int) -> tuple[int, int]:
        begin = starts[line_from] if line_from < len(starts) else length
        end = starts[line_to] if line_to < len(starts) else length
        return begin, begin + len(text[begin:end].rstrip())

    segments = [0]
    if length > SEGMENT_CHARS:
        segments = segment_lines(text.split("\n"), dollar_math, environments)
    blocks: list[Block] = []
    covered_to = 0
    for number, first_line in enumerate(segments):
        stop_line = segments[number + 1] if number + 1 < len(segments) else len(starts)
        stop = starts[stop_line] if stop_line < len(starts) else length
        tokens = parser.parse(text[starts[first_line] : stop])

        def shifted(line_from: int, line_to: int, first: int = first_line) -> tuple[int, int]:
            return span(first + line_from, first + line_to)

        covered_to = _add_blocks(blocks, tokens, shifted, text, covered_to)
    if covered_to < length and text[covered_to:].strip():
        _add_orphan_text(blocks, text, covered_to, length)
    return blocks


Span = Callable[[int, int], tuple[int, int]]


def _add_blocks(
    blocks: list[Block], tokens: list[Token], span: Span, text: str, covered_to: int
) -> int:
    """Blocks of one parsed segment, appended in order; returns how far text is covered."""
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token.level != 0 or token.map is None:
            i += 1
            continue
        kind = _OPEN_TYPES.get(token.type) or _LEAF_TYPES.get(token.type)
        if kind is None:
            i += 1
            continue
        start, end = span(*_lines(token))
        close = _matching_close(tokens, i) if token.nesting == 1 else i
        if start > covered_to and text[covered_to:start].strip():
            _add_orphan_text(blocks, text, covered_to, start)
        if kind is BlockType.HEADING and _underlined_paragraph(token, tokens[i + 1]):
            kind = BlockType.PARAGRAPH
        block = Block(len(blocks), kind, start, end, text[start:end])
        if kind is BlockType.HEADING:
            block.level = int(token.tag[1])
            block.heading_text = tokens[i + 1].content.strip() if i + 1 < close else ""
        elif kind is BlockType.LIST:
            block.items = _list_items(tokens, i, close, span, text, block.index)
        elif token.type == "fence":
            block.fence = token.markup
            block.info = token.info.strip()
        if end > start or kind is BlockType.HEADING:
            blocks.append(block)
            covered_to = max(covered_to, end)
        i = close + 1
    return covered_to


# A Setext heading longer than this is a paragraph above a line of `=` or `-`.
_SETEXT_HEADING_CHARS = 200


def _underlined_paragraph(heading: Token, inline: Token) -> bool:
    """A Setext heading of several lines, or of a paragraph's length, is text that a line
    of `=` or `-` happens to follow (plain text, a PDF's rules, a table's dashes):
    CommonMark reads it all as one heading, which would put the paragraph into every
    chunk's headings path and context header after it."""
    if heading.markup not in ("=", "-"):
        return False
    content = inline.content.strip()
    return "\n" in content or len(content) > _SETEXT_HEADING_CHARS


def _add_orphan_text(blocks: list[Block], text: str, start: int, end: int) -> None:
    stripped = text[start:end]
    lead = len(stripped) - len(stripped.lstrip())
    begin = start + lead
    finish = begin + len(stripped.strip())
    blocks.append(Block(len(blocks), BlockType.PARAGRAPH, begin, finish, text[begin:finish]))


def _lines(token: Token) -> tuple[int, int]:
    """The token's lines, end exclusive. The amsmath plugin's map ends one line early
    (at its `\\end{...}` line), which would leave that line out of the block."""
    assert token.map is not None
    first, stop = token.map
    return first, stop + 1 if token.type == "amsmath" else stop


def _matching_close(tokens: list[Token], open_index: int) -> int:
    depth = 0
    for j in range(open_index, len(tokens)):
        depth += tokens[j].nesting
        if depth == 0:
            return j
    return len(tokens) - 1


def _list_items(
    tokens: list[Token], open_index: int, close_index: int, span: Span, text: str, index: int
) -> tuple[ListItem, ...]:
    """Top-level items of the list opened at `open_index`, each with its nested items
    and the atomic blocks directly inside it."""
    items: list[ListItem] = []
    item_level = tokens[open_index].level + 1
    j = open_index + 1
    while j < close_index:
        token = tokens[j]
        if token.type == "list_item_open" and token.level == item_level and token.map:
            item_close = _matching_close(tokens, j)
            children: list[ListItem] = []
            atoms: list[Block] = []
            k = j + 1
            while k < item_close:
                inner = tokens[k]
                if inner.level == item_level + 1 and inner.map is not None:
                    if inner.type in ("bullet_list_open", "ordered_list_open"):
                        inner_close = _matching_close(tokens, k)
                        children.extend(_list_items(tokens, k, inner_close, span, text, index))
                        k = inner_close
                    elif inner.type in _ATOM_TYPES:
                        a, b = span(*_lines(inner))
                        if b > a:
                            atom = Block(index, _ATOM_TYPES[inner.type], a, b, text[a:b])
                            if inner.type == "fence":
                                atom.fence, atom.info = inner.markup, inner.info.strip()
                            atoms.append(atom)
                        if inner.nesting == 1:
                            k = _matching_close(tokens, k)
                k += 1
            start, end = span(token.map[0], token.map[1])
            items.append(ListItem(start, end, tuple(children), tuple(atoms)))
            j = item_close
        j += 1
    return tuple(items)
