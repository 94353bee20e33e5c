"""What the command line's processes import and how much memory they take, each in a
fresh interpreter (what a process imports is its own; `ingest run` on Prefect's
ephemeral API with a temporary PREFECT_HOME and the tiny BGE-M3-shaped model)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from testkit.tiny_model import tiny_model_dir
from tests.process_helpers import ROOT, run_python

__all__ = ["tiny_model_dir"]  # fixture used below

SAMPLES = ROOT / "samples" / "docs"
HEAVY = ("torch", "transformers", "prefect")


def run_json(code: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run `code` in a fresh interpreter; it prints one JSON object as its last line of
    stdout, which is returned with the process's stderr."""
    done = run_python(code, env)
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["stderr"] = done.stderr
    return result


@pytest.mark.slow
def test_normalize_chunk_and_validate_import_neither_torch_nor_prefect():
    files = [
        SAMPLES / "handbook" / "onboarding.md",
        SAMPLES / "handbook" / "incident-response.docx",
        SAMPLES / "handbook" / "oncall-rota.xlsx",
        SAMPLES / "architecture" / "storage-design.pdf",
        SAMPLES / "architecture" / "overview.pptx",
    ]
    result = run_json(
        f"""
        import contextlib, io, json, sys
        from flows.cli import main
        codes = []
        for path in {[str(f) for f in files]!r}:
            for command in ("normalize", "chunk", "validate"):
                with contextlib.redirect_stdout(io.StringIO()):
                    codes.append(main([command, path]))
        print(json.dumps({{"codes": codes, "loaded": [m for m in {HEAVY!r} if m in sys.modules]}}))
        """
    )
    assert result["codes"] == [0] * 3 * len(files)
    assert result["loaded"] == []


def run_ingest(workdir: Path, model: Path, *args: str) -> dict[str, Any]:
    """`ingest run files DOCS --json ARGS` in a fresh process: its summary, the heavy
    modules it imported and its peak RSS."""
    env = {
        "PREFECT_HOME": str(workdir / "prefect"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        # The ephemeral API server starts in a subprocess; on a loaded machine it takes
        # longer than Prefect's 20 s default.
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180",
        "INGEST_QDRANT__PATH": str(workdir / "qdrant"),
        "INGEST_CACHE__DIR": str(workdir / "cache"),
        "INGEST_CACHE__FSYNC": "false",
        "INGEST_EMBEDDER__MODEL": str(model),
        "INGEST_EMBEDDER__DEVICE": "cpu",
    }
    return run_json(
        f"""
        import contextlib, io, json, sys
        from flows.cli import main
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main(["run", "files", {str(workdir / "docs")!r}, "--json", *{list(args)!r}])
        print(json.dumps({{
            "code": code,
            "summary": json.loads(out.getvalue().strip().splitlines()[-1]),
            "loaded": [m for m in {HEAVY!r} if m in sys.modules],
            # VmHWM, not ru_maxrss: Linux carries the forking pytest process's peak
            # into a child's ru_maxrss, VmHWM is this process's own high-water mark.
            "peak_rss_mb": next(
                int(line.split()[1]) for line in open("/proc/self/status")
                if line.startswith("VmHWM:")
            ) / 1024,
        }}))
        """,
        env,
    )


@pytest.mark.slow
def test_a_run_with_nothing_to_embed_never_imports_torch(tiny_model_dir, tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    for name in ("handbook/onboarding.md", "runbooks/backup.txt"):
        (docs / Path(name).name).write_bytes((SAMPLES / name).read_bytes())

    first = run_ingest(tmp_path, tiny_model_dir)
    assert first["code"] == 0 and first["summary"]["embed"]["done"] > 0
    assert "torch" in first["loaded"]  # the precondition: embedding loads the model

    # Every document re-processed (full mode), every embedding and point already there.
    full = run_ingest(tmp_path, tiny_model_dir, "--mode", "full")
    assert full["code"] == 0
    assert full["summary"]["changed"] == 2 and full["summary"]["embed"]["done"] == 0
    assert full["loaded"] == ["prefect"]
    again = run_ingest(tmp_path, tiny_model_dir)
    # Nothing changed at the source: answered without starting a flow at all.
    assert again["summary"]["unchanged"] == 2 and again["loaded"] == []


def numeric_workbook(path: Path) -> Path:
    """A workbook like the one docs/chunking.md#table-headers sizes: a sheet of notes, then an
    image stored as numbers (270 rows x 85 columns of integers)."""
    import random

    import openpyxl

    book = openpyxl.Workbook()
    notes = book.active
    assert notes is not None
    notes.title = "Notes"
    notes.append(["Survey notes"])
    notes.append(["The scanned figure follows as a sheet of pixel values."])
    image = book.create_sheet("Image")
    rng = random.Random(14)
    for _ in range(270):
        image.append([rng.randint(0, 65535) for _ in range(85)])
    book.save(path)
    return path


@pytest.mark.slow
def test_a_numeric_sheet_runs_end_to_end_in_bounded_memory(tiny_model_dir, tmp_path):
    """`ingest run files` on the numeric workbook (the real flow, the tiny model): the run's
    process stays under 1.5 GB RSS and the chunks hold at most twice what the text needs."""
    from chunking.tokens import get_token_counter
    from config.settings import load_settings

    (tmp_path / "docs").mkdir()
    workbook = numeric_workbook(tmp_path / "docs" / "figure.xlsx")
    normalized = run_python(f"from flows.cli import main; main(['normalize', {str(workbook)!r}])")
    tokens = get_token_counter().count(normalized.stdout)
    needed = -(-tokens // load_settings().chunking.max_tokens)  # chunks the text alone needs

    run = run_ingest(tmp_path, tiny_model_dir)

    summary = run["summary"]
    assert run["code"] == 0 and summary["failed"] == []
    assert summary["embed"]["done"] == summary["chunks"] > 0
    assert summary["chunks"] <= 2 * needed, (summary["chunks"], needed)
    assert run["peak_rss_mb"] < 1536, run["peak_rss_mb"]
    assert "LOAD REPORT" not in run["stderr"] and "Loading weights" not in run["stderr"]
