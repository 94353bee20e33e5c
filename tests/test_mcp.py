"""`ingest mcp` as an agent meets it: the server started as a subprocess (`python -m
flows.cli mcp`) and driven by the official MCP SDK's client, over stdio and once over
streamable HTTP with bearer tokens, on a small index of the quickstart samples and one
page only user `ann` may read (tests/query_helpers.py)."""

from __future__ import annotations

import importlib.metadata
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

from testkit.tiny_model import tiny_model_dir
from tests.process_helpers import wait_for_port
from tests.query_helpers import (
    QUESTION,
    RESTART,
    SECRET_URL,
    SECRET_WORD,
    QueryIndex,
    build_query_index,
)

# The MCP server and CLI searches run as processes over a built index: outside the fast lane.
pytestmark = pytest.mark.slow

__all__ = ["tiny_model_dir"]  # fixture used below

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> QueryIndex:
    return build_query_index(tmp_path_factory.mktemp("mcp-index"), tiny_model_dir)


def server_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("INGEST_", "PREFECT_"))}
    return env | {"PYTHONPATH": str(ROOT), **extra}


@dataclass(frozen=True)
class Session:
    """What one server said: its tools, each call's result by name, its stderr; its
    version, its stderr when the client had connected, and the seconds of the first and
    the last search."""

    tools: dict[str, Any]
    calls: dict[str, Any]
    stderr: str
    version: str = ""
    stderr_at_connect: str = ""
    first_search_s: float = 0.0
    last_search_s: float = 0.0


BAD_CALLS: dict[str, tuple[str, dict[str, Any]]] = {
    "limit too big": ("search", {"query": QUESTION, "limit": 500}),
    "unknown mode": ("search", {"query": QUESTION, "mode": "psychic"}),
    "no query": ("search", {"limit": 3}),
    "unknown id": ("fetch", {"id": "no-such-document"}),
    "no terms": ("search", {"query": "   ...   ", "mode": "lexical"}),
    "unknown argument": ("search", {"query": QUESTION, "extra": 1}),
    "misspelt argument": ("fetch", {"id": "no-such-document", "expnd": "section"}),
}


def session(index: QueryIndex, *flags: str) -> Session:
    """`ingest mcp --config ... FLAGS` started on stdio and asked the same calls by the
    SDK's client: one server start per identity keeps the module fast."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "flows.cli", "mcp", "--config", str(index.config), *flags],
        env=server_env(),
        cwd=str(index.config.parent),
    )
    errlog = index.config.parent / f"stderr{'-'.join(flags)}.txt"

    async def work(client: Client) -> Session:
        at_connect = errlog.read_text()
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        started = time.monotonic()
        calls = {"answer": await client.call_tool("search", {"query": QUESTION, "limit": 3})}
        first_search_s = time.monotonic() - started
        best = structured(calls["answer"])["results"][0]
        expand = {"id": best["chunk_id"], "expand": "neighbours"}
        calls["chunk"] = await client.call_tool("fetch", expand)
        calls["document"] = await client.call_tool("fetch", {"id": best["document_id"]})
        calls["secret"] = await client.call_tool("search", {"query": SECRET_WORD, "limit": 5})
        calls["secret page"] = await client.call_tool("fetch", {"id": index.secret_id})
        calls["sources"] = await client.call_tool("list_sources", {})
        for name, (tool, arguments) in BAD_CALLS.items():
            calls[name] = await client.call_tool(tool, arguments)
        started = time.monotonic()
        calls["after"] = await client.call_tool("search", {"query": QUESTION, "limit": 1})
        last_search_s = time.monotonic() - started
        info = client.server_info
        version = info.version if info else ""
        return Session(tools, calls, "", version, at_connect, first_search_s, last_search_s)

    async def main() -> Session:
        with open(errlog, "w") as err:
            async with Client(stdio_client(params, errlog=err), read_timeout_seconds=120) as client:
                return await work(client)

    done = anyio.run(main)
    return replace(done, stderr=errlog.read_text())


@pytest.fixture(scope="module")
def public(index: QueryIndex) -> Session:
    return session(index)


@pytest.fixture(scope="module")
def ann(index: QueryIndex) -> Session:
    return session(index, "--user", "ann")


@pytest.fixture(scope="module")
def bob(index: QueryIndex) -> Session:
    return session(index, "--user", "bob", "--group", "staff")


def structured(result: Any) -> Any:
    assert not result.is_error, result.content
    return result.structured_content


def links(result: Any) -> list[str]:
    return [hit["citation_url"] for hit in structured(result)["results"]]


def test_tools_are_listed_with_schemas_a_model_can_follow(public: Session) -> None:
    assert set(public.tools) == {"search", "fetch", "list_sources"}
    search = public.tools["search"].input_schema
    assert search["required"] == ["query"]
    assert search["properties"]["limit"]["maximum"] == 8  # mcp.max_results
    assert set(search["properties"]["mode"]["enum"]) == {
        "auto",
        "hybrid",
        "dense",
        "lexical",
        "sparse",
    }
    for name in ("query", "limit", "mode", "spaces", "labels"):
        assert search["properties"][name]["description"], name
    assert "user" not in search["properties"]  # access is never the model's to choose
    assert public.tools["fetch"].input_schema["required"] == ["id"]
    assert all(tool.description and tool.output_schema for tool in public.tools.values())
    # no identity: said at start, on stderr
    assert "public documents only" in public.stderr, public.stderr
    # a limit over mcp.max_results is refused, and the description says so
    assert "at most 8" in search["properties"]["limit"]["description"]
    assert "refused" in search["properties"]["limit"]["description"]
    # arguments the schema does not name are refused (see the bad calls)
    assert search["additionalProperties"] is False
    assert public.version == importlib.metadata.version("ingest-dag")


def test_the_model_is_loaded_before_the_server_serves_so_the_first_search_is_fast(
    public: Session,
) -> None:
    # the server said it was ready before the client connected (stdio: before serving)
    assert "ready:" in public.stderr_at_connect and "loaded" in public.stderr_at_connect
    # the first question costs what a later one does, not the model's load (seconds)
    assert public.first_search_s < 5 * max(public.last_search_s, 0.5), public


def test_search_finds_the_sample_answer_with_its_link_and_fetch_widens_it(
    index: QueryIndex, public: Session
) -> None:
    found = structured(public.calls["answer"])
    best = found["results"][0]
    assert best["document_id"] == index.restart_id
    assert best["citation_url"] == RESTART.resolve().as_uri()
    assert best["breadcrumbs"] == ["restart-service.html"]
    assert best["text"] and not best["truncated"]
    assert found["access"] == "no identity: public documents only"
    chunk = structured(public.calls["chunk"])
    assert len(chunk["chunk_ids"]) > 1 and best["chunk_id"] in chunk["chunk_ids"]
    widened = chunk["result"]
    if widened["truncated"]:  # the span is longer than mcp.max_text_chars
        assert len(widened["text"]) > 2000 and "[cut at 2000 characters" in widened["text"]
    else:
        assert best["text"] in widened["text"]
    # The whole document, cut at mcp.max_text_chars and saying so.
    document = structured(public.calls["document"])["result"]
    assert document["truncated"] and "[cut at 2000 characters" in document["text"]
    assert document["citation_url"] == RESTART.resolve().as_uri()
    assert len(document["text"]) < 2000 + 100


def test_a_restricted_page_is_found_by_its_readers_server_only(
    ann: Session, bob: Session, public: Session
) -> None:
    assert links(ann.calls["secret"])[0] == SECRET_URL
    page = structured(ann.calls["secret page"])["result"]
    assert page["breadcrumbs"] == ["Human Resources", "Pay", "Bonus pool"]
    kinds = {
        source["source_type"]: source for source in structured(ann.calls["sources"])["sources"]
    }
    assert kinds["confluence"]["spaces"] == {"HR": 1}
    assert kinds["confluence"]["syncs"][0]["last_sync"] == "2026-11-26T11:00:00+00:00"
    assert "user 'ann'" in ann.stderr

    for other in (bob, public):
        found = links(other.calls["secret"])
        assert SECRET_URL not in found and found  # the public samples still answer
        fetched = other.calls["secret page"]
        assert fetched.is_error and "nothing found" in fetched.content[0].text
        sources = structured(other.calls["sources"])["sources"]
        assert {source["source_type"] for source in sources} == {"file"}  # not the space's name


def test_bad_arguments_get_a_tool_error_and_the_server_goes_on(
    index: QueryIndex, public: Session
) -> None:
    said = {name: public.calls[name] for name in BAD_CALLS}
    assert all(result.is_error for result in said.values()), said
    text = {name: result.content[0].text for name, result in said.items()}
    assert "limit" in text["limit too big"] and "mode" in text["unknown mode"]
    assert "query" in text["no query"] and "nothing found" in text["unknown id"]
    assert "rephrase" in text["no terms"]
    assert "extra" in text["unknown argument"] and "expnd" in text["misspelt argument"]
    assert structured(public.calls["after"])["results"][0]["document_id"] == index.restart_id
    assert "Traceback" not in public.stderr


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def http_mcp(index: QueryIndex, *flags: str, **env: str) -> Iterator[str]:
    """`ingest mcp --http 127.0.0.1:PORT FLAGS` running until the block ends: its URL.
    Its output holds no token when it ends."""
    port = free_port()
    command = [sys.executable, "-m", "flows.cli", "mcp", "--config", str(index.config)]
    process = subprocess.Popen(
        [*command, "--http", f"127.0.0.1:{port}", *flags],
        env=server_env(**env),
        cwd=index.config.parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for_port(process, "127.0.0.1", port)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        out, err = process.communicate(timeout=30)
        assert "token-0123456789" not in out + err  # tokens never reach the output
        assert "Traceback" not in err, err


@pytest.fixture
def http_server(index: QueryIndex) -> Iterator[str]:
    """`ingest mcp --http` with two clients' tokens (in the environment, as secrets are)."""
    clients = {
        "ann-bot": {"token": "ann-token-0123456789abcdef", "user": "ann"},
        "bob-bot": {"token": "bob-token-0123456789abcdef", "user": "bob", "groups": ["staff"]},
    }
    with http_mcp(index, INGEST_MCP__CLIENTS=json.dumps(clients)) as url:
        yield url


def test_over_http_each_bearer_token_carries_its_clients_access(http_server: str) -> None:
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    async def links(token: str | None) -> list[str]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=60) as http,
            Client(streamable_http_client(http_server, http_client=http)) as client,
        ):
            found = structured(await client.call_tool("search", {"query": SECRET_WORD}))
            return [hit["citation_url"] for hit in found["results"]]

    assert anyio.run(links, "ann-token-0123456789abcdef")[0] == SECRET_URL
    assert SECRET_URL not in anyio.run(links, "bob-token-0123456789abcdef")

    async def refused(token: str | None) -> int:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with httpx2.AsyncClient(headers=headers) as http:
            response = await http.post(http_server, json={})
            return int(response.status_code)

    assert anyio.run(refused, None) == 401
    assert anyio.run(refused, "guessed-token-0000000000") == 401


def test_search_command_reads_through_the_query_api_without_mcp_or_prefect(
    index: QueryIndex,
) -> None:
    code = (
        "import contextlib, io, json, sys\n"
        "from flows.cli import main\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out):\n"
        f"    code = main(['search', {QUESTION!r}, '--config', {str(index.config)!r}, '--json'])\n"
        "loaded = [m for m in ('mcp', 'prefect', 'langchain_core', 'llama_index') if m in sys.modules]\n"
        "print(json.dumps({'code': code, 'out': out.getvalue(), 'loaded': loaded}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=server_env(),
        cwd=index.config.parent,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["code"] == 0 and result["loaded"] == []
    first = json.loads(result["out"].splitlines()[0])
    assert first["rank"] == 1 and first["document_id"] == index.restart_id


def test_search_results_carry_a_snippet_around_the_querys_words_beside_the_text(
    public: Session,
) -> None:
    best = structured(public.calls["answer"])["results"][0]
    # the query "how do I restart a service": its telling words, marked in plain text
    assert "**restart**" in best["snippet"].lower() or "**service" in best["snippet"].lower()
    assert "#" not in best["snippet"] and len(best["snippet"]) <= 300
    assert "**restart**" not in best["text"].lower()  # the text is the passage, unmarked
    assert best["location"].startswith("part ")
    # a fetch has no query: its snippet is the passage's beginning, unmarked
    chunk = structured(public.calls["chunk"])["result"]
    assert chunk["snippet"] and "**" not in chunk["snippet"]


def search_command(index: QueryIndex, *args: str) -> subprocess.CompletedProcess[str]:
    """`ingest search ARGS` as a person runs it, on an 80-column terminal's width."""
    return subprocess.run(
        [sys.executable, "-m", "flows.cli", "search", *args, "--config", str(index.config)],
        env=server_env(COLUMNS="80"),
        cwd=index.config.parent,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )


def test_the_search_command_shows_the_words_that_matched_deep_in_a_chunk(
    index: QueryIndex,
) -> None:
    # The word is far into its chunk of the restart runbook: the line shows it, marked,
    # with an ellipsis where the chunk's beginning was left out.
    done = search_command(index, "CrashLoopBackOff", "--mode", "lexical", "--limit", "1")
    heading, link, line = done.stdout.splitlines()
    assert link.strip() == RESTART.resolve().as_uri()
    assert line.startswith("   …") and "**CrashLoopBackOff**" in line, line
    assert len(line) <= 80 and heading.startswith("1. [")


def served_by(done: subprocess.CompletedProcess[str]) -> bool:
    return "answered by `ingest mcp`" in done.stderr


def test_a_running_http_server_answers_the_search_command_for_its_identity_only(
    index: QueryIndex,
) -> None:
    discovery = index.config.parent / "qdrant" / "mcp-http.json"
    asked = {
        "ann": (SECRET_WORD, "--user", "ann"),
        "bob": (SECRET_WORD, "--user", "bob"),
        "operator": (QUESTION, "--limit", "3"),
    }
    alone = {name: search_command(index, *args) for name, args in asked.items()}
    assert not any(served_by(done) for done in alone.values())
    assert SECRET_URL in alone["ann"].stdout and SECRET_URL not in alone["bob"].stdout

    with http_mcp(index, "--user", "ann"):
        assert json.loads(discovery.read_text())["user"] == "ann"
        assert discovery.stat().st_mode & 0o077 == 0  # its owner's only
        served = {name: search_command(index, *asked[name]) for name in ("ann", "bob")}
        # ann's search is the server's: the same hits, lines and links
        assert served_by(served["ann"]), served["ann"].stderr
        assert served["ann"].stdout == alone["ann"].stdout
        # another identity is searched by the command itself, as without the server
        assert not served_by(served["bob"]) and served["bob"].stdout == alone["bob"].stdout
        # A file that claims the server serves bob: the server's answer says ann, so the
        # command does not use it and searches as bob itself.
        claim = json.loads(discovery.read_text()) | {"user": "bob"}
        discovery.write_text(json.dumps(claim))
        tricked = search_command(index, *asked["bob"])
        assert not served_by(tricked) and "user 'ann'" in tricked.stderr
        assert tricked.stdout == alone["bob"].stdout and SECRET_URL not in tricked.stdout
    assert not discovery.exists()  # the server took its file with it

    with http_mcp(index, "--operator") as url:
        served_operator = search_command(index, *asked["operator"])
        assert served_by(served_operator)
        assert served_operator.stdout == alone["operator"].stdout

        async def status_without_token() -> int:
            import httpx2

            async with httpx2.AsyncClient() as http:
                return int((await http.post(url, json={})).status_code)

        # the unfiltered view is the token holder's (whoever can read the store) only
        assert anyio.run(status_without_token) == 401
