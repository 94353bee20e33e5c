"""bench/README.md lists every bench in bench/ and every module the benches share, and
each bench runs one way: as a module (`.venv/bin/python -m bench.NAME`), as the README,
the docs and its own docstring show it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
README = BENCH / "README.md"


def _modules() -> dict[str, ast.Module]:
    return {
        path.stem: ast.parse(path.read_text("utf-8"))
        for path in sorted(BENCH.glob("*.py"))
        if path.stem != "__init__"
    }


def _runs(tree: ast.Module) -> bool:
    """The module has an `if __name__ == "__main__":` block: a bench, not a shared module."""
    return any(
        isinstance(node, ast.If) and "__main__" in ast.unparse(node.test) for node in tree.body
    )


def _listed() -> tuple[dict[str, str], set[str]]:
    """The README's benches (name -> its section) and the shared modules it names."""
    text = README.read_text("utf-8")
    benches_part, _, shared_part = text.partition("\n## Shared modules")
    sections = re.split(r"(?m)^### ", benches_part)[1:]
    benches = {re.match(r"`bench\.(\w+)`", s).group(1): s for s in sections}  # type: ignore[union-attr]
    return benches, set(re.findall(r"`bench/(\w+)\.py`", shared_part))


def test_the_readme_lists_every_bench_and_shared_module_and_no_other() -> None:
    modules = _modules()
    benches, shared = _listed()
    assert sorted(benches) == sorted(name for name, tree in modules.items() if _runs(tree))
    assert sorted(shared) == sorted(name for name, tree in modules.items() if not _runs(tree))


def test_each_bench_is_shown_run_as_a_module() -> None:
    benches, _ = _listed()
    modules = _modules()
    for name, section in benches.items():
        command = f".venv/bin/python -m bench.{name}"
        assert command in section, name
        assert command in (ast.get_docstring(modules[name]) or ""), name


def test_no_page_runs_a_bench_as_a_script() -> None:
    pages = [ROOT / "README.md", README, *ROOT.glob("docs/*.md"), *BENCH.glob("*.py")]
    for page in pages:
        assert not re.search(r"python3? bench/", page.read_text("utf-8")), page.name
