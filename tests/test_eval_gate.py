"""The re-index gate through the real command line over some of the quickstart's files
(Qdrant Edge, the quickstart's settings and small model): a change of `chunking.max_tokens` rebuilt into a new
collection from the stage cache; with `eval.questions` set, a change that loses the
questions' targets is refused (the alias stays, the new collection is kept, `--force`
moves it anyway), an unchanged build moves it, and a plain run refuses to re-chunk in
place; normalized texts pruned from the stage cache are fetched again, and a collection
that records no chunking settings counts as changed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from config.settings import load_settings
from query.api import Index
from tests.process_helpers import run_ingest

# Each test runs ingest commands as processes: outside the fast lane.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "samples" / "quickstart.yaml"
# Whole passages of two samples: a chunk of the quickstart's budgets holds each, one of
# at most 50 tokens cannot.
PASSAGES = [
    (
        "runbooks/backup.txt",
        "How often are base backups taken and how long are they kept?",
        "Every cluster streams its write-ahead log continuously to the backup bucket in the "
        "same region, and takes a full base backup every night at 02:00 UTC. Base backups "
        "are kept for thirty-five days and the write-ahead log for the same period",
    ),
    (
        "handbook/onboarding.md",
        "Which build tools does the monorepo use and how long does a full build take?",
        "All services live in one monorepo. The build uses Bazel for the Go and Java "
        "services and uv for the Python tooling. A full build from a cold cache takes about "
        "twenty minutes on a current laptop; incremental builds take seconds.",
    ),
]
SAMPLES = (
    "runbooks/backup.txt",
    "runbooks/restart-service.html",
    "runbooks/deploy-blocked.png",
    "handbook/onboarding.md",
)
SMALL = {"min_tokens": 30, "target_tokens": 40, "max_tokens": 50, "overlap_tokens": 10}


def gated_settings() -> dict[str, Any]:
    """The quickstart's settings with results of chunks alone: a passage would join the
    pieces of a paragraph that SMALL splits, and hold the phrase again."""
    settings = yaml.safe_load(QUICKSTART.read_text())
    settings["search"] = {"expand": "none"}
    return dict(settings)


@dataclass(frozen=True)
class State:
    root: Path
    env: dict[str, str]
    docs: Path
    questions: Path

    def config(self, name: str, *, chunking: dict[str, int] | None = None, **gate: Any) -> Path:
        """The quickstart's settings with other chunk budgets and the gate's settings."""
        settings = gated_settings()
        settings["chunking"] |= chunking or {}
        if gate:
            settings["eval"] = gate
        path = self.root / f"{name}.yaml"
        path.write_text(yaml.safe_dump(settings))
        return path

    def ingest(self, *args: str | Path) -> subprocess.CompletedProcess[str]:
        return run_ingest([str(arg) for arg in args], self.env, self.root)

    def alias_target(self, config: Path) -> str | None:
        with Index(load_settings(config_file=config, environ=self.env)) as index:
            return index.store().resolve()


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> State:
    root = tmp_path_factory.mktemp("gate")
    docs = root / "docs"
    for name in SAMPLES:  # a few of the quickstart's files: each test builds a collection
        (docs / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / "samples" / "docs" / name, docs / name)
    questions = root / "passages.yaml"
    questions.write_text(
        yaml.safe_dump(
            [{"question": q, "target": t, "phrase": p, "tags": ["passage"]} for t, q, p in PASSAGES]
        )
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "INGEST_"))}
    env |= {
        "PREFECT_HOME": str(root / "prefect"),
        "INGEST_QDRANT__PATH": str(root / "state" / "qdrant"),
        "INGEST_CACHE__DIR": str(root / "state" / "cache"),
        "PYTHONPATH": str(ROOT),
    }
    state = State(root, env, docs, questions)
    run = state.ingest("run", "files", docs, "--config", QUICKSTART, "--json")
    assert json.loads(run.stdout)["new"] > 0, run.stderr
    return state


@pytest.fixture
def state(indexed: State, tmp_path: Path) -> State:
    """A copy of the indexed state for one test (the gate's outcomes move the alias)."""
    shutil.copytree(indexed.root / "state", tmp_path / "state")
    env = indexed.env | {
        "INGEST_QDRANT__PATH": str(tmp_path / "state" / "qdrant"),
        "INGEST_CACHE__DIR": str(tmp_path / "state" / "cache"),
    }
    return State(tmp_path, env, indexed.docs, indexed.questions)


def test_a_chunking_change_that_loses_the_targets_is_refused_and_the_alias_stays(
    state: State,
) -> None:
    gated = state.config("gated", questions=str(state.questions), max_drop=0.02)
    before = state.ingest("eval", state.questions, "--config", gated, "--json")
    assert before.returncode == 0, before.stderr
    assert all(r["rank"] and r["rank"] <= 5 for r in json.loads(before.stdout)["results"])
    current = state.alias_target(gated)

    smaller = state.config("smaller", chunking=SMALL, questions=str(state.questions))
    run = state.ingest("run", "files", state.docs, "--config", smaller)
    assert run.returncode != 0
    assert "ingest reindex" in run.stdout + run.stderr, (run.stdout, run.stderr)
    assert "Traceback" not in run.stderr

    refused = state.ingest("reindex", "--config", smaller)
    assert refused.returncode == 1, (refused.stdout, refused.stderr)
    assert "answers eval.questions worse" in refused.stderr
    assert "Traceback" not in refused.stderr
    for question in (q for _, q, _ in PASSAGES):
        assert question in refused.stderr
    assert state.alias_target(smaller) == current  # readers still see the old collection
    after = state.ingest("eval", state.questions, "--config", gated, "--json")
    assert json.loads(after.stdout)["results"] == json.loads(before.stdout)["results"]

    forced = state.ingest("reindex", "--config", smaller, "--force")
    assert forced.returncode == 0, forced.stderr
    assert "chunked anew from the stage cache" in forced.stdout
    assert "| recall@5 (2 questions) | 1.000 | 0.000 |" in forced.stdout, forced.stdout
    assert state.alias_target(smaller) not in (None, current)


def test_a_chunking_change_is_rebuilt_from_the_stage_cache_into_a_new_collection(
    state: State,
) -> None:
    smaller = state.config("smaller", chunking=SMALL)
    settings = load_settings(config_file=smaller, environ=state.env)
    with Index(settings) as index:
        store = index.store()
        current, documents = store.resolve(), store.document_points()
    done = state.ingest("reindex", "--config", smaller)
    assert done.returncode == 0, done.stderr
    assert "chunked anew from the stage cache" in done.stdout, done.stdout
    with Index(settings) as index:
        store = index.store()
        assert store.resolve() != current
        rebuilt = store.document_points()
        assert set(rebuilt) == set(documents)
        assert sum(map(len, rebuilt.values())) > sum(map(len, documents.values()))
        sample = store.payloads(sorted(rebuilt[min(rebuilt)]))
    assert all(p["token_count"] <= SMALL["max_tokens"] or p["oversize"] for p in sample.values())
    # nothing to do the second time; a run on the new settings finds everything unchanged
    again = state.ingest("reindex", "--config", smaller)
    assert "nothing to do" in again.stdout, again.stdout
    run = state.ingest("run", "files", state.docs, "--config", smaller, "--json")
    summary = json.loads(run.stdout)
    assert summary["new"] == 0, summary


def test_an_unchanged_build_passes_the_gate_and_moves_the_alias(state: State) -> None:
    gated = state.config("gated", questions=str(ROOT / "samples" / "questions.yaml"))
    current = state.alias_target(gated)
    done = state.ingest("reindex", "--config", gated, "--to", "quickstart_copy")
    assert done.returncode == 0, done.stderr
    assert "Re-index gate: the alias moved" in done.stdout, done.stdout
    assert "hit@5 won/lost 0/0" in done.stdout
    assert state.alias_target(gated) == "quickstart_copy" != current


def test_a_document_pruned_from_the_stage_cache_is_fetched_again_and_the_rebuild_goes_on(
    state: State,
) -> None:
    """Every normalized text aged and pruned by `ingest cache prune`: the rebuild fetches
    and normalizes the documents again from the files source that synced them."""
    cache = Path(state.env["INGEST_CACHE__DIR"])
    normalized = [path for path in (cache / "normalize").rglob("*") if path.is_file()]
    assert len(normalized) == len(SAMPLES)
    for path in normalized:
        os.utime(path, (0, 0))
    pruned = state.ingest("cache", "prune", "--max-age-days", "1", "--config", QUICKSTART)
    assert pruned.returncode == 0, pruned.stderr
    assert not any(path.exists() for path in normalized)

    smaller = state.config("smaller", chunking=SMALL)
    settings = load_settings(config_file=smaller, environ=state.env)
    with Index(settings) as index:
        documents = index.store().document_points()
    done = state.ingest("reindex", "--config", smaller)
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert "chunked anew" in done.stdout, done.stdout
    assert all(path.exists() for path in normalized)  # normalized again, by the same keys
    with Index(settings) as index:
        rebuilt = index.store().document_points()
        sample = index.store().payloads(sorted(rebuilt[min(rebuilt)]))
    assert set(rebuilt) == set(documents)
    assert sum(map(len, rebuilt.values())) > sum(map(len, documents.values()))
    assert all(p["token_count"] <= SMALL["max_tokens"] or p["oversize"] for p in sample.values())


def test_a_collection_that_does_not_record_its_chunking_counts_as_changed(state: State) -> None:
    """A collection an earlier version made records no chunking settings: with the gate
    on, a run with other budgets refuses to re-chunk it in place, and `ingest reindex`
    rebuilds it by chunks, where it used to find nothing to do."""
    gated = state.config(
        "smaller-gated", chunking=SMALL, questions=str(ROOT / "samples" / "questions.yaml")
    )
    settings = load_settings(config_file=gated, environ=state.env)
    with Index(settings) as index:
        store = index.store()
        current = store.resolve()
        assert current is not None and store.recorded(current)["chunking_id"]
        store.record(current, chunking_id=None)  # as an earlier version left it

    run = state.ingest("run", "files", state.docs, "--config", gated)
    assert run.returncode != 0
    assert "does not record the chunking settings" in run.stdout + run.stderr, run.stderr
    assert state.alias_target(gated) == current

    done = state.ingest("reindex", "--config", state.config("smaller", chunking=SMALL))
    assert done.returncode == 0, done.stderr
    assert "chunked anew" in done.stdout, done.stdout
    moved = state.alias_target(gated)
    assert moved not in (None, current)
    with Index(settings) as index:
        assert index.store().recorded(moved or "")["chunking_id"]
