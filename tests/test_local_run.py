"""`ingest run` on Prefect's ephemeral API beside a Prefect server: the run keeps its own
Prefect database (in the cache directory), never the server's `PREFECT_HOME/prefect.db`,
which a second writer locks ("database is locked" in the server's log)."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest

from config.settings import load_settings
from flows.local_run import DATABASE_URL_ENV, own_prefect_database
from tests.process_helpers import run_python


@pytest.mark.slow
def test_a_local_run_keeps_its_own_prefect_database(tmp_path: Path) -> None:
    docs = tmp_path / "docs"  # empty: the flow runs (--always-flow), nothing is embedded
    docs.mkdir()
    home = tmp_path / "prefect-home"  # a server's home, as `prefect server start` uses it
    cache = tmp_path / "cache"
    done = run_python(
        f"""
        from flows.cli import main
        raise SystemExit(main(["run", "files", {str(docs)!r}, "--always-flow", "--json"]))
        """,
        {
            "PREFECT_HOME": str(home),
            "INGEST_CACHE__DIR": str(cache),
            "INGEST_QDRANT__PATH": str(tmp_path / "qdrant"),
        },
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert "prefect_startup_seconds" in summary  # the flow ran, on the ephemeral API
    assert not (home / "prefect.db").exists()
    with sqlite3.connect(cache / "prefect" / "prefect.db") as connection:
        (runs,) = connection.execute("select count(*) from flow_run").fetchone()
    assert runs == 1


def test_the_database_goes_in_the_cache_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("PREFECT_API_URL", *DATABASE_URL_ENV):
        monkeypatch.delenv(name, raising=False)
    own_prefect_database(load_settings({"cache": {"dir": str(tmp_path / "cache")}}))
    database = (tmp_path / "cache" / "prefect" / "prefect.db").resolve()
    assert os.environ[DATABASE_URL_ENV[0]] == f"sqlite+aiosqlite:///{database}"
    assert database.parent.is_dir()


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("PREFECT_API_DATABASE_CONNECTION_URL", "sqlite+aiosqlite:///mine.db"),
        ("PREFECT_SERVER_DATABASE_CONNECTION_URL", "sqlite+aiosqlite:///mine.db"),
        ("PREFECT_API_URL", "http://127.0.0.1:4200/api"),  # a server's: no ephemeral API
    ],
)
def test_a_database_the_user_chose_or_a_server_is_left_alone(
    name: str, value: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for unset in ("PREFECT_API_URL", *DATABASE_URL_ENV):
        monkeypatch.delenv(unset, raising=False)
    monkeypatch.setenv(name, value)
    own_prefect_database(load_settings({"cache": {"dir": str(tmp_path / "cache")}}))
    assert {n: os.environ.get(n) for n in ("PREFECT_API_URL", *DATABASE_URL_ENV)} == {
        n: value if n == name else None for n in ("PREFECT_API_URL", *DATABASE_URL_ENV)
    }
