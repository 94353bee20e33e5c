"""Python code run in a fresh interpreter from the checkout, for tests of what a process
imports, prints or takes in memory (a test process has imported everything already)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def clean_environment() -> dict[str, str]:
    """The environment without the developer's Prefect profile or ingest settings."""
    return {
        k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "INGEST_", "CHUNK_"))
    }


def run_python(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`code` (dedented) in a fresh interpreter, from the repository root."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**clean_environment(), "PYTHONPATH": str(ROOT), **(env or {})},
    )


def run_ingest(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """`ingest ARGS` as a user runs it: a fresh process of this checkout's command line."""
    return subprocess.run(
        [sys.executable, "-m", "flows.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=540,
        check=False,
    )


def wait_for_port(process: subprocess.Popen[str], host: str, port: int) -> None:
    """Returns once the server `process` started takes connections on `host:port`; fails
    with its output where it ended first or took over two minutes."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        with socket.socket() as probe:
            if probe.connect_ex((host, port)) == 0:
                return
        time.sleep(0.2)
    assert process.poll() is None, process.communicate()
    raise AssertionError(f"nothing answered on {host}:{port} within 120 s")
