"""`ingest mcp` as an agent meets it: the server started as a subprocess (`python -m
flows.cli mcp`) and driven by the official MCP SDK's client, over stdio and once over
streamable HTTP with bearer tokens, on a small index of the quickstart samples and one
page only user `ann` may read (tests/query_helpers.py)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

from tests.query_helpers import (
    QUESTION,
    RESTART,
    SECRET_URL,
    SECRET_WORD,
    QueryIndex,
    build_query_index,
)
from tests.tiny_model import tiny_model_dir

__all__ = ["tiny_model_dir"]  # fixture used below

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> QueryIndex:
    return build_query_index(tmp_path_factory.mktemp("mcp-index"), tiny_model_dir)


def server_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("INGEST_", "PREFECT_"))}
    return env | {"PYTHONPATH": str(ROOT), **extra}


def over_stdio(index: QueryIndex, *flags: str) -> tuple[StdioServerParameters, Path]:
    """`ingest mcp --config ... FLAGS` on stdio, and the file its stderr goes to."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "flows.cli", "mcp", "--config", str(index.config), *flags],
        env=server_env(),
        cwd=str(index.config.parent),
    )
    return params, index.config.parent / "stderr.txt"


def run_client(
    params: StdioServerParameters, work: Callable[[Client], Awaitable[Any]], errlog: Path
) -> Any:
    """`work` done by the SDK's client of a server started for it."""

    async def main() -> Any:
        with open(errlog, "w") as err:
            async with Client(stdio_client(params, errlog=err), read_timeout_seconds=120) as client:
                return await work(client)

    return anyio.run(main)


def structured(result: Any) -> Any:
    assert not result.is_error, result.content
    return result.structured_content


def test_tools_are_listed_with_schemas_a_model_can_follow(index: QueryIndex) -> None:
    params, errlog = over_stdio(index)
    tools = run_client(params, lambda c: c.list_tools(), errlog).tools
    by_name = {tool.name: tool for tool in tools}
    assert set(by_name) == {"search", "fetch", "list_sources"}
    search = by_name["search"].input_schema
    assert search["required"] == ["query"]
    assert search["properties"]["limit"]["maximum"] == 20  # mcp.max_results
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
    assert by_name["fetch"].input_schema["required"] == ["id"]
    assert all(tool.description and tool.output_schema for tool in tools)
    said = errlog.read_text()
    assert "public documents only" in said, said  # no identity: said at start, on stderr


def test_search_finds_the_sample_answer_with_its_link_and_fetch_widens_it(
    index: QueryIndex,
) -> None:
    async def work(client: Client) -> tuple[Any, Any, Any]:
        found = structured(await client.call_tool("search", {"query": QUESTION, "limit": 3}))
        best = found["results"][0]
        chunk = structured(
            await client.call_tool("fetch", {"id": best["chunk_id"], "expand": "neighbours"})
        )
        document = structured(await client.call_tool("fetch", {"id": best["document_id"]}))
        return found, chunk, document

    params, errlog = over_stdio(index)
    found, chunk, document = run_client(params, work, errlog)
    best = found["results"][0]
    assert best["document_id"] == index.restart_id
    assert best["citation_url"] == RESTART.resolve().as_uri()
    assert best["breadcrumbs"] == ["restart-service.html"]
    assert best["text"] and not best["truncated"]
    assert found["access"] == "no identity: public documents only"
    assert len(chunk["chunk_ids"]) > 1 and best["chunk_id"] in chunk["chunk_ids"]
    assert best["text"] in chunk["result"]["text"]
    # The whole document: cut at mcp.max_text_chars, and saying so.
    assert document["result"]["truncated"] is (len(RESTART.read_text()) > 4000)
    assert document["result"]["citation_url"] == RESTART.resolve().as_uri()


def test_a_restricted_page_is_found_by_its_readers_server_only(index: QueryIndex) -> None:
    async def work(client: Client) -> tuple[list[str], Any, Any]:
        found = structured(await client.call_tool("search", {"query": SECRET_WORD, "limit": 5}))
        fetched = await client.call_tool("fetch", {"id": index.secret_id})
        sources = structured(await client.call_tool("list_sources", {}))
        return [hit["citation_url"] for hit in found["results"]], fetched, sources

    params, errlog = over_stdio(index, "--user", "ann")
    links, fetched, sources = run_client(params, work, errlog)
    assert links[0] == SECRET_URL
    assert structured(fetched)["result"]["breadcrumbs"] == ["Human Resources", "Pay", "Bonus pool"]
    kinds = {source["source_type"]: source for source in sources["sources"]}
    assert kinds["confluence"]["spaces"] == {"HR": 1}
    assert kinds["confluence"]["syncs"][0]["last_sync"] == "2026-11-26T11:00:00+00:00"
    assert "user 'ann'" in errlog.read_text()

    for flags in (("--user", "bob", "--group", "staff"), ()):
        params, errlog = over_stdio(index, *flags)
        links, fetched, sources = run_client(params, work, errlog)
        assert SECRET_URL not in links and links  # the public samples still answer
        assert fetched.is_error and "nothing found" in fetched.content[0].text
        kinds = {source["source_type"]: source for source in sources["sources"]}
        assert set(kinds) == {"file"}  # not even the space's name


def test_bad_arguments_get_a_tool_error_and_the_server_goes_on(index: QueryIndex) -> None:
    async def work(client: Client) -> list[Any]:
        return [
            await client.call_tool("search", {"query": QUESTION, "limit": 500}),
            await client.call_tool("search", {"query": QUESTION, "mode": "psychic"}),
            await client.call_tool("search", {"limit": 3}),
            await client.call_tool("fetch", {"id": "no-such-document"}),
            await client.call_tool("search", {"query": "   ...   ", "mode": "lexical"}),
            await client.call_tool("search", {"query": QUESTION, "limit": 1}),
        ]

    params, errlog = over_stdio(index)
    *bad, good = run_client(params, work, errlog)
    assert all(result.is_error for result in bad), bad
    texts = [result.content[0].text for result in bad]
    assert "limit" in texts[0] and "mode" in texts[1] and "query" in texts[2]
    assert "nothing found" in texts[3] and "rephrase" in texts[4]
    assert structured(good)["results"][0]["document_id"] == index.restart_id
    assert "Traceback" not in errlog.read_text()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def http_server(index: QueryIndex) -> Iterator[str]:
    """`ingest mcp --http` with two clients' tokens (in the environment, as secrets are)."""
    port = free_port()
    clients = {
        "ann-bot": {"token": "ann-token-0123456789abcdef", "user": "ann"},
        "bob-bot": {"token": "bob-token-0123456789abcdef", "user": "bob", "groups": ["staff"]},
    }
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "flows.cli",
            "mcp",
            "--config",
            str(index.config),
            "--http",
            f"127.0.0.1:{port}",
        ],
        env=server_env(INGEST_MCP__CLIENTS=json.dumps(clients)),
        cwd=index.config.parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and process.poll() is None:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.2)
        assert process.poll() is None, process.communicate()
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        out, err = process.communicate(timeout=30)
        assert "token-0123456789" not in out + err  # tokens never reach the output


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
