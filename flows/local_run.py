"""`ingest run`: one run of the `ingest` flow in this process, on Prefect's ephemeral API
unless `PREFECT_API_URL` names a server.

Before Prefect is imported the run's surroundings are made ready: the directories it
writes (`PREFECT_HOME`, whose parents Prefect does not create, the cache and the local
Qdrant directory), the ephemeral API's own database (in the cache directory), a generous
start-up time for the ephemeral API (it imports Prefect's whole server, ~7 CPU-s, and a
loaded machine took longer than Prefect's 20 s default) and warnings-only logs.
Telemetry is off for every command (`telemetry_off`; an offline machine logged an ERROR
for each attempt).

An unchanged source is the common case of a scheduled sync. The run first lists and plans
in this process, with the same pipeline functions the flow's tasks call; when nothing
needs fetching, normalizing, chunking or embedding it reconciles (deletions, link counts)
and reports right there, without starting Prefect's API: that costs seconds per run for
nothing to orchestrate. `--always-flow` turns that off.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from config.errors import IngestError
from config.settings import Settings, load_settings

STARTUP_TIMEOUT_ENV = "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"
# Prefect reads its database's URL from either name.
DATABASE_URL_ENV = (
    "PREFECT_API_DATABASE_CONNECTION_URL",
    "PREFECT_SERVER_DATABASE_CONNECTION_URL",
)
DEFAULT_STARTUP_TIMEOUT_S = 180
_EPHEMERAL_FAILURE = "Timed out while attempting to connect to ephemeral Prefect API server"


@dataclass(frozen=True)
class RunRequest:
    source: str  # a source kind (config/sources.py)
    targets: list[str]
    tenant_id: str | None
    mode: Literal["incremental", "full"]
    since: datetime | None
    force: bool
    force_delete: bool
    always_flow: bool
    verbose: bool


class ApiStartFailed(Exception):
    """Prefect's ephemeral API did not come up; the message says what to do."""


def prepare_environment(settings: Settings, *, verbose: bool) -> None:
    """Directories and Prefect settings for a local run (only what the user left unset)."""
    own_prefect_database(settings)
    home = os.environ.get("PREFECT_HOME")
    for directory in (
        home,
        settings.cache.dir,
        None if settings.qdrant.url else settings.qdrant.path,
    ):
        if directory:
            Path(directory).expanduser().mkdir(parents=True, exist_ok=True)
    os.environ.setdefault(STARTUP_TIMEOUT_ENV, str(DEFAULT_STARTUP_TIMEOUT_S))
    if not verbose:
        os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")


def own_prefect_database(settings: Settings) -> None:
    """The ephemeral API's database in the project's cache directory, not Prefect's
    default `PREFECT_HOME/prefect.db`: that is a Prefect server's database too, and a
    second process writing it makes the server fail with "database is locked". Left
    alone where PREFECT_API_URL names a server or the user chose a database."""
    if any(name in os.environ for name in ("PREFECT_API_URL", *DATABASE_URL_ENV)):
        return
    directory = Path(settings.cache.dir).expanduser().resolve() / "prefect"
    directory.mkdir(parents=True, exist_ok=True)
    os.environ[DATABASE_URL_ENV[0]] = f"sqlite+aiosqlite:///{directory / 'prefect.db'}"


def telemetry_off() -> None:
    """No usage data sent by this process or the ephemeral API it starts, unless the user
    set these variables: the server's analytics (`PREFECT_SERVER_ANALYTICS_ENABLED`) and
    the client's (`DO_NOT_TRACK`, which also keeps Prefect from printing its telemetry
    notice and writing `.sdk_telemetry` under PREFECT_HOME when it is imported in a
    terminal). Before Prefect is imported: it reads them on import."""
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("DO_NOT_TRACK", "1")


def summary_without_flow(request: RunRequest, settings: Settings) -> dict[str, Any] | None:
    """The run's summary when the source needs no document processed, or when another
    process holds the embedded store (found before any work), else None (the flow must
    run). The run's steps are the flow's (flows/sync.py), each the pipeline's own
    function run here."""
    from config.secrets import in_secret_block
    from flows.sync import StepsHere, held_store_summary, sync
    from tasks import pipeline
    from tasks.resources import Resources

    spec = pipeline.SourceSpec.of(request.source, request.targets, settings)
    section = settings.section(spec.kind)
    resources = Resources(settings)
    try:
        busy = held_store_summary(spec, settings, resources, request.mode)
        if busy is not None:
            return busy.as_dict()
        if request.always_flow:
            return None
        if in_secret_block(section, "token") or in_secret_block(settings.qdrant, "api_key"):
            return None  # a secret is in a Prefect Secret block: the flow reads it
        steps = StepsHere(spec, settings, resources)
        summary = sync(steps, request.mode, request.since, request.force_delete)
    except IngestError as exc:
        if exc.transient:
            return None  # the flow's tasks retry transient failures
        raise
    finally:
        resources.close()
    return summary.as_dict() if summary is not None else None


def run_flow(request: RunRequest, settings: Settings) -> dict[str, Any]:
    """One run of the `ingest` flow, on the task runner `settings` name; its summary (also
    when it ended Failed)."""
    from flows.ingest import ingest, task_runner_for
    from flows.report import summary_of

    flow = ingest.with_options(task_runner=task_runner_for(settings))
    with _ephemeral_api_errors():
        state = flow(
            source=request.source,
            targets=tuple(request.targets),
            tenant_id=request.tenant_id or "",
            mode=request.mode,
            since=request.since,
            force=request.force,
            force_delete=request.force_delete,
            return_state=True,
        )
    summary = summary_of(state.result(raise_on_failure=False))
    if summary is None:  # the run ended before its report (config, crash)
        state.result(raise_on_failure=True)
        raise RuntimeError(f"the flow run ended {state.type.value} without a summary")
    return summary


class _ProgressRecords(logging.Handler):
    """Feeds the pipeline's progress records (tasks.pipeline.progress) to a progress bar
    with `phase(name)` and `count(name, total, done)`."""

    def __init__(self, bar: Any) -> None:
        super().__init__(logging.DEBUG)
        self.bar = bar

    def emit(self, record: logging.LogRecord) -> None:
        phase = getattr(record, "progress_phase", None)
        if phase is None:
            return
        total = getattr(record, "progress_total", None)
        done = getattr(record, "progress_done", None)
        if total is None and done is None:
            self.bar.phase(phase)
        else:
            self.bar.count(phase, total or 0, done or 0)


@contextmanager
def progress_records_to(bar: Any) -> Iterator[None]:
    """The pipeline's progress records go to `bar` (in this process: the run's own look
    and the flow it starts), not to the console."""
    from tasks.pipeline import progress

    handler = _ProgressRecords(bar)
    level, propagate = progress.level, progress.propagate
    progress.addHandler(handler)
    progress.setLevel(logging.DEBUG)
    progress.propagate = False  # the bar shows them; the console is for warnings
    try:
        yield
    finally:
        progress.removeHandler(handler)
        progress.setLevel(level)
        progress.propagate = propagate


@contextmanager
def _ephemeral_api_errors() -> Iterator[None]:
    try:
        yield
    except RuntimeError as exc:
        if _EPHEMERAL_FAILURE not in str(exc):
            raise
        cause = str(exc).split(_EPHEMERAL_FAILURE, 1)[1].strip(" .") or "no output"
        raise ApiStartFailed(
            f"Prefect's local API did not start within {os.environ.get(STARTUP_TIMEOUT_ENV)} s "
            f"({cause[:300]}). Run again (a busy machine starts it slowly), raise "
            f"{STARTUP_TIMEOUT_ENV}, or point PREFECT_API_URL at a Prefect server."
        ) from None


def settings_for(request: RunRequest, config_file: str | None) -> Settings:
    return load_settings({"tenant_id": request.tenant_id}, config_file=config_file)
