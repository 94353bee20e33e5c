"""Image files as documents, end to end: `ingest normalize shot.png`, and a files run
with the quickstart settings whose searches (lexical and the default mode) find a word
only the screenshot holds; the run's summary counts the picture."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from flows.cli import main
from normalizers.pictures.ocr import tesseract_version
from tests import fixtures_pdf
from tests.picture_helpers import text_picture

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "samples" / "quickstart.yaml"
# Words no sample document holds: found only if the screenshot's text was read.
SCREENSHOT = ["Marmalade observatory opens", "Обсерватория открыта"]


def test_normalize_prints_an_image_files_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    shot = tmp_path / "shot.png"
    shot.write_bytes(text_picture(SCREENSHOT))
    monkeypatch.setenv("INGEST_CACHE__DIR", str(tmp_path / "cache"))
    assert main(["normalize", str(shot)]) == 0
    assert capsys.readouterr().out == "Marmalade observatory opens\n\nОбсерватория открыта\n"
    # a picture without text is an empty document, not an error
    blank = tmp_path / "blank.jpg"
    blank.write_bytes(text_picture([], size=(400, 300), format="JPEG"))
    assert main(["normalize", str(blank)]) == 0
    assert capsys.readouterr().out == ""
    # OCR off: the image is unsupported, and the message says how to turn it on
    monkeypatch.setenv("INGEST_PICTURES__OCR", "false")
    assert main(["normalize", str(shot)]) == 1
    err = capsys.readouterr().err
    assert "UNSUPPORTED_FORMAT" in err and "pictures.ocr: true" in err


@pytest.mark.slow
def test_a_files_run_finds_a_word_only_the_screenshot_holds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "notes.md").write_text("# Notes\n\nThe observatory schedule is on the screenshot.\n")
    (docs / "shot.png").write_bytes(text_picture(SCREENSHOT))
    (docs / "icon.gif").write_bytes(text_picture(["x"], size=(32, 32), format="GIF"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "INGEST_"))}
    state = {
        "INGEST_QDRANT__PATH": str(tmp_path / "qdrant"),
        "INGEST_CACHE__DIR": str(tmp_path / "cache"),
    }
    env |= state | {
        "PREFECT_HOME": str(tmp_path / "prefect"),
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180",
        "PYTHONPATH": str(ROOT),
    }
    command = ["run", "files", str(docs), "--json", "--config", str(QUICKSTART)]
    run = subprocess.run(
        [sys.executable, "-m", "flows.cli", *command],
        env=env,
        capture_output=True,
        text=True,
        timeout=540,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout.strip().splitlines()[-1])
    assert summary["failed"] == [] and summary["new"] == 3
    pictures = summary["pictures"]
    assert pictures["read"] == 1 and pictures["skipped"] == {"small": 1}
    assert pictures["ocr_seconds"] > 0 and pictures["diagrams"] == 0

    for name, value in state.items():
        monkeypatch.setenv(name, value)
    for mode in ("lexical", "auto"):
        capsys.readouterr()
        args = ["search", "marmalade", "--mode", mode, "--limit", "1", "--json"]
        assert main([*args, "--config", str(QUICKSTART)]) == 0
        (hit,) = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line]
        assert hit["title"] == "shot.png", mode
        assert "Marmalade observatory opens" in hit["md_text"], mode


def test_a_pictures_quote_reaches_its_chunk_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    slides = tmp_path / "slides.pdf"
    slides.write_bytes(fixtures_pdf.pdf_with_pictures([text_picture(["Throughput doubled"])]))
    monkeypatch.setenv("INGEST_CACHE__DIR", str(tmp_path / "cache"))
    assert main(["chunk", str(slides), "--format", "jsonl"]) == 0
    (chunk,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    quote = "> *Picture (page 1, picture 1):*\n>\n> Throughput doubled"
    assert chunk["md_text"] == f"Page one shows a chart.\n\n{quote}"
    assert quote in chunk["embed_text"]


def test_without_tesseract_a_command_warns_once_and_goes_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    notes, shot = tmp_path / "notes.md", tmp_path / "shot.png"
    notes.write_text("# Notes\n\nPlain text.\n")
    shot.write_bytes(text_picture(SCREENSHOT))
    monkeypatch.setenv("INGEST_CACHE__DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path))  # no tesseract on this PATH
    tesseract_version.cache_clear()
    try:
        assert main(["normalize", str(notes)]) == 0
        out = capsys.readouterr()
        assert out.out == "# Notes\n\nPlain text.\n"
        (warning,) = out.err.splitlines()
        assert warning.startswith("warning: pictures.ocr is on but tesseract is not installed")
        assert main(["normalize", str(shot)]) == 1
        assert "UNSUPPORTED_FORMAT" in capsys.readouterr().err
    finally:
        tesseract_version.cache_clear()
