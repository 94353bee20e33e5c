"""DOCX normalizer: exact Markdown for the structures that matter, bad input, and word
recall on the Docling corpus."""

from __future__ import annotations

import io
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest

from config.errors import ErrorCode, IngestError
from config.settings import LimitsSettings
from normalizers.base import normalize_bytes
from normalizers.model import NormalizedDocument
from testkit.corpus import DOCLING
from tests import fixtures_docx
from tests.word_recall import word_recall

CORPUS = DOCLING / "docx"

# Measured word recall against Docling's Markdown, floored just below. The gaps are
# conventions, not lost text: checkboxes as glyphs (Docling: "[x]"), x² for x^2, TeX
# spelled differently, Docling's escaped underscores splitting words.
RECALL_FLOOR = {
    "docx_checkboxes.docx": 0.90,
    "docx_code_blocks.docx": 0.99,
    "docx_lists.docx": 0.99,
    "docx_page_header_footer_first_page.docx": 0.99,
    "docx_rich_cells.docx": 0.97,
    "docx_rich_tables_01.docx": 0.99,
    "equations.docx": 0.95,
    "lorem_ipsum.docx": 0.99,
    "tablecell.docx": 0.99,
    "textbox.docx": 0.99,
    "unit_test_formatting.docx": 0.99,
    "unit_test_headers.docx": 0.99,
    "unit_test_headers_numbered.docx": 0.99,
    "word_sample.docx": 0.99,
    "word_tables.docx": 0.99,
}


def normalize(data: bytes, name: str = "fixture.docx", **limits: float) -> NormalizedDocument:
    return normalize_bytes(data, name, limits=LimitsSettings(**limits))  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def structure() -> NormalizedDocument:
    return normalize(fixtures_docx.structure_docx())


def test_title_headings_and_nested_lists(structure: NormalizedDocument) -> None:
    assert structure.markdown.startswith(
        "# Structure fixture\n\n# Chapter one\n\nIntro paragraph.\n\n## Section one\n\n"
        "- Apple\n  - Red\n    - Crimson\n  - Green\n- Pear\n\n"
        "### Subsection\n\n1. First step\n    1. Sub step\n2. Second step\n\n"
    )


def test_table_of_contents_is_dropped(structure: NormalizedDocument) -> None:
    assert "Contents" not in structure.markdown
    assert "Chapter one 1" not in structure.markdown
    assert "Code 2" not in structure.markdown


def test_code_style_and_monospaced_code_become_fenced_blocks(
    structure: NormalizedDocument,
) -> None:
    md = structure.markdown
    assert "# Code\n\n```\ndef greet(name):\n    return f'hi {name}'\n```\n" in md
    assert "```\nSELECT id, name\n  FROM users WHERE active = 1;\n```\n" in md
    # Typewriter-styled prose without any code marks stays a paragraph.
    assert "\nTypewriter prose without code marks.\n" in md
    assert "```\nTypewriter" not in md


def test_image_becomes_its_alt_text(structure: NormalizedDocument) -> None:
    assert "# Figure\n\nA grey square\n\nAfter the figure.\n" in structure.markdown
    for leftover in ("![", "<img", "media/", "base64", "data:image"):
        assert leftover not in structure.markdown


def test_core_properties(structure: NormalizedDocument) -> None:
    assert structure.title == "Structure fixture"
    assert structure.author == "Ada Lovelace"
    assert structure.created_at is not None and structure.created_at.startswith("20")
    assert "T" in structure.created_at  # ISO 8601 date and time
    assert structure.metadata["format"] == "docx"


def test_localized_heading_styles_by_outline_level() -> None:
    doc = normalize(fixtures_docx.russian_headings_docx(), "отчёт.docx")
    assert doc.markdown == (
        "# Введение\n\nТекст введения.\n\n## Цели\n\nТекст целей.\n\n"
        "## Унаследованный\n\nТекст раздела.\n\n### Прямой уровень\n\nКонец.\n"
    )
    assert doc.title == "Введение"  # no core title: the first H1


def test_word_number_labels_markdown_cannot_draw_are_written_out() -> None:
    doc = normalize(fixtures_docx.numbered_docx())
    assert doc.markdown == (
        "# 1. Scope\n\nIntro.\n\n## 1.1. Terms\n\n## 1.2. Goals\n\n"
        "- a\\) Alpha\n  - i\\. Detail\n- b\\) Beta\n\n"
        # Two Word lists in a row stay two lists, each numbered from 1.
        "# 2. Design\n\n1. One\n2. Two\n\n1) Again\n"
    )


def test_merged_cells_fill_every_column_of_a_pipe_table() -> None:
    doc = normalize(fixtures_docx.merged_table_docx())
    assert doc.markdown == fixtures_docx.MERGED_TABLE_MARKDOWN


def test_footnote_tracked_changes_comment_and_text_box() -> None:
    doc = normalize(fixtures_docx.revisions_docx())
    assert doc.markdown == (
        "Footnoted claim[^1].\n\n"
        "The budget is twenty euros.\n\n"
        "Commented sentence.\n\n"
        "Boxed:\n\nInside the text box\n\n"
        "[^1]: The source of the claim.\n"
    )
    assert "Reviewer remark" not in doc.markdown


def test_nested_table_keeps_every_word_inside_the_outer_cell() -> None:
    doc = normalize(fixtures_docx.nested_table_docx())
    # The inner table flattened into its cell: "; " between cells, " / " between rows,
    # the cell spanning both rows repeated in each.
    assert doc.markdown == (
        "| AAA | BBB CCC; DDD / EEE; DDD |\n|-----|-------------------------|\n\nAfter.\n"
    )
    assert doc.warnings == ()


def test_a_table_without_a_header_row_gets_an_empty_one() -> None:
    doc = normalize(fixtures_docx.header_less_tables_docx())
    assert doc.markdown == (
        "|       |       |\n|-------|-------|\n| off00 | off01 |\n| off10 | off11 |\n\n"
        "|        |        |\n|--------|--------|\n| bits00 | bits01 |\n| bits10 | bits11 |\n\n"
        "| on00 | on01 |\n|------|------|\n| on10 | on11 |\n\n"
        # No look at all: nothing says the first row is no header, so it stays one.
        "| none00 | none01 |\n|--------|--------|\n| none10 | none11 |\n"
    )


def test_text_in_wrappers_pandoc_drops_is_kept() -> None:
    doc = normalize(fixtures_docx.wrapped_content_docx())
    assert doc.markdown == (
        "Start.\n\nCustom block text.\n\n"
        "Before custom inline and שלום on page 7.\n\n"
        "| Name         | Value |\n"
        "|--------------|-------|\n"
        "| wrapped row  | 11    |\n"
        "| wrapped cell | 12    |\n"
    )
    assert doc.warnings == ()  # pandoc read it all: no fallback, no loss


def test_words_pandoc_drops_send_the_body_to_python_docx() -> None:
    doc = normalize(fixtures_docx.ruby_docx(), "ruby.docx")
    assert doc.markdown == "漢字(かんじ)と仮名(かな)東京(とうきょう)\n"
    assert len(doc.warnings) == 1
    assert doc.warnings[0].startswith("read with python-docx's walk: pandoc's Markdown lacked")


def test_a_part_pandoc_cannot_decode_is_read_by_python_docx() -> None:
    """XML may be UTF-16 (any XML parser reads it); pandoc reads only UTF-8."""
    source = zipfile.ZipFile(io.BytesIO(fixtures_docx.revisions_docx()))
    out = io.BytesIO()
    with source, zipfile.ZipFile(out, "w") as target:
        for name in source.namelist():
            blob = source.read(name)
            if name == "word/footnotes.xml":
                body = blob.decode("utf-8").split("?>", 1)[-1]
                blob = ('<?xml version="1.0" encoding="UTF-16"?>' + body).encode("utf-16")
            target.writestr(name, blob)
    doc = normalize(out.getvalue(), "utf16.docx")
    assert doc.markdown == (
        "Footnoted claim[^1].\n\nThe budget is twenty euros.\n\nCommented sentence.\n\n"
        "Boxed:\n\nInside the text box\n\n[^1]: The source of the claim.\n"
    )
    assert doc.warnings[0].startswith("read with python-docx's walk because pandoc: pandoc")
    assert doc.metadata["reader"] == "python-docx's walk"


def test_a_package_no_reader_opens_is_corrupt_naming_every_reader() -> None:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        archive.writestr("word/document.xml", '<?xml version="1.0"?><notword/>')
    error = assert_fails(ErrorCode.CORRUPT, out.getvalue(), "odd.docx")
    for reader in ("pandoc:", "python-docx's walk:", "a LibreOffice round trip and pandoc:"):
        assert reader in error.message


@pytest.mark.parametrize("path", sorted(CORPUS.glob("*.docx")), ids=lambda p: p.name)
def test_corpus_word_recall(path: Path) -> None:
    started = time.perf_counter()
    doc = normalize(path.read_bytes(), path.name)
    elapsed = time.perf_counter() - started
    reference = path.with_name(path.name + ".md").read_text(encoding="utf-8")
    recall = word_recall(reference, doc.markdown)
    assert recall >= RECALL_FLOOR[path.name], f"{path.name}: recall {recall:.3f}"
    assert doc.warnings == ()  # pandoc kept every word of the paragraphs: no fallback
    for raw in ("<table", "<td", "<img", "<!--", "media/"):
        assert raw not in doc.markdown, f"{path.name}: raw {raw!r} in the output"
    assert elapsed < 10, f"{path.name}: {elapsed:.1f} s"


def test_corpus_tables_are_pipe_tables() -> None:
    doc = normalize((CORPUS / "word_tables.docx").read_bytes(), "word_tables.docx")
    lines = doc.markdown.splitlines()
    header = lines.index("| Header 0.0 | Header 0.1          | Header 0.2          |")
    assert lines[header + 2] == "| Cell 1.0   | Merged Cell 1.1 1.2 | Merged Cell 1.1 1.2 |"
    for line in lines:
        if line.startswith("|"):
            assert line.endswith("|")


# --- bad input ---------------------------------------------------------------------


def assert_fails(code: ErrorCode, data: bytes, name: str, **limits: float) -> IngestError:
    with pytest.raises(IngestError) as caught:
        normalize(data, name, **limits)
    assert caught.value.code == code, caught.value
    assert name in str(caught.value)
    return caught.value


def test_truncated_docx_is_corrupt() -> None:
    data = fixtures_docx.merged_table_docx()
    assert_fails(ErrorCode.CORRUPT, data[: len(data) // 2], "truncated.docx")


def test_broken_document_xml_is_corrupt() -> None:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("word/document.xml", "<w:document><w:body>")
    error = assert_fails(ErrorCode.CORRUPT, out.getvalue(), "broken.docx")
    assert "document.xml" in error.message


def test_zip_bomb_is_too_large_quickly() -> None:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        archive.writestr("word/document.xml", b"<w:document/>")
        archive.writestr("word/media/filler.bin", bytes(64 * 1024 * 1024))
    bomb = out.getvalue()
    assert len(bomb) < 200_000
    started = time.perf_counter()
    error = assert_fails(
        ErrorCode.TOO_LARGE, bomb, "bomb.docx", max_decompressed_bytes=16 * 1024 * 1024
    )
    assert time.perf_counter() - started < 2
    assert "max_decompressed_bytes" in error.message


def test_slow_conversion_hits_the_timeout() -> None:
    error = assert_fails(
        ErrorCode.TOO_LARGE,
        fixtures_docx.structure_docx(),
        "slow.docx",
        conversion_timeout_s=0.001,
    )
    assert "conversion_timeout_s" in error.message


def test_content_decides_the_format() -> None:
    as_pdf = normalize(fixtures_docx.merged_table_docx(), "renamed.pdf")
    assert as_pdf.metadata["format"] == "docx"
    assert "| H0    | H1" in as_pdf.markdown

    import pymupdf

    pdf: Any = pymupdf.open()  # type: ignore[no-untyped-call]
    pdf.new_page().insert_text((72, 72), "Actually a PDF")
    as_docx = normalize(pdf.tobytes(), "renamed.docx")
    assert as_docx.metadata["format"] == "pdf"
    assert "Actually a PDF" in as_docx.markdown


def test_macro_enabled_docm_is_read() -> None:
    source = zipfile.ZipFile(io.BytesIO(fixtures_docx.merged_table_docx()))
    out = io.BytesIO()
    with source, zipfile.ZipFile(out, "w") as docm:
        for info in source.infolist():
            blob = source.read(info)
            if info.filename == "[Content_Types].xml":
                main = b"application/vnd.openxmlformats-officedocument.wordprocessingml"
                assert main + b".document.main+xml" in blob
                blob = blob.replace(
                    main + b".document.main+xml",
                    b"application/vnd.ms-word.document.macroEnabled.main+xml",
                )
            docm.writestr(info, blob)
    doc = normalize(out.getvalue(), "macros.docm")
    assert "| r1c0  | wide  | wide          | tall |" in doc.markdown
    assert doc.author == "python-docx"  # core properties read whatever the main part type


def test_empty_file_is_corrupt() -> None:
    assert_fails(ErrorCode.CORRUPT, b"", "empty.docx")
