"""The pictures benchmark's own reference readers (`bench/pictures.py`), which must read
draw.io and Visio files apart from the product's normalizers: compressed pages,
placeholders filled as draw.io shows them, HTML labels, VSDX shape text; and its word
recall, which counts repeats."""

from __future__ import annotations

import base64
import io
import urllib.parse
import zipfile
import zlib
from pathlib import Path

from bench.pictures import DATA, corpus_files, drawio_reference, match_words, vsdx_reference
from normalizers.selfcheck import words

MODEL = (
    '<mxGraphModel><root><mxCell id="0"/><mxCell id="1" parent="0"/>'
    '<object id="lane" label="Doing" status="In progress"><mxCell parent="1" vertex="1"/></object>'
    '<object id="card" label="Fix &lt;b&gt;login&lt;/b&gt;&lt;br&gt;%status% %owner%"'
    ' placeholders="1"><mxCell parent="lane" vertex="1"/></object>'
    '<mxCell id="edge" value="depends on" parent="1" edge="1"/>'
    "</root></mxGraphModel>"
)


def _compressed(model: str) -> bytes:
    """A page as draw.io compresses it: URL-encoded, raw deflate, base64."""
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
    raw = deflate.compress(urllib.parse.quote(model).encode()) + deflate.flush()
    page = base64.b64encode(raw).decode()
    return f'<mxfile><diagram id="p1" name="Page-1">{page}</diagram></mxfile>'.encode()


def test_drawio_reference_reads_plain_and_compressed_pages_alike() -> None:
    plain = f'<mxfile><diagram id="p1" name="Page-1">{MODEL}</diagram></mxfile>'.encode()
    assert drawio_reference(plain) == drawio_reference(_compressed(MODEL))
    assert words(drawio_reference(plain)) == [
        *["doing", "fix", "login"],
        # from the parent lane's attribute; an unknown name stays as draw.io shows it
        *["in", "progress", "owner"],
        *["depends", "on"],
    ]


def test_drawio_reference_reads_every_vendored_diagram() -> None:
    diagrams = [path for fmt, path in corpus_files(["drawio"]) if fmt == "drawio"]
    assert len(diagrams) >= 30
    for path in diagrams:
        assert words(drawio_reference(path.read_bytes())), path.name


def test_vsdx_reference_reads_the_text_of_each_page() -> None:
    page = (
        '<PageContents xmlns="http://schemas.microsoft.com/office/visio/2012/main"><Shapes>'
        "<Shape ID='1'><Text>Load <cp IX='0'/>balancer</Text></Shape>"
        "<Shape ID='2'><Text>Web tier</Text></Shape></Shapes></PageContents>"
    )
    package = io.BytesIO()
    with zipfile.ZipFile(package, "w") as archive:
        archive.writestr("visio/pages/page1.xml", page)
        archive.writestr("visio/pages/pages.xml", "<Pages/>")
    assert words(vsdx_reference(package.getvalue())) == ["load", "balancer", "web", "tier"]


def test_word_recall_counts_repeats_and_ignores_case() -> None:
    match = match_words("Task task DONE", "task done extra")
    assert (match.matched, match.ref_words, match.out_words) == (2, 3, 3)
    assert match.missing == ("task",)


def test_every_picture_has_a_reference_text() -> None:
    pictures = [path for fmt, path in corpus_files(["image"]) if fmt == "image"]
    assert len(pictures) >= 10
    for path in pictures:
        reference = Path(f"{path}.txt")
        assert words(reference.read_text(encoding="utf-8")), path.name
    assert (DATA / "screenshots" / "SOURCES.md").is_file()
