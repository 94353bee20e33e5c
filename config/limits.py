"""Time limits on one document's work (docs/sources.md#bad-input): a stalled read or converter must
not stall a run.

Python cannot stop a thread, so the work runs in a daemon thread that is abandoned when
its time is up: the caller gets a `TOO_LARGE` error at once and goes on with the other
documents, while the abandoned thread ends whenever its call returns (or with the
process).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from config.errors import ErrorCode, IngestError

T = TypeVar("T")


def within_time_limit(
    work: Callable[[], T], seconds: float, *, what: str, subject: str, setting: str
) -> T:
    """`work()`, or `IngestError(TOO_LARGE)` naming `setting` when it takes longer."""
    outcome: list[T] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            outcome.append(work())
        except BaseException as exc:  # handed to the caller's thread below
            failure.append(exc)

    worker = threading.Thread(target=run, name=f"limited {what}", daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        raise IngestError(
            ErrorCode.TOO_LARGE,
            f"{what} took longer than {setting} ({seconds:g} s); skipped so the run goes on",
            subject=subject,
        )
    if failure:
        raise failure[0]
    return outcome[0]
