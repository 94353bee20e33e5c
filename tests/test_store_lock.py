"""An embedded store another process holds, as a user meets it: `ingest run` (a fresh
process, as the command line starts it) while a real second process holds the store, and
`ingest mcp` (a real server driven by the MCP SDK's client) that must not block a run
once it is idle. The embedded store is one process's at a time (a lock file beside it).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

from indexing.store_lock import read_holder
from testkit.tiny_model import tiny_model_dir
from tests.process_helpers import ROOT, clean_environment
from tests.query_helpers import QUESTION, QueryIndex, build_query_index

__all__ = ["tiny_model_dir"]  # fixture used below

# Another process: it takes the store at `argv[1]` and says "held"; a line on its stdin
# lets go ("free"), the end of its stdin ends it.
HOLDER = textwrap.dedent(
    """
    import sys
    from config.settings import QdrantSettings
    from indexing.qdrant_store import QdrantConnection

    connection = QdrantConnection(QdrantSettings(path=sys.argv[1]))
    assert connection.client is not None  # opening takes the store
    print("held", flush=True)
    sys.stdin.readline()
    connection.close()
    print("free", flush=True)
    sys.stdin.read()
    """
)

# `ingest run files ...` in a fresh interpreter, as the command line runs it: "ready"
# once imported, then its exit code and whether Prefect was imported on the last line.
RUN = textwrap.dedent(
    """
    import json, sys, time
    from flows.cli import main
    print("ready", flush=True)
    started = time.monotonic()
    code = main(sys.argv[1:])
    print(json.dumps({"code": code, "prefect": "prefect" in sys.modules,
                      "seconds": time.monotonic() - started}))
    """
)


class Holder:
    def __init__(self, path: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(path)],
            cwd=ROOT,
            env={**clean_environment(), "PYTHONPATH": str(ROOT)},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._heard() == "held"

    def _heard(self) -> str:
        assert self.process.stdout is not None
        return self.process.stdout.readline().strip()

    def let_go(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write("\n")
        self.process.stdin.flush()
        assert self._heard() == "free"

    def stop(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=30)


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[Holder]:
    held = Holder(tmp_path / "qdrant")
    yield held
    held.stop()


def run_env(tmp_path: Path, model: Path, **settings: str) -> dict[str, str]:
    return {
        **clean_environment(),
        "PYTHONPATH": str(ROOT),
        "PREFECT_HOME": str(tmp_path / "prefect"),
        "INGEST_QDRANT__PATH": str(tmp_path / "qdrant"),
        "INGEST_CACHE__DIR": str(tmp_path / "cache"),
        "INGEST_EMBEDDER__MODEL": str(model),
        "INGEST_EMBEDDER__DEVICE": "cpu",
        **settings,
    }


def start_run(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    """`ingest run ARGS` started; returns once it has imported the command line."""
    process = subprocess.Popen(
        [sys.executable, "-c", RUN, "run", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None and process.stdout.readline().strip() == "ready"
    return process


def finish_run(process: subprocess.Popen[str]) -> tuple[dict[str, Any], list[str], str]:
    """The run's exit code and import record, the lines it printed to stdout before
    them, and its stderr."""
    stdout, stderr = process.communicate(timeout=300)
    lines = stdout.strip().splitlines()
    assert lines, stderr
    return json.loads(lines[-1]), lines[:-1], stderr


def test_a_run_against_a_held_store_says_who_holds_it_in_one_line_before_prefect_starts(
    tmp_path: Path, tiny_model_dir: Path, holder: Holder
) -> None:
    """Exit 6 in about a second, one line on stderr naming the store, its holder's pid
    and what to do; no traceback; Prefect never imported. (It used to start Prefect and
    fail after 30-45 s with two Prefect tracebacks, as UPSERT_FAILED.)"""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "note.md").write_text("# Note\n\nA note to index.\n", encoding="utf-8")
    env = run_env(tmp_path, tiny_model_dir, INGEST_QDRANT__LOCK_WAIT_S="0")

    done, printed, stderr = finish_run(start_run(env, "files", str(docs)))

    assert done["code"] == 6 and not done["prefect"], stderr
    assert done["seconds"] < 10
    assert printed == []
    [line] = stderr.strip().splitlines()
    store = (tmp_path / "qdrant").resolve()
    assert line.startswith("error: ") and "Traceback" not in stderr
    assert f"{docs}: the embedded Qdrant store at {store} is held by `python" in line
    assert f"(pid {holder.process.pid}," in line and "wait for it to finish or stop it" in line
    assert "qdrant.url" in line and "nothing was read or written" in line

    done, printed, stderr = finish_run(start_run(env, "files", str(docs), "--json"))
    assert done["code"] == 6 and not done["prefect"] and stderr == ""
    [summary] = [json.loads(line) for line in printed]
    assert summary["status"] == "store_busy" and summary["seen"] == 0
    [failure] = summary["failed"]
    assert failure["code"] == "STORE_BUSY" and f"(pid {holder.process.pid}," in failure["message"]


def test_a_run_waits_for_a_holder_that_lets_go_within_lock_wait_s(
    tmp_path: Path, tiny_model_dir: Path, holder: Holder
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    env = run_env(tmp_path, tiny_model_dir, INGEST_QDRANT__LOCK_WAIT_S="60")
    run = start_run(env, "files", str(docs), "--json")
    # the run says it waits, naming the store and its holder, as it starts waiting
    assert run.stderr is not None
    waiting = run.stderr.readline().strip()
    store = (tmp_path / "qdrant").resolve()
    assert waiting.startswith(f"the embedded Qdrant store at {store} is held by `python")
    assert f"(pid {holder.process.pid}," in waiting
    assert waiting.endswith("waiting up to 60 s for it (qdrant.lock_wait_s)")
    time.sleep(1)
    holder.let_go()
    done, printed, stderr = finish_run(run)
    assert done["code"] == 0, stderr
    assert json.loads(printed[-1])["status"] == "ok"
    # and once it has the store, how long it waited
    (got,) = stderr.strip().splitlines()
    waited = re.fullmatch(r"got the embedded Qdrant store at (.+) after waiting ([0-9.]+) s", got)
    assert waited is not None and waited.group(1) == str(store), got
    assert 1 <= float(waited.group(2)) <= done["seconds"]


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> QueryIndex:
    return build_query_index(tmp_path_factory.mktemp("lock-index"), tiny_model_dir)


@pytest.mark.slow
def test_an_idle_mcp_server_lets_the_store_go_and_its_next_query_works(
    index: QueryIndex, tmp_path: Path
) -> None:
    """While `ingest mcp` has just answered, a run that does not wait is told the server
    holds the store and to stop or wait for it; once the server has been idle for
    `qdrant.idle_release_s`, a run goes through, and the server's next query opens the
    store again and answers."""
    store = index.config.parent / "qdrant"
    docs = tmp_path / "docs"
    docs.mkdir()
    env = {
        **clean_environment(),
        "PYTHONPATH": str(ROOT),
        "PREFECT_HOME": str(tmp_path / "prefect"),
        "INGEST_QDRANT__LOCK_WAIT_S": "0",
    }
    run_args = ("--config", str(index.config), "files", str(docs), "--json")
    idle_release_s = 8.0
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "flows.cli", "mcp", "--config", str(index.config)],
        env={**env, "INGEST_QDRANT__IDLE_RELEASE_S": str(idle_release_s)},
        cwd=str(index.config.parent),
    )
    outcome: dict[str, Any] = {}

    def run() -> tuple[dict[str, Any], list[str], str]:
        return finish_run(start_run(env, *run_args))

    async def work(client: Client) -> None:
        first = await client.call_tool("search", {"query": QUESTION, "limit": 3})
        assert not first.is_error and first.structured_content["results"]
        answered = time.monotonic()
        holder = read_holder(store)
        assert holder is not None and holder.command == "ingest mcp"
        outcome["blocked"] = await anyio.to_thread.run_sync(run)
        assert time.monotonic() - answered < idle_release_s, "the server let go too soon"
        deadline = time.monotonic() + 30
        while read_holder(store) is not None:  # the server lets go once idle
            assert time.monotonic() < deadline, "the idle server kept the store"
            await anyio.sleep(0.2)
        outcome["free"] = await anyio.to_thread.run_sync(run)
        after = await client.call_tool("search", {"query": QUESTION, "limit": 3})
        assert not after.is_error, after.content
        outcome["after"] = after.structured_content["results"]

    async def main() -> None:
        with open(tmp_path / "mcp-stderr.txt", "w") as err:
            async with Client(stdio_client(params, errlog=err), read_timeout_seconds=120) as client:
                await work(client)

    anyio.run(main)

    done, printed, stderr = outcome["blocked"]
    assert done["code"] == 6, stderr
    [message] = json.loads(printed[-1])["failed"]
    assert "held by `ingest mcp` (pid" in message["message"]
    assert "stop or wait for the `ingest mcp` server" in message["message"]
    done, printed, stderr = outcome["free"]
    assert done["code"] == 0, stderr
    assert json.loads(printed[-1])["status"] == "ok"
    assert outcome["after"]  # the next query opened the store again
