"""A converter run on the files of a corpus beside other converters (`bench.normalize`,
`bench.pictures`): one file's outcome, the tally per format and converter, and the run
of one converter on one file, whose failure is a result, not a crash."""

from __future__ import annotations

import contextlib
import io
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

Output = TypeVar("Output")


@dataclass
class FileOutcome:
    converter: str
    fmt: str
    name: str
    ok: bool
    code: str | None = None
    message: str | None = None


@dataclass
class FormatTally:
    converter: str
    fmt: str
    ok: int = 0
    failed: Counter[str] = field(default_factory=Counter)
    recalls: list[float] = field(default_factory=list)


def attempt(convert: Callable[[Path], Output], path: Path, outcome: FileOutcome) -> Output | None:
    """`convert(path)`, what it prints and warns silenced (pymupdf4llm prints to stdout):
    its output, or None with the failure's code and message in `outcome` (the product's
    error code, or another converter's exception type)."""
    from config.errors import IngestError

    try:
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return convert(path)
    except IngestError as exc:
        outcome.code, outcome.message = exc.code.value, exc.message
    except Exception as exc:  # another converter's failure is a result, not a crash
        outcome.code, outcome.message = type(exc).__name__, str(exc)[:200]
    return None
