"""Confluence storage format (`body.storage.value`) -> Markdown (docs/sources.md#confluence,
docs/chunking.md#links).

Storage format is an XHTML fragment with `ac:`/`ri:` elements whose namespaces are
not declared and with HTML named entities (`&nbsp;`) that XML does not know. The body
is wrapped in a root element declaring the namespaces, named entities outside CDATA
become numeric references, and it is parsed as XML with entity resolution and network
access off. A body that declares a DTD (`<!DOCTYPE`, `<!ENTITY`) outside CDATA is not
storage format and fails as CORRUPT before parsing.

Malformed XHTML (unclosed tags, `<br>`) goes through lxml's *recovering XML parser*
(which keeps the `ac:`/`ri:` namespaces) and converts with a warning; it fails as
CORRUPT only when recovery keeps less than half of the text (e.g. an unterminated
CDATA section swallowing the rest of the body).

Rendering extends the HTML walker (`normalizers.html.MarkdownWalker`) with the macros:
code/noformat -> fenced code, info/note/warning/tip/panel -> labelled block quotes,
expand/excerpt and unknown macros -> their rich-text body inline, task lists ->
`- [ ]`/`- [x]`, links -> Markdown links to resolved URLs (`normalizers.links`), user
mentions -> `@name`, macros that render nothing -> dropped.

Diagrams (the draw.io `drawio`/`inc-drawio` and `gliffy` macros) render where they stand
as a heading one level below the enclosing one, naming the diagram, and the diagram's
text (`normalizers.diagrams.diagram_markdown`) from the attachment the connector passed
in `NormalizeContext.attachments`; without it, the heading and a note. Images -> alt
text, and what the picture shows where `NormalizeContext.pictures` reads it. Attachment
names: the file name on the page itself, `<page id>/<file>` or `<space>:<title>/<file>`
on another page (connectors/confluence/shown.py finds and fetches them).
"""

from __future__ import annotations

import html.entities
import re
from collections.abc import Callable
from dataclasses import dataclass
from types import MappingProxyType

from lxml import etree

from config.errors import ErrorCode, IngestError
from config.safe_parsing import check_parser_limits, xml_parser
from markdown_text import decode_utf8
from normalizers.diagrams import diagram_markdown
from normalizers.html import Kind, MarkdownWalker, plain_text
from normalizers.links import (
    ANCHOR,
    ATTACHMENT,
    EXTERNAL,
    PAGE,
    attachment_url,
    blogpost_url,
    page_id_url,
    page_url,
    space_url,
)
from normalizers.markdown import escape_text, starts_block_syntax, task_item
from normalizers.model import LinkRecord, NormalizeContext, NormalizedDocument

NAMESPACES = MappingProxyType(
    {
        "ac": "http://atlassian.com/content",
        "ri": "http://atlassian.com/resource/identifier",
        "at": "http://atlassian.com/template",
    }
)
_PREFIX_OF = MappingProxyType({uri: prefix for prefix, uri in NAMESPACES.items()})

_PANEL_LABELS = MappingProxyType(
    {
        "info": "Info",
        "note": "Note",
        "warning": "Warning",
        "tip": "Tip",
        "panel": None,
        "success": "Success",
        "error": "Error",
    }
)
_CODE_MACROS = frozenset({"code", "noformat"})
# Diagram macros -> the parameter naming the attachment, the one naming the diagram as
# shown, and those naming the page holding it where that may be another page.
_DIAGRAM_MACROS = MappingProxyType(
    {
        "drawio": ("diagramname", "diagramdisplayname", ()),
        "drawio-sketch": ("diagramname", "diagramdisplayname", ()),
        "inc-drawio": ("diagramname", "diagramdisplayname", ("pageid",)),
        "gliffy": ("name", "displayname", ("pageid", "containerid")),
    }
)
_HEADING_LEVELS = MappingProxyType({f"h{n}": n for n in range(1, 7)})
_INLINED_MACROS = frozenset({"expand", "excerpt", "ui-expand"})
# Macros whose output comes from elsewhere or is navigation: nothing of this page's text.
_SILENT_MACROS = frozenset(
    {
        "toc", "children", "pagetree", "pagetreesearch", "anchor", "recently-updated",
        "recently-updated-dashboard", "contentbylabel", "content-by-label", "livesearch",
        "attachments", "blog-posts", "create-from-template", "gallery", "profile",
        "profile-picture", "network", "space-attachments", "change-history",
        "contributors", "contributors-summary", "index", "listlabels", "popular-labels",
        "related-labels", "page-index", "spaces", "navmap", "excerpt-include", "include",
        "view-file", "viewpdf", "viewdoc", "viewppt", "viewxls", "search", "space-details",
        "favpages", "global-reports", "recently-used-labels", "task-report", "tasks-report-macro",
    }
)  # fmt: skip
_LINK_RESOURCES = (
    "ri:page", "ri:blogpost", "ri:attachment", "ri:user", "ri:space", "ri:url",
    "ri:content-entity",
)  # fmt: skip
_CDATA = re.compile(r"(<!\[CDATA\[.*?\]\]>)", re.DOTALL)
_NAMED_ENTITY = re.compile(r"&([A-Za-z][A-Za-z0-9]{1,31});")
_XML_ENTITIES = frozenset({"amp", "lt", "gt", "quot", "apos"})
_DTD = re.compile(r"<!(?:DOCTYPE|ENTITY)", re.IGNORECASE)
_XML_DECLARATION = re.compile(r"\A\s*<\?xml[^>]*\?>")
_TAG = re.compile(r"<[^>]*>")
_OPEN_VOID = re.compile(
    r"<(area|br|col|embed|hr|img|input|source|track|wbr)\b((?:[^>\"']|\"[^\"]*\"|'[^']*')*?)\s*(?<!/)>",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class UserRef:
    """A `ri:user` as storage format gives it: Cloud has only the account id, Server
    and Data Center the user key (older pages: the user name)."""

    account_id: str | None = None
    userkey: str | None = None
    username: str | None = None


# Returns the display name of a user, or None when unknown (the mention then shows
# the best identifier storage format has).
UserResolver = Callable[[UserRef], str | None]


class ConfluenceWalker(MarkdownWalker):
    def __init__(self, ctx: NormalizeContext, resolve_user: UserResolver | None = None) -> None:
        super().__init__(base_url=ctx.base_url)
        self.ctx = ctx
        self.resolve_user = resolve_user
        self._heading_level = 0  # of the last heading rendered: a diagram's goes below it

    # -- names ----------------------------------------------------------------------

    def tag(self, el: etree._Element) -> str:
        if not isinstance(el.tag, str):
            return ""
        if el.tag.startswith("{"):
            uri, _, local = el.tag[1:].partition("}")
            prefix = _PREFIX_OF.get(uri)
            return f"{prefix}:{local}" if prefix else local.lower()
        return el.tag.lower()

    def kind(self, el: etree._Element, tag: str) -> Kind:
        if tag in ("ac:structured-macro", "ac:macro"):
            name = _macro_name(el)
            if name in _SILENT_MACROS:
                return Kind.DROP
            if name in _DIAGRAM_MACROS:
                return Kind.BLOCK
            has_body = (
                _child(el, "ac:rich-text-body") is not None
                or _child(el, "ac:plain-text-body") is not None
            )
            return Kind.BLOCK if has_body or name in _CODE_MACROS else Kind.INLINE
        if tag in ("ac:task-list", "ac:layout", "ac:layout-section", "ac:layout-cell",
                   "ac:adf-extension", "ac:rich-text-body"):  # fmt: skip
            return Kind.BLOCK
        if tag == "ac:image":
            return Kind.BLOCK if self.picture(el) is not None else Kind.INLINE
        if tag in ("ac:link", "ac:emoticon", "ac:inline-comment-marker"):
            return Kind.INLINE
        if tag.startswith(("ac:", "ri:")):  # parameters, placeholders, bare resources
            return Kind.DROP
        return super().kind(el, tag)

    # -- blocks --------------------------------------------------------------------------

    def render_block(self, el: etree._Element, tag: str, depth: int, nesting: int) -> list[str]:
        if tag in ("ac:structured-macro", "ac:macro"):
            return self.render_macro(el, depth, nesting)
        if tag == "ac:task-list":
            return self.render_tasks(el, depth, nesting)
        if tag == "ac:adf-extension":
            return self.render_adf(el, depth, nesting)
        if tag == "ac:image":
            return self.render_picture(el)
        blocks = super().render_block(el, tag, depth, nesting)
        if tag in _HEADING_LEVELS and blocks and not self._one_line:
            self._heading_level = _HEADING_LEVELS[tag]
        return blocks

    def render_macro(self, el: etree._Element, depth: int, nesting: int) -> list[str]:
        name = _macro_name(el)
        params = _macro_params(el)
        if name in _DIAGRAM_MACROS:
            return self.render_diagram(name, params)
        rich = _child(el, "ac:rich-text-body")
        plain = _child(el, "ac:plain-text-body")
        if name in _CODE_MACROS or (rich is None and plain is not None):
            title = self.title_block(params.get("title"))
            language = "" if name == "noformat" else params.get("language", "").lower()
            language = "" if language == "none" else language
            code = self.render_code(plain.text or "" if plain is not None else "", language)
            return title + code
        quoted = name in _PANEL_LABELS  # only panels add a Markdown container level
        body = self.flow(rich, depth + 1, nesting + int(quoted)) if rich is not None else []
        if quoted:
            return self.labelled_quote(_PANEL_LABELS[name], params.get("title"), body, nesting)
        if name in _INLINED_MACROS:
            return self.title_block(params.get("title")) + body
        return body

    def render_diagram(self, name: str, params: dict[str, str]) -> list[str]:
        """A heading naming the diagram one level below the enclosing one (so its chunks
        carry it), then its text, or a note where its attachment was not read."""
        file_param, display_param, holder_params = _DIAGRAM_MACROS[name]
        filename = params.get(file_param, "")
        shown = params.get(display_param) or filename or "diagram"
        holder = next((params[p] for p in holder_params if params.get(p)), "")
        key = f"{holder}/{filename}" if holder and holder != self.ctx.locator else filename
        level = min(self._heading_level + 1, 6)
        data = self.ctx.attachments.get(key) if filename else None
        if data is None:
            body = "_The diagram's attachment could not be read: its text is not indexed._"
        else:
            try:
                body = diagram_markdown(data, filename, heading_level=min(level + 1, 6))
            except IngestError as exc:
                body = f"_The diagram could not be read ({escape_text(exc.message)})._"
            body = body.strip() or "_The diagram has no text._"
        heading = f"Diagram: {escape_text(' '.join(shown.split()))}"
        if self._one_line:  # a table cell: no heading or blocks there
            return [" ".join(" ".join([f"**{heading}**", body]).split())]
        return [f"{'#' * level} {heading}", body]

    def picture(self, el: etree._Element) -> tuple[str, bytes] | None:
        """The file name and bytes of an attachment an `ac:image` shows, where a picture
        reader is set and the connector passed them."""
        resource = _child(el, "ri:attachment")
        filename = _attr(resource, "ri:filename") if resource is not None else None
        if self.ctx.pictures is None or resource is None or not filename:
            return None
        entity = _child(resource, "ri:content-entity")
        holder = _child(resource, "ri:page")
        if holder is None:
            holder = _child(resource, "ri:blogpost")
        page_id = _attr(entity, "ri:content-id") if entity is not None else None
        title = _attr(holder, "ri:content-title") if holder is not None else None
        space = (_attr(holder, "ri:space-key") if holder is not None else None) or (
            self.ctx.container or ""
        )
        if page_id and page_id != self.ctx.locator:
            key = f"{page_id}/{filename}"
        elif title:
            key = f"{space}:{title}/{filename}"
        else:
            key = filename
        data = self.ctx.attachments.get(key)
        return (filename, data) if data is not None else None

    def render_picture(self, el: etree._Element) -> list[str]:
        """Alt text, then what the picture shows (`NormalizeContext.pictures`)."""
        picture = self.picture(el)
        alt = self.text(self.image_text(el))
        read = ""
        if picture is not None and self.ctx.pictures is not None:
            read = self.ctx.pictures.text(picture[1], picture[0]).strip()
        if self._one_line:
            return [" ".join(" ".join([alt, read]).split())] if alt or read else []
        return [block for block in (alt, read) if block]

    def title_block(self, title: str | None) -> list[str]:
        return [f"**{escape_text(title.strip())}**"] if title and title.strip() else []

    def labelled_quote(
        self, label: str | None, title: str | None, body: list[str], nesting: int
    ) -> list[str]:
        """`> **Note:** first paragraph` (with a title: `> **Note: Title**` as its own
        line), the rest of the body quoted below it."""
        title = (title or "").strip()
        blocks = list(body)
        if label and title:
            blocks.insert(0, f"**{label}: {escape_text(title)}**")
        elif title:
            blocks.insert(0, f"**{escape_text(title)}**")
        elif label and blocks and not starts_block_syntax(blocks[0]):
            blocks[0] = f"**{label}:** {blocks[0]}"
        elif label:
            blocks.insert(0, f"**{label}:**")
        return self.render_quote(blocks, nesting)

    def render_tasks(self, el: etree._Element, depth: int, nesting: int) -> list[str]:
        """`- [x]`/`- [ ]` items; where no list can go (a table cell, past the nesting
        cap) the tasks on one line, `; ` between them."""
        one_line = nesting >= self.max_nesting or bool(self._one_line)
        self._one_line += int(one_line)
        try:
            items: list[tuple[str, list[str]]] = []
            for child in el:
                tag = self.tag(child)
                if tag == "ac:task":
                    status = (_child_text(child, "ac:task-status") or "").strip().lower()
                    body = _child(child, "ac:task-body")
                    blocks = self.flow(body, depth + 2, nesting + 1) if body is not None else []
                    items.append(("- ", task_item(status == "complete", blocks)))
                elif tag == "ac:task-list" and items:  # a nested list follows its parent task
                    items[-1][1].extend(self.render_tasks(child, depth + 1, nesting + 1))
        finally:
            self._one_line -= int(one_line)
        if one_line:
            text = "; ".join(" ".join(" ".join(b.split()) for b in blocks) for _, blocks in items)
            return [text] if text else []
        return self.list_blocks(items)

    def render_adf(self, el: etree._Element, depth: int, nesting: int) -> list[str]:
        """Cloud's ADF extensions: panels get their label; anything else renders its
        HTML fallback when there is one, else its content."""
        node = _child(el, "ac:adf-node")
        if node is not None and node.get("type") == "panel":
            panel_type = next(
                (a.text or "" for a in node if self.tag(a) == "ac:adf-attribute"
                 and a.get("key") == "panel-type"),
                "info",
            )  # fmt: skip
            content = _child(node, "ac:adf-content")
            body = self.flow(content, depth + 2, nesting + 1) if content is not None else []
            label = _PANEL_LABELS.get(panel_type.strip().lower(), panel_type.strip().title())
            return self.labelled_quote(label, None, body, nesting)
        fallback = _child(el, "ac:adf-fallback")
        if fallback is not None:
            return self.flow(fallback, depth + 1, nesting)
        contents = [c for c in el.iter() if self.tag(c) == "ac:adf-content"]
        return [block for c in contents for block in self.flow(c, depth + 1, nesting)]

    # -- inline --------------------------------------------------------------------------

    def render_inline(self, el: etree._Element, tag: str, depth: int) -> str:
        if tag == "ac:link":
            return self.render_ac_link(el, depth)
        if tag == "ac:image":
            return self.text(self.image_text(el))
        if tag == "ac:emoticon":
            return self.text(_attr(el, "ac:emoji-fallback") or "")
        if tag in ("ac:structured-macro", "ac:macro"):
            params = _macro_params(el)
            # status lozenges and Jira issue links carry their text in parameters
            return self.text(params.get("title") or params.get("key") or "")
        return super().render_inline(el, tag, depth)

    def image_text(self, el: etree._Element) -> str:
        caption = _child(el, "ac:caption")
        resource = _child(el, "ri:attachment")
        url = _child(el, "ri:url")
        for candidate in (
            _attr(el, "ac:alt"),
            _attr(el, "ac:title"),
            plain_text(caption) if caption is not None else None,
            _attr(resource, "ri:filename") if resource is not None else None,
            (_attr(url, "ri:value") or "").rsplit("/", 1)[-1] if url is not None else None,
        ):
            if candidate and candidate.strip():
                return candidate.strip()
        return ""

    def render_ac_link(self, el: etree._Element, depth: int) -> str:
        rich_body = _child(el, "ac:link-body")
        plain_body = _child(el, "ac:plain-text-link-body")
        if rich_body is not None:
            text = self.inline_line(rich_body, depth + 1)
        elif plain_body is not None:
            text = escape_text(" ".join((plain_body.text or "").split()))
        else:
            text = ""
        resource = next((c for c in el if self.tag(c) in _LINK_RESOURCES), None)
        anchor = _attr(el, "ac:anchor")
        if resource is not None and self.tag(resource) == "ri:user":
            return text or self.mention(resource)
        record = self.link_record(resource, anchor)
        if record is None:
            return text
        shown = text or escape_text(record.text)
        record = LinkRecord(**{**record.__dict__, "text": " ".join(shown.split())})
        self.add_link(record)
        return self.markdown_link(shown, record.target_url)

    def link_record(self, resource: etree._Element | None, anchor: str | None) -> LinkRecord | None:
        """The record of an `ac:link`; its `text` is the default link text."""
        fragment = f"#{anchor}" if anchor else ""
        if resource is None:
            return LinkRecord(f"#{anchor}", ANCHOR, anchor) if anchor else None
        tag = self.tag(resource)
        space = _attr(resource, "ri:space-key") or self.ctx.container or ""
        title = _attr(resource, "ri:content-title")
        if tag == "ri:page":
            if not title:  # a link to an anchor of this very page
                return LinkRecord(fragment, ANCHOR, anchor or "") if anchor else None
            url = page_url(self.base_url, space, title) + fragment
            return LinkRecord(url, PAGE, title, target_title=title, target_space_key=space)
        if tag == "ri:blogpost" and title:
            day = _attr(resource, "ri:posting-day") or ""
            url = (blogpost_url(self.base_url, space, title, day) if day
                   else page_url(self.base_url, space, title)) + fragment  # fmt: skip
            return LinkRecord(url, PAGE, title, target_title=title, target_space_key=space)
        if tag == "ri:attachment":
            return self.attachment_record(resource)
        if tag == "ri:space":
            return LinkRecord(space_url(self.base_url, space), PAGE, space, target_space_key=space)
        if tag == "ri:url":
            value = _attr(resource, "ri:value") or ""
            return LinkRecord(value, EXTERNAL, value) if value else None
        if tag == "ri:content-entity":
            page_id = _attr(resource, "ri:content-id")
            if page_id:
                url = page_id_url(self.base_url, page_id) + fragment
                return LinkRecord(url, PAGE, page_id, target_page_id=page_id)
        return None

    def attachment_record(self, resource: etree._Element) -> LinkRecord | None:
        """An attachment of this page, or of the page/blog post named inside it."""
        filename = _attr(resource, "ri:filename")
        if not filename:
            return None
        holder = next((c for c in resource if self.tag(c) in ("ri:page", "ri:blogpost")), None)
        if holder is not None and _attr(holder, "ri:content-title"):
            title = _attr(holder, "ri:content-title") or ""
            space = _attr(holder, "ri:space-key") or self.ctx.container or ""
            day = _attr(holder, "ri:posting-day")
            container = (blogpost_url(self.base_url, space, title, day) if day
                         else page_url(self.base_url, space, title))  # fmt: skip
            url = attachment_url(self.base_url, filename, container_url=container)
            return LinkRecord(
                url, ATTACHMENT, filename, target_filename=filename,
                target_title=title, target_space_key=space,
            )  # fmt: skip
        page_id = self.ctx.locator or None
        space = self.ctx.container or ""
        url = attachment_url(self.base_url, filename, page_id=page_id)
        return LinkRecord(
            url, ATTACHMENT, filename, target_filename=filename, target_page_id=page_id,
            target_space_key=space or None,
        )  # fmt: skip

    def mention(self, user: etree._Element) -> str:
        ref = UserRef(
            account_id=_attr(user, "ri:account-id"),
            userkey=_attr(user, "ri:userkey"),
            username=_attr(user, "ri:username"),
        )
        name = self.resolve_user(ref) if self.resolve_user else None
        shown = name or ref.username or ref.userkey or ref.account_id or "user"
        return self.text("@" + shown)


def _attr(el: etree._Element, name: str) -> str | None:
    prefix, _, local = name.partition(":")
    value = el.get(f"{{{NAMESPACES[prefix]}}}{local}")
    return str(value) if value is not None else None


def _child(el: etree._Element, name: str) -> etree._Element | None:
    prefix, _, local = name.partition(":")
    return el.find(f"{{{NAMESPACES[prefix]}}}{local}")


def _child_text(el: etree._Element, name: str) -> str | None:
    child = _child(el, name)
    return "".join(child.itertext()) if child is not None else None


def _macro_name(el: etree._Element) -> str:
    return (_attr(el, "ac:name") or "").strip().lower()


def _macro_params(el: etree._Element) -> dict[str, str]:
    params: dict[str, str] = {}
    for param in el.iterfind(f"{{{NAMESPACES['ac']}}}parameter"):
        name = (_attr(param, "ac:name") or "").strip().lower()
        value = " ".join("".join(param.itertext()).split())
        if value:
            params[name] = value
    return params


# --- parsing -------------------------------------------------------------------------------


def prepare_storage(text: str, ctx: NormalizeContext) -> bytes:
    """The body wrapped in a namespace-declaring root, HTML named entities made
    numeric outside CDATA, DTDs refused."""
    text = _XML_DECLARATION.sub("", text)
    parts = _CDATA.split(text)
    for i in range(0, len(parts), 2):  # even parts lie outside CDATA sections
        if _DTD.search(parts[i]):
            raise ctx.fail(
                ErrorCode.CORRUPT,
                "declares a DTD or entities (<!DOCTYPE/<!ENTITY), which storage format never "
                "does; refused (entity expansion / external entity risk)",
            )
        parts[i] = _NAMED_ENTITY.sub(_numeric_entity, parts[i])
    declarations = " ".join(f'xmlns:{p}="{uri}"' for p, uri in NAMESPACES.items())
    return f"<ac:confluence {declarations}>{''.join(parts)}</ac:confluence>".encode()


def _numeric_entity(match: re.Match[str]) -> str:
    name = match.group(1)
    if name in _XML_ENTITIES:
        return match.group(0)
    value = html.entities.html5.get(name + ";")
    if value is None:
        return match.group(0)  # unknown: XML parsing reports it, recovery drops it
    return "".join(f"&#{ord(ch)};" for ch in value)


def parse_storage(text: str, ctx: NormalizeContext) -> tuple[etree._Element, list[str]]:
    """Strict XML first; malformed bodies (typically hand-written HTML: `<br>`,
    unclosed `<p>`) get their void elements closed and the recovering parser."""
    data = prepare_storage(text, ctx)
    strict = xml_parser(markup_only=True)
    try:
        root = etree.fromstring(data, strict)
        check_parser_limits(strict, ctx.fail)
        return root, []
    except etree.XMLSyntaxError as exc:
        check_parser_limits(strict, ctx.fail)
        problem = str(exc).splitlines()[0]
    recovering = xml_parser(recover=True, markup_only=True)
    root = etree.fromstring(prepare_storage(_OPEN_VOID.sub(r"<\1\2/>", text), ctx), recovering)
    check_parser_limits(recovering, ctx.fail)
    expected = len("".join(_TAG.sub(" ", _CDATA.sub(_cdata_text, text)).split()))
    kept = len("".join("".join(root.itertext()).split())) if root is not None else 0
    if root is None or kept * 2 < expected:
        raise ctx.fail(ErrorCode.CORRUPT, f"malformed storage format XHTML: {problem}")
    return root, [f"malformed storage format XHTML, recovered: {problem}"]


def _cdata_text(match: re.Match[str]) -> str:
    return match.group(0)[len("<![CDATA[") : -len("]]>")]


def normalize_confluence(
    data: bytes, ctx: NormalizeContext, resolve_user: UserResolver | None = None
) -> NormalizedDocument:
    """A page or blog post body to Markdown; `resolve_user` names mentioned users."""
    root, warnings = parse_storage(decode_utf8(data, subject=ctx.filename), ctx)
    walker = ConfluenceWalker(ctx, resolve_user)
    markdown = walker.render(root)
    metadata = {"space_key": ctx.container} if ctx.container else {}
    if ctx.locator:
        metadata["page_id"] = ctx.locator
    return NormalizedDocument(
        markdown=markdown,
        metadata=metadata,
        links=tuple(walker.links),
        warnings=tuple(warnings),
    )
