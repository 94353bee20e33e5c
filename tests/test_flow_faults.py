"""The `ingest` flow under faults (docs/operations.md#reliability): Qdrant going away mid-run,
Confluence answering 429 for a minute or 503 past every retry, a page deleted between
listing and fetch, a page edited during the run, the cache directory's disk full. Each
ends in the collection of an uninterrupted run (same point ids and payloads) after at
most one more run, with the failure reported, and no document is ever left without
points. Plus randomized runs of two tenants whose document ids collide.

Same harness as `test_flow.py` (real Prefect API on SQLite, local-mode Qdrant, the local
Confluence API, the tiny BGE-M3-shaped model); faults are switched on from the run's own
task logs (`TaskFinished`), so nothing in the code under test is replaced, except the
disk-full case, where file creation under the cache directory fails with ENOSPC as the
kernel would answer it.
"""

from __future__ import annotations

import builtins
import errno
import io
import logging
import os
import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prefect.task_runners import ThreadPoolTaskRunner

from flows.ingest import ingest
from indexing.embedders import make_embedder
from indexing.search import SearchFilters, search
from testkit.confluence_api import FakeConfluence, Fixture, confluence_api
from testkit.tiny_model import tiny_model_dir
from tests.test_flow import (
    Outage,
    Workspace,
    eng,
    failures,
    outage,
    prefect_api,
    workspace,
)

# fixtures used by name
__all__ = ["confluence_api", "eng", "outage", "prefect_api", "tiny_model_dir", "workspace"]

# Every test runs flows on a temporary Prefect API: outside the fast lane.
pytestmark = [pytest.mark.usefixtures("prefect_api"), pytest.mark.slow]


class TaskFinished(logging.Handler):
    """Calls `action` once, when the run's task `task` logs that it completed."""

    def __init__(self, task: str, action: Callable[[], None]) -> None:
        super().__init__()
        self.task = task
        self.action: Callable[[], None] | None = action

    def emit(self, record: logging.LogRecord) -> None:
        finished = record.getMessage().startswith("Finished in state Completed")
        if self.action and getattr(record, "task_name", "") == self.task and finished:
            action, self.action = self.action, None
            action()


@pytest.fixture
def when_task_finished() -> Iterator[Callable[[str, Callable[[], None]], None]]:
    logger = logging.getLogger("prefect.task_runs")
    handlers: list[TaskFinished] = []

    def arm(task: str, action: Callable[[], None]) -> None:
        handlers.append(TaskFinished(task, action))
        logger.addHandler(handlers[-1])

    yield arm
    for handler in handlers:
        logger.removeHandler(handler)


def edit(api: FakeConfluence, fx: Fixture, names: tuple[str, ...], text: str) -> set[str]:
    for name in names:
        api.edit(fx[name], body=f"<p>{text} ({name}): {' '.join([name] * 30)}</p>")
    return {fx[name] for name in names}


def uninterrupted(make: Callable[..., Workspace], api: FakeConfluence) -> dict[str, Any]:
    """The collection a clean run of the source as it is now produces."""
    reference = make(f"reference-{time.monotonic_ns()}", api=api)
    state, _ = reference.run(source="confluence", targets=["ENG"])
    assert state.is_completed()
    return reference.points()


def indexed(
    make: Callable[..., Workspace], eng: tuple[FakeConfluence, Fixture], **env: str
) -> tuple[FakeConfluence, Fixture, Workspace]:
    """A workspace on the ENG space after the clean first run every scenario starts from."""
    api, fx = eng
    space = make(api=api, **env)
    state, summary = space.run(source="confluence", targets=["ENG"])
    assert state.is_completed() and summary["failed"] == [], summary["failed"]
    return api, fx, space


def assert_nothing_lost(before: dict[str, set[str]], after: dict[str, set[str]]) -> None:
    """Every document that had points still has some (old or new version)."""
    lost = [document_id for document_id in before if not after.get(document_id)]
    assert lost == []


def test_qdrant_lost_after_the_first_index_batch_keeps_old_points_and_one_run_heals(
    workspace: Callable[..., Workspace],
    eng: tuple[FakeConfluence, Fixture],
    outage: Callable[..., Outage],
) -> None:
    api, fx, space = indexed(workspace, eng)
    space.env["INGEST_RUN__BATCH_SIZE"] = "1"  # the faulty run: one document per batch
    space.env["INGEST_QDRANT__LOCK_WAIT_S"] = "1"  # each opening waits for the holder
    before = space.documents()
    edited = edit(api, fx, ("guide", "deep", "eng_blog"), "Second edition")
    watcher = outage(space, at="mid", recover=False)
    # one batch at a time, so the outage falls between the first index batch and the rest
    runner: Any = ThreadPoolTaskRunner(max_workers=1)
    one_by_one = ingest.with_options(task_runner=runner)

    state, summary = space.run(one_by_one, source="confluence", targets=["ENG"])

    assert state.is_failed()
    # reconcile could not reach Qdrant either: reported under the source's scope
    assert failures(summary).pop("confluence:ENG") == "STORE_BUSY"
    failed = {d: code for d, code in failures(summary).items() if d != "confluence:ENG"}
    assert len(failed) == 2 and set(failed) < edited  # one batch made it, two did not
    assert set(failed.values()) == {"STORE_BUSY"}
    assert watcher.retried == []  # a held store is waited for, not retried
    watcher.holder.give_back()
    after = space.documents()
    assert_nothing_lost(before, after)
    (done,) = edited - set(failed)
    assert after[done].isdisjoint(before[done])  # the indexed one is at its new version
    assert all(after[d] == before[d] for d in failed)  # the others keep their old points

    state, summary = space.run(source="confluence", targets=["ENG"])
    assert state.is_completed() and summary["failed"] == []
    assert summary["changed"] == 2
    assert space.points() == uninterrupted(workspace, api)


def test_confluence_answering_429_for_a_minute_is_waited_out(
    workspace: Callable[..., Workspace],
    eng: tuple[FakeConfluence, Fixture],
    when_task_finished: Callable[[str, Callable[[], None]], None],
) -> None:
    """Confluence Cloud sheds load with 429 and a Retry-After: the storm starts once the
    run has planned (fetches hit it) and lasts 60 s; the connector waits as told, on the
    default retry settings, and the run completes with nothing failed."""
    api, fx, space = indexed(workspace, eng)
    before = space.documents()
    edit(api, fx, ("guide", "notes"), "Second edition")
    when_task_finished("plan", lambda: api.storm(60, 429, retry_after="25"))

    started = time.monotonic()
    state, summary = space.run(source="confluence", targets=["ENG"])

    assert time.monotonic() - started >= 60
    assert api.requests["fault"] >= 2
    assert state.is_completed(), state
    assert (summary["changed"], summary["failed"]) == (2, [])
    assert_nothing_lost(before, space.documents())
    assert space.points() == uninterrupted(workspace, api)


def test_confluence_503_past_every_retry_fails_the_run_keeps_points_and_one_run_heals(
    workspace: Callable[..., Workspace],
    eng: tuple[FakeConfluence, Fixture],
    when_task_finished: Callable[[str, Callable[[], None]], None],
) -> None:
    api, fx, space = indexed(
        workspace,
        eng,
        INGEST_CONFLUENCE__MAX_RETRIES="1",
        INGEST_CONFLUENCE__BACKOFF_BASE_S="0.05",
    )
    before = space.points()
    edited = edit(api, fx, ("guide", "notes"), "Second edition")
    when_task_finished("plan", lambda: api.storm(600, 503))

    state, summary = space.run(source="confluence", targets=["ENG"])

    assert state.is_failed() and "transient reasons" in str(state.message)
    assert failures(summary) == {document_id: "FETCH_FAILED" for document_id in edited}
    assert summary["deleted"] == 0
    assert space.points() == before  # nothing lost, nothing half-written

    api.calm()
    state, summary = space.run(source="confluence", targets=["ENG"])
    assert state.is_completed() and (summary["changed"], summary["failed"]) == (2, [])
    assert space.points() == uninterrupted(workspace, api)


def test_page_deleted_between_listing_and_fetch_is_removed_in_the_same_run(
    workspace: Callable[..., Workspace], eng: tuple[FakeConfluence, Fixture]
) -> None:
    api, fx, space = indexed(workspace, eng)
    before = space.documents()
    edit(api, fx, ("guide", "notes"), "Second edition")  # both listed as changed
    api.delete_after_listing(fx["guide"])

    state, summary = space.run(source="confluence", targets=["ENG"])

    assert state.is_completed(), state
    assert summary["failed"] == [] and summary["deleted"] >= 1
    after = space.documents()
    assert fx["guide"] not in after
    assert_nothing_lost({d: p for d, p in before.items() if d in after}, after)
    # the guide's child moved up to its parent after this run listed it: the next run
    # sees the move (its access digest changed) and the collection is right
    state, summary = space.run(source="confluence", targets=["ENG"])
    assert state.is_completed() and summary["failed"] == []
    assert summary["changed"] >= 1 and summary["deleted"] == 0  # the child and its files
    assert space.points() == uninterrupted(workspace, api)


def test_page_edited_during_the_run_is_right_after_at_most_one_more_run(
    workspace: Callable[..., Workspace], eng: tuple[FakeConfluence, Fixture]
) -> None:
    api, fx, space = indexed(workspace, eng)
    before = space.documents()
    edit(api, fx, ("guide",), "Second edition")
    api.edit_after_listing(fx["guide"], body="<p>Third edition, written while the run ran.</p>")

    state, summary = space.run(source="confluence", targets=["ENG"])
    assert state.is_completed() and summary["failed"] == []
    assert_nothing_lost(before, space.documents())

    state, summary = space.run(source="confluence", targets=["ENG"])
    assert state.is_completed() and summary["failed"] == []
    points = space.points()
    assert points == uninterrupted(workspace, api)
    guide = [p["md_text"] for p in points.values() if p["document_id"] == fx["guide"]]
    assert guide == ["Third edition, written while the run ran."]


def test_a_page_restricted_without_an_edit_is_restricted_in_qdrant_after_the_next_run(
    workspace: Callable[..., Workspace], eng: tuple[FakeConfluence, Fixture]
) -> None:
    """Restrictions bump no version in Confluence: an incremental run still sees them (the
    listed version carries an access digest) and rewrites the page's points, so a search
    filtered by ACL stops showing it to others."""
    api, fx, space = indexed(workspace, eng)
    notes = [p for p in space.points().values() if p["document_id"] == fx["notes"]]
    assert notes and not any(p["acl"]["restricted"] for p in notes)

    before = space.documents()
    api.restrict(fx["notes"], groups=["release-managers"])
    state, summary = space.run(source="confluence", targets=["ENG"])

    assert state.is_completed() and summary["failed"] == []
    after = space.documents()
    rewritten = {d for d in after if after[d] != before[d]}
    # the page and its attachments (they carry the page's ACL), nothing else
    assert rewritten == {
        p["document_id"] for p in space.points().values() if p.get("page_id") == fx["notes"]
    }
    assert summary["changed"] == len(rewritten) >= 2
    notes = [p for p in space.points().values() if p["document_id"] == fx["notes"]]
    assert notes and all(
        p["acl"]
        == {
            "public": False,
            "users": [],
            "groups": ["release-managers"],
            "restricted": True,
            "space": "ENG",
            "space_open": False,
            "space_users": [],
            "space_groups": ["confluence-users"],
        }
        for p in notes
    )
    assert space.points() == uninterrupted(workspace, api)


class DiskFull:
    """While on, creating or writing a file or directory under `root` fails with ENOSPC,
    as on a full disk; reads work. Patches the three ways Python code creates files
    (`os.open`, `open`/`io.open`, `os.mkdir`), for this process only."""

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.root = str(root.resolve())
        self.on = False
        self.refused = 0
        real_os_open, real_open, real_mkdir = os.open, io.open, os.mkdir

        def os_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
            if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
                self._check(path)
            return real_os_open(path, flags, *args, **kwargs)

        def open_(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
            if any(flag in mode for flag in "wax+"):
                self._check(file)
            return real_open(file, mode, *args, **kwargs)

        def mkdir(path: Any, *args: Any, **kwargs: Any) -> None:
            self._check(path)
            real_mkdir(path, *args, **kwargs)

        monkeypatch.setattr(os, "open", os_open)
        monkeypatch.setattr(io, "open", open_)
        monkeypatch.setattr(builtins, "open", open_)
        monkeypatch.setattr(os, "mkdir", mkdir)

    def _check(self, path: Any) -> None:
        if not (self.on and isinstance(path, str | os.PathLike)):
            return
        if os.path.abspath(os.fspath(path)).startswith(self.root):
            self.refused += 1
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), os.fspath(path))


def test_cache_disk_full_fails_the_documents_keeps_points_and_one_run_heals(
    workspace: Callable[..., Workspace],
    eng: tuple[FakeConfluence, Fixture],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api, fx, space = indexed(workspace, eng)
    before = space.points()
    edited = edit(api, fx, ("guide", "deep"), "Second edition")
    disk = DiskFull(Path(space.settings().cache.dir), monkeypatch)

    disk.on = True
    state, summary = space.run(source="confluence", targets=["ENG"])
    disk.on = False

    assert disk.refused > 0
    assert state.is_failed() and "transient reasons" in str(state.message)
    failed = failures(summary)
    # the documents could not store their chunks; reconcile could not store link counts
    assert failed.pop("confluence:ENG") == "UPSERT_FAILED"
    assert failed == {document_id: "CHUNKING_FAILED" for document_id in edited}
    assert all("No space left on device" in f["message"] for f in summary["failed"])
    assert summary["deleted"] == 0
    assert space.points() == before

    state, summary = space.run(source="confluence", targets=["ENG"])
    assert state.is_completed() and (summary["changed"], summary["failed"]) == (2, [])
    assert space.points() == uninterrupted(workspace, api)


# --- tenant isolation, randomized ---------------------------------------------------------


@pytest.mark.parametrize("seed", [7, 2026])
def test_two_tenants_with_colliding_ids_never_touch_each_other(
    workspace: Callable[..., Workspace], tmp_path: Path, seed: int
) -> None:
    """Two tenants sync their own directory labelled `docs` (so their document ids collide:
    `docs/<name>`) in a random order of random edits, deletions, additions, full and
    incremental runs. After every run: the other tenant's points are exactly what they
    were, the running tenant's points hold its own files' text and nothing else, and a
    search scoped to a tenant never returns the other's points."""
    rng = random.Random(seed)
    space = workspace()
    roots = {t: tmp_path / t / "docs" for t in ("acme", "globex")}
    files: dict[str, dict[str, str]] = {t: {} for t in roots}
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]

    def write(tenant: str, name: str) -> None:
        text = f"{tenant}marker {name} " + " ".join(rng.choice(words) for _ in range(40))
        files[tenant][name] = text
        path = roots[tenant] / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# {name}\n\n{text}\n", encoding="utf-8")

    for tenant in roots:
        for i in range(4):
            write(tenant, f"note{i}.md")  # the same names: colliding document ids
    last: dict[str, dict[str, dict[str, Any]]] = {t: {} for t in roots}
    embedder = make_embedder(space.settings().embedder)  # one model load for every search
    for _round in range(6):
        tenant = rng.choice(sorted(roots))
        other = next(t for t in roots if t != tenant)
        for _ in range(rng.randint(1, 3)):
            action = rng.choice(["edit", "add", "delete"])
            names = sorted(files[tenant])
            if action == "delete" and len(names) > 1:
                name = rng.choice(names)
                (roots[tenant] / name).unlink()
                del files[tenant][name]
            else:
                write(
                    tenant, rng.choice(names) if action == "edit" else f"new{rng.randint(0, 9)}.md"
                )
        mode = rng.choice(["incremental", "full"])
        state, summary = space.run(
            source="files",
            targets=[f"docs={roots[tenant]}"],
            tenant_id=tenant,
            mode=mode,
            force_delete=True,  # one of four files is over the 20% deletion guard
        )
        assert state.is_completed() and summary["failed"] == [], summary

        mine, theirs = space.points(tenant), space.points(other)
        assert theirs == last[other]  # not read into, written or deleted by this run
        assert {p["document_id"] for p in mine.values()} == {f"docs/{n}" for n in files[tenant]}
        for payload in mine.values():
            name = str(payload["document_id"]).removeprefix("docs/")
            assert payload["tenant_id"] == tenant
            assert payload["md_text"] in files[tenant][name]
        last[tenant] = mine

        store = space.store()
        hits = search(
            store,
            embedder,
            f"{other}marker",
            limit=50,
            filters=SearchFilters(tenant_id=tenant),
        )
        assert hits and {hit.payload["tenant_id"] for hit in hits} == {tenant}
