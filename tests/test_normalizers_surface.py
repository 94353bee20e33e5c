"""What tasks/ and flows/ use of the normalizers is the package's public surface
(normalizers/__init__.py), and importing it loads nothing until a name is used."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import normalizers

ROOT = Path(__file__).resolve().parent.parent


def test_tasks_and_flows_import_only_the_public_surface() -> None:
    deep = []
    for package in ("tasks", "flows"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom):
                    names = [node.module or ""]
                elif isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                else:
                    continue
                deep += [
                    f"{path.relative_to(ROOT)}:{node.lineno} {name}"
                    for name in names
                    if name.startswith("normalizers.")
                ]
    assert deep == []


def test_the_surface_loads_lazily_and_every_name_resolves() -> None:
    script = (
        "import json, sys, normalizers\n"
        "before = sorted(m for m in sys.modules if m.startswith('normalizers.'))\n"
        "names = {n: getattr(normalizers, n).__module__ for n in normalizers.__all__}\n"
        "print(json.dumps({'before': before, 'names': names}))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True
    )
    loaded = json.loads(result.stdout)
    assert loaded["before"] == []
    assert sorted(loaded["names"]) == sorted(normalizers.__all__)
    assert all(module.startswith("normalizers.") for module in loaded["names"].values())
