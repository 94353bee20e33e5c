"""Benchmark (run by hand): a full ingest of a generated Confluence space (figures in
docs/benchmarks.md#benchmarks).

    .venv/bin/python -m bench.scale [--pages 1000] [--attachments-share 0.2]
        [--runner threads|dask|both] [--engine edge|local] [--dump FILE] [--tracemalloc]

A space of `--pages` pages and pages/5 attachments is served by the local Confluence
API in a child process (built there from `--seed`: the same pages every run): a realistic mix of long English and Russian pages with headings, big tables, code
macros, panels and lists, short pages, blog-like notes; attachments are PDF, DOCX, XLSX,
PPTX, Markdown and text files. The `ingest` flow runs in this process under
`prefect_test_harness` (a temporary Prefect API server on SQLite in a subprocess, what
`ingest run` gets from the ephemeral API; its start-up is printed apart) with the tiny
BGE-M3-shaped model into the embedded store `--engine` names (`qdrant.engine`: Qdrant
Edge, the default, or qdrant-client's local mode). Printed: wall time, seconds per stage
(from the run summary: fetch, normalize, chunk, embed, upsert summed over batches, and
`optimize`, the HNSW build at the run's end, when the collection passed
`qdrant.optimize_threshold`), the upsert stage's share of the wall time, the store
client's own seconds from the run summary (`store_seconds`: writes, reads, the index
build) and the writes' share, peak RSS of this process, the flow's (its anonymous part
apart, and its RSS before the run), of the local Confluence API's process and of the
Prefect API server subprocess (sampled every 0.2 s with psutil), and the Prefect task-run
count of the flow run. The tiny model's vectors have 32 dimensions: the store holds far
less than with BGE-M3's 1024.

`--dump FILE` writes the point ids and payloads as JSON (sorted), for comparing two
versions of the code or the two engines: `python -m bench.scale --engine edge --dump
edge.json`, the same with `local --dump local.json`, then `python -m bench.scale
--compare-dumps edge.json local.json` prints the point counts, whether the ids are the
same and how many payloads differ (the local API's port, new each run, left out of URLs).

`--tracemalloc` traces Python's allocations in the flow's process (`AllocationSnapshots`)
and prints where they are after all documents are indexed and what grew per 1,000
documents: what a run keeps per document. Tracing slows the run down and adds to its RSS.

`--runner dask` runs the flow on prefect-dask's `DaskTaskRunner` with a local cluster of 2
worker processes (batches are prepared in the workers and indexed in the flow's process,
an embedded store being one process's); `--runner both` runs threads, then Dask into
a second collection, and compares the two: same point ids and payloads.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import re
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext, suppress
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import psutil

from bench.orchestration import task_runs
from testkit.confluence_api import (
    FakeConfluence,
    Layout,
    ServedApi,
    ingest_environment,
    tiny_docx,
    tiny_pdf,
    tiny_pptx,
    tiny_xlsx,
)

SPACE = "SCALE"
API_LABEL = "the local Confluence API"

EN = (
    "The deployment pipeline builds every service from the main branch, runs the unit "
    "and integration suites and promotes the image to staging when both pass. "
    "Operators watch the error budget on the dashboard before approving production. "
    "Rollbacks are a single command and restore the previous image within minutes. "
)
RU = (
    "Сервис авторизации выдаёт токены доступа сроком на один час и обновляет их по "
    "запросу клиента. Журнал событий хранится тридцать дней и доступен группе "
    "безопасности. При отказе узла балансировщик переводит трафик на резервный узел. "
)
CODE = (
    "def handler(event, context):\n"
    "    payload = json.loads(event['body'])\n"
    "    if not payload.get('id'):\n"
    "        return {'statusCode': 400}\n"
    "    table.put_item(Item=payload)\n"
    "    return {'statusCode': 201}\n"
)


def _paragraphs(rng: random.Random, text: str, count: int) -> str:
    parts = []
    for _ in range(count):
        sentences = text.split(". ")
        rng.shuffle(sentences)
        parts.append("<p>" + ". ".join(sentences) + "</p>")
    return "".join(parts)


def _table(rng: random.Random, rows: int) -> str:
    head = "<tr><th>Host</th><th>Role</th><th>Region</th><th>Owner</th><th>Notes</th></tr>"
    body = "".join(
        f"<tr><td>srv-{rng.randrange(10**5):05d}</td><td>{rng.choice(['db', 'web', 'cache'])}"
        f"</td><td>{rng.choice(['eu-west', 'us-east', 'ru-central'])}</td>"
        f"<td>{rng.choice(['alice', 'bob', 'иван'])}</td><td>patched {rng.randrange(1, 28)}"
        f".0{rng.randrange(1, 9)}</td></tr>"
        for _ in range(rows)
    )
    return f"<table><tbody>{head}{body}</tbody></table>"


def _code(lines: int) -> str:
    body = (CODE * (lines // 6 + 1)).splitlines()[:lines]
    return (
        '<ac:structured-macro ac:name="code"><ac:parameter ac:name="language">python'
        "</ac:parameter><ac:plain-text-body><![CDATA["
        + "\n".join(body)
        + "]]></ac:plain-text-body></ac:structured-macro>"
    )


def page_body(rng: random.Random, i: int) -> str:
    """One page of a mix: 40% long English, 25% Russian, 15% table-heavy, 10% code, 10%
    short notes."""
    kind = rng.random()
    if kind < 0.40:
        sections = rng.randint(3, 8)
        return "".join(
            f"<h2>Section {s}</h2>{_paragraphs(rng, EN, rng.randint(2, 6))}"
            f"<ul><li>step one</li><li>step two<ul><li>detail</li></ul></li></ul>"
            for s in range(sections)
        )
    if kind < 0.65:
        return "".join(
            f"<h2>Раздел {s}</h2>{_paragraphs(rng, RU, rng.randint(2, 5))}"
            '<ac:structured-macro ac:name="info"><ac:rich-text-body><p>Важно: '
            "проверьте доступы.</p></ac:rich-text-body></ac:structured-macro>"
            for s in range(rng.randint(2, 6))
        )
    if kind < 0.80:
        return f"<h1>Inventory {i}</h1>{_paragraphs(rng, EN, 1)}{_table(rng, rng.randint(20, 120))}"
    if kind < 0.90:
        return f"<h1>Snippets</h1>{_paragraphs(rng, EN, 1)}{_code(rng.randint(10, 120))}"
    return f"<p>Short note {i}: see the runbook.</p>"


def attachment(rng: random.Random, i: int) -> tuple[str, bytes, str]:
    text = (EN if i % 2 else RU) * rng.randint(1, 4)
    match i % 6:
        case 0:
            return f"report-{i}.pdf", tiny_pdf(text[:1500]), "application/pdf"
        case 1:
            return (
                f"spec-{i}.docx",
                tiny_docx(text),
                "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
            )
        case 2:
            return (
                f"sheet-{i}.xlsx",
                tiny_xlsx(text[:200]),
                "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
            )
        case 3:
            return (
                f"deck-{i}.pptx",
                tiny_pptx(text[:300]),
                "application/vnd.openxmlformats-officedocument.presentationml.presentation",
            )
        case 4:
            return f"notes-{i}.md", f"# Notes {i}\n\n{text}\n".encode(), "text/markdown"
        case _:
            return f"readme-{i}.txt", text.encode(), "text/plain"


def build_space(api: FakeConfluence, pages: int, attachments: int, seed: int) -> None:
    rng = random.Random(seed)
    stamp = datetime(2026, 1, 1, tzinfo=UTC) - timedelta(days=3)
    api.add_space(SPACE)
    ids: list[str] = []
    home: str | None = None
    section: str | None = None
    for i in range(pages):
        parent = section if i % 100 else home
        page_id = api.add_page(
            SPACE,
            f"Page {i:05d}",
            page_body(rng, i),
            parent=parent,
            when=stamp,
            labels=[rng.choice(["ops", "dev", "hr", "security"])],
        )
        if i == 0:
            home = page_id
        elif i % 100 == 0:
            section = page_id
        ids.append(page_id)
    for i in range(attachments):
        name, data, media = attachment(rng, i)
        api.add_attachment(ids[(i * 5) % len(ids)], name, data, media, when=stamp)


@dataclass(frozen=True)
class ServedSpace:
    """The generated space as its child process serves it."""

    base_url: str
    layout: Layout
    pid: int
    build_s: float  # seconds building the space in the child


def _serve_space(conn: Connection, pages: int, attachments: int, seed: int) -> None:
    """The child process: serve the generated space until the parent closes `conn`."""
    with FakeConfluence("cloud") as api:
        started = time.perf_counter()
        build_space(api, pages, attachments, seed)
        conn.send((api.base_url, api.layout, time.perf_counter() - started))
        with suppress(EOFError):  # the parent is done (or gone)
            conn.recv()


@contextmanager
def served_space(pages: int, attachments: int, seed: int) -> Iterator[ServedSpace]:
    """The generated space on the local Confluence API in a child process (spawned: no
    copy of this process's memory), built there from `seed`, so its pages are the same
    run after run and this process's RSS is the flow's own."""
    context = multiprocessing.get_context("spawn")
    conn, child_end = context.Pipe()
    child = context.Process(
        target=_serve_space, args=(child_end, pages, attachments, seed), daemon=True
    )
    child.start()
    child_end.close()
    try:
        base_url, layout, build_s = conn.recv()
    except EOFError:
        raise SystemExit("the local Confluence API's process ended before serving") from None
    assert child.pid is not None
    try:
        yield ServedSpace(base_url, layout, child.pid, build_s)
    finally:
        conn.close()
        child.join(timeout=10)
        if child.is_alive():
            child.terminate()


class RssSampler:
    """Peak RSS of this process and of each child process, sampled every `interval` s;
    children named in `labels` (pid -> name) are reported by that name. This process's
    anonymous memory (RSS less its resident file pages: libraries, the model's and the
    store's mapped files) is followed apart: what the run holds in its heaps; and the peak
    of each phase of the run, which the pipeline's progress records name."""

    def __init__(self, labels: dict[int, str], interval: float = 0.2) -> None:
        self.interval = interval
        self.labels = labels
        self.me = psutil.Process()
        self.peak_self = self.peak_anon = 0
        self.peak_at = 0.0
        self.started = time.perf_counter()
        self.current = "starting"
        self.peak_phases: dict[str, int] = {}
        self.peak_anon_phases: dict[str, int] = {}
        self.peak_children: dict[int, tuple[str, int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def sample(self) -> None:
        try:
            memory = self.me.memory_info()
            if memory.rss > self.peak_self:
                self.peak_self, self.peak_at = memory.rss, time.perf_counter() - self.started
            anon = memory.rss - memory.shared
            self.peak_anon = max(self.peak_anon, anon)
            phase = self.current
            self.peak_phases[phase] = max(self.peak_phases.get(phase, 0), memory.rss)
            self.peak_anon_phases[phase] = max(self.peak_anon_phases.get(phase, 0), anon)
            for child in self.me.children(recursive=True):
                try:
                    rss = child.memory_info().rss
                    name = self.labels.get(child.pid) or " ".join(child.cmdline()[:3])[:60]
                except psutil.Error:
                    continue
                old = self.peak_children.get(child.pid, (name, 0))[1]
                self.peak_children[child.pid] = (name, max(old, rss))
        except psutil.Error:
            pass

    def __enter__(self) -> RssSampler:
        self.start_self = self.me.memory_info().rss
        self.started = time.perf_counter()
        self.peak_self = self.peak_anon = 0
        self.peak_at = 0.0
        self.peak_children = {}
        from flows.local_run import progress_records_to

        self._records = ExitStack()
        self._records.enter_context(progress_records_to(self))
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()
        self._records.close()

    def phase(self, name: str) -> None:
        """A progress record's phase (the listing, reconciling, the index build)."""
        self.current = name

    def count(self, name: str, total: int, done: int) -> None:
        from tasks.outcome import PROCESSING

        if name == PROCESSING:  # embedding's records come in the midst of it
            self.current = name


class AllocationSnapshots:
    """Python's allocations in this process traced through a run (`--tracemalloc`; the
    store's and the model's native memory is not traced): a snapshot when a third of the
    documents are prepared and texts were embedded (the model and its tokenizer loaded,
    a one-off), and one when the run starts reconciling (all of them indexed), fed by the
    pipeline's progress records. Printed: the sites holding most at the second,
    and what grew between the two per 1,000 documents, which is what a run keeps per
    document."""

    FRAMES = 8
    TOP = 15

    def __init__(self) -> None:
        self.total = 0
        self.done = 0
        self.embedded = 0
        self.snapshots: list[tuple[int, tracemalloc.Snapshot]] = []

    def phase(self, name: str) -> None:
        from tasks.outcome import RECONCILING

        if name == RECONCILING:
            self._snapshot()

    def count(self, name: str, total: int, done: int) -> None:
        from tasks.outcome import EMBEDDING, PROCESSING

        if name == EMBEDDING:
            self.embedded += done
        elif name == PROCESSING:
            self.total += total
            self.done += done
        if not self.snapshots and self.embedded and self.done * 3 >= self.total > 0:
            self._snapshot()

    def _snapshot(self) -> None:
        ignored = [tracemalloc.Filter(False, tracemalloc.__file__)]
        self.snapshots.append((self.done, tracemalloc.take_snapshot().filter_traces(ignored)))

    @contextmanager
    def traced(self) -> Iterator[None]:
        from flows.local_run import progress_records_to

        tracemalloc.start(self.FRAMES)
        try:
            with progress_records_to(self):
                yield
        finally:
            tracemalloc.stop()
        self.report()

    def report(self) -> None:
        mib = 1024 * 1024
        if not self.snapshots:
            print("tracemalloc: no snapshot (no documents were processed in this process)")
            return
        documents, last = self.snapshots[-1]
        total = sum(stat.size for stat in last.statistics("filename"))
        print(
            f"\ntracemalloc: {total / mib:.1f} MiB traced after {documents} documents; top sites:"
        )
        for stat in last.statistics("traceback")[: self.TOP]:
            print(f"  {stat.size / mib:8.2f} MiB {stat.count:8d} blocks:")
            for line in stat.traceback.format(limit=self.FRAMES, most_recent_first=True):
                print("    " + line)
        if len(self.snapshots) < 2:
            return
        before, first = self.snapshots[0]
        per = 1000 / max(1, documents - before)
        grown = last.compare_to(first, "traceback")
        growth = sum(stat.size_diff for stat in grown)
        print(
            f"tracemalloc: grown from {before} to {documents} documents: "
            f"{growth / mib:.1f} MiB, {growth * per / mib:.1f} MiB per 1,000; top sites:"
        )
        for change in grown[: self.TOP]:
            print(
                f"  {change.size_diff * per / mib:+8.2f} MiB per 1,000 documents, "
                f"{change.count_diff * per:+9.0f} blocks:"
            )
            for line in change.traceback.format(limit=self.FRAMES, most_recent_first=True):
                print("    " + line)


def _environment(root: Path, api: ServedApi, model: Path, args: argparse.Namespace) -> None:
    os.environ.update(
        {
            **ingest_environment(root, api, model),
            "INGEST_RUN__BATCH_SIZE": str(args.batch_size),
            "INGEST_QDRANT__ENGINE": args.engine,
        }
    )


def _traced(enabled: bool) -> AbstractContextManager[None]:
    return AllocationSnapshots().traced() if enabled else nullcontext()


def _flow(runner: str) -> Any:
    from flows.ingest import ingest

    if runner == "threads":
        return ingest
    from prefect_dask.task_runners import DaskTaskRunner

    cluster = {"n_workers": 2, "threads_per_worker": 2, "processes": True}
    dask: Any = DaskTaskRunner(cluster_kwargs=cluster)  # typed for its own future class
    return ingest.with_options(task_runner=dask)


def _payloads(root: Path, engine: str) -> dict[str, str]:
    """point id -> payload as canonical JSON, for comparing two runs (vectors differ in
    the last float bits with batch padding, see bench/crash.py)."""
    from bench.crash import snapshot

    return {point: payload for point, (payload, _, _) in snapshot(root, engine).items()}


def compare_dumps(first: Path, second: Path) -> None:
    """Print how two `--dump` files differ: counts, ids, payloads (a few shown)."""

    def load(path: Path) -> dict[str, Any]:
        # The local Confluence API listens on a new port each run, which every URL holds.
        text = re.sub(r"http://127\.0\.0\.1:\d+", "http://confluence", path.read_text())
        loaded: dict[str, Any] = json.loads(text)
        return loaded

    a, b = load(first), load(second)
    differing = sorted(k for k in a.keys() & b.keys() if a[k] != b[k])
    print(
        f"{first}: {len(a)} points, {second}: {len(b)}; same ids: {a.keys() == b.keys()}; "
        f"payloads differing: {len(differing)}; identical: {a == b}"
    )
    for point in differing[:3]:
        fields = sorted(
            f for f in a[point].keys() | b[point].keys() if a[point].get(f) != b[point].get(f)
        )
        print(f"  {point}: {', '.join(fields)}")


def _task_runs(flow_run_id: Any) -> tuple[int, dict[str, float]]:
    """How many task runs the flow run made, and their run time summed per task name."""
    runs = task_runs(flow_run_id)
    seconds: dict[str, float] = {}
    for run in runs:
        name = run.name.rsplit("-", 1)[0]
        seconds[name] = seconds.get(name, 0.0) + run.total_run_time.total_seconds()
    return len(runs), seconds


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--pages", type=int, default=1000)
    parser.add_argument("--attachments-share", type=float, default=0.2)
    parser.add_argument("--batch-size", type=int, default=100, help="run.batch_size")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--runner",
        choices=["threads", "dask", "both"],
        default="threads",
        help="task runner; `both` runs threads then Dask and compares the collections",
    )
    parser.add_argument(
        "--engine",
        choices=["edge", "local"],
        default="edge",
        help="qdrant.engine: Qdrant Edge (the default) or qdrant-client's local mode",
    )
    parser.add_argument(
        "--dump",
        type=Path,
        help="write the first runner's point ids and payloads as JSON to this file, "
        "for comparing two versions of the code",
    )
    parser.add_argument(
        "--tracemalloc",
        action="store_true",
        help="trace Python's allocations in the flow's process and print where they are "
        "and what grew per 1,000 documents (slower: time and RSS are not comparable)",
    )
    parser.add_argument(
        "--compare-dumps",
        nargs=2,
        type=Path,
        metavar=("FIRST", "SECOND"),
        help="compare two --dump files and exit (nothing is ingested)",
    )
    return parser.parse_args()


def main() -> None:
    args = _arguments()
    if args.compare_dumps:
        compare_dumps(*args.compare_dumps)
        return
    runners = ["threads", "dask"] if args.runner == "both" else [args.runner]
    if "dask" in runners:
        try:
            import prefect_dask  # noqa: F401
        except ImportError as exc:
            raise SystemExit("Dask needs prefect-dask: pip install -e '.[dask]'") from exc

    from testkit.tiny_model import build_tiny_model

    work = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    model = build_tiny_model(work / "model")
    attachments = int(args.pages * args.attachments_share)
    collections: dict[str, dict[str, str]] = {}
    with served_space(args.pages, attachments, args.seed) as api:
        from prefect.testing.utilities import prefect_test_harness

        server_started = time.perf_counter()
        with prefect_test_harness(server_startup_timeout=120):
            server_s = time.perf_counter() - server_started
            print(
                f"\n{args.pages} pages + {attachments} attachments (space built in "
                f"{api.build_s:.1f} s in its own process), batch {args.batch_size}; Prefect API: temporary server "
                f"started in {server_s:.1f} s (not counted)"
            )
            for runner in runners:
                _environment(work / runner, api, model, args)
                with RssSampler({api.pid: API_LABEL}) as rss:
                    started = time.perf_counter()
                    with _traced(args.tracemalloc):
                        state = _flow(runner)(
                            source="confluence", targets=[SPACE], return_state=True
                        )
                    wall = time.perf_counter() - started
                summary: dict[str, Any] = state.result()
                task_runs, task_seconds = _task_runs(state.state_details.flow_run_id)
                collections[runner] = _payloads(work / runner, args.engine)
                _report(runner, args.engine, wall, summary, task_runs, task_seconds, rss)
    if args.dump:
        first = collections[runners[0]]
        args.dump.write_text(
            json.dumps({point: json.loads(first[point]) for point in sorted(first)}, indent=1)
        )
    if len(collections) == 2:
        same = collections["threads"] == collections["dask"]
        print(
            f"\nthreads vs dask: {len(collections['threads'])} vs {len(collections['dask'])} "
            f"points; same ids and payloads: {same}"
        )


def _report(
    runner: str,
    engine: str,
    wall: float,
    summary: dict[str, Any],
    task_runs: int,
    task_seconds: dict[str, float],
    rss: RssSampler,
) -> None:
    mib = 1024 * 1024
    print(
        f"\n[{runner}, {engine}] wall {wall:.1f} s; "
        f"{wall / max(1, summary['seen']) * 1000:.1f} ms/document"
    )
    print(
        f"seen {summary['seen']}, new {summary['new']}, chunks {summary['chunks']}, "
        f"failed {len(summary['failed'])}, task runs {task_runs}"
    )
    seconds = summary.get("seconds", {})
    upsert = seconds.get("upsert", 0.0)
    print("seconds per stage (summed over batches): " + str(seconds))
    print(f"upsert stage: {upsert:.1f} s, {upsert / wall:.1%} of the wall time")
    store = summary["store_seconds"]
    print(
        f"store client's own seconds: {store}; writes {store['writes'] / wall:.1%} of the wall time"
    )
    print(
        "task run seconds (summed per task): "
        + ", ".join(f"{k} {v:.1f}" for k, v in sorted(task_seconds.items()))
    )
    print(
        f"peak RSS: this process (the flow's) {rss.peak_self / mib:.0f} MiB at "
        f"{rss.peak_at:.0f} s, anonymous {rss.peak_anon / mib:.0f} MiB "
        f"({rss.start_self / mib:.0f} MiB before the run: imports, the model built)"
    )
    print(
        "peak RSS by phase: "
        + ", ".join(
            f"{phase} {peak / mib:.0f} MiB (anonymous {rss.peak_anon_phases[phase] / mib:.0f})"
            for phase, peak in rss.peak_phases.items()
        )
    )
    by_command: dict[str, tuple[int, int]] = {}
    for name, peak in rss.peak_children.values():
        count, top = by_command.get(name or "?", (0, 0))
        by_command[name or "?"] = (count + 1, max(top, peak))
    for name, (count, peak) in sorted(by_command.items()):
        print(f"peak RSS: children {name!r}: {count} process(es), max {peak / mib:.0f} MiB")
    for failure in summary["failed"][:10]:
        print("failed:", failure)


if __name__ == "__main__":
    main()
