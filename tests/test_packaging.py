"""Installing the project is quiet and complete: `pyproject.toml` builds without a
deprecation warning or a "Package would be ignored" banner, and the wheel holds the data
the code reads (the bundled tokenizer, the stop word lists)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGED = (
    *("pyproject.toml", "README.md", "config", "markdown_text", "chunking", "normalizers"),
    *("connectors", "indexing", "stage_cache", "tasks", "flows"),
)


def test_the_wheel_builds_without_warnings_and_holds_the_package_data(tmp_path: Path) -> None:
    source = tmp_path / "src"
    for name in PACKAGED:  # a copy: a build writes build/ and egg-info beside its sources
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            source.mkdir(exist_ok=True)
            shutil.copy2(path, source / name)
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
