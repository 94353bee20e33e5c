"""Same files, same index, whatever the load and wherever a run was killed: a document
whose picture OCR ran out of time is no final normalize result (the next run reads it
again and the picture gets its text), and a cache entry cut short reads as a miss at
every stage (normalize, chunk, embedding, lexical weights, OCR), never as a value.

The load: `tesseract` on PATH is first a script that never gets to OCR (as on a machine
too busy), then the installed one."""

from __future__ import annotations

import io
import os
import pickle
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import docx
import pytest

from config.settings import PicturesSettings, load_settings
from indexing.embed_cache import EMBEDDING, WEIGHTS, embed_key, lexical_key
from indexing.embedders import Embedding
from normalizers.base import normalize_bytes
from normalizers.pictures import PictureReader
from stage_cache.cached import JSON, Codec, cached
from stage_cache.keys import CacheKey, stage_key
from stage_cache.store import StageCache
from tasks import pipeline
from tasks.pipeline import SourceSpec
from tasks.prepare import NORMALIZED
from tasks.resources import Resources
from tasks.stages import PictureStageCache
from testkit.tiny_model import tiny_model_dir
from tests.picture_helpers import text_picture

# fixtures used by name
__all__ = ["tiny_model_dir"]

ROOT = Path(__file__).resolve().parents[1]
WORDS = "INVOICE TOTAL 4711"


@contextmanager
def stalled_tesseract(folder: Path) -> Iterator[None]:
    """`tesseract` on PATH never starts its OCR (its version and languages it answers at
    once): every picture runs out of the run's OCR time, as on a machine too busy."""
    real = shutil.which("tesseract")
    assert real is not None, "these tests need tesseract"
    folder.mkdir()
    shim = folder / "tesseract"
    shim.write_text(
        textwrap.dedent(
            f"""\
            #!{sys.executable}
            import os, sys, time
            if "stdin" in sys.argv:
                time.sleep(3600)  # until the OCR time limit stops it
            os.execv({real!r}, [{real!r}, *sys.argv[1:]])
            """
        )
    )
    shim.chmod(0o755)
    path = os.environ["PATH"]
    os.environ["PATH"] = f"{folder}{os.pathsep}{path}"
    try:
        yield
    finally:
        os.environ["PATH"] = path


def report_docx() -> bytes:
    document = docx.Document()
    document.add_paragraph("Quarterly report: the scanned invoice follows.")
    document.add_picture(io.BytesIO(text_picture([WORDS])))
    document.add_paragraph("Closing paragraph.")
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def test_a_picture_that_ran_out_of_time_is_read_by_the_next_run(tmp_path: Path) -> None:
    share = tmp_path / "share"
    share.mkdir()
    (share / "report.docx").write_bytes(report_docx())
    cache_dir = tmp_path / "cache"
    # the same settings every time: only the machine's load differs
    environ = {"INGEST_CACHE__DIR": str(cache_dir), "INGEST_PICTURES__TIMEOUT_S": "5"}
    settings = load_settings(environ=environ)
    spec = SourceSpec("files", (str(share),))
    resources = Resources(settings)

    def prepare() -> pipeline.PreparedBatch:
        refs = pipeline.discover(spec, settings, resources).refs
        return pipeline.prepare_batch(spec, settings, refs, resources)

    def chunk_text(prepared: pipeline.PreparedBatch) -> str:
        (document,) = prepared.documents
        records = StageCache(cache_dir).get_json(CacheKey("chunk", document.chunk_key))
        assert records is not None
        return "\n".join(record["md_text"] for record in records)

    try:
        with stalled_tesseract(tmp_path / "bin"):
            loaded = prepare()
        assert loaded.outcome.pictures.skipped == {"timeout": 1}
        assert WORDS not in chunk_text(loaded)

        # The real tesseract now: each run normalizes the document again (the cache did
        # not keep it without the picture) until one reads the picture in time (the
        # first, unless this machine is loaded too).
        for _ in range(4):
            again = prepare()
            normalized = again.outcome.stages["normalize"]
            assert (normalized.done, normalized.cached) == (1, 0)
            if again.outcome.pictures.read:
                break
            assert again.outcome.pictures.skipped == {"timeout": 1}
        assert again.outcome.pictures.read == 1 and not again.outcome.pictures.skipped
        assert WORDS in chunk_text(again)

        settled = prepare()  # a complete document is final: cached like any other
        normalized = settled.outcome.stages["normalize"]
        assert (normalized.done, normalized.cached) == (0, 1)
        assert chunk_text(settled) == chunk_text(again)
    finally:
        resources.close()


@pytest.mark.slow
def test_a_document_indexed_without_its_timed_out_picture_is_planned_again(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    share = tmp_path / "share"
    share.mkdir()
    (share / "report.docx").write_bytes(report_docx())
    settings = load_settings(
        environ={
            "INGEST_CACHE__DIR": str(tmp_path / "cache"),
            "INGEST_QDRANT__PATH": str(tmp_path / "qdrant"),
            "INGEST_EMBEDDER__MODEL": str(tiny_model_dir),
            "INGEST_EMBEDDER__DEVICE": "cpu",
            "INGEST_PICTURES__TIMEOUT_S": "2",
        }
    )
    spec = SourceSpec("files", (str(share),))
    resources = Resources(settings)
    try:
        listing = pipeline.discover(spec, settings, resources)
        with stalled_tesseract(tmp_path / "bin"):
            prepared = pipeline.prepare_isolated(spec, settings, listing.refs, resources)
        (document,) = prepared.documents
        assert not document.settled
        indexed = pipeline.index_isolated(spec, settings, prepared.documents, resources)
        assert indexed.indexed == [document.document_id]  # its text is searchable now
        # ... and the next incremental run reads it again for the picture's text
        plan = pipeline.plan(spec, settings, listing, resources, mode="incremental", since=None)
        assert [ref.document_id for ref in plan.to_process] == [document.document_id]
    finally:
        resources.close()


def test_a_markdown_files_own_pictures_front_matter_is_no_picture_count() -> None:
    for front in ("pictures: many", "pictures: {skipped: 3}", "pictures: {skipped: [timeout]}"):
        document = normalize_bytes(f"---\n{front}\n---\n# Notes\n\nText.\n".encode(), "a.md")
        assert document.metadata["pictures"] and NORMALIZED.final(document), front


# --- entries cut short ----------------------------------------------------------------


def every_stage() -> list[tuple[str, CacheKey, Any, Codec[Any]]]:
    """One real value of each stage, with its key and codec."""
    normalized = normalize_bytes(report_docx(), "report.docx")
    records = [{"md_text": "Closing paragraph.", "token_count": 3, "headings_path": ["Report"]}]
    embedding = Embedding(dense=[0.25, -1.5, 3.0] * 128, sparse={7: 0.5, 250_001: 1.25})
    return [
        ("normalize", stage_key("normalize", "4", "config", "input"), normalized, NORMALIZED),
        ("chunk", stage_key("chunk", "11", "config", "input"), records, JSON),
        ("embed", embed_key("model", "Closing paragraph."), embedding, EMBEDDING),
        ("lexical", lexical_key("encoder", "Closing paragraph."), {7: 0.5, 9: 2.0}, WEIGHTS),
    ]


def cut_points(size: int) -> list[int]:
    """Lengths an entry of `size` bytes may be left at: each of the first and last 64
    bytes (the header, the payload's end) and a spread between."""
    return sorted({*range(min(size, 64)), *range(max(0, size - 64), size), *range(0, size, 97)})


@pytest.mark.parametrize("stage", ["normalize", "chunk", "embed", "lexical"])
def test_an_entry_cut_anywhere_is_a_miss_and_is_computed_again(tmp_path: Path, stage: str) -> None:
    ((_, key, value, codec),) = [entry for entry in every_stage() if entry[0] == stage]
    cache = StageCache(tmp_path)
    stored, hit = cached(cache, key, lambda: value, codec)
    assert not hit
    whole = cache.path(key).read_bytes()
    computed: list[int] = []

    def compute() -> Any:
        computed.append(1)
        return value

    for length in cut_points(len(whole)):
        cache.path(key).write_bytes(whole[:length])
        again, hit = cached(cache, key, compute, codec)
        assert not hit, f"{stage}: an entry cut at {length} of {len(whole)} bytes was read"
        assert codec.encode(again) == codec.encode(stored)
        assert cache.path(key).read_bytes() == whole  # written anew, whole
    assert len(computed) == len(cut_points(len(whole)))


def test_an_ocr_result_cut_short_is_read_again_by_tesseract(tmp_path: Path) -> None:
    store = PictureStageCache(StageCache(tmp_path))

    def read() -> tuple[str, int]:
        settings = PicturesSettings()  # type: ignore[call-arg]
        reader = PictureReader(settings, languages="eng", cache=store)
        text = reader.text(text_picture([WORDS]), "invoice.png")
        return text, int(reader.counts.ocr_seconds > 0)

    first, ran = read()
    assert WORDS in first and ran == 1
    (entry,) = [path for path in (tmp_path / "pictures").rglob("*") if path.is_file()]
    whole = entry.read_bytes()
    for length in (0, 10, len(whole) // 2, len(whole) - 1):
        entry.write_bytes(whole[:length])
        again, ran = read()
        assert again == first and ran == 1, f"an OCR entry cut at {length} bytes was read"


# The child: writes entries of every stage over and over, until killed.
WRITER = r"""
import pickle, sys
from stage_cache.store import StageCache
cache = StageCache(sys.argv[1])
entries = pickle.loads(bytes.fromhex(sys.stdin.read()))
print("writing", flush=True)
while True:
    for key, data in entries:
        cache.put(key, data)
"""


def test_entries_of_a_writer_killed_by_sigkill_read_whole_or_not_at_all(tmp_path: Path) -> None:
    entries = [(key, codec.encode(value)) for _, key, value, codec in every_stage()]
    # a large payload too, so that kills land in the middle of its write (in place, without
    # the header's check, 32 MB reads back cut short on the first kills)
    entries.append((stage_key("chunk", "11", "config", "large"), b"x" * 32_000_000))
    expected = {key.digest: data for key, data in entries}
    rng = random.Random(44)
    cache = StageCache(tmp_path / "cache")
    for _ in range(8):
        child = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(cache.root)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            start_new_session=True,
        )
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write(pickle.dumps(entries).hex())
        child.stdin.close()
        assert child.stdout.readline().strip() == "writing"
        time.sleep(rng.uniform(0.01, 0.3))
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
        for key, _ in entries:
            value = cache.get(key)
            assert value is None or value == expected[key.digest]
    assert {key.digest for key in cache.entry_keys()} <= set(expected)
