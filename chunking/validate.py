"""The chunk validator (docs/chunking.md#validation): run on every document, every violation
reported.

Each rule is a small check over the chunks and the normalized text they were cut from:
sizes and undersize reasons, order and coverage, headings (on the path or a line of a
merged chunk), hierarchy (section ids, neighbour links), Markdown validity (table
headers, code fences, display math, list lines and table rows never cut inside), bound
context, overlap starts, the id formula, and the document's total token count.
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass

from chunking.bind import ATOMIC, CONTEXT, is_output_block
from chunking.blocks import Block, BlockType
from chunking.display_math import math_balanced
from chunking.overlap import overlap_start_ok
from chunking.parse import parse_blocks
from chunking.record import Chunk, compute_chunk_id, compute_section_id
from chunking.tokens import TokenCounter, get_token_counter
from config.settings import ChunkingSettings

_DELIMITER_ROW = re.compile(r"^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_NESTED_FENCE = re.compile(r"^\s*(`{3,}|~{3,})")  # a fence inside a list item is indented
_ATOMIC_MARK = re.compile(r"^\s*(`{3,}|~{3,}|\$\$|\\begin\{)|^\s*\|?\s*:?-+:?\s*\|", re.MULTILINE)
# Why a chunk may be under `min_tokens`; each is checked against the structure below.
ALLOWED_UNDERSIZE = frozenset(
    {
        "section_end",
        "lone_block",
        "no_merge_fits",
        "before_table_or_code",
        "next_block_does_not_fit",
        "heading_only",
    }
)
OVERLAP_KINDS = frozenset({"paragraph", "mixed"})
# A document's chunks hold at most about twice its own tokens (docs/chunking.md#table-headers).
TOKEN_GROWTH = 2
TOKEN_GROWTH_SLACK = 64


@dataclass(frozen=True)
class Violation:
    rule: str
    ordinal: int | None
    message: str


@dataclass(frozen=True)
class ValidationReport:
    chunks: int
    violations: tuple[Violation, ...]

    @property
    def ok(self) -> bool:
        return not self.violations


Fail = Callable[[str, "Chunk | None", str], None]


@dataclass(frozen=True)
class _Document:
    """What every per-chunk check needs to know about the document."""

    text: str
    blocks: Sequence[Block]
    boundaries: list[int]  # indices of heading and rule blocks
    counter: TokenCounter
    config: ChunkingSettings
    lists: list[tuple[int, int]]  # char ranges of list blocks, in order
    maths: list[tuple[int, int]]  # char ranges of display math blocks, in order

    def in_list(self, offset: int) -> bool:
        at = bisect.bisect_right(self.lists, (offset, len(self.text) + 1)) - 1
        return at >= 0 and self.lists[at][0] <= offset < self.lists[at][1]

    def maths_within(self, start: int, end: int) -> list[tuple[int, int]]:
        """Display math blocks that share characters with [start, end)."""
        at = max(0, bisect.bisect_right(self.maths, (start, len(self.text) + 1)) - 1)
        found = []
        while at < len(self.maths) and self.maths[at][0] < end:
            if self.maths[at][1] > start:
                found.append(self.maths[at])
            at += 1
        return found


def budget_note(chunk: Chunk, config: ChunkingSettings) -> str | None:
    """What allows a chunk outside [min_tokens, max_tokens] to be so, as its record says;
    None for a chunk within them."""
    if chunk.token_count < config.min_tokens:
        return f"under min: {chunk.undersize_reason or 'no reason recorded'}"
    if chunk.token_count > config.max_tokens:
        if chunk.oversize:
            return (
                f"over max: oversize {chunk.chunk_type} kept whole (up to "
                f"oversize_block_limit {config.oversize_block_limit})"
            )
        return "over max: no reason recorded"
    return None


def validate_chunks(
    chunks: Sequence[Chunk],
    text: str,
    config: ChunkingSettings,
    blocks: Sequence[Block] | None = None,
    counter: TokenCounter | None = None,
) -> ValidationReport:
    """Check chunks against the normalized `text` they were cut from."""
    counter = counter or get_token_counter(config.tokenizer)
    blocks = list(blocks) if blocks is not None else parse_blocks(text)
    uncounted = [b for b in blocks if b.type is not BlockType.RULE and not b.token_count]
    for block, count in zip(
        uncounted, counter.count_many([b.text for b in uncounted]), strict=True
    ):
        block.token_count = count
    found: list[Violation] = []

    def fail(rule: str, chunk: Chunk | None, message: str) -> None:
        found.append(Violation(rule, chunk.ordinal if chunk else None, message))

    doc = _Document(
        text,
        blocks,
        [b.index for b in blocks if b.is_boundary],
        counter,
        config,
        [(b.start, b.end) for b in blocks if b.type is BlockType.LIST],
        [(b.start, b.end) for b in blocks if b.type is BlockType.MATH],
    )
    for position, chunk in enumerate(chunks):
        previous = chunks[position - 1] if position else None
        following = chunks[position + 1] if position + 1 < len(chunks) else None
        if chunk.ordinal != position:
            fail("ordinal", chunk, f"ordinal {chunk.ordinal} at position {position}")
        if not chunk.md_text.strip():
            fail("empty", chunk, "empty chunk")
        _check_size(chunk, following, doc, fail)
        _check_markdown(chunk, doc, fail)
        _check_bound_context(chunk, doc, fail)
        _check_code_role(chunk, doc, fail)
        _check_table_group(chunk, doc, fail)
        _check_overlap(chunk, previous, doc, fail)
        _check_links(chunk, previous, following, fail)
        expected = compute_chunk_id(
            chunk.tenant_id,
            chunk.document_id,
            chunk.source_version_id,
            chunk.ordinal,
            chunk.md_text,
            chunk.chunk_type,
        )
        if chunk.chunk_id != expected:
            fail("chunk_id", chunk, "chunk_id does not recompute from the formula")
    _check_coverage(chunks, text, blocks, fail)
    _check_joinable(chunks, doc, fail)
    _check_headings(chunks, blocks, fail)
    own = sum(b.token_count for b in blocks if b.type is not BlockType.RULE)
    held = sum(c.token_count for c in chunks)
    if held > TOKEN_GROWTH * own + TOKEN_GROWTH_SLACK:
        fail("token_growth", None, f"chunks hold {held} tokens, the document {own}")
    return ValidationReport(len(chunks), tuple(found))


def _check_size(chunk: Chunk, following: Chunk | None, doc: _Document, fail: Fail) -> None:
    config = doc.config
    if chunk.token_count > config.max_tokens and _heading_only(chunk, doc):
        if not chunk.oversize:  # a heading line is never cut
            fail("max_tokens", chunk, "a heading line over max_tokens is not flagged oversize")
    elif chunk.token_count > config.max_tokens:
        # Kept whole: a code or table block, or a list or paragraph holding display math
        # or a nested code block or table.
        atomic = (
            chunk.chunk_type in ("code", "table")
            or chunk.table_header is not None  # a table row too wide for its header
            or bool(_ATOMIC_MARK.search(chunk.md_text))
        )
        if not (chunk.oversize and atomic) or chunk.token_count > config.oversize_block_limit:
            fail("max_tokens", chunk, f"{chunk.token_count} tokens > {config.max_tokens}")
    if chunk.token_count < config.min_tokens:
        reason = chunk.undersize_reason
        holds = reason in ALLOWED_UNDERSIZE and _undersize_holds(str(reason), chunk, following, doc)
        if not holds:
            fail(
                "min_tokens", chunk, f"{chunk.token_count} tokens < {config.min_tokens} ({reason})"
            )


def _undersize_holds(reason: str, chunk: Chunk, following: Chunk | None, doc: _Document) -> bool:
    limit = doc.config.pack_max_tokens
    if reason == "heading_only":
        return _heading_only(chunk, doc)
    if reason == "lone_block":
        return chunk.chunk_type in ("table", "list", "code")
    if reason == "no_merge_fits":  # it holds a table or code block; `joinable` checks the rest
        return next(_blocks_of(chunk, doc, ATOMIC), None) is not None
    if reason == "before_table_or_code":
        return following is not None and following.chunk_type in ("table", "code")
    if reason == "next_block_does_not_fit":
        if following is None:
            return False
        first = doc.blocks[following.block_start_idx]
        if following.char_start != first.start:
            # The next chunk is a piece of a split block: pieces are measured as written
            # (a quote piece re-adds `> `), so their counts decide.
            return chunk.token_count + 1 + following.token_count > limit
        # Measured, not estimated: the chunk (as written: a merged chunk may repeat a
        # heading line on top) joined with the whole next block passes.
        return doc.counter.count(chunk.md_text + doc.text[chunk.char_end : first.end]) > limit
    # section_end: nothing follows, or a heading or rule lies between this chunk and the
    # next (a next chunk that opens with a heading line starts at that heading).
    if following is None:
        return True
    return _section_break(chunk, following, doc)


def _section_break(first: Chunk, second: Chunk, doc: _Document) -> bool:
    """A heading or horizontal rule lies between two chunks."""
    return any(first.block_end_idx < b <= second.block_start_idx for b in doc.boundaries)


def _heading_only(chunk: Chunk, doc: _Document) -> bool:
    """Is the chunk nothing but heading lines (headings with nowhere else to go)?"""
    index = chunk.block_start_idx
    blocks = doc.blocks
    if not 0 <= index < len(blocks) or blocks[index].start != chunk.char_start:
        return False
    while index < len(blocks) and blocks[index].start < chunk.char_end:
        if blocks[index].type is not BlockType.HEADING:
            return False
        index += 1
    return True


def _inside_line(text: str, offset: int) -> bool:
    return 0 < offset < len(text) and text[offset - 1] != "\n" and text[offset] != "\n"


def _line_at(text: str, offset: int) -> tuple[int, str]:
    start = text.rfind("\n", 0, offset) + 1
    end = text.find("\n", offset)
    return start, text[start : end if end != -1 else len(text)]


def _check_markdown(chunk: Chunk, doc: _Document, fail: Fail) -> None:
    text = doc.text
    lines = chunk.md_text.split("\n")
    if chunk.chunk_type == "table":
        table_lines = lines
        if chunk.bound_context in ("before", "both"):
            # The table starts after its bound context (which may itself hold pipes).
            table = next(_blocks_of(chunk, doc, (BlockType.TABLE,)), None)
            if table is not None:
                table_lines = chunk.md_text[table.start - chunk.char_start :].split("\n")
        _check_table_piece(chunk, table_lines, fail)
    nested = chunk.chunk_type in ("list", "mixed")
    if not _fences_balanced(lines, _NESTED_FENCE if nested else _FENCE):
        fail("code_fence", chunk, "unbalanced code fence")
    for start, end in doc.maths_within(chunk.char_start, chunk.char_end):
        cut = start < chunk.char_start or chunk.char_end < end
        if cut and not math_balanced(chunk.md_text):
            fail("math", chunk, "a piece of display math without its delimiters")
    for offset in (chunk.char_start, chunk.char_end):
        if not _inside_line(text, offset):
            continue
        line_start, line = _line_at(text, offset)
        in_list = doc.in_list(line_start)
        row = line.lstrip().startswith("|")
        if (in_list or row) and doc.counter.count(line) <= doc.config.max_tokens:
            what = "a list line" if in_list else "a table row"
            fail("line_cut", chunk, f"chunk boundary cuts {what} that fits the budget")


def _check_table_piece(chunk: Chunk, lines: list[str], fail: Fail) -> None:
    """The table part (after bound context and heading lines) opens with its header and
    delimiter rows, or the piece records the header in `table_header`."""
    first = next((i for i, line in enumerate(lines) if line.lstrip().startswith("|")), None)
    if first is None:
        fail("table_header", chunk, "table chunk without table rows")
        return
    if chunk.table_header is not None:
        header = chunk.table_header.split("\n")
        if len(header) != 2 or not _DELIMITER_ROW.match(header[1]):
            fail("table_header", chunk, "table_header is not a header and delimiter row")
        return
    if first + 1 >= len(lines) or not _DELIMITER_ROW.match(lines[first + 1]):
        fail("table_header", chunk, "table piece without its header and delimiter rows")


def _fences_balanced(lines: list[str], pattern: re.Pattern[str]) -> bool:
    fence: str | None = None
    for line in lines:
        if fence is None:
            match = pattern.match(line)
            if match:
                fence = match.group(1)
        elif line.strip().startswith(fence) and set(line.strip()) == {fence[0]}:
            fence = None
    return fence is None


def _blocks_of(chunk: Chunk, doc: _Document, types: Collection[BlockType]) -> Iterator[Block]:
    """The document's blocks of these types that start within the chunk's range."""
    for block in doc.blocks[chunk.block_start_idx : chunk.block_end_idx + 1]:
        if block.type in types and chunk.char_start <= block.start < chunk.char_end:
            yield block


def _check_bound_context(chunk: Chunk, doc: _Document, fail: Fail) -> None:
    """A bound table or code chunk holds one such block (a code block with its output
    block) and prose of its section run beside it: before it within
    `bind_before_tokens`, after it within `bind_after_tokens`; it passes `max_tokens`
    only when its block alone does. So a paragraph is bound to one block only."""
    bound = chunk.bound_context
    if bound is None:
        return
    if bound not in ("before", "after", "both") or chunk.chunk_type not in ("table", "code"):
        fail("bound_context", chunk, f"bound_context {bound!r} on a {chunk.chunk_type} chunk")
        return
    blocks, config = doc.blocks, doc.config
    first = max(chunk.block_start_idx, 0)
    last = min(chunk.block_end_idx, len(blocks) - 1)
    while first <= last and blocks[first].type is BlockType.HEADING:
        first += 1  # heading lines of a merged section
    while last >= first and blocks[last].type is BlockType.HEADING:
        last -= 1  # headings with no content of their own, kept as lines
    atomic = [i for i in range(first, last + 1) if blocks[i].type in ATOMIC]
    main = atomic[0] if atomic else -1
    output = [
        i for i in atomic[1:] if is_output_block(blocks, i) and blocks[main].type is BlockType.CODE
    ]
    if not atomic or len(atomic) - len(output) != 1 or output[1:]:
        fail("bound_context", chunk, "bound context beside other than one table or code block")
        return

    def context(start: int, stop: int, budget: int, name: str) -> None:
        """Blocks start..stop-1 are prose within `budget` tokens."""
        span = blocks[start:stop]
        if not span or any(b.type not in CONTEXT for b in span):
            fail("bound_context", chunk, f"no prose bound {name} its table or code block")
        elif sum(b.token_count for b in span) > budget:
            fail("bound_context", chunk, f"prose bound {name} its block passes its budget")

    if bound in ("before", "both"):
        context(first, main, config.bind_before_tokens, "before")
    if bound in ("after", "both"):
        after = output[0] + 1 if output else main + 1
        tail = blocks[main + 1 : last + 1]
        if output or tail:
            spent = sum(b.token_count for b in tail)
            if any(b.type not in CONTEXT for b in blocks[after : last + 1]):
                fail("bound_context", chunk, "bound after its block: not prose")
            elif spent > config.bind_after_tokens:
                fail("bound_context", chunk, "prose bound after its block passes its budget")
            elif blocks[last].end > chunk.char_end:
                fail("bound_context", chunk, "bound context passes the chunk's end")
        else:
            fail("bound_context", chunk, "no prose bound after its table or code block")
    if chunk.token_count > config.max_tokens and blocks[main].token_count <= config.max_tokens:
        fail("bound_context", chunk, "bound context pushes the chunk past max_tokens")


def _check_code_role(chunk: Chunk, doc: _Document, fail: Fail) -> None:
    """A chunk holding a code block records its role: `example` when prose shares the
    chunk (bound, or merged with it in a `mixed` chunk), `output` when its output block
    alone is bound, `standalone` when nothing is."""
    holds_code = chunk.chunk_type == "code" or (
        chunk.chunk_type == "mixed" and next(_blocks_of(chunk, doc, (BlockType.CODE,)), None)
    )
    role = chunk.code_role
    if not holds_code:
        if role is not None:
            fail("code_role", chunk, f"code_role {role!r} on a chunk without code")
        return
    piece_of_split = chunk.chunk_type == "code" and any(
        block.type is BlockType.CODE
        and (block.start < chunk.char_start or block.end > chunk.char_end)
        for block in doc.blocks[chunk.block_start_idx : chunk.block_end_idx + 1]
    )
    if chunk.chunk_type == "mixed":
        expected = {"example"}
    elif piece_of_split:  # a middle piece has the role of its whole block
        expected = {"example", "output", "standalone"}
    elif chunk.bound_context is None:
        expected = {"standalone"}
    elif chunk.bound_context == "after":
        expected = {"example", "output"}
    else:
        expected = {"example"}
    if role not in expected:
        fail(
            "code_role",
            chunk,
            f"code_role {role!r} on a {chunk.chunk_type} chunk "
            f"with bound_context {chunk.bound_context!r}",
        )


def _check_table_group(chunk: Chunk, doc: _Document, fail: Fail) -> None:
    """`table_group_count`: the tables starting in the chunk, where there are several;
    a group stays within the packing limit."""
    tables = sum(1 for _ in _blocks_of(chunk, doc, (BlockType.TABLE,)))
    expected = tables if tables > 1 else None
    if chunk.table_group_count != expected:
        fail("table_group", chunk, f"table_group_count {chunk.table_group_count}, {tables} tables")
    elif expected and chunk.token_count > doc.config.pack_max_tokens:
        fail("table_group", chunk, f"a group of {tables} tables passes the packing limit")


def _check_joinable(chunks: Sequence[Chunk], doc: _Document, fail: Fail) -> None:
    """No chunk under `min_tokens` is left alone beside a chunk of its section (no
    heading or rule between) that a rule lets it join: two chunks that fit the packing
    limit together, neither a table or code chunk of `min_tokens` or more, merge by
    small blocks (a table or code chunk) or packing (prose)."""
    config = doc.config
    limit = config.pack_max_tokens

    def large(chunk: Chunk) -> bool:
        return chunk.chunk_type in ("table", "code") and chunk.token_count >= config.min_tokens

    for first, second in itertools.pairwise(chunks):
        small = [c for c in (first, second) if c.token_count < config.min_tokens]
        if not small or large(first) or large(second) or first.oversize or second.oversize:
            continue
        if any(_heading_only(c, doc) for c in small):
            continue
        if _section_break(first, second, doc):
            continue
        if doc.counter.additive:
            together = first.token_count + second.token_count
        else:
            together = doc.counter.count(first.md_text + "\n\n" + second.md_text)
        if together <= limit:
            rule = (
                "small_blocks"
                if {first.chunk_type, second.chunk_type} & {"table", "code"}
                else "packing"
            )
            fail(
                f"joinable:{rule}",
                small[0],
                f"{small[0].token_count} tokens < {config.min_tokens} beside a chunk it fits with "
                f"({together} <= {limit})",
            )


def _check_overlap(chunk: Chunk, previous: Chunk | None, doc: _Document, fail: Fail) -> None:
    prefix = chunk.overlap_prefix
    if not prefix:
        return
    config = doc.config
    if (
        previous is None
        or chunk.chunk_type not in OVERLAP_KINDS
        or previous.chunk_type not in OVERLAP_KINDS
        or previous.section_id != chunk.section_id
    ):
        fail("overlap", chunk, "overlap outside paragraph/mixed chunks of one section")
        return
    if not previous.md_text.endswith(prefix):
        fail("overlap", chunk, "overlap_prefix is not the tail of the previous chunk")
        return
    if not overlap_start_ok(previous.md_text, len(previous.md_text) - len(prefix)):
        fail("overlap", chunk, "overlap_prefix does not start at a sentence, line or item")
    budget = min(config.overlap_tokens, int(previous.token_count * config.overlap_max_share))
    if doc.counter.count(prefix) > budget:
        fail("overlap", chunk, f"overlap_prefix over its budget of {budget} tokens")


def _check_links(chunk: Chunk, previous: Chunk | None, following: Chunk | None, fail: Fail) -> None:
    if chunk.prev_chunk_id != (previous.chunk_id if previous else None):
        fail("links", chunk, "prev_chunk_id is not the previous chunk's id")
    if chunk.next_chunk_id != (following.chunk_id if following else None):
        fail("links", chunk, "next_chunk_id is not the next chunk's id")


def _check_headings(chunks: Sequence[Chunk], blocks: Sequence[Block], fail: Fail) -> None:
    """Every heading is on the path of the first chunk after it, or a line of the chunk
    whose range holds it; every path is the heading stack where its chunk starts; every
    section id names that path and the section (heading) ordinal it ends with."""
    headings = [b for b in blocks if b.type is BlockType.HEADING]
    stack: list[tuple[int, int, str]] = []  # (level, ordinal, text)
    waiting: list[tuple[int, str]] = []  # headings to find on the next chunk's path
    next_heading = 0
    previous: Chunk | None = None

    def advance(limit: int | None) -> None:
        nonlocal next_heading
        while next_heading < len(headings) and (
            limit is None or headings[next_heading].start < limit
        ):
            heading = headings[next_heading]
            next_heading += 1
            while stack and stack[-1][0] >= heading.level:
                stack.pop()
            stack.append((heading.level, next_heading, heading.heading_text))
            if previous is not None and previous.char_start <= heading.start < previous.char_end:
                if heading.text not in previous.md_text:
                    fail("headings", previous, f"heading {heading.heading_text!r} not in md_text")
            else:
                waiting.append((next_heading, heading.heading_text))

    for chunk in chunks:
        advance(chunk.char_start)
        depth = len(chunk.headings_path)
        expected = tuple(text for _, _, text in stack[:depth])
        if depth > len(stack) or chunk.headings_path != expected:
            fail("headings_path", chunk, f"path {chunk.headings_path} is not the heading stack")
        on_path = {ordinal for _, ordinal, _ in stack[:depth]}
        for ordinal, text in waiting:
            if ordinal not in on_path:
                fail("headings", chunk, f"heading {text!r} is in no chunk")
        waiting.clear()
        section = stack[depth - 1][1] if 0 < depth <= len(stack) else 0
        section_id = compute_section_id(
            chunk.tenant_id, chunk.document_id, chunk.source_version_id, chunk.chunk_path, section
        )
        if chunk.section_id != section_id:
            fail("section_id", chunk, "section_id does not recompute from the formula")
        previous = chunk
    advance(None)
    for _, text in waiting:
        fail("headings", None, f"heading {text!r} is in no chunk")


def _check_coverage(
    chunks: Sequence[Chunk], text: str, blocks: Sequence[Block], fail: Fail
) -> None:
    ignorable = sorted(
        (b.start, b.end) for b in blocks if b.type in (BlockType.HEADING, BlockType.RULE)
    )
    cursor = 0
    previous: Chunk | None = None
    for chunk in chunks:
        if previous is not None and chunk.char_start <= previous.char_start:
            fail("order", chunk, "char_start not strictly increasing")
        if chunk.char_start < cursor:
            fail(
                "overlap",
                chunk,
                f"char range starts at {chunk.char_start}, inside the previous chunk",
            )
        elif _uncovered(text, cursor, chunk.char_start, ignorable):
            fail("coverage", chunk, f"text between {cursor} and {chunk.char_start} is in no chunk")
        cursor = max(cursor, chunk.char_end)
        previous = chunk
    if _uncovered(text, cursor, len(text), ignorable):
        fail("coverage", None, f"text after {cursor} is in no chunk")


def _uncovered(text: str, start: int, end: int, ignorable: list[tuple[int, int]]) -> bool:
    position = start
    for a, b in ignorable:
        if b <= position or a >= end:
            continue
        if text[position:a].strip():
            return True
        position = max(position, b)
    return bool(text[position:end].strip())
