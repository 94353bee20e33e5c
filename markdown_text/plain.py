"""Markdown as a reader sees it on one line: a preview of a chunk in a terminal table,
without the marks (`#`, `**`, `[text](url)`, table pipes, list bullets, fences)."""

from __future__ import annotations

from functools import cache

from markdown_it import MarkdownIt
from markdown_it.token import Token


@cache
def _parser() -> MarkdownIt:
    return MarkdownIt("commonmark").enable("table")


def plain_text(markdown: str) -> str:
    """The text of `markdown` without its marks, whitespace runs as one space: inline
    text, code spans, image alt texts and the lines of code blocks, in order."""
    parts: list[str] = []
    for token in _parser().parse(markdown):
        if token.type == "inline":
            parts.append("".join(_inline_text(child) for child in token.children or ()))
        elif token.type in ("fence", "code_block"):
            parts.append(token.content)
    return " ".join(" ".join(parts).split())


def _inline_text(token: Token) -> str:
    if token.type in ("text", "code_inline", "image"):
        return token.content
    if token.type in ("softbreak", "hardbreak"):
        return " "
    return ""  # link and emphasis marks, inline HTML
