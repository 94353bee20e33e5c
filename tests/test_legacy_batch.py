"""Legacy files converted many per LibreOffice start: real DOC/XLS/PPT files (the
samples' and DOCX/XLSX/PPTX of the vendored corpus saved in the binary formats by
LibreOffice itself) and a real VSD, normalized alike in a batch and one by one; bad
files fail alone with their own conversion's error; a run starts soffice once per
conversion, not per file (counted from Python's audit events)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from config.errors import ErrorCode, IngestError
from config.settings import LimitsSettings, load_settings
from normalizers.base import normalize_bytes
from normalizers.legacy_batch import LegacyBatch, Upcoming
from normalizers.libreoffice import find_soffice
from normalizers.model import NormalizedDocument
from tasks import pipeline
from tasks.pipeline import SourceSpec
from tasks.resources import Resources

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO / "tests" / "corpus"
DOCLING = CORPUS / "docling"
# Corpus files saved in the binary formats; each format's files go in one soffice call.
TO_LEGACY = {
    "doc": [
        DOCLING / "docx" / name
        for name in (
            "docx_lists.docx",
            "docx_code_blocks.docx",
            "docx_rich_tables_01.docx",
            "lorem_ipsum.docx",
            "tablecell.docx",
            "textbox.docx",
        )
    ],
    "xls": [DOCLING / "xlsx" / name for name in ("xlsx_01.xlsx", "xlsx_05_table_with_title.xlsx")],
    "ppt": [DOCLING / "pptx" / name for name in ("powerpoint_sample.pptx", "pptx_chart.pptx")],
}
REAL_LEGACY = [
    REPO / "samples" / "docs" / "legacy" / "old-policy.doc",
    REPO / "samples" / "docs" / "legacy" / "budget-2019.xls",
    CORPUS / "diagrams" / "vsd" / "Visio11TextFieldsWithUnits.vsd",
]
# An OLE2 header and then noise: Word's filter cannot load it (CORRUPT, as alone).
DAMAGED_DOC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(range(256)) * 16


@pytest.fixture(scope="module")
def legacy_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real legacy files and the corpus's OOXML files saved as DOC/XLS/PPT."""
    folder = tmp_path_factory.mktemp("legacy")
    soffice = find_soffice()
    assert soffice is not None, "these tests need LibreOffice (soffice)"
    for fmt, sources in TO_LEGACY.items():
        profile = tmp_path_factory.mktemp("profile")
        command = [soffice, f"-env:UserInstallation={profile.as_uri()}", "--headless"]
        subprocess.run(
            [*command, "--convert-to", fmt, "--outdir", str(folder), *map(str, sources)],
            check=True,
            capture_output=True,
            timeout=300,
        )
    for path in REAL_LEGACY:
        shutil.copy(path, folder / path.name)
    made = sorted(p.name for p in folder.iterdir())
    assert len(made) == sum(map(len, TO_LEGACY.values())) + len(REAL_LEGACY), made
    return folder


def _markdown_and_meta(document: NormalizedDocument) -> tuple[Any, ...]:
    return (document.markdown, document.title, document.metadata, document.anchor_rows())


def _outcome(path: Path, batch: LegacyBatch | None) -> tuple[Any, ...]:
    try:
        return _markdown_and_meta(normalize_bytes(path.read_bytes(), path.name, converted=batch))
    except IngestError as error:
        return (error.code, error.message, error.subject)


@pytest.mark.slow
def test_a_batch_normalizes_to_the_same_markdown_as_one_by_one(legacy_dir: Path) -> None:
    files = sorted(legacy_dir.iterdir())
    alone = {path.name: _outcome(path, None) for path in files}
    with LegacyBatch(LimitsSettings()) as batch:  # type: ignore[call-arg]
        batch.convert(Upcoming(path.read_bytes(), path.name) for path in files)
        together = {path.name: _outcome(path, batch) for path in files}
        # One call per conversion; the one VSD, alone of its kind, converts by itself.
        assert batch.calls == 3
    assert together == alone
    assert all(isinstance(result[0], str) and result[0].strip() for result in alone.values())
    assert alone["old-policy.doc"][2]["converted_with"] == "libreoffice"


def test_a_damaged_doc_fails_alone_with_its_own_error(legacy_dir: Path) -> None:
    docs = sorted(legacy_dir.glob("*.doc"))
    damaged = legacy_dir.parent / "damaged.doc"
    damaged.write_bytes(DAMAGED_DOC)
    files = [*docs[:3], damaged, *docs[3:]]
    with LegacyBatch(LimitsSettings()) as batch:  # type: ignore[call-arg]
        batch.convert(Upcoming(path.read_bytes(), path.name) for path in files)
        assert batch.calls == 1  # LibreOffice went on past the damaged file
        results = {path.name: _outcome(path, batch) for path in files}
    expected = (
        ErrorCode.CORRUPT,
        _outcome(damaged, None)[1],
        "damaged.doc",
    )
    assert results.pop("damaged.doc") == expected
    assert "LibreOffice could not convert it to DOCX" in expected[1]
    assert len(results) == len(docs)
    assert all(isinstance(result[0], str) for result in results.values())


def test_calls_that_run_out_of_time_fall_back_to_the_per_file_limit(
    legacy_dir: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    limits = LimitsSettings(conversion_timeout_s=0.3)  # type: ignore[call-arg]
    files = sorted(legacy_dir.glob("*.doc"))
    with LegacyBatch(limits) as batch:
        batch.convert(Upcoming(path.read_bytes(), path.name) for path in files)
        # Each call is killed before a file is out: its first file is left to its own
        # conversion, the others go to the next call, until one file is left.
        assert batch.calls == len(files) - 1
        for path in files:
            with pytest.raises(IngestError) as caught:
                normalize_bytes(path.read_bytes(), path.name, limits=limits, converted=batch)
            assert caught.value.code == ErrorCode.TOO_LARGE
            assert "limits.conversion_timeout_s (0.3 s)" in caught.value.message
    assert list(tmp_path.iterdir()) == []  # every call's files and profile removed


@contextmanager
def soffice_starts() -> Iterator[list[str]]:
    """The soffice processes started while inside, counted from the interpreter's audit
    events (an audit hook cannot be removed: it records only while `recording`)."""
    starts: list[str] = []
    soffice = find_soffice()
    recording = [True]

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if recording[0] and event == "subprocess.Popen" and args[0] == soffice:
            starts.append(str(args[1][-1]))

    sys.addaudithook(hook)
    try:
        yield starts
    finally:
        recording[0] = False


def test_a_run_over_a_folder_starts_soffice_once_per_conversion(
    legacy_dir: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "share"
    shutil.copytree(legacy_dir, folder)
    (folder / "damaged.doc").write_bytes(DAMAGED_DOC)
    settings = load_settings(environ={"INGEST_CACHE__DIR": str(tmp_path / "cache")})
    spec = SourceSpec("files", (str(folder),))
    resources = Resources(settings)
    try:
        refs = pipeline.discover(spec, settings, resources).refs
        assert len(refs) == 14
        with soffice_starts() as starts:
            prepared = pipeline.prepare_batch(spec, settings, refs, resources)
        # doc, xls and ppt in one call each; the VSD and the damaged DOC alone.
        assert len(starts) == 5
        failures = {(Path(f.document_id).name, f.code) for f in prepared.outcome.failures}
        assert failures == {("damaged.doc", "CORRUPT")}
        assert len(prepared.documents) == 13
        with soffice_starts() as again:  # the stage cache holds all but the damaged file
            retried = pipeline.prepare_batch(spec, settings, refs, resources)
        assert len(again) == 1 and again[0].endswith(".doc")
        assert [f.code for f in retried.outcome.failures] == ["CORRUPT"]
    finally:
        resources.close()
