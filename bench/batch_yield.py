"""How many files of a real folder give text through a run's batch steps (run by hand).

    .venv/bin/python -m bench.batch_yield FOLDER [--batch-size 100] [--json]

Lists FOLDER as a files source and prepares its documents (fetch, legacy conversion in
batches, normalize, chunk: `tasks.pipeline.prepare_isolated`, what the flow's prepare
task runs) in batches of `--batch-size`, in a fresh cache, with OCR off (pictures are
another bench's). Prints per format (the file's extension) the files, those that gave
chunks, and the failures by code, with how many were reported transient: bad files
are permanent failures, and a transient one here means a batch-level failure reached
documents that were not to blame. A folder of real, often damaged, files (Apache POI's
`test-data`, for one) shows whether one file's failure reaches the others of its batch.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any


def measure(folder: Path, batch_size: int) -> dict[str, Any]:
    from config.settings import load_settings
    from tasks import pipeline
    from tasks.pipeline import BatchOutcome, SourceSpec
    from tasks.resources import Resources

    with tempfile.TemporaryDirectory(prefix="batch-yield-") as cache:
        settings = load_settings(
            {"cache": {"dir": cache, "fsync": False}, "pictures": {"ocr": False}}
        )
        spec = SourceSpec("files", (str(folder),))
        resources = Resources(settings)
        started = time.perf_counter()
        try:
            refs = pipeline.discover(spec, settings, resources).refs
            total = BatchOutcome()
            chunked: list[str] = []
            for batch in pipeline.batches(refs, batch_size):
                prepared = pipeline.prepare_isolated(spec, settings, batch, resources)
                total.merge(prepared.outcome)
                chunked += [d.document_id for d in prepared.documents if d.chunks]
        finally:
            resources.close()
    formats: dict[str, dict[str, Any]] = defaultdict(
        lambda: {"files": 0, "text": 0, "failed": Counter(), "transient": 0}
    )
    for ref in refs:
        formats[_format(ref.document_id)]["files"] += 1
    for document_id in chunked:
        formats[_format(document_id)]["text"] += 1
    for failure in total.failures:
        row = formats[_format(failure.document_id)]
        row["failed"][failure.code] += 1
        row["transient"] += failure.transient
    return {
        "folder": str(folder),
        "batch_size": batch_size,
        "seconds": round(time.perf_counter() - started, 1),
        "formats": {
            name: {**row, "failed": dict(row["failed"])} for name, row in sorted(formats.items())
        },
    }


def _format(document_id: str) -> str:
    return Path(document_id).suffix.lower().lstrip(".") or "(none)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = measure(args.folder.resolve(), args.batch_size)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{result['folder']}: batches of {result['batch_size']}, {result['seconds']} s")
    print(f"{'format':8} {'files':>6} {'text':>6} {'transient':>9}  failed by code")
    for name, row in result["formats"].items():
        codes = ", ".join(f"{code} {n}" for code, n in sorted(row["failed"].items()))
        print(f"{name:8} {row['files']:6} {row['text']:6} {row['transient']:9}  {codes}")


if __name__ == "__main__":
    main()
