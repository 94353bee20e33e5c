"""One document's failure never reaches another.

Real good files of every format (PDF, DOCX, XLSX, PPTX, DOC, Markdown, HTML, a screenshot)
mixed with generated bad files of every kind (plain ZIPs named as Office or Visio files,
random bytes named as PDF or legacy Office files, an empty and a truncated DOCX, a
truncated XLSX, text named .png, a damaged DOC) go through the pipeline's batch steps (the
functions the flow's tasks run) in random orders and batch sizes: every good file comes
out point for point as in a run without the bad ones, one document a batch, and every bad
one fails with the typed, permanent code it gets alone. A fault injected into each later
stage (an embedder that breaks on one document's text, a write that fails for one
document, reconcile writes that fail for one) costs that document alone. Through the
command line, a folder of good and bad files exits 0 and a second run does nothing.
"""

from __future__ import annotations

import io
import json
import random
import shutil
import time
import zipfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from config.errors import ErrorCode, IngestError
from config.settings import Settings
from flows.cli import main
from indexing.embedders import Embedder, Embedding
from indexing.qdrant_store import QdrantStore
from normalizers.base import normalize_bytes
from tasks import pipeline
from tasks.links import LinkStore
from tasks.pipeline import BatchOutcome, SourceSpec
from tasks.resources import Resources
from testkit.tiny_model import tiny_model_dir
from tests.test_flow import Workspace, prefect_api, workspace
from tests.test_sync_safety import store_snapshot

# fixtures used by name
__all__ = ["prefect_api", "tiny_model_dir", "workspace"]

REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "samples" / "docs"
GOOD = [
    SAMPLES / "architecture" / "storage-design.pdf",
    SAMPLES / "architecture" / "overview.pptx",
    SAMPLES / "handbook" / "incident-response.docx",
    SAMPLES / "handbook" / "oncall-rota.xlsx",
    SAMPLES / "handbook" / "onboarding.md",
    SAMPLES / "legacy" / "old-policy.doc",
    SAMPLES / "runbooks" / "restart-service.html",
    SAMPLES / "runbooks" / "deploy-blocked.png",
]
# The codes bad input is reported with: typed, never a crash of the pipeline.
TYPED = {
    ErrorCode.UNSUPPORTED_FORMAT.value,
    ErrorCode.CORRUPT.value,
    ErrorCode.ENCRYPTED.value,
    ErrorCode.TOO_LARGE.value,
    ErrorCode.NO_TEXT_LAYER.value,
}
EXAMPLES = 3  # random mixes, each in a fresh cache and store
TIME_BUDGET_S = 240.0  # no further mix is started past it (at least one always runs)


def _plain_zip(rng: random.Random) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("notes.txt", " ".join(f"word{rng.randrange(1000)}" for _ in range(50)))
    return buffer.getvalue()


def bad_files(rng: random.Random) -> dict[str, bytes]:
    """One file of every kind of bad input, their bytes drawn from `rng`."""
    docx = (SAMPLES / "handbook" / "incident-response.docx").read_bytes()
    xlsx = (SAMPLES / "handbook" / "oncall-rota.xlsx").read_bytes()
    noise = rng.randbytes
    return {
        **{f"plain-zip.{ext}": _plain_zip(rng) for ext in ("docx", "xlsx", "pptx", "vsdx")},
        **{f"random.{ext}": noise(rng.randrange(64, 4096)) for ext in ("pdf", "doc", "xls", "ppt")},
        "empty.docx": b"",
        "truncated.docx": docx[: rng.randrange(len(docx) // 4, len(docx) // 2)],
        "truncated.xlsx": xlsx[: rng.randrange(len(xlsx) // 4, len(xlsx) // 2)],
        "text.png": b"this is a note, not a picture\n" * 10,
        # an OLE2 header and then noise: LibreOffice's Word filter cannot load it
        "damaged.doc": b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + noise(4096),
    }


def alone_code(name: str, data: bytes) -> str:
    """The code a bad file fails with when normalized by itself."""
    with pytest.raises(IngestError) as caught:
        normalize_bytes(data, name)
    return caught.value.code.value


Snapshot = dict[str, tuple[str, list[float]]]


def by_document(points: Snapshot) -> dict[str, Snapshot]:
    out: dict[str, Snapshot] = {}
    for point_id, (payload, vector) in points.items():
        out.setdefault(json.loads(payload)["document_id"], {})[point_id] = (payload, vector)
    return out


def run_batches(
    settings: Settings,
    folder: Path,
    batch_size: int,
    *,
    rng: random.Random | None = None,
    resources: Resources | None = None,
) -> tuple[Snapshot, BatchOutcome]:
    """The pipeline's batch steps over `folder` (in `rng`'s order when given), then
    reconcile; the collection and the run's outcome."""
    spec = SourceSpec("files", (str(folder),))
    resources = resources or Resources(settings)
    try:
        listing = pipeline.discover(spec, settings, resources)
        refs = list(listing.refs)
        if rng is not None:
            rng.shuffle(refs)
        total = BatchOutcome()
        for batch in pipeline.batches(refs, batch_size):
            prepared = pipeline.prepare_isolated(spec, settings, batch, resources)
            outcome = pipeline.index_isolated(spec, settings, prepared.documents, resources)
            outcome.merge(prepared.outcome)
            total.merge(outcome)
        reconciled = pipeline.reconcile(
            spec, settings, listing, total.gone, total.indexed, resources, force=True
        )
        total.failures += reconciled.failures
        return store_snapshot(resources.store()), total
    finally:
        resources.close()


def same_points(got: Snapshot, expected: Snapshot) -> bool:
    """Same ids and payloads; vectors equal but for float noise of the model's batching."""
    if got.keys() != expected.keys():
        return False
    for point_id, (payload, vector) in expected.items():
        other_payload, other_vector = got[point_id]
        if other_payload != payload:
            return False
        if any(abs(a - b) > 1e-5 for a, b in zip(vector, other_vector, strict=True)):
            return False
    return True


@pytest.fixture
def share(tmp_path: Path) -> Path:
    folder = tmp_path / "share"
    folder.mkdir()
    for path in GOOD:
        shutil.copy(path, folder / path.name)
    return folder


@pytest.mark.slow
def test_good_files_come_out_as_alone_whatever_bad_files_share_their_batches(
    workspace: Callable[..., Workspace], share: Path
) -> None:
    alone, outcome = run_batches(workspace("alone").settings(), share, batch_size=1)
    assert outcome.failures == []
    expected = by_document(alone)
    assert len(expected) == len(GOOD)
    started = time.monotonic()
    for example in range(EXAMPLES):
        if example and time.monotonic() - started > TIME_BUDGET_S:
            break
        rng = random.Random(4400 + example)
        bad = bad_files(rng)
        for name, data in bad.items():
            (share / name).write_bytes(data)
        batch_size = rng.randrange(2, len(GOOD) + len(bad) + 1)
        mixed, outcome = run_batches(
            workspace(f"mixed-{example}").settings(), share, batch_size, rng=rng
        )
        context = f"example {example}, batch size {batch_size}"
        got = by_document(mixed)
        assert got.keys() == expected.keys(), context
        for document_id, points in expected.items():
            assert same_points(got[document_id], points), f"{context}: {document_id}"
        failed = {Path(f.document_id).name: f for f in outcome.failures}
        assert failed.keys() == bad.keys(), context
        for name, failure in failed.items():
            assert not failure.transient, f"{context}: {name} {failure}"
            assert failure.code in TYPED, f"{context}: {name} {failure}"
            assert failure.code == alone_code(name, bad[name]), f"{context}: {name}"
        for name in bad:
            (share / name).unlink()


class FaultyResources(Resources):
    """The run's real embedder and store, with a fault injected for the documents whose
    text holds `poison`: in embedding (`stage="embed"`), or in the store's write
    (`"upsert"`), deletion (`"delete"`) or payload update (`"fields"`)."""

    def __init__(self, settings: Settings, stage: str, poison: str) -> None:
        super().__init__(settings)
        self.stage, self.poison = stage, poison
        self.poisoned: set[str] = set()  # document ids whose text holds the poison

    def embedder(self) -> Embedder:
        real = super().embedder()
        if self.stage != "embed":
            return real
        return PoisonedEmbedder(real, self.poison)

    def store(self, embedder: Embedder | None = None, **options: Any) -> QdrantStore:
        store = super().store(embedder, **options)
        poisoned = self.poisoned

        def refuse(document_ids: Sequence[str]) -> None:
            if poisoned & set(document_ids):
                raise RuntimeError(f"injected {self.stage} fault")

        if self.stage == "upsert":
            upsert = store.upsert

            def upsert_unless_poisoned(chunks: Sequence[Any], *args: Any) -> int:
                refuse([chunk.document_id for chunk in chunks])
                return upsert(chunks, *args)

            store.upsert = upsert_unless_poisoned  # type: ignore[method-assign,assignment]
        if self.stage == "delete":
            delete = store.delete_documents

            def delete_unless_poisoned(tenant_id: str, document_ids: Sequence[str]) -> None:
                refuse(document_ids)
                delete(tenant_id, document_ids)

            store.delete_documents = delete_unless_poisoned  # type: ignore[method-assign]
        if self.stage == "fields":
            set_fields = store.set_documents_fields

            def set_unless_poisoned(
                tenant_id: str, document_ids: Sequence[str], fields: dict[str, Any]
            ) -> None:
                refuse(document_ids)
                set_fields(tenant_id, document_ids, fields)

            store.set_documents_fields = set_unless_poisoned  # type: ignore[method-assign]
        return store


class PoisonedEmbedder:
    """The real embedder, breaking on any batch that holds a poisoned text."""

    def __init__(self, inner: Embedder, poison: str) -> None:
        self.inner, self.poison = inner, poison
        self.model_id, self.vector_size = inner.model_id, inner.vector_size
        self.has_sparse = inner.has_sparse

    def embed(self, texts: Sequence[str]) -> list[Embedding]:
        if any(self.poison in text for text in texts):
            raise RuntimeError("the model broke on this text")
        return self.inner.embed(texts)


def notes(folder: Path, count: int, poisoned: int) -> list[str]:
    """`count` Markdown notes, the `poisoned`-th holding the word POISONED."""
    folder.mkdir(parents=True, exist_ok=True)
    names = []
    for i in range(count):
        word = "POISONED" if i == poisoned else "healthy"
        body = " ".join(f"{word} note {i} sentence {j}." for j in range(60))
        (folder / f"note{i}.md").write_text(f"# Note {i}\n\n{body}\n", encoding="utf-8")
        names.append(f"note{i}.md")
    return names


def listed_ids(settings: Settings, folder: Path, resources: Resources) -> dict[str, str]:
    """file name -> document id of the files `folder` lists now."""
    listing = pipeline.discover(SourceSpec("files", (str(folder),)), settings, resources)
    return {Path(ref.document_id).name: ref.document_id for ref in listing.refs}


def documents_of(points: Snapshot) -> set[str]:
    return {Path(document_id).name for document_id in by_document(points)}


@pytest.mark.parametrize("stage", ["embed", "upsert"])
def test_a_fault_in_indexing_one_document_costs_that_document_alone(
    workspace: Callable[..., Workspace], tmp_path: Path, stage: str
) -> None:
    folder = tmp_path / "notes"
    names = notes(folder, 5, poisoned=2)
    settings = workspace().settings()
    resources = FaultyResources(settings, stage, "POISONED")
    resources.poisoned = {listed_ids(settings, folder, resources)["note2.md"]}
    points, outcome = run_batches(settings, folder, batch_size=5, resources=resources)
    assert documents_of(points) == set(names) - {"note2.md"}
    [failure] = outcome.failures
    assert failure.document_id.endswith("note2.md") and not failure.transient
    assert failure.code == (ErrorCode.EMBED_FAILED if stage == "embed" else ErrorCode.UPSERT_FAILED)
    assert "injected upsert fault" in failure.message or "broke on this text" in failure.message


def test_a_fault_every_document_meets_alone_is_reported_transient_for_all(
    workspace: Callable[..., Workspace], tmp_path: Path
) -> None:
    """A store that refuses every write is no document's fault: the run must fail (and
    retry them), not call them permanently bad."""
    folder = tmp_path / "notes"
    notes(folder, 3, poisoned=-1)
    settings = workspace().settings()
    resources = FaultyResources(settings, "upsert", "")
    resources.poisoned = set(listed_ids(settings, folder, resources).values())
    _, outcome = run_batches(settings, folder, batch_size=3, resources=resources)
    assert len(outcome.failures) == 3
    assert all(f.transient and f.code == ErrorCode.UPSERT_FAILED for f in outcome.failures)


@pytest.mark.parametrize("stage", ["delete", "fields"])
def test_a_fault_in_reconciling_one_document_costs_that_document_alone(
    workspace: Callable[..., Workspace], tmp_path: Path, stage: str
) -> None:
    folder = tmp_path / "notes"
    names = notes(folder, 5, poisoned=-1)
    space = workspace()
    settings = space.settings()
    before, outcome = run_batches(settings, folder, batch_size=5)
    assert documents_of(before) == set(names) and outcome.failures == []
    spec = SourceSpec("files", (str(folder),))
    resources = FaultyResources(settings, stage, "")
    ids = listed_ids(settings, folder, resources)
    listed = pipeline.discover(spec, settings, resources)
    if stage == "delete":  # two files vanish; deleting one of them fails
        resources.poisoned = {ids["note1.md"]}
        for name in ("note1.md", "note3.md"):
            (folder / name).unlink()
        listed = pipeline.discover(spec, settings, resources)
        indexed: list[str] = []
    else:  # every document's link count is pushed; one push fails
        resources.poisoned = {ids["note4.md"]}
        indexed = sorted(ids.values())
    try:
        reconciled = pipeline.reconcile(spec, settings, listed, [], indexed, resources, force=True)
        after = store_snapshot(resources.store())
    finally:
        resources.close()
    [failure] = reconciled.failures
    assert failure.code == ErrorCode.UPSERT_FAILED and not failure.transient
    assert f"injected {stage} fault" in failure.message
    if stage == "delete":
        assert failure.document_id == ids["note1.md"]
        assert reconciled.deleted == [ids["note3.md"]]
        assert documents_of(after) == set(names) - {"note3.md"}  # note1's points are kept
    else:
        assert failure.document_id == ids["note4.md"]
        links_in = {
            Path(json.loads(payload)["document_id"]).name: json.loads(payload).get("links_in")
            for payload, _ in after.values()
        }
        assert links_in["note0.md"] == 0
        # the one it failed for is pushed by the next run, whatever the counts say
        unpushed = LinkStore(settings.cache.dir, settings.tenant_id).unpushed()
        assert unpushed == [ids["note4.md"]]


@pytest.fixture
def cli_workspace(workspace: Callable[..., Workspace], prefect_api: None) -> Iterator[Workspace]:
    yield workspace()


@pytest.mark.slow
def test_a_folder_of_good_and_bad_files_exits_0_and_a_second_run_does_nothing(
    cli_workspace: Workspace, share: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = bad_files(random.Random(44))
    for name, data in bad.items():
        (share / name).write_bytes(data)

    def run() -> tuple[int, dict[str, Any]]:
        cli_workspace.activate()
        code = main(["run", "files", str(share), "--json"])
        return code, json.loads(capsys.readouterr().out.strip().splitlines()[-1])

    code, first = run()
    assert code == 0 and first["status"] == "ok", first
    assert first["new"] == len(GOOD)
    failed = {Path(f["document_id"]).name: f for f in first["failed"]}
    assert failed.keys() == bad.keys()
    assert all(not f["transient"] and f["code"] in TYPED for f in failed.values()), failed
    code, second = run()
    assert code == 0 and second["status"] == "ok", second
    assert second["new"] == 0 and second["changed"] == 0
    assert second["unchanged"] == len(GOOD) and second["normalize"]["done"] == 0
    assert {Path(f["document_id"]).name for f in second["failed"]} == bad.keys()
