"""chunk_markdown: normalized Markdown + document info -> chunk records (docs/chunking.md#rules).

normalize -> parse (blocks) -> count each block once -> per section run: split blocks
over budget into pieces (`registry`: one splitter per block type), bind the nearest
prose and output blocks to their table or code piece (`bind`), pack pieces into groups
(`pack`; then `table_groups`, `small_blocks`) -> per stretch between horizontal rules
and hard breaks of the source (slides, sheets, a diagram's pages: `Anchor.is_hard_break`):
merge small sections (`merge`) -> recount merged chunks exactly -> overlap, ids,
hierarchy, metadata.
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from chunking.bind import run_pieces
from chunking.blocks import Block, BlockType
from chunking.group import Group
from chunking.lists import ListSplitter
from chunking.merge import Draft, Entry, Heading, Layout, Stretch, split_back
from chunking.overlap import overlap_prefix
from chunking.pack import Packer
from chunking.parse import parse_blocks
from chunking.pieces import HEADING, PROSE_KINDS, UNMIXABLE_KINDS, Piece
from chunking.prose import split_head, split_tail
from chunking.record import Chunk, DocumentInfo, compute_chunk_id, compute_section_id
from chunking.registry import SPLITTERS
from chunking.split import Budget, SplitContext
from chunking.tokens import TokenCounter, get_token_counter
from config.errors import ErrorCode, IngestError
from config.settings import ChunkingSettings
from markdown_text import Anchor, NormalizedText, decode_utf8, normalize_markdown
from markdown_text.context import context_header as context_header  # re-exported

_LINK = re.compile(r"\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)|<(https?://[^>\s]+)>")
OVERLAP_KINDS = frozenset({"paragraph", "mixed"})


@dataclass(frozen=True)
class ChunkedDocument:
    text: str  # the normalized Markdown all offsets refer to
    blocks: tuple[Block, ...]
    chunks: tuple[Chunk, ...]


@dataclass(frozen=True)
class _Draft:
    """A merged draft, laid out: what becomes one chunk."""

    group: Group
    layout: Layout
    following: Draft | None  # the next draft of the same stretch
    heading_only: bool
    stretch: int  # which stretch between horizontal rules it belongs to


def chunk_markdown(
    text: str | bytes,
    metadata: DocumentInfo,
    config: ChunkingSettings,
    *,
    anchors: Sequence[Anchor] = (),
    counter: TokenCounter | None = None,
) -> list[Chunk]:
    """Chunks of one document, deterministic for identical input and configuration."""
    return list(chunk_document(text, metadata, config, anchors=anchors, counter=counter).chunks)


def chunk_document(
    text: str | bytes,
    metadata: DocumentInfo,
    config: ChunkingSettings,
    *,
    anchors: Sequence[Anchor] = (),
    counter: TokenCounter | None = None,
    normalized: bool = False,
) -> ChunkedDocument:
    """Like `chunk_markdown`, also returning the normalized text and blocks (for validation).

    `normalized`: `text` is a normalizer's output (normalizers.base.normalize_bytes ran
    the shared pass, front matter included where the input was Markdown), so it is
    chunked as it is: a second pass would cost a tenth of the chunking time and take a
    `---` block at the top of a PDF's or a Word file's text for front matter."""
    subject = metadata.subject
    if isinstance(text, bytes):
        text = decode_utf8(text, subject=subject)
    try:
        prepared = (
            NormalizedText(text, tuple(anchors))
            if normalized
            else normalize_markdown(text, anchors, front_matter=True)
        )
        return _chunk(prepared, metadata, config, counter or get_token_counter(config.tokenizer))
    except IngestError:
        raise
    except RecursionError:
        raise IngestError(
            ErrorCode.CHUNKING_FAILED, "structure nested too deeply to parse", subject=subject
        ) from None
    except Exception as exc:  # never let one document's oddity stop the run
        raise IngestError(
            ErrorCode.CHUNKING_FAILED, f"{type(exc).__name__}: {exc}", subject=subject
        ) from exc


def _chunk(
    normalized: NormalizedText,
    info: DocumentInfo,
    config: ChunkingSettings,
    counter: TokenCounter,
) -> ChunkedDocument:
    text = normalized.text
    if normalized.front_matter and info.title is None:
        title = normalized.front_matter.get("title")
        if isinstance(title, str):
            info = replace(info, title=title)
    blocks = parse_blocks(text)
    _count_blocks(blocks, counter)

    breaks = sorted({a.offset for a in normalized.anchors if a.is_hard_break})
    drafts, names = _drafts(blocks, text, config, counter, breaks)
    shapes = [_shape(ordinal, draft, names, text, info) for ordinal, draft in enumerate(drafts)]
    sorted_anchors = _anchor_index(normalized.anchors)
    boundaries = [b.index for b in blocks if b.is_boundary]
    chunks = []
    for ordinal, (draft, shape) in enumerate(zip(drafts, shapes, strict=True)):
        previous = shapes[ordinal - 1] if ordinal else None
        following = shapes[ordinal + 1] if ordinal + 1 < len(shapes) else None
        prefix = ""
        if (
            previous is not None
            and shape.chunk_type in OVERLAP_KINDS
            and previous.chunk_type in OVERLAP_KINDS
            and previous.section_id == shape.section_id
            and drafts[ordinal - 1].stretch == draft.stretch  # never across a rule or break
        ):
            prefix = overlap_prefix(
                previous.md_text,
                previous.tokens,
                config.overlap_tokens,
                config.overlap_max_share,
                counter,
            )
        chunks.append(
            _make_chunk(
                shape,
                draft,
                prefix,
                previous.chunk_id if previous else None,
                following.chunk_id if following else None,
                info,
                config,
                sorted_anchors,
                _ends_section(draft, drafts[ordinal + 1] if following else None, boundaries),
            )
        )
    return ChunkedDocument(text, tuple(blocks), tuple(chunks))


def _count_blocks(blocks: list[Block], counter: TokenCounter) -> None:
    """Every block counted once; a list line by line where counts add up."""
    counted = [b for b in blocks if b.type is not BlockType.RULE]
    by_line = [counter.additive and b.type is BlockType.LIST for b in counted]
    texts: list[str] = []
    for block, lines in zip(counted, by_line, strict=True):
        texts.extend(block.text.split("\n") if lines else (block.text,))
    counts = iter(counter.count_many(texts))
    for block, lines in zip(counted, by_line, strict=True):
        if lines:
            block.line_counts = tuple(itertools.islice(counts, block.text.count("\n") + 1))
            block.token_count = sum(block.line_counts)
        else:
            block.token_count = next(counts)


def _ends_section(draft: _Draft, following: _Draft | None, boundaries: list[int]) -> bool:
    """Does a heading or rule (or the end) lie between the chunk and the next one?"""
    if following is None:
        return True
    last = max(p.last_block for p in draft.group.pieces)
    at = bisect.bisect_right(boundaries, last)
    return at < len(boundaries) and boundaries[at] <= following.group.pieces[0].block_index


@dataclass(frozen=True)
class _Shape:
    """What neighbours need to know of a chunk before it is built (overlap, links)."""

    ordinal: int
    md_text: str
    chunk_type: str
    tokens: int
    headings: tuple[str, ...]
    path: str
    section_id: str
    chunk_id: str


def _shape(
    ordinal: int, draft: _Draft, names: dict[int, str], text: str, info: DocumentInfo
) -> _Shape:
    group = draft.group
    md_text = _join_pieces(group.pieces, text)
    chunk_type = group.chunk_type
    headings = tuple(names[section] for _, section in draft.layout.path)
    path = chunk_path(headings)
    section = draft.layout.path[-1][1] if draft.layout.path else 0
    return _Shape(
        ordinal,
        md_text,
        chunk_type,
        group.tokens,
        headings,
        path,
        compute_section_id(info.tenant_id, info.document_id, info.source_version_id, path, section),
        compute_chunk_id(
            info.tenant_id, info.document_id, info.source_version_id, ordinal, md_text, chunk_type
        ),
    )


def _drafts(
    blocks: list[Block],
    text: str,
    config: ChunkingSettings,
    counter: TokenCounter,
    breaks: Sequence[int],
) -> tuple[list[_Draft], dict[int, str]]:
    """Walk the blocks: section runs are split, bound and packed into groups; stretches
    between horizontal rules and hard breaks (offsets `breaks`, ascending) are merged
    into drafts, each laid out and counted exactly."""
    walk = _DraftWalk(text, config, counter)
    pending = iter(breaks)
    next_break = next(pending, None)
    for block in blocks:
        if next_break is not None and block.start >= next_break:
            walk.flush_stretch()
            while next_break is not None and next_break <= block.start:
                next_break = next(pending, None)
        if block.type is BlockType.HEADING:
            walk.heading(block)
        elif block.type is BlockType.RULE:
            walk.flush_stretch()
        else:
            walk.run.append(block)
    walk.flush_stretch()
    return walk.out, walk.names


class _DraftWalk:
    """The state of `_drafts`' walk: the open section run, the heading stack, the
    stretch being merged, and the drafts so far."""

    def __init__(self, text: str, config: ChunkingSettings, counter: TokenCounter) -> None:
        self.text, self.config, self.counter = text, config, counter
        budget = Budget(
            config.target_tokens,
            config.pack_max_tokens,
            config.max_tokens,
            config.oversize_block_limit,
        )
        self.ctx = SplitContext(text, counter, budget, SPLITTERS)
        self.lists = ListSplitter()
        self.limit = config.pack_max_tokens
        self.packer = Packer(
            config.min_tokens,
            config.target_tokens,
            self.limit,
            self.head,
            self.tail,
            self.exact,
            text,
            config.table_group_max_gap_lines if config.group_related_tables else None,
        )
        self.names: dict[int, str] = {}
        self.stack: list[Entry] = []
        self.headings: dict[Entry, Heading] = {}
        self.stretch = self.new_stretch()
        self.run: list[Block] = []
        self.out: list[_Draft] = []
        self.stretches = 0

    def new_stretch(self) -> Stretch:
        config = self.config
        return Stretch(config.min_tokens, config.target_tokens, self.limit, self.headings)

    def head(self, piece: Piece, room: int) -> tuple[Piece, Piece] | None:
        if piece.kind in PROSE_KINDS:
            return split_head(piece, self.text, room, self.counter)
        if piece.kind == "list" and piece.cuts:
            return self.lists.split_head(piece, self.text, room, self.counter)
        return None

    def tail(self, piece: Piece, least: int, most: int) -> tuple[Piece, Piece] | None:
        if piece.kind in PROSE_KINDS:
            return split_tail(piece, self.text, least, most, self.counter)
        return None

    def exact(self, pieces: list[Piece]) -> int:
        return _joined_tokens(pieces, self.text, self.counter)

    def heading(self, block: Block) -> None:
        self.flush_run()
        stack = self.stack
        before = tuple(stack)
        while stack and stack[-1][0] >= block.level:
            stack.pop()
        entry = (block.level, len(self.names) + 1)
        self.names[entry[1]] = block.heading_text
        stack.append(entry)
        piece = Piece(HEADING, block.start, block.end, block.text, block.token_count, block.index)
        self.stretch.heading(Heading(piece, entry, before, tuple(stack)))

    def flush_run(self) -> None:
        if not self.run:
            return
        config, stack, stretch = self.config, tuple(self.stack), self.stretch
        pieces = run_pieces(self.run, self.ctx, config.bind_before_tokens, config.bind_after_tokens)
        self.run.clear()
        carry = stretch.carry(stack, pieces[0])
        if carry is not None:
            carried, skip = carry
            pinned = carried.pieces(skip)
            head_group = Group(pinned, sum(p.tokens for p in pinned) + len(pinned) - 1, exact=False)
            groups = self.exact_groups(self.packer.pack(pieces, head_group))
            if len(groups[0].pieces) > len(pinned) and groups[0].pieces[: len(pinned)] == pinned:
                stretch.add(groups, stack, carried, skip)
                return
            stretch.uncarry(carried)  # the next section's first block did not fit
        stretch.add(self.exact_groups(self.packer.pack(pieces)), stack)

    def exact_groups(self, groups: list[Group]) -> list[Group]:
        return _exact(groups, self.text, self.counter, self.limit)

    def flush_stretch(self) -> None:
        self.flush_run()
        drafts = self.stretch.finish()
        self.stretch = self.new_stretch()
        self.stretches += 1
        queue = list(reversed(drafts))
        laid: list[tuple[Draft, Layout, Group]] = []
        while queue:
            draft = queue.pop()
            layout = draft.layout()
            assert layout is not None  # merging only builds drafts that lay out
            group = _counted_group(draft.pieces(layout.skip), self.text, self.counter)
            if group.tokens > self.limit and len(draft.contents) > 1:
                queue.extend(reversed(split_back(draft)))  # the estimate was wrong
                continue
            laid.append((draft, layout, group))
        for index, (draft, layout, group) in enumerate(laid):
            following = laid[index + 1][0] if index + 1 < len(laid) else None
            self.out.append(_Draft(group, layout, following, not draft.contents, self.stretches))


def _counted_group(pieces: list[Piece], text: str, counter: TokenCounter) -> Group:
    return Group(pieces, _joined_tokens(pieces, text, counter))


def _joined_tokens(pieces: list[Piece], text: str, counter: TokenCounter) -> int:
    """The exact count of the pieces joined as a chunk's md_text. Pieces are joined by
    whitespace, so with an additive counter their counts add up."""
    if len(pieces) == 1:
        return pieces[0].tokens
    if counter.additive:
        return sum(p.tokens for p in pieces)
    return counter.count(_join_pieces(pieces, text))


def _join_pieces(pieces: list[Piece], text: str) -> str:
    if len(pieces) == 1:
        return pieces[0].text
    if not any(p.synthetic for p in pieces):
        return text[pieces[0].start : pieces[-1].end]
    parts = [pieces[0].text]
    for before, piece in itertools.pairwise(pieces):
        parts.append(text[before.end : piece.start] or "\n\n")
        parts.append(piece.text)
    return "".join(parts)


def _exact(groups: list[Group], text: str, counter: TokenCounter, limit: int) -> list[Group]:
    """Exact counts for groups of several pieces. The packing estimate never
    under-counts, so none should pass the limit; one that does is halved."""
    for group in groups:
        if not group.exact:
            group.tokens = _joined_tokens(group.pieces, text, counter)
            group.exact = True
    exact: list[Group] = []
    for group in groups:
        if group.tokens <= limit or len(group.pieces) == 1:
            exact.append(group)
            continue
        middle = len(group.pieces) // 2
        halves = [Group(), Group()]
        for i, piece in enumerate(group.pieces):
            halves[i >= middle].add(piece)
        exact.extend(_exact(halves, text, counter, limit))
    return exact


def _make_chunk(
    shape: _Shape,
    draft: _Draft,
    prefix: str,
    prev_chunk_id: str | None,
    next_chunk_id: str | None,
    info: DocumentInfo,
    config: ChunkingSettings,
    anchors: dict[str, tuple[list[int], list[int | str]]],
    ends_section: bool,
) -> Chunk:
    pieces = draft.group.pieces
    start, end = pieces[0].start, pieces[-1].end
    page_start = _anchor_at(anchors, "page", start)
    page_end = _anchor_at(anchors, "page", max(start, end - 1))
    sheet = _anchor_at(anchors, "sheet", start)
    slide = _anchor_at(anchors, "slide", start)
    return Chunk(
        chunk_id=shape.chunk_id,
        tenant_id=info.tenant_id,
        document_id=info.document_id,
        source_version_id=info.source_version_id,
        ordinal=shape.ordinal,
        chunk_type=shape.chunk_type,  # type: ignore[arg-type]
        headings_path=shape.headings,
        chunk_path=shape.path,
        md_text=shape.md_text,
        overlap_prefix=prefix,
        embed_text=compose_embed_text(info.title, shape.headings, prefix, shape.md_text),
        char_start=start,
        char_end=end,
        block_start_idx=pieces[0].block_index,
        block_end_idx=max(p.last_block for p in pieces),
        token_count=shape.tokens,
        page_start=page_start if isinstance(page_start, int) else None,
        page_end=page_end if isinstance(page_end, int) else None,
        sheet=str(sheet) if sheet is not None else None,
        slide=slide if isinstance(slide, int) else None,
        links=tuple(dict.fromkeys(m.group(1) or m.group(2) for m in _LINK.finditer(shape.md_text))),
        # A heading line is never cut: one with nowhere to go may pass max_tokens alone.
        oversize=shape.tokens > config.max_tokens
        and (draft.heading_only or any(p.oversize for p in pieces)),
        undersize_reason=_undersize_reason(draft, config, ends_section),
        section_id=shape.section_id,
        prev_chunk_id=prev_chunk_id,
        next_chunk_id=next_chunk_id,
        bound_context=_bound_context(pieces, shape.chunk_type),
        code_role=_code_role(pieces, shape.chunk_type),
        table_group_count=_table_count(pieces),
        table_header=next((p.header for p in pieces if p.header), None),
        document={**info.metadata, "title": info.title},
    )


def _bound_context(pieces: list[Piece], chunk_type: str) -> str | None:
    """Does a table or code chunk open with bound prose, close with a bound output or
    explanation? (A small block merged into a `mixed` chunk records none.)"""
    content = [p for p in pieces if p.kind != HEADING]
    if not content or chunk_type not in UNMIXABLE_KINDS:
        return None
    before = content[0].bound in ("before", "both")
    after = content[-1].bound in ("after", "both")
    return "both" if before and after else "before" if before else "after" if after else None


def _code_role(pieces: list[Piece], chunk_type: str) -> str | None:
    """The role of a chunk's code (docs/chunking.md#bound-context): `example` when prose shares its
    chunk, else that of its first code piece (`output`: its output block bound to it)."""
    roles = [p.code_role for p in pieces if p.kind == "code"]
    if not roles:
        return None
    return "example" if chunk_type == "mixed" else roles[0]


def _table_count(pieces: list[Piece]) -> int | None:
    """How many tables a chunk holds, where it holds several (a table group, or small
    tables merged)."""
    # A table's first piece is its own text; later pieces repeat or record its header.
    tables = sum(p.kind == "table" and not p.synthetic and p.header is None for p in pieces)
    return tables if tables > 1 else None


def _undersize_reason(draft: _Draft, config: ChunkingSettings, ends_section: bool) -> str | None:
    """Why a chunk under `min_tokens` could not grow; the validator re-checks each."""
    if draft.group.tokens >= config.min_tokens:
        return None
    if draft.heading_only:
        return "heading_only"
    following = draft.following
    if ends_section or following is None:
        return "section_end"
    if draft.group.chunk_type in ("table", "list", "code"):
        return "lone_block"
    if any(p.kind in UNMIXABLE_KINDS for p in draft.group.pieces):
        return "no_merge_fits"  # it holds a small table or code block; no neighbour fits
    if any(c.group.chunk_type in UNMIXABLE_KINDS for c in following.contents[:1]):
        return "before_table_or_code"
    return "next_block_does_not_fit"  # no sentence or item boundary to cut the next block at


def compose_embed_text(
    title: str | None, headings: Sequence[str], overlap_prefix: str, md_text: str
) -> str:
    """What the embedder sees (docs/chunking.md#the-chunk-record): the context header, the overlap,
    the text. A chunk record without it (a Qdrant payload) gets it back from its own fields."""
    header = context_header(title, headings)
    return "\n\n".join(part for part in (header, overlap_prefix, md_text) if part)


def chunk_path(headings: Sequence[str]) -> str:
    """`/Intro/Install`; a `/` inside a heading is written `%2F` so the path splits back."""
    return "/" + "/".join(h.replace("%", "%25").replace("/", "%2F") for h in headings)


def _anchor_index(anchors: Sequence[Anchor]) -> dict[str, tuple[list[int], list[int | str]]]:
    index: dict[str, tuple[list[int], list[int | str]]] = {}
    for anchor in sorted(anchors, key=lambda a: (a.kind, a.offset)):
        offsets, values = index.setdefault(anchor.kind, ([], []))
        offsets.append(anchor.offset)
        values.append(anchor.value)
    return index


def _anchor_at(
    index: dict[str, tuple[list[int], list[int | str]]], kind: str, offset: int
) -> int | str | None:
    if kind not in index:
        return None
    offsets, values = index[kind]
    at = bisect.bisect_right(offsets, offset) - 1
    return values[max(at, 0)]
