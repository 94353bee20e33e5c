"""`ingest serve`: the deployments of `deployments/prefect.yaml`, served by this process
(`flow.to_deployment` + `prefect.serve`) for users without a work pool, plus the pull step
that work-pool deployments run on the worker.

`deployments/prefect.yaml` is the one definition of names, schedules, parameters and
concurrency limits: `prefect deploy` reads it for work pools and `build_deployments` reads
it here, so the two never drift apart.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from config.errors import ConfigError

if TYPE_CHECKING:
    from prefect.client.orchestration import SyncPrefectClient
    from prefect.client.schemas.responses import DeploymentResponse
    from prefect.deployments.runner import RunnerDeployment
    from prefect.schedules import Schedule

PROJECT_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_PREFECT_FILE = PROJECT_ROOT / "deployments" / "prefect.yaml"


# -- the pull step ---------------------------------------------------------------------------


def set_project_directory(directory: str | None = None) -> dict[str, str]:
    """Prefect pull step (`flows.serve.set_project_directory`): change into the project
    directory of the machine that runs the flow, so the deployment stores no path of the
    machine it was deployed from.

    `directory` (optional) may use `~` and `$VARIABLES`, expanded on the worker; without
    it, the source checkout this package is installed from (`pip install -e .`) is used.
    Returns `{"directory": ...}` like Prefect's `set_working_directory`.
    """
    if directory:
        target = Path(os.path.expandvars(os.path.expanduser(directory)))
        if "$" in str(target):
            raise ConfigError(
                f"the pull step's directory {directory!r} names an environment variable "
                "that is not set on this worker",
                setting="deployments pull step directory",
            )
    else:
        target = PROJECT_ROOT
    if not (target / "flows" / "ingest.py").is_file():
        raise ConfigError(
            f"{target} holds no flows/ingest.py: install the project from a source checkout "
            "(pip install -e .) on the worker, or name the checkout in the pull step's "
            "`directory` of deployments/prefect.yaml",
            setting="deployments pull step directory",
        )
    os.chdir(target)
    return {"directory": str(Path.cwd())}


# -- the deployments file --------------------------------------------------------------------


@dataclass(frozen=True)
class DeploymentSpec:
    """One entry of `deployments:` in prefect.yaml, as `ingest serve` uses it."""

    name: str
    entrypoint: str
    description: str | None = None
    tags: tuple[str, ...] = ()
    parameters: dict[str, Any] = field(default_factory=dict)
    schedules: tuple[dict[str, Any], ...] = ()
    concurrency_limit: int | None = None
    collision_strategy: str | None = None
    work_pool: str | None = None


def load_specs(path: Path | str | None = None) -> list[DeploymentSpec]:
    """The deployments declared in `path` (default: deployments/prefect.yaml)."""
    source = Path(path) if path is not None else DEFAULT_PREFECT_FILE
    try:
        document = yaml.safe_load(source.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read {source}: {exc}", setting="deployments") from None
    entries = document.get("deployments") if isinstance(document, dict) else None
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"{source} declares no deployments", setting="deployments")
    specs = []
    for entry in entries:
        name = entry.get("name")
        entrypoint = entry.get("entrypoint")
        if not name or not entrypoint:
            raise ConfigError(
                f"{source}: every deployment needs a name and an entrypoint ({entry!r})",
                setting="deployments",
            )
        limit = entry.get("concurrency_limit")
        strategy = None
        if isinstance(limit, dict):
            strategy = limit.get("collision_strategy")
            limit = limit.get("limit")
        specs.append(
            DeploymentSpec(
                name=name,
                entrypoint=entrypoint,
                description=entry.get("description"),
                tags=tuple(entry.get("tags") or ()),
                parameters=dict(entry.get("parameters") or {}),
                schedules=tuple(entry.get("schedules") or ()),
                concurrency_limit=limit,
                collision_strategy=strategy,
                work_pool=(entry.get("work_pool") or {}).get("name"),
            )
        )
    return specs


def _load_flow(entrypoint: str) -> Any:
    """`flows/ingest.py:ingest` -> the flow object, imported as its package module (the
    project is installed), so serving does not load a second copy of the module."""
    file_part, _, attribute = entrypoint.partition(":")
    module_name = file_part.removesuffix(".py").replace("/", ".").replace("\\", ".")
    try:
        module = importlib.import_module(module_name)
        return getattr(module, attribute)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(
            f"entrypoint {entrypoint!r}: {exc}", setting="deployments entrypoint"
        ) from None


def schedule_of(raw: dict[str, Any]) -> Schedule:
    """A prefect.yaml schedule entry (`cron`, `interval` or `rrule`, with `timezone`,
    `active`, `parameters`, `slug`; cron also `day_or`, interval `anchor_date`)."""
    from prefect.schedules import Cron, Interval, RRule

    common: dict[str, Any] = {
        "timezone": raw.get("timezone"),
        "active": bool(raw.get("active", True)),
        "parameters": raw.get("parameters") or None,
        "slug": raw.get("slug"),
    }
    kinds = [k for k in ("cron", "interval", "rrule") if raw.get(k) is not None]
    if len(kinds) != 1:
        raise ConfigError(
            f"a schedule needs exactly one of cron, interval or rrule: {raw!r}",
            setting="deployments schedules",
        )
    if kinds[0] == "cron":
        return Cron(raw["cron"], day_or=bool(raw.get("day_or", True)), **common)
    if kinds[0] == "interval":
        seconds = raw["interval"]
        interval = seconds if isinstance(seconds, timedelta) else timedelta(seconds=seconds)
        return Interval(interval, anchor_date=raw.get("anchor_date"), **common)
    return RRule(raw["rrule"], **common)


def build_deployments(path: Path | str | None = None) -> list[RunnerDeployment]:
    """The deployments of prefect.yaml as runner deployments (not yet registered)."""
    from prefect.client.schemas.objects import ConcurrencyLimitConfig, ConcurrencyLimitStrategy

    deployments = []
    for spec in load_specs(path):
        flow = _load_flow(spec.entrypoint)
        concurrency: ConcurrencyLimitConfig | None = None
        if spec.concurrency_limit is not None:
            concurrency = ConcurrencyLimitConfig(
                limit=spec.concurrency_limit,
                collision_strategy=ConcurrencyLimitStrategy(
                    spec.collision_strategy or ConcurrencyLimitStrategy.ENQUEUE.value
                ),
            )
        deployments.append(
            flow.to_deployment(
                name=spec.name,
                schedules=[schedule_of(raw) for raw in spec.schedules],
                parameters=spec.parameters,
                concurrency_limit=concurrency,
                description=spec.description,
                tags=list(spec.tags),
            )
        )
    return deployments


def take_over(deployments: list[RunnerDeployment]) -> list[str]:
    """Detach deployments of the same names that `prefect deploy` attached to a work pool,
    so that this process serves them; returns the names taken over.

    Prefect (3.8) updates an existing deployment from `serve` without its `path` and keeps
    its work pool: a served run of a deployment first made by `prefect deploy` then
    crashes ("Downloading flow code from storage at None") and a worker of the pool could
    pick up its runs too. `prefect deploy` attaches them to the pool again.
    """
    from prefect.client.schemas.actions import DeploymentUpdate

    taken = []
    for client, deployment, existing in _registered(deployments):
        served_path = deployment._path
        if existing.work_pool_name or existing.pull_steps or existing.path != served_path:
            client.update_deployment(
                existing.id,
                DeploymentUpdate(path=served_path, pull_steps=None, work_pool_name=None),
            )
            taken.append(_full_name(deployment))
    return taken


def _full_name(deployment: RunnerDeployment) -> str:
    return f"{deployment.flow_name}/{deployment.name}"


def _registered(
    deployments: list[RunnerDeployment],
) -> Iterator[tuple[SyncPrefectClient, RunnerDeployment, DeploymentResponse]]:
    """(client, deployment, its record in the Prefect API) for each deployment the API
    already has; the others are skipped."""
    from prefect import get_client
    from prefect.exceptions import ObjectNotFound

    with get_client(sync_client=True) as client:
        for deployment in deployments:
            try:
                existing = client.read_deployment_by_name(_full_name(deployment))
            except ObjectNotFound:
                continue
            yield client, deployment, existing


def serve(path: Path | str | None = None, *, limit: int | None = None) -> None:
    """Register the deployments with the Prefect API and run their flow runs (scheduled or
    triggered) in this process's machine until interrupted."""
    from prefect import serve as prefect_serve

    deployments = build_deployments(path)
    for name in take_over(deployments):
        print(f"{name}: detached from its work pool; this process serves it now")
    try:
        prefect_serve(*deployments, limit=limit)
    finally:
        pause(deployments)


def pause(deployments: list[RunnerDeployment]) -> None:
    """Pause the schedules of the served deployments once serving stops, so that no
    scheduled run piles up with nothing to run it.

    Prefect's runner pauses them itself on Ctrl-C, but on SIGTERM (systemd, `kill`,
    container stop) its handler exits from inside the event loop and the pause is lost
    when the API call is cut short; doing it here, after the loop has ended, always runs.
    """
    for client, deployment, existing in _registered(deployments):
        client.pause_deployment(existing.id)
        print(f"{_full_name(deployment)}: schedules paused while not served")
