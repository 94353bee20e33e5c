"""The process's native heap (glibc's malloc) kept close to what the run holds.

A run's Python objects grow little with its documents (tracemalloc: about 4 MiB per
1,000 documents); its resident memory grew far more, in native allocations: every worker
thread that allocates (the tokenizer, the embedder, the store's calls, the parsers) gets
a malloc arena of its own, and each arena keeps the pages its batches freed. Fewer arenas
and handing freed pages back after each batch keep the peak where the work is, not where
the run has been. Elsewhere than glibc (macOS, musl) both are no-ops.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys

M_ARENA_MAX = -8  # mallopt's parameter number in glibc's malloc.h


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None


def limit_arenas(arenas: int) -> bool:
    """At most `arenas` malloc arenas for threads that allocate from now on (0: glibc's
    own limit, 8 per core). Whether the limit was set."""
    libc = _glibc()
    if libc is None or arenas <= 0:
        return False
    return bool(libc.mallopt(M_ARENA_MAX, arenas))


def release_freed() -> None:
    """Hand the pages malloc holds free back to the system (`malloc_trim(0)`)."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)
