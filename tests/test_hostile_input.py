"""Hostile input (docs/sources.md#bad-input): mutated real files, zip bombs, entity bombs and XXE,
deep nesting, a 50 MB single line, and malicious file names. Every outcome is a result or a
typed `IngestError` naming the file, within a time bound; nothing else escapes.

The longer, time-budgeted version of the mutation fuzz is `bench/fuzz.py`."""

from __future__ import annotations

import io
import os
import random
import re
import struct
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.fuzz import CORPUS, SEED_FILES, cases, run_case
from chunking import DocumentInfo, chunk_document
from config.errors import ErrorCode, IngestError
from config.settings import ChunkingSettings, LimitsSettings
from connectors.base import DocumentRef, fetch_many
from connectors.confluence import PAGE_MIME, ConfluenceConnector
from connectors.confluence.settings import ConfluenceSettings
from connectors.files import FilesConnector, FilesSettings
from markdown_text import normalize_markdown
from normalizers.base import normalize_bytes
from normalizers.model import NormalizedDocument
from testkit.confluence_api import FakeConfluence, confluence_api, tiny_pdf

__all__ = ["confluence_api"]  # the fixture factory, used by name below

CASES_PER_FORMAT = 30
BOUND_S = 20.0  # generous per-call bound; typical calls take milliseconds
OOXML_SAMPLES = {
    "docx": "docx/lorem_ipsum.docx",
    "xlsx": "xlsx/xlsx_05_table_with_title.xlsx",
    "pptx": "pptx/powerpoint_sample.pptx",
}
MAIN_PART = {"docx": "word/document.xml", "xlsx": "xl/worksheets/sheet1.xml", "pptx": None}


def outcome(data: bytes, name: str, **kw: Any) -> tuple[NormalizedDocument | IngestError, float]:
    """Normalize; return the document or the typed error, and the seconds it took. Any other
    exception propagates and fails the test."""
    start = time.perf_counter()
    try:
        result: NormalizedDocument | IngestError = normalize_bytes(data, name, **kw)
    except IngestError as exc:
        assert isinstance(exc.code, ErrorCode)
        assert name in str(exc), f"message does not name the file: {exc}"
        result = exc
    return result, time.perf_counter() - start


# --- mutation fuzz over real files ------------------------------------------------------


def test_the_corpus_is_there() -> None:
    for fmt, names in SEED_FILES.items():
        for name in names:
            assert (CORPUS / fmt / name).is_file(), f"{fmt}/{name} missing from {CORPUS}"
    assert CORPUS.is_relative_to(Path(__file__).resolve().parent)  # inside the checkout


@pytest.mark.parametrize("fmt", sorted(SEED_FILES))
def test_mutated_real_files_give_a_document_or_a_typed_error(fmt: str) -> None:
    codes: set[ErrorCode | None] = set()
    generated = cases(fmt, seed=0)
    # Most damaged OOXML cases would also go through a LibreOffice round trip (seconds
    # each): that reader has its own tests; here the libraries' own error paths count.
    limits = LimitsSettings(office_round_trip=False)  # type: ignore[call-arg]
    for i in range(CASES_PER_FORMAT):
        name, mutation, data = next(generated)
        result = run_case(name, data, limits)
        assert result.kind != "crash", f"case {i} ({name}, {mutation}): {result.detail}"
        assert result.seconds < BOUND_S, f"case {i} ({name}, {mutation}) {result.seconds:.1f}s"
        codes.add(result.code)
    # The mutations really do hurt: some cases fail, typed (not everything passes clean).
    assert codes - {None}, f"{fmt}: no mutation produced an error"


def test_the_fuzz_cases_are_deterministic() -> None:
    first, again = cases("docx", seed=3), cases("docx", seed=3)
    a = [next(first) for _ in range(12)]
    assert a == [next(again) for _ in range(12)]  # byte-identical, zip entries included
    assert len({case[2] for case in a}) == 12


def test_an_unsupported_zip_version_is_corrupt_not_a_crash() -> None:
    """Regression: a flipped "version needed" byte made zipfile raise NotImplementedError
    from format detection, outside the normalizer's exception net."""
    data = bytearray((CORPUS / "xlsx" / SEED_FILES["xlsx"][0]).read_bytes())
    cd = data.rfind(b"PK\x01\x02")
    data[cd + 6 : cd + 8] = struct.pack("<H", 84)  # "version needed to extract" 8.4
    result, _ = outcome(bytes(data), "version.xlsx")
    assert isinstance(result, IngestError) and result.code is ErrorCode.CORRUPT


# --- zip bombs ------------------------------------------------------------------------------


def _entries(fmt: str) -> list[tuple[str, bytes]]:
    with zipfile.ZipFile(CORPUS / OOXML_SAMPLES[fmt]) as src:
        return [(i.filename, src.read(i)) for i in src.infolist()]


def _declare_size(data: bytes, entry: str, size: int) -> bytes:
    """The zip with the uncompressed size of `entry` in its central directory (and local
    header) rewritten: a lying header, as in a crafted bomb."""
    out = bytearray(data)
    name = entry.encode()
    pos = 0
    while (pos := out.find(b"PK\x01\x02", pos)) != -1:
        n = struct.unpack_from("<H", out, pos + 28)[0]
        if bytes(out[pos + 46 : pos + 46 + n]) == name:
            struct.pack_into("<I", out, pos + 24, size)
            local = struct.unpack_from("<I", out, pos + 42)[0]
            struct.pack_into("<I", out, local + 22, size)
        pos += 4
    return bytes(out)


@pytest.mark.parametrize("fmt", sorted(OOXML_SAMPLES))
def test_a_zip_declaring_a_huge_decompressed_size_is_too_large(fmt: str) -> None:
    buf = io.BytesIO()
    entries = _entries(fmt)
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as dst:
        for name, body in entries:
            dst.writestr(name, body)
        dst.writestr("customXml/bomb.xml", b"<a/>" * 64)
    bomb = _declare_size(buf.getvalue(), "customXml/bomb.xml", 0xFFFF_FFF0)  # ~4 GB
    result, seconds = outcome(bomb, f"bomb.{fmt}")
    assert isinstance(result, IngestError) and result.code is ErrorCode.TOO_LARGE, result
    assert "max_decompressed_bytes" in str(result)
    assert seconds < 5


@pytest.mark.parametrize("fmt", sorted(OOXML_SAMPLES))
def test_a_high_ratio_deflate_of_zeros_is_too_large(fmt: str) -> None:
    """A real bomb: 48 MiB of spaces deflated to ~50 KB, streamed (never held whole),
    against a 32 MiB decompression limit."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as dst:
        for name, body in _entries(fmt):
            dst.writestr(name, body)
        with dst.open("customXml/padding.xml", "w") as part:
            block = b" " * (1 << 20)
            for _ in range(48):
                part.write(block)
    bomb = buf.getvalue()
    assert len(bomb) < 1 << 20
    limits = LimitsSettings(max_decompressed_bytes=32 << 20)  # type: ignore[call-arg]
    result, seconds = outcome(bomb, f"zeros.{fmt}", limits=limits)
    assert isinstance(result, IngestError) and result.code is ErrorCode.TOO_LARGE, result
    assert seconds < 5


@pytest.mark.parametrize("fmt", ["docx", "xlsx"])
def test_a_zip_whose_header_understates_the_size_does_not_inflate_unbounded(fmt: str) -> None:
    """The declared size says 1 KB; the stream inflates to 64 MiB. zipfile stops at the
    declared size and the CRC no longer matches: a typed error, quickly."""
    main = MAIN_PART[fmt]
    assert main is not None
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as dst:
        for name, body in _entries(fmt):
            if name != main:
                dst.writestr(name, body)
        with dst.open(main, "w") as part:
            part.write(b'<?xml version="1.0"?>\n')
            block = b" " * (1 << 20)
            for _ in range(64):
                part.write(block)
    liar = _declare_size(buf.getvalue(), main, 1024)
    result, seconds = outcome(liar, f"liar.{fmt}")
    assert isinstance(result, IngestError), "a lying zip normalized as if intact"
    assert result.code in (ErrorCode.CORRUPT, ErrorCode.TOO_LARGE)
    assert seconds < BOUND_S


# --- entity bombs and XXE ----------------------------------------------------------------

LAUGHS = (
    '<?xml version="1.0"?>\n<!DOCTYPE lolz [\n <!ENTITY lol "lol">\n'
    + "".join(
        f' <!ENTITY lol{i} "{("&lol" + (str(i - 1) if i > 1 else "") + ";") * 10}">\n'
        for i in range(1, 10)
    )
    + "]>\n"
)


def _secret_file(tmp_path: Path) -> tuple[Path, str]:
    secret = "XXE-SECRET-7f3a9c"
    path = tmp_path / "secret.txt"
    path.write_text(secret)
    return path, secret


def _with_part(fmt: str, part: str, body: bytes) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as dst:
        for name, data in _entries(fmt):
            dst.writestr(name, body if name == part else data)
    return buf.getvalue()


def _docx_body(doctype: str, text: str) -> bytes:
    return (
        doctype + '<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/'
        f'2006/main"><w:body><w:p><w:r><w:t>{text}</w:t></w:r></w:p></w:body></w:document>'
    ).encode()


def _assert_bounded(result: NormalizedDocument | IngestError, seconds: float, *banned: str) -> None:
    assert seconds < BOUND_S
    if isinstance(result, NormalizedDocument):
        assert len(result.markdown) < 1_000_000, "the entity bomb expanded"
        for word in banned:
            assert word not in result.markdown


def test_billion_laughs_in_word_document_xml() -> None:
    data = _with_part("docx", "word/document.xml", _docx_body(LAUGHS, "before &lol9; after"))
    result, seconds = outcome(data, "laughs.docx")
    _assert_bounded(result, seconds, "lollollollollollollollollollollollol")


def test_xxe_in_word_document_xml_reads_no_file(tmp_path: Path) -> None:
    path, secret = _secret_file(tmp_path)
    doctype = f'<?xml version="1.0"?>\n<!DOCTYPE d [<!ENTITY xxe SYSTEM "{path.as_uri()}">]>\n'
    data = _with_part("docx", "word/document.xml", _docx_body(doctype, "leak: &xxe;"))
    result, seconds = outcome(data, "xxe.docx")
    _assert_bounded(result, seconds, secret)


_TEXT_PARTS = {  # the part and its first text element's start tag
    "docx": ("word/document.xml", r"<w:t(?: [^>]*)?>"),
    "xlsx": ("xl/sharedStrings.xml", r"<t(?: [^>]*)?>"),
    "pptx": ("ppt/slides/slide1.xml", r"<a:t>"),
}


@pytest.mark.parametrize("fmt", sorted(_TEXT_PARTS))
def test_entity_bomb_and_xxe_in_ooxml_parts_keep_the_text_after_them(
    fmt: str, tmp_path: Path
) -> None:
    """Entities are never expanded (a bomb) nor read (an external file), and one that is
    not resolved must not take the text after it along: parsers hang that text on the
    entity's node, where readers that take an element's text never look (PPTX lost the
    rest of every such run)."""
    path, secret = _secret_file(tmp_path)
    part, tag = _TEXT_PARTS[fmt]
    entries = dict(_entries(fmt))
    head, _, rest = entries[part].decode().partition("?>")
    doctype = LAUGHS.split("\n", 1)[1].replace(
        "]>", f' <!ENTITY xxe SYSTEM "{path.as_uri()}">\n <!ENTITY nbsp "&#160;">\n]>'
    )
    tail = "survivor words after the entities"
    body = re.sub(tag, lambda m: f"{m.group(0)}&lol9;&xxe;x&nbsp;{tail} ", rest, count=1)
    assert body != rest
    poisoned = head + "?>\n" + doctype + body
    result, seconds = outcome(_with_part(fmt, part, poisoned.encode()), f"entities.{fmt}")
    _assert_bounded(result, seconds, secret, "lollollollollollollollollollollollol")
    assert isinstance(result, NormalizedDocument)
    assert tail in result.markdown.replace("\u00a0", " ")


def test_billion_laughs_and_xxe_in_a_confluence_body(tmp_path: Path) -> None:
    path, secret = _secret_file(tmp_path)
    doctype = LAUGHS.replace("]>", f' <!ENTITY xxe SYSTEM "{path.as_uri()}">\n]>')
    body = (doctype + "<p>a &lol9; b &xxe; c</p>").encode()
    result, seconds = outcome(body, "Page.confluence", mime=PAGE_MIME)
    _assert_bounded(result, seconds, secret, "lollollollollollollollollollollollol")
    # And the same entities with no DOCTYPE at all (Confluence bodies never have one).
    result, seconds = outcome(b"<p>x &xxe; &lol9; y</p>", "Page.confluence", mime=PAGE_MIME)
    _assert_bounded(result, seconds, secret)


def test_entity_bomb_in_html_stays_bounded(tmp_path: Path) -> None:
    path, secret = _secret_file(tmp_path)
    doctype = LAUGHS.replace("]>", f' <!ENTITY xxe SYSTEM "{path.as_uri()}">\n]>')
    page = (doctype + "<html><body><p>a &lol9; &xxe; b</p></body></html>").encode()
    result, seconds = outcome(page, "bomb.html")
    _assert_bounded(result, seconds, secret, "lollollollollollollollollollollollol")


# --- deep nesting --------------------------------------------------------------------------


def _chunk_or_typed(markdown: str, settings: ChunkingSettings) -> float:
    start = time.perf_counter()
    try:
        doc = chunk_document(markdown, DocumentInfo(document_id="deep"), settings)
    except IngestError as exc:
        assert exc.code is ErrorCode.CHUNKING_FAILED
    else:
        assert doc.chunks
        assert all(c.token_count <= settings.oversize_block_limit for c in doc.chunks)
    return time.perf_counter() - start


@pytest.mark.parametrize("depth", [100, 500])
def test_deeply_nested_markdown_lists(depth: int, chunking_settings: ChunkingSettings) -> None:
    md = "\n".join("  " * i + f"- level {i}" for i in range(depth)) + "\n"
    result, seconds = outcome(md.encode(), "deep.md")
    assert seconds < BOUND_S
    text = result.markdown if isinstance(result, NormalizedDocument) else md
    assert _chunk_or_typed(text, chunking_settings) < BOUND_S


def test_deeply_nested_blockquotes_and_mixed(chunking_settings: ChunkingSettings) -> None:
    md = "".join(">" * i + " quote\n" for i in range(1, 300)) + "\n" + "> - " * 300 + "x\n"
    assert _chunk_or_typed(md, chunking_settings) < BOUND_S


@pytest.mark.parametrize(
    ("name", "page"),
    [
        ("lists.html", "<ul><li>item " * 500 + "deep" + "</li></ul>" * 500),
        ("tables.html", "<table><tr><td>cell " * 200 + "core" + "</td></tr></table>" * 200),
        ("divs.html", "<div>" * 2000 + "text" + "</div>" * 2000),
        ("unclosed.html", "<ul><li>" * 3000 + "never closed"),
    ],
)
def test_deeply_nested_html(name: str, page: str, chunking_settings: ChunkingSettings) -> None:
    result, seconds = outcome(f"<html><body>{page}</body></html>".encode(), name)
    assert seconds < BOUND_S
    if isinstance(result, NormalizedDocument):
        assert _chunk_or_typed(result.markdown, chunking_settings) < BOUND_S
    else:
        assert result.code in (ErrorCode.TOO_LARGE, ErrorCode.CORRUPT), result


def test_deeply_nested_confluence_macros(chunking_settings: ChunkingSettings) -> None:
    open_ = '<ac:structured-macro ac:name="expand"><ac:rich-text-body>'
    close = "</ac:rich-text-body></ac:structured-macro>"
    body = (open_ * 400 + "<p>inner</p>" + close * 400).encode()
    result, seconds = outcome(body, "Deep.confluence", mime=PAGE_MIME)
    assert seconds < BOUND_S
    if isinstance(result, NormalizedDocument):
        assert "inner" in result.markdown
        assert _chunk_or_typed(result.markdown, chunking_settings) < BOUND_S


# --- one very long line ---------------------------------------------------------------------


def _one_line(size: int) -> bytes:
    rng = random.Random(50)
    words = [b"alpha", b"beta", b"gamma", b"delta", b"service", b"index", b"x1234", b"wiki"]
    unit = b" ".join(rng.choice(words) for _ in range(20_000)) + b" "
    return (unit * (size // len(unit) + 1))[:size]


def test_a_50_mb_single_line_text_file() -> None:
    data = _one_line(50 * 1024 * 1024)
    assert b"\n" not in data
    start = time.perf_counter()
    doc = normalize_bytes(data, "huge.txt")
    seconds = time.perf_counter() - start
    assert seconds < 30
    assert doc.markdown.count("\n") <= 1 and len(doc.markdown) > 49 * 1024 * 1024
    del doc
    small = LimitsSettings(max_file_bytes=10 * 1024 * 1024)  # type: ignore[call-arg]
    result, seconds = outcome(data, "huge.txt", limits=small)
    assert isinstance(result, IngestError) and result.code is ErrorCode.TOO_LARGE
    assert "max_file_bytes" in str(result) and seconds < 1


def test_a_2_mb_single_line_chunks_within_the_budget(chunking_settings: ChunkingSettings) -> None:
    text = normalize_bytes(_one_line(2 * 1024 * 1024), "long.txt").markdown
    start = time.perf_counter()
    doc = chunk_document(text, DocumentInfo(document_id="long"), chunking_settings)
    assert time.perf_counter() - start < 30
    assert len(doc.chunks) > 1000
    assert all(0 < c.token_count <= chunking_settings.max_tokens for c in doc.chunks)
    assert [c.ordinal for c in doc.chunks] == list(range(len(doc.chunks)))
    assert doc.chunks[-1].char_end == len(doc.text.rstrip())


def test_normalize_markdown_of_a_long_line_is_linear() -> None:
    """The shared whitespace pass on 8 MiB of spaces and tabs (the worst case for a
    regex with backtracking) stays fast."""
    start = time.perf_counter()
    out = normalize_markdown("a" + " \t" * (4 << 20) + "b")
    assert out.text.strip() == "a b"
    assert time.perf_counter() - start < 10


# --- malicious names: files connector ------------------------------------------------------


@pytest.fixture()
def hostile_tree(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    root = tmp_path / "share"
    outside = tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text("OUTSIDE-SECRET")
    (outside / "dir").mkdir()
    (outside / "dir" / "inner.txt").write_text("OUTSIDE-DIR-SECRET")
    names = [
        "a" * 251 + ".txt",  # 255 bytes, the filesystem's limit
        "Документ " + "я" * 117 + ".txt",  # 255 bytes of UTF-8
        "new\nline.txt",
        "ctl\x01\x1b[31mred.txt",
        "tab\tand\rcr.md",
        "日本語 ✓ émoji 🙂.md",
        "-rf --help.txt",
        " leading and trailing .txt",
    ]
    for i, name in enumerate(names):
        (root / name).write_text(f"file {i} content\n")
    os.symlink(outside / "secret.txt", root / "escape.txt")
    os.symlink(outside / "dir", root / "escape_dir")
    os.symlink("../../../../../../etc/passwd", root / "passwd.txt")
    os.symlink(root / names[0], root / "inside_link.txt")
    yield root, outside


def test_files_connector_with_hostile_names(hostile_tree: tuple[Path, Path]) -> None:
    root, _outside = hostile_tree
    conn = FilesConnector(FilesSettings(), [f"share={root}"])
    listing = conn.list_refs()
    ids = {ref.document_id for ref in listing.refs}
    names = {n for n in os.listdir(root) if not (root / n).is_symlink()}
    assert {f"share/{n}" for n in names} <= ids
    assert "share/escape.txt" not in ids and "share/passwd.txt" not in ids
    assert not any(i.startswith("share/escape_dir") for i in ids)
    assert any("escape.txt" in e and "outside the root" in e for e in listing.errors)
    assert any("escape_dir" in e for e in listing.errors)
    for doc in fetch_many(conn, list(listing.refs)):
        assert not isinstance(doc, IngestError), doc
        assert doc.file_path is not None
        assert Path(doc.file_path).resolve().is_relative_to(root)
        assert b"SECRET" not in doc.data and b"root:" not in doc.data
        result, _ = outcome(doc.data, doc.filename)
        assert isinstance(result, NormalizedDocument), result
    # Crafted ids that try to leave the root are refused, never read.
    for crafted in (
        "share/../outside/secret.txt",
        "share/escape.txt",
        "share/escape_dir/inner.txt",
        "share//etc/passwd",
        "share/passwd.txt",
        "nosuchroot/x.txt",
        "share/a\x00b.txt",
    ):
        with pytest.raises(IngestError):
            conn.fetch(DocumentRef(crafted, "1", "file"))


# --- malicious names: Confluence attachments -------------------------------------------------

HOSTILE_ATTACHMENTS = [
    "../../etc/passwd.pdf",
    "..\\..\\windows\\win.ini.pdf",
    "a\x00b.pdf",
    "x" * 296 + ".pdf",
    "/abs/path.txt",
    "new\nline.txt",
]


def test_confluence_attachment_names_are_never_paths(
    confluence_api: Callable[..., FakeConfluence], tmp_path: Path
) -> None:
    api = confluence_api("cloud")
    api.add_space("ENG")
    page = api.add_page("ENG", "Attachments")
    expected: dict[str, str] = {}
    for name in HOSTILE_ATTACHMENTS:
        data = tiny_pdf(f"hostile {len(expected)}") if name.endswith(".pdf") else b"plain text\n"
        expected[api.add_attachment(page, name, data)] = name
    before = set(tmp_path.iterdir())
    cwd = Path.cwd()
    os.chdir(tmp_path)  # anything written by a relative name would land here
    try:
        conn = ConfluenceConnector(
            ConfluenceSettings.model_validate(
                {
                    "url": api.base_url,
                    "cloud": True,
                    "username": api.username,
                    "spaces": ["ENG"],
                    "requests_per_second": 1000.0,
                    "max_retries": 1,
                    "backoff_base_s": 0.01,
                    "timeout_s": 5.0,
                }
            ),
            api.token,
            attachment_extensions={".pdf", ".txt"},
        )
        refs = [r for r in conn.list_refs().refs if r.kind == "attachment"]
        assert {r.document_id for r in refs} == set(expected)
        # ids are Confluence ids ("att" and digits), not names
        assert all(re.fullmatch(r"att\d+", r.document_id) for r in refs)
        fetched_ok = 0
        for doc, ref in zip(conn.fetch_many(refs), refs, strict=True):
            if isinstance(doc, IngestError):
                # The local API leaves "/" unescaped in download links, so the client's URL
                # normalization turns "../.." into another path on the same server: a 404,
                # reported as a typed error. It never becomes a local path.
                assert "/" in expected[ref.document_id], doc
                assert doc.code is ErrorCode.FETCH_FAILED
                continue
            assert re.fullmatch(r"att\d+", doc.ref.document_id)
            assert doc.filename == expected[doc.ref.document_id]
            fetched_ok += 1
            result, seconds = outcome(doc.data, doc.filename, mime=doc.mime)
            assert seconds < BOUND_S
            if isinstance(result, NormalizedDocument):
                assert "hostile" in result.markdown or "plain text" in result.markdown
        # NUL, backslashes, a 300-character name and a newline all download fine.
        assert fetched_ok >= 4
    finally:
        os.chdir(cwd)
    assert set(tmp_path.iterdir()) == before, "something was written by its attachment name"
    assert all(p.startswith(api.context + "/") for p in api.paths), api.paths
    fetched = [p for p in api.paths if "/download/attachments/" in p]
    assert len(fetched) >= len(HOSTILE_ATTACHMENTS) - 2
    assert not Path("/etc/passwd.pdf").exists()
