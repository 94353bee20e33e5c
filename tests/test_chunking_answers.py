"""Small tables and code, boilerplate, short chunks (docs/chunking.md#short-chunks): a section of
nothing but a small table or code block merges like any small section; converters' navigation
boilerplate is dropped by the normalizer, which says how much; a chunk under 50 tokens counts as
allowed only as a whole document or between two hard source breaks (the chunking bench's
accounting).
"""

from __future__ import annotations

from bench.chunking import quality
from chunking import DocumentInfo, chunk_document
from chunking.tiny import tiny_allowance
from chunking.tokens import TokenCounter
from config.settings import ChunkingSettings
from markdown_text import Anchor
from normalizers.base import normalize_bytes
from normalizers.boilerplate import DROPPED_PARTS, DROPPED_WORDS
from tests import fixtures_pdf
from tests.chunk_helpers import chunked, paragraph

TABLE = "| key | value |\n|---|---|\n" + "\n".join(f"| k{i} | v{i} |" for i in range(5))
CODE = "```python\nprint('hello')\n```"


# --- small table or code sections merge -------------------------------------------------


def test_a_section_of_only_a_small_table_or_code_block_merges_forward(
    counter: TokenCounter, chunking_settings: ChunkingSettings
) -> None:
    text = (
        f"# Guide\n\n## Options\n\n{TABLE}\n\n## Example\n\n{CODE}\n\n"
        f"## Notes\n\n{paragraph(counter, 60, 1)}\n"
    )
    chunks = chunked(text, chunking_settings).chunks
    assert len(chunks) == 1
    merged = chunks[0]
    assert merged.chunk_type == "mixed"
    assert merged.headings_path == ("Guide",)
    headings = [line for line in merged.md_text.split("\n") if line.startswith("## ")]
    assert headings == ["## Options", "## Example", "## Notes"]
    # Both blocks whole, in the one chunk.
    assert TABLE in merged.md_text and CODE in merged.md_text


def test_a_section_of_only_a_small_table_merges_backward_when_nothing_follows(
    counter: TokenCounter, chunking_settings: ChunkingSettings
) -> None:
    text = f"# Guide\n\n## Setup\n\n{paragraph(counter, 170, 2)}\n\n## Defaults\n\n{TABLE}\n"
    chunks = chunked(text, chunking_settings).chunks
    assert len(chunks) == 1
    assert "## Defaults\n\n" + TABLE in chunks[0].md_text
    assert chunks[0].undersize_reason is None


def test_a_table_of_min_tokens_or_more_stays_a_chunk_of_its_own(
    counter: TokenCounter, chunking_settings: ChunkingSettings
) -> None:
    rows = "\n".join(f"| key number {i} | a value long enough to count {i} |" for i in range(14))
    large = "| key | value |\n|---|---|\n" + rows
    assert counter.count(large) >= chunking_settings.min_tokens
    text = (
        f"## B\n\n{paragraph(counter, 40, 1)}\n\n## C\n\n{large}\n\n"
        f"## D\n\n{paragraph(counter, 40, 2)}\n"
    )
    chunks = chunked(text, chunking_settings).chunks
    assert [c.chunk_type for c in chunks] == ["paragraph", "table", "paragraph"]
    assert chunks[1].md_text == large


# --- navigation boilerplate -----------------------------------------------------------

DOCBOOK_PAGE = b"""<html><body>
<div class="navheader"><table width="100%" summary="Navigation header">
<tr><th colspan="3" align="center">Finding packages</th></tr>
<tr><td align="left"><a accesskey="p" href="a.html">Prev</a> </td>
<th align="center">Using aptitude</th>
<td align="right"> <a accesskey="n" href="c.html">Next</a></td></tr></table><hr/></div>
<div class="section"><h2>Finding packages</h2>
<p>Press slash to open a search dialog and type the name of the package.</p>
<div class="toc"><p><b>Table of Contents</b></p><dl class="toc">
<dt><a href="s1.html">Searching by name</a></dt><dt><a href="s2.html">Limits</a></dt></dl></div>
<p>The search finds the next match.</p></div>
<div class="navfooter"><hr/><table width="100%" summary="Navigation footer">
<tr><td><a accesskey="p" href="a.html">Prev</a> </td><td><a accesskey="u" href="u.html">Up</a></td>
<td> <a accesskey="n" href="c.html">Next</a></td></tr>
<tr><td>Navigating the list </td><td><a accesskey="h" href="index.html">Home</a></td>
<td> Managing packages</td></tr></table></div>
</body></html>"""

ASCIIDOC_PAGE = """<html><body><div id="header"><h1>Schematic Editor</h1>
<div id="toc" class="toc2"><div id="toctitle">Содержание</div>
<ul class="sectlevel1"><li><a href="#intro">1. Введение</a></li>
<li><a href="#use">2. Работа</a></li></ul></div></div>
<div id="content"><h2 id="intro">1. Введение</h2><p>Редактор схем рисует схемы.</p>
<h3>Contents</h3><ul><li><a href="#a">First</a></li><li><a href="#b">Second</a></li></ul>
<h2 id="use">2. Работа</h2><ul><li><a href="#a">First</a> and some words of its own</li></ul>
</div>
<div id="footer"><div id="footer-text">Last updated 2023-01-26 05:35:43 UTC</div></div>
</body></html>""".encode()


def test_docbook_navigation_and_table_of_contents_are_dropped_and_counted() -> None:
    doc = normalize_bytes(DOCBOOK_PAGE, "ch01s01.html")
    for gone in ("Prev", "Next", "Up", "Home", "Table of Contents", "Searching by name"):
        assert gone not in doc.markdown
    assert "Press slash to open a search dialog" in doc.markdown
    assert "The search finds the next match." in doc.markdown
    assert doc.markdown.startswith("## Finding packages")
    assert doc.metadata[DROPPED_PARTS] == 3  # header, contents, footer
    assert doc.metadata[DROPPED_WORDS] >= 20
    assert doc.warnings == ()  # what went is not counted as lost


def test_asciidoctor_contents_link_lists_and_footer_are_dropped() -> None:
    doc = normalize_bytes(ASCIIDOC_PAGE, "eeschema.html")
    markdown = doc.markdown
    assert "Содержание" not in markdown and "Last updated" not in markdown
    assert "Contents" not in markdown and "Second" not in markdown
    # A list that says more than its links stays.
    assert "and some words of its own" in markdown
    assert markdown.count("1. Введение") == 1  # the heading, not the contents entry
    assert doc.metadata[DROPPED_PARTS] == 4  # toc, "Contents" and its list, footer


def test_a_page_without_boilerplate_reports_nothing_dropped() -> None:
    doc = normalize_bytes(b"<html><body><p>Just a page.</p></body></html>", "p.html")
    assert DROPPED_PARTS not in doc.metadata and DROPPED_WORDS not in doc.metadata


def test_the_pdf_normalizer_reports_the_running_lines_it_dropped() -> None:
    doc = normalize_bytes(fixtures_pdf.running_headers_pdf(4), "running.pdf")
    # Per page: the confidential header, and the report footer with "Page n of 4" on
    # its line.
    assert doc.metadata[DROPPED_PARTS] == 8
    assert doc.metadata[DROPPED_WORDS] == 40


# --- chunks under 50 tokens -----------------------------------------------------------


def _deck(counter: TokenCounter) -> tuple[str, list[Anchor]]:
    """Three slides, the middle one two words, each anchored at its start; the rules
    between them keep it a chunk of its own."""
    slides = [paragraph(counter, 200, 0), "Thank you", paragraph(counter, 200, 3)]
    text, anchors = "", []
    for number, body in enumerate(slides, 1):
        anchors.append(Anchor(len(text), "slide", number))
        text += f"{body}\n\n---\n\n"
    return text, anchors


def test_a_tiny_chunk_is_allowed_only_whole_or_between_hard_breaks(
    counter: TokenCounter, chunking_settings: ChunkingSettings
) -> None:
    whole = chunk_document("Short note.\n", DocumentInfo(document_id="a"), chunking_settings)
    assert tiny_allowance(whole.chunks, 0) == "whole_document"

    text, anchors = _deck(counter)
    deck = chunk_document(
        text, DocumentInfo(document_id="b"), chunking_settings, anchors=anchors
    ).chunks
    assert [c.slide for c in deck] == [1, 2, 3]
    assert deck[1].token_count < 50
    assert tiny_allowance(deck, 1) == "between_hard_breaks"

    # The same tiny chunk between sections of a Markdown document is not allowed, even
    # with a valid undersize reason.
    markdown = (
        f"# A\n\n{paragraph(counter, 200, 0)}\n\n---\n\nThank you\n\n---\n\n"
        f"# B\n\n{paragraph(counter, 200, 3)}\n"
    )
    plain = chunked(markdown, chunking_settings).chunks
    tiny = [i for i, c in enumerate(plain) if c.token_count < 50]
    assert tiny and plain[tiny[0]].undersize_reason == "section_end"
    assert tiny_allowance(plain, tiny[0]) is None


def test_no_merge_crosses_a_hard_break_of_the_source(
    counter: TokenCounter, chunking_settings: ChunkingSettings
) -> None:
    """A slide, a sheet and a diagram's page (a page anchored `hard`) are hard breaks; a
    PDF's page is not: its text runs on."""
    text = f"## One\n\nThank you\n\n## Two\n\n{paragraph(counter, 60, 1)}\n"
    second = text.index("## Two")

    def chunks(*anchors: Anchor) -> list[tuple[str, ...]]:
        info = DocumentInfo(document_id="d")
        done = chunk_document(text, info, chunking_settings, anchors=anchors)
        return [c.headings_path for c in done.chunks]

    merged = [()]  # the small first section merges into the second
    assert chunks() == merged
    assert chunks(Anchor(0, "page", 1), Anchor(second, "page", 2)) == merged
    for kind in ("slide", "sheet"):
        assert chunks(Anchor(0, kind, 1), Anchor(second, kind, 2)) == [("One",), ("Two",)]
    pages = (Anchor(0, "page", 1, hard=True), Anchor(second, "page", 2, hard=True))
    assert chunks(*pages) == [("One",), ("Two",)]


def test_the_bench_counts_tiny_chunks_allowed_and_not(
    counter: TokenCounter, chunking_settings: ChunkingSettings
) -> None:
    text, anchors = _deck(counter)
    documents = [
        chunk_document("Short note.\n", DocumentInfo(document_id="a"), chunking_settings),
        chunk_document(text, DocumentInfo(document_id="b"), chunking_settings, anchors=anchors),
        chunk_document(
            f"{paragraph(counter, 200, 0)}\n\n---\n\nThank you\n\n---\n\n"
            f"{paragraph(counter, 200, 3)}\n",
            DocumentInfo(document_id="c"),
            chunking_settings,
        ),
    ]
    report = quality(documents, chunking_settings, counter)
    assert report["under_50_allowed"] == {"whole_document": 1, "between_hard_breaks": 1}
    assert report["under_50_not_allowed_by_reason"] == {"section_end": 1}
    assert report["under_50_not_allowed_share"] == round(1 / report["chunks"], 4)
    assert report["violations"] == 0
