"""Markdown and plain text: already Markdown (or close enough); only decoding here.

Front matter moves to metadata in the shared pass (`normalize_bytes` asks for it for
the `markdown` format). Plain text is kept as it is: its paragraphs are Markdown
paragraphs.
"""

from __future__ import annotations

from markdown_text import decode_utf8
from normalizers.model import NormalizeContext, NormalizedDocument


def normalize_markdown_file(data: bytes, ctx: NormalizeContext) -> NormalizedDocument:
    return NormalizedDocument(markdown=decode_utf8(data, subject=ctx.filename))


def normalize_text_file(data: bytes, ctx: NormalizeContext) -> NormalizedDocument:
    return NormalizedDocument(markdown=decode_utf8(data, subject=ctx.filename))
