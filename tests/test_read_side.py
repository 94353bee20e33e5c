"""The read side stands alone: a process that searches the index (the query API, the
MCP server's module, `ingest search` and `ingest eval`) loads none of the write
pipeline: no normalizer (HTML, OCR, captions), no `tasks` module, no Prefect. Each check
runs in a fresh interpreter, since a test process has imported everything already."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from testkit.tiny_model import tiny_model_dir
from tests.process_helpers import run_python
from tests.query_helpers import QUESTION, QueryIndex, build_query_index

__all__ = ["tiny_model_dir"]  # fixture used below

WRITE_SIDE = ("normalizers", "tasks", "prefect")
WRITE_SIDE_LOADED = (
    f"[m for m in sorted(sys.modules) if m.split('.')[0].lstrip('_') in {WRITE_SIDE!r}]"
)


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> QueryIndex:
    return build_query_index(tmp_path_factory.mktemp("read-index"), tiny_model_dir)


def loaded(code: str) -> dict[str, Any]:
    """What `code`, run in a fresh interpreter, printed last: a JSON object."""
    done = run_python(code)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def test_importing_the_readers_loads_no_write_side_module() -> None:
    result = loaded(
        f"""
        import json, sys
        import query.api, query.mcp_server, query.served, query.evaluate
        print(json.dumps({{"loaded": {WRITE_SIDE_LOADED}}}))
        """
    )
    assert result["loaded"] == []


def test_the_check_sees_a_write_side_module() -> None:
    result = loaded(
        f"""
        import json, sys
        import query.api, tasks.resources
        print(json.dumps({{"loaded": {WRITE_SIDE_LOADED}}}))
        """
    )
    assert "tasks.resources" in result["loaded"] and "normalizers.registry" in result["loaded"]


def test_searching_evaluating_and_listing_sources_load_no_write_side_module(
    index: QueryIndex, tmp_path: Path
) -> None:
    questions = tmp_path / "questions.yaml"
    questions.write_text(f"- question: {QUESTION}\n  target: {index.restart_id}\n", "utf-8")
    config = str(index.config)
    result = loaded(
        f"""
        import contextlib, io, json, sys
        from flows.cli import main
        from query.api import PUBLIC, Index

        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            searched = main(["search", {QUESTION!r}, "--config", {config!r}, "--json"])
            evaluated = main(["eval", {str(questions)!r}, "--config", {config!r}, "--json"])
        with Index.open({config!r}) as index:
            best = index.search({QUESTION!r}, identity=PUBLIC, limit=1)[0]
            whole = index.fetch(best.document_id, identity=PUBLIC)
            kinds = [source.source_type for source in index.sources(identity=None)]
        print(json.dumps({{
            "codes": [searched, evaluated],
            "out": out.getvalue(),
            "fetched": whole is not None and best.text in whole.text,
            "kinds": kinds,
            "loaded": {WRITE_SIDE_LOADED},
        }}))
        """
    )
    assert result["codes"] == [0, 0] and result["fetched"] is True
    assert result["kinds"] == ["confluence", "file"]
    first = json.loads(result["out"].splitlines()[0])
    assert first["rank"] == 1 and first["document_id"] == index.restart_id
    assert result["loaded"] == []
