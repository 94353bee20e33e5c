"""Installing the project is quiet and complete: `pyproject.toml` builds without a
deprecation warning or a "Package would be ignored" banner, and the wheel holds the data
the code reads (the bundled tokenizer, the stop word lists)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_wheel_builds_without_warnings_and_holds_the_package_data(tmp_path: Path) -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))
    packages = {name.split(".")[0] for name in project["tool"]["setuptools"]["packages"]}
    source = tmp_path / "src"  # a copy: a build writes build/ and egg-info beside its sources
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    for name in sorted(packages):
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    build = subprocess.run(
        [
            sys.executable,
            "-W",
            "always",
            "-c",
            "from setuptools import build_meta; print(build_meta.build_wheel('dist'))",
        ],
        cwd=source,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    output = build.stdout + build.stderr
    assert build.returncode == 0, output
    assert "Warning" not in output and "would be ignored" not in output, output
    wheel = source / "dist" / build.stdout.strip().splitlines()[-1]
    names = set(zipfile.ZipFile(wheel).namelist())
    for data in (
        "chunking/assets/xlm-roberta-tokenizer.json.xz",
        "chunking/assets/xlm-roberta-sentencepiece.model.xz",
        "indexing/stopwords/english.txt",
        "indexing/stopwords/russian.txt",
        "config/config.yaml",
    ):
        assert data in names, data
