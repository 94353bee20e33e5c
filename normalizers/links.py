"""Link classification shared by the HTML and Confluence normalizers (docs/chunking.md#links).

Two directions:
- `classify_href` reads an `<a href>` and recognizes Confluence's own URL forms
  (`/display/KEY/Title`, `/pages/viewpage.action?pageId=N`,
  `/wiki/spaces/KEY/pages/N/...`, `/download/attachments/N/file`) as page or
  attachment links; everything else is an external link or an in-page anchor.
- `page_url`, `blogpost_url` and `attachment_url` build the URLs that Confluence
  storage-format links (`ri:page`, `ri:blogpost`, `ri:attachment`) resolve to.

URL forms built here, relative to the Confluence base URL (context path included):
- page: `{base}/display/{space}/{title}` (title `+`-encoded, as Confluence writes it);
- blog post: `{base}/display/{space}/{yyyy}/{mm}/{dd}/{title}`;
- attachment of a page whose id is known: `{base}/download/attachments/{page_id}/{filename}`
  (the download URL Confluence itself renders);
- attachment of a page known only by title: `{page url}?preview=/{filename}`, which
  opens that page (Confluence previews attachments through this parameter);
- attachment of the linking page itself when its id is not known: the relative
  `?preview=/{filename}`, which resolves against the linking page's own URL.

For attachment records, `target_filename` names the file and `target_page_id` /
`target_title` / `target_space_key` name the page that holds it, when the source says.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qs, quote, quote_plus, unquote, unquote_plus, urljoin, urlsplit

from normalizers.model import LinkRecord

PAGE = "page"
ATTACHMENT = "attachment"
EXTERNAL = "external"
ANCHOR = "anchor"

# Matched against the URL path; a context path (`/wiki`, `/confluence`) may precede them.
_DISPLAY = re.compile(r"(?:^|/)display/(?P<space>[^/]+)(?:/(?P<rest>.+?))?/?$")
_VIEWPAGE = re.compile(r"(?:^|/)pages/viewpage\.action$")
_SPACES_PAGE = re.compile(
    r"(?:^|/)spaces/(?P<space>[^/]+)/(?:pages|blog(?:/\d{4}/\d{2}/\d{2})?)/(?P<id>\d+)(?:/|$)"
)
_ATTACHMENT = re.compile(r"(?:^|/)download/(?:attachments|thumbnails)/(?P<id>\d+)/(?P<file>[^/]+)$")
_BLOG_DATE = re.compile(r"^\d{4}/\d{2}/\d{2}/")


def classify_href(href: str, text: str = "", *, base_url: str | None = None) -> LinkRecord | None:
    """The link record of one `href`, or None for links that lead nowhere
    (`javascript:`, empty). Relative URLs resolve against `base_url` when given.

    Confluence URL forms count as page/attachment links when the URL is relative,
    when it points at `base_url`'s host, or when no base URL is known (a file from a
    share cannot say which host its Confluence links meant)."""
    href = href.strip()
    if not href or href.lower().startswith(("javascript:", "data:", "vbscript:")):
        return None
    if href.startswith("#"):
        return LinkRecord(target_url=href, link_type=ANCHOR, text=text)
    try:
        target = _absolute(href, base_url)
        parts = urlsplit(target)
    except ValueError:  # e.g. a broken IPv6 host: still a link, just not one we can read
        return LinkRecord(target_url=href, link_type=EXTERNAL, text=text)
    if parts.scheme not in ("", "http", "https"):
        return LinkRecord(target_url=target, link_type=EXTERNAL, text=text)
    if base_url and parts.netloc and parts.netloc.lower() != urlsplit(base_url).netloc.lower():
        return LinkRecord(target_url=target, link_type=EXTERNAL, text=text)
    path = parts.path
    if match := _SPACES_PAGE.search(path):
        return LinkRecord(
            target_url=target,
            link_type=PAGE,
            text=text,
            target_page_id=match["id"],
            target_space_key=unquote(match["space"]),
        )
    if match := _ATTACHMENT.search(path):
        return LinkRecord(
            target_url=target,
            link_type=ATTACHMENT,
            text=text,
            target_page_id=match["id"],
            target_filename=unquote(match["file"]),
        )
    if _VIEWPAGE.search(path):
        query = parse_qs(parts.query)
        page_id = _first(query, "pageId")
        title = _first(query, "title")
        if page_id or title:
            return LinkRecord(
                target_url=target,
                link_type=PAGE,
                text=text,
                target_page_id=page_id,
                target_title=title,
                target_space_key=_first(query, "spaceKey"),
            )
    if match := _DISPLAY.search(path):
        rest = match["rest"]
        title = unquote_plus(_BLOG_DATE.sub("", rest)) if rest else None
        return LinkRecord(
            target_url=target,
            link_type=PAGE,
            text=text,
            target_title=title,
            target_space_key=unquote_plus(match["space"]),
        )
    return LinkRecord(target_url=target, link_type=EXTERNAL, text=text)


def page_url(base_url: str | None, space_key: str, title: str) -> str:
    return f"{_base(base_url)}/display/{quote(space_key, safe='')}/{quote_plus(title)}"


def blogpost_url(base_url: str | None, space_key: str, title: str, posting_day: str) -> str:
    """`posting_day` as storage format writes it: `yyyy/mm/dd`."""
    day = "/".join(quote(part, safe="") for part in posting_day.split("/"))
    return f"{_base(base_url)}/display/{quote(space_key, safe='')}/{day}/{quote_plus(title)}"


def space_url(base_url: str | None, space_key: str) -> str:
    return f"{_base(base_url)}/display/{quote(space_key, safe='')}"


def page_id_url(base_url: str | None, page_id: str) -> str:
    return f"{_base(base_url)}/pages/viewpage.action?pageId={quote(page_id, safe='')}"


def attachment_url(
    base_url: str | None,
    filename: str,
    *,
    page_id: str | None = None,
    container_url: str | None = None,
) -> str:
    """The download URL when the holding page's id is known, else the holding page's
    URL (relative to the linking page when None) with the attachment previewed."""
    if page_id:
        return f"{_base(base_url)}/download/attachments/{quote(page_id, safe='')}/{quote(filename)}"
    return f"{container_url or ''}?preview=/{quote(filename)}"


def _base(base_url: str | None) -> str:
    return (base_url or "").rstrip("/")


def _absolute(href: str, base_url: str | None) -> str:
    if not base_url or urlsplit(href).scheme:
        return href
    return urljoin(_base(base_url) + "/", href)


def _first(query: dict[str, list[str]], key: str) -> str | None:
    values = query.get(key)
    return values[0] if values else None
