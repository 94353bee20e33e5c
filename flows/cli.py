"""The `ingest` command line (SPEC §7). Prefect is imported only by commands that run flows,
so `normalize`, `chunk` and `validate` start fast."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from config.errors import ConfigError, ErrorCode, IngestError
from config.settings import Settings, load_settings

if TYPE_CHECKING:
    from chunking import ChunkedDocument
    from connectors.base import SourceDocument


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        settings = load_settings(config_file=args.config)
        code: int = args.handler(args, settings)
        return code
    except ConfigError as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return 2
    except IngestError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `ingest chunk ... | head`: the reader left, nothing is wrong
        sys.stderr.close()
        return 0


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--config", metavar="FILE", help="settings file layered over config/config.yaml"
    )
    parser = argparse.ArgumentParser(
        prog="ingest",
        description="Keep a Qdrant collection in sync with Confluence spaces and document files.",
        parents=[common],
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    normalize = commands.add_parser(
        "normalize", parents=[common], help="print the normalized Markdown of one file"
    )
    normalize.add_argument("path", type=Path)
    normalize.set_defaults(handler=_normalize)

    chunk = commands.add_parser(
        "chunk", parents=[common], help="normalize if needed, chunk, print the chunk records"
    )
    chunk.add_argument("path", type=Path)
    chunk.add_argument("--format", choices=("jsonl", "table"), default="jsonl")
    chunk.set_defaults(handler=_chunk)

    validate = commands.add_parser(
        "validate",
        parents=[common],
        help="chunk and print the validation report (exit 1 on violations)",
    )
    validate.add_argument("path", type=Path)
    validate.set_defaults(handler=_validate)
    return parser


def _read_source(path: Path) -> SourceDocument:
    from tasks.stages import local_file_source

    if not path.is_file():
        raise IngestError(
            ErrorCode.FETCH_FAILED, "no such file (check the path)", subject=str(path)
        )
    return local_file_source(path)


def _normalize(args: argparse.Namespace, settings: Settings) -> int:
    from tasks.stages import normalize_source

    normalized = normalize_source(_read_source(args.path), settings)
    sys.stdout.write(normalized.markdown)
    for warning in normalized.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    return 0


def _chunked(args: argparse.Namespace, settings: Settings) -> ChunkedDocument:
    from tasks.stages import chunk_normalized, normalize_source

    source = _read_source(args.path)
    return chunk_normalized(source, normalize_source(source, settings), settings)


def _chunk(args: argparse.Namespace, settings: Settings) -> int:
    document = _chunked(args, settings)
    if args.format == "jsonl":
        out = sys.stdout
        for chunk in document.chunks:
            out.write(json.dumps(chunk.to_record(), ensure_ascii=False) + "\n")
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table("#", "type", "tokens", "section", "text")
    for chunk in document.chunks:
        preview = chunk.md_text[:70].replace("\n", " ⏎ ")
        table.add_row(
            str(chunk.ordinal), chunk.chunk_type, str(chunk.token_count), chunk.chunk_path, preview
        )
    Console().print(table)
    return 0


def _validate(args: argparse.Namespace, settings: Settings) -> int:
    from chunking import validate_chunks

    document = _chunked(args, settings)
    report = validate_chunks(document.chunks, document.text, settings.chunking, document.blocks)
    budget = settings.chunking
    within = sum(
        1 for c in document.chunks if budget.min_tokens <= c.token_count <= budget.max_tokens
    )
    print(
        f"{args.path}: {report.chunks} chunks, {within} within "
        f"[{budget.min_tokens}, {budget.max_tokens}] tokens, {len(report.violations)} violations"
    )
    for violation in report.violations:
        where = f"chunk {violation.ordinal}" if violation.ordinal is not None else "document"
        print(f"  {violation.rule}: {where}: {violation.message}")
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
