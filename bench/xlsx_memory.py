"""Peak memory and time of the XLSX normalizer on a large generated sheet and on the
corpus file that declares 1,048,496 rows.

    .venv/bin/python -m bench.xlsx_memory [--rows 100000] [--cols 10]

Each conversion runs in a fresh interpreter so its peak RSS is that conversion's;
`rss_before_mib` is that interpreter with every format module imported. Wall seconds
depend on what else runs on the machine; `cpu_seconds` less so.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from datetime import datetime, timedelta
from pathlib import Path

import openpyxl

INFLATED = Path(__file__).resolve().parents[1] / "tests/corpus/docling/xlsx/xlsx_04_inflated.xlsx"

_MEASURE = """
import json, sys, time
from bench.measure import peak_rss_mib
from pathlib import Path
from normalizers.base import normalize_bytes
from normalizers.registry import FORMATS
FORMATS["xlsx"].normalize  # import the format's module first: not part of the conversion
path = Path(sys.argv[1])
data = path.read_bytes()
before = peak_rss_mib()
start, cpu = time.perf_counter(), time.process_time()
doc = normalize_bytes(data, path.name)
elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
peak = peak_rss_mib()
print(json.dumps({"file": path.name, "bytes": len(data), "seconds": round(elapsed, 2),
                  "cpu_seconds": round(cpu, 2),
                  "rss_before_mib": round(before), "peak_rss_mib": round(peak),
                  "markdown_chars": len(doc.markdown)}))
"""


def generate(path: Path, rows: int, cols: int) -> None:
    """A realistic data sheet: text (all distinct), integers, floats and dates."""
    workbook = openpyxl.Workbook(write_only=True)
    sheet = workbook.create_sheet("Data")
    sheet.append([f"column {c}" for c in range(cols)])
    start = datetime(2020, 1, 1)
    for r in range(rows):
        values: list[object] = []
        for c in range(cols):
            kind = c % 4
            if kind == 0:
                values.append(f"customer {r} segment {c}")
            elif kind == 1:
                values.append(r * c)
            elif kind == 2:
                values.append(r / 7 + c)
            else:
                values.append(start + timedelta(hours=r))
        sheet.append(values)
    workbook.save(path)


def measure(path: Path) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(path)],
        check=True,
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    result: dict[str, object] = json.loads(out.stdout)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--cols", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        big = Path(tmp) / f"generated_{args.rows}x{args.cols}.xlsx"
        generate(big, args.rows, args.cols)
        print(json.dumps(measure(big)))
    print(json.dumps(measure(INFLATED)))


if __name__ == "__main__":
    main()
