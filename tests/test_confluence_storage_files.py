"""Confluence storage format in a file is recognised by its content (`ac:`/`ri:`
elements), whatever the extension (docs/sources.md#normalization-contract): `ingest normalize
page.xml` works."""

from __future__ import annotations

from pathlib import Path

import pytest

from config.errors import ErrorCode, IngestError
from flows.cli import main
from normalizers.detection import detect_format

STORAGE = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n'
    b"<h1>Release process</h1>\n"
    b'<p>See <ac:link><ri:page ri:content-title="Install Guide" /></ac:link> first.</p>\n'
    b'<ac:structured-macro ac:name="code"><ac:parameter ac:name="language">bash'
    b"</ac:parameter><ac:plain-text-body><![CDATA[make release]]></ac:plain-text-body>"
    b"</ac:structured-macro>\n"
)


@pytest.mark.parametrize("name", ["page.xml", "page.html", "page.xhtml", "page.txt", "page"])
def test_storage_format_is_recognised_whatever_the_extension(name: str) -> None:
    assert detect_format(STORAGE, name) == "confluence"
    assert detect_format(STORAGE.split(b"\n", 1)[1], name) == "confluence"  # no declaration


def test_markup_without_confluence_elements_keeps_its_format() -> None:
    assert detect_format(b"<h1>Plain</h1><p>HTML fragment</p>", "page.html") == "html"
    assert detect_format(b"<p>ac: ri: are only words here</p>", "notes.txt") == "text"
    with pytest.raises(IngestError) as caught:
        detect_format(b"<note><to>someone</to></note>", "data.xml")
    assert caught.value.code is ErrorCode.UNSUPPORTED_FORMAT


def test_ingest_normalize_renders_a_storage_format_export(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = tmp_path / "page.xml"
    page.write_bytes(STORAGE)
    assert main(["normalize", str(page)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# Release process")
    assert "[Install Guide](" in out
    assert "```bash\nmake release\n```" in out
    assert "ac:" not in out and "CDATA" not in out
