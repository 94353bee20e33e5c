"""The `ingest` flow under Prefect's test harness: real Prefect (a
temporary API server on SQLite for the session), Qdrant local mode in temporary
directories, the local Confluence API (`testkit/confluence_api.py`) and the tiny
BGE-M3-shaped model. Each test gets its own Qdrant directory and cache directory
(`Workspace`); runs are read back through their summaries, Qdrant's points and, for
failures, the `ingest-failures` artifact from the Prefect API.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit
from uuid import UUID

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    ArtifactFilter,
    ArtifactFilterFlowRunId,
    ArtifactFilterKey,
    FlowRunFilter,
    FlowRunFilterId,
    TaskRunFilter,
    TaskRunFilterName,
)
from prefect.client.schemas.objects import State
from prefect.testing.utilities import prefect_test_harness
from qdrant_client import models

from config.settings import QdrantSettings, Settings, load_settings
from connectors.files import root_label
from flows.ingest import ingest, task_runner_for
from flows.report import summary_of
from indexing import handles
from indexing.qdrant_store import QdrantConnection, QdrantStore
from indexing.search import search
from indexing.store_schema import CollectionSchema
from query.api import Index
from tasks.resources import Resources
from testkit.confluence_api import (
    DEFAULT_TOKEN,
    DEFAULT_USER,
    FakeConfluence,
    Fixture,
    build_fixture,
    confluence_api,
    rendered_anchors,
)
from testkit.tiny_model import tiny_model_dir, wider_tiny_model_dir

__all__ = ["confluence_api", "tiny_model_dir", "wider_tiny_model_dir"]  # fixtures used by name

SAMPLES = Path(__file__).resolve().parents[1] / "samples" / "docs"
# The ENG space of `build_fixture`: six pages, a blog post and seven attachments of
# supported formats (the PNG is not listed). "Engineering Home" is only a heading, so it
# has no chunks (and no points).
ENG_DOCUMENTS = (
    "eng_home",
    "guide",
    "notes",
    "deep",
    "secret",
    "secret_child",
    "eng_blog",
    "pdf",
    "docx",
    "txt",
    "xlsx",
    "pptx",
    "html",
    "md",
)
# Every document has chunks: the home page's only text, a heading ("Welcome"), reaches
# the index as a chunk of heading lines (no text of a document is lost:
# docs/chunking.md#small-sections-merge).
NO_CHUNKS: tuple[str, ...] = ()
CONTENT_STAGES = ("normalize", "chunk", "embed", "upsert")


@pytest.fixture(scope="module")
def prefect_api() -> Iterator[None]:
    """One temporary Prefect API (SQLite) for this module's tests. Module scope rather than
    session: it is only reachable from here, and stopping it after the module keeps its
    settings out of the other test files (which may start real servers of their own)."""
    with prefect_test_harness(server_startup_timeout=120):
        yield


# Every test runs flows on a temporary Prefect API: outside the fast lane.
pytestmark = [pytest.mark.usefixtures("prefect_api"), pytest.mark.slow]


# --- workspaces: one Qdrant directory + cache directory each --------------------------


@dataclass(eq=False)
class Workspace:
    root: Path
    env: dict[str, str]
    monkeypatch: pytest.MonkeyPatch
    reader: QdrantConnection | None = None

    def settings(self) -> Settings:
        for name, value in self.env.items():
            self.monkeypatch.setenv(name, value)
        return load_settings()

    def activate(self) -> Settings:
        """Point the settings at this workspace and let go of the test's own Qdrant
        client: in local mode a run or command of this process opens its own."""
        self.release()
        return self.settings()

    def release(self) -> None:
        if self.reader is not None:
            self.reader.close()

    def run(self, flow: Any = ingest, **params: Any) -> tuple[State[Any], dict[str, Any]]:
        """One flow run in this workspace (of `flow`: `ingest` with other options): its
        final state and its summary (also when the run ended Failed after writing it)."""
        state = self.run_state(flow, **params)
        summary = summary_of(state.result(raise_on_failure=False))
        assert isinstance(summary, dict), state
        return state, summary

    def run_state(self, flow: Any = ingest, **params: Any) -> State[Any]:
        """One flow run in this workspace, for runs that may end before their summary."""
        self.activate()
        state: State[Any] = flow(**params, return_state=True)
        return state

    def store(self) -> QdrantStore:
        """A store reading this workspace's collection, open until the next `activate`."""
        if self.reader is None:
            self.reader = QdrantConnection(self.settings().qdrant)
        return QdrantStore(self.reader, CollectionSchema(0, False, False))

    def points(self, tenant_id: str | None = "default") -> dict[str, dict[str, Any]]:
        """Every point of the tenant (all tenants with None): point id -> payload."""
        store = self.store()
        name = store.resolve()
        if name is None:
            return {}
        selection = (
            models.Filter(
                must=[
                    models.FieldCondition(key="tenant_id", match=models.MatchValue(value=tenant_id))
                ]
            )
            if tenant_id
            else None
        )
        found: dict[str, dict[str, Any]] = {}
        offset: Any = None
        while True:
            records, offset = store.client.scroll(
                name, scroll_filter=selection, limit=256, offset=offset, with_payload=True
            )
            found.update({str(r.id): dict(r.payload or {}) for r in records})
            if offset is None:
                return found

    def documents(self, tenant_id: str = "default") -> dict[str, set[str]]:
        """document id -> its point ids."""
        out: dict[str, set[str]] = {}
        for point_id, payload in self.points(tenant_id).items():
            out.setdefault(str(payload["document_id"]), set()).add(point_id)
        return out


@pytest.fixture
def workspace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny_model_dir: Path
) -> Iterator[Callable[..., Workspace]]:
    """Factory: `workspace(name, api=None, **env)`; closes what it opened at the end."""
    made: list[Workspace] = []

    def make(name: str = "main", api: FakeConfluence | None = None, **env: str) -> Workspace:
        root = tmp_path / name
        values = {
            "INGEST_QDRANT__PATH": str(root / "qdrant"),
            "INGEST_CACHE__DIR": str(root / "cache"),
            "INGEST_CACHE__FSYNC": "false",
            "INGEST_EMBEDDER__MODEL": str(tiny_model_dir),
            "INGEST_EMBEDDER__DEVICE": "cpu",
            "INGEST_RUN__TASK_RETRIES": "1",
            "INGEST_RUN__TASK_RETRY_DELAY_S": "0.1",
        }
        if api is not None:
            values |= {
                "INGEST_CONFLUENCE__URL": api.base_url,
                # 127.0.0.1 is no *.atlassian.net: say which API the local one serves
                "INGEST_CONFLUENCE__CLOUD": str(api.layout == "cloud").lower(),
                "INGEST_CONFLUENCE__USERNAME": DEFAULT_USER,
                "INGEST_CONFLUENCE__TOKEN": DEFAULT_TOKEN,
                "INGEST_CONFLUENCE__REQUESTS_PER_SECOND": "1000",
            }
        values |= env
        space = Workspace(root, values, monkeypatch)
        made.append(space)
        return space

    yield make
    for space in made:
        space.release()


@pytest.fixture
def eng(confluence_api: Callable[..., FakeConfluence]) -> tuple[FakeConfluence, Fixture]:
    api = confluence_api("cloud")
    return api, build_fixture(api)


def ids_of(fixture: Fixture, names: tuple[str, ...] | list[str]) -> set[str]:
    return {fixture[name] for name in names}


def failures(summary: dict[str, Any]) -> dict[str, str]:
    return {f["document_id"]: f["code"] for f in summary["failed"]}


def flow_run_id(state: State[Any]) -> UUID:
    run_id = state.state_details.flow_run_id
    assert run_id is not None
    return run_id


# --- Confluence: full, incremental, unchanged, corrupt -----------------------------------


def test_full_run_of_a_space_indexes_pages_blog_posts_and_attachments(
    workspace: Callable[..., Workspace], eng: tuple[FakeConfluence, Fixture]
) -> None:
    api, fx = eng
    space = workspace(api=api)
    state, summary = space.run(source="confluence", targets=["ENG"])

    assert state.is_completed()
    assert (summary["seen"], summary["new"], summary["changed"], summary["unchanged"]) == (
        len(ENG_DOCUMENTS),
        len(ENG_DOCUMENTS),
        0,
        0,
    )
    assert summary["failed"] == [] and summary["deleted"] == 0
    for stage in ("normalize", "chunk"):
        assert summary[stage] == {"done": len(ENG_DOCUMENTS), "cached": 0}
    assert summary["embed"]["done"] == summary["chunks"] > 0

    points = space.points()
    assert space.store().count("default") == len(points) == summary["chunks"]
    documents = space.documents()
    assert set(documents) == ids_of(fx, ENG_DOCUMENTS) - ids_of(fx, NO_CHUNKS)
    for payload in points.values():
        assert payload["tenant_id"] == "default"
        assert payload["space_key"] == "ENG"
        assert payload["source_type"] == "confluence"
        assert isinstance(payload["headings_path"], list)
        assert payload["md_text"].strip()
        assert payload["acl"]["space"] == "ENG"
    by_document = {p["document_id"]: p for p in points.values()}
    assert by_document[fx["secret"]]["acl"]["public"] is False
    assert set(by_document[fx["secret"]]["acl"]["groups"]) == {"security", "admins"}
    # Readable by whoever may read the space (the group `confluence-users`): not public.
    guide_acl = by_document[fx["guide"]]["acl"]
    assert (guide_acl["public"], guide_acl["restricted"]) == (False, False)
    assert guide_acl["space_groups"] == ["confluence-users"]
    assert by_document[fx["guide"]]["labels"] == ["install", "howto"]
    assert by_document[fx["docx"]]["headings_path"] == ["Attachment"]
    assert by_document[fx["docx"]]["parent_document_id"] == fx["guide"]
    assert by_document[fx["xlsx"]]["chunk_type"] == "table"
    assert by_document[fx["eng_blog"]]["title"] == "Quarterly update"
    # Deep links (docs/sources.md#deep-links): a page's chunks land on the anchors the page shows;
    # the rest cite their page or attachment; breadcrumbs run from the space to the document.
    anchors: dict[str, set[str]] = {}
    landed = set()
    for payload in points.values():
        link = urlsplit(payload["citation_url"])
        assert payload["citation_url"].startswith(payload["source_url"])
        assert payload["breadcrumbs"][0] == "Engineering"
        assert payload["breadcrumbs"][-1] == payload["title"]
        if link.fragment:
            page = payload["document_id"]
            shown = anchors.get(page) or anchors.setdefault(page, rendered_anchors(api, page))
            assert unquote(link.fragment) in shown, payload["citation_url"]
            landed.add(unquote(link.fragment))
    assert len(landed) >= 4  # Release Notes: Russian, punctuation, a repeated heading
    assert by_document[fx["docx"]]["breadcrumbs"] == [
        "Engineering",
        "Engineering Home",
        "Install Guide",
        "Руководство.docx",
    ]
    assert {w["document_id"] for w in summary["warnings"]} >= {fx["notes"]}  # "?!" and the emoji


def test_incremental_run_reprocesses_exactly_the_edited_and_drops_the_deleted(
    workspace: Callable[..., Workspace], eng: tuple[FakeConfluence, Fixture]
) -> None:
    api, fx = eng
    space = workspace(api=api)
    space.run(source="confluence", targets=["ENG"])
    before = space.documents()

    api.edit(fx["guide"], body="<p>Install with the new installer, then reboot.</p>")
    api.edit(fx["notes"], body="<p>2.0 released with a new storage engine.</p>")
    api.delete(fx["secret_child"])
    state, summary = space.run(source="confluence", targets=["ENG"])

    assert state.is_completed()
    assert (summary["changed"], summary["new"], summary["deleted"]) == (2, 0, 1)
    assert summary["unchanged"] == len(ENG_DOCUMENTS) - 3
    assert summary["seen"] == len(ENG_DOCUMENTS) - 1
    # Only the two edited documents did any work; the unchanged are all cache hits.
    for stage in ("normalize", "chunk", "upsert"):
        assert summary[stage] == {"done": 2, "cached": summary["unchanged"]}, stage
    assert summary["fetch"]["done"] == 2
    assert summary["embed"]["done"] == 2  # one chunk each
    after = space.documents()
    assert fx["secret_child"] not in after
    edited = ids_of(fx, ["guide", "notes"])
    for document_id, point_ids in before.items():
        if document_id == fx["secret_child"]:
            continue
        if document_id in edited:
            assert after[document_id].isdisjoint(point_ids)  # new version, old points gone
        else:
            assert after[document_id] == point_ids
    texts = {p["document_id"]: p["md_text"] for p in space.points().values()}
    assert "new installer" in texts[fx["guide"]]
    assert {p["source_version_id"] for p in space.points().values() if p["document_id"] in edited}


def test_unchanged_rerun_does_no_work_and_changes_nothing(
    workspace: Callable[..., Workspace], eng: tuple[FakeConfluence, Fixture]
) -> None:
    api, _ = eng
    space = workspace(api=api)
    space.run(source="confluence", targets=["ENG"])
    before = space.points()
    requests_before = sum(api.requests.values())

    state, summary = space.run(source="confluence", targets=["ENG"])

    assert state.is_completed()
    assert summary["unchanged"] == summary["seen"] == len(ENG_DOCUMENTS)
    assert (summary["changed"], summary["new"], summary["deleted"]) == (0, 0, 0)
    for stage in ("normalize", "chunk", "upsert"):  # in documents: passed from cache
        assert summary[stage] == {"done": 0, "cached": len(ENG_DOCUMENTS)}, stage
    # in chunks: an unchanged document's were not even looked at
    assert summary["embed"] == {"done": 0, "cached": 0}
    assert summary["chunks"] == 0 and summary["collection_points"] == len(before)
    assert summary["fetch"]["done"] == 0
    assert space.points() == before
    # Only listing requests: no page or attachment body was downloaded again.
    downloads = [p for p in api.paths if "/download/" in p]
    assert len(downloads) == len([p for p in api.paths[:requests_before] if "/download/" in p])


def test_the_search_index_is_built_at_the_end_of_a_run_past_the_threshold_only(
    workspace: Callable[..., Workspace], eng: tuple[FakeConfluence, Fixture]
) -> None:
    """Edge searches new points exactly until a run's end builds the HNSW index of a
    segment past `qdrant.optimize_threshold` vectors: the report's `optimize` stage."""
    api, _ = eng
    below = workspace("below", api=api)
    _, summary = below.run(source="confluence", targets=["ENG"])
    assert "optimize" not in summary["seconds"]  # 20,000 vectors by default

    past = workspace("past", api=api, INGEST_QDRANT__OPTIMIZE_THRESHOLD="1")
    state, summary = past.run(source="confluence", targets=["ENG"])
    assert state.is_completed() and summary["seconds"]["optimize"] >= 0

    def indexed(space: Workspace) -> int:
        # sparse vectors count as indexed from the start, dense ones once in an HNSW graph
        return space.store().client.get_collection("chunks").indexed_vectors_count or 0

    assert indexed(past) > indexed(below) > 0
    _, again = past.run(source="confluence", targets=["ENG"])
    assert "optimize" not in again["seconds"]  # nothing new to index
    assert past.points() == below.points()


def test_the_report_gives_the_store_clients_own_seconds(
    workspace: Callable[..., Workspace], eng: tuple[FakeConfluence, Fixture]
) -> None:
    """`store_seconds`: the seconds inside Qdrant's own calls, writes and reads apart, and
    the search index build when the run built it. Edge takes one call at a time, so
    together they stay within the run's wall time (the `upsert` stage, summed over
    batches that overlap, need not)."""
    api, _ = eng
    space = workspace(api=api, INGEST_QDRANT__OPTIMIZE_THRESHOLD="1")
    state, summary = space.run(source="confluence", targets=["ENG"])
    assert state.is_completed()
    store = summary["store_seconds"]
    assert set(store) == {"writes", "reads", "index_build"}
    assert store["writes"] > 0 and store["reads"] > 0
    assert store["index_build"] == summary["seconds"]["optimize"]
    assert sum(store.values()) <= summary["wall_seconds"]

    _, again = space.run(source="confluence", targets=["ENG"])  # nothing new to index
    assert set(again["store_seconds"]) == {"writes", "reads"}
    assert again["store_seconds"]["reads"] > 0
    assert sum(again["store_seconds"].values()) <= again["wall_seconds"]


def test_corrupt_attachment_is_reported_and_the_rest_indexed(
    workspace: Callable[..., Workspace], eng: tuple[FakeConfluence, Fixture]
) -> None:
    api, fx = eng
    corrupt = api.add_attachment(
        fx["notes"],
        "broken.pdf",
        (SAMPLES / "broken" / "corrupt.pdf").read_bytes(),
        "application/pdf",
    )
    space = workspace(api=api)
    state, summary = space.run(source="confluence", targets=["ENG"])

    assert state.is_completed()  # bad input never fails the run
    assert failures(summary) == {corrupt: "CORRUPT"}
    assert summary["seen"] == len(ENG_DOCUMENTS) + 1
    assert set(space.documents()) == ids_of(fx, ENG_DOCUMENTS) - ids_of(fx, NO_CHUNKS)

    with get_client(sync_client=True) as client:
        artifacts = client.read_artifacts(
            artifact_filter=ArtifactFilter(
                key=ArtifactFilterKey(any_=["ingest-failures"]),
                flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id(state)]),
            )
        )
        summaries = client.read_artifacts(
            artifact_filter=ArtifactFilter(
                key=ArtifactFilterKey(any_=["ingest-summary"]),
                flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id(state)]),
            )
        )
    assert len(artifacts) == 1 and artifacts[0].type == "table"
    rows: list[dict[str, str]] = json.loads(str(artifacts[0].data))
    assert [(r["document_id"], r["code"]) for r in rows] == [(corrupt, "CORRUPT")]
    assert rows[0]["message"]
    assert len(summaries) == 1 and "CORRUPT" in str(summaries[0].data)
    # the artifact links the documents the run indexed to where a reader finds them
    guide_url = f"{api.base_url}/spaces/ENG/pages/{fx['guide']}/Install+Guide"
    assert f"| {fx['guide']} | [Install Guide](<{guide_url}>) |" in str(summaries[0].data)

    # Not retried until its content changes: the re-run reports it without fetching it.
    state, summary = space.run(source="confluence", targets=["ENG"])
    assert state.is_completed()
    assert failures(summary) == {corrupt: "CORRUPT"}
    assert summary["fetch"]["done"] == 0


# --- Qdrant unavailable ---------------------------------------------------------------------

ROOT = Path(__file__).resolve().parent.parent
_HOLDER = """
import sys
from config.settings import QdrantSettings
from indexing.store_schema import CollectionSchema
from indexing.qdrant_store import QdrantConnection, QdrantStore
connection = None
for line in sys.stdin:
    if line.strip() == "lock":
        connection = QdrantConnection(QdrantSettings(path=sys.argv[1], collection=sys.argv[2]))
        QdrantStore(connection, CollectionSchema(0, False, False)).count()  # opens it
    elif line.strip() == "release" and connection is not None:
        connection.close()
        connection = None
    print("ok", flush=True)
"""


class StorageHolder:
    """Another process that opens the same embedded store (the collection behind the
    alias): one process at a time may open it (a lock file), so while it holds the
    store, this process's openings wait `qdrant.lock_wait_s` for it, then fail as
    STORE_BUSY (transient for the documents, never retried by a task at once)."""

    def __init__(self, path: str, collection: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", _HOLDER, path, collection],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.holding = False
        self._lock = threading.Lock()

    def _say(self, command: str) -> None:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        assert self.process.stdout.readline().strip() == "ok"

    def take(self) -> None:
        with self._lock:
            if not self.holding:
                self._say("lock")
                self.holding = True

    def give_back(self) -> None:
        with self._lock:
            if self.holding:
                self._say("release")
                self.holding = False

    def stop(self) -> None:
        if self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.close()
            self.process.wait(timeout=30)


class Outage(logging.Handler):
    """Takes the store away from this process: it closes the workspace's and the run's
    connections (`opened`, recorded as the run opens them) and the holder opens the
    store, either now (`at="start"`: the run's first access, at its start, waits),
    when the run's `plan` task has finished (`at="index"`: the index tasks' openings
    wait) or when its first `index-batch` task has finished (`at="mid"`: one batch is
    indexed, the others' openings wait). It watches the run's task logs, so nothing in
    the code under test is replaced; with `recover`, the holder gives the store back a
    second after taking it. `retried` records the tasks whose retry Prefect announced
    while the store was held: none, a held store is waited for, not retried."""

    def __init__(
        self,
        holder: StorageHolder,
        opened: list[QdrantConnection],
        *,
        at: str,
        recover: bool,
    ) -> None:
        super().__init__()
        self.holder = holder
        self.opened = opened
        self.recover = recover
        self.retried: list[str] = []  # task names whose retry was announced during it
        # one outage: later runs (the reference run) run freely
        self.trigger = {"index": "plan", "mid": "index-batch"}.get(at)
        if at == "start":
            self.begin()

    def begin(self) -> None:
        for connection in self.opened:
            connection.close()
        self.holder.take()
        if self.recover:
            threading.Timer(1.0, self.holder.give_back).start()

    def emit(self, record: logging.LogRecord) -> None:
        task = str(getattr(record, "task_name", ""))
        message = record.getMessage()
        if task == self.trigger and message.startswith("Finished in state Completed"):
            self.trigger = None
            self.begin()
        elif "Retry" in message and self.holder.holding:
            self.retried.append(task)


@pytest.fixture
def outage(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Outage]]:
    made: list[tuple[Outage, StorageHolder]] = []
    logger = logging.getLogger("prefect.task_runs")
    opened: list[QdrantConnection] = []

    class RecordedConnection(QdrantConnection):
        def __init__(self, settings: QdrantSettings) -> None:
            super().__init__(settings)
            opened.append(self)

    monkeypatch.setattr(handles, "QdrantConnection", RecordedConnection)

    def make(space: Workspace, *, at: str, recover: bool) -> Outage:
        qdrant = space.settings().qdrant
        holder = StorageHolder(qdrant.path, qdrant.collection)
        space.release()
        handler = Outage(holder, opened, at=at, recover=recover)
        logger.addHandler(handler)
        made.append((handler, holder))
        return handler

    yield make
    for handler, holder in made:
        logger.removeHandler(handler)
        holder.stop()


def _edit(api: FakeConfluence, fx: Fixture, names: tuple[str, ...], text: str) -> set[str]:
    for name in names:
        api.edit(fx[name], body=f"<p>{text} ({name})</p>")
    return ids_of(fx, names)


def _run_counts(state: State[Any], task: str) -> list[int]:
    with get_client(sync_client=True) as client:
        runs = client.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id(state)])),
            task_run_filter=TaskRunFilter(name=TaskRunFilterName(like_=task)),
        )
    assert all(run.state is not None and run.state.is_completed() for run in runs)
    return [run.run_count for run in runs]


def _assert_only_reindexed(
    before: dict[str, set[str]], after: dict[str, set[str]], edited: set[str]
) -> None:
    assert set(after) == set(before)
    for document_id, point_ids in before.items():
        if document_id in edited:
            assert after[document_id].isdisjoint(point_ids)  # new version, old points gone
        else:
            assert after[document_id] == point_ids


def test_a_store_held_for_a_while_is_waited_for_and_the_run_completes(
    workspace: Callable[..., Workspace],
    eng: tuple[FakeConfluence, Fixture],
    outage: Callable[..., Outage],
) -> None:
    """Mechanism: an embedded store admits one process at a time (a lock file). A second
    process (`StorageHolder`) holds this run's store for a second; the run's opening
    waits for it (`qdrant.lock_wait_s`) instead of failing and being retried. First at
    the start of the run, then right after planning (the index batch's opening); both
    runs complete with nothing missing and no task run twice."""
    api, fx = eng
    space = workspace(api=api)
    space.run(source="confluence", targets=["ENG"])
    before = space.documents()
    edited = _edit(api, fx, ("guide", "deep"), "Second edition")
    watcher = outage(space, at="start", recover=True)
    state, summary = space.run(source="confluence", targets=["ENG"])
    assert watcher.retried == []
    assert state.is_completed(), state
    assert (summary["changed"], summary["deleted"], summary["failed"]) == (2, 0, [])
    assert _run_counts(state, "plan") == [1]
    _assert_only_reindexed(before, space.documents(), edited)

    before = space.documents()
    edited = _edit(api, fx, ("notes", "eng_blog"), "Third edition")
    watcher = outage(space, at="index", recover=True)
    state, summary = space.run(source="confluence", targets=["ENG"])
    assert watcher.retried == []
    assert state.is_completed(), state
    assert (summary["changed"], summary["deleted"], summary["failed"]) == (2, 0, [])
    assert _run_counts(state, "index-batch") == [1]
    _assert_only_reindexed(before, space.documents(), edited)
    assert summary["upsert"] == {"done": 2, "cached": len(ENG_DOCUMENTS) - 2}


def test_qdrant_unavailable_throughout_fails_the_run_and_loses_nothing(
    workspace: Callable[..., Workspace],
    eng: tuple[FakeConfluence, Fixture],
    outage: Callable[..., Outage],
) -> None:
    """Mechanism as above (a second process holds the store from the end of planning),
    but it never lets go during the run: the index task waits `qdrant.lock_wait_s` and
    fails once (a held store is not retried as if the network had failed), reconcile
    cannot open the store either, the run writes its summary and ends Failed. Every
    point indexed before is still there; the next run, with the store free, completes
    and the collection equals that of a run that was never interrupted."""
    api, fx = eng
    space = workspace(api=api, INGEST_QDRANT__LOCK_WAIT_S="1")
    space.run(source="confluence", targets=["ENG"])
    before = space.points()
    edited = _edit(api, fx, ("guide", "deep"), "Second edition")
    watcher = outage(space, at="index", recover=False)

    state, summary = space.run(source="confluence", targets=["ENG"])

    assert state.is_failed()
    assert watcher.retried == []
    failed = failures(summary)
    assert {failed.get(document_id) for document_id in edited} == {"STORE_BUSY"}
    assert "transient reasons" in str(state.message), state.message
    with get_client(sync_client=True) as client:
        artifacts = client.read_artifacts(
            artifact_filter=ArtifactFilter(
                key=ArtifactFilterKey(any_=["ingest-failures"]),
                flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id(state)]),
            )
        )
    assert len(artifacts) == 1
    assert edited <= {row["document_id"] for row in json.loads(str(artifacts[0].data))}

    watcher.holder.give_back()
    assert space.points() == before  # nothing lost, nothing half-written

    state, summary = space.run(source="confluence", targets=["ENG"])
    assert state.is_completed()
    assert (summary["changed"], summary["failed"]) == (2, [])
    assert summary["unchanged"] == len(ENG_DOCUMENTS) - 2

    reference = workspace("uninterrupted", api=api)
    reference.run(source="confluence", targets=["ENG"])
    assert set(space.points()) == set(reference.points())


def test_dask_runner_gives_the_same_collection_as_threads(
    workspace: Callable[..., Workspace], eng: tuple[FakeConfluence, Fixture]
) -> None:
    """The Dask task runner on a local cluster of 2 worker processes
    (docs/architecture.md#batches): batches are prepared in the workers, indexed in the flow's
    process (local-mode Qdrant is one process's store), and the collection equals the thread-pool
    run's: same point ids, same payloads."""
    from prefect_dask.task_runners import DaskTaskRunner

    api, _ = eng
    threads = workspace("threads", api=api)
    state, reference = threads.run(source="confluence", targets=["ENG"])
    assert state.is_completed()

    dask = workspace("dask", api=api, INGEST_RUN__BATCH_SIZE="3")
    runner: Any = DaskTaskRunner(  # typed for its own future class
        cluster_kwargs={"n_workers": 2, "threads_per_worker": 1, "processes": True}
    )
    on_dask = ingest.with_options(task_runner=runner)
    state, summary = dask.run(on_dask, source="confluence", targets=["ENG"])
    assert state.is_completed(), state
    assert (summary["new"], summary["failed"]) == (reference["new"], [])
    assert _run_counts(state, "prepare-batch") == [1] * -(-len(ENG_DOCUMENTS) // 3)
    assert dask.points() == threads.points()


def test_each_run_gets_the_task_runner_its_settings_name() -> None:
    """`ingest run` builds the runner from the run's own settings (`run.task_runner`,
    `run.max_workers`, `run.dask_address`, `run.dask_n_workers`), not from whatever
    configuration the flow module saw when it was imported."""
    from prefect.task_runners import ThreadPoolTaskRunner
    from prefect_dask.task_runners import DaskTaskRunner

    threads = task_runner_for(load_settings({"run": {"max_workers": 3}}))
    assert isinstance(threads, ThreadPoolTaskRunner) and threads._max_workers == 3
    remote = task_runner_for(
        load_settings({"run": {"task_runner": "dask", "dask_address": "tcp://10.1.2.3:8786"}})
    )
    assert isinstance(remote, DaskTaskRunner) and remote.address == "tcp://10.1.2.3:8786"
    local = task_runner_for(load_settings({"run": {"task_runner": "dask", "dask_n_workers": 5}}))
    assert isinstance(local, DaskTaskRunner) and local.address is None
    assert local.cluster_kwargs == {"n_workers": 5}


# --- files --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def samples_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache directory for the files tests: the sample corpus is normalized once
    (LibreOffice for the legacy formats is the slow part). Sync state is per tenant and
    source scope and Qdrant is per test, so the tests stay independent."""
    return tmp_path_factory.mktemp("samples-cache")


def _copy_samples(target: Path) -> Path:
    shutil.copytree(SAMPLES, target)
    return target


SAMPLE_FILES = sorted(p.relative_to(SAMPLES).as_posix() for p in SAMPLES.rglob("*") if p.is_file())


def test_files_source_indexes_deletes_and_leaves_other_roots_alone(
    workspace: Callable[..., Workspace], tmp_path: Path, samples_cache: Path
) -> None:
    docs = _copy_samples(tmp_path / "docs")
    other = _copy_samples(tmp_path / "other")
    space = workspace(INGEST_CACHE__DIR=str(samples_cache))
    label, other_label = root_label(docs), root_label(other)

    state, summary = space.run(source="files", targets=[str(other)])
    assert state.is_completed()
    other_points = space.documents()

    state, summary = space.run(source="files", targets=[str(docs)])
    assert state.is_completed()
    # the corrupt sample is counted as failed, not as new
    assert summary["seen"] == summary["new"] + len(summary["failed"]) == len(SAMPLE_FILES)
    assert failures(summary) == {f"{label}/broken/corrupt.pdf": "CORRUPT"}
    documents = space.documents()
    expected = {f"{label}/{name}" for name in SAMPLE_FILES} - {f"{label}/broken/corrupt.pdf"}
    assert {d for d in documents if d.startswith(f"{label}/")} == expected
    assert {d: p for d, p in documents.items() if d.startswith(f"{other_label}/")} == other_points

    (docs / "runbooks" / "backup.txt").unlink()
    state, summary = space.run(source="files", targets=[str(docs)])
    assert state.is_completed()
    assert summary["deleted"] == 1
    assert summary["unchanged"] == len(SAMPLE_FILES) - 2  # the corrupt PDF is still failing
    for stage in CONTENT_STAGES:
        assert summary[stage]["done"] == 0, stage
    after = space.documents()
    assert after == {d: p for d, p in documents.items() if d != f"{label}/runbooks/backup.txt"}
    # the other root still has its own copy of that file
    assert f"{other_label}/runbooks/backup.txt" in after


def test_list_sources_shows_the_last_sync_of_real_file_and_confluence_runs(
    workspace: Callable[..., Workspace], eng: tuple[FakeConfluence, Fixture], tmp_path: Path
) -> None:
    api, _ = eng
    runbooks = tmp_path / "runbooks"
    shutil.copytree(SAMPLES / "runbooks", runbooks)
    space = workspace(api=api)
    for source, targets in (("files", [str(runbooks)]), ("confluence", ["ENG"])):
        state, summary = space.run(source=source, targets=targets)
        assert state.is_completed() and summary["failed"] == [], summary
    # what `list_sources` (the MCP tool) answers, no ACL filter: each source with its run
    with Index(space.activate()) as index:
        found = {info.source_type: info for info in index.sources(identity=None)}
    assert set(found) == {"file", "confluence"}
    (files,) = found["file"].syncs
    assert (files.scope, files.targets, files.status) == (
        f"files:{runbooks}",
        (str(runbooks),),
        "ok",
    )
    assert files.documents == len(list(runbooks.iterdir())) and found["file"].chunks > 0
    (pages,) = found["confluence"].syncs
    assert (pages.scope, pages.targets, pages.status) == ("confluence:ENG", ("ENG",), "ok")
    assert pages.documents == len(ENG_DOCUMENTS)


def test_tenants_are_isolated(
    workspace: Callable[..., Workspace], tmp_path: Path, samples_cache: Path
) -> None:
    docs = _copy_samples(tmp_path / "docs")
    onboarding = f"{root_label(docs)}/handbook/onboarding.md"
    space = workspace(INGEST_CACHE__DIR=str(samples_cache))
    for tenant in ("acme", "globex"):
        state, summary = space.run(source="files", targets=[str(docs)], tenant_id=tenant)
        assert state.is_completed()
        # every sample but the corrupt PDF, which is counted as failed
        assert summary["tenant_id"] == tenant and summary["new"] == len(SAMPLE_FILES) - 1
    acme, globex = space.documents("acme"), space.documents("globex")
    assert set(acme) == set(globex) and len(acme) == len(SAMPLE_FILES) - 1
    assert all(acme[d].isdisjoint(globex[d]) for d in acme)  # same files, distinct points

    (docs / "handbook" / "onboarding.md").unlink()
    state, summary = space.run(source="files", targets=[str(docs)], tenant_id="acme")
    assert state.is_completed() and summary["deleted"] == 1
    assert onboarding not in space.documents("acme")
    assert space.documents("globex") == globex  # the other tenant's points are untouched
    payloads = space.points(None).values()
    assert {p["tenant_id"] for p in payloads} == {"acme", "globex"}

    # globex's own run deletes only globex's copy
    state, summary = space.run(source="files", targets=[str(docs)], tenant_id="globex")
    assert state.is_completed() and summary["deleted"] == 1
    assert space.documents("acme") == {d: p for d, p in acme.items() if d != onboarding}


def test_links_are_persisted_both_ways_and_counts_follow_edits(
    workspace: Callable[..., Workspace], eng: tuple[FakeConfluence, Fixture]
) -> None:
    """docs/chunking.md#links: link records are kept so a document's outgoing and incoming links
    can be listed, and every chunk carries its document's outgoing and incoming link counts."""
    from tasks.links import LinkStore

    api, fx = eng
    space = workspace(api=api)
    state, _ = space.run(source="confluence", targets=["ENG"])
    assert state.is_completed()
    links = LinkStore(space.settings().cache.dir, "default")
    # The guide links to Release Notes (synced) and to an HR page (not in this run).
    outgoing = links.outgoing(fx["guide"])
    assert [(link.link_type, link.target_document_id) for link in outgoing] == [
        ("page", fx["notes"]),
        ("page", None),
    ]
    assert [source for source, _ in links.incoming(fx["notes"])] == [fx["guide"]]

    def payloads() -> dict[str, dict[str, Any]]:
        return {str(p["document_id"]): p for p in space.points().values()}

    assert payloads()[fx["notes"]]["links_in"] == 1
    assert payloads()[fx["guide"]]["links_out"] == 2
    assert payloads()[fx["guide"]]["links_in"] == 0

    api.edit(fx["guide"], body="<p>Install with the new installer, then reboot.</p>")
    state, summary = space.run(source="confluence", targets=["ENG"])
    assert state.is_completed() and summary["changed"] == 1
    assert links.incoming(fx["notes"]) == []
    # Release Notes did not change, yet its points now say nobody links to it.
    assert payloads()[fx["notes"]]["links_in"] == 0


def test_secrets_reach_no_log_cache_result_or_payload(
    workspace: Callable[..., Workspace],
    eng: tuple[FakeConfluence, Fixture],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A full run with a known Confluence token and Qdrant API key: neither appears in any
    file the run wrote (stage cache, state, links, Qdrant storage), in a payload, in the
    logs (captured here and stored by Prefect), in artifacts or in the run's parameters."""
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.logging.handlers import APILogHandler

    qdrant_key = "qdrant-key-5e6f7a8b9c"
    caplog.set_level(logging.DEBUG)
    api, _ = eng
    space = workspace(api=api, INGEST_QDRANT__API_KEY=qdrant_key)
    state, summary = space.run(source="confluence", targets=["ENG"])
    assert state.is_completed() and summary["chunks"] > 0
    secrets = [DEFAULT_TOKEN.encode(), qdrant_key.encode()]

    written = [p for p in space.root.rglob("*") if p.is_file()]
    assert len(written) > 20  # the cache, state and Qdrant files really were searched
    for path in written:
        data = path.read_bytes()
        assert not any(secret in data for secret in secrets), path

    # Prefect ships logs to its API from a background worker: wait for what is queued.
    APILogHandler().flush()
    with get_client(sync_client=True) as client:
        run_id = flow_run_id(state)
        logs = client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run_id])))
        artifacts = client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[run_id]))
        )
        flow_run = client.read_flow_run(run_id)
    assert logs, "Prefect stored no log of the run"
    assert artifacts, "Prefect stored no artifact of the run"
    seen = {
        "captured logs": caplog.text,
        "payloads": json.dumps(space.points(), default=str),
        "summary": json.dumps(summary, default=str),
        "run parameters": json.dumps(flow_run.parameters, default=str),
        "Prefect logs": "\n".join(log.message for log in logs),
        "artifacts": "\n".join(str(artifact.data) for artifact in artifacts),
    }
    leaks = [where for where, text in seen.items() if any(s in text.encode() for s in secrets)]
    assert not leaks


# --- schema changes: a collection without `lexical`, a model swap (docs/qdrant.md#schema-changes) ---


def test_a_model_swap_goes_through_the_reindex_parameter_and_loses_nothing(
    workspace: Callable[..., Workspace], tmp_path: Path, wider_tiny_model_dir: Path
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "backup.md").write_text("# Backups\n\nThe nightly backup of the ledger runs at two.\n")
    (docs / "queue.md").write_text("# Queues\n\nA worker stopping with ERR_CONN_RESET restarts.\n")
    space = workspace(INGEST_LEXICAL__ENABLED="false", INGEST_PARTS__ENABLED="false")
    state, _ = space.run(source="files", targets=[str(docs)])
    assert state.is_completed()
    written = space.points()

    # An upgrade turns the lexical and part vectors on: the collection made before lacks
    # them, so runs say so and name the re-index, and go on without them.
    space.env["INGEST_LEXICAL__ENABLED"] = "true"
    space.env["INGEST_PARTS__ENABLED"] = "true"
    (docs / "queue.md").write_text("# Queues\n\nA worker stopping with ERR_CONN_RESET waits.\n")
    state, summary = space.run(source="files", targets=[str(docs)])
    assert state.is_completed() and summary["status"] == "ok"
    lexical, parts = summary["warnings"]
    assert "no 'lexical' vector" in lexical["message"] and "ingest reindex" in lexical["message"]
    assert "no 'dense_parts' vector" in parts["message"] and "ingest reindex" in parts["message"]
    written = space.points()

    # Another model with another vector size: the run stops before any work, naming it.
    space.env["INGEST_EMBEDDER__MODEL"] = str(wider_tiny_model_dir)
    space.env["INGEST_EMBEDDER__SPARSE"] = "false"  # a model without BGE-M3's sparse head
    state = space.run_state(source="files", targets=[str(docs)])
    assert state.is_failed()
    with pytest.raises(Exception, match=r"size 48 \(it has 32\): run `ingest reindex`"):
        state.result()
    assert space.points() == written

    # The same run with reindex: a new collection from the stage cache, the alias moved.
    state, summary = space.run(source="files", targets=[str(docs)], reindex=True)
    assert state.is_completed() and summary["status"] == "ok" and summary["warnings"] == []
    assert space.points() == written  # the same points, payloads included
    store = space.store()
    held = store.describe()
    assert (held.vector_size, held.sparse, held.lexical, held.parts) == (48, False, True, True)
    settings = space.activate()
    resources = Resources(settings)
    try:
        hits = search(
            resources.store(), resources.embedder(), "err_conn_reset", limit=1,
            lexical=resources.lexical(),
        )  # fmt: skip
    finally:
        resources.close()
    assert hits[0].document_id.endswith("queue.md")

    # Other lexical settings: the collection's weights were made otherwise, which the
    # report says, naming the re-index that rebuilds them.
    space.env["INGEST_LEXICAL__K1"] = "1.5"
    state, summary = space.run(source="files", targets=[str(docs)])
    assert state.is_completed() and summary["status"] == "ok"
    (warning,) = summary["warnings"]
    assert "lexical weights of bm25-v1-" in warning["message"]
    assert "ingest reindex" in warning["message"]


def test_a_chunking_change_goes_through_the_gated_reindex_and_the_summary_holds_the_comparison(
    workspace: Callable[..., Workspace], tmp_path: Path
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "backup.md").write_text("# Backups\n\nThe nightly backup of the ledger runs at two.\n")
    (docs / "queue.md").write_text("# Queues\n\nA worker stopping with ERR_CONN_RESET restarts.\n")
    questions = tmp_path / "questions.yaml"
    questions.write_text(
        "- question: when does the nightly ledger backup run\n  target: backup.md\n"
        "- question: ERR_CONN_RESET\n  target: queue.md\n"
    )
    space = workspace(INGEST_EVAL__QUESTIONS=str(questions))
    state, _ = space.run(source="files", targets=[str(docs)])
    assert state.is_completed()
    before = space.store().resolve()

    # Other budgets with the gate on: a plain run does not re-chunk in place...
    space.env["INGEST_CHUNKING__MAX_TOKENS"] = "280"
    state = space.run_state(source="files", targets=[str(docs)])
    assert state.is_failed()
    with pytest.raises(Exception, match=r"eval.questions is set.*run `ingest reindex`"):
        state.result()
    assert space.store().resolve() == before

    # ...the reindex parameter builds the new collection and the gate moves the alias.
    state, summary = space.run(source="files", targets=[str(docs)], reindex=True)
    assert state.is_completed() and summary["status"] == "ok"
    assert space.store().resolve() != before
    with get_client(sync_client=True) as client:
        (gate,) = client.read_artifacts(
            artifact_filter=ArtifactFilter(
                key=ArtifactFilterKey(any_=["ingest-summary"]),
                flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id(state)]),
            )
        )
    table = str(gate.data)
    assert table.startswith("# Ingest") and "Re-index gate: the alias moved" in table, table
    row = next(line for line in table.splitlines() if line.startswith("| recall@5 (2 questions)"))
    assert row.split("|")[2] == row.split("|")[3], row  # the same budgets' worth of chunks
