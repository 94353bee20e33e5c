"""Where markdown-it may start afresh: a large document is parsed in segments so that
its tokens (several times the text's size in memory) never exist all at once.

A segment may start at a line that follows a blank line, starts in column 0 with
something other than a list marker, and lies outside every block that runs past a blank
line: a fenced code block, an HTML block of CommonMark types 1-5 (`<pre>`, `<script>`,
`<style>`, `<textarea>`, comments, processing instructions, declarations, CDATA) and
display math. There every open paragraph, list, quote, table and indented code block
has ended, so parsing from that line gives the same blocks as parsing from the start.
"""

from __future__ import annotations

import re
from types import MappingProxyType

SEGMENT_CHARS = 256 * 1024  # smaller documents are parsed whole

_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")
_LIST_MARKER = re.compile(r"(?:[-*+]|\d{1,9}[.)])(?:[ \t]|$)")
_RAW_HTML = re.compile(
    r" {0,3}<(?:(script|pre|style|textarea)(?:[\s>]|$)|(!--)|(\?)|(![A-Za-z])|(!\[CDATA\[))",
    re.IGNORECASE,
)
_RAW_HTML_END = MappingProxyType(
    {
        1: re.compile(r"</(?:script|pre|style|textarea)>", re.IGNORECASE),
        2: re.compile("-->"),
        3: re.compile(r"\?>"),
        4: re.compile(">"),
        5: re.compile(r"\]\]>"),
    }
)
_MATH_OPEN = re.compile(r" {0,3}(\$\$|\\begin\{)")


def segment_lines(lines: list[str], dollar_math: bool, environments: bool) -> list[int]:
    """Indices of the lines where segments start (the first is 0), each segment at
    least `SEGMENT_CHARS` long except the last."""
    starts = [0]
    size = 0
    fence = ""
    html_end: re.Pattern[str] | None = None
    math_end = ""
    previous_blank = True
    for index, line in enumerate(lines):
        size += len(line) + 1
        blank = not line.strip()
        if fence:
            stripped = line.strip()
            if stripped and set(stripped) == {fence[0]} and len(stripped) >= len(fence):
                fence = ""
        elif html_end is not None:
            if html_end.search(line):
                html_end = None
        elif math_end:
            if math_end in line:
                math_end = ""
        else:
            if (
                size > SEGMENT_CHARS
                and previous_blank
                and not blank
                and not line[0].isspace()
                and not _LIST_MARKER.match(line)
            ):
                starts.append(index)
                size = len(line) + 1
            opener = _FENCE.match(line)
            if opener:
                fence = opener.group(1)
            elif line.lstrip(" ").startswith("<") and (raw := _RAW_HTML.match(line)):
                kind = next(i for i in range(1, 6) if raw.group(i))
                if not _RAW_HTML_END[kind].search(line, raw.end()):
                    html_end = _RAW_HTML_END[kind]
            elif (dollar_math or environments) and (math := _MATH_OPEN.match(line)):
                if math.group(1) == "$$" and dollar_math:
                    if "$$" not in line[math.end() :]:
                        math_end = "$$"
                elif math.group(1) != "$$" and environments and "\\end{" not in line:
                    math_end = "\\end{"
        previous_blank = blank
    return starts
