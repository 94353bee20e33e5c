"""The chunk page (`ingest chunk FILE --format html`): one self-contained HTML file that
shows a document as it was chunked, for people tuning the chunk budgets.

The document's text reads top to bottom with each chunk's span shaded (two alternating
shades, a rule between chunks), and above each chunk its number, type, token count,
where it is (pages of a PDF, a slide, a sheet), context header (what heads its embed
text) and, when it is outside the budgets, the reason its record gives and any
validation finding. Inside a chunk the parts its
`dense_parts` vectors embed are underlined in alternating colours, each labelled. Text
a chunk repeats from earlier (a heading or table header carried into it) is shown faded
where it is repeated; document text no chunk holds is shown unshaded. A bar chart at the
top gives every chunk's tokens against min/target/max, each bar a link to its chunk.

Plain Python: CSS inline, no script, no external resource; every piece of the document
is escaped (a document may hold `<script>`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from itertools import pairwise

from chunking import Chunk, ChunkedDocument, TokenCounter, validate_chunks
from chunking.chunker import context_header
from chunking.parts import part_spans
from chunking.validate import budget_note
from config.settings import ChunkingSettings

_CSS = """
:root { --a: #e6effc; --a-edge: #7aa2e3; --b: #fdf0d8; --b-edge: #e0a84a;
  --under: #e9a23b; --within: #4c78a8; --over: #d1495b; --muted: #6b7280; }
* { box-sizing: border-box; }
body { margin: 0 auto; max-width: 1100px; padding: 16px 20px 48px;
  font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1f2933; }
h1 { font-size: 20px; margin: 0 0 4px; word-break: break-all; }
.summary { color: var(--muted); margin: 0 0 12px; }
.summary b { color: #1f2933; }
.legend { display: flex; flex-wrap: wrap; gap: 14px; font-size: 12px; color: var(--muted);
  margin: 4px 0 16px; }
.legend i { display: inline-block; width: 12px; height: 12px; vertical-align: -2px;
  margin-right: 4px; border-radius: 2px; }
svg.histogram { width: 100%; height: auto; display: block; background: #fafbfc;
  border: 1px solid #e5e7eb; border-radius: 6px; }
svg.histogram rect.within { fill: var(--within); }
svg.histogram rect.under { fill: var(--under); }
svg.histogram rect.over { fill: var(--over); }
svg.histogram text { font: 11px system-ui, sans-serif; fill: var(--muted); }
.document { margin-top: 18px; }
.chunk { margin: 0; padding: 6px 10px 8px; border-left: 5px solid; border-top: 1px solid #fff; }
.chunk.even { background: var(--a); border-left-color: var(--a-edge); }
.chunk.odd { background: var(--b); border-left-color: var(--b-edge); }
.chunk:target { outline: 2px solid #111; }
.meta { font-size: 12px; color: #374151; margin-bottom: 4px; display: flex; flex-wrap: wrap;
  gap: 4px 10px; align-items: baseline; }
.meta .ordinal { font-weight: 700; }
.meta .tokens { font-weight: 600; }
.meta .header { color: var(--muted); }
.badge { border-radius: 3px; padding: 0 5px; color: #fff; font-size: 11px; }
.badge.under { background: var(--under); }
.badge.over { background: var(--over); }
.notes { margin: 0 0 4px; padding: 0; list-style: none; font-size: 12px; }
.notes li.reason { color: #8a4b00; }
.notes li.violation { color: #a3001b; }
.text, .gap { white-space: pre-wrap; overflow-wrap: anywhere; margin: 0;
  font: 12.5px/1.5 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
.gap { color: var(--muted); padding: 4px 15px; background: #fff; }
.carried { opacity: .55; font-style: italic; }
.part { text-decoration: underline 2px; text-underline-offset: 3px; }
.part.pa { text-decoration-color: #0f9d8a; }
.part.pb { text-decoration-color: #9b5de5; }
.part.first::before { content: attr(data-part); font: 600 9px system-ui, sans-serif;
  color: #fff; background: #6b7280; border-radius: 2px; padding: 0 3px; margin-right: 3px;
  vertical-align: 2px; font-style: normal; }
.problems { color: #a3001b; font-size: 13px; }
"""

# The histogram's drawing area, in SVG units (the SVG scales to the page's width).
_WIDTH, _HEIGHT, _LEFT, _RIGHT, _TOP, _BOTTOM = 1000, 200, 44, 86, 10, 22


@dataclass(frozen=True)
class PageBudgets:
    """What the page measures chunks against, from the settings."""

    chunking: ChunkingSettings
    parts_max_tokens: int | None  # None: the `dense_parts` vectors are off


def render_chunk_page(
    document: ChunkedDocument, name: str, budgets: PageBudgets, counter: TokenCounter
) -> str:
    """The page for one chunked document; `name` says which file it is."""
    config = budgets.chunking
    chunks = document.chunks
    report = validate_chunks(chunks, document.text, config, document.blocks, counter)
    findings: dict[int | None, list[str]] = defaultdict(list)
    for violation in report.violations:
        findings[violation.ordinal].append(f"{violation.rule}: {violation.message}")
    under = sum(1 for c in chunks if c.token_count < config.min_tokens)
    over = sum(1 for c in chunks if c.token_count > config.max_tokens)
    parts = (
        f"parts of at most {budgets.parts_max_tokens} tokens"
        if budgets.parts_max_tokens
        else "part vectors off"
    )
    summary = (
        f"<b>{len(chunks)}</b> chunks · <b>{len(chunks) - under - over}</b> within "
        f"[{config.min_tokens}, {config.max_tokens}] tokens · <b>{under}</b> under min · "
        f"<b>{over}</b> over max · target {config.target_tokens} · "
        f"validation findings: <b>{len(report.violations)}</b> · {escape(parts)} · "
        f"tokens counted by {escape(counter.name)}"
    )
    problems = "".join(f"<li>{escape(text)}</li>" for text in findings.get(None, []))
    body = [
        f"<h1>{escape(name)}</h1>",
        f'<p class="summary">{summary}</p>',
        _histogram(chunks, config),
        _LEGEND.format(parts=_PARTS_LEGEND if budgets.parts_max_tokens else ""),
        f'<ul class="problems">{problems}</ul>' if problems else "",
        '<main class="document">',
        *_document_html(document, budgets, counter, findings),
        "</main>",
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>Chunks of {escape(name)}</title><style>{_CSS}</style></head>"
        f"<body>{''.join(body)}</body></html>\n"
    )


_PARTS_LEGEND = (
    '<span><u style="text-decoration-color:#0f9d8a;text-decoration-thickness:2px">part</u>'
    ' <u style="text-decoration-color:#9b5de5;text-decoration-thickness:2px">part</u>'
    " embedded on their own</span>"
)
_LEGEND = (
    '<div class="legend">'
    '<span><i style="background:var(--a)"></i><i style="background:var(--b)"></i>'
    "chunks, alternating</span>"
    '<span><i style="background:var(--within)"></i>within budget</span>'
    '<span><i style="background:var(--under)"></i>under min</span>'
    '<span><i style="background:var(--over)"></i>over max</span>'
    "{parts}"
    '<span class="carried">faded: repeated from earlier</span>'
    "</div>"
)


def _status(chunk: Chunk, config: ChunkingSettings) -> str:
    if chunk.token_count < config.min_tokens:
        return "under"
    if chunk.token_count > config.max_tokens:
        return "over"
    return "within"


def _histogram(chunks: Sequence[Chunk], config: ChunkingSettings) -> str:
    """One bar a chunk in document order, against the min/target/max lines."""
    plot_width = _WIDTH - _LEFT - _RIGHT
    plot_height = _HEIGHT - _TOP - _BOTTOM
    top = max([config.max_tokens * 1.15, *(c.token_count for c in chunks)])

    def y(tokens: float) -> float:
        return _TOP + plot_height * (1 - tokens / top)

    slot = plot_width / max(len(chunks), 1)
    bar = max(slot * 0.8, 0.5)
    shapes = [
        f'<line x1="{_LEFT}" y1="{y(0):.1f}" x2="{_WIDTH - _RIGHT}" y2="{y(0):.1f}" '
        'stroke="#9ca3af"/>',
        f'<text x="{_LEFT - 6}" y="{y(0) + 4:.1f}" text-anchor="end">0</text>',
    ]
    for chunk in chunks:
        x = _LEFT + chunk.ordinal * slot + (slot - bar) / 2
        height = y(0) - y(chunk.token_count)
        shapes.append(
            f'<a href="#chunk-{chunk.ordinal}"><rect x="{x:.2f}" '
            f'y="{y(chunk.token_count):.1f}" width="{bar:.2f}" height="{height:.1f}" '
            f'class="{_status(chunk, config)}"><title>chunk {chunk.ordinal}: '
            f"{chunk.token_count} tokens</title></rect></a>"
        )
    for label, tokens, colour in (
        ("min", config.min_tokens, "#e9a23b"),
        ("target", config.target_tokens, "#2e7d32"),
        ("max", config.max_tokens, "#d1495b"),
    ):
        shapes.append(
            f'<line x1="{_LEFT}" y1="{y(tokens):.1f}" x2="{_WIDTH - _RIGHT}" '
            f'y2="{y(tokens):.1f}" stroke="{colour}" stroke-dasharray="5 4"/>'
            f'<text x="{_WIDTH - _RIGHT + 6}" y="{y(tokens) + 4:.1f}">{label} {tokens}</text>'
        )
    shapes.append(
        f'<text x="{_LEFT + plot_width / 2:.0f}" y="{_HEIGHT - 5}" text-anchor="middle">'
        "chunks in document order (tokens; a bar links to its chunk)</text>"
    )
    return (
        f'<svg class="histogram" viewBox="0 0 {_WIDTH} {_HEIGHT}" role="img" '
        f'aria-label="tokens per chunk">{"".join(shapes)}</svg>'
    )


def _document_html(
    document: ChunkedDocument,
    budgets: PageBudgets,
    counter: TokenCounter,
    findings: dict[int | None, list[str]],
) -> list[str]:
    """The document's text: each chunk a shaded section, text between chunks unshaded."""
    config = budgets.chunking
    text = document.text
    out: list[str] = []
    shown = 0  # how far into the document's text the page has got
    for chunk in document.chunks:
        if chunk.char_start > shown and text[shown : chunk.char_start].strip():
            out.append(f'<pre class="gap">{escape(text[shown : chunk.char_start])}</pre>')
        shown = max(shown, chunk.char_end)
        spans = (
            part_spans(chunk.md_text, budgets.parts_max_tokens, counter)
            if budgets.parts_max_tokens
            else []
        )
        status = _status(chunk, config)
        where = _where(chunk)
        header = context_header(chunk.document.get("title"), chunk.headings_path)
        meta = [
            f'<span class="ordinal">#{chunk.ordinal}</span>',
            f"<span>{escape(chunk.chunk_type)}</span>",
            f'<span class="tokens">{chunk.token_count} tokens</span>',
            f'<span class="where">{escape(where)}</span>' if where else "",
            f'<span class="parts">{_count(len(spans), "part")}</span>'
            if budgets.parts_max_tokens
            else "",
            f'<span class="badge {status}">{status} budget</span>' if status != "within" else "",
            f'<span class="header">{escape(header)}</span>' if header else "",
        ]
        notes = [note for note in (budget_note(chunk, config),) if note]
        items = [f'<li class="reason">{escape(note)}</li>' for note in notes] + [
            f'<li class="violation">{escape(found)}</li>'
            for found in findings.get(chunk.ordinal, [])
        ]
        out.append(
            f'<section class="chunk {"odd" if chunk.ordinal % 2 else "even"}" '
            f'id="chunk-{chunk.ordinal}" data-ordinal="{chunk.ordinal}" '
            f'data-tokens="{chunk.token_count}" data-parts="{len(spans)}">'
            f'<div class="meta">{"".join(meta)}</div>'
            + (f'<ul class="notes">{"".join(items)}</ul>' if items else "")
            + f'<pre class="text">{_chunk_text(chunk, text, spans)}</pre></section>'
        )
    if text[shown:].strip():
        out.append(f'<pre class="gap">{escape(text[shown:])}</pre>')
    return out


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def _where(chunk: Chunk) -> str:
    """Where in its document the chunk is: its pages (PDF), slide or sheet; empty where
    the document has none."""
    if chunk.page_start is not None:
        end = chunk.page_end if chunk.page_end is not None else chunk.page_start
        return f"page {end}" if end == chunk.page_start else f"pages {chunk.page_start}–{end}"
    if chunk.slide is not None:
        return f"slide {chunk.slide}"
    return f"sheet {chunk.sheet}" if chunk.sheet else ""


def _chunk_text(chunk: Chunk, text: str, spans: Sequence[tuple[int, int]]) -> str:
    """A chunk's Markdown, escaped, its parts marked; the head it repeats from earlier
    (its Markdown beyond its own span of the document) faded."""
    md = chunk.md_text
    own = text[chunk.char_start : chunk.char_end]
    carried = len(md) - len(own) if own and md.endswith(own) else 0
    cuts = sorted({0, carried, len(md), *(i for span in spans for i in span)})
    html: list[str] = []
    for start, end in pairwise(cuts):
        piece = escape(md[start:end])
        part = next((i for i, (a, b) in enumerate(spans) if a <= start and end <= b), None)
        if part is not None:
            first = " first" if start == spans[part][0] else ""
            piece = (
                f'<span class="part {"pb" if part % 2 else "pa"}{first}" '
                f'data-part="p{part + 1}">{piece}</span>'
            )
        if end <= carried:
            piece = f'<span class="carried" title="repeated from earlier">{piece}</span>'
        html.append(piece)
    return "".join(html)
