"""Search latency of the readers (run by hand): `.venv/bin/python -m bench.query_latency`.

The README quickstart's corpus (`samples/docs/`) is indexed with its settings
(`samples/quickstart.yaml`: all-MiniLM-L6-v2, hybrid with the lexical vector) into a
temporary directory by `ingest run`; then 20 English questions about the samples
(`bench/retrieval_questions.py`) are asked, limit 5, each after one warm-up query:

- `query API`: `query.api.Index.search` in this process's main thread, what `ingest
  search` runs after its start-up; `query API, worker thread`: the same in a thread, as
  the MCP SDK runs a tool (torch's CPU kernels can time differently there: on a loaded
  machine its intra-op threads contend in the main thread);
- `MCP stdio`: the `search` tool of an `ingest mcp` subprocess, through the official SDK's
  client: the query API plus JSON-RPC over the pipes and the result's validation;
- `ingest search` (with `--processes`): the command in a fresh process per question,
  start-up and model load included: what a person at a terminal waits for;
  `ingest search, served`: the same commands while an `ingest mcp --http --operator`
  server runs with the same settings, which answers them (the model loaded once).

Prints p50/p95/mean in milliseconds per reader, and a JSON summary.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import anyio

from bench.retrieval_questions import QUESTIONS

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "samples" / "quickstart.yaml"
LIMIT = 5
QUESTION_COUNT = 20


def questions() -> list[str]:
    english = [q.text for q in QUESTIONS if q.document.startswith("samples/") and q.kind != "ru"]
    return english[:QUESTION_COUNT]


def summary(seconds: list[float]) -> dict[str, float]:
    ms = sorted(s * 1000 for s in seconds)
    return {
        "p50_ms": round(statistics.median(ms), 1),
        "p95_ms": round(ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))], 1),
        "mean_ms": round(statistics.fmean(ms), 1),
        "n": len(ms),
    }


def index_samples(env: dict[str, str], workdir: Path) -> None:
    command = [sys.executable, "-m", "flows.cli", "run", "files", str(ROOT / "samples" / "docs")]
    done = subprocess.run(
        [*command, "--config", str(CONFIG), "--json"],
        env=env,
        cwd=workdir,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode not in (0, 3):  # 3: the deliberately corrupt sample failed
        raise SystemExit(f"ingest run failed:\n{done.stderr}")


def query_api(asked: list[str]) -> tuple[list[float], list[float]]:
    """The searches' seconds in the main thread, then in a worker thread."""
    from config.settings import load_settings
    from query.api import Index

    def timed(index: Index, into: list[float]) -> None:
        for question in asked:
            started = time.perf_counter()
            index.search(question, limit=LIMIT)
            into.append(time.perf_counter() - started)

    main_thread: list[float] = []
    worker: list[float] = []
    with Index(load_settings(config_file=CONFIG)) as index:
        index.search("warm up", limit=LIMIT)
        timed(index, main_thread)
        thread = threading.Thread(target=timed, args=(index, worker))
        thread.start()
        thread.join()
    return main_thread, worker


def mcp_stdio(asked: list[str], env: dict[str, str], workdir: Path) -> list[float]:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "flows.cli", "mcp", "--config", str(CONFIG)],
        env=env,
        cwd=str(workdir),
    )

    async def run() -> list[float]:
        with open(workdir / "mcp-stderr.txt", "w") as errlog:
            async with Client(stdio_client(params, errlog=errlog)) as client:
                await client.call_tool("search", {"query": "warm up", "limit": LIMIT})
                times = []
                for question in asked:
                    started = time.perf_counter()
                    result = await client.call_tool("search", {"query": question, "limit": LIMIT})
                    times.append(time.perf_counter() - started)
                    if result.is_error:
                        raise SystemExit(f"MCP search failed: {result.content}")
                return times

    return anyio.run(run)


def cli_processes(asked: list[str], env: dict[str, str], workdir: Path) -> list[float]:
    times = []
    for question in asked:
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "flows.cli", "search", question, "--config", str(CONFIG)],
            env=env,
            cwd=workdir,
            capture_output=True,
            check=True,
        )
        times.append(time.perf_counter() - started)
    return times


def served_processes(asked: list[str], env: dict[str, str], workdir: Path) -> list[float]:
    """`cli_processes` while an operator's `ingest mcp --http` server answers them."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    command = [sys.executable, "-m", "flows.cli", "mcp", "--config", str(CONFIG), "--operator"]
    with open(workdir / "mcp-http-stderr.txt", "w") as errlog:
        server = subprocess.Popen(
            [*command, "--http", f"127.0.0.1:{port}"], env=env, cwd=workdir, stderr=errlog
        )
        try:
            while server.poll() is None:
                with socket.socket() as probe:
                    if probe.connect_ex(("127.0.0.1", port)) == 0:
                        break
                time.sleep(0.2)
            if server.poll() is not None:
                raise SystemExit(f"ingest mcp --http failed: {errlog.name}")
            return cli_processes(asked, env, workdir)
        finally:
            server.terminate()
            server.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--processes", type=int, default=0, help="also time N `ingest search` processes"
    )
    args = parser.parse_args()
    asked = questions()
    report: dict[str, Any] = {"questions": len(asked), "limit": LIMIT}
    with tempfile.TemporaryDirectory(prefix="bench-query-") as tmp:
        workdir = Path(tmp)
        state = {
            "INGEST_QDRANT__PATH": str(workdir / "qdrant"),
            "INGEST_CACHE__DIR": str(workdir / "cache"),
        }
        env = {k: v for k, v in os.environ.items() if not k.startswith(("INGEST_", "PREFECT_"))}
        env |= state | {"PREFECT_HOME": str(workdir / "prefect"), "PYTHONPATH": str(ROOT)}
        started = time.perf_counter()
        index_samples(env, workdir)
        report["index_seconds"] = round(time.perf_counter() - started, 1)
        os.environ.update(state)  # the in-process reader opens the same storage
        main_thread, worker = query_api(asked)
        report["query API"] = summary(main_thread)
        report["query API, worker thread"] = summary(worker)
        report["MCP stdio"] = summary(mcp_stdio(asked, env, workdir))
        if args.processes:
            report["ingest search process"] = summary(
                cli_processes(asked[: args.processes], env, workdir)
            )
            report["ingest search, served"] = summary(
                served_processes(asked[: args.processes], env, workdir)
            )
    readers = ("query API", "query API, worker thread", "MCP stdio")
    for reader in (*readers, "ingest search process", "ingest search, served"):
        if reader in report:
            row = report[reader]
            print(
                f"{reader:26s} p50 {row['p50_ms']:8.1f} ms  p95 {row['p95_ms']:8.1f} ms  "
                f"mean {row['mean_ms']:8.1f} ms  (n={row['n']})"
            )
    print(json.dumps(report))


if __name__ == "__main__":
    main()
