"""The chunker against docs/chunking.md#rules: seven mandatory cases, then edge cases.

Every case is validated (docs/chunking.md#validation) and chunked twice to prove byte-identical
output.
"""

from __future__ import annotations

import hashlib
import itertools
from pathlib import Path

import pytest

from chunking import Chunk, DocumentInfo, chunk_markdown
from chunking.tokens import TokenCounter
from config.errors import ErrorCode, IngestError
from config.settings import ChunkingSettings, load_settings
from markdown_text import Anchor, normalize_markdown
from tasks.stages import chunk_normalized, local_file_source, normalize_source
from tests.chunk_helpers import chunked, paragraph, types


def test_case1_headings_and_paragraphs(
    counter: TokenCounter, chunking_settings: ChunkingSettings
) -> None:
    def p(tokens: int, seed: int) -> str:
        return paragraph(counter, tokens, seed)

    text = (
        f"# Guide\n\n{p(60, 0)}\n\n"
        f"## Install\n\n{p(130, 1)}\n\n{p(130, 2)}\n\n{p(130, 3)}\n\n"
        f"### Linux\n\n{p(200, 4)}\n\n{p(200, 5)}\n"
    )
    chunks = chunked(text, chunking_settings).chunks
    # The H1 section's lone 60-token paragraph is a small section: it merges forward with
    # the first chunk of Install (its child), whose heading line stays in md_text
    # (docs/chunking.md#sections). Install's other paragraphs make one chunk; Linux: 200+200 passes
    # max -> 2 chunks.
    assert len(chunks) == 4
    assert types(chunks) == ["paragraph"] * 4
    assert [c.chunk_path for c in chunks] == [
        "/Guide",
        "/Guide/Install",
        "/Guide/Install/Linux",
        "/Guide/Install/Linux",
    ]
    assert chunks[0].md_text.startswith(p(60, 0) + "\n\n## Install\n\n")
    assert chunks[2].headings_path == ("Guide", "Install", "Linux")
    assert all(150 <= c.token_count <= 300 for c in chunks)
    assert [c.undersize_reason for c in chunks] == [None] * 4
    # Headings live in the path; only the merged one is a line of md_text.
    assert "".join(c.md_text for c in chunks).count("#") == 2
    assert chunks[3].overlap_prefix  # within Linux
    # Never across sections: Guide's merged chunk and Install's are different sections.
    assert chunks[1].overlap_prefix == "" and chunks[2].overlap_prefix == ""
    assert len({c.section_id for c in chunks}) == 3


def test_case2_nested_lists_split_between_top_level_items(
    counter: TokenCounter, chunking_settings: ChunkingSettings
) -> None:
    items = []
    for i in range(8):
        items.append(
            f"- Item {i}: {paragraph(counter, 40, i)}\n"
            f"  - Detail {i}a: {paragraph(counter, 20, i + 1)}\n"
            f"  - Detail {i}b: {paragraph(counter, 20, i + 2)}"
        )
    text = "## Lists\n\n" + "\n".join(items) + "\n"
    assert counter.count(text) > chunking_settings.max_tokens
    chunks = chunked(text, chunking_settings).chunks
    # Oracle: whole items packed until the target is reached, never past max.
    expected, used = 1, 0
    for n in counter.count_many(items):
        if used and (
            used >= chunking_settings.target_tokens or used + n + 1 > chunking_settings.max_tokens
        ):
            expected, used = expected + 1, 0
        used += n + (1 if used else 0)
    assert len(chunks) == expected >= 2
    assert set(types(chunks)) == {"list"}
    for chunk in chunks:
        lines = chunk.md_text.split("\n")
        assert lines[0].startswith("- Item ")
        for line in lines:  # nested details stay with their parent item
            if line.startswith("  - Detail"):
                number = line.split()[2][:-2]
                assert f"- Item {number}:" in chunk.md_text
    joined = [line for c in chunks for line in c.md_text.split("\n")]
    assert joined == text.split("\n")[2:-1]


def test_case3_table_over_200_rows_repeats_header(
    counter: TokenCounter, chunking_settings: ChunkingSettings
) -> None:
    header = "| id | name | status |\n|----|------|--------|"
    rows = [f"| {i:03d} | service-{i:03d} | ok |" for i in range(240)]
    text = "# Inventory\n\n" + header + "\n" + "\n".join(rows) + "\n"
    chunks = chunked(text, chunking_settings).chunks
    # Oracle: as many pieces as the target needs for the header and rows, evened out so
    # that every piece, the last included, stays within min..max.
    total = counter.count(header) + sum(n + 1 for n in counter.count_many(rows))
    assert len(chunks) == -(-total // chunking_settings.target_tokens) >= 240 * 8 // 300
    assert all(
        chunking_settings.min_tokens <= c.token_count <= chunking_settings.max_tokens
        for c in chunks
    )
    assert set(types(chunks)) == {"table"}
    body: list[str] = []
    for chunk in chunks:
        lines = chunk.md_text.split("\n")
        assert "\n".join(lines[:2]) == header
        assert chunk.token_count <= chunking_settings.max_tokens
        assert chunk.overlap_prefix == ""
        body.extend(lines[2:])
    assert body == rows


def test_case4_no_headings(counter: TokenCounter, chunking_settings: ChunkingSettings) -> None:
    text = "\n\n".join(paragraph(counter, 140, i) for i in range(5)) + "\n"
    chunks = chunked(text, chunking_settings).chunks
    # 140+140 passes target and stays under max: pairs, then the fifth alone joins none.
    assert len(chunks) == 3
    assert all(c.headings_path == () and c.chunk_path == "/" for c in chunks)
    assert types(chunks) == ["paragraph"] * 3


def test_a_paragraph_above_a_line_of_equals_or_dashes_is_no_heading(
    counter: TokenCounter, chunking_settings: ChunkingSettings
) -> None:
    """Plain text in which a line of `=` or `-` follows a paragraph (a figure caption, a
    rule drawn with dashes): CommonMark reads the paragraph as a Setext heading, which
    would head every chunk after it."""
    lines = paragraph(counter, 60).replace(". ", ".\n")
    long_line = paragraph(counter, 80, 1).replace("\n", " ")
    text = (
        f"Overview\n========\n\n{lines}\n =\n\n{paragraph(counter, 140, 2)}\n\n"
        f"{long_line}\n---\n\n{paragraph(counter, 140, 3)}\n"
    )
    chunks = chunked(text, chunking_settings).chunks
    assert {c.headings_path for c in chunks} == {("Overview",)}
    assert all("Overview" not in c.md_text for c in chunks)
    joined = "\n".join(c.md_text for c in chunks)
    assert lines.splitlines()[1] in joined and long_line in joined


def test_case5_code_blocks(counter: TokenCounter, chunking_settings: ChunkingSettings) -> None:
    def code(lines: int) -> str:
        return "\n".join(f"    result_{i} = compute(value_{i}, factor={i})" for i in range(lines))

    small, medium, large = code(5), code(25), code(120)
    assert counter.count(medium) > 300 and counter.count(medium) <= 600
    assert counter.count(large) > 600
    text = (
        f"## Small\n\n```python\n{small}\n```\n\n"
        f"## Medium\n\n```python\n{medium}\n```\n\n"
        f"## Large\n\n~~~~python title=big.py\n{large}\n~~~~\n"
    )
    chunks = chunked(text, chunking_settings).chunks
    assert set(types(chunks)) == {"code"}
    assert chunks[0].md_text == f"```python\n{small}\n```" and not chunks[0].oversize
    assert chunks[1].md_text == f"```python\n{medium}\n```" and chunks[1].oversize
    pieces = chunks[2:]
    assert len(pieces) >= 3
    bodies = []
    for piece in pieces:
        lines = piece.md_text.split("\n")
        assert lines[0] == "~~~~python title=big.py" and lines[-1] == "~~~~"
        assert piece.token_count <= chunking_settings.max_tokens
        bodies.extend(lines[1:-1])
    assert "\n".join(bodies) == large


def test_case6_confluence_like_page(
    counter: TokenCounter, chunking_settings: ChunkingSettings
) -> None:
    text = (
        "# Release process\n\n"
        f"See [the runbook](https://wiki.example.com/display/OPS/Runbook) first. {paragraph(counter, 80, 1)}\n\n"
        "> **Warning:** never release on Fridays.\n\n"
        "## Steps\n\n"
        "1. Freeze the branch.\n2. Tag it, see [tags](/wiki/spaces/ENG/pages/42/Tags).\n3. Announce.\n\n"
        f"{paragraph(counter, 120, 2)}\n\n"
        "## Contacts\n\n"
        "Ask <https://chat.example.com/ops> or the [on-call page](/pages/viewpage.action?pageId=77).\n"
    )
    chunks = chunked(text, chunking_settings, metadata={"space_key": "OPS", "page_id": "9"}).chunks
    # The small first section merges with Steps (its child); Contacts would pass
    # max_tokens joined to that chunk, so it stays alone at the end of its section.
    assert types(chunks) == ["mixed", "paragraph"]
    assert "\n\n## Steps\n\n1. Freeze the branch." in chunks[0].md_text
    assert chunks[0].links == (
        "https://wiki.example.com/display/OPS/Runbook",
        "/wiki/spaces/ENG/pages/42/Tags",
    )
    assert chunks[1].links == ("https://chat.example.com/ops", "/pages/viewpage.action?pageId=77")
    # the document's payload fields join every chunk's record
    assert all(
        (c.to_record()["space_key"], c.to_record()["page_id"]) == ("OPS", "9") for c in chunks
    )
    assert [c.undersize_reason for c in chunks] == [None, "section_end"]


def test_case7_pdf_like_document_with_pages(
    counter: TokenCounter, chunking_settings: ChunkingSettings
) -> None:
    page1 = f"# Annual report\n\n{paragraph(counter, 200, 0)}\n\n- revenue up\n- costs down\n"
    table = "| quarter | revenue |\n|---|---|\n" + "\n".join(
        f"| Q{i} | {i * 10} |" for i in range(1, 5)
    )
    page2 = f"## Figures\n\n{table}\n\n{paragraph(counter, 170, 3)}\n"
    page3 = f"{paragraph(counter, 60, 5)}\n\n1. first\n2. second\n"
    raw = page1 + "\n" + page2 + "\n" + page3
    anchors = [
        Anchor(0, "page", 1),
        Anchor(len(page1) + 1, "page", 2),
        Anchor(len(page1) + len(page2) + 2, "page", 3),
    ]
    document = chunk_markdown(
        raw, DocumentInfo(document_id="r.pdf"), chunking_settings, anchors=anchors
    )
    # The small table (under min_tokens) shares a chunk with the prose after it in its
    # section (small blocks), and the paragraph closing page 2 with the start of page 3.
    assert types(tuple(document)) == ["mixed", "mixed"]
    assert [(c.page_start, c.page_end) for c in document] == [(1, 1), (2, 3)]
    assert document[1].md_text.startswith(table) and document[1].undersize_reason is None


def test_chunk_id_follows_the_formula(chunking_settings: ChunkingSettings) -> None:
    chunk = chunk_markdown(
        "Some   text\nwith  spaces.\n",
        DocumentInfo(document_id="d", tenant_id="t", source_version_id="v7"),
        chunking_settings,
    )[0]
    canonical = "Some text with spaces."
    expected = hashlib.sha256(f"t|d|v7|0|{canonical}".encode()).hexdigest()
    assert chunk.chunk_id == expected
    assert (
        chunk.point_id
        == f"{expected[:8]}-{expected[8:12]}-{expected[12:16]}-{expected[16:20]}-{expected[20:32]}"
    )


def test_ids_change_with_version_and_tenant(chunking_settings: ChunkingSettings) -> None:
    ids = {
        chunk_markdown(
            "Text.",
            DocumentInfo(document_id="d", tenant_id=t, source_version_id=v),
            chunking_settings,
        )[0].chunk_id
        for t in ("a", "b")
        for v in ("1", "2")
    }
    assert len(ids) == 4


def test_overlap_is_a_bounded_suffix_of_the_previous_chunk(
    counter: TokenCounter, chunking_settings: ChunkingSettings
) -> None:
    text = "\n\n".join(paragraph(counter, 130, i) for i in range(8)) + "\n"
    chunks = chunked(text, chunking_settings, title="Doc").chunks
    assert len(chunks) >= 3
    for previous, chunk in itertools.pairwise(chunks):
        prefix = chunk.overlap_prefix
        assert prefix and previous.md_text.endswith(prefix)
        assert counter.count(prefix) <= min(50, int(0.35 * previous.token_count))
        assert prefix[0].isupper()  # cut at a sentence start
        assert chunk.embed_text == f"Doc\n\n{prefix}\n\n{chunk.md_text}"


def test_empty_and_heading_only_documents(chunking_settings: ChunkingSettings) -> None:
    assert chunked("", chunking_settings).chunks == ()
    assert chunked("\n \n\t\n", chunking_settings).chunks == ()
    # Headings with no content anywhere still reach the index, as lines of one chunk.
    only = chunked("# One\n\n## Two\n\n### Three\n", chunking_settings).chunks
    assert [c.md_text for c in only] == ["# One\n\n## Two\n\n### Three"]
    assert only[0].headings_path == () and only[0].undersize_reason == "heading_only"


def test_ten_thousand_token_paragraph_without_sentence_breaks(
    counter: TokenCounter, chunking_settings: ChunkingSettings
) -> None:
    words = " ".join(f"word{i} значение{i}" for i in range(1900))
    assert counter.count(words) > 10_000
    document = chunked(words + "\n", chunking_settings)
    chunks = document.chunks
    assert all(c.token_count <= 300 for c in chunks)
    assert len(chunks) >= 10_000 // 300
    assert " ".join(c.md_text for c in chunks) == words


def test_single_table_row_over_the_limit(
    counter: TokenCounter, chunking_settings: ChunkingSettings
) -> None:
    header = "| key | description |\n|---|---|"
    small_rows = [f"| k{i} | short |" for i in range(3)]
    big = "| big | " + paragraph(counter, 380, 0) + " |"
    huge = "| huge | " + " ".join(paragraph(counter, 300, i) for i in range(4)) + " |"
    text = "\n".join([header, *small_rows, big, huge, *small_rows]) + "\n"
    chunks = chunked(text, chunking_settings).chunks
    oversize = [c for c in chunks if c.oversize]
    assert len(oversize) == 1 and big in oversize[0].md_text
    assert (
        chunking_settings.max_tokens
        < oversize[0].token_count
        <= chunking_settings.oversize_block_limit
    )
    # The huge row is over the oversize limit: it is cut between cells, its long cell
    # between words, each fragment a one-row piece that records the header beside it.
    huge_pieces = [c for c in chunks if c.table_header is not None]
    assert len(huge_pieces) >= 4
    assert huge_pieces[0].md_text == "| huge |"
    assert all(c.table_header == header and "\n" not in c.md_text for c in huge_pieces)
    assert "".join(c.md_text[2:-2] + " " for c in huge_pieces[1:]).strip() in huge
    for chunk in chunks:
        if chunk.table_header is None:
            assert chunk.md_text.startswith(header + "\n")
        if not chunk.oversize:
            assert chunk.token_count <= chunking_settings.max_tokens


def test_nested_fences_stay_one_code_block(chunking_settings: ChunkingSettings) -> None:
    text = "Intro.\n\n~~~~markdown\n```python\nprint('inner')\n```\n~~~~\n\nAfter.\n"
    chunks = chunked(text, chunking_settings).chunks
    code = [c for c in chunks if c.chunk_type == "code"]
    assert len(code) == 1
    # The short lead-in and follow-up bind to the code block (bound context).
    assert (
        code[0].md_text == "Intro.\n\n~~~~markdown\n```python\nprint('inner')\n```\n~~~~\n\nAfter."
    )
    assert code[0].bound_context == "both"


def test_crlf_input_chunks_like_lf(
    counter: TokenCounter, chunking_settings: ChunkingSettings
) -> None:
    lf = f"# T\n\n{paragraph(counter, 200, 0)}\n\n- a\n- b\n"
    a = chunked(lf, chunking_settings).chunks
    b = chunked(lf.replace("\n", "\r\n"), chunking_settings).chunks
    assert [c.to_record() for c in a] == [c.to_record() for c in b]


def test_invalid_utf8_fails_with_chunking_failed(chunking_settings: ChunkingSettings) -> None:
    with pytest.raises(IngestError) as error:
        chunk_markdown(
            b"# Title\n\nbroken \xff\xfe bytes",
            DocumentInfo(document_id="bad.md"),
            chunking_settings,
        )
    assert error.value.code is ErrorCode.CHUNKING_FAILED
    assert error.value.subject == "bad.md"


def test_front_matter_moves_to_metadata(chunking_settings: ChunkingSettings) -> None:
    text = "---\ntitle: From front matter\nlabels: [a, b]\n---\n\nBody text here.\n"
    document = chunked(text, chunking_settings)
    assert [c.md_text for c in document.chunks] == ["Body text here."]
    assert document.chunks[0].document["title"] == "From front matter"


def test_a_dashed_block_opening_a_text_file_is_kept(tmp_path: Path) -> None:
    """Front matter is a Markdown input's: the text normalizer keeps such a block, and the
    chunker takes a normalizer's output as it is (it once stripped the block again)."""
    path = tmp_path / "notes.txt"
    path.write_text("---\nowner: ops\n---\n\nThe body follows the block.\n", encoding="utf-8")
    settings = load_settings()
    source = local_file_source(path)
    normalized = normalize_source(source, settings.limits)
    document = chunk_normalized(source, normalized, settings.chunking, settings.tenant_id)
    kept = [" ".join([*c.headings_path, c.md_text]) for c in document.chunks]
    assert any("owner: ops" in text for text in kept), kept
    assert document.text == normalized.markdown


def test_horizontal_rule_is_a_boundary_and_not_chunk_text(
    counter: TokenCounter, chunking_settings: ChunkingSettings
) -> None:
    text = f"{paragraph(counter, 60, 0)}\n\n---\n\n{paragraph(counter, 60, 1)}\n"
    chunks = chunked(text, chunking_settings).chunks
    assert len(chunks) == 2
    assert all("---" not in c.md_text for c in chunks)
    assert chunks[1].overlap_prefix == ""


def test_whitespace_collapses_outside_code_and_tables() -> None:
    raw = "a   b\t c\n\n\n\n| x  |  y |\n|---|---|\n| 1  |  2 |\n\n```\nkeep   this\n```\n"
    assert normalize_markdown(raw).text == (
        "a b c\n\n| x  |  y |\n|---|---|\n| 1  |  2 |\n\n```\nkeep   this\n```\n"
    )


def test_budgets_from_another_profile(counter: TokenCounter) -> None:
    settings = ChunkingSettings(
        min_tokens=120,
        target_tokens=650,
        max_tokens=900,
        overlap_tokens=80,
        oversize_block_limit=1800,
    )  # type: ignore[call-arg]
    text = "\n\n".join(paragraph(counter, 200, i) for i in range(6)) + "\n"
    chunks = chunked(text, settings).chunks
    assert len(chunks) == 2
    assert all(c.token_count <= 900 for c in chunks)


def test_hierarchy_fields_link_neighbours_and_name_sections(
    counter: TokenCounter, chunking_settings: ChunkingSettings
) -> None:
    text = (
        f"# Guide\n\n{paragraph(counter, 200, 0)}\n\n"
        f"## Install\n\n{paragraph(counter, 200, 1)}\n\n{paragraph(counter, 200, 2)}\n"
    )
    info = {"tenant_id": "t", "source_version_id": "v1"}
    chunks = chunked(text, chunking_settings, **info).chunks
    assert [c.chunk_path for c in chunks] == ["/Guide", "/Guide/Install", "/Guide/Install"]
    assert [c.prev_chunk_id for c in chunks] == [None, chunks[0].chunk_id, chunks[1].chunk_id]
    assert [c.next_chunk_id for c in chunks] == [chunks[1].chunk_id, chunks[2].chunk_id, None]
    # The section ordinal is the heading's: Guide is the first heading, Install the second.
    expected = [
        hashlib.sha256(f"t|doc-1|v1|{path}|{ordinal}".encode()).hexdigest()
        for path, ordinal in (("/Guide", 1), ("/Guide/Install", 2), ("/Guide/Install", 2))
    ]
    assert [c.section_id for c in chunks] == expected
    record = chunks[1].to_record()
    for key in (
        "section_id",
        "prev_chunk_id",
        "next_chunk_id",
        "bound_context",
        "code_role",
        "table_group_count",
        "table_header",
    ):
        assert key in record
    assert Chunk.from_record(record) == chunks[1]


def test_sentences_go_on_past_semicolons_citations_and_reference_abbreviations() -> None:
    """razdel ends English sentences at a semicolon and after "et al.", "Fig.", "e.g.":
    a paragraph split there would cut a sentence in two."""
    from chunking.sentences import sentence_spans

    text = (
        "Clock neurons project widely (Helfrich-Förster et al. 1992; Renn et al. 1999). "
        "Fig. 2 shows the pattern, e.g. Smith (2000) saw it too. "
        "The answer was approx. 5 cells; see p. 12 and cf. Jones. "
        "It was studied by Smith et al. The results hold. "
        "См. рис. 3 ниже. Новое предложение."
    )
    sentences = [text[a:b].strip() for a, b in sentence_spans(text)]
    assert sentences == [
        "Clock neurons project widely (Helfrich-Förster et al. 1992; Renn et al. 1999).",
        "Fig. 2 shows the pattern, e.g. Smith (2000) saw it too.",
        "The answer was approx. 5 cells; see p. 12 and cf. Jones.",
        "It was studied by Smith et al.",
        "The results hold.",
        "См. рис. 3 ниже.",
        "Новое предложение.",
    ]
