"""Chunking throughput, quality and memory on real English + Russian Markdown.

Corpus (built once into .ingest/bench-corpus, from Debian's package registry): the HTML
manuals of KiCad (kicad-doc-en, kicad-doc-ru) and aptitude (aptitude-doc-en,
aptitude-doc-ru), converted to GitHub Markdown by pandoc, plus the Docling reference
Markdown and the seed documents (both carried in tests/corpus/).

Reports, per CPU-second (process time, all threads):
  (a) the floor: tokenizing every document once with `tokenizers` (encode_batch), and
      for reference once with SentencePiece;
  (b) the full chunker (normalize pass, parse, count, split, pack, overlap, ids);
  the ratio b/a, chunk count, share of chunks within [min, max], validation violations,
  undersize reasons, and peak RSS.

    .venv/bin/python bench/chunking.py [--repeat N] [--json]
"""

from __future__ import annotations

import argparse
import collections
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from chunking import DocumentInfo, chunk_document, validate_chunks  # noqa: E402
from chunking.tokens import HFTokenCounter, bundled_tokenizer_json, get_token_counter  # noqa: E402
from config.settings import ChunkingSettings  # noqa: E402

PACKAGES = ("kicad-doc-en", "kicad-doc-ru", "aptitude-doc-en", "aptitude-doc-ru")
CORPUS = ROOT / ".ingest" / "bench-corpus"
IN_REPO = ROOT / "tests" / "corpus"


def build_corpus() -> list[Path]:
    CORPUS.mkdir(parents=True, exist_ok=True)
    marker = CORPUS / ".complete"
    if not marker.exists():
        import pypandoc

        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run(
                ["apt-get", "download", *PACKAGES], cwd=tmp, check=True, capture_output=True
            )
            for deb in Path(tmp).glob("*.deb"):
                subprocess.run(["dpkg", "-x", str(deb), str(Path(tmp) / "x")], check=True)
            for html in sorted((Path(tmp) / "x").rglob("*.html")):
                if html.stat().st_size < 2000:
                    continue
                lang = "ru" if "/ru/" in html.as_posix() else "en"
                name = f"{html.parent.parent.name}-{lang}-{html.stem}.md"
                markdown = pypandoc.convert_file(
                    str(html), "gfm-raw_html", extra_args=["--wrap=none"]
                )
                (CORPUS / name).write_text(markdown, encoding="utf-8")
        marker.touch()
    files = sorted(CORPUS.glob("*.md"))
    files += sorted((IN_REPO / "docling").glob("*/*.md"))
    files += sorted((IN_REPO / "seeds").glob("*.txt"))
    return files


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="chunk the corpus N times (N >= 2 checks byte-identical output)",
    )
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--memory", metavar="FILE", help="only chunk FILE in this process and print its peak RSS"
    )
    args = parser.parse_args()
    if args.memory:
        measure_memory(Path(args.memory))
        return

    files = build_corpus()
    texts = [f.read_text(encoding="utf-8") for f in files]
    megabytes = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    russian = (
        sum(len(t.encode()) for f, t in zip(files, texts, strict=True) if "-ru-" in f.name) / 1e6
    )
    settings = ChunkingSettings()  # type: ignore[call-arg]

    hf = HFTokenCounter(bundled_tokenizer_json(), "bundled")
    sp = get_token_counter()
    sp.count("warm up")
    t0 = time.process_time()
    hf_tokens = sum(hf.count_many(texts))
    floor_cpu = time.process_time() - t0
    t0 = time.process_time()
    sp_tokens = sum(sp.count_many(texts))
    sp_cpu = time.process_time() - t0

    outputs: list[list[dict[str, object]]] = []
    chunk_cpu = 0.0
    documents = []
    for _ in range(max(1, args.repeat)):
        t0 = time.process_time()
        documents = [
            chunk_document(text, DocumentInfo(document_id=f.name), settings)
            for f, text in zip(files, texts, strict=True)
        ]
        chunk_cpu += time.process_time() - t0
        outputs.append([c.to_record() for d in documents for c in d.chunks])
    chunk_cpu /= max(1, args.repeat)
    identical = all(o == outputs[0] for o in outputs[1:])

    t0 = time.process_time()
    violations = collections.Counter(
        v.rule
        for d in documents
        for v in validate_chunks(d.chunks, d.text, settings, d.blocks).violations
    )
    validate_cpu = time.process_time() - t0
    chunks = [c for d in documents for c in d.chunks]
    within = sum(1 for c in chunks if settings.min_tokens <= c.token_count <= settings.max_tokens)
    reasons = collections.Counter(c.undersize_reason for c in chunks if c.undersize_reason)
    types = collections.Counter(c.chunk_type for c in chunks)
    peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    report = {
        "documents": len(files),
        "megabytes": round(megabytes, 2),
        "russian_megabytes": round(russian, 2),
        "tokens": hf_tokens,
        "token_counts_agree": hf_tokens == sp_tokens,
        "floor_tokenizers_mb_per_cpu_s": round(megabytes / floor_cpu, 3),
        "sentencepiece_mb_per_cpu_s": round(megabytes / sp_cpu, 3),
        "chunker_mb_per_cpu_s": round(megabytes / chunk_cpu, 3),
        "chunker_vs_floor": round(floor_cpu / chunk_cpu, 3),
        "validator_mb_per_cpu_s": round(megabytes / validate_cpu, 3),
        "chunks": len(chunks),
        "within_min_max_share": round(within / len(chunks), 4),
        "chunk_types": dict(types),
        "undersize_reasons": dict(reasons),
        "violations": sum(violations.values()),
        "violations_by_rule": dict(violations),
        "byte_identical_runs": identical if args.repeat > 1 else None,
        "peak_rss_mb": round(peak_rss_mb, 1),
    }
    if args.json:
        print(json.dumps(report, indent=1))
        return
    for key, value in report.items():
        print(f"{key:32s} {value}")


def measure_memory(path: Path) -> None:
    """Peak RSS of a process that loads the counter and chunks one document (run it in a
    fresh process: `--memory FILE`). The target is 300 MB plus 5x the document size."""
    settings = ChunkingSettings()  # type: ignore[call-arg]
    get_token_counter().count("warm up")
    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    text = path.read_text(encoding="utf-8")
    document = chunk_document(text, DocumentInfo(document_id=path.name), settings)
    validate_chunks(document.chunks, document.text, settings, document.blocks)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    size = len(text.encode("utf-8")) / 1e6
    print(
        f"{path.name}: {size:.2f} MB, {len(document.chunks)} chunks, peak RSS {peak:.0f} MB "
        f"(after loading the counter {baseline:.0f} MB); limit {300 + 5 * size:.0f} MB"
    )


if __name__ == "__main__":
    main()
