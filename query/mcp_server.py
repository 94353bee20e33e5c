"""`ingest mcp`: the index served to agents over MCP (the official `mcp` SDK), on stdio or
streamable HTTP. Tools: `search`, `fetch`, `list_sources`; every result carries its
citation link and breadcrumbs.

Whose access applies is fixed when the server starts, never an argument a model could
set: `--user`/`--group`, or over HTTP the bearer token of a client in `mcp.clients` (each
mapped to a user and groups); with neither, only public documents are served, and the
server says so on stderr (stdout is the stdio transport). Answers are bounded: a search
returns at most `mcp.max_results` results (a larger `limit` is refused) and a result's
text at most `mcp.max_text_chars` characters, the cut said in the text. A tool refuses
arguments it does not know, so a misspelt one is an error, not silently ignored. The
server loads the model and runs one search before it serves: the first question is
answered as fast as the next.
"""

# No `from __future__ import annotations`: the SDK reads the tools' input schemas from
# their annotations, which name the limits of the settings they were built with.
import hmac
import importlib.metadata
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import AnyHttpUrl, BaseModel, ConfigDict, Field

from config.errors import ConfigError, IngestError
from config.secrets import secret_value
from config.settings import McpSettings, Settings
from query.api import PUBLIC, Hit, Identity, Index, IndexMissing, SearchUnavailable, SourceInfo
from query.identity import describe_access
from query.served import announced
from query.snippet import location, query_terms, snippet

HTTP_PATH = "/mcp"
SNIPPET_CHARS = 300  # a result's `snippet`: a few lines' worth
# Tokens the SDK's bearer check accepts carry the client's name as their client id.
_NO_SCOPES: list[str] = []

INSTRUCTIONS = (
    "Search and read the organisation's indexed knowledge base (Confluence pages and "
    "document files). Use `search` with a natural-language question or exact terms (error "
    "codes, option names); read more around a result with `fetch` (its chunk_id with "
    "expand='neighbours' or 'section', or its document_id for the whole document); "
    "`list_sources` tells what is indexed, the space keys `search` can filter by, and "
    "when each source was last synced. Cite results by their citation_url."
)


class Result(BaseModel):
    """One passage of a document."""

    chunk_id: str = Field(description="id to pass to `fetch` for more context")
    document_id: str = Field(description="id to pass to `fetch` for the whole document")
    title: str | None
    citation_url: str | None = Field(description="link to cite: where the passage starts")
    breadcrumbs: list[str] = Field(description="where the document lives: space, parents, page")
    headings_path: list[str] = Field(description="the headings above the passage")
    location: str = Field(description="where in its document: page, sheet, slide or part")
    score: float
    text: str = Field(description="the passage, Markdown")
    snippet: str = Field(
        description="the words of the passage around the query's terms, plain text, the "
        "terms marked **so**"
    )
    truncated: bool = Field(description="the text was cut to the server's limit")
    source_type: str | None
    space: str | None
    updated_at: str | None


class SearchResults(BaseModel):
    results: list[Result]
    access: str = Field(description="whose access the results are filtered by")


class FetchResult(BaseModel):
    result: Result
    chunk_ids: list[str] = Field(description="the chunks the text spans, in document order")


class SourceSyncInfo(BaseModel):
    scope: str
    targets: list[str]
    last_sync: str
    status: str
    documents: int


class SourceEntry(BaseModel):
    source_type: str
    chunks: int
    spaces: dict[str, int] = Field(description="space key -> chunks (filter `search` by these)")
    syncs: list[SourceSyncInfo]


class Sources(BaseModel):
    sources: list[SourceEntry]
    access: str


def build_server(
    index: Index,
    identity: Callable[[], Identity | None],
    *,
    auth: Any = None,
    verifier: Any = None,
) -> Any:
    """The MCP server over `index`; `identity()` names whose access a call has."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.tools import Tool
    from mcp.types import ToolAnnotations

    call = _one_at_a_time()
    read_only = ToolAnnotations(read_only_hint=True, open_world_hint=False)
    tools = [
        _closed(Tool.from_function(tool, annotations=read_only, structured_output=True))
        for tool in (
            _search_tool(index, identity, call),
            _fetch_tool(index, identity, call),
            _list_sources_tool(index, identity, call),
        )
    ]
    return MCPServer(
        name="ingest",
        version=importlib.metadata.version("ingest-dag"),
        instructions=INSTRUCTIONS,
        log_level="WARNING",
        auth=auth,
        token_verifier=verifier,
        tools=tools,
    )


_Call = Callable[[Callable[[], Any]], Any]


def _one_at_a_time() -> _Call:
    """Runs a tool's work under one lock (the SDK runs tools in threads; the index serves
    one at a time), its errors turned into tool errors a model reads."""
    from mcp.server.mcpserver.exceptions import ToolError

    lock = threading.Lock()

    def call(run: Callable[[], Any]) -> Any:
        with lock:
            try:
                return run()
            except (IndexMissing, SearchUnavailable, IngestError, ValueError) as exc:
                raise ToolError(str(exc)) from None

    return call


def _search_tool(
    index: Index, identity: Callable[[], Identity | None], call: _Call
) -> Callable[..., SearchResults]:
    """The `search` tool; its limit's bounds are the settings' `mcp.max_results`."""
    limits = index.settings.mcp

    def search(
        query: Annotated[
            str,
            Field(
                min_length=1,
                max_length=2000,
                description="what to find: a question in natural language, or exact terms "
                "such as an error code, a command or a product name",
            ),
        ],
        limit: Annotated[
            int,
            Field(
                ge=1,
                le=limits.max_results,
                description=f"how many results, at most {limits.max_results} (the server's "
                "maximum: a larger limit is refused); the first results are the same "
                "whatever the limit",
            ),
        ] = min(5, limits.max_results),
        mode: Annotated[
            Literal["auto", "hybrid", "dense", "lexical", "sparse"],
            Field(
                description="auto (best: meaning and exact words fused); lexical for exact "
                "identifiers only; dense for meaning only"
            ),
        ] = "auto",
        spaces: Annotated[
            list[str],
            Field(description="only these Confluence space keys (see list_sources); empty: all"),
        ] = [],  # noqa: B006 (never changed; the schema shows the default)
        labels: Annotated[
            list[str], Field(description="only pages with one of these labels; empty: all")
        ] = [],  # noqa: B006
    ) -> SearchResults:
        """Search the knowledge base and return the best matching passages, each with the
        link to cite (citation_url), its document's breadcrumbs and its headings."""
        who = identity()
        hits = call(
            lambda: index.search(
                query,
                identity=who,
                limit=limit,
                mode=mode,
                containers=spaces,
                labels=labels,
            )
        )
        terms = query_terms(query)
        return SearchResults(
            results=[_result(hit, limits, terms) for hit in hits], access=describe_access(who)
        )

    return search


def _fetch_tool(
    index: Index, identity: Callable[[], Identity | None], call: _Call
) -> Callable[..., FetchResult]:
    from mcp.server.mcpserver.exceptions import ToolError

    def fetch(
        id: Annotated[
            str,
            Field(
                min_length=1,
                max_length=500,
                description="a chunk_id or a document_id from `search` results",
            ),
        ],
        expand: Annotated[
            Literal["none", "neighbours", "section", "document"],
            Field(
                description="for a chunk_id: the chunk alone, with the chunks around it, its "
                "whole section, or its whole document (a document_id always gives the "
                "whole document)"
            ),
        ] = "neighbours",
    ) -> FetchResult:
        """Read a passage with its context, or a whole document, by the ids `search`
        returned."""
        hit = call(lambda: index.fetch(id, identity=identity(), expand=expand))
        if hit is None:
            raise ToolError(f"nothing found for id {id!r} (ids come from `search` results)")
        return FetchResult(
            result=_result(hit, index.settings.mcp), chunk_ids=list(hit.span or [hit.chunk_id])
        )

    return fetch


def _list_sources_tool(
    index: Index, identity: Callable[[], Identity | None], call: _Call
) -> Callable[[], Sources]:
    def list_sources() -> Sources:
        """What the knowledge base holds: each kind of source with its chunks, the space
        keys `search` can filter by, and when each source was last synced."""
        who = identity()
        found: list[SourceInfo] = call(lambda: index.sources(identity=who))
        return Sources(
            sources=[
                SourceEntry(
                    source_type=info.source_type,
                    chunks=info.chunks,
                    spaces=info.containers,
                    syncs=[
                        SourceSyncInfo(
                            scope=sync.scope,
                            targets=list(sync.targets),
                            last_sync=sync.last_sync,
                            status=sync.status,
                            documents=sync.documents,
                        )
                        for sync in info.syncs
                    ],
                )
                for info in found
            ],
            access=describe_access(who),
        )

    return list_sources


def _closed(tool: Any) -> Any:
    """`tool` refusing arguments it does not name (the SDK's argument model ignores them):
    a misspelt argument is a tool error a model can correct, not a silent default. Its
    schema says so too (`additionalProperties: false`)."""
    loose: type[BaseModel] = tool.fn_metadata.arg_model

    class Closed(loose):  # type: ignore[valid-type,misc]
        model_config = ConfigDict(extra="forbid")

    Closed.__name__ = loose.__name__
    tool.fn_metadata.arg_model = Closed
    tool.parameters = Closed.model_json_schema(by_alias=True)
    return tool


def _result(hit: Hit, limits: McpSettings, terms: tuple[str, ...] = ()) -> Result:
    """`hit` as a tool returns it; its snippet around `terms` (a fetch has none: its
    passage's beginning)."""
    cut = len(hit.text) > limits.max_text_chars
    text = hit.text[: limits.max_text_chars]
    if cut:
        text += (
            f"\n\n[cut at {limits.max_text_chars} characters: fetch with expand='none' for less]"
        )
    return Result(
        chunk_id=hit.chunk_id,
        document_id=hit.document_id,
        title=hit.title,
        citation_url=hit.citation_url,
        breadcrumbs=list(hit.breadcrumbs),
        headings_path=list(hit.headings_path),
        location=location(hit.payload),
        score=hit.score,  # unrounded: `ingest search` prints what the server answers
        text=text,
        snippet=snippet(hit.text, SNIPPET_CHARS, terms),
        truncated=cut,
        source_type=hit.source_type,
        space=hit.container,
        updated_at=hit.updated_at,
    )


# --- serving ---------------------------------------------------------------------------


def serve(settings: Settings, identity: Identity | None, http: str | None) -> None:
    """Serve on stdio, or on streamable HTTP at `http` (HOST:PORT), until stopped.
    `identity` None: the operator's view, over HTTP to holders of the token the server
    writes beside the store only (see `query.served`)."""
    address = _host_port(http) if http else None
    clients = _clients(settings) if address else {}
    _check_identity(identity, address, clients)
    with Index(settings) as index:
        index.store()  # a missing collection stops the server now, not at the first call
        started = time.monotonic()
        index.warm_up()  # before the server says it is ready (stdio: serves; HTTP: listens)
        _say(
            f"ready: {settings.embedder.model} loaded and the index opened in "
            f"{time.monotonic() - started:.1f} s"
        )
        if address is None:
            _say(f"serving with {describe_access(identity)}")
            build_server(index, lambda: identity).run("stdio")
            return
        host, port = address
        if clients:
            _say(f"serving {len(clients)} HTTP clients of mcp.clients, each with its identity")
            server = build_server(index, _token_identity(clients), **_bearer_auth(address, clients))
            _listen(server, host, port)
            return
        url = f"http://{_url_host(host)}:{port}{HTTP_PATH}"
        with announced(settings, url, identity) as token:
            if token is not None:
                _say(f"serving {describe_access(identity)} to `ingest search` (its token)")
                terminal = {token: ("ingest search", identity)}
                server = build_server(
                    index, _token_identity(terminal), **_bearer_auth(address, terminal)
                )
            else:
                anyone = "to every HTTP client (no mcp.clients)"
                _say(f"serving with {describe_access(identity)} {anyone}")
                server = build_server(index, lambda: identity)
            _listen(server, host, port)


def _check_identity(
    identity: Identity | None,
    address: tuple[str, int] | None,
    clients: dict[str, tuple[str, Identity | None]],
) -> None:
    if clients and (identity is None or not identity.anonymous):
        raise ConfigError(
            "--user/--group/--operator fix one identity, but mcp.clients gives each HTTP "
            "client its own: leave them out, or unset mcp.clients",
            setting="mcp.clients",
        )
    if identity is None and address is None:
        raise ConfigError(
            "--operator serves `ingest search` over HTTP: add --http 127.0.0.1:PORT",
            setting="--operator",
        )


def _listen(server: Any, host: str, port: int) -> None:
    _say(f"listening on http://{host}:{port}{HTTP_PATH}")
    # A stop (a service manager's SIGTERM) ends the server through its `finally`s, so
    # that the discovery file goes with it.
    signal.signal(signal.SIGTERM, _exit)
    server.run("streamable-http", host=host, port=port, streamable_http_path=HTTP_PATH)


def _exit(signum: int, frame: object) -> None:
    raise SystemExit(0)


def _url_host(host: str) -> str:
    """`host` as a URL writes it: an IPv6 address in brackets; a server listening on
    every address is reached on this machine's loopback."""
    if host in ("0.0.0.0", "::", ""):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host


def _say(message: str) -> None:
    print(f"ingest mcp: {message}", file=sys.stderr, flush=True)


def _host_port(http: str) -> tuple[str, int]:
    host, _, port = http.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError("give --http as HOST:PORT, e.g. 127.0.0.1:8765", setting="--http")
    return host.strip("[]"), int(port)


def _clients(settings: Settings) -> dict[str, tuple[str, Identity | None]]:
    """Token -> (client name, identity) of `mcp.clients`, tokens read from their
    settings or Prefect Secret blocks."""
    found: dict[str, tuple[str, Identity | None]] = {}
    for name, client in settings.mcp.clients.items():
        token = secret_value(client, "token") or ""
        if len(token) < 16:
            raise ConfigError(
                "a bearer token needs at least 16 characters (e.g. `openssl rand -hex 32`)",
                setting=f"mcp.clients.{name}.token",
            )
        found[token] = (name, Identity(client.user, tuple(client.groups)))
    return found


def _bearer_auth(
    address: tuple[str, int], clients: dict[str, tuple[str, Identity | None]]
) -> dict[str, Any]:
    """The SDK's bearer-token check, accepting the tokens of `mcp.clients`."""
    from mcp.server.auth.provider import AccessToken
    from mcp.server.auth.settings import AuthSettings

    host, port = address

    class Verifier:
        async def verify_token(self, token: str) -> AccessToken | None:
            for known, (name, _) in clients.items():
                if hmac.compare_digest(known.encode(), token.encode()):
                    return AccessToken(token=token, client_id=name, scopes=_NO_SCOPES)
            return None

    url = f"http://{host}:{port}"
    auth = AuthSettings(
        issuer_url=AnyHttpUrl(url),
        resource_server_url=AnyHttpUrl(f"{url}{HTTP_PATH}"),
        validate_token_resource=False,
    )
    return {"auth": auth, "verifier": Verifier()}


def _token_identity(
    clients: dict[str, tuple[str, Identity | None]],
) -> Callable[[], Identity | None]:
    from mcp.server.auth.middleware.auth_context import get_access_token

    by_name = dict(clients.values())

    def identity() -> Identity | None:
        token = get_access_token()
        # The SDK refuses a request without a known token before any tool runs; PUBLIC
        # is what a call outside a request would get.
        return by_name.get(token.client_id, PUBLIC) if token else PUBLIC

    return identity
