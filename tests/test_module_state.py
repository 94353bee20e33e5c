"""No module-level mutable state in the project's packages (what a run needs lives in a
per-run object: tasks.resources.Resources), and no function in them, nor in the query
API or the benches, longer than 80 lines. Checked on the source's syntax tree, so a new
global container, lock or long function fails here; the planted cases prove the checks
bite."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
STATE_FREE = (
    "config",
    "markdown_text",
    "connectors",
    "normalizers",
    "chunking",
    "stage_cache",
    "indexing",
    "tasks",
    "flows",
)
SHORT_FUNCTIONS = (*STATE_FREE, "query", "bench")  # every product package, and the benches
MAX_FUNCTION_LINES = 80

# Calls that build a mutable container or a synchronisation object.
MUTABLE_FACTORIES = frozenset(
    {
        "dict",
        "list",
        "set",
        "bytearray",
        "defaultdict",
        "OrderedDict",
        "Counter",
        "deque",
        "ChainMap",
        "WeakKeyDictionary",
        "WeakValueDictionary",
        "Lock",
        "RLock",
        "Semaphore",
        "BoundedSemaphore",
        "Condition",
        "Event",
        "local",
    }
)
MUTABLE_LITERALS = (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)


def _called_name(node: ast.expr) -> str | None:
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _module_level_assignments(tree: ast.Module) -> list[tuple[list[str], ast.expr, int]]:
    """(target names, value, line) of assignments run at import, also inside module-level
    `if`/`try` blocks."""
    found: list[tuple[list[str], ast.expr, int]] = []
    pending: list[ast.stmt] = list(tree.body)
    while pending:
        statement = pending.pop(0)
        if isinstance(statement, ast.Assign):
            names = [t.id for t in statement.targets if isinstance(t, ast.Name)]
            found.append((names, statement.value, statement.lineno))
        elif isinstance(statement, ast.AnnAssign) and statement.value is not None:
            name = statement.target.id if isinstance(statement.target, ast.Name) else "?"
            found.append(([name], statement.value, statement.lineno))
        elif isinstance(statement, ast.If | ast.Try):
            pending += statement.body + statement.orelse
            if isinstance(statement, ast.Try):
                pending += statement.finalbody
                for handler in statement.handlers:
                    pending += handler.body
    return found


def mutable_module_state(source: str, filename: str = "<source>") -> list[str]:
    """`file:line name` of each module-level name bound to a mutable container or lock."""
    problems = []
    for names, value, line in _module_level_assignments(ast.parse(source, filename)):
        if names == ["__all__"]:
            continue  # the export list, read by tools only
        if isinstance(value, MUTABLE_LITERALS) or _called_name(value) in MUTABLE_FACTORIES:
            problems.append(f"{filename}:{line} {', '.join(names)}")
    return problems


def long_functions(source: str, filename: str = "<source>") -> list[str]:
    """`file:line name (N lines)` of each function longer than MAX_FUNCTION_LINES."""
    problems = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            if lines > MAX_FUNCTION_LINES:
                problems.append(f"{filename}:{node.lineno} {node.name} ({lines} lines)")
    return problems


def _sources(packages: tuple[str, ...]) -> list[Path]:
    return sorted(path for package in packages for path in (ROOT / package).rglob("*.py"))


def test_no_module_level_mutable_state() -> None:
    problems = [
        problem
        for path in _sources(STATE_FREE)
        for problem in mutable_module_state(path.read_text("utf-8"), str(path.relative_to(ROOT)))
    ]
    assert problems == []


def test_no_long_functions_in_the_product() -> None:
    problems = [
        problem
        for path in _sources(SHORT_FUNCTIONS)
        for problem in long_functions(path.read_text("utf-8"), str(path.relative_to(ROOT)))
    ]
    assert problems == []


@pytest.mark.parametrize(
    "planted",
    [
        "_cache = {}",
        "_seen: list[str] = []",
        "NAMES = {name for name in 'ab'}",
        "import threading\n_lock = threading.Lock()",
        "from threading import RLock\n_lock = RLock()",
        "from collections import defaultdict\n_by_key = defaultdict(list)",
        "_registry = dict(a=1)",
        "import sys\nif sys.platform:\n    _hooks = []",
    ],
)
def test_the_state_check_catches_planted_globals(planted: str) -> None:
    assert len(mutable_module_state(planted)) == 1


def test_the_state_check_lets_constants_pass() -> None:
    constants = (
        "from types import MappingProxyType\n"
        "NAMES = ('a', 'b')\n"
        "KINDS = frozenset({'a'})\n"
        "TABLE = MappingProxyType({'a': 1})\n"
        "Alias = dict[str, int]\n"
        "__all__ = ['NAMES']\n"
        "def f():\n    local = {}\n    return local\n"
    )
    assert mutable_module_state(constants) == []


def test_the_length_check_catches_a_planted_long_function() -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    assert long_functions(f"def long():\n{body}") == ["<source>:1 long (81 lines)"]
    assert long_functions(f"def short():\n{body[: body.rindex('    x')]}") == []
