"""The store talks to its engines through one protocol (indexing/engine.py): what differs
between Edge, local mode and a server is said by their adapters, never tested by engine
name or client class elsewhere in the indexing package."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ADAPTERS = frozenset({"engine.py", "edge.py", "edge_models.py", "local_mode.py"})
ENGINE_TESTS = re.compile(
    r"""\bengine\s*(?:==|!=|\bin\b|\bnot\s+in\b)"""  # connection.engine == "edge"
    r"""|(?:==|!=)\s*["'](?:edge|local|server)["']"""  # ... == "local"
    r"""|isinstance\([^)]*(?:Client|Shard)\b"""  # isinstance(client, EdgeClient)
    r"""|\bconnection\.local\b(?!_)"""  # connection.local
)


def engine_tests(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if ENGINE_TESTS.search(line)]


def test_no_engine_is_tested_outside_its_adapter() -> None:
    found = {
        path.name: tests
        for path in sorted((ROOT / "indexing").glob("*.py"))
        if path.name not in ADAPTERS and (tests := engine_tests(path.read_text(encoding="utf-8")))
    }
    assert found == {}, "engine differences belong in the adapters (indexing/engine.py)"


def test_the_check_finds_each_kind_of_engine_test() -> None:
    assert engine_tests('if self.connection.engine == "edge":\n    pass') != []
    assert engine_tests('if settings.engine != "server":') != []
    assert engine_tests("assert isinstance(client, EdgeClient)") != []
    assert engine_tests("if not self.connection.local:") != []
    assert engine_tests("limit = self.client.scroll_page") == []
    assert engine_tests("local_points = self.client.tenant_points") == []
