"""Safe sync for file shares, and exit codes that tell the truth, through the
real `ingest` flow (Prefect API on SQLite, local-mode Qdrant, the tiny model).

Each scenario is one an operator meets: two shares that both have a `docs` folder, a
narrower glob run over an indexed directory, a label reused for another directory, a
collection indexed before root labels carried a digest, a listed file swapped for a FIFO,
and `ingest run`'s exit status when a deletion is refused, a listing fails or documents
fail. After every refused or failed run the collection is compared point for point
(ids, payloads, vectors) with what it was before.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from connectors.files import root_label
from flows.cli import main
from flows.report import (
    EXIT_DELETION_REFUSED,
    EXIT_DOCUMENTS_FAILED,
    EXIT_LISTING_INCOMPLETE,
    EXIT_OK,
)
from indexing.qdrant_store import QdrantStore
from testkit.confluence_api import FakeConfluence, Fixture, confluence_api
from testkit.tiny_model import tiny_model_dir
from tests.fixtures_pdf import lines, new_doc, to_bytes
from tests.test_flow import Workspace, eng, failures, prefect_api, workspace
from tests.test_flow_faults import when_task_finished

# fixtures used by name
__all__ = [
    "confluence_api",
    "eng",
    "prefect_api",
    "tiny_model_dir",
    "when_task_finished",
    "workspace",
]

# Every test runs flows on a temporary Prefect API: outside the fast lane.
pytestmark = [pytest.mark.usefixtures("prefect_api"), pytest.mark.slow]


def share(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def notes(prefix: str, names: list[str]) -> dict[str, str]:
    """A text file per name, each with its own words (so each has its own chunks)."""
    return {
        name: f"# {prefix} {name}\n\n" + " ".join(f"{prefix}-{name}-word{i}" for i in range(40))
        for name in names
    }


NAMES = [f"note{i}.md" for i in range(10)]


def snapshot(space: Workspace) -> dict[str, tuple[str, list[float]]]:
    """point id -> (payload as canonical JSON, dense vector): the whole collection."""
    return store_snapshot(space.store())


def store_snapshot(store: QdrantStore) -> dict[str, tuple[str, list[float]]]:
    """The same, of the collection `store` reads."""
    name = store.resolve()
    if name is None:
        return {}
    found: dict[str, tuple[str, list[float]]] = {}
    offset: Any = None
    while True:
        records, offset = store.client.scroll(
            name, limit=256, offset=offset, with_payload=True, with_vectors=True
        )
        for record in records:
            vector = record.vector
            dense = vector.get("dense") if isinstance(vector, dict) else vector
            found[str(record.id)] = (
                json.dumps(record.payload, sort_keys=True),
                [x for x in dense if isinstance(x, float)] if isinstance(dense, list) else [],
            )
        if offset is None:
            return found


def test_two_shares_with_a_docs_folder_each_keep_their_own_documents(
    workspace: Callable[..., Workspace], tmp_path: Path
) -> None:
    first = share(tmp_path / "a" / "docs", notes("alpha", NAMES))
    second = share(tmp_path / "b" / "docs", notes("beta", NAMES[:8]))
    space = workspace()
    state, summary = space.run(source="files", targets=[str(first)])
    assert state.is_completed() and summary["new"] == 10
    before = snapshot(space)

    state, summary = space.run(source="files", targets=[str(second)])

    assert state.is_completed()
    assert (summary["new"], summary["changed"], summary["deleted"]) == (8, 0, 0)
    after = snapshot(space)
    assert {k: v for k, v in after.items() if k in before} == before  # untouched
    texts = {p["document_id"]: p["md_text"] for p in space.points().values()}
    assert len(texts) == 18
    assert all("alpha-" in t for d, t in texts.items() if d.startswith(root_label(first) + "/"))
    assert all("beta-" in t for d, t in texts.items() if d.startswith(root_label(second) + "/"))


def test_a_narrower_glob_run_deletes_nothing_that_still_exists(
    workspace: Callable[..., Workspace], tmp_path: Path
) -> None:
    kept = [f"keep{i}.md" for i in range(6)]
    docs = share(tmp_path / "docs", notes("g", [*kept, "-draft.md", "sub/deep.md", "other.md"]))
    space = workspace()
    state, _ = space.run(source="files", targets=[str(docs)])
    assert state.is_completed()
    before = snapshot(space)

    glob = str(docs / "[!-]*")  # top-level names not starting with '-'
    state, summary = space.run(source="files", targets=[glob])

    assert state.is_completed() and summary["deleted"] == 0 and summary["seen"] == 7
    assert snapshot(space) == before
    # what the glob owns still goes when it is deleted, and only that
    (docs / "other.md").unlink()
    state, summary = space.run(source="files", targets=[glob])
    assert state.is_completed() and summary["deleted"] == 1
    label = root_label(docs)
    expected = {f"{label}/{name}" for name in [*kept, "-draft.md", "sub/deep.md"]}
    assert set(space.documents()) == expected


def test_a_label_that_holds_another_directory_is_refused_before_anything_is_written(
    workspace: Callable[..., Workspace], tmp_path: Path
) -> None:
    first = share(tmp_path / "a" / "docs", notes("alpha", NAMES[:3]))
    second = share(tmp_path / "b" / "docs", notes("beta", NAMES[:3]))
    space = workspace()
    state, _ = space.run(source="files", targets=[f"team={first}"])
    assert state.is_completed()
    before = snapshot(space)

    state = space.run_state(source="files", targets=[f"team={second}"])

    assert state.is_failed()
    assert "already holds documents of another directory" in str(state.message)
    assert snapshot(space) == before


def test_a_collection_with_legacy_ids_moves_to_the_new_ids_without_losing_anything(
    workspace: Callable[..., Workspace], tmp_path: Path
) -> None:
    docs = share(tmp_path / "docs", notes("m", NAMES))
    space = workspace()
    # Ids as labels without a digest gave them: `docs/<path>`.
    state, _ = space.run(source="files", targets=[f"docs={docs}"])
    assert state.is_completed()
    assert all(d.startswith("docs/") for d in space.documents())
    (docs / "note9.md").unlink()  # gone while the collection still has it

    state, summary = space.run(source="files", targets=[str(docs)])

    assert state.is_completed(), state.message
    label = root_label(docs)
    assert set(space.documents()) == {f"{label}/{name}" for name in NAMES[:9]}
    assert summary["new"] == 9 and summary["deleted"] == 10  # 9 renamed + the one gone
    assert summary["embed"]["done"] == 0  # same texts: every embedding from the cache


def test_a_file_swapped_for_a_fifo_mid_run_fails_alone_and_the_run_goes_on(
    workspace: Callable[..., Workspace],
    tmp_path: Path,
    when_task_finished: Callable[[str, Callable[[], None]], None],
) -> None:
    docs = share(tmp_path / "docs", notes("f", NAMES[:4]))
    space = workspace()
    state, _ = space.run(source="files", targets=[str(docs)])
    assert state.is_completed()
    old_points = space.documents()
    share(docs, {"note0.md": "# changed\n\nnew text", "note1.md": "# edited\n\nother text"})

    def swap() -> None:
        (docs / "note0.md").unlink()
        os.mkfifo(docs / "note0.md")

    when_task_finished("plan", swap)
    state, summary = space.run(source="files", targets=[str(docs)])

    label = root_label(docs)
    assert failures(summary) == {f"{label}/note0.md": "FETCH_FAILED"}
    assert "not a regular file" in summary["failed"][0]["message"]
    # the file that failed is not counted as changed: only the one indexed
    assert summary["changed"] == 1 and summary["deleted"] == 0
    after = space.documents()
    assert after[f"{label}/note0.md"] == old_points[f"{label}/note0.md"]  # kept
    assert after[f"{label}/note1.md"].isdisjoint(old_points[f"{label}/note1.md"])  # updated


# --- exit codes of `ingest run` ---------------------------------------------------------


def run_cli(
    space: Workspace, *args: str, capsys: pytest.CaptureFixture[str]
) -> tuple[int, dict[str, Any]]:
    space.activate()
    code = main(["run", *args, "--json"])
    out = capsys.readouterr().out.strip().splitlines()
    return code, json.loads(out[-1])


def test_a_refused_mass_deletion_exits_with_its_own_code_and_changes_nothing(
    workspace: Callable[..., Workspace], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = share(tmp_path / "docs", notes("d", NAMES))
    space = workspace()
    assert run_cli(space, "files", str(docs), capsys=capsys)[0] == EXIT_OK
    before = snapshot(space)
    for name in NAMES[:5]:
        (docs / name).unlink()

    code, summary = run_cli(space, "files", str(docs), capsys=capsys)

    assert code == EXIT_DELETION_REFUSED and summary["status"] == "deletion_refused"
    assert summary["deletion_refused"] and summary["deleted"] == 0
    assert snapshot(space) == before


def test_an_unreachable_confluence_exits_listing_incomplete_and_names_the_space(
    workspace: Callable[..., Workspace], capsys: pytest.CaptureFixture[str]
) -> None:
    space = workspace(
        INGEST_CONFLUENCE__URL="http://127.0.0.1:9/wiki",  # the discard port: nothing listens
        INGEST_CONFLUENCE__USERNAME="bot@example.com",
        INGEST_CONFLUENCE__TOKEN="t0ken",
        INGEST_CONFLUENCE__MAX_RETRIES="1",
        INGEST_CONFLUENCE__BACKOFF_BASE_S="0.01",
    )

    code, summary = run_cli(space, "confluence", "ENG", capsys=capsys)

    assert code == EXIT_LISTING_INCOMPLETE and summary["status"] == "listing_incomplete"
    assert summary["seen"] == 0 and not summary["listing_complete"]
    [failure] = summary["failed"]
    assert failure["document_id"] == "confluence:ENG" and "ENG" in failure["message"]


def test_documents_that_failed_for_now_exit_documents_failed(
    workspace: Callable[..., Workspace],
    eng: tuple[FakeConfluence, Fixture],
    when_task_finished: Callable[[str, Callable[[], None]], None],
    capsys: pytest.CaptureFixture[str],
) -> None:
    api, fx = eng
    space = workspace(
        api=api, INGEST_CONFLUENCE__MAX_RETRIES="1", INGEST_CONFLUENCE__BACKOFF_BASE_S="0.01"
    )
    assert run_cli(space, "confluence", "ENG", capsys=capsys)[0] == EXIT_OK
    api.edit(fx["guide"], body="<p>Second edition of the guide.</p>")
    when_task_finished("plan", lambda: api.storm(600, 503))
    try:
        code, summary = run_cli(space, "confluence", "ENG", capsys=capsys)
    finally:
        api.calm()

    assert code == EXIT_DOCUMENTS_FAILED and summary["status"] == "documents_failed"
    assert failures(summary) == {fx["guide"]: "FETCH_FAILED"}
    assert summary["failed"][0]["transient"] is True


SUMMARY_KEYS = {
    "source",
    "tenant_id",
    "mode",
    "status",
    "listing_complete",
    "listing_errors",
    "deletion_refused",
    "seen",
    "unchanged",
    "changed",
    "new",
    "deleted",
    "failed",
    "fetch",
    "normalize",
    "chunk",
    "embed",
    "upsert",
    "seconds",
    "chunks",
    "token_histogram",
    "started",
    "wall_seconds",
    "store_seconds",
    "warnings",
    "chunk_counts",
    "over_window",
    "pictures",
    "collection_points",
    "command_seconds",
}


def flow_runs() -> int:
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return len(client.read_flow_runs())


def test_one_summary_shape_and_an_unchanged_source_is_reported_without_a_flow_run(
    workspace: Callable[..., Workspace], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = share(tmp_path / "docs", notes("s", NAMES[:3]))
    space = workspace()
    code, first = run_cli(space, "files", str(docs), capsys=capsys)
    # no `stages` twin; Prefect's start-up, on its own, where the run started Prefect
    assert code == EXIT_OK and set(first) == SUMMARY_KEYS | {"prefect_startup_seconds"}
    for stage in ("fetch", "normalize", "chunk", "embed", "upsert"):
        assert set(first[stage]) == {"done", "cached"}, stage
    assert first["new"] == 3 and first["normalize"] == {"done": 3, "cached": 0}
    # one unit per count: `embed` and `chunk_counts` count chunks, the rest documents
    chunks = first["chunks"]
    assert first["embed"] == {"done": chunks, "cached": 0}
    assert first["chunk_counts"] == {
        "chunk": {"done": chunks, "cached": 0},
        "embed": {"done": chunks, "cached": 0},
        "upsert": {"done": chunks, "cached": 0},
    }
    assert first["collection_points"] == chunks
    # the command's wall time holds Prefect's start-up and the run
    assert first["command_seconds"] > first["prefect_startup_seconds"] > 0
    assert first["command_seconds"] > first["wall_seconds"] > 0
    runs = flow_runs()
    before = snapshot(space)

    code, again = run_cli(space, "files", str(docs), capsys=capsys)

    assert code == EXIT_OK and set(again) == SUMMARY_KEYS
    assert (again["unchanged"], again["new"], again["changed"]) == (3, 0, 0)
    assert again["normalize"] == {"done": 0, "cached": 3}
    # no chunk of an unchanged document was looked at, and the index still holds them all
    assert again["embed"] == {"done": 0, "cached": 0} and again["chunks"] == 0
    assert again["collection_points"] == chunks
    assert flow_runs() == runs  # nothing to orchestrate: no flow run, no Prefect API
    assert snapshot(space) == before
    # a deletion is still reconciled on that path
    (docs / NAMES[0]).unlink()
    share(docs, notes("s", [f"more{i}.md" for i in range(5)]))
    code, forced = run_cli(space, "files", str(docs), "--always-flow", capsys=capsys)
    assert code == EXIT_OK and flow_runs() == runs + 1 and forced["new"] == 5
    for name in [f"more{i}.md" for i in range(5)]:
        (docs / name).unlink()
    code, _ = run_cli(space, "files", str(docs), capsys=capsys)
    assert code == EXIT_DELETION_REFUSED and flow_runs() == runs + 1  # 5 of 7: over 20%
    code, pruned = run_cli(space, "files", str(docs), "--force-delete", capsys=capsys)
    assert code == EXIT_OK and pruned["deleted"] == 5 and flow_runs() == runs + 1
    assert len(space.documents()) == 2


def test_a_document_indexed_with_a_warning_has_it_in_the_run_report(
    workspace: Callable[..., Workspace], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A normalizer's warning (here: a PDF page without text) reaches the summary as a
    warning of that document, not as a failure: the run is ok and the document indexed."""
    docs = share(tmp_path / "docs", notes("w", NAMES[:2]))
    pdf = new_doc()
    lines(pdf.new_page(), 72, 72, ["Quarterly figures", "Revenue grew in every region."])
    pdf.new_page()  # a scanned page would look like this without OCR
    (docs / "report.pdf").write_bytes(to_bytes(pdf))
    space = workspace()

    code, summary = run_cli(space, "files", str(docs), capsys=capsys)

    assert code == EXIT_OK and summary["status"] == "ok" and summary["failed"] == []
    warned = [w for w in summary["warnings"] if w["document_id"].endswith("/report.pdf")]
    assert [w["message"] for w in warned] == ["no text on page(s) 2"], summary["warnings"]
    assert len(summary["warnings"]) == 1
    assert any(d.endswith("/report.pdf") for d in space.documents())


class PhaseRecorder:
    """A progress bar that writes down what the run's progress records tell it."""

    def __init__(self) -> None:
        self.events: list[tuple[str, int, int]] = []

    def phase(self, name: str) -> None:
        self.events.append((name, 0, 0))

    def count(self, name: str, total: int, done: int) -> None:
        self.events.append((name, total, done))


def test_progress_moves_per_document_and_a_failed_document_is_not_new(
    workspace: Callable[..., Workspace], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from flows.local_run import progress_records_to

    docs = share(tmp_path / "docs", notes("p", NAMES[:3]))
    (docs / "broken.pdf").write_bytes(b"%PDF-1.4\n1 0 obj <<\n")  # truncated: CORRUPT
    space = workspace()
    recorder = PhaseRecorder()
    with progress_records_to(recorder):
        code, summary = run_cli(space, "files", str(docs), capsys=capsys)

    assert code == EXIT_OK and [f["code"] for f in summary["failed"]] == ["CORRUPT"]
    # the file that failed is counted once, as failed, not as new
    assert (summary["seen"], summary["new"], summary["changed"]) == (4, 3, 0)
    phases = [name for name, _, _ in recorder.events]
    assert phases[0] == "listing" and phases[-2:] == ["reconciling", "building the search index"]
    processing = [(total, done) for name, total, done in recorder.events if "documents" in name]
    assert processing == [(4, 0), (0, 1), (0, 1), (0, 1), (0, 1)]  # a step per document
    # texts embedded: every chunk, and its parts where the collection holds part vectors
    embedding = [(total, done) for name, total, done in recorder.events if "embedding" in name]
    assert sum(t for t, _ in embedding) == sum(d for _, d in embedding) >= summary["chunks"]
    assert len(embedding) > 1  # the line moves as the embedder goes
