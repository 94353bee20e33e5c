"""DrawingML charts (the `c:chartSpace` part shared by XLSX and PPTX) as Markdown: the
chart title with the kind of chart ("Sales by region (bar chart)"), then its cached
data as a GFM table (categories down, one column per series). Read from the XML so
every chart type works, including those python-pptx and openpyxl do not model (3-D
bars, surface charts). The kind is what a reader of the page sees first and the only
sign that the table below is a chart's data.
"""

from __future__ import annotations

from types import MappingProxyType

from lxml import etree

from normalizers.tables import format_number, gfm_table

_C = "http://schemas.openxmlformats.org/drawingml/2006/chart"
_A = "http://schemas.openxmlformats.org/drawingml/2006/main"
_NS = MappingProxyType({"c": _C, "a": _A})
# Plot elements (`c:plotArea` children) by the kind of chart they draw.
_KINDS = MappingProxyType(
    {
        **dict.fromkeys(("barChart", "bar3DChart"), "bar"),
        **dict.fromkeys(("lineChart", "line3DChart"), "line"),
        **dict.fromkeys(("pieChart", "pie3DChart", "ofPieChart"), "pie"),
        **dict.fromkeys(("areaChart", "area3DChart"), "area"),
        **dict.fromkeys(("surfaceChart", "surface3DChart"), "surface"),
        "doughnutChart": "doughnut",
        "scatterChart": "scatter",
        "bubbleChart": "bubble",
        "radarChart": "radar",
        "stockChart": "stock",
    }
)


def chart_markdown(chart_space: etree._Element) -> str:
    """Title paragraph and data table of one chart; empty when it holds neither."""
    title = " ".join(
        "".join(p.itertext()).strip() for p in chart_space.iterfind("c:chart/c:title//a:p", _NS)
    ).strip()
    series = chart_space.findall("c:chart/c:plotArea/*/c:ser", _NS)
    names: list[str] = []
    columns: list[dict[int, str]] = []
    categories: dict[int, str] = {}
    for i, ser in enumerate(series, 1):
        name = " ".join(v.text or "" for v in ser.iterfind("c:tx//c:v", _NS)).strip()
        names.append(name or f"Series {i}")
        labels = _points(ser, "c:cat") or _points(ser, "c:xVal")
        for index, label in labels.items():
            categories.setdefault(index, label)
        columns.append(_points(ser, "c:val") or _points(ser, "c:yVal"))
    kind = _kind(chart_space)
    caption = f"{title} ({kind})" if title and kind else title or kind.capitalize()
    parts = [caption] if caption else []
    if any(columns):  # a chart saved without cached data has only its title
        count = max([*(max(c, default=-1) for c in columns), max(categories, default=-1)]) + 1
        rows = [
            [categories.get(i, str(i + 1))] + [column.get(i, "") for column in columns]
            for i in range(count)
        ]
        parts.append(gfm_table(["", *names], rows))
    return "\n\n".join(parts)


def _kind(chart_space: etree._Element) -> str:
    """ "bar chart", "bar and line chart", ...; empty for an unknown plot type."""
    kinds: list[str] = []
    for plot in chart_space.iterfind("c:chart/c:plotArea/*", _NS):
        kind = _KINDS.get(etree.QName(plot).localname)
        if kind and kind not in kinds:
            kinds.append(kind)
    return " and ".join(kinds) + " chart" if kinds else ""


def _points(ser: etree._Element, tag: str) -> dict[int, str]:
    """Cached points of one data reference (`c:strCache`, `c:numCache` or literals)."""
    points: dict[int, str] = {}
    for pt in ser.iterfind(f"{tag}//c:pt", _NS):
        value = pt.findtext("c:v", default="", namespaces=_NS)
        index = int(pt.get("idx", len(points)))
        if index in points:  # multi-level categories: keep the innermost level's label
            continue
        points[index] = _number_or_text(value)
    return points


def _number_or_text(value: str) -> str:
    try:
        return format_number(float(value))
    except ValueError:
        return value.strip()
