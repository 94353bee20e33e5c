"""The parsers for untrusted bytes (config/safe_parsing.py): entities never resolved,
inflation bounded, and no reader in the tree building a parser of its own."""

from __future__ import annotations

import io
import re
import zlib
from pathlib import Path

import pytest
from lxml import etree

from config.errors import ErrorCode, IngestError
from config.safe_parsing import (
    html_parser,
    inflate,
    inflated_pieces,
    iterparse_xml,
    parse_xml,
    xml_parser,
    xml_root,
)

ROOT = Path(__file__).resolve().parent.parent
# What builds a parser or an inflater: only config/safe_parsing.py may.
_BUILDERS = re.compile(r"etree\.(?:XMLParser|HTMLParser|iterparse)\(|zlib\.decompressobj\(")


def _fail(code: ErrorCode, message: str) -> IngestError:
    return IngestError(code, message, subject="sample")


def _external_entity(secret: Path) -> bytes:
    return (
        f'<?xml version="1.0"?><!DOCTYPE r [<!ENTITY x SYSTEM "{secret.as_uri()}">'
        '<!ENTITY a "AAAAAAAAAA"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">]>'
        "<r><t>before &x; &b; after</t></r>"
    ).encode()


def test_no_parser_resolves_an_entity_or_reads_a_file(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("TOPSECRET")
    data = _external_entity(secret)
    roots = [
        xml_root(data),
        xml_root(data, huge_tree=True),
        parse_xml(data, _fail, "sample"),
        etree.fromstring(data, xml_parser(recover=True, markup_only=True)),
        etree.fromstring(data, html_parser()),
    ]
    for root in roots:
        text = "".join(root.itertext())
        assert "TOPSECRET" not in text
        assert "AAAAAAAAAA" not in text
    streamed = [el.text for _, el in iterparse_xml(io.BytesIO(data), ("end",), ("t",))]
    assert streamed and "TOPSECRET" not in str(streamed)


def test_broken_xml_is_corrupt_and_named() -> None:
    with pytest.raises(IngestError) as caught:
        parse_xml(b"<r><unclosed></r>", _fail, "word/document.xml")
    assert caught.value.code is ErrorCode.CORRUPT
    assert caught.value.message.startswith("word/document.xml is not well-formed")


def test_inflation_stops_one_byte_past_the_limit() -> None:
    bomb = zlib.compress(b"\0" * 10_000_000)
    pieces = list(inflated_pieces(bomb, zlib.MAX_WBITS, 1000, piece=300))
    assert [len(p) for p in pieces] == [300, 300, 300, 101]
    with pytest.raises(IngestError) as caught:
        inflate(bomb, zlib.MAX_WBITS, 1000, _fail, "the chunk")
    assert caught.value.code is ErrorCode.TOO_LARGE
    assert "limits.max_decompressed_bytes (1,000 bytes)" in caught.value.message


def test_a_stream_of_exactly_the_limit_inflates() -> None:
    data = bytes(range(256)) * 4
    assert inflate(zlib.compress(data), zlib.MAX_WBITS, len(data), _fail, "it") == data


def test_damaged_streams_are_corrupt() -> None:
    with pytest.raises(IngestError) as caught:
        inflate(b"not zlib at all", zlib.MAX_WBITS, 1000, _fail, "the chunk")
    assert caught.value.code is ErrorCode.CORRUPT
    assert caught.value.message.startswith("the chunk does not inflate")


def test_only_the_shared_module_builds_parsers() -> None:
    home = ROOT / "config" / "safe_parsing.py"
    builders = [
        f"{path.relative_to(ROOT)}:{number}"
        for package in ("config", "connectors", "normalizers", "chunking", "indexing", "tasks")
        for path in sorted((ROOT / package).rglob("*.py"))
        if path != home
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if _BUILDERS.search(line)
    ]
    assert builders == []
