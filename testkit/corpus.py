"""Where the files the tests and benchmarks read lie: `tests/corpus/`, carried in the
repository (a clone has nothing beside it).

- `docling/`: real PDF/DOCX/XLSX/PPTX/HTML inputs with Docling's reference Markdown
  (MIT licence, see `docling/LICENSE` and `docling/README.md` for provenance).
- `diagrams/`: real draw.io, Gliffy, VSDX and VSD files (Apache-2.0, BSD-3-Clause and
  MPL-2.0, their licences beside them; `diagrams/README.md` says where each is from).
- `poi/`: real Excel 3.0 and 4.0 workbooks (bare BIFF streams) from Apache POI's test
  data (Apache License 2.0, see `poi/LICENSE`, `poi/NOTICE` and `poi/README.md`).
- `seeds/`: the source documents the project's specification was drawn from (EN/RU
  Markdown-like text), used as a chunking corpus.
"""

from pathlib import Path

CORPUS_DIR = Path(__file__).resolve().parents[1] / "tests" / "corpus"
DOCLING = CORPUS_DIR / "docling"
POI = CORPUS_DIR / "poi"
SEEDS = CORPUS_DIR / "seeds"
DIAGRAMS = CORPUS_DIR / "diagrams"
