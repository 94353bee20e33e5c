"""The line that names where a chunk lives (`title > heading > heading`): the chunker
puts it above each chunk's embedded text, and the readers show it as a hit's heading."""

from __future__ import annotations

import re
from collections.abc import Sequence

_NOT_ALNUM = re.compile(r"[\W_]+")


def context_header(title: str | None, headings: Sequence[str]) -> str:
    """`title > heading > heading`, the title left out when the first heading repeats it
    (a file name such as `storage-design.pdf` repeats a heading `Storage design`)."""
    parts = list(headings)
    if title and not (parts and _same_name(title, parts[0])):
        parts.insert(0, title)
    return " > ".join(part for part in parts if part)


def _same_name(title: str, heading: str) -> bool:
    def key(value: str) -> str:
        return _NOT_ALNUM.sub("", value).casefold()

    stem = title.rsplit(".", 1)[0] if re.search(r"\.\w{1,5}$", title) else title
    return key(heading) in (key(title), key(stem))
