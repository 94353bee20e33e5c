"""Confluence storage format -> Markdown and link records (normalizers/confluence.py),
and the Confluence URL forms of normalizers/links.py."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from config.errors import ErrorCode, IngestError
from normalizers.base import normalize_bytes
from normalizers.confluence import UserRef, normalize_confluence
from normalizers.links import classify_href
from normalizers.model import LinkRecord, NormalizeContext, NormalizedDocument

STORAGE_MIME = "application/vnd.atlassian.confluence.storage+xml"
BASE = "https://wiki.example.com/confluence"

PAGE = """<ac:structured-macro ac:name="toc" ac:schema-version="1" ac:macro-id="7a1"><ac:parameter ac:name="maxLevel">2</ac:parameter></ac:structured-macro>
<h1>Обзор&nbsp;сервиса</h1>
<p>Сервис <strong>ingest</strong> синхронизирует пространства Confluence с&nbsp;Qdrant &mdash; владелец: <ac:link><ri:user ri:account-id="557058:f3a1c2d4" /></ac:link>.</p>
<h2>Installation</h2>
<ol>
  <li>Install the package:
    <ul>
      <li>with <code>pip install ingest</code></li>
      <li>or from source
        <ul><li>clone the <em>repository</em></li></ul>
      </li>
    </ul>
  </li>
  <li>Configure <a href="/confluence/display/OPS/Config+Guide">the settings</a></li>
</ol>
<ac:structured-macro ac:name="code" ac:schema-version="1"><ac:parameter ac:name="language">python</ac:parameter><ac:parameter ac:name="linenumbers">true</ac:parameter><ac:plain-text-body><![CDATA[def main() -> None:
    print("a < b && c")   # spacing kept]]></ac:plain-text-body></ac:structured-macro>
<ac:structured-macro ac:name="noformat"><ac:plain-text-body><![CDATA[raw   output &nbsp; <b>as is</b>]]></ac:plain-text-body></ac:structured-macro>
<ac:structured-macro ac:name="info"><ac:rich-text-body><p>Runs every <strong>hour</strong>.</p></ac:rich-text-body></ac:structured-macro>
<ac:structured-macro ac:name="warning"><ac:parameter ac:name="title">Limits</ac:parameter><ac:rich-text-body><p>Never delete more than 20%.</p><ul><li>forced runs excepted</li></ul></ac:rich-text-body></ac:structured-macro>
<h2>Matrix</h2>
<table data-layout="default"><colgroup><col /><col /><col /></colgroup><tbody>
<tr><th><p>Region</p></th><th colspan="2"><p>Quarter</p></th></tr>
<tr><td rowspan="2"><p>EU</p></td><td>Q1</td><td>10</td></tr>
<tr><td>Q2</td><td>12 <ac:structured-macro ac:name="status"><ac:parameter ac:name="colour">Green</ac:parameter><ac:parameter ac:name="title">OK</ac:parameter></ac:structured-macro></td></tr>
</tbody></table>
<ac:structured-macro ac:name="expand"><ac:parameter ac:name="title">Details</ac:parameter><ac:rich-text-body><p>Hidden until expanded.</p></ac:rich-text-body></ac:structured-macro>
<ac:task-list>
<ac:task><ac:task-id>1</ac:task-id><ac:task-status>complete</ac:task-status><ac:task-body>Write the docs</ac:task-body></ac:task>
<ac:task><ac:task-id>2</ac:task-id><ac:task-status>incomplete</ac:task-status><ac:task-body>Review with <ac:link><ri:user ri:userkey="8a7f808a6" /></ac:link></ac:task-body></ac:task>
</ac:task-list>
<p>See <ac:link><ri:page ri:content-title="Runbook" /></ac:link>, <ac:link ac:anchor="Escalation"><ri:page ri:space-key="OPS" ri:content-title="On call" /><ac:plain-text-link-body><![CDATA[the on-call rota]]></ac:plain-text-link-body></ac:link> and <ac:link><ri:attachment ri:filename="design v2.pdf" /><ac:link-body>the <em>design</em></ac:link-body></ac:link>.</p>
<p><ac:image ac:alt="Architecture diagram" ac:width="600"><ri:attachment ri:filename="arch.png" /></ac:image></p>
<p><ac:image><ri:attachment ri:filename="flow.svg" /></ac:image> More at <a href="https://example.com/docs">the docs</a>, <a href="/confluence/pages/viewpage.action?pageId=12345">the old page</a> or <a href="#Matrix">the matrix</a>.</p>
"""

PAGE_MARKDOWN = """# Обзор сервиса

Сервис **ingest** синхронизирует пространства Confluence с Qdrant — владелец: @557058:f3a1c2d4.

## Installation

1. Install the package:
   - with `pip install ingest`
   - or from source
     - clone the *repository*
2. Configure [the settings](https://wiki.example.com/confluence/display/OPS/Config+Guide)

```python
def main() -> None:
    print("a < b && c")   # spacing kept
```

```
raw   output &nbsp; <b>as is</b>
```

> **Info:** Runs every **hour**.

> **Warning: Limits**
>
> Never delete more than 20%.
>
> - forced runs excepted

## Matrix

| Region | Quarter | Quarter |
| --- | --- | --- |
| EU | Q1 | 10 |
| EU | Q2 | 12 OK |

**Details**

Hidden until expanded.

- [x] Write the docs
- [ ] Review with @8a7f808a6

See [Runbook](https://wiki.example.com/confluence/display/ENG/Runbook), [the on-call rota](https://wiki.example.com/confluence/display/OPS/On+call#Escalation) and [the *design*](https://wiki.example.com/confluence/download/attachments/98765/design%20v2.pdf).

Architecture diagram

flow.svg More at [the docs](https://example.com/docs), [the old page](https://wiki.example.com/confluence/pages/viewpage.action?pageId=12345) or the matrix.
"""

PAGE_LINKS = [
    LinkRecord(
        f"{BASE}/display/OPS/Config+Guide",
        "page",
        "the settings",
        target_title="Config Guide",
        target_space_key="OPS",
    ),
    LinkRecord(
        f"{BASE}/display/ENG/Runbook",
        "page",
        "Runbook",
        target_title="Runbook",
        target_space_key="ENG",
    ),
    LinkRecord(
        f"{BASE}/display/OPS/On+call#Escalation",
        "page",
        "the on-call rota",
        target_title="On call",
        target_space_key="OPS",
    ),
    LinkRecord(
        f"{BASE}/download/attachments/98765/design%20v2.pdf",
        "attachment",
        "the *design*",
        target_page_id="98765",
        target_space_key="ENG",
        target_filename="design v2.pdf",
    ),
    LinkRecord("https://example.com/docs", "external", "the docs"),
    LinkRecord(
        f"{BASE}/pages/viewpage.action?pageId=12345",
        "page",
        "the old page",
        target_page_id="12345",
    ),
    LinkRecord("#Matrix", "anchor", "the matrix"),
]


def storage(body: str, *, page_id: str = "98765") -> NormalizedDocument:
    return normalize_bytes(
        body.encode(),
        "Service overview.page",
        mime=STORAGE_MIME,
        base_url=BASE,
        container="ENG",
        locator=page_id,
    )


def test_realistic_page_converts_to_exact_markdown() -> None:
    doc = storage(PAGE)
    assert doc.markdown == PAGE_MARKDOWN
    assert doc.warnings == ()
    assert doc.metadata["space_key"] == "ENG" and doc.metadata["page_id"] == "98765"


def test_realistic_page_yields_its_link_records_in_order() -> None:
    assert list(storage(PAGE).links) == PAGE_LINKS


def test_realistic_page_markdown_has_the_intended_structure() -> None:
    tokens = MarkdownIt("commonmark").enable("table").parse(PAGE_MARKDOWN)
    fences = [t.info for t in tokens if t.type == "fence"]
    assert fences == ["python", ""]
    assert sum(t.type == "table_open" for t in tokens) == 1
    assert sum(t.type == "blockquote_open" for t in tokens) == 2
    nested = [t.level for t in tokens if t.type == "bullet_list_open"]
    assert len(nested) == 4 and max(nested) > min(nested)


@pytest.mark.parametrize(
    ("href", "expected"),
    [
        (
            "/confluence/display/KEY/Page+Title",
            LinkRecord(
                f"{BASE}/display/KEY/Page+Title",
                "page",
                target_title="Page Title",
                target_space_key="KEY",
            ),
        ),
        (
            "https://wiki.example.com/confluence/display/KEY/2024/03/01/Blog+Post",
            LinkRecord(
                "https://wiki.example.com/confluence/display/KEY/2024/03/01/Blog+Post",
                "page",
                target_title="Blog Post",
                target_space_key="KEY",
            ),
        ),
        (
            "/confluence/pages/viewpage.action?pageId=4242",
            LinkRecord(f"{BASE}/pages/viewpage.action?pageId=4242", "page", target_page_id="4242"),
        ),
        (
            "/confluence/pages/viewpage.action?spaceKey=DOC&title=Install%20Guide",
            LinkRecord(
                f"{BASE}/pages/viewpage.action?spaceKey=DOC&title=Install%20Guide",
                "page",
                target_title="Install Guide",
                target_space_key="DOC",
            ),
        ),
        (
            "https://wiki.example.com/wiki/spaces/KEY/pages/123456/Some+Title",
            LinkRecord(
                "https://wiki.example.com/wiki/spaces/KEY/pages/123456/Some+Title",
                "page",
                target_page_id="123456",
                target_space_key="KEY",
            ),
        ),
        (
            "/confluence/download/attachments/777/report%202024.xlsx?version=1",
            LinkRecord(
                f"{BASE}/download/attachments/777/report%202024.xlsx?version=1",
                "attachment",
                target_page_id="777",
                target_filename="report 2024.xlsx",
            ),
        ),
        (
            "https://elsewhere.org/display/KEY/Title",
            LinkRecord("https://elsewhere.org/display/KEY/Title", "external"),
        ),
        ("mailto:team@example.com", LinkRecord("mailto:team@example.com", "external")),
        ("http://[broken/x", LinkRecord("http://[broken/x", "external")),
        ("#section-2", LinkRecord("#section-2", "anchor")),
        ("javascript:void(0)", None),
    ],
)
def test_confluence_url_forms_are_classified(href: str, expected: LinkRecord | None) -> None:
    assert classify_href(href, base_url=BASE) == expected


def test_url_forms_are_recognized_without_a_base_url() -> None:
    record = classify_href("https://acme.atlassian.net/wiki/spaces/HR/pages/55/Leave", "leave")
    assert record == LinkRecord(
        "https://acme.atlassian.net/wiki/spaces/HR/pages/55/Leave",
        "page",
        "leave",
        target_page_id="55",
        target_space_key="HR",
    )


def test_other_link_resources_and_macros() -> None:
    body = (
        '<p><ac:link><ri:blogpost ri:content-title="Launch" ri:posting-day="2024/05/02" />'
        "</ac:link> "
        '<ac:link><ri:attachment ri:filename="spec.docx"><ri:page ri:space-key="DOC" '
        'ri:content-title="Specs" /></ri:attachment></ac:link> '
        '<ac:link ac:anchor="Top"><ac:plain-text-link-body><![CDATA[top]]>'
        "</ac:plain-text-link-body></ac:link> "
        '<ac:link><ri:space ri:space-key="HR" /></ac:link> '
        '<ac:link><ri:user ri:username="jdoe" /></ac:link></p>'
        '<ac:structured-macro ac:name="children" />'
        '<ac:structured-macro ac:name="excerpt"><ac:rich-text-body><p>Short summary.</p>'
        "</ac:rich-text-body></ac:structured-macro>"
        '<ac:structured-macro ac:name="mystery-vendor-macro"><ac:parameter ac:name="x">1'
        "</ac:parameter><ac:rich-text-body><p>Vendor body kept.</p></ac:rich-text-body>"
        "</ac:structured-macro>"
        '<ac:structured-macro ac:name="jira"><ac:parameter ac:name="key">ENG-42'
        "</ac:parameter></ac:structured-macro>"
        '<ac:structured-macro ac:name="tip"><ac:rich-text-body><p>Use <code>--dry-run</code>.'
        "</p></ac:rich-text-body></ac:structured-macro>"
        '<ac:placeholder>Type here</ac:placeholder><p>End <ac:emoticon ac:name="smile" '
        'ac:emoji-fallback="🙂" /></p>'
    )
    doc = storage(body, page_id="")
    assert doc.markdown == (
        f"[Launch]({BASE}/display/ENG/2024/05/02/Launch) "
        f"[spec.docx]({BASE}/display/DOC/Specs?preview=/spec.docx) "
        f"top [HR]({BASE}/display/HR) @jdoe\n\n"
        "Short summary.\n\nVendor body kept.\n\nENG-42\n\n"
        "> **Tip:** Use `--dry-run`.\n\nEnd 🙂\n"
    )
    assert [
        (r.link_type, r.target_title, r.target_space_key, r.target_filename) for r in doc.links
    ] == [
        ("page", "Launch", "ENG", None),
        ("attachment", "Specs", "DOC", "spec.docx"),
        ("anchor", None, None, None),
        ("page", None, "HR", None),
    ]


def test_layouts_adf_extensions_titled_panels_and_dates() -> None:
    body = (
        '<ac:layout><ac:layout-section ac:type="two_equal"><ac:layout-cell><p>Left '
        '<time datetime="2024-06-30" /></p></ac:layout-cell><ac:layout-cell><p>Right</p>'
        "</ac:layout-cell></ac:layout-section></ac:layout>"
        '<ac:adf-extension><ac:adf-node type="panel"><ac:adf-attribute key="panel-type">note'
        "</ac:adf-attribute><ac:adf-content><p>ADF note body</p></ac:adf-content></ac:adf-node>"
        '<ac:adf-fallback><div class="panel"><p>fallback</p></div></ac:adf-fallback>'
        '</ac:adf-extension><ac:adf-extension><ac:adf-node type="decision-list">'
        '<ac:adf-node type="decision-item"><ac:adf-content>Ship on Monday</ac:adf-content>'
        '</ac:adf-node></ac:adf-node><ac:adf-fallback><ul class="decision-list"><li>Ship on '
        "Monday</li></ul></ac:adf-fallback></ac:adf-extension>"
        '<ac:structured-macro ac:name="panel"><ac:parameter ac:name="title">Contacts'
        "</ac:parameter><ac:rich-text-body><p>Ops team</p></ac:rich-text-body>"
        '</ac:structured-macro><ac:structured-macro ac:name="code"><ac:parameter '
        'ac:name="language">none</ac:parameter><ac:parameter ac:name="title">Example'
        "</ac:parameter><ac:plain-text-body><![CDATA[echo hi]]></ac:plain-text-body>"
        "</ac:structured-macro>"
    )
    assert storage(body).markdown == (
        "Left 2024-06-30\n\nRight\n\n> **Note:** ADF note body\n\n- Ship on Monday\n\n"
        "> **Contacts**\n>\n> Ops team\n\n**Example**\n\n```\necho hi\n```\n"
    )


def test_task_list_in_a_table_cell_stays_on_one_line() -> None:
    body = (
        "<table><tbody><tr><th>Owner</th><th>Tasks</th></tr><tr><td>Ann</td><td><ac:task-list>"
        "<ac:task><ac:task-id>1</ac:task-id><ac:task-status>complete</ac:task-status>"
        "<ac:task-body>Write</ac:task-body></ac:task><ac:task><ac:task-id>2</ac:task-id>"
        "<ac:task-status>incomplete</ac:task-status><ac:task-body>Review</ac:task-body>"
        "</ac:task></ac:task-list></td></tr></tbody></table>"
    )
    assert storage(body).markdown == (
        "| Owner | Tasks |\n| --- | --- |\n| Ann | [x] Write; [ ] Review |\n"
    )


def test_attachment_of_this_page_without_its_id_links_relative_to_the_page() -> None:
    doc = storage('<p><ac:link><ri:attachment ri:filename="a b.pdf" /></ac:link></p>', page_id="")
    assert doc.markdown == "[a b.pdf](?preview=/a%20b.pdf)\n"
    assert doc.links[0].target_filename == "a b.pdf" and doc.links[0].target_page_id is None


def test_user_mentions_use_the_resolver_when_given() -> None:
    body = '<p>Ask <ac:link><ri:user ri:account-id="abc-123" /></ac:link>.</p>'
    seen: list[UserRef] = []

    def resolver(user: UserRef) -> str | None:
        seen.append(user)
        return "Jane Doe" if user.account_id == "abc-123" else None

    ctx = NormalizeContext("page", base_url=BASE, container="ENG")
    doc = normalize_confluence(body.encode(), ctx, resolve_user=resolver)
    assert doc.markdown == "Ask @Jane Doe.\n"
    assert seen == [UserRef(account_id="abc-123")]
    assert doc.links == ()  # mentions are not links


BILLION_LAUGHS = (
    '<!DOCTYPE lolz [<!ENTITY lol "lol">'
    + "".join(
        f'<!ENTITY lol{i} "{("&lol" + (str(i - 1) if i > 2 else "") + ";") * 10}">'
        for i in range(2, 10)
    )
    + "]><p>&lol9;</p>"
)
XXE = '<!DOCTYPE p [<!ENTITY xxe SYSTEM "file:///etc/passwd">]><p>&xxe;</p>'


@pytest.mark.parametrize("payload", [BILLION_LAUGHS, XXE], ids=["billion-laughs", "xxe"])
def test_entity_declarations_are_refused_fast(payload: str) -> None:
    storage("<p>warm up</p>")
    started = time.perf_counter()
    with pytest.raises(IngestError) as err:
        storage(payload)
    assert time.perf_counter() - started < 1.0
    assert err.value.code is ErrorCode.CORRUPT
    assert "Service overview.page" in str(err.value) and "DTD" in str(err.value)


def test_undeclared_entities_are_not_resolved() -> None:
    doc = storage("<p>secret: &xxe; then &nbsp;&hellip; ok</p>")
    assert doc.markdown == "secret: then … ok\n"
    assert doc.warnings and "xxe" in doc.warnings[0]


def test_dtd_text_inside_code_is_content_not_a_dtd() -> None:
    body = (
        '<ac:structured-macro ac:name="code"><ac:parameter ac:name="language">xml'
        '</ac:parameter><ac:plain-text-body><![CDATA[<!DOCTYPE x [<!ENTITY a "b">]>]]>'
        "</ac:plain-text-body></ac:structured-macro>"
    )
    assert storage(body).markdown == '```xml\n<!DOCTYPE x [<!ENTITY a "b">]>\n```\n'


def test_2000_level_nested_list_fails_as_too_large_without_crashing() -> None:
    deep = "<ul>" + "".join(f"<li>item {i}<ul>" for i in range(2000)) + "</ul></li>" * 2000
    started = time.perf_counter()
    with pytest.raises(IngestError) as err:
        storage(deep + "</ul>")
    assert time.perf_counter() - started < 5.0
    assert err.value.code is ErrorCode.TOO_LARGE
    assert "Service overview.page" in str(err.value)


def test_100_level_nested_list_converts_with_bounded_markdown_nesting() -> None:
    deep = "<ul>" + "".join(f"<li>item{i}<ul>" for i in range(100)) + "</ul></li>" * 100
    doc = storage(deep + "</ul><p>after</p>")
    assert [w for w in doc.markdown.split() if w.startswith("item")] == [
        f"item{i}" for i in range(100)
    ]
    assert doc.markdown.endswith("after\n")
    assert max(len(line) - len(line.lstrip()) for line in doc.markdown.split("\n")) <= 16


def test_malformed_xhtml_is_recovered_with_a_warning() -> None:
    # Unclosed <p>/<b>, an HTML-style <br>: lxml's recovering XML parser (which keeps
    # the ac:/ri: namespaces) rebuilds the tree.
    doc = storage(
        "<p>one<br>two <b>bold</p><p>three"
        '<ac:structured-macro ac:name="note"><ac:rich-text-body><p>careful</ac:rich-text-body>'
        "</ac:structured-macro>"
    )
    assert doc.markdown == "one\ntwo **bold**\n\nthree\n\n> **Note:** careful\n"
    assert len(doc.warnings) == 1 and "malformed" in doc.warnings[0]


def test_unrecoverable_xhtml_fails_as_corrupt() -> None:
    body = '<p>intro</p><ac:structured-macro ac:name="code"><ac:plain-text-body><![CDATA[' + (
        "code that never ends " * 20
    )
    with pytest.raises(IngestError) as err:
        storage(body)
    assert err.value.code is ErrorCode.CORRUPT
    assert "Service overview.page" in str(err.value)


def test_body_mentioning_the_pdf_magic_is_still_storage_format() -> None:
    assert storage("<p>A PDF starts with <code>%PDF-1.7</code></p>").markdown == (
        "A PDF starts with `%PDF-1.7`\n"
    )


def test_invalid_utf8_fails_as_chunking_failed() -> None:
    with pytest.raises(IngestError) as err:
        normalize_bytes(b"<p>\xff\xfe</p>", "Broken page", mime=STORAGE_MIME)
    assert err.value.code is ErrorCode.CHUNKING_FAILED
    assert "Broken page" in str(err.value)


_STORAGE_SOUP = [
    "<p>", "</p>", "<ul><li>", "</li></ul>", '<ac:structured-macro ac:name="code">',
    '<ac:structured-macro ac:name="warning">', '<ac:structured-macro ac:name="toc">',
    '<ac:structured-macro ac:name="unknown-x">', "</ac:structured-macro>",
    '<ac:parameter ac:name="language">', '<ac:parameter ac:name="title">', "</ac:parameter>",
    "<ac:rich-text-body>", "</ac:rich-text-body>", "<ac:plain-text-body><![CDATA[x]]>",
    "</ac:plain-text-body>", "<ac:task-list><ac:task>", "<ac:task-status>complete",
    "</ac:task-status>", "<ac:task-body>", "</ac:task-body>", "</ac:task></ac:task-list>",
    "<ac:link>", "</ac:link>", '<ri:page ri:content-title="T" />', '<ri:user ri:userkey="u"/>',
    '<ri:attachment ri:filename="f.pdf">', "</ri:attachment>", "<ac:link-body>",
    "</ac:link-body>", '<ac:image ac:alt="alt">', "</ac:image>", "<table><tr><td>",
    "</td></tr></table>", "&nbsp;", "&bogus;", "<br>", "text", "Текст", " * ", "|",
]  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(_STORAGE_SOUP), max_size=50))
def test_storage_soup_converts_or_fails_as_corrupt(pieces: list[str]) -> None:
    # Called directly: normalize_bytes would turn a bug of ours into CORRUPT and hide it.
    ctx = NormalizeContext("soup", base_url=BASE, container="ENG")
    try:
        doc = normalize_confluence("".join(pieces).encode(), ctx)
    except IngestError as exc:
        assert exc.code is ErrorCode.CORRUPT and "soup" in str(exc)
        return
    assert all(record.link_type in ("page", "attachment") for record in doc.links)
