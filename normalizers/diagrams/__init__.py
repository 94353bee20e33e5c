"""Diagrams as documents: draw.io (`drawio`), Gliffy (`gliffy`) and Visio (`visio`)
readers turn a diagram into pages of labels and connections, which
`normalizers.diagrams.model` renders as Markdown; `sniff` tells the formats apart by
their bytes. `diagram_markdown` serves a diagram found inside another document (a
Confluence page's diagram macro)."""

from __future__ import annotations

from config.errors import ErrorCode, IngestError
from normalizers.model import NormalizeContext


def diagram_markdown(data: bytes, filename: str, *, heading_level: int = 1) -> str:
    """The diagram in `data` (draw.io, Gliffy or Visio, told by its bytes; `filename`
    only names it in messages and tells a VSD) as Markdown, each page a heading at
    `heading_level`. Raises IngestError: UNSUPPORTED_FORMAT for bytes that are no
    diagram, CORRUPT for a broken one."""
    # Imported here: normalizers.detection imports this package (its `sniff` module).
    from normalizers.detection import detect_format
    from normalizers.diagrams import drawio, gliffy, visio
    from normalizers.diagrams.model import render_pages

    readers = {
        "drawio": drawio.drawio_pages,
        "gliffy": gliffy.gliffy_pages,
        "vsdx": visio.vsdx_pages,
        "vsd": visio.vsd_pages,
    }
    ctx = NormalizeContext(filename=filename)
    fmt = detect_format(data, filename)
    reader = readers.get(fmt)
    if reader is None:
        raise ctx.fail(ErrorCode.UNSUPPORTED_FORMAT, f"not a diagram (the content is {fmt})")
    try:
        pages = reader(data, ctx)
    except IngestError:
        raise
    except Exception as exc:  # a library choked on the bytes: the diagram is bad
        raise ctx.fail(
            ErrorCode.CORRUPT, f"could not be read as {fmt}: {type(exc).__name__}: {exc}"
        ) from None
    return render_pages(pages, heading_level).markdown
