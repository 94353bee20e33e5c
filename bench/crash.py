"""Benchmark (run by hand): crash safety under SIGKILL (docs/operations.md#reliability).

    .venv/bin/python -m bench.crash [--kills 20] [--seed 7] [--pages 100] [--prefect]

A space (`build_fixture` plus `--pages` generated pages) is served by the local
Confluence API. A child Python process runs the pipeline stages of the `ingest` flow
(`tasks.pipeline`: discover, plan, prepare_isolated + index_isolated per batch, reconcile;
the same code the flow's tasks call, without Prefect's ~10 s ephemeral start-up) and
prints a line per phase it enters; with `--prefect` it runs the `ingest` flow itself on
Prefect's ephemeral API (its own PREFECT_HOME), the pipeline functions wrapped to
announce their phase. The parent
kills it with SIGKILL (its own process group) at seeded random delays after it enters a
chosen phase (`listing`, `preparing`, `indexing`, `reconcile`, in turn), `--kills` times,
each kill against the state the previous one left (`--edits` pages are edited before
each kill after the first, so every killed run has work to do); then it runs to
completion once.
The result is compared with an uninterrupted run in separate directories: the same
point ids, payloads and vectors, and every cache entry readable (`StageCache.get`), no
temporary file taken for an entry.

`tests/test_crash_safety.py` runs the same with 4 kills, and 2 through Prefect.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from testkit.confluence_api import (
    FakeConfluence,
    add_bulk_pages,
    build_fixture,
    ingest_environment,
)

ROOT = Path(__file__).resolve().parents[1]
PHASES = ("listing", "preparing", "indexing", "reconcile")
SPACE = "ENG"
# The same text embedded in a batch of other lengths (padding) differs in the last float
# bits (seen: 1e-5 after rounding); a wrong vector differs by orders of magnitude more.
VECTOR_TOLERANCE = 1e-4

# The child: the flow's stages through tasks.pipeline, one batch at a time, announcing
# each phase on stdout (flushed) so the parent knows where it kills.
CHILD = r"""
import sys
from config.settings import load_settings
from tasks import pipeline
from tasks.pipeline import BatchOutcome, SourceSpec
from tasks.resources import Resources

def say(phase):
    print("PHASE " + phase, flush=True)

say("start")
settings = load_settings()
spec = SourceSpec("confluence", (sys.argv[1],))
resources = Resources(settings)
say("listing")
listing = pipeline.discover(spec, settings, resources)
plan = pipeline.plan(spec, settings, listing, resources, mode="incremental", since=None)
total = BatchOutcome()
for refs in pipeline.batches(plan.to_process, settings.run.batch_size):
    say("preparing")
    prepared = pipeline.prepare_isolated(spec, settings, refs, resources)
    say("indexing")
    outcome = pipeline.index_isolated(spec, settings, prepared.documents, resources)
    outcome.merge(prepared.outcome)
    total.merge(outcome)
say("reconcile")
pipeline.reconcile(spec, settings, listing, total.gone, total.indexed, resources)
resources.close()
say("done")
print("FAILED " + str(len(total.failures)), flush=True)
"""


# The same, through the real `ingest` flow on Prefect's ephemeral API (its own SQLite
# database under PREFECT_HOME, a server subprocess in the child's process group): the
# pipeline functions the flow's tasks call are wrapped to announce their phase.
PREFECT_CHILD = r"""
import sys
from tasks import pipeline

def announce(phase, function):
    def announced(*args, **kwargs):
        # the real stdout: the flow logs print() calls (log_prints) instead of printing
        sys.__stdout__.write("PHASE " + phase + "\n")
        sys.__stdout__.flush()
        return function(*args, **kwargs)
    return announced

for phase, name in (("listing", "discover"), ("preparing", "prepare_isolated"),
                    ("indexing", "index_isolated"), ("reconcile", "reconcile")):
    setattr(pipeline, name, announce(phase, getattr(pipeline, name)))
print("PHASE start", flush=True)
from flows.ingest import ingest
state = ingest(source="confluence", targets=[sys.argv[1]], return_state=True)
failed = len(state.result()["failed"]) if state.is_completed() else -1
print("PHASE done", flush=True)
print("FAILED " + str(failed), flush=True)
"""


@dataclass
class Kill:
    target: str
    delay_s: float
    phase: str  # the last phase the child announced before the kill ("finished": too late)


@dataclass
class Outcome:
    kills: list[Kill] = field(default_factory=list)
    runs_s: list[float] = field(default_factory=list)


def make_space(api: FakeConfluence, pages: int) -> list[str]:
    build_fixture(api)
    return add_bulk_pages(api, SPACE, pages, body_bytes=1500)


def editor(
    api: FakeConfluence, pages: list[str], seed: int, per_round: int
) -> Callable[[int], None]:
    """Edits `per_round` seeded pages (new versions, new text) before each kill round."""
    rng = random.Random(seed)

    def mutate(round_: int) -> None:
        for page in rng.sample(pages, min(per_round, len(pages))):
            words = " ".join(f"word{rng.randrange(10**6)}" for _ in range(200))
            api.edit(page, body=f"<h2>Round {round_}</h2><p>{words}</p>")

    return mutate


def child_env(
    root: Path, api: FakeConfluence, model: Path, batch_size: int, *, prefect: bool = False
) -> dict[str, str]:
    """The child's environment; with `prefect`, the flow runs on an ephemeral Prefect API
    of its own (PREFECT_HOME under `root`, never a server the parent may use)."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("INGEST_", "CHUNK_", "PREFECT_"))
    }
    env.update(
        {
            **ingest_environment(root, api, model),
            "INGEST_RUN__BATCH_SIZE": str(batch_size),
            "PYTHONHASHSEED": "0",
            "TOKENIZERS_PARALLELISM": "false",
            "OMP_NUM_THREADS": "1",
            "CRASH_CHILD": PREFECT_CHILD if prefect else CHILD,
        }
    )
    if prefect:
        (root / "prefect-home").mkdir(parents=True, exist_ok=True)  # Prefect makes one level
        env["PREFECT_HOME"] = str(root / "prefect-home")
        env["PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"] = "120"
    return env


class Child:
    """One child run in its own process group; tracks the phases it announces."""

    def __init__(self, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", env["CRASH_CHILD"], SPACE],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.phases: list[str] = []
        self.failed: int | None = None
        self.changed = threading.Condition()
        self.stderr = ""
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._err = threading.Thread(target=self._read_err, daemon=True)
        self._err.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self.changed:
                if line.startswith("PHASE "):
                    self.phases.append(line.split()[1])
                elif line.startswith("FAILED "):
                    self.failed = int(line.split()[1])
                self.changed.notify_all()
        with self.changed:
            self.phases.append("finished")
            self.changed.notify_all()

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        self.stderr = self.proc.stderr.read()

    def wait_phase(self, phase: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self.changed:
            while phase not in self.phases and "finished" not in self.phases:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.changed.wait(left)
            return phase in self.phases

    def kill(self) -> str:
        with self.changed:
            last = self.phases[-1] if self.phases else "start-up"
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self._reader.join(10)
        self._err.join(10)
        return last

    def finish(self, timeout: float) -> int:
        rc = self.proc.wait(timeout)
        self._reader.join(10)
        self._err.join(10)
        return rc


def run_to_end(env: dict[str, str], timeout: float = 600.0) -> float:
    started = time.perf_counter()
    child = Child(env)
    try:
        rc = child.finish(timeout)
    except subprocess.TimeoutExpired:
        child.kill()
        raise
    if rc != 0 or child.failed != 0:
        raise RuntimeError(f"run failed (rc {rc}, failures {child.failed}):\n{child.stderr}")
    return time.perf_counter() - started


def kill_once(env: dict[str, str], target: str, delay_s: float, timeout: float = 600.0) -> Kill:
    child = Child(env)
    try:
        if child.wait_phase(target, timeout):
            time.sleep(delay_s)
    finally:
        phase = child.kill()
    return Kill(target, delay_s, phase)


def snapshot(root: Path, engine: str = "edge") -> dict[str, tuple[str, list[float], str]]:
    """point id -> (payload as canonical JSON, dense vector, sparse vector as JSON), read
    from the `engine` store (Edge, the default, or local mode) under `root`."""
    from config.settings import QdrantSettings
    from indexing.qdrant_store import QdrantConnection, QdrantStore
    from indexing.store_schema import CollectionSchema

    settings = QdrantSettings.model_validate({"path": str(root / "qdrant"), "engine": engine})
    points: dict[str, tuple[str, list[float], str]] = {}
    with QdrantConnection(settings) as connection:
        store = QdrantStore(connection, CollectionSchema(0, False, False))
        for page in store.pages(256):
            for p in page:
                vectors = p.vector if isinstance(p.vector, dict) else {"dense": p.vector}
                dense = vectors.get("dense")
                sparse = vectors.get("sparse")
                points[str(p.id)] = (
                    json.dumps(p.payload, sort_keys=True, ensure_ascii=False),
                    [x for x in dense if isinstance(x, float)] if isinstance(dense, list) else [],
                    json.dumps(
                        None
                        if sparse is None
                        else sorted(
                            zip(
                                getattr(sparse, "indices", []),
                                list(getattr(sparse, "values", [])),
                                strict=True,
                            )
                        )
                    ),
                )
    return points


def cache_problems(root: Path) -> list[str]:
    """StageCache entries that do not read back (`get` returns None) and JSON files
    beside them (link records, run state) that do not parse. Temporary files of dead
    writers are skipped: a key's path is never one."""
    from stage_cache.store import StageCache

    cache = StageCache(root / "cache")
    problems = [
        str(cache.path(key).relative_to(cache.root))
        for key in cache.entry_keys()
        if cache.get(key) is None
    ]
    for path in sorted((root / "cache").rglob("*.json")):  # link records, run state
        try:
            json.loads(path.read_bytes())
        except ValueError:
            problems.append(str(path.relative_to(root / "cache")))
    return problems


def temp_files(root: Path) -> int:
    return sum(1 for p in (root / "cache").rglob(".tmp-*") if p.is_file())


def compare(
    reference: dict[str, tuple[str, list[float], str]],
    crashed: dict[str, tuple[str, list[float], str]],
) -> list[str]:
    diffs: list[str] = []
    missing = sorted(set(reference) - set(crashed))
    extra = sorted(set(crashed) - set(reference))
    if missing:
        diffs.append(f"{len(missing)} points missing, e.g. {missing[:3]}")
    if extra:
        diffs.append(f"{len(extra)} extra points, e.g. {extra[:3]}")
    for pid in sorted(set(reference) & set(crashed)):
        ref, got = reference[pid], crashed[pid]
        if ref[0] != got[0]:
            diffs.append(f"point {pid}: payload differs")
        if len(ref[1]) != len(got[1]) or _max_diff(ref[1], got[1]) > VECTOR_TOLERANCE:
            diffs.append(f"point {pid}: dense vector differs")
        ref_sparse, got_sparse = json.loads(ref[2]) or [], json.loads(got[2]) or []
        if [i for i, _ in ref_sparse] != [i for i, _ in got_sparse] or _max_diff(
            [v for _, v in ref_sparse], [v for _, v in got_sparse]
        ) > VECTOR_TOLERANCE:
            diffs.append(f"point {pid}: sparse vector differs")
    return diffs


def _max_diff(a: list[float], b: list[float]) -> float:
    return max((abs(x - y) for x, y in zip(a, b, strict=True)), default=0.0)


def schedule(kills: int, seed: int, max_delay_s: float) -> list[tuple[str, float]]:
    rng = random.Random(seed)
    return [(PHASES[i % len(PHASES)], rng.uniform(0.0, max_delay_s)) for i in range(kills)]


def crash_scenario(
    work: Path,
    api: FakeConfluence,
    model: Path,
    *,
    kills: list[tuple[str, float]],
    batch_size: int,
    log: bool = False,
    mutate: Callable[[int], None] | None = None,
    prefect: bool = False,
) -> tuple[Outcome, list[str]]:
    """The killed runs, the completing run, then the reference run (fresh directories,
    same content); returns the kills and every difference found (empty: identical
    collection, clean cache). `mutate(i)`, called before kill i > 0, changes the space so
    that the next killed run has work to do (else every later kill finds all cached)."""
    outcome = Outcome()
    crashed_env = child_env(work / "crashed", api, model, batch_size, prefect=prefect)
    for i, (target, delay) in enumerate(kills):
        if mutate is not None and i > 0:
            mutate(i)
        kill = kill_once(crashed_env, target, delay)
        outcome.kills.append(kill)
        if log:
            print(
                f"kill {len(outcome.kills):>2}: after entering {target:<9} + {delay:.2f} s "
                f"-> killed in {kill.phase}; temp files left {temp_files(work / 'crashed')}",
                flush=True,
            )
    outcome.runs_s.append(run_to_end(crashed_env))
    reference_env = child_env(work / "reference", api, model, batch_size, prefect=prefect)
    outcome.runs_s.append(run_to_end(reference_env))
    problems = compare(snapshot(work / "reference"), snapshot(work / "crashed"))
    problems += [f"unreadable cache entry {p}" for p in cache_problems(work / "crashed")]
    return outcome, problems


def main() -> None:
    import tempfile

    from testkit.tiny_model import build_tiny_model

    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--pages", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=20)
    parser.add_argument("--edits", type=int, default=30, help="pages edited between kills")
    parser.add_argument("--max-delay", type=float, default=1.5, help="seconds after a phase")
    parser.add_argument(
        "--prefect", action="store_true", help="kill the real flow on Prefect's ephemeral API"
    )
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-crash-"))
    model = build_tiny_model(work / "model")
    with FakeConfluence("cloud") as api:
        pages = make_space(api, args.pages)
        plan = schedule(args.kills, args.seed, args.max_delay)
        outcome, problems = crash_scenario(
            work,
            api,
            model,
            kills=plan,
            batch_size=args.batch_size,
            log=True,
            mutate=editor(api, pages, args.seed, args.edits) if args.edits else None,
            prefect=args.prefect,
        )
    phases: dict[str, int] = {}
    for kill in outcome.kills:
        phases[kill.phase] = phases.get(kill.phase, 0) + 1
    points = len(snapshot(work / "reference"))
    print(
        f"\n{args.kills} kills (seed {args.seed}), landed in: "
        + ", ".join(f"{k} {v}" for k, v in sorted(phases.items()))
    )
    print(
        f"completing run {outcome.runs_s[-2]:.1f} s, reference run {outcome.runs_s[-1]:.1f} s, "
        f"{points} points; work dir {work}"
    )
    if problems:
        print("NOT EQUAL:\n  " + "\n  ".join(problems[:50]))
        raise SystemExit(1)
    print("equal: same point ids, payloads and vectors; every cache entry readable")


if __name__ == "__main__":
    main()
