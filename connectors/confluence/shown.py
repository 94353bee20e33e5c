"""The attachments a page's body shows: diagrams of the draw.io and Gliffy apps and
pictures. A page is fetched with them, so its
normalizer renders a diagram's text and a picture's where the body shows them, and
their versions are part of the page's version (connectors/confluence/access.py), so a
new diagram version re-indexes the page although its body did not change.

Storage-format shapes relied on (the apps write them on Cloud and Data Center alike):

- `<ac:structured-macro ac:name="drawio">` (also `drawio-sketch`): `diagramName` names
  the attachment holding the diagram (no extension on Data Center, often `.drawio` on
  Cloud), on this page; `diagramDisplayName`, `revision`/`contentVer`, `pageId`,
  `custContentId`, `baseUrl` say no more the connector needs.
- `inc-drawio` shows a diagram of another page: `diagramName` on the page `pageId`.
- `<ac:structured-macro ac:name="gliffy">`: `name` names the attachment; `pageid`
  (Data Center) or `containerId` (Cloud) the page holding it where that is another one.
- Both apps keep a PNG preview `<diagram>.png` beside the diagram attachment; neither
  the diagram nor its preview is a document of its own.
- `<ac:image>` with `<ri:attachment ri:filename="...">`, optionally holding
  `<ri:page ri:content-title ri:space-key>` or `<ri:content-entity ri:content-id>`
  for another page's attachment.

The normalizer finds the bytes in `NormalizeContext.attachments` under `attachment_key`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import PurePath
from types import MappingProxyType

from lxml import etree

from config.safe_parsing import xml_parser

NAMESPACES = MappingProxyType(
    {"ac": "http://atlassian.com/content", "ri": "http://atlassian.com/resource/identifier"}
)
# The macro -> the parameter naming the diagram's attachment.
DIAGRAM_MACROS = MappingProxyType(
    {"drawio": "diagramName", "drawio-sketch": "diagramName", "inc-drawio": "diagramName",
     "gliffy": "name"}
)  # fmt: skip
# The parameters naming the page that holds the attachment, where it may be another one.
HOLDER_PARAMS = MappingProxyType({"inc-drawio": ("pageId",), "gliffy": ("pageid", "containerId")})
DIAGRAM_MEDIA_TYPES = frozenset({"application/vnd.jgraph.mxfile", "application/gliffy+json"})
DIAGRAM_EXTENSIONS = frozenset({".drawio", ".gliffy"})
PICTURE_EXTENSIONS = frozenset({".png", ".jpg", ".jpeg", ".gif", ".bmp", ".tif", ".tiff", ".webp"})


@dataclass(frozen=True)
class Shown:
    """An attachment the body shows: on the page itself, or on the page `page_id` (or
    titled `page_title` in `space_key`)."""

    filename: str
    page_id: str | None = None
    page_title: str | None = None
    space_key: str | None = None

    @property
    def key(self) -> str:
        return attachment_key(self.filename, self.page_id, self.page_title, self.space_key)


@dataclass(frozen=True)
class AttachmentInfo:
    """An attachment as either API lists it."""

    id: str
    filename: str
    media_type: str | None
    version: int
    size: int | None
    download: str  # the download link, relative to the site
    owner: str  # the page or blog post it is on


def attachment_key(
    filename: str,
    page_id: str | None = None,
    page_title: str | None = None,
    space_key: str | None = None,
) -> str:
    """The name of a shown attachment in `NormalizeContext.attachments`: its file name on
    the page itself, `<page id>/<file>` or `<space>:<title>/<file>` on another page."""
    if page_id:
        return f"{page_id}/{filename}"
    if page_title:
        return f"{space_key or ''}:{page_title}/{filename}"
    return filename


def shown_attachments(body: str, page_id: str, space_key: str) -> list[Shown]:
    """The attachments `body` (storage format) shows, each once, in order."""
    root = _parse(body)
    if root is None:
        return []
    found: dict[Shown, None] = {}
    for el in root.iter(_qname("ac", "structured-macro"), _qname("ac", "image")):
        shown = _shown(el, page_id, space_key)
        if shown is not None:
            found[shown] = None
    return list(found)


def _shown(el: etree._Element, page_id: str, space_key: str) -> Shown | None:
    if el.tag == _qname("ac", "image"):
        resource = el.find(_qname("ri", "attachment"))
        filename = resource.get(_qname("ri", "filename")) if resource is not None else None
        if resource is None or not filename:
            return None
        entity = resource.find(_qname("ri", "content-entity"))
        holder = entity.get(_qname("ri", "content-id")) if entity is not None else None
        page = resource.find(_qname("ri", "page"))
        if page is None:
            page = resource.find(_qname("ri", "blogpost"))
        title = page.get(_qname("ri", "content-title")) if page is not None else None
        space = (page.get(_qname("ri", "space-key")) if page is not None else None) or space_key
        if holder and holder != page_id:
            return Shown(filename, page_id=holder)
        if title:  # the page itself too, named by title: found through the listing's index
            return Shown(filename, page_title=title, space_key=space)
        return Shown(filename)
    name = (el.get(_qname("ac", "name")) or "").strip().lower()
    if name not in DIAGRAM_MACROS:
        return None
    params = macro_params(el)
    filename = params.get(DIAGRAM_MACROS[name].lower())
    if not filename:
        return None
    holders = (params.get(p.lower()) for p in HOLDER_PARAMS.get(name, ()))
    holder = next((h for h in holders if h), None)
    if holder and holder != page_id:
        return Shown(filename, page_id=holder)
    return Shown(filename)


def macro_params(el: etree._Element) -> dict[str, str]:
    """A macro's parameters by lower-case name, their text trimmed."""
    params: dict[str, str] = {}
    for param in el.iterfind(_qname("ac", "parameter")):
        key = (param.get(_qname("ac", "name")) or "").strip().lower()
        value = "".join(param.itertext()).strip()
        if key and value:
            params[key] = value
    return params


def is_diagram(filename: str, media_type: str | None) -> bool:
    """An attachment holding a draw.io or Gliffy diagram."""
    kind = (media_type or "").split(";")[0].strip().lower()
    return kind in DIAGRAM_MEDIA_TYPES or PurePath(filename).suffix.lower() in DIAGRAM_EXTENSIONS


def is_picture(filename: str, media_type: str | None) -> bool:
    kind = (media_type or "").split(";")[0].strip().lower()
    return kind.startswith("image/") or PurePath(filename).suffix.lower() in PICTURE_EXTENSIONS


def showable(info: AttachmentInfo) -> bool:
    """An attachment a body may show (a diagram or a picture): its version is part of
    its page's, whether or not the body shows it now (the listing has no bodies)."""
    return is_diagram(info.filename, info.media_type) or is_picture(info.filename, info.media_type)


def shown_states(infos: Iterable[AttachmentInfo]) -> list[tuple[str, int]]:
    """What of a page's attachments goes into its version: each showable one's id and
    version number."""
    return sorted((info.id, info.version) for info in infos if showable(info))


def rendered_in_page(info: AttachmentInfo, siblings: Sequence[AttachmentInfo]) -> bool:
    """A diagram attachment, or the PNG preview beside one (`<diagram>.png`): its page
    renders it, so it is no document of its own."""
    if is_diagram(info.filename, info.media_type):
        return True
    if not info.filename.lower().endswith(".png"):
        return False
    diagram = info.filename[: -len(".png")]
    return any(s.filename == diagram and is_diagram(s.filename, s.media_type) for s in siblings)


def _qname(prefix: str, local: str) -> str:
    return f"{{{NAMESPACES[prefix]}}}{local}"


def _parse(body: str) -> etree._Element | None:
    """The body wrapped in a namespace-declaring root, parsed leniently: only the
    attachment references matter here (the normalizer reports malformed bodies)."""
    declarations = " ".join(f'xmlns:{p}="{uri}"' for p, uri in NAMESPACES.items())
    wrapped = f"<ac:body {declarations}>{body}</ac:body>".encode()
    try:
        return etree.fromstring(wrapped, xml_parser(recover=True))
    except etree.XMLSyntaxError:
        return None
