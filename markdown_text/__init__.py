"""Markdown text as every stage after the normalizers sees it: the shared normalization
pass, positional anchors (page, sheet, slide starts) and strict UTF-8 decoding. Plain
Python on the bottom layer's errors only, so normalizers and chunking both import it
without depending on each other."""

from markdown_text.decode import decode_utf8
from markdown_text.normalize import HARD_BREAKS, Anchor, NormalizedText, normalize_markdown

__all__ = ["HARD_BREAKS", "Anchor", "NormalizedText", "decode_utf8", "normalize_markdown"]
