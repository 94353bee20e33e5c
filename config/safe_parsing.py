"""Parsers for untrusted bytes, shared by the connectors and the normalizers: XML and
HTML with entities never resolved, no DTD loaded and no network access, and zlib
streams inflated only up to a limit.

A parser never resolves an entity, so billion-laughs and external-entity payloads
expand to nothing; libxml2's own size and depth limits stay on unless a caller asks
for `huge_tree` (a DOCX body may hold a text node past them), and a parse that hit the
depth limit is refused rather than kept cut short (`check_parser_limits`). Here, below
both connectors and normalizers, because both read what a source serves: one set of
flags for all, where each reader had built its own.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator
from types import MappingProxyType
from typing import IO

from lxml import etree

from config.errors import ErrorCode, IngestError

# How a reader reports a refused input: `NormalizeContext.fail` in the normalizers.
Fail = Callable[[ErrorCode, str], IngestError]

# What no parser of untrusted bytes does: resolve an entity, load a DTD, reach the network.
_UNTRUSTED = MappingProxyType({"resolve_entities": False, "load_dtd": False, "no_network": True})
PARSER_DEPTH_LIMIT = 256  # libxml2's nesting limit without huge_tree
_PIECE = 1 << 20


def xml_parser(
    *, recover: bool = False, huge_tree: bool = False, markup_only: bool = False
) -> etree.XMLParser:
    """A parser for untrusted XML; `recover` keeps what malformed XML allows,
    `markup_only` drops comments and processing instructions."""
    options = {**_UNTRUSTED, "huge_tree": huge_tree, "recover": recover}
    return etree.XMLParser(**options, remove_comments=markup_only, remove_pis=markup_only)


def html_parser() -> etree.HTMLParser:
    """A recovering parser for untrusted HTML given as UTF-8, comments and processing
    instructions dropped."""
    return etree.HTMLParser(
        encoding="utf-8",
        remove_comments=True,
        remove_pis=True,
        no_network=True,
        huge_tree=False,
        recover=True,
    )


def iterparse_xml(
    source: IO[bytes], events: tuple[str, ...], tag: tuple[str, ...]
) -> etree.iterparse:
    """`source` streamed as (event, element) pairs of the elements tagged `tag`."""
    return etree.iterparse(source, events=events, tag=tag, **_UNTRUSTED)


def xml_root(data: bytes, *, huge_tree: bool = False) -> etree._Element:
    """The root element of the XML `data`; raises `etree.XMLSyntaxError` where it does
    not parse."""
    return etree.fromstring(data, xml_parser(huge_tree=huge_tree))


def parse_xml(data: bytes, fail: Fail, what: str, *, huge_tree: bool = False) -> etree._Element:
    """The root element of the XML `data` (`what` names it in messages); XML that does
    not parse is CORRUPT."""
    try:
        return xml_root(data, huge_tree=huge_tree)
    except etree.XMLSyntaxError as exc:
        raise fail(ErrorCode.CORRUPT, f"{what} is not well-formed: {exc}") from None


def check_parser_limits(parser: etree._FeedParser, fail: Fail) -> None:
    """libxml2 stops at its nesting limit and keeps only what came before: refuse
    rather than index half a document."""
    for entry in parser.error_log:
        if entry.type_name == "ERR_RESOURCE_LIMIT" or "Excessive depth" in entry.message:
            raise fail(
                ErrorCode.TOO_LARGE,
                f"elements nested deeper than {PARSER_DEPTH_LIMIT} levels (line {entry.line}); "
                "the parser stops there and the rest would be lost",
            )


def inflated_pieces(raw: bytes, wbits: int, limit: int, piece: int = _PIECE) -> Iterator[bytes]:
    """The zlib stream `raw` (`wbits` as `zlib.decompressobj` takes it) inflated in
    pieces of at most `piece` bytes: up to `limit` bytes, then one more byte where the
    stream holds more, so a caller learns it passes the limit without it ever being
    inflated whole. Damaged data raises `zlib.error`."""
    inflater = zlib.decompressobj(wbits)
    room = limit + 1
    pending = raw
    while room > 0:
        out = inflater.decompress(pending, min(piece, room))
        if not out:
            return
        room -= len(out)
        yield out
        pending = inflater.unconsumed_tail


def inflate(raw: bytes, wbits: int, limit: int, fail: Fail, what: str) -> bytes:
    """The zlib stream `raw` inflated whole: TOO_LARGE past `limit` bytes (the value of
    limits.max_decompressed_bytes), CORRUPT where it does not inflate."""
    try:
        out = b"".join(inflated_pieces(raw, wbits, limit))
    except zlib.error as exc:
        raise fail(ErrorCode.CORRUPT, f"{what} does not inflate: {exc}") from None
    if len(out) > limit:
        raise fail(
            ErrorCode.TOO_LARGE,
            f"{what} inflates past limits.max_decompressed_bytes ({limit:,} bytes)",
        )
    return out
