"""Memory, measured one way by every bench: a process's own resident set, read from the
kernel in the process measured (usually a fresh child, so that the figure is that work's
alone). `peak_rss_mib` is the high-water mark since the process's exec (`VmHWM`):
getrusage's `ru_maxrss` in a child can carry the parent's resident pages from before the
exec, and `RUSAGE_CHILDREN` is the largest of every child waited for so far."""

from __future__ import annotations

from pathlib import Path


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise SystemExit(f"no {field} in /proc/self/status: the benches' memory figures need Linux")


def peak_rss_mib() -> float:
    """This process's peak resident set since its exec, in MiB."""
    return _status_kib("VmHWM") / 1024


def rss_mib() -> float:
    """This process's resident set now, in MiB."""
    return _status_kib("VmRSS") / 1024
