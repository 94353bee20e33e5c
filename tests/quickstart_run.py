"""The README quickstart's first run as a new user starts it: `ingest run files
samples/docs --config samples/quickstart.yaml` in a fresh process, in a terminal, on
Prefect's ephemeral API, with the quickstart's real model (all-MiniLM-L6-v2 from PyPI).
tests/test_quickstart.py checks the run; it and tests/test_eval.py read its index (the
session fixture `quickstart` in tests/conftest.py)."""

from __future__ import annotations

import fcntl
import os
import pty
import shutil
import struct
import subprocess
import sys
import termios
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "samples" / "quickstart.yaml"


def in_terminal(
    args: list[str], env: dict[str, str], cwd: Path, stdout: Path | None = None
) -> tuple[int, str]:
    """`ingest ARGS` with a pseudo-terminal for its output, as a user's shell runs it
    (Prefect shows its telemetry notice and rich its live progress only there); with
    `stdout`, its stdout goes to that file as `> FILE` sends it. Returns the exit code
    and the output."""
    main, child = pty.openpty()
    # wide enough that no line of the summary wraps
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 400, 0, 0))
    with open(stdout or os.devnull, "w") as redirected:
        process = subprocess.Popen(
            [sys.executable, "-m", "flows.cli", *args],
            cwd=cwd,
            env=env | {"TERM": "xterm", "COLUMNS": "400", "LINES": "40"},
            stdin=child,
            stdout=child if stdout is None else redirected,
            stderr=child,
        )
    os.close(child)
    output = bytearray()
    while True:
        try:
            data = os.read(main, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        output += data
    os.close(main)
    code = process.wait(timeout=540)
    return code, output.decode("utf-8", errors="replace")


@dataclass(frozen=True)
class Quickstart:
    """The quickstart's first run, in a terminal, and how to run `ingest` again on it."""

    code: int
    output: str
    home: Path
    env: dict[str, str]
    args: list[str]
    cwd: Path
    docs: Path


def first_run(tmp_path: Path) -> Quickstart:
    """The quickstart run in `tmp_path` on a copy of the samples, its state there too."""
    docs = shutil.copytree(ROOT / "samples" / "docs", tmp_path / "docs")
    home = tmp_path / "job" / "nested" / "prefect-home"  # no parent exists yet
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "INGEST_"))}
    env |= {
        "PREFECT_HOME": str(home),
        "INGEST_QDRANT__PATH": str(tmp_path / "state" / "qdrant"),
        "INGEST_CACHE__DIR": str(tmp_path / "state" / "cache"),
        "PYTHONPATH": str(ROOT),
    }
    args = ["run", "files", str(docs), "--config", str(CONFIG)]
    code, output = in_terminal(args, env, tmp_path)
    return Quickstart(code, output, home, env, args, tmp_path, docs)
