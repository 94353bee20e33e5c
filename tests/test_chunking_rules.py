"""The chunking rules (docs/chunking.md#rules): small sections merge, bound context, display
math, table headers, overlap starts, nested blocks in lists, hierarchy, profiles.

Every case is validated (docs/chunking.md#validation), chunked twice for byte-identical output and
its token counts recounted (`chunked`); the validator's new rules are shown to fail on
chunks that break them.
"""

from __future__ import annotations

import dataclasses
import io
import random
import re

import openpyxl
import pytest

from chunking import Chunk, DocumentInfo, chunk_document, validate_chunks
from chunking import parse as parse_module
from chunking.blocks import Block, BlockType
from chunking.chunker import context_header
from chunking.overlap import overlap_start_ok
from chunking.parse import parse_blocks
from chunking.registry import SPLITTERS
from chunking.tokens import TokenCounter
from config.errors import ConfigError
from config.settings import ChunkingSettings, load_settings
from normalizers.base import normalize_bytes
from tests.chunk_helpers import chunked, paragraph, types

SMALL = ChunkingSettings(
    min_tokens=40, target_tokens=60, max_tokens=80, overlap_tokens=10, oversize_block_limit=120
)  # type: ignore[call-arg]


def _fences_balanced(text: str) -> bool:
    return len(re.findall(r"^\s*```", text, re.MULTILINE)) % 2 == 0


# --- small sections merge (docs/chunking.md#small-sections-merge) ---------------------------------


def test_small_sibling_sections_merge_under_their_parent(
    counter: TokenCounter, chunking_settings: ChunkingSettings
) -> None:
    sections = "".join(f"## Step {i}\n\n{paragraph(counter, 45, i)}\n\n" for i in range(5))
    text = f"# Guide\n\n{sections}# Other\n\n{paragraph(counter, 60, 7)}\n"
    chunks = chunked(text, chunking_settings).chunks
    merged = chunks[0]
    # Five small sections merge into one chunk: its path is what they share, and the
    # heading lines below it stay in md_text as Markdown headings.
    assert merged.headings_path == ("Guide",)
    assert [line for line in merged.md_text.split("\n") if line.startswith("#")] == [
        f"## Step {i}" for i in range(5)
    ]
    assert merged.token_count >= chunking_settings.min_tokens
    # An H2 run stops at the next H1: Other is a chunk of its own (nothing to merge with).
    assert [c.chunk_path for c in chunks] == ["/Guide", "/Other"]
    assert "# Other" not in merged.md_text
    assert chunks[1].undersize_reason == "section_end"


def test_merging_never_crosses_a_rule_and_takes_small_table_or_code_sections_whole(
    counter: TokenCounter, chunking_settings: ChunkingSettings
) -> None:
    table = "| key | value |\n|---|---|\n" + "\n".join(f"| k{i} | v{i} |" for i in range(5))
    text = (
        f"## A\n\n{paragraph(counter, 40, 0)}\n\n---\n\n"
        f"## B\n\n{paragraph(counter, 40, 1)}\n\n"
        f"## C\n\n{table}\n\n"
        f"## D\n\n```\ncode()\n```\n"
    )
    chunks = chunked(text, chunking_settings).chunks
    assert [c.chunk_type for c in chunks] == ["paragraph", "mixed"]
    assert chunks[0].chunk_path == "/A" and "## B" not in chunks[0].md_text
    # A section of nothing but a small table or code block merges like any small
    # section, its block whole (a table or code chunk of min_tokens or more never does:
    # tests/test_chunking_answers.py).
    assert table in chunks[1].md_text and "## D\n\n```\ncode()\n```" in chunks[1].md_text
    # Each is the last chunk of its section: a rule or the end follows.
    assert [c.undersize_reason for c in chunks] == ["section_end"] * 2


def test_a_small_section_takes_the_head_of_a_long_next_section(
    counter: TokenCounter, chunking_settings: ChunkingSettings
) -> None:
    text = (
        f"## Intro\n\n{paragraph(counter, 70, 0)}\n\n"
        f"## Body\n\n" + "\n\n".join(paragraph(counter, 120, i) for i in range(1, 5)) + "\n"
    )
    chunks = chunked(text, chunking_settings).chunks
    assert chunks[0].chunk_path == "/" and "\n\n## Body\n\n" in chunks[0].md_text
    assert all(c.chunk_path == "/Body" for c in chunks[1:])
    assert all(150 <= c.token_count <= 300 for c in chunks)


def test_headings_without_content_keep_their_text(
    counter: TokenCounter, chunking_settings: ChunkingSettings
) -> None:
    # A PDF whose body lines were detected as headings: each line is a heading followed
    # directly by the next one; none of their text may be lost.
    lines = [f"### Line {i} of the body text" for i in range(6)]
    text = "# Report\n\n" + "\n\n".join(lines) + f"\n\n{paragraph(counter, 120, 0)}\n"
    chunks = chunked(text, chunking_settings).chunks
    indexed = "\n".join(c.md_text + "\n" + " ".join(c.headings_path) for c in chunks)
    for line in lines:
        assert line.lstrip("# ") in indexed
    # Chapter headings above their first subsection stay in the path, not in md_text.
    nested = chunked(
        f"# Chapter 1.\n\n## Intro\n\n{paragraph(counter, 160, 1)}\n", chunking_settings
    )
    assert nested.chunks[0].headings_path == ("Chapter 1.", "Intro")
    assert "#" not in nested.chunks[0].md_text


def test_a_heading_with_nowhere_to_go_is_a_chunk_of_heading_lines(
    chunking_settings: ChunkingSettings,
) -> None:
    chunks = chunked("Intro text.\n\n---\n\n## Appendix\n", chunking_settings).chunks
    assert [c.md_text for c in chunks] == ["Intro text.", "## Appendix"]
    assert chunks[1].undersize_reason == "heading_only"


# --- bound context (docs/chunking.md#bound-context) -----------------------------------------

BIND = SMALL.model_copy(update={"bind_before_tokens": 12, "bind_after_tokens": 16})
NO_BIND = SMALL.model_copy(update={"bind_before_tokens": 0, "bind_after_tokens": 0})
WORDS = {
    "en": ["Run the sample first.", "It needs a token.", "Then check the log.", "Done."],
    "ru": ["Сначала запустите пример.", "Нужен токен.", "Потом проверьте журнал.", "Всё."],
}
OUTPUT_INTRO = {"en": "Output:", "ru": "Результат:"}


def _code(lines: int, info: str = "python", seed: int = 0) -> str:
    """A fenced block of `lines` lines (about 15 tokens each)."""
    body = "\n".join(f"value_{seed}_{i} = compute(value_{i - 1}, step={i})" for i in range(lines))
    return f"```{info}\n{body}\n```"


@pytest.mark.parametrize("language", ["en", "ru"])
def test_the_nearest_prose_binds_before_a_block_within_bind_before_tokens(
    counter: TokenCounter, language: str
) -> None:
    """Several paragraphs bind, nearest first, while they fit `bind_before_tokens`; the
    one that would pass it stays prose."""
    far, middle, near, _ = WORDS[language]
    code = _code(3)
    assert counter.count(code) >= BIND.min_tokens  # never mixes: binding alone joins it
    assert counter.count(middle) + counter.count(near) <= BIND.bind_before_tokens
    assert counter.count(far) + counter.count(middle) + counter.count(near) > 12
    text = f"{paragraph(counter, 30, 1)} {far}\n\n{middle}\n\n{near}\n\n{code}\n"
    chunks = chunked(text, BIND).chunks
    assert types(chunks) == ["paragraph", "code"]
    assert chunks[1].md_text == f"{middle}\n\n{near}\n\n{code}"
    assert (chunks[1].bound_context, chunks[1].code_role) == ("before", "example")


@pytest.mark.parametrize("language", ["en", "ru"])
def test_an_output_block_and_its_explanation_bind_after_the_code(
    counter: TokenCounter, language: str
) -> None:
    explain = WORDS[language][3]
    intro = OUTPUT_INTRO[language]
    code = _code(3)
    # An output block introduced by "Output:"/"Результат:", then a line explaining it.
    text = f"{code}\n\n{intro}\n\n```\n4\n```\n\n{explain}\n"
    chunk = chunked(text, BIND).chunks[0]
    assert chunk.md_text == text.strip()
    assert (chunk.bound_context, chunk.code_role) == ("after", "example")
    # An output block by its info string, nothing else: the code's role is output.
    text = f"{code}\n\n```console\n$ run\n4\n```\n\n{_code(3, seed=1)}\n"
    chunks = chunked(text, BIND).chunks
    assert chunks[0].md_text.endswith("```console\n$ run\n4\n```")
    assert [(c.bound_context, c.code_role) for c in chunks] == [
        ("after", "output"),
        (None, "standalone"),
    ]


def test_an_output_block_binds_to_the_code_right_before_it_only(counter: TokenCounter) -> None:
    """Two code samples and the second one's output, all within the binding budget: the
    first sample is not bound to the second and its output as if they were its own (the
    validator refuses a chunk of two code blocks). min_tokens under each sample keeps the
    small-blocks rule out of it."""
    first, second = _code(3), _code(3, seed=1)
    text = f"{first}\n\n{second}\n\n```text\n4\n```\n"
    settings = ChunkingSettings(min_tokens=40, overlap_tokens=10)  # type: ignore[call-arg]
    chunks = chunked(text, settings).chunks
    assert [c.md_text for c in chunks] == [first, f"{second}\n\n```text\n4\n```"]
    assert [(c.bound_context, c.code_role) for c in chunks] == [
        (None, "standalone"),
        ("after", "output"),
    ]


def test_a_paragraph_binds_to_one_block_only(counter: TokenCounter) -> None:
    """Between two blocks: the explanation after the first binds to it, the lead-in
    (ending with `:`) and the prose right before the second bind to the second."""
    first, second = _code(3), _code(3, seed=1)
    text = f"{first}\n\nIt prints four.\n\nNow the loop:\n\n{second}\n"
    chunks = chunked(text, BIND).chunks
    assert [c.md_text for c in chunks] == [
        f"{first}\n\nIt prints four.",
        f"Now the loop:\n\n{second}",
    ]
    assert [c.bound_context for c in chunks] == ["after", "before"]
    # One paragraph between them, no lead-in: it explains the block before it.
    text = f"{first}\n\nIt prints four.\n\n{second}\n"
    assert [c.bound_context for c in chunked(text, BIND).chunks] == ["after", None]


def test_image_placeholders_bind_with_the_caption_beside_them(
    counter: TokenCounter, chunking_settings: ChunkingSettings
) -> None:
    """Docling-style Markdown: a table, its caption, an `<!-- image -->` placeholder and
    the next chart's title, then the chart's table. The caption and placeholder bind
    after the first table (its footnote), the title before the second (the prose right
    before a block is its own); none is a chunk of a few tokens of its own."""
    table = "| x | y |\n|---|---|\n" + "\n".join(f"| {i} | {i * i} |" for i in range(25))
    assert counter.count(table) > chunking_settings.max_tokens // 2  # two never share a chunk
    text = (
        f"## Sheet\n\n{table}\n\n'col-3'\n\n<!-- image -->\n\nLine chart\n\n{table}\n\n"
        "<!-- image -->\n"
    )
    chunks = chunked(text, chunking_settings).chunks
    assert types(chunks) == ["table", "table"]
    assert chunks[0].md_text.endswith("\n\n'col-3'\n\n<!-- image -->")
    assert chunks[0].bound_context == "after"
    assert chunks[1].md_text.startswith("Line chart\n\n| x | y |")
    assert chunks[1].md_text.endswith("\n\n<!-- image -->")
    assert chunks[1].bound_context == "both"


ALIASES_OF = {"bind_tokens": "bind_before_tokens"}


def test_bind_tokens_is_another_name_of_bind_before_tokens() -> None:
    assert ChunkingSettings(bind_tokens=10).bind_before_tokens == 10  # type: ignore[call-arg]
    env = {"INGEST_CHUNKING__BIND_TOKENS": "10"}
    assert load_settings(environ=env).chunking.bind_before_tokens == 10
    assert load_settings({"chunking.bind_tokens": 12}).chunking.bind_before_tokens == 12
    with pytest.raises(ValueError, match="bind_tokens"):
        ChunkingSettings(bind_tokens=10, bind_before_tokens=20)  # type: ignore[call-arg]
    for name in ("bind_after_tokens", "table_group_max_gap_lines", "bind_tokens"):
        with pytest.raises(ConfigError, match=f"chunking.{ALIASES_OF.get(name, name)}"):
            load_settings(environ={f"INGEST_CHUNKING__{name.upper()}": "-1"})


def test_bound_context_never_passes_the_limits(counter: TokenCounter) -> None:
    body = "\n".join(f"value_{i} = compute(value_{i - 1}, step={i})" for i in range(1, 60))
    code = f"```python\n{body}\n```"
    assert SMALL.oversize_block_limit < counter.count(code)
    text = f"The loop below:\n\n{code}\n\nIt ends here.\n"
    chunks = chunked(text, BIND).chunks
    assert chunks[0].bound_context == "before" and chunks[-1].bound_context == "after"
    assert all(c.token_count <= SMALL.max_tokens for c in chunks)
    assert all(c.md_text.count("```") == 2 for c in chunks)
    assert {c.code_role for c in chunks} == {"example"}  # every piece of the explained block
    # A block within max_tokens takes no context that would push it past max_tokens.
    code = _code(4)
    lead = "Then check the log, and the next one after it."
    assert counter.count(lead) <= BIND.bind_before_tokens
    assert counter.count(code) <= SMALL.max_tokens < counter.count(code) + counter.count(lead)
    chunks = chunked(f"{lead}\n\n{code}\n", BIND).chunks
    assert [c.bound_context for c in chunks] == [None, None]


# --- small blocks (docs/chunking.md#small-blocks) ---------------------------------------------


@pytest.mark.parametrize("language", ["en", "ru"])
def test_a_small_block_merges_with_the_previous_chunk_else_the_next(
    counter: TokenCounter, language: str
) -> None:
    small = "```\nrun()\n```"
    prose = " ".join(WORDS[language] * 3)
    assert counter.count(small) < SMALL.min_tokens
    # The previous chunk of its section takes it when the two fit max_tokens.
    chunks = chunked(f"{paragraph(counter, 40, 0)}\n\n{small}\n", NO_BIND).chunks
    assert types(chunks) == ["mixed"] and chunks[0].code_role == "example"
    # Else the next one: the previous is full.
    full = " ".join([WORDS[language][0]] * 15)
    assert counter.count(full) + counter.count(small) > SMALL.max_tokens
    text = f"{full}\n\n{small}\n\n{prose}\n"
    chunks = chunked(text, NO_BIND).chunks
    assert types(chunks) == ["paragraph", "mixed"]
    assert chunks[1].md_text == f"{small}\n\n{prose}"
    # Several small tables and code blocks in a row merge with each other: no prose, so
    # they keep their kind (the rule keeps the two small sections from merging).
    rows = "| a | b |\n|---|---|\n| 1 | 2 |"
    text = f"# T\n\n{small}\n\n{small}\n\n---\n\n# U\n\n{rows}\n\n{rows}\n"
    chunks = chunked(text, NO_BIND).chunks
    assert types(chunks) == ["code", "table"]
    assert [c.table_group_count for c in chunks] == [None, 2]
    # Nothing fits beside it (a large block on each side): it stays, saying why.
    text = f"{_code(3)}\n\n{rows}\n\n{_code(3, seed=1)}\n"
    chunks = chunked(text, NO_BIND).chunks
    assert types(chunks) == ["code", "table", "code"]
    assert chunks[1].undersize_reason == "lone_block"


TABLE_WORDS = {
    "en": ("name", "size", "Table 2:", "Line {} of a note."),
    "ru": ("имя", "размер", "Таблица 2:", "Строка {} примечания."),
}


@pytest.mark.parametrize("language", ["en", "ru"])
def test_table_grouping_joins_nearby_tables_of_a_section(
    counter: TokenCounter, language: str
) -> None:
    name, size, caption, line = TABLE_WORDS[language]
    table = f"| {name} | {size} |\n|---|---|\n" + "\n".join(f"| f{i} | {i} KB |" for i in range(4))
    assert SMALL.min_tokens <= counter.count(table)  # large: only grouping joins them
    far = "\n".join(line.format(i) for i in range(5))  # 7 lines between
    text = f"## Files\n\n{table}\n\n{caption}\n\n{table}\n\n{far}\n\n{table}\n"
    wide = NO_BIND.model_copy(update={"max_tokens": 130})
    grouped = wide.model_copy(update={"group_related_tables": True, "table_group_max_gap_lines": 3})
    chunks = chunked(text, grouped).chunks
    assert [c.table_group_count for c in chunks] == [2, None, None]
    assert chunks[0].md_text == f"{table}\n\n{caption}\n\n{table}"
    assert chunks[0].chunk_type == "mixed" and chunks[0].token_count <= 130
    assert [c.table_group_count for c in chunked(text, wide).chunks] == [None] * 5
    # A group never passes the limit: with room for one table only, none groups.
    narrow = grouped.model_copy(update={"max_tokens": counter.count(table) + 10})
    assert {c.table_group_count for c in chunked(text, narrow).chunks} == {None}


# --- display math ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("opener", "closer"),
    [("$$", "$$"), ("\\begin{equation}", "\\end{equation}"), ("\\begin{align*}", "\\end{align*}")],
)
def test_display_math_splits_into_valid_math_blocks(opener: str, closer: str) -> None:
    lines = [
        f"x_{{{i}}} &= \\sum_{{k=0}}^{{{i}}} a_k b_{{{i}-k}} + \\frac{{{i}}}{{2}} \\\\"
        for i in range(40)
    ]
    text = f"Intro.\n\n{opener}\n" + "\n".join(lines) + f"\n{closer}\n\nAfter.\n"
    document = chunked(text, SMALL)
    pieces = [c for c in document.chunks if opener in c.md_text]
    assert len(pieces) >= 3
    body: list[str] = []
    for chunk in pieces:
        md = chunk.md_text[chunk.md_text.index(opener) :]
        md = md[: md.index(closer, len(opener)) + len(closer)]
        piece_lines = md.split("\n")
        assert piece_lines[0] == opener and piece_lines[-1] == closer
        body.extend(piece_lines[1:-1])
    assert body == lines  # split between lines, nothing lost, nothing cut mid-line


def test_math_kept_whole_up_to_the_oversize_limit(counter: TokenCounter) -> None:
    formula = "$$\n" + "\n".join(f"y_{i} = {i} x^{i}" for i in range(14)) + "\n$$"
    assert SMALL.max_tokens < counter.count(formula) <= SMALL.oversize_block_limit
    chunks = chunked(f"{formula}\n", SMALL).chunks
    assert [c.md_text for c in chunks] == [formula] and chunks[0].oversize


# --- even pieces -----------------------------------------------------------------------


def _sizes(chunks: tuple[Chunk, ...], kind: str) -> list[int]:
    return [c.token_count for c in chunks if c.chunk_type == kind]


def test_a_split_block_comes_out_in_even_pieces_not_full_ones_and_a_remainder(
    counter: TokenCounter,
) -> None:
    """The pieces of a split table, code block or paragraph come out even, none over
    the limit: not full pieces and a small remainder (a 330-token table is not 250 + 80)."""
    settings = ChunkingSettings()  # type: ignore[call-arg]
    table = _table(["Setting", "Default", "Meaning"], 12, 1) + "\n"
    assert 300 < counter.count(table) < 375  # over max, yet two pieces hold it with room
    tables = _sizes(chunked(table, settings).chunks, "table")
    assert len(tables) == 2 and min(tables) >= settings.min_tokens, tables

    code = "```python\n" + "\n".join(f"value_{i} = compute({i}, scale={i * 3})" for i in range(58))
    code += "\n```\n"
    assert settings.oversize_block_limit < counter.count(code) < 2 * settings.max_tokens + 150
    pieces = _sizes(chunked(code, settings).chunks, "code")
    assert len(pieces) == 3 and max(pieces) - min(pieces) <= 30, pieces

    prose = paragraph(counter, 340, seed=7) + "\n"
    sentences = _sizes(chunked(prose, settings).chunks, "paragraph")
    assert len(sentences) == 2 and min(sentences) >= settings.min_tokens, sentences


# --- table headers --------------------------------------------------------------------


def _table(header_cells: list[str], rows: int, width_words: int = 3) -> str:
    header = "| " + " | ".join(header_cells) + " |"
    delimiter = "|" + "---|" * len(header_cells)
    body = [
        "| "
        + " | ".join(
            " ".join(f"r{r}c{c}w{w}" for w in range(width_words)) for c in range(len(header_cells))
        )
        + " |"
        for r in range(rows)
    ]
    return "\n".join([header, delimiter, *body])


def test_a_header_over_a_quarter_of_a_piece_is_repeated_shortened(counter: TokenCounter) -> None:
    cells = [f"Quarterly revenue column {i} in thousands of euros" for i in range(5)]
    text = _table(cells, 30, 1) + "\n"
    full = "\n".join(text.split("\n")[:2])
    assert counter.count(full) > ChunkingSettings().max_tokens // 4  # type: ignore[call-arg]
    chunks = chunked(text, ChunkingSettings()).chunks  # type: ignore[call-arg]
    assert len(chunks) >= 2 and chunks[0].md_text.startswith(full)
    for chunk in chunks[1:]:
        short = "| " + " | ".join(["Quarterly"] * 5) + " |\n|" + "-|" * 5 + "\n"
        assert chunk.md_text.startswith(short)
        assert chunk.table_header == full


def test_a_header_too_wide_to_repeat_is_recorded_beside_the_pieces() -> None:
    cells = [f"Measurement {i} of the calibrated sensor array output" for i in range(12)]
    text = _table(cells, 20, 1) + "\n"
    full = "\n".join(text.split("\n")[:2])
    chunks = chunked(text, ChunkingSettings()).chunks  # type: ignore[call-arg]
    assert chunks[0].md_text.startswith(full) and chunks[0].table_header is None
    for chunk in chunks[1:]:
        assert chunk.table_header == full
        assert all(line.startswith("| r") for line in chunk.md_text.split("\n"))


def test_numeric_sheet_chunks_in_proportion_to_its_text(counter: TokenCounter) -> None:
    """The workbook that took a machine down: a sheet of 270 x 85 integers. Its chunks
    stay within twice what the text alone needs, and hold no more than its own tokens."""
    workbook = openpyxl.Workbook()
    sheet = workbook.active
    rng = random.Random(14)
    for _ in range(270):
        sheet.append([rng.randint(0, 65535) for _ in range(85)])
    buffer = io.BytesIO()
    workbook.save(buffer)
    normalized = normalize_bytes(buffer.getvalue(), "image-as-numbers.xlsx")
    settings = ChunkingSettings()  # type: ignore[call-arg]
    document = chunk_document(
        normalized.markdown, DocumentInfo(document_id="x"), settings, anchors=normalized.anchors
    )
    assert validate_chunks(document.chunks, document.text, settings, document.blocks).ok
    own = counter.count(document.text)
    needs = -(-own // settings.max_tokens)
    assert len(document.chunks) <= 2 * needs
    assert sum(c.token_count for c in document.chunks) <= own * 1.05
    assert all(c.token_count <= settings.oversize_block_limit for c in document.chunks)


# --- overlap --------------------------------------------------------------------------


def test_overlap_start_rule() -> None:
    text = (
        "First one. Second one here.\n- item one. Two.\n  continued line\n$$\nx = 1\n$$\nEnd. tail"
    )
    allowed = {"Second", "- item", "continued", "$$\nx", "End"}
    refused = {"item one", "Two", "x = 1", "tail", "one here", "ne."}
    for word in allowed:
        assert overlap_start_ok(text, text.index(word)), word
    for word in refused:
        assert not overlap_start_ok(text, text.index(word)), word


def test_overlap_of_a_chunk_after_a_list_starts_at_an_item(counter: TokenCounter) -> None:
    items = "\n".join(f"- Item {i}: {paragraph(counter, 30, i)}" for i in range(12))
    text = f"{paragraph(counter, 60, 0)}\n\n{items}\n\n{paragraph(counter, 200, 3)}\n"
    chunks = chunked(text, chunking_settings := ChunkingSettings()).chunks  # type: ignore[call-arg]
    prefixed = [c for c in chunks if c.overlap_prefix]
    assert prefixed
    for chunk in prefixed:
        previous = chunks[chunk.ordinal - 1]
        start = len(previous.md_text) - len(chunk.overlap_prefix)
        assert overlap_start_ok(previous.md_text, start)
        assert counter.count(chunk.overlap_prefix) <= chunking_settings.overlap_tokens


# --- nested blocks in lists, rows, lines ----------------------------------------------


@pytest.mark.parametrize("language", ["en", "ru"])
def test_code_and_tables_inside_list_items_are_never_cut_inside(
    counter: TokenCounter, language: str
) -> None:
    words = (
        ["install", "the", "service", "then", "restart", "it"]
        if language == "en"
        else ["установите", "службу", "затем", "перезапустите", "её", "снова"]
    )
    intro = " ".join(words * 4)
    code = "\n".join(f"   step_{i}({words[i % 6]!r})" for i in range(30))
    table_rows = "\n".join(f"   | {words[i % 6]} {i} | {i * 7} |" for i in range(30))
    text = (
        f"1. {intro}:\n\n   ```python\n{code}\n   ```\n\n"
        f"2. {intro}:\n\n   | key | value |\n   |---|---|\n{table_rows}\n\n"
        f"3. {intro}.\n"
    )
    document = chunked(text, SMALL)
    for chunk in document.chunks:
        assert _fences_balanced(chunk.md_text), chunk.md_text
        lines = chunk.md_text.split("\n")
        rows = [i for i, line in enumerate(lines) if line.lstrip().startswith("|")]
        if rows and chunk.table_header is None:
            assert lines[rows[0] + 1].strip().startswith("|---"), chunk.md_text
    code_pieces = [c for c in document.chunks if "```python" in c.md_text]
    assert len(code_pieces) >= 2  # the code block was split by its own rule, as a block


def test_pipe_rows_in_a_paragraph_are_never_cut_mid_row(counter: TokenCounter) -> None:
    rows = [f"| row {i}. Value one. | Second cell. Long text {i} |" for i in range(60)]
    text = "\n".join(rows) + "\n"  # no delimiter row: markdown-it reads a paragraph
    assert [b.type for b in parse_blocks(text)] == [BlockType.PARAGRAPH]
    document = chunked(text, SMALL)
    assert len(document.chunks) > 3
    for chunk in document.chunks:
        assert all(line in rows for line in chunk.md_text.split("\n"))


def test_list_items_are_cut_only_between_lines(counter: TokenCounter) -> None:
    lines = [f"- {paragraph(counter, 25, i)}" for i in range(20)]
    text = "\n".join(lines) + "\n"
    for chunk in chunked(text, SMALL).chunks:
        assert all(line in lines for line in chunk.md_text.split("\n"))


# --- records, profiles, embed text ----------------------------------------------------


def test_seed_002_packs_before_450_and_splits_blocks_only_above_520(counter: TokenCounter) -> None:
    settings = load_settings({"chunking.profile": "seed-002"}).chunking
    assert (settings.pack_max_tokens, settings.max_tokens) == (450, 520)
    whole = paragraph(counter, 490, 0)
    long = paragraph(counter, 900, 1)
    assert 450 < counter.count(whole) <= 520 < counter.count(long)
    chunks = chunked(
        f"{whole}\n\n{long}\n\n{paragraph(counter, 300, 2)}\n\n{paragraph(counter, 300, 3)}\n",
        settings,
    ).chunks
    assert chunks[0].md_text == whole  # one block up to the hard max stays whole
    assert all(c.token_count <= 450 for c in chunks[1:])  # packing closes before 450
    assert len([c for c in chunks if c.md_text in long]) >= 2
    seed_000 = load_settings({"chunking.profile": "seed-000"}).chunking
    assert (seed_000.min_tokens, seed_000.target_tokens, seed_000.max_tokens) == (120, 650, 900)
    assert seed_000.overlap_tokens == 80


def test_embed_text_names_the_title_once() -> None:
    assert (
        context_header("Storage design", ["Storage Design", "Layout"]) == "Storage Design > Layout"
    )
    assert context_header("storage-design.pdf", ["Storage design"]) == "Storage design"
    assert context_header("Guide", ["Install"]) == "Guide > Install"
    assert context_header(None, []) == ""


def test_every_block_type_has_a_splitter() -> None:
    content = {t for t in BlockType if t not in (BlockType.HEADING, BlockType.RULE)}
    assert set(SPLITTERS) == content


def test_large_documents_parse_in_segments_to_the_same_blocks(
    counter: TokenCounter, monkeypatch: pytest.MonkeyPatch
) -> None:
    parts = []
    for i in range(40):
        parts.append(f"# Part {i}\n\n{paragraph(counter, 40, i)}\n")
        parts.append(
            f"```\nunclosed {i}\n\n# not a heading {i}\n```\n" if i % 3 == 0 else "- a\n\n  b\n"
        )
        parts.append(
            "<!--\n\n# commented heading\n\n-->\n" if i % 4 == 0 else "| a |\n|---|\n| 1 |\n"
        )
        parts.append("$$\n\n# math, not a heading\n$$\n" if i % 5 == 0 else "1. x\n\n2. y\n")
    text = "\n".join(parts)

    def shape(blocks: list[Block]) -> list[tuple[object, ...]]:
        return [(b.type, b.start, b.end, b.heading_text, b.items) for b in blocks]

    whole = shape(parse_blocks(text))
    monkeypatch.setattr(parse_module, "SEGMENT_CHARS", 200)
    assert shape(parse_blocks(text)) == whole
    assert sum(b[0] is BlockType.HEADING for b in whole) == 40


# --- the validator's new rules fail where they must -----------------------------------


def _document(counter: TokenCounter) -> tuple[str, tuple[Chunk, ...], ChunkingSettings]:
    settings = ChunkingSettings()  # type: ignore[call-arg]
    text = (
        f"# Guide\n\n{paragraph(counter, 250, 0)}\n\n{paragraph(counter, 250, 1)}\n\n"
        f"## Small\n\n{paragraph(counter, 60, 2)}\n\n## Next\n\n{paragraph(counter, 130, 3)}\n\n"
        f"Example:\n\n{_code(11)}\n\n$$\nx = 1\n$$\n"
    )
    document = chunked(text, settings, title="Guide")
    return document.text, document.chunks, settings


def _rules(chunks: list[Chunk], text: str, settings: ChunkingSettings) -> set[str]:
    return {v.rule for v in validate_chunks(chunks, text, settings).violations}


def test_validator_catches_broken_hierarchy(counter: TokenCounter) -> None:
    text, chunks, settings = _document(counter)
    assert _rules(list(chunks), text, settings) == set()
    broken = list(chunks)
    broken[1] = dataclasses.replace(broken[1], section_id="0" * 64)
    assert "section_id" in _rules(broken, text, settings)
    broken = list(chunks)
    broken[1] = dataclasses.replace(broken[1], prev_chunk_id=None)
    assert "links" in _rules(broken, text, settings)
    broken = list(chunks)
    merged = next(i for i, c in enumerate(chunks) if "## Next" in c.md_text)
    broken[merged] = dataclasses.replace(
        broken[merged], headings_path=("Guide", "Small"), chunk_path="/Guide/Small"
    )
    assert "headings_path" in _rules(broken, text, settings)


def test_validator_catches_lost_headings_bad_overlap_and_bound_context(
    counter: TokenCounter,
) -> None:
    text, chunks, settings = _document(counter)
    with_overlap = next(c for c in chunks if c.overlap_prefix)
    previous = chunks[with_overlap.ordinal - 1]
    cut = previous.md_text[-len(with_overlap.overlap_prefix) - 7 :]  # starts mid-sentence
    broken = list(chunks)
    broken[with_overlap.ordinal] = dataclasses.replace(with_overlap, overlap_prefix=cut.strip())
    assert "overlap" in _rules(broken, text, settings)
    code = next(c for c in chunks if c.chunk_type == "code")
    broken = list(chunks)
    broken[code.ordinal] = dataclasses.replace(code, bound_context="after")
    assert "bound_context" in _rules(broken, text, settings)
    merged = next(c for c in chunks if "## Next" in c.md_text)
    broken = list(chunks)
    md = merged.md_text.replace("## Next\n\n", "")
    broken[merged.ordinal] = dataclasses.replace(merged, md_text=md)
    assert "headings" in _rules(broken, text, settings)


def test_validator_catches_cut_math_missing_table_headers_and_token_growth(
    counter: TokenCounter,
) -> None:
    settings = SMALL
    formula = "$$\n" + "\n".join(f"y_{i} = {i} x^{i} + {i}" for i in range(30)) + "\n$$"
    text = f"{formula}\n"
    chunks = list(chunked(text, settings).chunks)
    assert len(chunks) >= 2
    broken = [dataclasses.replace(chunks[0], md_text=chunks[0].md_text.removesuffix("$$").rstrip())]
    broken += chunks[1:]
    assert "math" in _rules(broken, text, settings)
    table = "| a | b |\n|---|---|\n" + "\n".join(f"| {i} | value {i} here |" for i in range(40))
    chunks = list(chunked(table + "\n", settings).chunks)
    second = chunks[1]
    body = "\n".join(second.md_text.split("\n")[2:])
    broken = [*chunks[:1], dataclasses.replace(second, md_text=body), *chunks[2:]]
    assert "table_header" in _rules(broken, table + "\n", settings)
    padded = [dataclasses.replace(c, token_count=c.token_count * 3) for c in chunks]
    assert "token_growth" in _rules(padded, table + "\n", settings)


def test_validator_catches_broken_bound_context_small_blocks_roles_and_groups(
    counter: TokenCounter,
) -> None:
    first, second = _code(3), _code(3, seed=1)
    text = f"Now the loop:\n\n{first}\n\nIt prints four.\n\n{second}\n"
    chunks = list(chunked(text, BIND).chunks)
    assert [c.bound_context for c in chunks] == ["both", None]
    # A paragraph bound to two blocks: one chunk claims both code blocks as its own.
    whole = dataclasses.replace(
        chunks[0],
        md_text=text.strip(),
        char_end=chunks[1].char_end,
        block_end_idx=chunks[1].block_end_idx,
        token_count=counter.count(text.strip()),
    )
    assert "bound_context" in _rules([whole], text, BIND)
    # Bound prose over its budget.
    tight = BIND.model_copy(update={"bind_before_tokens": 2})
    assert "bound_context" in _rules(chunks, text, tight)
    # A wrong role.
    wrong = [dataclasses.replace(chunks[0], code_role="standalone"), chunks[1]]
    assert "code_role" in _rules(wrong, text, BIND)
    wrong = [chunks[0], dataclasses.replace(chunks[1], code_role=None)]
    assert "code_role" in _rules(wrong, text, BIND)
    # A small code block left alone beside a paragraph it fits with (chunked where
    # min_tokens let it stand, checked against the budgets where it may not).
    small = f"{paragraph(counter, 30, 0)}\n\n```\nrun()\n```\n"
    alone = list(chunked(small, NO_BIND.model_copy(update={"min_tokens": 5})).chunks)
    assert types(tuple(alone)) == ["paragraph", "code"]
    assert "joinable:small_blocks" in _rules(alone, small, NO_BIND)
    # Prose chunks under min_tokens that packing would join, and a reason that does not
    # hold (no table or code block in the chunk).
    prose = f"{paragraph(counter, 25, 0)}\n\n{paragraph(counter, 25, 2)}\n"
    tiny = NO_BIND.model_copy(update={"min_tokens": 5, "target_tokens": 10, "max_tokens": 30})
    apart = list(chunked(prose, tiny).chunks)
    assert types(tuple(apart)) == ["paragraph", "paragraph"]
    assert "joinable:packing" in _rules(apart, prose, NO_BIND)
    reasoned = [dataclasses.replace(c, undersize_reason="no_merge_fits") for c in apart]
    assert "min_tokens" in _rules(reasoned, prose, NO_BIND)
    # Bound context that pushes a block within max_tokens past it.
    bound = next(c for c in chunks_of_code(counter) if c.bound_context == "before")
    default = ChunkingSettings()  # type: ignore[call-arg]
    narrow_max = default.model_copy(update={"max_tokens": bound.token_count - 1})
    assert "bound_context" in _rules([bound], bound.md_text + "\n", narrow_max)
    # A table group's count and its limit.
    table = "| a | b |\n|---|---|\n" + "\n".join(f"| {i} | value {i} |" for i in range(6))
    grouped = NO_BIND.model_copy(update={"group_related_tables": True, "max_tokens": 150})
    pair = f"{table}\n\n{table}\n"
    chunks = list(chunked(pair, grouped).chunks)
    assert [c.table_group_count for c in chunks] == [2]
    assert "table_group" in _rules(
        [dataclasses.replace(chunks[0], table_group_count=None)], pair, grouped
    )
    narrow = grouped.model_copy(update={"max_tokens": chunks[0].token_count - 1})
    assert "table_group" in _rules(chunks, pair, narrow)


def chunks_of_code(counter: TokenCounter) -> tuple[Chunk, ...]:
    """A code block within max_tokens with its lead-in bound before it."""
    return chunked(f"Example:\n\n{_code(11)}\n", ChunkingSettings()).chunks  # type: ignore[call-arg]
