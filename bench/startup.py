"""What a user waits for at the command line, each command in a fresh process:

- `ingest chunk` of a small Markdown file: wall and CPU seconds (start-up dominates);
- the README quickstart in a fresh state directory: the first run, then an unchanged
  re-run (which needs no flow run), then the re-run with `--always-flow` (Prefect's
  ephemeral API started for nothing to do: what every re-run cost before);
- robustness under load: with `--busy N` CPU-bound processes running, `--runs M` quickstart
  runs in a row (`--always-flow`, each with a new PREFECT_HOME, so each starts and migrates
  an ephemeral API): how many complete.

Usage: .venv/bin/python -m bench.startup [--busy 4 --runs 5]
Run it on an otherwise idle machine; it prints one line per measurement and a JSON summary.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ["run", "files", "samples/docs", "--config", "samples/quickstart.yaml"]


def timed(args: list[str], env: dict[str, str]) -> dict[str, Any]:
    """Wall and CPU seconds (the process and its children) of one `ingest` command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "flows.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {
        "exit": done.returncode,
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "error": done.stderr.strip().splitlines()[-1] if done.returncode else "",
    }


def environment(state: Path, prefect_home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "INGEST_"))}
    return env | {
        "PREFECT_HOME": str(prefect_home),
        "INGEST_QDRANT__PATH": str(state / "qdrant"),
        "INGEST_CACHE__DIR": str(state / "cache"),
    }


def burn(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        sum(i * i for i in range(10_000))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--busy", type=int, default=4, help="CPU-bound processes for the load test")
    parser.add_argument("--runs", type=int, default=5, help="quickstart runs under load")
    args = parser.parse_args()
    results: dict[str, Any] = {"load_before": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        env = environment(base / "state", base / "home" / "prefect")
        sample = ROOT / "samples" / "docs" / "handbook" / "onboarding.md"
        results["chunk_small_file"] = [timed(["chunk", str(sample)], env) for _ in range(3)]
        results["quickstart_first"] = timed(QUICKSTART, env)
        results["quickstart_unchanged"] = timed(QUICKSTART, env)
        results["quickstart_unchanged_always_flow"] = timed([*QUICKSTART, "--always-flow"], env)
        for name in ("chunk_small_file", "quickstart_first", "quickstart_unchanged"):
            print(name, results[name], flush=True)

        workers = [
            multiprocessing.Process(target=burn, args=(3600,), daemon=True)
            for _ in range(args.busy)
        ]
        for worker in workers:
            worker.start()
        try:
            loaded = []
            for i in range(args.runs):
                shutil.rmtree(base / "state", ignore_errors=True)
                run_env = environment(base / "state", base / f"loaded-{i}" / "prefect")
                loaded.append(timed([*QUICKSTART, "--always-flow"], run_env))
                print(f"under load {i + 1}/{args.runs}", loaded[-1], flush=True)
        finally:
            for worker in workers:
                worker.terminate()
        results["under_load"] = {
            "busy_processes": args.busy,
            "runs": loaded,
            "completed": sum(1 for r in loaded if r["exit"] == 0),
        }
    print(json.dumps(results))


if __name__ == "__main__":
    main()
