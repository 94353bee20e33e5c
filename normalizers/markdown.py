"""Markdown writing: the escapes and block shapes (code spans and fences, emphasis, link
destinations, list items, quotes) every normalizer writes Markdown with, so that text
from any source reads back as the same text and blocks nest the same way."""

from __future__ import annotations

import re

WHITESPACE = re.compile(r"[ \t\n\r\f\v\u00a0]+")
# Only a `*` with whitespace on both sides can never be emphasis; text-node edges count
# as "not whitespace" because the next node (an <i>, a link) may start right there.
_STAR = re.compile(r"(?<!\s)\*|\*(?!\s)")
_UNDERSCORE = re.compile(r"(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")
_BACKSLASH = re.compile(r"\\(?=[!-/:-@\[-`{-~])")
_TAG_LIKE = re.compile(r"<(?=[A-Za-z/!?])")
_MARKDOWN_SPECIAL = re.compile(r"[\\`*_<]|\]\(")  # what escape_text may touch
_LINE_MARKER = re.compile(r"^([#>+*\-]|\d{1,9}[.)])(?=\s|$)")
_RULE_LIKE = re.compile(r"^(?:[-=*_~`]\s*){3,}$")
_LIST_MARKER = re.compile(r"^(?:[-+*]|\d{1,9}[.)])(?: |$)")


def escape_text(text: str) -> str:
    """Escape what would turn plain text into Markdown syntax, and nothing more
    (every escape costs tokens): backslashes before punctuation, backticks,
    emphasis-capable `*`/`_`, `](` (a link), and `<` that would open HTML."""
    if _MARKDOWN_SPECIAL.search(text) is None:  # most text: nothing to escape
        return text
    text = _BACKSLASH.sub(r"\\\\", text)
    text = text.replace("`", "\\`")
    text = _STAR.sub(r"\\*", text)
    text = _UNDERSCORE.sub(r"\\_", text)
    text = text.replace("](", "\\](")
    return _TAG_LIKE.sub(r"\\<", text)


def escape_line_starts(paragraph: str) -> str:
    """Escape line starts that would open a heading, quote, list or rule."""
    out = []
    for line in paragraph.split("\n"):
        if _RULE_LIKE.match(line):
            line = "\\" + line
        else:
            line = _LINE_MARKER.sub(lambda m: _escape_marker(m.group(1)), line, count=1)
        out.append(line)
    return "\n".join(out)


def _escape_marker(marker: str) -> str:
    return marker[:-1] + "\\" + marker[-1] if marker[0].isdigit() else "\\" + marker


def code_span(text: str) -> str:
    text = WHITESPACE.sub(" ", text).strip()
    if not text:
        return ""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    ticks = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def fenced_code(code: str, language: str = "") -> str:
    """A backtick fence longer than any backtick run inside; the info string is the
    language's first word without backticks (which an info string cannot hold)."""
    longest = max((len(run) for run in re.findall(r"`{3,}", code)), default=0)
    fence = "`" * max(3, longest + 1)
    language = (language.replace("`", "").split() or [""])[0]
    return f"{fence}{language}\n{code}\n{fence}" if code else f"{fence}{language}\n{fence}"


def wrap_emphasis(inner: str, marker: str) -> str:
    """`marker` around the text, whitespace kept outside so the emphasis parses."""
    core = inner.strip(" \n")
    if not core:
        return inner
    lead = inner[: len(inner) - len(inner.lstrip(" \n"))]
    trail = inner[len(inner.rstrip(" \n")) :]
    return f"{lead}{marker}{core}{marker}{trail}"


def link_destination(url: str) -> str:
    if re.search(r"[\s()<>]", url):
        return "<" + url.replace("<", "%3C").replace(">", "%3E") + ">"
    return url


def list_item(marker: str, blocks: list[str]) -> str:
    """One list item: the marker on the first line, every other line indented to the
    item's content column. A nested list follows its paragraph without a blank line
    so lists stay tight."""
    pad = " " * len(marker)
    lines: list[str] = []
    for i, block in enumerate(blocks):
        if i and not _LIST_MARKER.match(block):
            lines.append("")
        for j, line in enumerate(block.split("\n")):
            if i == 0 and j == 0:
                lines.append(marker + line)
            else:
                lines.append(pad + line if line else "")
    if not lines:
        lines.append(marker.rstrip())
    return "\n".join(line.rstrip() for line in lines)


def task_item(done: bool, blocks: list[str]) -> list[str]:
    """A GFM task item's blocks: the checkbox opens the first paragraph."""
    box = "[x]" if done else "[ ]"
    if blocks and not starts_block_syntax(blocks[0]):
        return [f"{box} {blocks[0]}", *blocks[1:]]
    return [box, *blocks]


def quote_blocks(blocks: list[str]) -> str:
    text = "\n\n".join(blocks)
    return "\n".join("> " + line if line else ">" for line in text.split("\n"))


def starts_block_syntax(block: str) -> bool:
    """Whether a rendered block is more than a paragraph (fence, quote, table, heading,
    list): such a block cannot be glued after a label on one line."""
    return block.startswith(("```", ">", "|", "#")) or bool(_LIST_MARKER.match(block))
