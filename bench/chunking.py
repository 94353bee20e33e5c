"""Chunking throughput, quality and memory on real English + Russian Markdown.

Corpora (built once into .ingest/bench-corpus, from Debian's package registry, every
HTML page converted to Markdown by the product's own HTML normalizer, as `ingest run
files` would): `manuals`, the HTML manuals of KiCad (kicad-doc-en, kicad-doc-ru) and
aptitude (aptitude-doc-en, aptitude-doc-ru); `api`, every third page of the Python
library reference (python3.X-doc: API reference, many short code examples); plus the
Docling reference Markdown and the seed documents (both carried in tests/corpus/).

Reports:
  speed, per CPU-second (process time, all threads), side by side in one run: the floor
  (tokenizing the same text once with `tokenizers`' encode_batch; SentencePiece for
  reference) against the chunker, on all the corpora (many small documents) and on two
  ~6 MB EN+RU documents, in process and through `ingest chunk --format jsonl` (a child
  process: its CPU time and peak RSS): a prose one (the manuals, Docling and seeds
  repeated) and a code-heavy one (the Python library pages and the Russian manuals
  repeated); peak RSS of `ingest chunk` on each, also with `<s>` literals and half-width
  voiced marks in it (limit 300 MB + 5x the document);
  quality, per corpus (manuals, Docling, api): share of chunks within [min_tokens,
  max_tokens] on documents of at least 300 tokens, beside the most the rules allow
  (chunks out of range whatever a packer does, by cause: `forced_out_of_range`), chunks
  under 50 tokens: allowed (the whole document, or between two hard source breaks such
  as slides or sheets) and not, those by undersize reason; chunks left alone where a rule would let them join a
  neighbour (the validator's `joinable` rules), undersize reasons, validation
  violations, token counts recounted, byte-identical output over repeated runs.

    .venv/bin/python -m bench.chunking [--repeat N] [--json] [--skip-big]
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.measure import peak_rss_mib
from chunking import Chunk, ChunkedDocument, DocumentInfo, chunk_document, validate_chunks
from chunking.blocks import Block, BlockType
from chunking.tiny import TINY_TOKENS, tiny_allowance
from chunking.tokens import HFTokenCounter, bundled_tokenizer_json, get_token_counter
from config.settings import ChunkingSettings
from normalizers.base import normalize_bytes

ROOT = Path(__file__).resolve().parents[1]
MANUALS = ("kicad-doc-en", "kicad-doc-ru", "aptitude-doc-en", "aptitude-doc-ru")
# The Python documentation package names its version (python3.11-doc): the metapackage
# python3-doc depends on the current one.
API_METAPACKAGE = "python3-doc"
API_SHARE = 3  # every third page of the library reference (~2 MB of Markdown)
CORPUS = ROOT / ".ingest" / "bench-corpus"
IN_REPO = ROOT / "tests" / "corpus"
BIG_MEGABYTES = 6.0


def _download(packages: tuple[str, ...], into: Path) -> Path:
    """The packages' files, unpacked under `into`/x."""
    subprocess.run(["apt-get", "download", *packages], cwd=into, check=True, capture_output=True)
    for deb in sorted(into.glob("*.deb")):
        subprocess.run(["dpkg", "-x", str(deb), str(into / "x")], check=True)
    return into / "x"


def _api_package() -> str:
    shown = subprocess.run(
        ["apt-cache", "depends", API_METAPACKAGE], check=True, capture_output=True, text=True
    ).stdout
    found = re.search(r"Depends: (python3\.\d+-doc)", shown)
    if found is None:
        raise RuntimeError(f"{API_METAPACKAGE} names no python3.X-doc package:\n{shown}")
    return found.group(1)


def _to_markdown(html: Path, target: Path) -> None:
    """The product's own HTML normalizer, as `ingest run files` would convert the page."""
    normalized = normalize_bytes(html.read_bytes(), html.name)
    target.write_text(normalized.markdown, encoding="utf-8")


def build_corpus(name: str) -> list[Path]:
    """`manuals`: the KiCad and aptitude HTML manuals (EN and RU); `api`: the Python
    library reference (EN, many short code examples), both converted by
    normalizers/html.py. Built once into .ingest/bench-corpus/NAME."""
    directory = CORPUS / name
    marker = directory / ".complete"
    if not marker.exists():
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            if name == "manuals":
                unpacked = _download(MANUALS, Path(tmp))
                for html in sorted(unpacked.rglob("*.html")):
                    if html.stat().st_size < 2000:
                        continue
                    lang = "ru" if "/ru/" in html.as_posix() else "en"
                    _to_markdown(
                        html, directory / f"{html.parent.parent.name}-{lang}-{html.stem}.md"
                    )
            else:
                unpacked = _download((_api_package(),), Path(tmp))
                pages = sorted(
                    page
                    for page in unpacked.rglob("*.html")
                    if (page.parent.parent.name, page.parent.name) == ("html", "library")
                )
                for html in pages[::API_SHARE]:
                    _to_markdown(html, directory / f"python-library-{html.stem}.md")
        marker.touch()
    return sorted(directory.glob("*.md"))


def corpora() -> dict[str, list[Path]]:
    return {
        "manuals": build_corpus("manuals"),
        "docling": sorted((IN_REPO / "docling").glob("*/*.md")),
        "seeds": sorted((IN_REPO / "seeds").glob("*.txt")),
        "api": build_corpus("api"),
    }


def _big_text(parts: list[str]) -> str:
    """`parts` repeated until the text holds BIG_MEGABYTES."""
    size = sum(len(p.encode("utf-8")) for p in parts)
    return "\n\n".join(parts * max(1, round(BIG_MEGABYTES * 1e6 / size)))


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
        "--skip-big", action="store_true", help="leave out the 6 MB document (speed, memory)"
    )
    parser.add_argument(
        "--memory", metavar="FILE", help="only chunk FILE in this process and print its peak RSS"
    )
    args = parser.parse_args()
    if args.memory:
        measure_memory(Path(args.memory))
        return

    groups = corpora()
    files = [f for paths in groups.values() for f in paths]
    texts = [f.read_text(encoding="utf-8") for f in files]
    settings = ChunkingSettings()  # type: ignore[call-arg]
    hf = HFTokenCounter(bundled_tokenizer_json(), "bundled")
    sp = get_token_counter()
    sp.count("warm up")

    report: dict[str, Any] = {"load_average": os.getloadavg()[0]}
    report["corpus"] = speed(texts, hf, sp, settings, args.repeat, files)
    documents = dict(zip(files, report["corpus"].pop("_documents"), strict=True))
    for name in ("manuals", "docling", "api"):
        report[f"quality_{name}"] = quality([documents[f] for f in groups[name]], settings, sp)
    if not args.skip_big:
        by_file = dict(zip(files, texts, strict=True))
        prose = [by_file[f] for name in ("manuals", "docling", "seeds") for f in groups[name]]
        russian = [by_file[f] for f in groups["manuals"] if "-ru-" in f.name]
        code = [by_file[f] for f in groups["api"]] + russian
        with tempfile.TemporaryDirectory() as tmp:
            for name, parts in (("prose", prose), ("code", code)):
                big = Path(tmp) / f"big-{name}-en-ru.md"
                big.write_text(_big_text(parts), encoding="utf-8")
                report[f"big_{name}_document"] = big_document(big, hf, sp, settings)
                report[f"memory_ingest_chunk_{name}"] = memory_variants(big, Path(tmp))
    report["peak_rss_mb"] = round(peak_rss_mib(), 1)
    if args.json:
        print(json.dumps(report, indent=1, ensure_ascii=False))
        return
    for section, values in report.items():
        if isinstance(values, dict):
            print(section)
            for key, value in values.items():
                print(f"  {key:34s} {value}")
        else:
            print(f"{section:36s} {values}")


def _floor(texts: list[str], hf: HFTokenCounter, sp: Any) -> tuple[float, float, bool]:
    t0 = time.process_time()
    hf_tokens = sum(hf.count_many(texts))
    floor_cpu = time.process_time() - t0
    t0 = time.process_time()
    sp_tokens = sum(sp.count_many(texts))
    return floor_cpu, time.process_time() - t0, hf_tokens == sp_tokens


def speed(
    texts: list[str],
    hf: HFTokenCounter,
    sp: Any,
    settings: ChunkingSettings,
    repeat: int,
    files: list[Path],
) -> dict[str, Any]:
    """The corpus in process: floor and chunker, side by side."""
    megabytes = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    floor_cpu, sp_cpu, agree = _floor(texts, hf, sp)
    outputs: list[list[dict[str, object]]] = []
    chunk_cpu = 0.0
    documents: list[ChunkedDocument] = []
    for _ in range(max(1, repeat)):
        t0 = time.process_time()
        documents = [
            chunk_document(text, DocumentInfo(document_id=f.name), settings)
            for f, text in zip(files, texts, strict=True)
        ]
        chunk_cpu += time.process_time() - t0
        outputs.append([c.to_record() for d in documents for c in d.chunks])
    chunk_cpu /= max(1, repeat)
    return {
        "documents": len(texts),
        "megabytes": round(megabytes, 2),
        "token_counts_agree": agree,
        "floor_tokenizers_mb_per_cpu_s": round(megabytes / floor_cpu, 3),
        "sentencepiece_mb_per_cpu_s": round(megabytes / sp_cpu, 3),
        "chunker_mb_per_cpu_s": round(megabytes / chunk_cpu, 3),
        "chunker_vs_floor": round(floor_cpu / chunk_cpu, 3),
        "byte_identical_runs": all(o == outputs[0] for o in outputs[1:]) if repeat > 1 else None,
        "_documents": documents,
    }


def quality(
    documents: list[ChunkedDocument], settings: ChunkingSettings, sp: Any
) -> dict[str, Any]:
    t0 = time.process_time()
    violations = collections.Counter(
        v.rule
        for d in documents
        for v in validate_chunks(d.chunks, d.text, settings, d.blocks).violations
    )
    validate_cpu = time.process_time() - t0
    megabytes = sum(len(d.text.encode("utf-8")) for d in documents) / 1e6
    chunks = [c for d in documents for c in d.chunks]
    large_documents = [d for d in documents if sum(b.token_count for b in d.blocks) >= 300]
    large = [c for d in large_documents for c in d.chunks]

    def in_range(chunk: Chunk) -> bool:
        return settings.min_tokens <= chunk.token_count <= settings.max_tokens

    def within(group: list[Chunk]) -> float:
        return round(sum(1 for c in group if in_range(c)) / max(1, len(group)), 4)

    out_of_range = [c for c in large if not in_range(c)]
    forced: collections.Counter[str] = collections.Counter()
    for d in large_documents:
        forced.update(forced_out_of_range(d.blocks, settings))
    unavoidable = sum(forced.values())
    recounted = sp.count_many([c.md_text for c in chunks])
    tiny = [
        (c, tiny_allowance(d.chunks, i))
        for d in documents
        for i, c in enumerate(d.chunks)
        if c.token_count < TINY_TOKENS
    ]
    return {
        "documents": len(documents),
        "chunks": len(chunks),
        "within_min_max_share": within(chunks),
        "within_min_max_share_docs_300_plus": within(large),
        "chunks_docs_300_plus": len(large),
        "share_ceiling_under_the_rules_docs_300_plus": round(
            1 - unavoidable / max(1, len(large)), 4
        ),
        "out_of_range_whatever_the_packer_does_docs_300_plus": dict(forced),
        "joinable_but_alone": sum(
            n for rule, n in violations.items() if rule.startswith("joinable")
        ),
        "under_50_share": round(len(tiny) / max(1, len(chunks)), 4),
        "under_50_allowed": dict(collections.Counter(why for _, why in tiny if why)),
        "under_50_not_allowed_share": round(
            sum(why is None for _, why in tiny) / max(1, len(chunks)), 4
        ),
        "under_50_not_allowed_by_reason": dict(
            collections.Counter(str(c.undersize_reason) for c, why in tiny if why is None)
        ),
        "undersize_reasons": dict(
            collections.Counter(c.undersize_reason for c in chunks if c.undersize_reason)
        ),
        "out_of_range_docs_300_plus": dict(
            collections.Counter(
                f"{c.chunk_type}:{c.undersize_reason or 'oversize'}" for c in out_of_range
            ).most_common()
        ),
        "chunk_types": dict(collections.Counter(c.chunk_type for c in chunks)),
        "token_counts_exact": recounted == [c.token_count for c in chunks],
        "tokens_in_chunks_per_document_token": round(
            sum(c.token_count for c in chunks)
            / max(1, sum(b.token_count for d in documents for b in d.blocks)),
            3,
        ),
        "violations": sum(violations.values()),
        "violations_by_rule": dict(violations),
        "validator_mb_per_cpu_s": round(megabytes / max(validate_cpu, 1e-9), 3),
    }


def forced_out_of_range(
    blocks: Sequence[Block], settings: ChunkingSettings
) -> collections.Counter[str]:
    """Chunks out of [min_tokens, max_tokens] that the rules (docs/chunking.md#rules) leave
    whatever a packer does, by cause; the best share the rules allow is the rest:

    - `whole_block_over_max`: a code block over max_tokens (kept whole up to the oversize
      limit) or a table row over it;
    - `small_section_nothing_to_merge`: sections under min_tokens (prose, or only
      tables and code, which merge like prose) with no run of neighbouring sections
      they may merge with (same stretch between rules, never across a heading above
      them or a section of only tables and code of min_tokens or more) reaching
      min_tokens;
    - `prose_boxed_in`: prose between two tables or code blocks of min_tokens or more in
      one section, under min_tokens, that binding cannot take (budgets, max_tokens)."""
    found: collections.Counter[str] = collections.Counter()
    low, high = settings.min_tokens, settings.max_tokens
    stretches: list[list[tuple[int, list[Block]]]] = [[(0, [])]]  # sections: (level, blocks)
    for block in blocks:
        if block.type is BlockType.RULE:
            stretches.append([(0, [])])
        elif block.type is BlockType.HEADING:
            stretches[-1].append((block.level, []))
        else:
            stretches[-1][-1][1].append(block)
            if (
                block.type is BlockType.CODE
                and high < block.token_count <= settings.oversize_block_limit
            ):
                found["whole_block_over_max"] += 1
    for sections in stretches:
        for _, content in sections:
            found["prose_boxed_in"] += _boxed_in(content, settings)
        tokens = [sum(b.token_count for b in content) for _, content in sections]
        # Per section: None (no content), "atomic" (tables and code of min_tokens or
        # more, which no merge takes in), "prose" (anything that merges).
        kinds: list[str | None] = []
        for (_, content), size in zip(sections, tokens, strict=True):
            if not content:
                kinds.append(None)
            elif size >= low and all(b.type in (BlockType.TABLE, BlockType.CODE) for b in content):
                kinds.append("atomic")
            else:
                kinds.append("prose")
        levels = [level for level, _ in sections]
        alone = [
            index
            for index, kind in enumerate(kinds)
            if kind == "prose"
            and tokens[index] < low
            and not _reaches(index, kinds, tokens, levels, low)
        ]
        # Sections forced under min_tokens next to each other may share one chunk.
        found["small_section_nothing_to_merge"] += sum(
            1
            for i, index in enumerate(alone)
            if i == 0 or not _valid(alone[i - 1], index, kinds, levels)
        )
    return found


def _valid(first: int, last: int, kinds: list[str | None], levels: list[int]) -> bool:
    """May sections first..last merge: no "atomic" section among them, no heading
    inside above the highest section holding content?"""
    if any(kinds[i] == "atomic" for i in range(first, last + 1)):
        return False
    content = [levels[i] for i in range(first, last + 1) if kinds[i] == "prose"]
    return not content or min(levels[first + 1 : last + 1], default=99) >= min(content)


def _reaches(
    index: int, kinds: list[str | None], tokens: list[int], levels: list[int], low: int
) -> bool:
    """Does some run of sections around `index` that may merge reach `low` tokens?"""
    for first in range(index, -1, -1):
        if kinds[first] == "atomic":
            break
        for last in range(index, len(kinds)):
            if kinds[last] == "atomic":
                break
            if sum(tokens[first : last + 1]) >= low and _valid(first, last, kinds, levels):
                return True
    return False


def _boxed_in(content: list[Block], settings: ChunkingSettings) -> int:
    """Prose runs between two tables/code blocks of min_tokens or more in one section,
    under min_tokens, that the blocks' bound context cannot take whole."""
    large = [
        i
        for i, b in enumerate(content)
        if b.type in (BlockType.TABLE, BlockType.CODE) and b.token_count >= settings.min_tokens
    ]
    count = 0
    for left, right in itertools.pairwise(large):
        run = content[left + 1 : right]
        if not run or any(b.type in (BlockType.TABLE, BlockType.CODE, BlockType.MATH) for b in run):
            continue
        if sum(b.token_count for b in run) >= settings.min_tokens:
            continue
        after_room = min(
            settings.bind_after_tokens, settings.max_tokens - content[left].token_count
        )
        before_room = min(
            settings.bind_before_tokens, settings.max_tokens - content[right].token_count
        )
        taken = 0
        for block in run:  # the block before takes from the front
            if block.token_count > after_room:
                break
            after_room -= block.token_count
            taken += 1
        for block in reversed(run[taken:]):  # the block after from the back
            if block.token_count > before_room:
                break
            before_room -= block.token_count
            taken += 1
        count += int(taken < len(run))
    return count


# `ingest chunk` as its console script runs it (flows.cli:main), reporting its own peak RSS.
_LAUNCH = (
    "import sys\n"
    "from bench.measure import peak_rss_mib\n"
    "from flows.cli import main\n"
    "code = main(sys.argv[1:])\n"
    "sys.stdout.flush()\n"
    "print(peak_rss_mib(), file=sys.stderr)\n"
    "sys.exit(code)\n"
)


def _ingest_chunk(path: Path) -> tuple[float, float, int]:
    """`ingest chunk --format jsonl` in a child: its CPU seconds, peak RSS (MB), lines."""
    command = [sys.executable, "-c", _LAUNCH, "chunk", str(path), "--format", "jsonl"]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        process = subprocess.Popen(command, stdout=out, stderr=err, cwd=ROOT)
        _, status, usage = os.wait4(process.pid, 0)
        err.seek(0)
        message = err.read().decode()
        if status != 0:
            raise RuntimeError(f"ingest chunk {path} failed: {message}")
        out.seek(0)
        lines = sum(1 for _ in out)
    return usage.ru_utime + usage.ru_stime, float(message.split()[-1]), lines


def big_document(
    path: Path, hf: HFTokenCounter, sp: Any, settings: ChunkingSettings
) -> dict[str, Any]:
    """One ~6 MB EN+RU document: floor, chunker in process, and `ingest chunk`."""
    text = path.read_text(encoding="utf-8")
    megabytes = len(text.encode("utf-8")) / 1e6
    floor_cpu, sp_cpu, _ = _floor([text], hf, sp)
    t0 = time.process_time()
    document = chunk_document(text, DocumentInfo(document_id=path.name), settings)
    chunk_cpu = time.process_time() - t0
    cli_cpu, cli_rss, lines = _ingest_chunk(path)
    return {
        "megabytes": round(megabytes, 2),
        "chunks": len(document.chunks),
        "floor_tokenizers_mb_per_cpu_s": round(megabytes / floor_cpu, 3),
        "sentencepiece_mb_per_cpu_s": round(megabytes / sp_cpu, 3),
        "chunker_mb_per_cpu_s": round(megabytes / chunk_cpu, 3),
        "chunker_vs_floor": round(floor_cpu / chunk_cpu, 3),
        "ingest_chunk_mb_per_cpu_s": round(megabytes / cli_cpu, 3),
        "ingest_chunk_vs_floor": round(floor_cpu / cli_cpu, 3),
        "ingest_chunk_records": lines,
        "ingest_chunk_peak_rss_mb": round(cli_rss),
        "ingest_chunk_rss_limit_mb": round(300 + 5 * megabytes),
        "violations": len(
            validate_chunks(document.chunks, document.text, settings, document.blocks).violations
        ),
    }


def memory_variants(big: Path, directory: Path) -> dict[str, Any]:
    """Peak RSS of `ingest chunk` on the big document with `<s>` literals, and with
    half-width voiced marks (both once needed the 400 MB exact fallback)."""
    text = big.read_text(encoding="utf-8")
    paragraphs = text.split("\n\n")
    variants = {
        "with_special_literals": "\n\n".join(
            p + " <s> </s>" if i % 50 == 0 else p for i, p in enumerate(paragraphs)
        ),
        "with_half_width_voiced_marks": "\n\n".join(
            p + " ｶﾞｲﾄﾞ ﾊﾟﾋﾟﾌﾟ" if i % 50 == 0 else p for i, p in enumerate(paragraphs)
        ),
    }
    result: dict[str, Any] = {}
    for name, body in variants.items():
        path = directory / f"{name}.md"
        path.write_text(body, encoding="utf-8")
        size = len(body.encode("utf-8")) / 1e6
        _, rss, _ = _ingest_chunk(path)
        result[name] = {"peak_rss_mb": round(rss), "limit_mb": round(300 + 5 * size)}
    return result


def measure_memory(path: Path) -> None:
    """Peak RSS of a process that loads the counter and chunks one document (run it in a
    fresh process: `--memory FILE`). The target is 300 MB plus 5x the document size."""
    settings = ChunkingSettings()  # type: ignore[call-arg]
    get_token_counter().count("warm up")
    baseline = peak_rss_mib()
    text = path.read_text(encoding="utf-8")
    document = chunk_document(text, DocumentInfo(document_id=path.name), settings)
    validate_chunks(document.chunks, document.text, settings, document.blocks)
    peak = peak_rss_mib()
    size = len(text.encode("utf-8")) / 1e6
    print(
        f"{path.name}: {size:.2f} MB, {len(document.chunks)} chunks, peak RSS {peak:.0f} MB "
        f"(after loading the counter {baseline:.0f} MB); limit {300 + 5 * size:.0f} MB"
    )


if __name__ == "__main__":
    main()
