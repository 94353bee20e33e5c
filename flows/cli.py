"""The `ingest` command line (docs/operations.md#the-command-line). Prefect is imported only by
commands that run flows, so `normalize`, `chunk` and `validate` start fast."""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

# A command's wall time counts from here, before the project's imports (pydantic, a
# second on a busy machine).
_LOADED = time.monotonic()

from config.errors import ConfigError, ErrorCode, IngestError  # noqa: E402
from config.settings import Settings, load_settings  # noqa: E402
from flows.local_run import ApiStartFailed, own_prefect_database, telemetry_off  # noqa: E402
from indexing.store_lock import name_this_process  # noqa: E402

if TYPE_CHECKING:
    from typing import TypeAlias

    from chunking import ChunkedDocument
    from connectors.base import SourceDocument
    from normalizers import PictureSetup
    from query.api import Hit, Index
    from query.evaluate import Question, Search
    from query.identity import Identity

    Commands: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]


def main(argv: Sequence[str] | None = None) -> int:
    # the command line's own call: from the module's import; a call from code: from here
    started = _LOADED if argv is None else time.monotonic()
    telemetry_off()
    parser = _parser()
    args = parser.parse_args(argv)
    args.started = started
    # who holds an embedded store, as another process is told (`ingest mcp`)
    name_this_process(f"ingest {args.command}")
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
    except ApiStartFailed as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `ingest chunk ... | head`: the reader left, nothing is wrong
        sys.stderr.close()
        return 0
    finally:
        if argv is None:
            # The process ends next. Python's finalization runs the collector over every
            # object the command made (Prefect's, the model's) again and again while it
            # tears modules down: seconds after the summary printed its total. Frozen,
            # they are left to the exit (a run with Prefect: 9.5 s -> 1.1 s).
            gc.freeze()


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
    for add_command in (
        _normalize_command,
        _chunk_command,
        _validate_command,
        _run_command,
        _search_command,
        _reindex_command,
        _eval_command,
        _links_command,
        _cache_command,
        _serve_command,
        _mcp_command,
    ):
        add_command(commands, common)
    return parser


def _normalize_command(commands: Commands, common: argparse.ArgumentParser) -> None:
    normalize = commands.add_parser(
        "normalize", parents=[common], help="print the normalized Markdown of one file"
    )
    normalize.add_argument(
        "path", type=Path, help="the file (PDF, DOC/DOCX, XLS/XLSX, PPT/PPTX, HTML, Markdown, text)"
    )
    normalize.set_defaults(handler=_normalize)


def _chunk_command(commands: Commands, common: argparse.ArgumentParser) -> None:
    chunk = commands.add_parser(
        "chunk", parents=[common], help="normalize if needed, chunk, print the chunk records"
    )
    chunk.add_argument("path", type=Path, help="the file: any format `normalize` reads")
    chunk.add_argument(
        "--format",
        choices=("jsonl", "table", "html"),
        default="jsonl",
        help="jsonl (default): one JSON chunk record a line; table: one line a chunk "
        "(number, type, tokens, section, text) to read in a terminal; html: one "
        "self-contained page showing the document with its chunks, their parts and a "
        "token histogram against the budgets",
    )
    chunk.add_argument(
        "-o", "--output", type=Path, metavar="FILE", help="write to FILE instead of stdout"
    )
    chunk.set_defaults(handler=_chunk)


def _validate_command(commands: Commands, common: argparse.ArgumentParser) -> None:
    validate = commands.add_parser(
        "validate",
        parents=[common],
        help="chunk and print the validation report (exit 1 on violations)",
    )
    validate.add_argument("path", type=Path, help="the file: any format `normalize` reads")
    validate.set_defaults(handler=_validate)


def _run_command(commands: Commands, common: argparse.ArgumentParser) -> None:
    run = commands.add_parser(
        "run", parents=[common], help="run the ingest flow locally (ephemeral Prefect API)"
    )
    run.add_argument(
        "source", help="source kind: files, confluence, or one the `sources` setting adds"
    )
    run.add_argument("targets", nargs="*", help="directories, or Confluence space keys")
    run.add_argument("--tenant", help="tenant id (default: tenant_id setting)")
    run.add_argument(
        "--mode",
        choices=("incremental", "full"),
        default="incremental",
        help="incremental (default): skip documents whose version is indexed; full: process "
        "every listed document (the stage caches still apply unless --force)",
    )
    run.add_argument("--since", help="also re-process documents updated since (ISO date)")
    run.add_argument("--force", action="store_true", help="ignore the stage caches")
    run.add_argument(
        "--force-delete", action="store_true", help="allow deletions above the configured share"
    )
    run.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    run.add_argument("--verbose", action="store_true", help="show Prefect's logs")
    run.add_argument(
        "--always-flow",
        action="store_true",
        help="start the Prefect flow even when nothing changed (by default an unchanged "
        "source is reconciled and reported without it)",
    )
    run.set_defaults(handler=_run)


def _search_command(commands: Commands, common: argparse.ArgumentParser) -> None:
    search = commands.add_parser(
        "search", parents=[common], help="embed a query and print the best chunks"
    )
    search.add_argument("query", help="the question or the words to find")
    search.add_argument("--limit", type=int, default=5, help="how many hits (default 5)")
    _search_scope_options(search)
    search.add_argument(
        "--expand",
        choices=("none", "passage", "neighbours", "section"),
        help="what a result is, printed whole: a passage (hits that touch joined, a split "
        "paragraph whole, a small hit with its neighbours), each chunk alone, or each hit "
        "widened to its adjacent chunks or its whole section (default: the search.expand "
        "setting, passage, printed as one line)",
    )
    search.add_argument(
        "--expand-tokens",
        type=int,
        metavar="N",
        help="most tokens of a result (default: search.passage_tokens, 512, for "
        "passages; 1024 for neighbours and section)",
    )
    search.add_argument(
        "--tokens",
        type=int,
        metavar="N",
        help="only the best hits that fit a context of N tokens, in rank order (a "
        "caller's context budget; passages are then not grown)",
    )
    search.add_argument("--json", action="store_true", help="one JSON object per hit")
    search.set_defaults(handler=_search)


def _search_scope_options(parser: argparse.ArgumentParser) -> None:
    """Whose access and which filters a search applies, and its mode."""
    parser.add_argument("--tenant", help="only this tenant (default: tenant_id setting)")
    parser.add_argument("--space", action="append", default=[], help="only these space keys")
    parser.add_argument("--label", action="append", default=[], help="only chunks with a label")
    parser.add_argument("--user", help="ACL: only what this user may read")
    parser.add_argument("--group", action="append", default=[], help="ACL: the user's groups")
    parser.add_argument(
        "--mode",
        choices=("auto", "hybrid", "dense", "lexical", "sparse"),
        help="auto (the search.mode setting's default): hybrid over the vectors the "
        "collection holds; hybrid: dense + lexical (+ BGE-M3 sparse) fused by RRF; dense: "
        "the embedding alone; lexical: BM25 terms alone (exact words, ids, error codes); "
        "sparse: BGE-M3's learned weights",
    )


def _reindex_command(commands: Commands, common: argparse.ArgumentParser) -> None:
    reindex = commands.add_parser(
        "reindex",
        parents=[common],
        help="build a collection for the current model and vectors from the stage cache, "
        "then move the alias to it in one step",
    )
    reindex.add_argument("--to", metavar="NAME", help="the new collection's name")
    reindex.add_argument(
        "--drop-old",
        action="store_true",
        help="drop the old collection at once (else kept qdrant.keep_old_days)",
    )
    reindex.add_argument(
        "--force",
        action="store_true",
        help="move the alias even where the eval.questions gate finds the new collection worse",
    )
    reindex.set_defaults(handler=_reindex)


def _eval_command(commands: Commands, common: argparse.ArgumentParser) -> None:
    evaluate = commands.add_parser(
        "eval",
        parents=[common],
        help="measure retrieval on your questions: recall@1/5/10 and MRR@10, per question "
        "its rank and best hit",
    )
    evaluate.add_argument(
        "questions",
        type=Path,
        nargs="?",
        help="questions file, YAML or JSONL: question, target (Confluence page id or URL, "
        "file path, document id), optional phrase and tags",
    )
    evaluate.add_argument(
        "--self",
        action="store_true",
        dest="self_check",
        help="ask known-item questions made from the indexed documents themselves (a "
        "section's heading path, a rare phrase): no questions file needed",
    )
    evaluate.add_argument(
        "--limit", type=int, default=10, metavar="K", help="hits searched per question (10)"
    )
    evaluate.add_argument(
        "--save", type=Path, metavar="FILE", help="keep every question's result in FILE (JSON)"
    )
    evaluate.add_argument(
        "--against",
        type=Path,
        metavar="FILE",
        help="pair this run with one --save kept, question by question",
    )
    evaluate.add_argument("--json", action="store_true", help="print the report as one JSON object")
    _search_scope_options(evaluate)
    evaluate.set_defaults(handler=_eval)


def _links_command(commands: Commands, common: argparse.ArgumentParser) -> None:
    links = commands.add_parser(
        "links", parents=[common], help="list a document's outgoing and incoming links"
    )
    links.add_argument("document_id", help="the document's id (`document_id` in its chunks)")
    links.add_argument("--tenant", help="tenant id (default: tenant_id setting)")
    links.set_defaults(handler=_links)


def _cache_command(commands: Commands, common: argparse.ArgumentParser) -> None:
    cache = commands.add_parser(
        "cache", parents=[common], help="report the stage cache's size, or prune it"
    )
    cache.add_argument(
        "action",
        choices=("report", "prune"),
        help="report: entries and size per stage; prune: drop entries by age or size first",
    )
    cache.add_argument("--max-age-days", type=float, help="prune: drop entries unused this long")
    cache.add_argument("--max-mb", type=float, help="prune: keep at most this many MB")
    cache.set_defaults(handler=_cache)


def _serve_command(commands: Commands, common: argparse.ArgumentParser) -> None:
    serve = commands.add_parser(
        "serve",
        parents=[common],
        help="serve the deployments of deployments/prefect.yaml (schedules active) "
        "without a work pool",
    )
    serve.set_defaults(handler=_serve)


def _mcp_command(commands: Commands, common: argparse.ArgumentParser) -> None:
    mcp = commands.add_parser(
        "mcp",
        parents=[common],
        help="serve search, fetch and list-sources to agents over MCP (stdio, or streamable HTTP)",
    )
    mcp.add_argument(
        "--http",
        metavar="HOST:PORT",
        help="serve streamable HTTP at http://HOST:PORT/mcp instead of stdio",
    )
    mcp.add_argument("--user", help="whose access applies (fixed for the server's life)")
    mcp.add_argument("--group", action="append", default=[], help="the user's groups")
    mcp.add_argument(
        "--operator",
        action="store_true",
        help="with --http: serve the operator's view (nothing filtered by access, as "
        "`ingest search` without --user) to `ingest search` only, which finds the server "
        "and its token in a file beside the store",
    )
    mcp.set_defaults(handler=_mcp)


def _read_source(path: Path) -> SourceDocument:
    from tasks.stages import local_file_source

    if path.is_dir():
        raise IngestError(
            ErrorCode.FETCH_FAILED,
            "is a directory: this command takes one file (`ingest run files DIR` ingests a "
            "directory)",
            subject=str(path),
        )
    if not path.is_file():
        raise IngestError(
            ErrorCode.FETCH_FAILED, "no such file (check the path)", subject=str(path)
        )
    return local_file_source(path)


def _normalize(args: argparse.Namespace, settings: Settings) -> int:
    from tasks.stages import normalize_source

    normalized = normalize_source(_read_source(args.path), settings.limits, _pictures(settings))
    sys.stdout.write(normalized.markdown)
    for warning in normalized.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    return 0


def _pictures(settings: Settings) -> PictureSetup:
    """How the command reads pictures; what of OCR is off is said on stderr."""
    from tasks.stages import picture_warnings, run_pictures

    for warning in picture_warnings(settings):
        print(f"warning: {warning}", file=sys.stderr)
    return run_pictures(settings)


def _chunked(args: argparse.Namespace, settings: Settings) -> ChunkedDocument:
    from tasks.stages import chunk_normalized, normalize_source

    source = _read_source(args.path)
    normalized = normalize_source(source, settings.limits, _pictures(settings))
    return chunk_normalized(source, normalized, settings.chunking, settings.tenant_id)


def _chunk(args: argparse.Namespace, settings: Settings) -> int:
    document = _chunked(args, settings)
    if args.output is None:
        _write_chunks(document, args, settings, sys.stdout)
        return 0
    with args.output.open("w", encoding="utf-8") as out:
        _write_chunks(document, args, settings, out)
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


def _write_chunks(
    document: ChunkedDocument, args: argparse.Namespace, settings: Settings, out: TextIO
) -> None:
    if args.format == "jsonl":
        for chunk in document.chunks:
            out.write(json.dumps(chunk.to_record(), ensure_ascii=False) + "\n")
        return
    if args.format == "html":
        from chunking import get_token_counter
        from flows.chunk_page import PageBudgets, render_chunk_page

        parts = settings.parts.max_tokens if settings.parts.enabled else None
        out.write(
            render_chunk_page(
                document,
                args.path.name,
                PageBudgets(settings.chunking, parts),
                get_token_counter(settings.chunking.tokenizer),
            )
        )
        return
    from rich.console import Console
    from rich.table import Table

    from query.snippet import plain_text

    # One line a chunk at any width: the section and the text shrink, cut with an
    # ellipsis; the text as it reads, without its Markdown marks.
    table = Table("#", "type", "tokens", expand=True)
    table.add_column("section", ratio=1, no_wrap=True, overflow="ellipsis", max_width=40)
    table.add_column("text", ratio=3, no_wrap=True, overflow="ellipsis")
    for chunk in document.chunks:
        table.add_row(
            str(chunk.ordinal),
            chunk.chunk_type,
            str(chunk.token_count),
            " › ".join(chunk.headings_path),
            plain_text(chunk.md_text),
        )
    Console(file=out, highlight=False).print(table)


def _validate(args: argparse.Namespace, settings: Settings) -> int:
    from chunking import validate_chunks
    from chunking.validate import budget_note

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
    # Each chunk outside the budgets, with what allows it (or the violation below).
    for chunk in document.chunks:
        note = budget_note(chunk, budget)
        if note:
            print(f"  chunk {chunk.ordinal}: {chunk.token_count} tokens, {note}")
    for violation in report.violations:
        where = f"chunk {violation.ordinal}" if violation.ordinal is not None else "document"
        print(f"  {violation.rule}: {where}: {violation.message}")
    return 0 if report.ok else 1


def _run(args: argparse.Namespace, settings: Settings) -> int:
    import os
    from datetime import datetime

    from connectors.registry import connector_class
    from flows.local_run import (
        RunRequest,
        prepare_environment,
        progress_records_to,
        run_flow,
        settings_for,
        summary_without_flow,
    )
    from flows.report import exit_code, status_message

    local_paths = connector_class(args.source, settings.sources).targets_are_paths
    if args.config:  # the flow loads its settings itself, from the environment
        os.environ["INGEST_CONFIG"] = str(Path(args.config).resolve())
    request = RunRequest(
        source=args.source,
        targets=[str(Path(t).resolve()) if local_paths else t for t in args.targets],
        tenant_id=args.tenant,
        mode=args.mode,
        since=datetime.fromisoformat(args.since) if args.since else None,
        force=args.force,
        force_delete=args.force_delete,
        always_flow=args.always_flow,
        verbose=args.verbose,
    )
    settings = settings_for(request, args.config)
    prepare_environment(settings, verbose=args.verbose)

    from rich.console import Console

    console = Console(stderr=True)
    with _progress_bar(console, disable=args.json) as progress:
        bar = _PhaseBar(progress)
        with progress_records_to(bar):
            summary = summary_without_flow(request, settings)
            if summary is None:
                bar.phase(STARTING_PREFECT)
                flow_called = time.monotonic()
                summary = run_flow(request, settings)
                if bar.flow_started is not None:
                    summary["prefect_startup_seconds"] = round(bar.flow_started - flow_called, 3)
    summary["command_seconds"] = round(time.monotonic() - args.started, 3)
    if args.json:
        print(json.dumps(summary, ensure_ascii=False))
    elif summary["status"] == "store_busy":  # nothing was done: one line says why
        print(f"error: {status_message(summary)}", file=sys.stderr)
    else:  # on stdout, so `ingest run ... > run.log` keeps it; the progress bar is stderr's
        _print_summary(summary, Console())
    return exit_code(summary)


STARTING_PREFECT = "starting Prefect"


class _PhaseBar:
    """The progress bar of a run: a line naming the phase it is in (starting Prefect,
    listing, reconciling), and a line per counted phase (documents processed, chunks
    embedded) that moves as each is done. Notes when the flow's first record came, which
    ends Prefect's start-up."""

    def __init__(self, progress: Any) -> None:
        self.progress = progress
        self.status = progress.add_task("starting", total=None)
        self.counted: dict[str, Any] = {}
        self.current = ""
        self.flow_started: float | None = None

    def phase(self, name: str) -> None:
        if self.current == STARTING_PREFECT and name != STARTING_PREFECT:
            self.flow_started = time.monotonic()
        self.current = name
        self.progress.update(self.status, description=name)

    def count(self, name: str, total: int, done: int) -> None:
        self.phase(name)
        row = self.counted.get(name)
        if row is None:
            row = self.counted[name] = self.progress.add_task(name, total=0)
        if total:
            self.progress.update(row, total=(self.progress.tasks[row].total or 0) + total)
        if done:
            self.progress.advance(row, done)


def _progress_bar(console: Any, *, disable: bool = False) -> Any:
    """A progress bar on stderr that clears itself when done."""
    from rich.progress import BarColumn, Progress, ProgressColumn, TimeElapsedColumn
    from rich.text import Text

    class Count(ProgressColumn):
        """`done/total` where there is a count; nothing for a phase without one."""

        def render(self, task: Any) -> Text:
            if task.total is None:
                return Text("")
            return Text(f"{int(task.completed)}/{int(task.total)}", style="progress.download")

    return Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        Count(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=disable,
    )


def _search(args: argparse.Namespace, settings: Settings) -> int:
    reader = _identity(args)  # None: the operator's view, no access filter
    shown = None if args.json else _served_search(args, settings, reader)
    if shown is None:
        hits = _local_search(args, settings, reader)
        if hits is None:
            return 1
        if args.json:
            for rank, hit in enumerate(hits, 1):
                print(json.dumps(_search_record(rank, hit), ensure_ascii=False))
        shown = [_shown(hit, whole=args.expand not in (None, "none")) for hit in hits]
    if not args.json:
        _print_hits(shown, args.query)
    if not shown:
        print("no results", file=sys.stderr)
    return 0


def _local_search(
    args: argparse.Namespace, settings: Settings, reader: Identity | None
) -> list[Hit] | None:
    """The hits, searched in this process (None: the search could not run, said)."""
    from query.api import Index, IndexMissing, SearchUnavailable

    # an embedded store: its lock is released before the interpreter exits
    with Index(settings) as index:
        try:
            return index.search(
                args.query,
                identity=reader,
                limit=args.limit,
                mode=args.mode,
                tenant=args.tenant,
                containers=args.space,
                labels=args.label,
                expand=args.expand,
                expand_tokens=args.expand_tokens,
                tokens=args.tokens,
            )
        except (IndexMissing, SearchUnavailable) as exc:
            _search_failed(exc)
            return None


def _served_search(
    args: argparse.Namespace, settings: Settings, reader: Identity | None
) -> list[_Shown] | None:
    """The hits as a running `ingest mcp --http` server answers for exactly this identity
    and settings (`query.served`); None where there is none or it cannot answer this
    search (a result shape asked on the command line, another tenant, a limit over
    `mcp.max_results`)."""
    from query import served

    if (
        args.expand is not None
        or args.expand_tokens is not None
        or args.tokens is not None
        or args.tenant not in (None, settings.tenant_id)
        or not 0 < args.limit <= settings.mcp.max_results
    ):
        return None
    server = served.find_server(settings, reader)
    if server is None:
        return None
    try:
        results = served.search(
            server,
            reader,
            args.query,
            limit=args.limit,
            # the server's tool takes "auto" for the default; the command, the setting
            mode=args.mode or settings.search.mode,
            spaces=args.space,
            labels=args.label,
        )
    except served.NotServed as exc:
        print(
            f"note: `ingest mcp` (pid {server.pid}) did not answer ({exc}): searching here",
            file=sys.stderr,
        )
        return None
    print(f"note: answered by `ingest mcp` at {server.url} (pid {server.pid})", file=sys.stderr)
    return [_served(result) for result in results]


def _search_failed(exc: Exception) -> int:
    from query.api import SearchUnavailable

    print(f"{'no search: ' if isinstance(exc, SearchUnavailable) else ''}{exc}", file=sys.stderr)
    return 1


def _identity(args: argparse.Namespace) -> Identity | None:
    """The identity `--user`/`--group` name; None without them: the operator's view, no
    access filter (said on stderr, so `--json` output stays clean)."""
    from query.identity import Identity

    identity = Identity(args.user, tuple(args.group))
    if not identity.anonymous:
        return identity
    print(
        "note: no --user or --group given: results are not filtered by access "
        "(pass --user NAME and --group GROUP to see only what that user may read)",
        file=sys.stderr,
    )
    return None


def _eval(args: argparse.Namespace, settings: Settings) -> int:
    from query.api import Index, IndexMissing, SearchUnavailable
    from query.evaluate import (
        QuestionsInvalid,
        Search,
        compare,
        comparison_lines,
        load_questions,
        load_saved,
        report_lines,
    )

    if (args.questions is None) == (not args.self_check):
        print("error: give a questions file, or --self (not both)", file=sys.stderr)
        return 2
    try:
        questions = None if args.self_check else load_questions(args.questions)
        before = load_saved(args.against) if args.against else None
    except QuestionsInvalid as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    search = Search(
        _identity(args), args.limit, args.mode, args.tenant, tuple(args.space), tuple(args.label)
    )
    with Index(settings) as index:
        try:
            result = _evaluated(index, questions, search, settings)
        except (IndexMissing, SearchUnavailable) as exc:
            return _search_failed(exc)
    if args.save:
        args.save.write_text(json.dumps(result, ensure_ascii=False, indent=1) + "\n", "utf-8")
    if before is not None:
        result["against"] = compare(result, before)
    if args.json:
        print(json.dumps(result, ensure_ascii=False))
        return 0
    name = "known-item questions (--self)" if args.questions is None else str(args.questions)
    print("\n".join(report_lines(result, name)))
    if before is not None:
        print("\n".join(comparison_lines(result["against"], str(args.against))))
    if args.save:
        print(f"saved {args.save}", file=sys.stderr)
    return 0


def _evaluated(
    index: Index, questions: list[Question] | None, search: Search, settings: Settings
) -> dict[str, Any]:
    """The eval report of `questions`, or of the known-item ones `--self` makes."""
    from rich.console import Console

    from query.evaluate import report, run_questions

    missing = 0
    if questions is None:
        questions, missing = _self_questions(index, search, settings)
    with _progress_bar(Console(stderr=True)) as progress:
        bar = progress.add_task("questions", total=len(questions))
        results = run_questions(index, questions, search, lambda: progress.advance(bar))
    found = report(results, search)
    if missing:
        found["documents_not_in_cache"] = missing
    return found


def _self_questions(index: Index, search: Search, settings: Settings) -> tuple[list[Question], int]:
    """`--self`: known-item questions from the documents the last runs normalized (the
    stage cache holds them as the pipeline wrote them), and how many it lacked."""
    from query.evaluate import self_questions, visible_documents
    from stage_cache.store import StageCache
    from tasks.prepare import normalized_of

    cache = StageCache(settings.cache.dir)
    tenant = search.tenant or settings.tenant_id

    def markdown_of(document_id: str) -> str | None:
        normalized = normalized_of(cache, tenant, document_id)
        return normalized.markdown if normalized is not None else None

    return self_questions(markdown_of, visible_documents(index, search))


def _search_record(rank: int, hit: Hit) -> dict[str, Any]:
    record: dict[str, Any] = {"rank": rank, "score": hit.score, **hit.payload}
    if hit.context:
        record["expanded"] = {
            "text": hit.text,
            "tokens": hit.tokens,
            "chunk_ids": list(hit.span),
            "ordinals": [chunk.get("ordinal") for chunk in hit.context],
            "hits": list(hit.hits),
        }
    return record


@dataclass(frozen=True)
class _Shown:
    """A hit as the terminal shows it, from this process's search or a server's answer."""

    score: float
    heading: str
    location: str  # where in its document: page, sheet, slide or part
    link: str
    text: str  # Markdown
    span: str = ""  # an expanded hit: its chunks and tokens


def _shown(hit: Hit, whole: bool) -> _Shown:
    """The hit as printed: one line of it, or (`whole`) its whole text under its span."""
    from query.snippet import location

    span = ""
    if whole and hit.context:
        first, last = hit.context[0].get("ordinal"), hit.context[-1].get("ordinal")
        merged = f", {len(hit.hits)} hits" if len(hit.hits) > 1 else ""
        span = f"chunks {first}-{last}, {hit.tokens} tokens{merged}"
    link = hit.citation_url or hit.document_id
    return _Shown(hit.score, hit.heading, location(hit.payload), link, hit.text, span)


def _served(result: dict[str, Any]) -> _Shown:
    """A result of the MCP `search` tool (`query.mcp_server.Result`)."""
    from markdown_text.context import context_header

    heading = context_header(result["title"] or result["document_id"], result["headings_path"])
    link = result["citation_url"] or result["document_id"]
    text = result["text"]
    if result["truncated"]:  # the server's note on the cut is no part of the passage
        text = text.rsplit("\n\n[cut at ", 1)[0]
    return _Shown(float(result["score"]), heading, result["location"], link, text)


def _print_hits(hits: Sequence[_Shown], query: str) -> None:
    """Each hit as its heading line (where several hits share one, each says where in the
    document it is), its link, and one plain-text line of its chunk at the terminal's
    width around the query's words, marked (bold on a terminal, `**word**` elsewhere); an
    expanded hit prints its whole span."""
    import os
    import shutil
    from collections import Counter

    from query.snippet import BOLD, Marks, query_terms, snippet

    width = shutil.get_terminal_size().columns - 3
    terms = query_terms(query)
    marks = BOLD if sys.stdout.isatty() and not os.environ.get("NO_COLOR") else Marks()
    shared = Counter(hit.heading for hit in hits)
    for rank, hit in enumerate(hits, 1):
        where = f" · {hit.location}" if shared[hit.heading] > 1 else ""
        print(f"{rank}. [{hit.score:.3f}] {hit.heading}{where}")
        print(f"   {hit.link}")
        if hit.span:
            print(f"   {hit.span}")
            print("   " + hit.text.replace("\n", "\n   "))
            continue
        print("   " + snippet(hit.text, width, terms, marks))


def _reindex(args: argparse.Namespace, settings: Settings) -> int:
    from rich.console import Console

    from query.gate import gate_markdown, promotion_gate
    from tasks.pipeline import reindex_collection
    from tasks.resources import Resources

    resources = Resources(settings)
    try:
        gate = promotion_gate(settings, resources, force=args.force)
        with _progress_bar(Console(stderr=True)) as progress:
            bar = progress.add_task("re-indexing", total=None)
            result = reindex_collection(
                settings,
                resources,
                target=args.to,
                drop_old=args.drop_old,
                progress=lambda done, total: progress.update(bar, completed=done, total=total),
                gate=gate,
            )
    finally:
        resources.close()
    if result.gate is not None:
        print(gate_markdown(result.gate) + "\n")
    alias = settings.qdrant.collection
    if not result.moved:
        print(f"{alias!r} -> {result.source} already holds what the settings make: nothing to do")
    else:
        kept = "dropped" if args.drop_old else f"kept {settings.qdrant.keep_old_days:g} days"
        if result.source_engine == "local" and not args.drop_old:
            kept = (
                f"kept in local mode's files under {settings.qdrant.path} (meta.json, "
                "collection/): delete them when you no longer need them"
            )
        made = "chunked anew from the stage cache, " if result.rechunked else ""
        print(
            f"{alias!r} -> {result.target}: {result.points} points ({made}"
            f"{result.written} written, "
            f"{result.embedded} texts embedded, {result.lexical_encoded} lexically encoded); "
            f"the old collection {result.source} is {kept}"
        )
    if result.dropped:
        print(f"dropped: {', '.join(result.dropped)}")
    return 0


def _links(args: argparse.Namespace, settings: Settings) -> int:
    from tasks.links import LinkStore

    store = LinkStore(settings.cache.dir, args.tenant or settings.tenant_id)
    outgoing = store.outgoing(args.document_id)
    incoming = store.incoming(args.document_id)
    print(f"{args.document_id}: {len(outgoing)} outgoing, {len(incoming)} incoming")
    for link in outgoing:
        target = f" -> {link.target_document_id}" if link.target_document_id else ""
        print(f"  out {link.link_type:10s} {link.target_url}{target}")
    for source, link in incoming:
        print(f"  in  {link.link_type:10s} from {source}")
    return 0


def _cache(args: argparse.Namespace, settings: Settings) -> int:
    from stage_cache.store import StageCache

    cache = StageCache.from_settings(settings.cache)
    if args.action == "prune":
        result = cache.prune(
            max_age_s=args.max_age_days * 86400 if args.max_age_days is not None else None,
            max_bytes=int(args.max_mb * 1e6) if args.max_mb is not None else None,
        )
        print(f"pruned {result.removed} entries, {result.freed_bytes / 1e6:.1f} MB")
    report = cache.report()
    print(f"{settings.cache.dir}: {report.entries} entries, {report.bytes / 1e6:.1f} MB")
    for stage, counts in sorted(report.stages.items()):
        print(f"  {stage}: {counts.entries} entries, {counts.bytes / 1e6:.1f} MB")
    return 0


def _serve(args: argparse.Namespace, settings: Settings) -> int:
    import os

    if args.config:  # flow runs start in their own processes: they read it from the env
        os.environ["INGEST_CONFIG"] = str(Path(args.config).resolve())
    own_prefect_database(settings)
    from flows.serve import serve

    serve()
    return 0


def _mcp(args: argparse.Namespace, settings: Settings) -> int:
    from query.api import Identity, IndexMissing
    from query.mcp_server import serve

    identity = Identity(args.user, tuple(args.group))
    if args.operator and not identity.anonymous:
        raise ConfigError(
            "--operator serves every document: leave out --user/--group", setting="--operator"
        )
    try:
        serve(settings, None if args.operator else identity, args.http)
    except IndexMissing as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def _print_summary(summary: dict[str, Any], console: Any) -> None:
    from rich.table import Table

    from flows.report import (
        DOCUMENT_COUNTS,
        STAGE_COLUMNS,
        chunks_line,
        pictures_line,
        stage_rows,
        status_message,
        store_line,
    )

    docs = Table("documents", *DOCUMENT_COUNTS, "failed", title=summary["source"])
    docs.add_row("", *(str(summary[k]) for k in DOCUMENT_COUNTS), str(len(summary["failed"])))
    console.print(docs)
    stages = Table(*STAGE_COLUMNS)
    for row in stage_rows(summary):
        stages.add_row(*row)
    console.print(stages)
    console.print(chunks_line(summary), highlight=False)
    store = store_line(summary)
    if store:
        console.print(store, highlight=False)
    pictures = pictures_line(summary)
    if pictures:
        console.print(pictures, highlight=False)
    times = []
    if "prefect_startup_seconds" in summary:
        times.append(f"Prefect start-up {summary['prefect_startup_seconds']:.1f} s")
    times.append(f"the run {summary['wall_seconds']:.1f} s")
    console.print(
        f"{summary['command_seconds']:.1f} s in all ({', '.join(times)})", highlight=False
    )
    for failure in summary["failed"]:
        console.print(
            f"[red]{failure['code']}[/red] {failure['document_id']}: {failure['message']}",
            markup=True,
            highlight=False,
        )
    for warning in summary["warnings"]:
        console.print(
            f"[yellow]warning[/yellow] {warning['document_id']}: {warning['message']}",
            markup=True,
            highlight=False,
        )
    if summary["status"] != "ok":
        console.print(f"[red]{status_message(summary)}[/red]", markup=True, highlight=False)


if __name__ == "__main__":
    raise SystemExit(main())
