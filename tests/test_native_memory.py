"""The native heap kept close to what a run holds: freed pages handed back after a batch,
malloc arenas limited (glibc, which CI and the supported Linux installs run on)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# 2,000 blocks of 64 KiB (under malloc's mmap threshold, so from the heap), every 50th
# kept: the heap's free pages sit between live blocks, where free() never returns them.
FRAGMENTED_HEAP = textwrap.dedent(
    """
    import psutil
    from tasks import native_memory

    def rss():
        return psutil.Process().memory_info().rss

    blocks = [bytes(bytearray(64 * 1024)) for _ in range(2000)]
    kept = blocks[::50]
    del blocks
    before = rss()
    native_memory.release_freed()
    print(before - rss())
    """
)


def test_release_freed_hands_a_fragmented_heaps_free_pages_back() -> None:
    done = subprocess.run(
        [sys.executable, "-c", FRAGMENTED_HEAP],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    released = int(done.stdout)
    assert released > 80 * 1024 * 1024, f"only {released} bytes handed back of ~125 MiB freed"


def test_the_arena_limit_is_set_only_when_asked() -> None:
    from tasks import native_memory

    assert native_memory.limit_arenas(2) is True
    assert native_memory.limit_arenas(0) is False
