"""Deployments (docs/deployments.md#prefect-deployments).

Fast: `deployments/prefect.yaml` declares what docs/deployments.md#prefect-deployments describes
(the `files` schedule off, its `prefect-version` the installed Prefect), `ingest serve` builds the
same deployments from it, and the pull step resolves the project on the machine that runs it.

Slow (`-m slow`, part of the default run): the real thing, as docs/deployments.md writes
it. Its commands are read out of that page, so the test breaks when the page drifts: a
`prefect server` on SQLite (the page's command on a free loopback port, a temporary
PREFECT_HOME), a process work pool, `prefect deploy --all`, the token's Secret block, a
`prefect worker` started outside the repository with the page's environment for
Confluence, and `prefect deployment run ... --watch` against the local Confluence API with
the tiny model; a backfill with `--param`; a schedule switched on; a run that fails on
purpose, cleanly, its summary kept as its result. Then `ingest serve` against the same
server. Only the processes started here are stopped.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from qdrant_client import models

from config.errors import ConfigError, IngestError
from config.secrets import in_secret_block, secret_value
from config.settings import QdrantSettings
from flows.ingest import ingest
from flows.serve import (
    DEFAULT_PREFECT_FILE,
    PROJECT_ROOT,
    build_deployments,
    load_specs,
    set_project_directory,
)
from indexing.qdrant_store import QdrantConnection, QdrantStore
from indexing.store_lock import read_holder
from indexing.store_schema import CollectionSchema
from testkit.confluence_api import (
    DEFAULT_READERS,
    DEFAULT_TOKEN,
    DEFAULT_USER,
    FakeConfluence,
    build_fixture,
)
from testkit.tiny_model import tiny_model_dir  # noqa: F401  (fixture)

BIN = Path(sys.executable).parent
PREFECT = str(BIN / "prefect")
INGEST = str(BIN / "ingest")
POOL = "ingest-pool"
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "CRASHED"}
DEPLOYMENTS_DOC = PROJECT_ROOT / "docs" / "deployments.md"
README_PORT = "4200"  # the port the page's commands name; the slow tests use a free one


# -- docs/deployments.md, as a user copies it ---------------------------------------------


def readme_section() -> str:
    """The deployment guide (docs/deployments.md, which the README links to)."""
    return DEPLOYMENTS_DOC.read_text(encoding="utf-8")


def readme_lines() -> list[str]:
    """The shell lines of the section's code blocks, comments cut."""
    blocks = re.findall(r"```bash\n(.*?)```", readme_section(), flags=re.S)
    lines = (re.sub(r"\s+#.*", "", line).strip() for b in blocks for line in b.splitlines())
    return [line for line in lines if line]


def readme_command(prefix: str, port: int, **placeholders: str) -> list[str]:
    """The section's one command that starts with `prefix`, as arguments here: this
    interpreter's virtual environment for `.venv/bin/`, `port` for README's, the
    `placeholders` (SCHEDULE_ID=...) filled in, no trailing `&`."""
    found = [line for line in readme_lines() if line.startswith(prefix)]
    assert len(found) == 1, f"docs/deployments.md: one `{prefix}` expected: {found}"
    line = found[0].replace(README_PORT, str(port)).removesuffix("&")
    for name, value in placeholders.items():
        line = line.replace(name, value)
    program, *args = shlex.split(line)
    assert program.startswith(".venv/bin/"), line
    return [str(BIN / program.removeprefix(".venv/bin/")), *args]


def readme_exports(port: int) -> dict[str, str]:
    """What the section's `export NAME=VALUE` lines set (README's port replaced)."""
    exports: dict[str, str] = {}
    for line in readme_lines():
        if line.startswith("export "):
            name, _, value = line.removeprefix("export ").partition("=")
            exports[name] = shlex.split(value.replace(README_PORT, str(port)))[0]
    return exports


def test_prefect_yaml_names_the_installed_prefect_version() -> None:
    """`prefect-version` is the Prefect that install.sh installs (pyproject's pin resolves
    to it): the version the deployments were written and tested against."""
    import prefect

    document = yaml.safe_load(DEFAULT_PREFECT_FILE.read_text(encoding="utf-8"))
    assert document["prefect-version"] == prefect.__version__, (
        f"deployments/prefect.yaml says prefect-version {document['prefect-version']}, "
        f"the installed Prefect is {prefect.__version__}: check the deployments with it "
        "and update prefect-version"
    )


# -- the deployments file and `ingest serve` (fast) -------------------------------------------


def test_prefect_yaml_declares_the_three_deployments() -> None:
    specs = {spec.name: spec for spec in load_specs()}
    assert list(specs) == ["confluence-space", "files", "backfill"]
    for spec in specs.values():
        assert spec.entrypoint == "flows/ingest.py:ingest"
        assert spec.work_pool == POOL
        assert spec.concurrency_limit == 1
    confluence, files, backfill = specs["confluence-space"], specs["files"], specs["backfill"]
    assert confluence.parameters == {"source": "confluence", "mode": "incremental"}
    assert files.parameters == {"source": "files", "mode": "incremental"}
    assert backfill.parameters == {"source": "confluence", "mode": "full"}
    # both ship paused: a worker's sources are known on the worker only
    assert [(s["cron"], s["active"]) for s in confluence.schedules] == [("0 * * * *", False)]
    assert [(s["cron"], s["active"]) for s in files.schedules] == [("30 * * * *", False)]
    assert backfill.schedules == ()
    assert confluence.collision_strategy == files.collision_strategy == "CANCEL_NEW"
    assert backfill.collision_strategy == "ENQUEUE"


def test_prefect_yaml_stores_no_path_of_the_deploying_machine() -> None:
    document = yaml.safe_load(DEFAULT_PREFECT_FILE.read_text(encoding="utf-8"))
    assert document["pull"] == [{"flows.serve.set_project_directory": {}}]

    def strings(value: Any) -> Iterator[str]:
        if isinstance(value, str):
            yield value
        elif isinstance(value, dict):
            for item in value.values():
                yield from strings(item)
        elif isinstance(value, list):
            for item in value:
                yield from strings(item)

    absolute = [s for s in strings(document) if s.startswith(("/", "~")) or ":\\" in s]
    assert absolute == []
    assert str(PROJECT_ROOT) not in DEFAULT_PREFECT_FILE.read_text(encoding="utf-8")


def test_serve_builds_the_same_deployments() -> None:
    deployments = {d.name: d for d in build_deployments()}
    assert list(deployments) == ["confluence-space", "files", "backfill"]
    for deployment in deployments.values():
        assert deployment.flow_name == "ingest"
        assert deployment.entrypoint is not None
        assert deployment.entrypoint.endswith("flows/ingest.py:ingest")
        assert deployment.concurrency_limit == 1
        # the UI form: every flow parameter, typed
        schema = deployment._parameter_openapi_schema.model_dump()
        assert set(schema["properties"]) >= {"source", "targets", "tenant_id", "mode", "since"}
        assert schema["properties"]["mode"]["enum"] == ["incremental", "full"]
    confluence = deployments["confluence-space"]
    assert confluence.parameters == {"source": "confluence", "mode": "incremental"}
    assert [
        (s.schedule.cron, s.schedule.timezone, s.active)  # type: ignore[union-attr]
        for s in confluence.schedules or []
    ] == [("0 * * * *", "UTC", False)]
    assert confluence.concurrency_options is not None
    assert confluence.concurrency_options.collision_strategy.value == "CANCEL_NEW"
    files = deployments["files"]
    assert files.parameters == {"source": "files", "mode": "incremental"}
    assert [(s.schedule.cron, s.active) for s in files.schedules or []] == [  # type: ignore[union-attr]
        ("30 * * * *", False)
    ]
    backfill = deployments["backfill"]
    assert backfill.parameters == {"source": "confluence", "mode": "full"}
    assert not backfill.schedules
    assert backfill.concurrency_options is not None
    assert backfill.concurrency_options.collision_strategy.value == "ENQUEUE"


def test_the_ui_form_describes_every_field_and_names_a_bad_one() -> None:
    """The Custom run form: every parameter and chunk budget has a description, only
    `since` starts empty (null), and a bad budget is refused naming that field."""
    from prefect.utilities.callables import parameter_schema
    from prefect.utilities.schema_tools.validation import build_error_obj, validate

    schema = parameter_schema(ingest).model_dump()
    properties = schema["properties"]
    assert schema.get("required", []) == []
    for name, field in properties.items():
        assert field.get("description"), name
        assert ("anyOf" in field) == (name == "since"), name
    budgets = schema["definitions"]["ChunkingOverrides"]["properties"]
    assert set(budgets) == {
        "min_tokens",
        "target_tokens",
        "max_tokens",
        "overlap_tokens",
        "oversize_block_limit",
        "profile",
    }
    for name, field in budgets.items():
        assert field.get("description") and "anyOf" not in field, name
    errors = build_error_obj(
        list(validate({"chunking": {"min_tokens": -5}}, schema, preprocess=True))
    )
    assert errors == {
        "valid": False,
        "errors": [
            {
                "property": "chunking",
                "errors": [
                    {"property": "min_tokens", "errors": ["-5 is less than the minimum of 0"]}
                ],
            }
        ],
    }


def test_serve_reads_interval_and_rrule_schedules(tmp_path: Path) -> None:
    custom = tmp_path / "prefect.yaml"
    custom.write_text(
        yaml.safe_dump(
            {
                "deployments": [
                    {
                        "name": "every-ten-minutes",
                        "entrypoint": "flows/ingest.py:ingest",
                        "parameters": {"source": "files"},
                        "schedules": [{"interval": 600, "active": False}],
                    },
                    {
                        "name": "weekdays",
                        "entrypoint": "flows/ingest.py:ingest",
                        "schedules": [{"rrule": "FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR"}],
                    },
                ]
            }
        ),
        encoding="utf-8",
    )
    interval, weekdays = build_deployments(custom)
    assert interval.name == "every-ten-minutes"
    assert [(s.schedule.interval.total_seconds(), s.active) for s in interval.schedules or []] == [  # type: ignore[union-attr]
        (600.0, False)
    ]
    assert interval.concurrency_limit is None
    assert "BYDAY=MO,TU,WE,TH,FR" in weekdays.schedules[0].schedule.rrule  # type: ignore[index,union-attr]


def test_serve_refuses_a_broken_deployments_file(tmp_path: Path) -> None:
    broken = tmp_path / "prefect.yaml"
    broken.write_text("deployments:\n  - name: no-entrypoint\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="entrypoint"):
        load_specs(broken)
    broken.write_text(
        "deployments:\n  - name: x\n    entrypoint: flows/nope.py:ingest\n", encoding="utf-8"
    )
    with pytest.raises(ConfigError, match=r"flows/nope\.py"):
        build_deployments(broken)
    broken.write_text(
        "deployments:\n  - name: x\n    entrypoint: flows/ingest.py:ingest\n"
        "    schedules:\n      - {cron: '0 * * * *', interval: 60}\n",
        encoding="utf-8",
    )
    with pytest.raises(ConfigError, match="exactly one of cron, interval or rrule"):
        build_deployments(broken)


def test_pull_step_changes_into_the_project_on_the_running_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert set_project_directory() == {"directory": str(PROJECT_ROOT)}
    assert Path.cwd() == PROJECT_ROOT

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CHECKOUT_PARENT", str(PROJECT_ROOT.parent))
    named = f"$CHECKOUT_PARENT/{PROJECT_ROOT.name}"
    assert set_project_directory(named) == {"directory": str(PROJECT_ROOT)}

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CHECKOUT_PARENT")
    with pytest.raises(ConfigError, match="not set on this worker"):
        set_project_directory(named)
    with pytest.raises(ConfigError, match=r"holds no flows/ingest\.py"):
        set_project_directory(str(tmp_path))
    assert Path.cwd() == tmp_path  # a refused step leaves the directory alone


def test_ingest_serve_is_a_command() -> None:
    from flows.cli import _parser

    args = _parser().parse_args(["serve", "--config", "x.yaml"])
    assert args.command == "serve"
    assert args.config == "x.yaml"
    assert args.handler.__name__ == "_serve"


# -- the real thing (slow) ----------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _base_env(home: Path, api_url: str) -> dict[str, str]:
    """The environment of every child process: nothing of the developer's Prefect profile
    or ingest settings, Prefect pointed at the test server."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "INGEST_", "CHUNK_"))
    }
    env.update(
        PREFECT_HOME=str(home),
        PREFECT_API_URL=api_url,
        PREFECT_CLI_PROMPT="false",
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        PREFECT_SERVER_UI_ENABLED="false",
        # Schedules are stored and checked, but no scheduled run may fire mid-test.
        PREFECT_SERVER_SERVICES_SCHEDULER_ENABLED="false",
        PREFECT_WORKER_QUERY_SECONDS="1",
        PREFECT_RUNNER_POLL_FREQUENCY="1",
        PYTHONUNBUFFERED="1",
    )
    return env


class Processes:
    """Background processes started by a test, each in its own process group, so that
    stopping one stops its children (flow-run subprocesses) and nothing else."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.started: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, args: list[str], env: dict[str, str], cwd: Path) -> None:
        log = (self.logs / f"{name}.log").open("wb")
        self.started[name] = subprocess.Popen(
            args, env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()

    def log(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text(errors="replace")

    def alive(self, name: str) -> bool:
        return self.started[name].poll() is None

    def stop(self, name: str, timeout: float = 20.0) -> None:
        process = self.started.pop(name, None)
        if process is None or process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
        # flow-run subprocesses of a worker share its group: make sure none is left
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)

    def stop_all(self) -> None:
        for name in reversed(list(self.started)):
            self.stop(name)


class PrefectServer:
    def __init__(self, processes: Processes, home: Path, port: int) -> None:
        self.processes = processes
        self.port = port
        self.url = f"http://127.0.0.1:{port}/api"
        self.env = _base_env(home, self.url)
        self.http = httpx.Client(base_url=self.url, timeout=30)

    def run(
        self,
        args: list[str],
        cwd: Path,
        env: dict[str, str] | None = None,
        stdin: str = "",
        exit_code: int = 0,
    ) -> str:
        """Run a command to its end (in a session of its own: no terminal to prompt on);
        its output, asserting it exited with `exit_code` (0: it succeeded)."""
        done = subprocess.run(
            args,
            env=env or self.env,
            cwd=cwd,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=240,
            start_new_session=True,
        )
        output = done.stdout + done.stderr
        assert done.returncode == exit_code, (
            f"{shlex.join(args)} exited {done.returncode}:\n{output}"
        )
        return output

    def cli(self, *args: str, cwd: Path, env: dict[str, str] | None = None) -> str:
        return self.run([PREFECT, *args], cwd, env)

    def readme(self, prefix: str, cwd: Path, env: dict[str, str] | None = None, **kw: str) -> str:
        """Run README's command that starts with `prefix` (readme_command)."""
        return self.run(readme_command(prefix, self.port, **kw), cwd, env)

    def deployment(self, name: str) -> dict[str, Any] | None:
        response = self.http.get(f"/deployments/name/ingest/{name}")
        if response.status_code == 404:
            return None
        response.raise_for_status()
        result: dict[str, Any] = response.json()
        return result

    def flow_run(self, run_id: str) -> dict[str, Any]:
        response = self.http.get(f"/flow_runs/{run_id}")
        response.raise_for_status()
        result: dict[str, Any] = response.json()
        return result

    def state_types(self, run_id: str) -> list[str]:
        response = self.http.get("/flow_run_states/", params={"flow_run_id": run_id})
        response.raise_for_status()
        return [state["type"] for state in response.json()]

    def flow_runs_of(self, deployment_id: str) -> list[dict[str, Any]]:
        response = self.http.post(
            "/flow_runs/filter",
            json={"deployments": {"id": {"any_": [deployment_id]}}, "sort": "START_TIME_ASC"},
        )
        response.raise_for_status()
        result: list[dict[str, Any]] = response.json()
        return result

    def artifacts_of(self, run_id: str) -> list[dict[str, Any]]:
        response = self.http.post(
            "/artifacts/filter", json={"artifacts": {"flow_run_id": {"any_": [run_id]}}}
        )
        response.raise_for_status()
        result: list[dict[str, Any]] = response.json()
        return result

    def logs_of(self, run_id: str) -> list[str]:
        response = self.http.post(
            "/logs/filter", json={"logs": {"flow_run_id": {"any_": [run_id]}}}
        )
        response.raise_for_status()
        return [log["message"] for log in response.json()]

    def persisted_summary(self, run_id: str) -> dict[str, Any]:
        """The summary the run's final state holds as its persisted result (in the local
        result storage of the worker, which shares this PREFECT_HOME)."""
        from prefect.serializers import Serializer

        from flows.report import summary_of

        data = self.flow_run(run_id)["state"]["data"]
        assert data and data.get("storage_key"), data
        path = Path(data["storage_key"])
        if not path.is_absolute():
            path = Path(self.env["PREFECT_HOME"]) / "storage" / path
        summary = summary_of(Serializer(**data["serializer"]).loads(path.read_bytes()))
        assert summary is not None, path
        return summary

    def wait_for_run(self, run_id: str, timeout: float = 180.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            run = self.flow_run(run_id)
            if run["state_type"] in TERMINAL:
                return run
            time.sleep(0.5)
        raise AssertionError(f"flow run {run_id} not finished after {timeout:.0f} s: {run}")


def _wait(what: str, condition: Callable[[], bool], timeout: float, log: Callable[[], str]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.3)
    raise AssertionError(f"{what}: not after {timeout:.0f} s\n{log()[-4000:]}")


@pytest.fixture(scope="module")
def prefect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrefectServer]:
    root = tmp_path_factory.mktemp("prefect")
    processes = Processes(root)
    server = PrefectServer(processes, root / "home", _free_port())
    # README's server, on a free port: its PREFECT_API_URL is the one the test uses
    assert readme_exports(server.port)["PREFECT_API_URL"] == server.url
    try:
        processes.start(
            "server",
            readme_command(".venv/bin/prefect server start", server.port),
            server.env,
            root,
        )

        def healthy() -> bool:
            assert processes.alive("server"), processes.log("server")[-4000:]
            with contextlib.suppress(httpx.HTTPError):
                return server.http.get("/health").status_code == 200
            return False

        _wait("prefect server healthy", healthy, 120, lambda: processes.log("server"))
        yield server
    finally:
        server.http.close()
        processes.stop_all()


@pytest.fixture
def confluence() -> Iterator[FakeConfluence]:
    """The standard fixture spaces (ENG with attachments, HR in Russian, OPS)."""
    with FakeConfluence("cloud") as api:
        build_fixture(api)
        yield api


def _ingest_env(
    base: dict[str, str], api: FakeConfluence, tmp: Path, model: Path, spaces: list[str]
) -> dict[str, str]:
    env = dict(base)
    env.update(
        INGEST_CONFLUENCE__URL=api.base_url,
        INGEST_CONFLUENCE__CLOUD=str(api.layout == "cloud").lower(),
        INGEST_CONFLUENCE__USERNAME=DEFAULT_USER,
        INGEST_CONFLUENCE__TOKEN=DEFAULT_TOKEN,
        INGEST_CONFLUENCE__SPACES=json.dumps(spaces),
        INGEST_QDRANT__PATH=str(tmp / "qdrant"),
        INGEST_CACHE__DIR=str(tmp / "cache"),
        INGEST_EMBEDDER__MODEL=str(model),
        INGEST_EMBEDDER__DEVICE="cpu",
    )
    return env


def _points(path: Path, **match: str) -> list[dict[str, Any]]:
    """Payloads in the embedded store at `path` matching `match`; waits for the flow-run
    process that last held the store to let go of it."""
    deadline = time.monotonic() + 30
    selection = models.Filter(
        must=[
            models.FieldCondition(key=key, match=models.MatchValue(value=value))
            for key, value in match.items()
        ]
    )
    while True:
        with QdrantConnection(QdrantSettings(path=str(path))) as connection:  # type: ignore[call-arg]
            store = QdrantStore(connection, CollectionSchema(0, False, False))
            try:
                points, _ = store.client.scroll("chunks", scroll_filter=selection, limit=1000)
                return [dict(p.payload or {}) for p in points]
            except IngestError as exc:  # still locked by the exiting flow-run process
                if not exc.transient or time.monotonic() > deadline:
                    raise
        time.sleep(0.5)


def _run_id(output: str) -> str:
    found = re.search(r"UUID: ([0-9a-f-]{36})", output)
    assert found, output
    return found.group(1)


def _readme_worker_env(
    server: PrefectServer, api: FakeConfluence, tmp: Path, model: Path
) -> dict[str, str]:
    """The worker's environment as README's worker block writes it for Confluence, with
    this machine's values: every variable README exports has one here, and every other
    one set here is named in README's section (among what "a run also reads")."""
    exports = readme_exports(server.port)
    here = {
        "PREFECT_API_URL": server.url,
        "INGEST_CONFLUENCE__URL": api.base_url,
        "INGEST_CONFLUENCE__USERNAME": DEFAULT_USER,
        "INGEST_CONFLUENCE__TOKEN_SECRET_BLOCK": exports["INGEST_CONFLUENCE__TOKEN_SECRET_BLOCK"],
        "INGEST_CONFLUENCE__SPACES": json.dumps(["ENG"]),
        "INGEST_EMBEDDER__MODEL": str(model),
    }
    no_server_here = {"INGEST_QDRANT__URL"}  # unset: local mode, in the path below
    assert set(exports) == set(here) | no_server_here
    also = {
        "INGEST_CONFLUENCE__CLOUD": "true",  # the local API is Cloud on 127.0.0.1
        "INGEST_QDRANT__PATH": str(tmp / "qdrant"),
        "INGEST_CACHE__DIR": str(tmp / "cache"),
        "INGEST_EMBEDDER__DEVICE": "cpu",
    }
    assert [name for name in also if name not in readme_section()] == []
    return {**server.env, **here, **also}


def _clean_failure_logs(server: PrefectServer, processes: Processes, run_id: str) -> str:
    """The logs of a run that failed on purpose, once they reached the server (a flow
    run's logs come in batches, after its state may): no crash record or traceback there
    or in the worker's log."""
    _wait(
        f"the logs of flow run {run_id}",
        lambda: "Finished in state Failed" in "\n".join(server.logs_of(run_id)),
        30,
        lambda: "\n".join(server.logs_of(run_id)),
    )
    logs = "\n".join(server.logs_of(run_id))
    for noise in ("Engine execution exited", "Traceback", "Encountered exception"):
        assert noise not in logs, logs
        assert noise not in processes.log("worker"), processes.log("worker")
    return logs


@pytest.mark.slow
def test_the_readme_deployment_steps_end_in_a_completed_run(
    prefect_server: PrefectServer,
    confluence: FakeConfluence,
    tiny_model_dir: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """docs/deployments.md as written, on a machine configured for Confluence
    only (the server is the module's fixture, started with README's command): pool,
    `deploy --all`, the token's Secret block, a worker in a directory outside the
    checkout, `deployment run ... --watch`, a backfill with `--param`, a schedule
    switched on. No schedule that `deploy --all` switches on lacks its source's settings."""
    server = prefect_server
    processes = Processes(tmp_path)
    outside = tmp_path / "worker-cwd"  # the worker does not run from the repository
    outside.mkdir()
    # A space role with read access: reported once in the run's summary, never logged.
    confluence.grant_space("ENG", groups=[DEFAULT_READERS], roles=["role-viewer"])
    env = _readme_worker_env(server, confluence, tmp_path, tiny_model_dir)
    try:
        server.readme(".venv/bin/prefect work-pool create", PROJECT_ROOT)
        # the worker starts while the deployments and the token's block are made
        worker = readme_command(".venv/bin/prefect worker start", server.port)
        processes.start("worker", worker, env, outside)
        server.readme(".venv/bin/prefect deploy ", PROJECT_ROOT)
        token_block = readme_command(".venv/bin/python -c", server.port)
        server.run(token_block, outside, stdin=f"{DEFAULT_TOKEN}\n")

        # What the server stores: schedules, concurrency, parameters, a pull step without
        # any path of this machine.
        deployments = {}
        for name in ("confluence-space", "files", "backfill"):
            deployment = server.deployment(name)
            assert deployment is not None, name
            deployments[name] = deployment
            assert deployment["work_pool_name"] == POOL
            assert deployment["entrypoint"] == "flows/ingest.py:ingest"
            assert deployment["pull_steps"] == [{"flows.serve.set_project_directory": {}}]
            assert str(PROJECT_ROOT) not in json.dumps(deployment)
            assert deployment["global_concurrency_limit"]["limit"] == 1
            assert deployment["paused"] is False
            assert set(deployment["parameter_openapi_schema"]["properties"]) >= {
                "source",
                "targets",
                "tenant_id",
                "mode",
                "since",
                "chunking",
                "force",
            }
        confluence_space = deployments["confluence-space"]
        assert confluence_space["parameters"] == {"source": "confluence", "mode": "incremental"}
        assert confluence_space["concurrency_options"]["collision_strategy"] == "CANCEL_NEW"
        schedules = {
            name: [
                (s["schedule"]["cron"], s["schedule"]["timezone"], s["active"])
                for s in d["schedules"]
            ]
            for name, d in deployments.items()
        }
        # Nothing scheduled fails for want of a source's settings: every schedule ships
        # paused, to be switched on where its source is configured (below).
        assert schedules == {
            "confluence-space": [("0 * * * *", "UTC", False)],
            "files": [("30 * * * *", "UTC", False)],
            "backfill": [],
        }
        assert deployments["backfill"]["parameters"] == {"source": "confluence", "mode": "full"}

        _wait(
            "worker started",
            lambda: "started" in processes.log("worker"),
            60,
            lambda: processes.log("worker"),
        )

        # The scheduled deployment, run as its schedule runs it (no parameters) and
        # watched to the end; a second run requested while the first holds the
        # deployment's only slot is cancelled.
        processes.start(
            "watch",
            readme_command(".venv/bin/prefect deployment run ingest/confluence-space", server.port),
            env,
            outside,
        )
        first: dict[str, Any] = {}

        def first_run_holds_the_slot() -> bool:
            runs = server.flow_runs_of(confluence_space["id"])
            if runs and runs[0]["state_type"] in {"PENDING", "RUNNING"}:
                first.update(runs[0])
                return True
            assert not runs or runs[0]["state_type"] not in TERMINAL, runs[0]["state"]
            return False

        _wait(
            "first run pending or running",
            first_run_holds_the_slot,
            120,
            lambda: processes.log("worker"),
        )
        second_id = _run_id(server.cli("deployment", "run", "ingest/confluence-space", cwd=outside))

        watcher = processes.started["watch"]
        assert watcher.wait(240) == 0, processes.log("watch") + processes.log("worker")
        assert "Flow run finished successfully in 'Completed'" in processes.log("watch")
        worker_log = processes.log("worker")
        assert "Deployment step 'set_project_directory' completed successfully" in worker_log
        assert "left out" not in worker_log  # the space role: in the summary only
        run = server.wait_for_run(first["id"])
        assert run["state_type"] == "COMPLETED"
        assert run["parameters"] == {"source": "confluence", "mode": "incremental"}
        second = server.wait_for_run(second_id, timeout=60)
        assert second["state_type"] == "CANCELLED", second["state"]
        assert "concurrency limit" in second["state"]["message"]
        assert "RUNNING" not in server.state_types(second_id)  # it never ran

        summary = [a for a in server.artifacts_of(first["id"]) if a["key"] == "ingest-summary"]
        assert len(summary) == 1
        assert "confluence:ENG" in summary[0]["data"]
        assert "tenant `default`" in summary[0]["data"]
        assert summary[0]["data"].count("read access granted to 1 role is left out") == 1

        eng = _points(tmp_path / "qdrant", space_key="ENG")
        assert eng, "no points written"
        titles = {p["title"] for p in eng}
        assert {"Install Guide", "Release Notes", "install.pdf"} <= titles

        # README's backfill (other spaces than the configured ones, and a date), and while
        # it runs, README's way to switch the files schedule on for a running server.
        backfill = readme_command(".venv/bin/prefect deployment run ingest/backfill", server.port)
        processes.start("backfill", backfill, env, outside)
        listed = server.readme(
            ".venv/bin/prefect deployment schedule ls ingest/confluence-space", outside
        )
        (hourly,) = confluence_space["schedules"]
        assert hourly["id"] in listed
        resume = ".venv/bin/prefect deployment schedule resume"
        server.readme(resume, outside, SCHEDULE_ID=hourly["id"])
        resumed = server.deployment("confluence-space")
        assert resumed is not None and [s["active"] for s in resumed["schedules"]] == [True]

        assert processes.started["backfill"].wait(240) == 0, processes.log("backfill")
        output = processes.log("backfill")
        assert "Flow run finished successfully in 'Completed'" in output
        backfill_run = server.flow_run(_run_id(output))
        assert backfill_run["parameters"]["mode"] == "full"  # the deployment's default
        assert backfill_run["parameters"]["targets"] == ["HR"]
        assert backfill_run["parameters"]["since"].startswith("2026-01-01T00:00:00")
        backfill_summary = [
            a for a in server.artifacts_of(backfill_run["id"]) if a["key"] == "ingest-summary"
        ]
        assert "confluence:HR" in backfill_summary[0]["data"]
        assert "full" in backfill_summary[0]["data"]
        # Each run's summary is its persisted result on the server.
        assert server.persisted_summary(first["id"])["status"] == "ok"
        assert server.persisted_summary(backfill_run["id"])["source"] == "confluence:HR"

        # A run that fails on purpose (a backfill of a space the site does not have: the
        # listing is incomplete) ends Failed with its reason and its summary as result,
        # and no engine traceback in its logs or the worker's.
        nope = server.cli(
            "deployment", "run", "ingest/backfill", "--param", 'targets=["NOPE"]', cwd=outside
        )
        failed = server.wait_for_run(_run_id(nope))
        assert failed["state_type"] == "FAILED", failed["state"]
        assert "the listing was incomplete" in failed["state"]["message"]
        failed_summary = server.persisted_summary(failed["id"])
        assert failed_summary["status"] == "listing_incomplete"
        assert failed_summary["source"] == "confluence:NOPE"
        own_word = "the listing of confluence:NOPE is incomplete"  # the run's own warning
        _wait(  # a flow run's logs reach the server in batches, after its state may
            "the failed run's logs",
            lambda: own_word in "\n".join(server.logs_of(failed["id"])),
            30,
            lambda: "\n".join(server.logs_of(failed["id"])),
        )
        logs = "\n".join(server.logs_of(failed["id"]))
        for noise in ("Engine execution exited", "Traceback", "cannot be resolved"):
            assert noise not in logs, logs
            assert noise not in processes.log("worker"), processes.log("worker")

        # A run of a source this worker has no settings for (`files`: no files.paths, as
        # its schedule would start it) fails at once, in one line naming the setting to
        # add: its state's message, its log and the worker's, with no traceback.
        watched = server.run(
            [PREFECT, "deployment", "run", "ingest/files", "--watch"], outside, env, exit_code=1
        )
        not_configured = server.wait_for_run(_run_id(watched))
        assert not_configured["state_type"] == "FAILED", not_configured["state"]
        message = not_configured["state"]["message"]
        assert message == (
            "CONFIG_INVALID: files.paths: no targets: pass targets or set files.paths "
            "(in a worker's environment: INGEST_FILES__PATHS)"
        )
        logs = _clean_failure_logs(server, processes, not_configured["id"])
        assert "Task run" not in logs, logs  # stopped before any task
        assert message in processes.log("worker")
        assert "Traceback" not in watched

        # A run while `ingest mcp` holds the embedded store (answering, or here with a
        # long idle time) fails the same clean way, at its start, after the bounded wait:
        # its message says to stop or wait for the server, its summary is its result and
        # artifact, and no task ran (nothing retried as if the network had failed).
        mcp = [INGEST, "mcp", "--http", f"127.0.0.1:{_free_port()}"]
        processes.start("mcp", mcp, {**env, "INGEST_QDRANT__IDLE_RELEASE_S": "600"}, outside)
        _wait(
            "ingest mcp holding the store",
            lambda: getattr(read_holder(tmp_path / "qdrant"), "command", "") == "ingest mcp",
            120,
            lambda: processes.log("mcp"),
        )
        held = server.cli(
            "deployment", "run", "ingest/backfill", "--param", 'targets=["HR"]', cwd=outside
        )
        busy = server.wait_for_run(_run_id(held))
        assert busy["state_type"] == "FAILED", busy["state"]
        assert "stop or wait for the `ingest mcp` server" in busy["state"]["message"]
        assert server.persisted_summary(busy["id"])["status"] == "store_busy"
        busy_summary = [a for a in server.artifacts_of(busy["id"]) if a["key"] == "ingest-summary"]
        assert "held by `ingest mcp`" in busy_summary[0]["data"]
        logs = _clean_failure_logs(server, processes, busy["id"])
        assert "Task run" not in logs and "Retry" not in logs, logs
        processes.stop("mcp")
        processes.stop("worker")

        hr = _points(tmp_path / "qdrant", space_key="HR")
        assert {p["title"] for p in hr} >= {"Отпуск и больничные"}
        assert len(_points(tmp_path / "qdrant", space_key="ENG")) == len(eng)  # untouched
    finally:
        processes.stop_all()


@pytest.mark.slow
def test_secrets_come_from_prefect_secret_blocks(prefect_server: PrefectServer) -> None:
    """`qdrant.api_key_secret_block` (like `confluence.token_secret_block`, which the
    README test's worker reads its token through) names a Prefect Secret block on the
    server the run reaches; a secret set itself wins."""
    from prefect.blocks.system import Secret
    from prefect.events.worker import EventsWorker
    from prefect.settings import PREFECT_API_URL, temporary_settings
    from pydantic import SecretStr

    with temporary_settings({PREFECT_API_URL: prefect_server.url}):
        Secret(value=SecretStr("qdrant-key-1")).save("qdrant-api-key", overwrite=True)
        in_block = QdrantSettings.model_validate({"api_key_secret_block": "qdrant-api-key"})
        assert in_secret_block(in_block, "api_key")
        assert secret_value(in_block, "api_key") == "qdrant-key-1"
        own = QdrantSettings.model_validate(
            {"api_key": "own-key", "api_key_secret_block": "qdrant-api-key"}
        )
        assert not in_secret_block(own, "api_key")
        assert secret_value(own, "api_key") == "own-key"
        EventsWorker.drain_all()  # the blocks' events go out while the server is there
    assert secret_value(QdrantSettings.model_validate({}), "api_key") is None


@pytest.mark.slow
def test_ingest_serve_runs_the_deployments_without_a_pool(
    prefect_server: PrefectServer,
    confluence: FakeConfluence,
    tiny_model_dir: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    server = prefect_server
    processes = Processes(tmp_path)
    share = tmp_path / "share"
    share.mkdir()
    (share / "handbook.md").write_text(
        "# Handbook\n\nServed deployments run flows in the serving process.\n", encoding="utf-8"
    )
    outside = tmp_path / "serve-cwd"
    outside.mkdir()
    env = _ingest_env(server.env, confluence, tmp_path, tiny_model_dir, ["OPS"])
    env["INGEST_FILES__PATHS"] = json.dumps([str(share)])
    try:
        before = server.deployment("files")  # made by `prefect deploy` when run after it
        processes.start("serve", [INGEST, "serve"], env, outside)

        def served() -> bool:
            assert processes.alive("serve"), processes.log("serve")[-4000:]
            found = [server.deployment(n) for n in ("confluence-space", "files", "backfill")]
            # served deployments have no pool and no pull steps, even when a `prefect deploy`
            # of the same names came first (flows.serve.take_over)
            return all(
                d is not None and d["work_pool_name"] is None and not d["pull_steps"] for d in found
            ) and ("being served" in processes.log("serve"))

        _wait("ingest serve registered", served, 120, lambda: processes.log("serve"))
        if before is not None and before["work_pool_name"]:
            assert "ingest/files: detached from its work pool" in processes.log("serve")
        files = server.deployment("files")
        assert files is not None
        assert files["parameters"] == {"source": "files", "mode": "incremental"}
        assert [s["schedule"]["cron"] for s in files["schedules"]] == ["30 * * * *"]
        assert files["concurrency_options"]["collision_strategy"] == "CANCEL_NEW"

        try:
            output = server.cli(
                "deployment",
                "run",
                "ingest/files",
                "--param",
                "tenant_id=served",
                "--watch",
                cwd=outside,
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n--- ingest serve:\n{processes.log('serve')}") from None
        assert "Flow run finished successfully in 'Completed'" in output
        log = processes.log("serve")
        processes.stop("serve")  # SIGTERM, as systemd or a container stop sends
        # the schedules are paused on the way out (flows.serve.pause), so no scheduled
        # run piles up with nothing to run it
        assert (
            "ingest/files: schedules paused while not served" in processes.log("serve")[len(log) :]
        )
        paused = server.deployment("files")
        assert paused is not None and paused["paused"] is True

        points = _points(tmp_path / "qdrant", tenant_id="served")
        assert points and {p["source_type"] for p in points} == {"file"}
        assert any("serving process" in p["md_text"] for p in points)
    finally:
        processes.stop_all()


def _alias_target(config: Path, env: dict[str, str]) -> str | None:
    """The collection the alias names; waits for the flow-run process that last held
    the embedded store to let go of it."""
    from config.settings import load_settings
    from query.api import Index

    deadline = time.monotonic() + 30
    while True:
        try:
            with Index(load_settings(config_file=config, environ=env)) as index:
                return index.store().resolve()
        except IngestError as exc:  # still locked by the exiting flow-run process
            if not exc.transient or time.monotonic() > deadline:
                raise
        time.sleep(0.5)


@pytest.mark.slow
def test_a_deployment_run_with_reindex_goes_through_the_gate(
    prefect_server: PrefectServer, tmp_path: Path
) -> None:
    """A `files` deployment run by a process worker whose settings set `eval.questions`:
    `reindex: true` with budgets that cut the questions' passages apart is refused by the
    gate (the run fails, the alias stays, the comparison is the run's
    `ingest-reindex-gate` artifact); with budgets that keep them whole the alias moves and
    the run's summary artifact holds the comparison."""
    from tests.test_eval_gate import PASSAGES, SMALL, gated_settings

    server = prefect_server
    processes = Processes(tmp_path)
    docs = tmp_path / "docs"
    for name, _, _ in PASSAGES:
        (docs / name).parent.mkdir(parents=True, exist_ok=True)
        (docs / name).write_bytes((PROJECT_ROOT / "samples" / "docs" / name).read_bytes())
    questions = tmp_path / "passages.yaml"
    questions.write_text(
        yaml.safe_dump([{"question": q, "target": t, "phrase": p} for t, q, p in PASSAGES])
    )
    settings = gated_settings()
    settings |= {"eval": {"questions": str(questions)}, "files": {"paths": [str(docs)]}}
    config = tmp_path / "gated.yaml"
    config.write_text(yaml.safe_dump(settings))
    env = {
        **server.env,
        "INGEST_CONFIG": str(config),
        "INGEST_QDRANT__PATH": str(tmp_path / "qdrant"),
        "INGEST_CACHE__DIR": str(tmp_path / "cache"),
    }
    outside = tmp_path / "worker-cwd"
    outside.mkdir()
    try:
        server.run([INGEST, "run", "files", "--json"], outside, env)
        current = _alias_target(config, env)
        assert current is not None
        if server.http.get(f"/work_pools/{POOL}").status_code == 404:
            server.readme(".venv/bin/prefect work-pool create", PROJECT_ROOT)
        server.readme(".venv/bin/prefect deploy ", PROJECT_ROOT)
        worker = readme_command(".venv/bin/prefect worker start", server.port)
        processes.start("worker", worker, env, outside)
        _wait("worker started", lambda: "started" in processes.log("worker"), 60, lambda: "")

        def reindexed(chunking: dict[str, int]) -> dict[str, Any]:
            """A deployment run with `reindex: true` and these budgets, to its end."""
            budgets = f"chunking={json.dumps(chunking)}"
            started = server.cli(
                "deployment", "run", "ingest/files", "--param", "reindex=true", "--param",
                budgets, cwd=outside,
            )  # fmt: skip
            return server.wait_for_run(_run_id(started), timeout=300)

        refused = reindexed(SMALL)
        assert refused["state_type"] == "FAILED", refused["state"]
        assert "answers eval.questions worse" in refused["state"]["message"]
        artifacts = server.artifacts_of(refused["id"])
        (table,) = [a for a in artifacts if a["key"] == "ingest-reindex-gate"]
        assert "Re-index gate: the alias kept where it was" in table["data"]
        assert "| recall@5 (2 questions) | 1.000 | 0.000 |" in table["data"], table["data"]
        for question in (q for _, q, _ in PASSAGES):
            assert question in table["data"]
        assert _alias_target(config, env) == current

        moved = reindexed({"overlap_tokens": 20})  # the passages stay whole
        assert moved["state_type"] == "COMPLETED", moved["state"]
        (summary,) = [a for a in server.artifacts_of(moved["id"]) if a["key"] == "ingest-summary"]
        assert "Re-index gate: the alias moved" in summary["data"], summary["data"]
        assert "| recall@5 (2 questions) | 1.000 | 1.000 |" in summary["data"]
        assert _alias_target(config, env) not in (None, current)
    finally:
        processes.stop_all()
