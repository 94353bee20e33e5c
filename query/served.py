"""`ingest search` answered by a running `ingest mcp --http` server, which has the model
loaded and the index open: a search in a fraction of a second instead of the seconds a
process takes to load them.

The server says where it listens in a small file beside the store (`mcp-http.json` in
`qdrant.path`, or in `cache.dir` with a Qdrant server), readable by its owner only, with
the identity it serves, fixed when it started. `ingest search` asks it only when that
identity is exactly the one the command was given (no `--user`/`--group`: a server
started with `--operator`) and its settings name the same collection, tenant, model and
search settings; and it uses the answer only when the server says it applied that
identity. Anything else (no server, another identity, an option the `search` tool lacks,
a server that does not answer) is searched in the command's own process, as without a
server.

The command speaks MCP's streamable HTTP itself, with the standard library: the SDK's
client takes longer to import than the whole search. Nothing here imports the query API,
the model or the store.
"""

from __future__ import annotations

import http.client
import json
import os
import secrets
import urllib.parse
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from config.settings import Settings
from query.identity import Identity, describe_access

DISCOVERY_FILE = "mcp-http.json"
_PROTOCOL = "2025-11-25"
_TIMEOUT_S = 30.0


def discovery_path(settings: Settings) -> Path:
    """Where a server with these settings says it listens: beside the embedded store, or
    in the stage cache's directory with a Qdrant server (no store directory)."""
    folder = settings.cache.dir if settings.qdrant.url else settings.qdrant.path
    return Path(folder) / DISCOVERY_FILE


def _settings_key(settings: Settings) -> dict[str, Any]:
    """What must be the same for the server to answer as the command would."""
    return {
        "collection": settings.qdrant.collection,
        "qdrant": settings.qdrant.url or str(Path(settings.qdrant.path).resolve()),
        "tenant_id": settings.tenant_id,
        "model": settings.embedder.model,
        "search": settings.search.model_dump(mode="json"),
        "lexical": settings.lexical.model_dump(mode="json"),
        "max_results": settings.mcp.max_results,
    }


@contextmanager
def announced(settings: Settings, url: str, identity: Identity | None) -> Iterator[str | None]:
    """While the server listens at `url` serving `identity`, the discovery file says so;
    it goes when the server stops. The operator's view (None) is served only to requests
    with the token written there (yielded): to whoever can read the store anyway."""
    token = secrets.token_hex(32) if identity is None else None
    path = discovery_path(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "url": url,
        "pid": os.getpid(),
        "operator": identity is None,
        "user": identity.user if identity else None,
        "groups": sorted(identity.groups) if identity else [],
        "token": token,
        **_settings_key(settings),
    }
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as out:
        json.dump(record, out)
    partial.replace(path)
    try:
        yield token
    finally:
        # another server may have announced itself since: its file stays
        if _read(path).get("pid") == os.getpid():
            path.unlink(missing_ok=True)


def _read(path: Path) -> dict[str, Any]:
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


@dataclass(frozen=True)
class Server:
    """A running server that serves the command's identity with its settings."""

    url: str
    pid: int
    token: str | None


def find_server(settings: Settings, identity: Identity | None) -> Server | None:
    """The server announced for `settings` if it serves exactly `identity`, else None."""
    found = _read(discovery_path(settings))
    if not found or any(found.get(k) != v for k, v in _settings_key(settings).items()):
        return None
    if identity is None:
        same = found.get("operator") is True
    else:
        same = (
            found.get("operator") is False
            and found.get("user") == identity.user
            and found.get("groups") == sorted(identity.groups)
        )
    if not same or not _alive(found.get("pid")):
        return None
    return Server(str(found["url"]), int(found["pid"]), found.get("token"))


def _alive(pid: object) -> bool:
    if not isinstance(pid, int):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


class NotServed(Exception):
    """The server did not answer as asked; the command searches itself."""


def search(
    server: Server,
    identity: Identity | None,
    query: str,
    *,
    limit: int,
    mode: str,
    spaces: Sequence[str],
    labels: Sequence[str],
) -> list[dict[str, Any]]:
    """The `search` tool's results for the arguments, as the server's MCP answer holds
    them. Raises `NotServed` when the server is not reachable, refuses, or says it
    applied another identity than `identity`."""
    arguments: dict[str, Any] = {"query": query, "limit": limit, "mode": mode}
    arguments |= {"spaces": list(spaces), "labels": list(labels)}
    with _Session(server) as session:
        answer = session.call_tool("search", arguments)
    if answer.get("isError") or not isinstance(answer.get("structuredContent"), dict):
        raise NotServed(_error_text(answer))
    content = answer["structuredContent"]
    if content.get("access") != describe_access(identity):
        raise NotServed(f"the server applied {content.get('access')!r}")
    results = content.get("results")
    if not isinstance(results, list):
        raise NotServed("no results in the answer")
    return results


def _error_text(answer: dict[str, Any]) -> str:
    texts = [part.get("text", "") for part in answer.get("content") or [] if isinstance(part, dict)]
    return " ".join(texts) or "no structured answer"


class _Session:
    """One MCP session over streamable HTTP: initialize, the calls, then ended."""

    def __init__(self, server: Server) -> None:
        url = urllib.parse.urlsplit(server.url)
        if url.scheme != "http" or not url.hostname or not url.port:
            raise NotServed(f"not an http://HOST:PORT address: {server.url}")
        self._path = url.path or "/"
        self._connection = http.client.HTTPConnection(url.hostname, url.port, timeout=_TIMEOUT_S)
        self._headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        }
        if server.token:
            self._headers["Authorization"] = f"Bearer {server.token}"
        self._ids = 0

    def __enter__(self) -> _Session:
        try:
            self._request(
                "initialize",
                {
                    "protocolVersion": _PROTOCOL,
                    "capabilities": {},
                    "clientInfo": {"name": "ingest search", "version": "1"},
                },
            )
            self._headers["MCP-Protocol-Version"] = _PROTOCOL
            self._post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        except BaseException:
            self._connection.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if "mcp-session-id" in self._headers:
                self._connection.request("DELETE", self._path, headers=self._headers)
                self._connection.getresponse().read()
        except OSError:
            pass  # the answer is in hand; the server ends an abandoned session itself
        finally:
            self._connection.close()

    def call_tool(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return self._request("tools/call", {"name": name, "arguments": arguments})

    def _request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self._ids += 1
        message = {"jsonrpc": "2.0", "id": self._ids, "method": method, "params": params}
        for reply in self._post(message):
            if reply.get("id") == self._ids:
                if "error" in reply:
                    raise NotServed(str(reply["error"].get("message", reply["error"])))
                result = reply.get("result")
                if isinstance(result, dict):
                    return result
        raise NotServed(f"no answer to {method}")

    def _post(self, message: dict[str, Any]) -> list[dict[str, Any]]:
        """The JSON-RPC messages of the answer, as JSON or as server-sent events."""
        try:
            self._connection.request(
                "POST", self._path, body=json.dumps(message), headers=self._headers
            )
            response = self._connection.getresponse()
            body = response.read().decode("utf-8", errors="replace")
        except OSError as exc:
            raise NotServed(f"no answer: {exc}") from None
        if response.status >= 400:
            raise NotServed(f"HTTP {response.status}: {body[:200]}")
        session = response.getheader("mcp-session-id")
        if session:
            self._headers["mcp-session-id"] = session
        if not body.strip():
            return []
        if (response.getheader("content-type") or "").startswith("text/event-stream"):
            data = [line[5:].strip() for line in body.splitlines() if line.startswith("data:")]
            return [json.loads(item) for item in data if item]
        found = json.loads(body)
        return found if isinstance(found, list) else [found]
