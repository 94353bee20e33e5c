"""HTML -> Markdown: the element walker shared with the Confluence normalizer.

`MarkdownWalker` turns an lxml element tree into CommonMark + GFM tables. It renders
"flow" content (text mixed with inline and block elements) as a list of blocks:
inline runs become paragraphs, block elements render themselves. Subclasses add
elements by overriding `kind`, `render_block` and `render_inline` (Confluence adds
its `ac:`/`ri:` macros that way) and collect `LinkRecord`s through `add_link`.

Parsing: libxml2's HTML parser predates HTML5 and takes the void elements it does not
know (`embed`, `source`, `track`, `wbr`, `keygen`, ...) for containers, nesting all
that follows inside them: `<p>A</p><embed src="y"><p>AFTER</p>` put AFTER inside the
dropped `embed`. Their start tags are written self-closing before parsing, which
libxml2 honours, so they hold nothing, as in a browser. `visible_text` is the text a
browser shows of the parsed page (by the walker's drop rules, counting anything nested
in a void element), and `normalize_html` warns when the Markdown lacks more than 2% of
its words. Converters' navigation boilerplate (Prev/Up/Next bars, tables of contents,
repeated page footers) goes before rendering; `normalizers.boilerplate` says which and
the document's metadata how much.

Safety: the parser (`config.safe_parsing`) never resolves entities or touches the
network, and libxml2's own limits stay on (`huge_tree=False`), so billion-laughs and
external-entity payloads expand to nothing. libxml2 stops parsing at 256 levels of
nesting; input that hits this limit fails as TOO_LARGE instead of being silently cut.
Below it, the walker flattens
anything deeper than `max_depth` elements to plain text, lists nested deeper than
`max_nesting` containers to one line of `; `-separated items, and deeper quotes to
unquoted blocks, so recursion and the Markdown parser downstream both stay bounded.
"""

from __future__ import annotations

import codecs
import re
import textwrap
from collections.abc import Callable, Iterable, Iterator
from enum import Enum
from types import MappingProxyType
from typing import Any

from lxml import etree

from config.errors import ErrorCode
from config.safe_parsing import check_parser_limits, html_parser
from normalizers.boilerplate import drop_navigation, report_dropped
from normalizers.links import classify_href
from normalizers.markdown import (
    WHITESPACE,
    code_span,
    escape_line_starts,
    escape_text,
    fenced_code,
    link_destination,
    list_item,
    quote_blocks,
    starts_block_syntax,
    task_item,
    wrap_emphasis,
)
from normalizers.model import LinkRecord, NormalizeContext, NormalizedDocument
from normalizers.selfcheck import loss_warning, word_loss
from normalizers.tables import gfm_table


class Kind(Enum):
    BLOCK = "block"
    INLINE = "inline"
    DROP = "drop"


_DROPPED = frozenset(
    {
        "head", "script", "style", "noscript", "template", "nav", "footer", "svg", "math",
        "canvas", "iframe", "object", "embed", "map", "button", "input", "select",
        "textarea", "option", "datalist", "dialog", "meta", "link", "base", "title",
    }
)  # fmt: skip
# HTML's void elements (never have content), obsolete ones included.
VOID_ELEMENTS = frozenset(
    {
        "area", "base", "basefont", "bgsound", "br", "col", "embed", "frame", "hr", "image",
        "img", "input", "keygen", "link", "meta", "param", "source", "spacer", "track", "wbr",
    }
)  # fmt: skip
# The void elements libxml2 does not know (it nests what follows inside them), and a
# start tag of one (attribute values may hold ">"), self-closing or not.
_UNKNOWN_VOIDS = ("bgsound", "embed", "image", "keygen", "source", "spacer", "track", "wbr")
_UNKNOWN_VOID_TAG = re.compile(r"<(?:" + "|".join(_UNKNOWN_VOIDS) + r")\b", re.IGNORECASE)
_VOID_START_TAG = re.compile(
    r"<(" + "|".join(_UNKNOWN_VOIDS) + r")\b((?:[^>\"']|\"[^\"]*\"|'[^']*')*?)\s*/?>",
    re.IGNORECASE,
)
# ARIA landmarks that mean what <nav>/<footer> mean, and search forms.
_DROPPED_ROLES = frozenset({"navigation", "contentinfo", "search"})
_CONTAINERS = frozenset(
    {
        "html", "body", "div", "p", "section", "article", "main", "header", "aside",
        "figure", "figcaption", "details", "summary", "address", "center", "form",
        "fieldset", "legend", "li", "dt", "dd", "caption", "tr", "td", "th", "thead",
        "tbody", "tfoot", "hgroup", "search", "output",
    }
)  # fmt: skip
_HEADINGS = MappingProxyType({f"h{n}": n for n in range(1, 7)})
_GAPPED = _CONTAINERS | _HEADINGS.keys() | {"ul", "ol", "dl", "table", "pre", "blockquote", "hr"}
_BOLD = frozenset({"strong", "b"})
_ITALIC = frozenset({"em", "i", "cite", "dfn", "var"})
_STRIKE = frozenset({"s", "strike", "del"})
_CODE = frozenset({"code", "kbd", "samp", "tt"})
_LANGUAGE_CLASS = re.compile(r"(?:^|\s)(?:language|lang|highlight-source)-([\w+#.-]+)")
_BRUSH = re.compile(r"brush:\s*([\w+#.-]+)")

_CHARSET = re.compile(
    rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)|<\?xml[^>]+encoding\s*=\s*["']([A-Za-z0-9_.:-]+)""",
    re.IGNORECASE,
)
# The HTML standard reads these labels as windows-1252, and UTF-16 labels on
# ASCII-compatible bytes (no BOM) as UTF-8.
_CHARSET_ALIASES = MappingProxyType({"iso8859-1": "cp1252", "ascii": "cp1252", "utf-16-le": "utf-8",
                    "utf-16-be": "utf-8", "utf-16": "utf-8"})  # fmt: skip

# HTML never needs an internal DTD subset; libxml2's HTML parser ignores its entity
# declarations but would show the subset's tail as text, so it goes before parsing.
_DTD_SUBSET = re.compile(r"<!DOCTYPE[^>\[]*\[.*?\]\s*>", re.IGNORECASE | re.DOTALL)


def _dropped_tag(node: etree._Element, tag: str) -> bool:
    return tag in _DROPPED


def plain_text(
    el: etree._Element,
    *,
    block_gaps: bool = False,
    skips: Callable[[etree._Element, str], bool] = _dropped_tag,
) -> str:
    """All text under `el` (iteratively: safe at any depth) but that of the elements
    `skips` says are not content (`_DROPPED` ones), `<br>` as a newline; with
    `block_gaps`, a space around every element that is not inline in HTML."""
    parts: list[str] = []
    walk = etree.iterwalk(el, events=("start", "end"))
    for event, node in walk:
        tag = node.tag.lower() if isinstance(node.tag, str) else ""
        gap = " " if block_gaps and tag in _GAPPED else ""
        if event == "start":
            if node is not el and skips(node, tag):
                walk.skip_subtree()  # its "end" event still comes and adds the tail
                continue
            parts.append("\n" if tag == "br" else gap + (node.text or "") if tag else "")
        elif node is not el:
            parts.append(gap + (node.tail or ""))
    return "".join(parts)


class MarkdownWalker:
    """Renders an lxml tree to Markdown blocks; see the module docstring."""

    max_depth = 100
    max_nesting = 8

    def __init__(self, *, base_url: str | None = None) -> None:
        self.base_url = base_url
        self.links: list[LinkRecord] = []
        self._seen_links: set[LinkRecord] = set()
        # > 0 inside a table cell or inline context: blocks render as one line of text
        self._one_line = 0

    # -- entry points ------------------------------------------------------------------

    def render(self, root: etree._Element) -> str:
        return "\n\n".join(self.flow(root, 0, 0)) + "\n"

    def add_link(self, record: LinkRecord | None) -> None:
        """Keep `record` once, in document order (repeats add nothing to link counts)."""
        if record is not None and record not in self._seen_links:
            self._seen_links.add(record)
            self.links.append(record)

    # -- classification, overridable -------------------------------------------------

    def tag(self, el: etree._Element) -> str:
        """Lower-case tag name; '' for comments, processing instructions, entities."""
        return el.tag.lower() if isinstance(el.tag, str) else ""

    def kind(self, el: etree._Element, tag: str) -> Kind:
        if not tag or tag in _DROPPED or _hidden(el):
            return Kind.DROP
        if tag in _CONTAINERS or tag in _HEADINGS or tag in (
            "ul", "ol", "menu", "dl", "table", "pre", "blockquote", "hr", "listing", "xmp",
        ):  # fmt: skip
            return Kind.BLOCK
        return Kind.INLINE

    # -- flow and blocks ----------------------------------------------------------------

    def flow(self, el: etree._Element, depth: int, nesting: int) -> list[str]:
        """The blocks of `el`'s content: inline runs become paragraphs."""
        if depth >= self.max_depth:
            return self.flattened(el)
        blocks: list[str] = []
        run: list[str] = []

        def flush() -> None:
            blocks.extend(self.paragraphs("".join(run)))
            run.clear()

        if el.text and isinstance(el.tag, str):
            run.append(self.text(el.text))
        for child in el:
            tag = self.tag(child)
            kind = self.kind(child, tag)
            if kind is Kind.BLOCK:
                flush()
                blocks.extend(self.render_block(child, tag, depth + 1, nesting))
            elif kind is Kind.INLINE:
                run.append(self.render_inline(child, tag, depth + 1))
            if child.tail:
                run.append(self.text(child.tail))
        flush()
        return blocks

    def text(self, raw: str) -> str:
        if not raw.isprintable() or "  " in raw:  # line breaks, tabs, no-break or runs
            raw = WHITESPACE.sub(" ", raw)
        return escape_text(raw)

    def paragraphs(self, inline: str) -> list[str]:
        lines = [" ".join(line.split()) for line in inline.split("\n")]
        text = "\n".join(line for line in lines if line)
        return [escape_line_starts(text)] if text else []

    def render_block(self, el: etree._Element, tag: str, depth: int, nesting: int) -> list[str]:
        if tag in _HEADINGS:
            text = self.inline_line(el, depth)
            if self._one_line:
                return [text] if text else []
            text = re.sub(r"(\s)(#+)$", r"\1\\\2", text)
            return [f"{'#' * _HEADINGS[tag]} {text}"] if text else []
        if tag in ("ul", "ol", "menu"):
            return self.render_list(el, depth, nesting, ordered=tag == "ol")
        if tag == "dl":
            return self.render_definitions(el, depth, nesting)
        if tag == "table":
            return self.render_table(el, depth, nesting)
        if tag in ("pre", "listing", "xmp"):
            return self.render_code(plain_text(el), self.code_language(el))
        if tag == "blockquote":
            return self.render_quote(self.flow(el, depth, nesting + 1), nesting)
        if tag == "hr":
            rule = [] if self._one_line else ["---"]
            return rule + self.flow(el, depth, nesting)  # recovered trees may nest in <hr>
        return self.flow(el, depth, nesting)

    def render_code(self, code: str, language: str) -> list[str]:
        code = textwrap.dedent(code.replace("\r\n", "\n").replace("\r", "\n")).strip("\n")
        code = "\n".join(line.rstrip() for line in code.split("\n"))
        if not code.strip():
            return []
        if self._one_line:
            return [code_span(code)]
        return [fenced_code(code, language)]

    def render_quote(self, blocks: list[str], nesting: int) -> list[str]:
        if not blocks:
            return []
        if self._one_line or nesting >= self.max_nesting:
            return blocks
        return [quote_blocks(blocks)]

    def code_language(self, el: etree._Element) -> str:
        for node in (el, *el.iterchildren()):
            if not isinstance(node.tag, str):
                continue
            classes = node.get("class", "")
            match = _LANGUAGE_CLASS.search(classes) or _BRUSH.search(
                node.get("data-syntaxhighlighter-params", "")
            )
            if match:
                return match.group(1).lower()
            data_lang = str(node.get("data-lang", "")).strip().lower()
            if data_lang:
                return data_lang
        return ""

    def render_list(
        self, el: etree._Element, depth: int, nesting: int, *, ordered: bool
    ) -> list[str]:
        if nesting >= self.max_nesting or self._one_line:
            return self.one_line_items(el, depth, "li")
        number = _list_number(el, "start", 1)
        items: list[tuple[str, list[str]]] = []
        for child in el:
            tag = self.tag(child)
            kind = self.kind(child, tag)
            if kind is Kind.DROP:
                continue
            if tag == "li":
                number = _list_number(child, "value", number)  # <li value> renumbers
                marker = f"{number}. " if ordered else "- "
                number = min(number + 1, 999_999_999)
                blocks = self.flow(child, depth + 1, nesting + 1)
                done = self.checkbox(child)
                items.append((marker, blocks if done is None else task_item(done, blocks)))
            else:  # a stray list or text directly inside the list joins the item before it
                blocks = (
                    self.render_block(child, tag, depth + 1, nesting + 1)
                    if kind is Kind.BLOCK
                    else self.paragraphs(self.render_inline(child, tag, depth + 1))
                )
                if items:
                    items[-1][1].extend(blocks)
                elif blocks:
                    items.append(("- ", blocks))
        return self.list_blocks(items)

    def checkbox(self, li: etree._Element) -> bool | None:
        """Whether a task item (`<li><input type=checkbox>`, as GitHub and many editors
        export them) is done; None when the item is no task."""
        first = next(iter(li), None)
        if first is None or (li.text or "").strip() or self.tag(first) != "input":
            return None
        if str(first.get("type", "")).lower() != "checkbox":
            return None
        return first.get("checked") is not None

    def list_blocks(self, items: Iterable[tuple[str, list[str]]]) -> list[str]:
        rendered = [list_item(marker, blocks) for marker, blocks in items if blocks]
        return ["\n".join(rendered)] if rendered else []

    def one_line_items(self, el: etree._Element, depth: int, item_tag: str) -> list[str]:
        """A list where no Markdown list can go (a table cell, past the nesting cap):
        its items' text on one line, `; ` between them."""
        self._one_line += 1
        try:
            items = [self.inline_line(c, depth + 1) for c in el if self.tag(c) == item_tag]
        finally:
            self._one_line -= 1
        text = "; ".join(item for item in items if item)
        return [text] if text else []

    def render_definitions(self, el: etree._Element, depth: int, nesting: int) -> list[str]:
        """`- **term**: definition`, further definitions as paragraphs of the item."""
        if nesting >= self.max_nesting or self._one_line:
            return self.flattened(el)
        items: list[tuple[str, list[str]]] = []
        open_term = False  # the last item is a term still waiting for its first definition
        for child in self.definition_parts(el):
            tag = self.tag(child)
            if tag == "dt":
                term = self.inline_line(child, depth + 1)
                if not term.startswith("**") or not term.endswith("**"):
                    term = wrap_emphasis(term, "**")
                items.append(("- ", [term] if term else []))
                open_term = bool(term)
            elif tag == "dd":
                blocks = self.flow(child, depth + 1, nesting + 1)
                if open_term and blocks and not starts_block_syntax(blocks[0]):
                    items[-1][1][0] += ": " + blocks[0]
                    blocks = blocks[1:]
                if items and items[-1][1]:
                    items[-1][1].extend(blocks)
                else:
                    items.append(("- ", blocks))
                open_term = False
        return self.list_blocks(items)

    def definition_parts(self, dl: etree._Element) -> Iterator[etree._Element]:
        """dt/dd children of a `<dl>`, looking through the `<div>` wrappers HTML allows."""
        for child in dl:
            name = self.tag(child)
            if name in ("dt", "dd"):
                yield child
            elif name == "div":
                yield from (g for g in child if self.tag(g) in ("dt", "dd"))

    def render_table(self, el: etree._Element, depth: int, nesting: int) -> list[str]:
        caption: list[str] = []
        rows: list[list[etree._Element]] = []
        head_rows = 0  # rows of a <thead>: together they make the header
        for child in el:
            tag = self.tag(child)
            if tag == "caption":
                caption = self.flow(child, depth + 1, nesting)
            elif tag == "tr":
                rows.append(self.cells(child))
            elif tag in ("thead", "tbody", "tfoot"):
                group = [self.cells(tr) for tr in child if self.tag(tr) == "tr"]
                if tag == "thead" and len(rows) == head_rows:
                    head_rows += len(group)
                rows.extend(group)
        cells = [cell for row in rows for cell in row]
        if len(cells) == 1:  # a one-cell table is layout, not data
            return caption + self.flow(cells[0], depth + 1, nesting)
        self._one_line += 1
        try:
            grid = fill_spans(
                [
                    [(self.cell_text(c, depth + 1), _span(c, "rowspan"), _span(c, "colspan"))
                     for c in row]
                    for row in rows
                ]
            )  # fmt: skip
        finally:
            self._one_line -= 1
        if not grid:
            return caption
        if self._one_line:
            return [" ".join(text for _, row in grid for text in row if text)]
        header = [row for index, row in grid if index < head_rows] or [grid[0][1]]
        body = [row for index, row in grid[len(header) :]]
        return [*caption, gfm_table(merge_header_rows(header), body)]

    def cells(self, tr: etree._Element) -> list[etree._Element]:
        return [td for td in tr if self.tag(td) in ("td", "th")]

    def cell_text(self, cell: etree._Element, depth: int) -> str:
        blocks = self.flow(cell, depth, self.max_nesting)
        return " ".join(" ".join(block.split()) for block in blocks)

    def flattened(self, el: etree._Element) -> list[str]:
        return self.paragraphs(escape_text(WHITESPACE.sub(" ", plain_text(el, block_gaps=True))))

    # -- inline -----------------------------------------------------------------------

    def inline_content(self, el: etree._Element, depth: int) -> str:
        """`el`'s text and children as inline Markdown (block children flattened)."""
        if depth >= self.max_depth:
            return escape_text(WHITESPACE.sub(" ", plain_text(el, block_gaps=True)))
        parts = [self.text(el.text)] if el.text and isinstance(el.tag, str) else []
        for child in el:
            tag = self.tag(child)
            kind = self.kind(child, tag)
            if kind is Kind.INLINE:
                parts.append(self.render_inline(child, tag, depth + 1))
            elif kind is Kind.BLOCK:
                self._one_line += 1
                try:
                    blocks = self.render_block(child, tag, depth + 1, self.max_nesting)
                finally:
                    self._one_line -= 1
                parts.append(" " + " ".join(blocks) + " ")
            if child.tail:
                parts.append(self.text(child.tail))
        return "".join(parts)

    def inline_line(self, el: etree._Element, depth: int) -> str:
        return " ".join(self.inline_content(el, depth).split())

    def render_inline(self, el: etree._Element, tag: str, depth: int) -> str:
        if tag == "br":
            return "\n" + self.inline_content(el, depth)
        if tag == "img":
            return self.text(el.get("alt", "") or el.get("title", ""))
        if tag in _CODE:
            return code_span(plain_text(el))
        inner = self.inline_content(el, depth)
        if tag in _BOLD:
            return wrap_emphasis(inner, "**")
        if tag in _ITALIC:
            return wrap_emphasis(inner, "*")
        if tag in _STRIKE:
            return wrap_emphasis(inner, "~~")
        if tag == "a":
            return self.render_anchor(el, inner)
        if tag == "q":
            return f"“{inner.strip()}”"
        if tag == "time" and not inner.strip():
            return self.text(el.get("datetime", ""))
        return inner

    def render_anchor(self, el: etree._Element, inner: str) -> str:
        text = " ".join(inner.split())
        record = classify_href(el.get("href", ""), text, base_url=self.base_url)
        self.add_link(record)
        return self.markdown_link(text, record.target_url if record else None)

    def markdown_link(self, text: str, url: str | None) -> str:
        """`[text](url)`; in-page anchors stay plain text (their record is kept): in a
        chunk they lead nowhere and cost tokens (think of citation markers)."""
        if not url or not text or url.startswith("#"):
            return text
        text = re.sub(r"(?<!\\)([\[\]])", r"\\\1", text)
        return f"[{text}]({link_destination(url)})"


def merge_header_rows(rows: list[list[str]]) -> list[str]:
    """Several header rows (a <thead> with grouped columns) as one: per column, its
    distinct texts top to bottom ("Sales" over "Q1" gives "Sales Q1")."""
    if len(rows) == 1:
        return rows[0]
    return [" ".join(dict.fromkeys(t for t in column if t)) for column in zip(*rows, strict=True)]


def fill_spans(rows: list[list[tuple[str, int, int]]]) -> list[tuple[int, list[str]]]:
    """Rows of (text, rowspan, colspan) to a rectangular grid, a spanned cell's text
    repeated in every slot it covers, each row with its index in `rows`. Rows that hold
    nothing but the start of cells spanning further down are dropped (pivot-style
    headers), as are empty rows."""
    placed: dict[tuple[int, int], tuple[str, int]] = {}  # slot -> (text, last row it spans)
    height = len(rows)
    # Spans fill at most this many slots: absurd spans on a long table must not
    # cost quadratic memory; past the budget, cells stop spanning.
    budget = 4 * sum(len(row) for row in rows) + 100_000
    for r, row in enumerate(rows):
        c = 0
        for text, rowspan, colspan in row:
            while (r, c) in placed:
                c += 1
            last = height - 1 if rowspan == 0 else min(height - 1, r + rowspan - 1)
            if len(placed) + (last - r + 1) * colspan > budget:
                last, colspan = r, 1
            for rr in range(r, last + 1):
                for cc in range(c, c + colspan):
                    placed[(rr, cc)] = (text, last)
            c += colspan
    width = max((c for _, c in placed), default=-1) + 1
    grid: list[tuple[int, list[str]]] = []
    for r in range(height):
        slots = [placed.get((r, c), ("", r)) for c in range(width)]
        own = [text for text, last in slots if text and last == r]
        if not any(text for text, _ in slots) or (r > 0 and not own and r < height - 1):
            continue
        grid.append((r, [text for text, _ in slots]))
    return grid


def _span(cell: etree._Element, name: str) -> int:
    # HTML caps colspan at 1000 and rowspan at 65534; 0 rowspan means "to the end".
    value = _int_attr(cell, name, 1)
    return max(0 if name == "rowspan" else 1, min(value, 1000 if name == "colspan" else 65534))


def _list_number(el: etree._Element, name: str, default: int) -> int:
    # CommonMark list numbers have no sign and at most 9 digits.
    return min(max(_int_attr(el, name, default), 0), 999_999_999)


def _int_attr(el: etree._Element, name: str, default: int) -> int:
    match = re.match(r"\s*(-?\d+)", el.get(name, ""))
    return int(match.group(1)) if match else default


# --- the HTML normalizer ----------------------------------------------------------------


def decode_html(data: bytes, ctx: NormalizeContext) -> str:
    """Bytes to text: a BOM wins, then a `<meta charset>` / XML declaration, else
    strict UTF-8. Bytes invalid in the chosen encoding fail as CHUNKING_FAILED."""
    for bom, encoding in ((codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le"),
                          (codecs.BOM_UTF16_BE, "utf-16-be")):  # fmt: skip
        if data.startswith(bom):
            return _decode(data[len(bom) :], encoding, ctx)
    match = _CHARSET.search(data[:4096])
    if match:
        label = (match.group(1) or match.group(2)).decode("ascii")
        try:
            name = codecs.lookup(label).name
        except LookupError:
            name = "utf-8"
        return _decode(data, _CHARSET_ALIASES.get(name, name), ctx)
    return _decode(data, "utf-8", ctx)


def _decode(data: bytes, encoding: str, ctx: NormalizeContext) -> str:
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        raise ctx.fail(
            ErrorCode.CHUNKING_FAILED,
            f"not valid {encoding} (byte {exc.object[exc.start]:#04x} at offset {exc.start}); "
            "re-save the file as UTF-8",
        ) from None


def parse_html(text: str, ctx: NormalizeContext) -> etree._Element:
    parser = html_parser()
    markup = _DTD_SUBSET.sub("", text)
    if _UNKNOWN_VOID_TAG.search(markup):
        markup = _VOID_START_TAG.sub(r"<\1\2/>", markup)
    try:
        root = etree.fromstring(markup.encode("utf-8"), parser)
    except etree.XMLSyntaxError as exc:
        raise ctx.fail(ErrorCode.CORRUPT, f"not parseable as HTML: {exc}") from None
    check_parser_limits(parser, ctx.fail)
    if root is None:
        raise ctx.fail(ErrorCode.CORRUPT, "not parseable as HTML: no element found")
    return root


def visible_text(root: etree._Element) -> str:
    """The text a browser shows of a parsed page, by the walker's rules for what is not
    content, block elements parting words. Void elements' "children" count: a void
    element holds nothing, so anything a parser nested inside one (libxml2 does with the
    voids it does not know) is content that follows it on the page."""
    return plain_text(root, block_gaps=True, skips=_hides_content)


def _hides_content(node: etree._Element, tag: str) -> bool:
    return tag not in VOID_ELEMENTS if tag in _DROPPED else _hidden(node)


def _hidden(el: etree._Element) -> bool:
    """Hidden by its attributes: `hidden`, `display:none`, a navigation landmark."""
    return (
        el.get("hidden") is not None
        or str(el.get("role", "")).lower() in _DROPPED_ROLES
        or "display:none" in el.get("style", "").replace(" ", "").lower()
    )


def normalize_html(data: bytes, ctx: NormalizeContext) -> NormalizedDocument:
    root = parse_html(decode_html(data, ctx), ctx)
    base = root.find(".//base[@href]")
    base_href = base.get("href") if base is not None else None
    walker = MarkdownWalker(base_url=ctx.base_url or base_href)
    body = root.find("body")
    content = body if body is not None else root
    dropped = drop_navigation(content, lambda el: walker.kind(el, walker.tag(el)) is Kind.DROP)
    markdown = walker.render(content)
    meta = {
        (m.get("name") or m.get("property") or "").lower(): m.get("content", "").strip()
        for m in root.iterfind(".//meta[@content]")
    }
    title = " ".join((root.findtext(".//title") or "").split())
    metadata: dict[str, Any] = {
        key: meta[key] for key in ("description", "keywords") if meta.get(key)
    }
    report_dropped(metadata, dropped)
    body_text = visible_text(content)
    loss = loss_warning(word_loss([body_text], markdown), "the page's visible text")
    return NormalizedDocument(
        markdown=markdown,
        title=title or None,
        author=meta.get("author") or None,
        language=root.get("lang") or None,
        metadata=metadata,
        links=tuple(walker.links),
        warnings=(loss,) if loss else (),
    )
