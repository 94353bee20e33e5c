"""The README quickstart as a new user runs it: `ingest run files samples/docs --config
samples/quickstart.yaml` in a fresh process, on Prefect's ephemeral API, with the
quickstart's real model (all-MiniLM-L6-v2 from PyPI).

A per-job PREFECT_HOME whose parents do not exist yet is normal (Prefect creates one level
only, and its server then died with a bare start-up timeout); the output of a normal run
is the summary and the one CORRUPT line of the sample's truncated PDF, with no ERROR line,
library table or traceback; the re-run is all cache hits.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOISE = ("ERROR", "Traceback", "LOAD REPORT", "UNEXPECTED", "Warning", "warn(")


def ingest(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "flows.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=540,
        check=False,
    )


def test_quickstart_run_is_quiet_creates_its_directories_and_reruns_from_cache(
    tmp_path: Path,
) -> None:
    docs = shutil.copytree(ROOT / "samples" / "docs", tmp_path / "docs")
    home = tmp_path / "job" / "nested" / "prefect-home"  # no parent exists yet
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "INGEST_"))}
    env |= {
        "PREFECT_HOME": str(home),
        "INGEST_QDRANT__PATH": str(tmp_path / "state" / "qdrant"),
        "INGEST_CACHE__DIR": str(tmp_path / "state" / "cache"),
        "PYTHONPATH": str(ROOT),
    }
    args = ["run", "files", str(docs), "--config", str(ROOT / "samples" / "quickstart.yaml")]

    first = ingest(args, env, tmp_path)

    output = first.stdout + first.stderr
    assert first.returncode == 0, output
    assert home.is_dir()
    assert not [word for word in NOISE if word in output], output
    assert output.count("CORRUPT") == 1 and "corrupt.pdf" in output
    assert "seen" in output and "unchanged" in output  # the summary table

    again = ingest([*args, "--json"], env, tmp_path)
    assert again.returncode == 0, again.stderr
    assert not [word for word in NOISE if word in again.stderr], again.stderr
    summary = json.loads(again.stdout)
    assert summary["unchanged"] == summary["seen"] - 1 and summary["new"] == 0
