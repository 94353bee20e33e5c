"""chunk_markdown: normalized Markdown + document info -> chunk records (SPEC §3).

normalize -> parse (blocks) -> count each block once -> split blocks over budget into
pieces -> pack pieces per section run -> recount multi-piece chunks exactly -> overlap,
ids, metadata. Sections run between headings; a horizontal rule also ends a run.
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from chunking.blocks import PACK_KIND, Block, BlockType
from chunking.code import CodeSplitter
from chunking.lists import ListSplitter
from chunking.overlap import overlap_prefix
from chunking.pack import Group, Packer
from chunking.parse import parse_blocks
from chunking.pieces import PROSE_KINDS, UNMIXABLE_KINDS, Piece
from chunking.prose import ProseSplitter
from chunking.record import Chunk, DocumentInfo, compute_chunk_id, compute_section_id
from chunking.table import TableSplitter
from chunking.text import Anchor, decode_utf8, normalize_markdown
from chunking.tokens import TokenCounter, get_token_counter
from config.errors import ErrorCode, IngestError
from config.settings import ChunkingSettings

_LINK = re.compile(r"\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)|<(https?://[^>\s]+)>")
OVERLAP_KINDS = frozenset({"paragraph", "mixed"})


@dataclass(frozen=True)
class ChunkedDocument:
    text: str  # the normalized Markdown all offsets refer to
    blocks: tuple[Block, ...]
    chunks: tuple[Chunk, ...]
    front_matter: dict[str, object] | None = None


@dataclass(frozen=True)
class _Run:
    """Consecutive content blocks between boundaries, all under one heading path."""

    headings: tuple[str, ...]
    blocks: tuple[Block, ...]
    section: int  # ordinal of the heading that opened the section (0: the document root)


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
) -> ChunkedDocument:
    """Like `chunk_markdown`, also returning the normalized text and blocks (for validation)."""
    subject = metadata.file_path or metadata.source_url or metadata.document_id
    if isinstance(text, bytes):
        text = decode_utf8(text, subject=subject)
    try:
        return _chunk(
            text, metadata, config, anchors, counter or get_token_counter(config.tokenizer)
        )
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
    raw: str,
    info: DocumentInfo,
    config: ChunkingSettings,
    anchors: Sequence[Anchor],
    counter: TokenCounter,
) -> ChunkedDocument:
    normalized = normalize_markdown(raw, anchors, front_matter=True)
    text = normalized.text
    if normalized.front_matter and info.title is None:
        title = normalized.front_matter.get("title")
        if isinstance(title, str):
            info = _with_title(info, title)
    blocks = parse_blocks(text)
    content = [b for b in blocks if not b.is_boundary]
    for block, count in zip(content, counter.count_many([b.text for b in content]), strict=True):
        block.token_count = count

    prose = ProseSplitter(counter, config.target_tokens, config.max_tokens)
    lists = ListSplitter(counter, config.target_tokens, config.max_tokens, prose)
    tables = TableSplitter(
        counter, config.target_tokens, config.max_tokens, config.oversize_block_limit
    )
    code = CodeSplitter(counter, config.max_tokens, config.oversize_block_limit)

    def pieces_of(block: Block) -> list[Piece]:
        kind = PACK_KIND[block.type]
        if block.type is BlockType.LIST:
            return lists.split(block, text)
        if block.type is BlockType.TABLE:
            return tables.split(block)
        if block.type in (BlockType.CODE, BlockType.HTML, BlockType.MATH):
            return code.split(block, kind)
        if block.token_count <= config.max_tokens:
            return [Piece(kind, block.start, block.end, block.text, block.token_count, block.index)]
        return prose.split(block.text, block.start, kind, block.index)

    def split_head(piece: Piece, budget: int) -> tuple[Piece, Piece] | None:
        if piece.kind in PROSE_KINDS:
            return prose.split_head(piece, text, budget)
        if piece.kind == "list" and piece.cuts:
            return lists.split_head(piece, text, budget)
        return None

    def exact_tokens(pieces: list[Piece]) -> int:
        return counter.count(_join_pieces(pieces, text))

    def split_tail(piece: Piece, least: int, most: int) -> tuple[Piece, Piece] | None:
        if piece.kind in PROSE_KINDS:
            return prose.split_tail(piece, text, least, most)
        return None

    packer = Packer(
        config.min_tokens,
        config.target_tokens,
        config.max_tokens,
        split_head,
        split_tail,
        exact_tokens,
    )
    runs: list[tuple[_Run, list[Group]]] = []
    for run in _section_runs(blocks):
        pieces = [p for block in run.blocks for p in pieces_of(block)]
        runs.append((run, _exact(packer.pack(pieces), text, counter, config.max_tokens)))

    sorted_anchors = _anchor_index(normalized.anchors)
    chunks: list[Chunk] = []
    for run, groups in runs:
        previous: Chunk | None = None
        for index, group in enumerate(groups):
            following = groups[index + 1] if index + 1 < len(groups) else None
            chunk = _make_chunk(
                len(chunks),
                run,
                group,
                following,
                previous,
                text,
                info,
                config,
                counter,
                sorted_anchors,
            )
            chunks.append(chunk)
            previous = chunk
    linked = [
        replace(
            chunk,
            prev_chunk_id=chunks[i - 1].chunk_id if i else None,
            next_chunk_id=chunks[i + 1].chunk_id if i + 1 < len(chunks) else None,
        )
        for i, chunk in enumerate(chunks)
    ]
    return ChunkedDocument(text, tuple(blocks), tuple(linked), normalized.front_matter)


def _section_runs(blocks: list[Block]) -> list[_Run]:
    runs: list[_Run] = []
    stack: list[tuple[int, str, int]] = []  # (level, text, section ordinal)
    current: list[Block] = []
    headings = 0

    def close() -> None:
        if current:
            section = stack[-1][2] if stack else 0
            runs.append(_Run(tuple(text for _, text, _ in stack), tuple(current), section))
            current.clear()

    for block in blocks:
        if block.type is BlockType.HEADING:
            close()
            headings += 1
            while stack and stack[-1][0] >= block.level:
                stack.pop()
            stack.append((block.level, block.heading_text, headings))
        elif block.type is BlockType.RULE:
            close()
        else:
            current.append(block)
    close()
    return runs


def _group_text(group: Group, text: str) -> str:
    return _join_pieces(group.pieces, text)


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


def _exact(groups: list[Group], text: str, counter: TokenCounter, max_tokens: int) -> list[Group]:
    """Exact counts for groups of several pieces. The packing estimate never
    under-counts, so none should pass `max_tokens`; one that does is halved."""
    multi = [g for g in groups if not g.exact]
    for group, count in zip(
        multi, counter.count_many([_group_text(g, text) for g in multi]), strict=True
    ):
        group.tokens = count
        group.exact = True
    exact: list[Group] = []
    for group in groups:
        if group.tokens <= max_tokens or len(group.pieces) == 1:
            exact.append(group)
            continue
        middle = len(group.pieces) // 2
        halves = [Group(), Group()]
        for i, piece in enumerate(group.pieces):
            halves[i >= middle].add(piece)
        exact.extend(_exact(halves, text, counter, max_tokens))
    return exact


def _make_chunk(
    ordinal: int,
    run: _Run,
    group: Group,
    following: Group | None,
    previous: Chunk | None,
    text: str,
    info: DocumentInfo,
    config: ChunkingSettings,
    counter: TokenCounter,
    anchors: dict[str, tuple[list[int], list[int | str]]],
) -> Chunk:
    chunk_type = group.chunk_type
    md_text = _group_text(group, text)
    start, end = group.pieces[0].start, group.pieces[-1].end
    prefix = ""
    if (
        chunk_type in OVERLAP_KINDS
        and previous is not None
        and previous.chunk_type in OVERLAP_KINDS
    ):
        prefix = overlap_prefix(
            previous.md_text,
            previous.token_count,
            config.overlap_tokens,
            config.overlap_max_share,
            counter,
        )
    headings = run.headings
    header = " > ".join(part for part in (info.title, *headings) if part)
    embed_text = "\n\n".join(part for part in (header, prefix, md_text) if part)
    undersize = None
    if group.tokens < config.min_tokens:
        if following is None:
            undersize = "section_end"
        elif chunk_type in ("table", "list", "code"):
            undersize = "lone_block"
        elif following.chunk_type in UNMIXABLE_KINDS:
            undersize = "before_table_or_code"
        else:  # the next block did not fit and had no sentence or item boundary to cut at
            undersize = "next_block_does_not_fit"
    path = chunk_path(headings)
    links = tuple(dict.fromkeys(m.group(1) or m.group(2) for m in _LINK.finditer(md_text)))
    page_start = _anchor_at(anchors, "page", start)
    page_end = _anchor_at(anchors, "page", max(start, end - 1))
    sheet = _anchor_at(anchors, "sheet", start)
    slide = _anchor_at(anchors, "slide", start)
    return Chunk(
        chunk_id=compute_chunk_id(
            info.tenant_id, info.document_id, info.source_version_id, ordinal, md_text, chunk_type
        ),
        tenant_id=info.tenant_id,
        document_id=info.document_id,
        source_version_id=info.source_version_id,
        ordinal=ordinal,
        chunk_type=chunk_type,  # type: ignore[arg-type]
        headings_path=headings,
        chunk_path=path,
        md_text=md_text,
        overlap_prefix=prefix,
        embed_text=embed_text,
        char_start=start,
        char_end=end,
        block_start_idx=group.pieces[0].block_index,
        block_end_idx=group.pieces[-1].block_index,
        token_count=group.tokens,
        source_type=info.source_type,
        source_url=info.source_url,
        file_path=info.file_path,
        title=info.title,
        labels=info.labels,
        updated_at=info.updated_at,
        author=info.author,
        space_key=info.space_key,
        page_id=info.page_id,
        page_start=page_start if isinstance(page_start, int) else None,
        page_end=page_end if isinstance(page_end, int) else None,
        sheet=str(sheet) if sheet is not None else None,
        slide=slide if isinstance(slide, int) else None,
        links=links,
        oversize=any(p.oversize for p in group.pieces) and group.tokens > config.max_tokens,
        undersize_reason=undersize,
        section_id=compute_section_id(
            info.tenant_id, info.document_id, info.source_version_id, path, run.section
        ),
        extra=dict(info.extra),
    )


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


def _with_title(info: DocumentInfo, title: str) -> DocumentInfo:
    return replace(info, title=title)
