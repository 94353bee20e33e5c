"""The Confluence connector against the local Confluence REST API (testkit/confluence_api.py),
a real HTTP server on 127.0.0.1: Cloud (REST v2, with the v1 endpoints Atlassian removed
answering 410, none of which may be called: the `confluence_api` fixture checks) and
Data Center (REST v1). Cloud-only behaviour is in tests/test_confluence_cloud.py."""

from __future__ import annotations

import logging
import pickle
import re
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import pytest

from config.errors import ErrorCode, IngestError
from config.http_retry import wait_seconds
from connectors.base import DocumentGone, DocumentRef, SourceDocument
from connectors.confluence import (
    PAGE_MIME,
    ConfluenceConnector,
    ContentIndex,
    resolve_links,
)
from connectors.confluence.settings import ConfluenceSettings
from connectors.http import (
    SLOWEST_INTERVAL_S,
    HttpStatusError,
    PolicySession,
    RateLimiter,
    RetryPolicy,
    Throttled,
)
from normalizers.base import normalize_bytes
from normalizers.model import LinkRecord
from testkit.confluence_api import (
    FakeConfluence,
    FakeUser,
    Fixture,
    add_bulk_pages,
    build_fixture,
    confluence_api,
)

__all__ = ["confluence_api"]  # the fixture factory, used by name below

Factory = Callable[..., FakeConfluence]
EXTENSIONS = {".pdf", ".docx", ".xlsx", ".pptx", ".html", ".txt", ".md"}
LAYOUTS = ["cloud", "dc"]
# Where each layout's requests go, for faults aimed at one kind of request.
PATHS = {
    "cloud": {"space": "/api/v2/spaces", "listing": "/pages", "search": "/rest/api/search"},
    "dc": {
        "space": "/rest/api/space/",
        "listing": "/rest/api/content",
        "search": "/rest/api/content/search",
    },
}


def acl_payload(document: SourceDocument) -> dict[str, Any]:
    """A fetched document's access as its chunks carry it (`acl`)."""
    assert document.acl is not None, f"{document.ref.document_id} was fetched without access"
    return document.acl.payload()


def number(version: str) -> str:
    """Confluence's edit number in a listed version (`<number>.<access digest>`)."""
    return version.partition(".")[0]


def connector(
    api: FakeConfluence, token: str | None = None, **overrides: Any
) -> ConfluenceConnector:
    values: dict[str, Any] = {
        "url": api.base_url,
        "cloud": api.layout == "cloud",
        # Cloud: e-mail + API token (basic); DC: a personal access token (bearer).
        "username": api.username if api.layout == "cloud" else None,
        "spaces": ["ENG", "HR", "OPS"],
        "requests_per_second": 1000.0,
        "max_retries": 3,
        "backoff_base_s": 0.01,
        "backoff_max_s": 0.5,
        "timeout_s": 5.0,
    }
    values.update(overrides)
    return ConfluenceConnector(
        ConfluenceSettings.model_validate(values),
        api.token if token is None else token,
        attachment_extensions=EXTENSIONS,
    )


def listed(
    api: FakeConfluence,
) -> tuple[Fixture, ConfluenceConnector, dict[str, DocumentRef]]:
    """The fixture's pages, a connector to them, and its listing by document id."""
    fx = build_fixture(api)
    conn = connector(api)
    return fx, conn, {ref.document_id: ref for ref in conn.list_refs().refs}


def ids(refs: Any) -> set[str]:
    return {ref.document_id for ref in refs}


def expected_ids(api: FakeConfluence) -> set[str]:
    return {
        c.id
        for c in api.content.values()
        if c.type != "attachment" or any(c.title.lower().endswith(e) for e in EXTENSIONS)
    }


# --- listing -------------------------------------------------------------------------


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_1200_page_space_is_listed_completely(confluence_api: Factory, layout: str) -> None:
    api = confluence_api(layout, v2_max_limit=100)
    build_fixture(api)
    bulk = add_bulk_pages(api, "OPS", 1200)
    # The server caps `limit` at 100 whatever is asked: the client must follow next links.
    listing = connector(api, page_size=250).list_refs()
    assert listing.complete and not listing.errors
    assert len(listing.refs) == len(ids(listing.refs))  # no duplicates
    assert ids(listing.refs) == expected_ids(api)
    assert set(bulk) <= ids(listing.refs)
    assert api.requests["list"] >= 13
    by_id = {ref.document_id: ref for ref in listing.refs}
    assert number(by_id[bulk[-1]].version) == "1" and by_id[bulk[-1]].title == "Page 01199"


def test_listing_refs_carry_kind_parent_and_version(confluence_api: Factory) -> None:
    api = confluence_api("cloud")
    fx = build_fixture(api)
    api.edit(fx["pdf"], data=b"%PDF-1.4 new")
    conn = connector(api)
    refs = {ref.document_id: ref for ref in conn.list_refs().refs}
    assert refs[fx["guide"]].kind == "page"
    assert refs[fx["eng_blog"]].kind == "blogpost"
    assert refs[fx["hr_blog"]].title == "Новости отдела"
    pdf = refs[fx["pdf"]]
    assert (pdf.kind, pdf.parent_document_id, number(pdf.version)) == (
        "attachment",
        fx["guide"],
        "2",
    )
    assert refs[fx["docx"]].title == "Руководство.docx"
    assert fx["png"] not in refs  # not a supported attachment type
    assert refs[fx["guide"]].updated_at is not None
    assert datetime.fromisoformat(refs[fx["guide"]].updated_at or "").tzinfo is not None


def test_blog_posts_and_attachments_can_be_left_out(confluence_api: Factory) -> None:
    api = confluence_api("dc")
    fx = build_fixture(api)
    listing = connector(api, include_blogposts=False, include_attachments=False).list_refs()
    assert {ref.kind for ref in listing.refs} == {"page"}
    assert fx["guide"] in ids(listing.refs)


def test_missing_space_makes_the_listing_incomplete(confluence_api: Factory) -> None:
    api = confluence_api("dc")
    build_fixture(api)
    listing = connector(api, spaces=["ENG", "NOPE"]).list_refs()
    assert not listing.complete
    assert any("space NOPE" in e and "does not exist" in e for e in listing.errors)
    assert len(listing.refs) > 5  # the other space is still listed


# --- incremental ---------------------------------------------------------------------


@pytest.mark.parametrize("layout", LAYOUTS)
def test_poll_after_editing_three_pages_returns_exactly_those(
    confluence_api: Factory, layout: str
) -> None:
    api = confluence_api(layout)
    fx = build_fixture(api)  # last modified three days ago
    add_bulk_pages(api, "OPS", 200)
    conn = connector(api)
    known = {ref.document_id: ref.version for ref in conn.list_refs().refs}
    last_sync = datetime.now(UTC)
    edited = [fx["guide"], fx["vacation"], fx["hr_blog"]]
    for content_id in edited:
        api.edit(content_id, body=f"<p>edited {content_id}</p>")

    changed = list(conn.poll(last_sync))
    assert sorted(ids(changed)) == sorted(edited)
    assert all(number(ref.version) == "2" for ref in changed)

    # The caller fetches only what changed: one batch request for three pages (Cloud:
    # one per kind, two pages and a blog post).
    before = dict(api.requests)
    to_fetch = [ref for ref in changed if known.get(ref.document_id) != ref.version]
    docs = conn.fetch_many(to_fetch)
    assert all(isinstance(d, SourceDocument) for d in docs)
    assert {d.data.decode() for d in docs if isinstance(d, SourceDocument)} == {
        f"<p>edited {i}</p>" for i in edited
    }
    batch_route, batches = ("pages", 2) if layout == "cloud" else ("search", 1)
    assert api.requests[batch_route] - before.get(batch_route, 0) == batches
    assert api.requests["content"] == before.get("content", 0)
    assert [doc.ref.version for doc in docs if isinstance(doc, SourceDocument)] == [
        ref.version for ref in to_fetch
    ]


def test_poll_window_keeps_the_overlap_and_nothing_older(confluence_api: Factory) -> None:
    api = confluence_api("cloud")
    fx = build_fixture(api)
    now = datetime.now(UTC)
    api.edit(fx["notes"], when=now - timedelta(minutes=5))  # inside the 10-minute overlap
    api.edit(fx["deep"], when=now - timedelta(minutes=40))  # before it
    api.edit(fx["txt"], data=b"v1.1\n", when=now)  # an attachment
    changed = ids(connector(api).poll(now))
    assert changed == {fx["notes"], fx["txt"]}


# --- deletion and completeness -------------------------------------------------------


def test_deleted_page_is_reported_only_by_a_complete_listing(confluence_api: Factory) -> None:
    api = confluence_api("dc")
    fx = build_fixture(api)
    conn = connector(api, max_retries=2)
    before = ids(conn.list_refs().refs)
    api.delete(fx["notes"])  # with its attachments

    listing = conn.list_refs()
    assert listing.complete
    assert before - ids(listing.refs) == {fx["notes"], fx["txt"], fx["xlsx"]}

    api.delete(fx["deep"])
    api.fail(50, 503, path="/rest/api/content")  # a 503 storm that outlasts the retries
    stormy = conn.list_refs()
    assert not stormy.complete
    assert any("HTTP 503" in e and "gave up after 3 attempts" in e for e in stormy.errors)


def test_page_deleted_between_listing_and_fetch_is_gone(confluence_api: Factory) -> None:
    api = confluence_api("cloud")
    fx = build_fixture(api)
    conn = connector(api)
    api.delete_after_listing(fx["notes"])
    refs = {ref.document_id: ref for ref in conn.list_refs().refs}
    with pytest.raises(DocumentGone) as caught:
        conn.fetch(refs[fx["notes"]])
    assert caught.value.gone and caught.value.code is ErrorCode.FETCH_FAILED
    assert not caught.value.transient
    # Its attachment went with it (deleted before the attachment listing ran).
    assert fx["txt"] not in refs
    attachment = DocumentRef(fx["txt"], "1", "confluence", kind="attachment")
    batch = conn.fetch_many([refs[fx["guide"]], refs[fx["notes"]], attachment])
    assert isinstance(batch[0], SourceDocument)
    assert isinstance(batch[1], DocumentGone) and isinstance(batch[2], DocumentGone)


def test_batch_fetch_does_not_take_search_index_lag_for_deletion(
    confluence_api: Factory,
) -> None:
    api = confluence_api("cloud")
    fx, conn, refs = listed(api)
    api.hide_from_search(fx["notes"])
    api.delete(fx["deep"])
    docs = conn.fetch_many([refs[fx["guide"]], refs[fx["notes"]], refs[fx["deep"]]])
    assert isinstance(docs[0], SourceDocument) and isinstance(docs[1], SourceDocument)
    assert docs[1].locator == fx["notes"]
    assert isinstance(docs[2], DocumentGone)


def test_page_edited_mid_run_is_fetched_at_its_new_version(confluence_api: Factory) -> None:
    api = confluence_api("dc")
    fx = build_fixture(api)
    conn = connector(api)
    api.edit_after_listing(fx["guide"], body="<p>newer</p>")
    ref = next(r for r in conn.list_refs().refs if r.document_id == fx["guide"])
    assert number(ref.version) == "1"
    doc = conn.fetch(ref)
    assert number(doc.ref.version) == "2" and doc.data == b"<p>newer</p>"


# --- HTTP policy ---------------------------------------------------------------------


@pytest.mark.parametrize("layout", LAYOUTS)
def test_429_storm_ends_in_success_after_the_retry_after_wait(
    confluence_api: Factory, layout: str
) -> None:
    api = confluence_api(layout)
    build_fixture(api)
    api.fail(3, 429, retry_after="0.2", path=PATHS[layout]["space"])
    started = time.monotonic()
    listing = connector(api, max_retries=4).list_refs()
    elapsed = time.monotonic() - started
    assert listing.complete
    assert api.requests["fault"] == 3
    assert elapsed >= 0.6  # three waits of 0.2 s, as the server asked


def test_429_without_retry_after_backs_off_and_succeeds(confluence_api: Factory) -> None:
    api = confluence_api("dc")
    build_fixture(api)
    api.fail(2, 429, path="/rest/api/content")
    listing = connector(api).list_refs()
    assert listing.complete and api.requests["fault"] == 2


def test_wait_headers_read_seconds_http_dates_and_iso_times() -> None:
    now = datetime(2026, 11, 25, 12, 0, 0, tzinfo=UTC)
    assert wait_seconds("2.5", now) == 2.5
    assert wait_seconds(format_datetime(now + timedelta(seconds=10), usegmt=True), now) == 10.0
    assert wait_seconds("2026-11-25T12:01:30Z", now) == 90.0
    assert wait_seconds("2026-11-25T12:00:05.500+00:00", now) == 5.5
    assert wait_seconds("2026-11-25T11:00:00Z", now) == 0.0  # already past: go now
    assert wait_seconds("86400", now) == 86400.0  # never cut short here: the caller decides
    for bad in ("soon-ish", "", "nan", "inf", "2026-13-45T99:00:00Z"):
        assert wait_seconds(bad, now) is None, bad
    policy = RetryPolicy(max_retries=3, backoff_base_s=1.0, backoff_max_s=30.0)
    assert all(0.5 <= policy.backoff(0) <= 1.0 for _ in range(50))
    assert all(policy.backoff(10) <= 30.0 for _ in range(50))


def rate_session(
    api: FakeConfluence, *, per_second: float = 1000.0, retries: int = 2, cap: float = 1.0
) -> PolicySession:
    # backoff steps of 5 s: a test that ends sooner was not backing off
    policy = RetryPolicy(max_retries=retries, backoff_base_s=5.0, backoff_max_s=cap)
    session = PolicySession(policy, requests_per_second=per_second, max_concurrency=4, timeout_s=5)
    session.headers["Authorization"] = f"Bearer {api.token}"
    return session


def soon(seconds: float) -> str:
    return (datetime.now(UTC) + timedelta(seconds=seconds)).isoformat()


@pytest.mark.parametrize(
    ("status", "header", "value"),
    [
        (429, "Retry-After", "0.4"),
        (429, "X-RateLimit-Reset", "iso"),
        (429, "Beta-Retry-After", "0.4"),
        (429, "X-Beta-RateLimit-Reset", "iso"),
        (503, "X-RateLimit-Reset", "iso"),
    ],
)
def test_a_429_or_503_waits_as_each_header_asks(
    confluence_api: Factory, status: int, header: str, value: str
) -> None:
    api = confluence_api("dc")
    api.add_space("ENG")
    api.fail(1, status, headers={header: soon(0.4) if value == "iso" else value})
    started = time.monotonic()
    rate_session(api).get(f"{api.base_url}/rest/api/space/ENG").raise_for_status()
    elapsed = time.monotonic() - started
    assert api.requests["fault"] == 1
    assert 0.3 <= elapsed < 2.0  # never sooner than asked (ISO: to the millisecond), no backoff


def test_retry_after_is_read_before_the_reset_headers(confluence_api: Factory) -> None:
    api = confluence_api("dc")
    api.add_space("ENG")
    api.fail(1, 429, retry_after="0.2", headers={"X-RateLimit-Reset": soon(3600)})
    started = time.monotonic()
    rate_session(api).get(f"{api.base_url}/rest/api/space/ENG").raise_for_status()
    assert 0.2 <= time.monotonic() - started < 2.0


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_wait_past_the_cap_reports_the_source_throttled_with_the_time_asked(
    confluence_api: Factory, layout: str
) -> None:
    api = confluence_api(layout)
    build_fixture(api)
    api.fail(1, 429, headers={"X-RateLimit-Reset": soon(3600)}, path=PATHS[layout]["space"])
    started = time.monotonic()
    listing = connector(api).list_refs()  # backoff_max_s 0.5
    assert time.monotonic() - started < 2.0  # not waited out, not retried sooner
    assert not listing.complete and listing.errors
    assert "throttled" in listing.errors[0] and "X-RateLimit-Reset" in listing.errors[0]
    assert re.search(r"asked to wait 3(600|599) s", listing.errors[0])
    # nothing more is sent until the time asked: every space fails at once, one request made
    assert api.requests["fault"] == 1 and sum(api.requests.values()) == 1
    assert len(listing.errors) == (1 if layout == "cloud" else 3)


def test_a_throttled_request_fails_transient_and_names_the_wait(confluence_api: Factory) -> None:
    api = confluence_api("dc")
    api.add_space("ENG")
    session = rate_session(api)
    api.fail(1, 503, headers={"Beta-Retry-After": "120"})
    with pytest.raises(Throttled) as caught:
        session.get(f"{api.base_url}/rest/api/space/ENG")
    assert caught.value.transient and caught.value.code is ErrorCode.FETCH_FAILED
    assert "120 s (Beta-Retry-After: 120)" in caught.value.message
    with pytest.raises(Throttled, match="not sent"):
        session.get(f"{api.base_url}/rest/api/space/ENG")
    assert api.requests["fault"] == 1 and api.requests["space"] == 0
    assert pickle.loads(pickle.dumps(caught.value)).message == caught.value.message


def test_a_malformed_reset_header_is_named_and_backed_off_and_the_page_indexed(
    confluence_api: Factory, caplog: pytest.LogCaptureFixture
) -> None:
    api = confluence_api("dc")
    fx = build_fixture(api)
    api.fail(1, 429, headers={"X-RateLimit-Reset": "whenever"}, path=PATHS["dc"]["listing"])
    with caplog.at_level(logging.WARNING, logger="connectors.http"):
        conn = connector(api)
        listing = conn.list_refs()
    assert listing.complete and fx["guide"] in ids(listing.refs)
    assert any(
        "X-RateLimit-Reset" in r.getMessage() and "'whenever'" in r.getMessage()
        for r in caplog.records
    )
    guide = next(r for r in listing.refs if r.document_id == fx["guide"])
    assert isinstance(conn.fetch(guide), SourceDocument)


def test_near_limit_slows_the_client_before_it_is_throttled(confluence_api: Factory) -> None:
    api = confluence_api("dc")
    api.add_space("ENG")
    url = f"{api.base_url}/rest/api/space/ENG"

    def six_requests(session: PolicySession) -> float:
        started = time.monotonic()
        for _ in range(6):
            session.get(url).raise_for_status()
        return time.monotonic() - started

    assert six_requests(rate_session(api, per_second=100)) < 0.3  # 5 gaps of 10 ms
    api.near_limit(6)
    # each answer doubles the interval: gaps of 20, 40, 80, 160 and 320 ms
    assert six_requests(rate_session(api, per_second=100)) >= 0.3


def test_the_pace_eases_back_once_the_server_stops_warning() -> None:
    limiter = RateLimiter(per_second=100)
    limiter.slow_down()
    limiter.slow_down()  # answers to concurrent requests: one step, not two
    assert limiter.interval == pytest.approx(0.02)
    for _ in range(100):
        limiter.ease()
    assert limiter.interval == pytest.approx(0.01)
    slow = RateLimiter(per_second=1.5)
    slow.slow_down()
    time.sleep(0.55)
    slow.slow_down()
    assert slow.interval == SLOWEST_INTERVAL_S  # never slower than one request a second


@pytest.mark.parametrize("layout", LAYOUTS)
def test_5xx_truncated_bodies_and_resets_are_retried(confluence_api: Factory, layout: str) -> None:
    api = confluence_api(layout)
    fx = build_fixture(api)
    paths = PATHS[layout]
    api.fail(1, 500, path=paths["space"])
    api.fail(1, 502, path=paths["listing"])
    api.truncate(2, path=paths["listing"])
    api.reset(2, path=paths["search"])
    conn = connector(api, max_retries=6)
    listing = conn.list_refs()
    assert listing.complete and ids(listing.refs) == expected_ids(api)
    assert api.requests["fault"] == 2
    api.truncate(1, path="/download/")  # a binary body cut short
    api.reset(1, path="/download/")
    pdf = next(r for r in listing.refs if r.document_id == fx["pdf"])
    assert conn.fetch(pdf).data == api.content[fx["pdf"]].data


def test_slow_response_times_out_and_is_retried(confluence_api: Factory) -> None:
    api = confluence_api("dc")
    build_fixture(api)
    api.slow(1, 2.0, path="/rest/api/space/")
    started = time.monotonic()
    listing = connector(api, timeout_s=0.3).list_refs()
    assert listing.complete
    assert time.monotonic() - started < 1.9


@pytest.mark.parametrize("layout", LAYOUTS)
def test_wrong_token_is_a_clear_error_without_retries(confluence_api: Factory, layout: str) -> None:
    api = confluence_api(layout)
    build_fixture(api)
    with pytest.raises(IngestError) as caught:
        connector(api, token="wrong-token-123").list_refs()
    message = str(caught.value)
    assert "rejected the credentials (HTTP 401)" in message
    assert ("API token" if layout == "cloud" else "personal access token") in message
    assert "wrong-token-123" not in message
    assert api.requests["unauthorized"] == 1


def test_dc_accepts_user_and_password(confluence_api: Factory) -> None:
    api = confluence_api("dc")
    build_fixture(api)
    conn = connector(api, token=api.password, username=api.username)
    assert conn.list_refs().complete


def test_forbidden_page_says_it_is_restricted(confluence_api: Factory) -> None:
    api = confluence_api("dc")
    fx = build_fixture(api)
    conn = connector(api)
    ref = next(r for r in conn.list_refs().refs if r.document_id == fx["notes"])
    api.forbid(fx["notes"])
    with pytest.raises(IngestError) as caught:
        conn.fetch(ref)
    assert not isinstance(caught.value, DocumentGone)
    assert "restricted" in str(caught.value) and "Release Notes" not in str(caught.value)


def test_rate_and_concurrency_caps(confluence_api: Factory) -> None:
    api = confluence_api("dc")
    build_fixture(api)
    url = f"{api.base_url}/rest/api/space/ENG"
    policy = RetryPolicy(max_retries=0, backoff_base_s=0.01, backoff_max_s=0.1)
    rated = PolicySession(policy, requests_per_second=20, max_concurrency=8, timeout_s=5)
    rated.headers["Authorization"] = f"Bearer {api.token}"
    started = time.monotonic()
    for _ in range(11):
        rated.get(url).raise_for_status()
    assert time.monotonic() - started >= 0.45  # 10 gaps of 50 ms

    narrow = PolicySession(policy, requests_per_second=1000, max_concurrency=2, timeout_s=5)
    narrow.headers["Authorization"] = f"Bearer {api.token}"
    api.slow(6, 0.2, path="/rest/api/space/")
    threads = [threading.Thread(target=lambda: narrow.get(url)) for _ in range(6)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert time.monotonic() - started >= 0.55  # 6 requests, 2 at a time, 0.2 s each


def test_not_found_raises_at_once_with_the_path_only(confluence_api: Factory) -> None:
    api = confluence_api("dc")
    policy = RetryPolicy(max_retries=5, backoff_base_s=1.0, backoff_max_s=1.0)
    session = PolicySession(policy, requests_per_second=1000, max_concurrency=2, timeout_s=5)
    session.headers["Authorization"] = f"Bearer {api.token}"
    started = time.monotonic()
    with pytest.raises(HttpStatusError) as caught:
        session.get(f"{api.base_url}/rest/api/space/NOPE?secret=abc")
    assert time.monotonic() - started < 0.5
    assert caught.value.status == 404
    assert "/rest/api/space/NOPE" in str(caught.value) and "secret=abc" not in str(caught.value)


def test_errors_survive_pickling() -> None:
    gone = pickle.loads(pickle.dumps(DocumentGone("page 1 no longer exists", "page 1")))
    assert isinstance(gone, DocumentGone) and gone.gone and gone.subject == "page 1"
    status = pickle.loads(pickle.dumps(HttpStatusError(404, "not found", "GET /x")))
    assert status.status == 404 and str(status) == "FETCH_FAILED: GET /x: not found"


# --- content -------------------------------------------------------------------------


@pytest.mark.parametrize("layout", LAYOUTS)
def test_page_fetch_carries_storage_body_and_metadata(confluence_api: Factory, layout: str) -> None:
    api = confluence_api(layout)
    fx, conn, refs = listed(api)
    doc = conn.fetch(refs[fx["guide"]])
    assert doc.mime == PAGE_MIME and doc.filename == "Install Guide.confluence"
    assert b"ri:content-title" in doc.data  # storage format, not rendered HTML
    assert doc.title == "Install Guide" and doc.container == "ENG" and doc.locator == fx["guide"]
    assert doc.labels == ("install", "howto")
    assert doc.author == "Alice Liddell"
    assert doc.updated_at and doc.updated_at.endswith("+00:00")
    assert doc.metadata["ancestors"] == [{"id": fx["eng_home"], "title": "Engineering Home"}]
    assert doc.source_url and doc.source_url.startswith(api.base_url + "/")
    if layout == "cloud":
        assert doc.source_url.startswith(f"{api.host_url}/wiki/spaces/ENG/pages/{fx['guide']}/")
    russian = conn.fetch(refs[fx["vacation"]])
    assert russian.title == "Отпуск и больничные" and russian.author == "Иван Петров"
    assert russian.labels == ("отпуск",)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_attachments_download_through_the_context_path(
    confluence_api: Factory, layout: str
) -> None:
    api = confluence_api(layout)
    fx, conn, refs = listed(api)
    for name in ("pdf", "docx"):
        doc = conn.fetch(refs[fx[name]])
        assert doc.data == api.content[fx[name]].data
        assert doc.locator == fx["guide"] and doc.ref.parent_document_id == fx["guide"]
        assert doc.container == "ENG"
    assert doc.filename == "Руководство.docx"
    assert doc.mime and "wordprocessingml" in doc.mime
    downloads = [p for p in api.paths if "/download/attachments/" in p]
    assert len(downloads) == 2
    assert all(p.startswith(api.context + "/download/") for p in downloads)
    if layout == "cloud":
        assert all(p.startswith("/wiki/") for p in api.paths)


def test_oversized_attachment_is_refused_before_download(confluence_api: Factory) -> None:
    api = confluence_api("cloud")
    fx = build_fixture(api)
    conn = connector(api, attachment_max_bytes=100)
    ref = next(r for r in conn.list_refs().refs if r.document_id == fx["pdf"])
    with pytest.raises(IngestError) as caught:
        conn.fetch(ref)
    assert caught.value.code is ErrorCode.TOO_LARGE and caught.value.subject == "install.pdf"
    assert not any("/download/" in p for p in api.paths)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_restrictions_become_the_acl(confluence_api: Factory, layout: str) -> None:
    api = confluence_api(layout)
    fx = build_fixture(api)
    locked = api.add_attachment(fx["secret_child"], "keys.txt", b"k", "text/plain")
    conn = connector(api)
    refs = {ref.document_id: ref for ref in conn.list_refs().refs}
    docs = conn.fetch_many([refs[fx["guide"]], refs[fx["secret"]], refs[fx["secret_child"]]])
    public, secret, child = (d for d in docs if isinstance(d, SourceDocument))
    alice, bob = api.users["alice"], api.users["bob"]

    def name(user: FakeUser) -> str:
        return user.account_id if layout == "cloud" else user.username

    # Who may read the space (by default the group `confluence-users`) narrows every page.
    space = {
        "space": "ENG",
        "space_open": False,
        "space_users": [],
        "space_groups": ["confluence-users"],
    }
    assert acl_payload(public) == {
        "public": False,
        "users": [],
        "groups": [],
        "restricted": False,
        **space,
    }
    assert acl_payload(secret) == {
        "public": False,
        "users": [name(alice), name(bob)],
        "groups": ["security", "admins"],
        "restricted": True,
        **space,
    }
    # The child is readable only by who passes its own and its ancestor's restrictions.
    assert acl_payload(child) == {
        "public": False,
        "users": [name(alice)],
        "groups": ["security"],
        "restricted": True,
        **space,
    }
    assert acl_payload(conn.fetch(refs[locked])) == acl_payload(child)
    # A page under a restricted ancestor inherits it even when itself unrestricted.
    api.restrict(fx["secret_child"])
    if layout == "cloud":
        conn.list_refs()  # Cloud reads restrictions in bulk, once per listing (v2 has none)
    inherited = conn.fetch(DocumentRef(fx["secret_child"], "1", "confluence"))
    assert acl_payload(inherited)["users"] == [name(alice), name(bob)]


def test_access_changes_without_an_edit_change_the_listed_version(
    confluence_api: Factory,
) -> None:
    """Restricting a page, moving one, renaming an ancestor bump no version number in
    Confluence; the listed version carries an access digest, so each is seen, for the
    pages (and attachments) whose access changed and no other."""
    api = confluence_api("cloud")
    fx = build_fixture(api)
    conn = connector(api)

    def versions() -> dict[str, str]:
        return {ref.document_id: ref.version for ref in conn.list_refs().refs}

    def changed(before: dict[str, str], after: dict[str, str]) -> set[str]:
        assert {number(v) for v in before.values()} == {number(v) for v in after.values()}
        return {d for d in before if before[d] != after[d]}

    refs = conn.list_refs().refs

    def with_attachments(pages: set[str]) -> set[str]:
        return pages | {r.document_id for r in refs if r.parent_document_id in pages}

    start = versions()
    assert versions() == start  # stable

    # the guide and the page under it (it inherits the restriction), with attachments
    api.restrict(fx["guide"], users=["alice"])
    restricted = versions()
    assert changed(start, restricted) == with_attachments({fx["guide"], fx["deep"]})
    fetched = conn.fetch(next(r for r in conn.list_refs().refs if r.document_id == fx["guide"]))
    assert fetched.ref.version == restricted[fx["guide"]]  # fetch and listing agree
    assert acl_payload(fetched)["public"] is False

    api.move(fx["deep"], None)  # out from under the restricted guide
    moved = versions()
    assert changed(restricted, moved) == with_attachments({fx["deep"]})

    api.edit(fx["eng_home"], title="Engineering")  # the ancestors' titles are in payloads
    renamed = versions()
    assert number(renamed[fx["eng_home"]]) == str(int(number(moved[fx["eng_home"]])) + 1)
    del renamed[fx["eng_home"]], moved[fx["eng_home"]]
    under_home = {fx["guide"], fx["notes"], fx["secret"], fx["secret_child"]}
    assert changed(moved, renamed) == with_attachments(under_home)


def test_links_resolve_to_synced_pages(confluence_api: Factory) -> None:
    api = confluence_api("dc")
    fx = build_fixture(api)
    conn = connector(api, spaces=["ENG", "HR"])
    conn.list_refs()
    index: ContentIndex = conn.index
    links = [
        LinkRecord("", "page", target_title="Release Notes"),
        LinkRecord("", "page", target_title="Отпуск и больничные", target_space_key="HR"),
        LinkRecord("", "page", target_page_id=fx["deep"]),
        LinkRecord("", "page", target_title="Install+Guide", target_space_key="ENG"),
        LinkRecord("", "page", target_title="Runbooks", target_space_key="OPS"),  # not synced
        LinkRecord("", "attachment", target_filename="install.pdf"),
        LinkRecord("", "attachment", target_filename="changelog.txt", target_title="Release Notes"),
        LinkRecord("https://example.com", "external"),
    ]
    assert resolve_links(links, index, space_key="ENG", page_id=fx["guide"]) == [
        fx["notes"],
        fx["vacation"],
        fx["deep"],
        fx["guide"],
        None,
        fx["pdf"],
        fx["txt"],
        None,
    ]


def test_secrets_never_reach_logs_or_reprs(
    confluence_api: Factory, caplog: pytest.LogCaptureFixture
) -> None:
    api = confluence_api("dc")
    fx = build_fixture(api)
    caplog.set_level(logging.DEBUG)
    conn = connector(api)
    api.fail(1, 503, path="/rest/api/content")
    refs = conn.list_refs().refs
    conn.fetch_many(refs)
    with pytest.raises(IngestError):
        connector(api, token="bad-" + api.token).fetch(DocumentRef(fx["guide"], "1", "confluence"))
    text = caplog.text + repr(conn) + repr(conn._session.auth)
    assert api.token not in text
    assert "Authorization" not in caplog.text


def test_cloud_is_detected_and_wiki_path_added() -> None:
    def settings(**values: str) -> ConfluenceSettings:
        return ConfluenceSettings.model_validate(values)

    conn = ConfluenceConnector(
        settings(url="https://acme.atlassian.net/", username="me@acme.com"), "t0ken"
    )
    assert conn.cloud and conn.base_url == "https://acme.atlassian.net/wiki"
    dc = ConfluenceConnector(settings(url="https://wiki.acme.com/confluence/"), "pat")
    assert not dc.cloud and dc.base_url == "https://wiki.acme.com/confluence"
    with pytest.raises(IngestError, match=r"confluence\.username"):
        ConfluenceConnector(settings(url="https://acme.atlassian.net/wiki"), "t0ken")


def test_fetched_page_normalizes_and_its_links_resolve(confluence_api: Factory) -> None:
    api = confluence_api("cloud")
    fx, conn, refs = listed(api)
    doc = conn.fetch(refs[fx["guide"]])
    normalized = normalize_bytes(
        doc.data,
        doc.filename,
        mime=doc.mime,
        base_url=doc.base_url,
        container=doc.container,
        locator=doc.locator,
    )
    assert normalized.metadata["format"] == "confluence"
    resolved = resolve_links(
        normalized.links, conn.index, space_key=doc.container or "", page_id=doc.locator
    )
    assert {fx["notes"], fx["vacation"]} <= set(resolved)


def test_every_fixture_attachment_downloads_and_normalizes(confluence_api: Factory) -> None:
    api = confluence_api("dc")
    build_fixture(api)
    conn = connector(api)
    attachments = [ref for ref in conn.list_refs().refs if ref.kind == "attachment"]
    assert {ref.title.rsplit(".", 1)[-1] for ref in attachments if ref.title} == {
        e.lstrip(".") for e in EXTENSIONS
    }
    for doc in conn.fetch_many(attachments):
        assert isinstance(doc, SourceDocument), doc
        normalized = normalize_bytes(doc.data, doc.filename, mime=doc.mime)
        assert normalized.markdown.strip(), doc.filename


# --- space permissions and comments (both deployment types) --------------------------


@pytest.mark.parametrize("layout", LAYOUTS)
def test_space_read_permission_narrows_every_page(confluence_api: Factory, layout: str) -> None:
    api = confluence_api(layout)
    fx = build_fixture(api)
    api.grant_space("HR", users=["ivan"], groups=["hr"])
    conn = connector(api)
    refs = {ref.document_id: ref for ref in conn.list_refs().refs}
    vacation = conn.fetch(refs[fx["vacation"]])
    ivan = api.users["ivan"]
    assert acl_payload(vacation)["public"] is False and acl_payload(vacation)["restricted"] is False
    assert acl_payload(vacation)["space_users"] == [
        ivan.account_id if layout == "cloud" else "ivan"
    ]
    assert (
        acl_payload(vacation)["space_groups"] == ["hr"]
        and acl_payload(vacation)["space_open"] is False
    )


def test_data_center_without_space_permissions_keeps_restrictions_alone(
    confluence_api: Factory, caplog: pytest.LogCaptureFixture
) -> None:
    api = confluence_api("dc")
    fx = build_fixture(api)
    api.space_permissions_api = False  # Data Center before 9.1
    conn = connector(api)
    fetched = conn.fetch_many(conn.list_refs().refs)
    docs = {d.ref.document_id: d for d in fetched if isinstance(d, SourceDocument)}
    assert len(docs) == len(fetched)
    guide, secret = docs[fx["guide"]], docs[fx["secret"]]
    assert acl_payload(guide)["public"] is True and acl_payload(guide)["space_open"] is True
    assert acl_payload(secret)["public"] is False and acl_payload(secret)["groups"] == [
        "security",
        "admins",
    ]
    assert "access follows the page restrictions only" in caplog.text


@pytest.mark.parametrize("layout", LAYOUTS)
def test_footer_comments_end_the_page_and_their_changes_relist_it(
    confluence_api: Factory, layout: str
) -> None:
    api = confluence_api(layout)
    fx = build_fixture(api)
    conn = connector(api, include_inline_comments=False)

    def versions() -> dict[str, str]:
        return {ref.document_id: ref.version for ref in conn.list_refs().refs}

    start = versions()
    question = api.add_comment(fx["vacation"], "<p>Сколько дней <em>отпуска</em>?</p>")
    api.add_comment(fx["vacation"], "<p>28 дней.</p>", reply_to=question, author="alice")
    api.add_comment(fx["vacation"], "<p>typo here</p>", author="bob", inline=True)
    commented = versions()
    assert {d for d in start if start[d] != commented[d]} == {fx["vacation"]}
    ref = next(r for r in conn.list_refs().refs if r.document_id == fx["vacation"])
    doc = conn.fetch(ref)
    assert doc.ref.version == ref.version  # fetch and listing agree
    normalized = normalize_bytes(doc.data, doc.filename, mime=doc.mime)
    markdown = normalized.markdown
    comments = markdown[markdown.index("## Comments") :]
    assert "**Bob Builder**" in comments and "**Alice Liddell**" in comments
    assert comments.index("Сколько дней") < comments.index("28 дней.")
    assert "> " in comments  # the reply quotes under the question
    assert "typo here" not in markdown  # inline comments are not synced when left out
    assert markdown.index("Смотрите") < markdown.index("## Comments")
    api.delete(question)
    assert versions() == start


def comments_markdown(document: SourceDocument) -> str:
    markdown = normalize_bytes(document.data, document.filename, mime=document.mime).markdown
    return markdown[markdown.index("## Comments") :]


@pytest.mark.parametrize("layout", ["cloud", "cloud without CQL", "dc"])
def test_inline_comments_quote_their_text_and_each_change_relists_only_their_page(
    confluence_api: Factory, layout: str
) -> None:
    api = confluence_api(layout.split()[0])
    fx = build_fixture(api)
    if layout == "cloud without CQL":
        api.retire("/rest/api/search")
    conn = connector(api)

    def fetch() -> SourceDocument:
        ref = next(r for r in conn.list_refs().refs if r.document_id == fx["deep"])
        document = conn.fetch(ref)
        assert document.ref.version == ref.version  # fetch and listing agree
        return document

    def changed(before: dict[str, str]) -> set[str]:
        after = {ref.document_id: ref.version for ref in conn.list_refs().refs}
        assert after.keys() == before.keys()
        return {d for d in after if after[d] != before[d]}

    start = {ref.document_id: ref.version for ref in conn.list_refs().refs}
    remark = api.add_comment(
        fx["deep"], "<p>Is it <strong>four</strong> now?</p>", inline=True, selection="three"
    )
    api.add_comment(fx["deep"], "<p>Still three.</p>", inline=True, reply_to=remark)
    api.add_comment(fx["deep"], "<p>Footer remark.</p>", author="ivan")
    assert changed(start) == {fx["deep"]}  # not its attachment: comments are the page's
    added = {ref.document_id: ref.version for ref in conn.list_refs().refs}
    comments = comments_markdown(fetch())
    assert "Footer remark." in comments
    assert "inline comment (open) on “three”" in comments and "Is it **four** now?" in comments
    assert (
        comments.index("Footer remark.") < comments.index("four") < comments.index("Still three.")
    )
    assert "> " in comments[comments.index("four") :]  # the reply under its comment

    api.edit(remark, body="<p>Is it five now?</p>")
    assert changed(added) == {fx["deep"]}
    edited = {ref.document_id: ref.version for ref in conn.list_refs().refs}
    api.resolve(remark)  # no new version in Confluence: the resolution is in the digest
    assert changed(edited) == {fx["deep"]}
    assert "inline comment (resolved) on “three”" in comments_markdown(fetch())
    api.delete(remark)  # with its reply
    assert "five" not in comments_markdown(fetch())
    after = {ref.document_id: ref.version for ref in conn.list_refs().refs}
    assert {d for d in after if after[d] != added[d]} == {fx["deep"]}
    assert api.removed_calls == []


@pytest.mark.parametrize("layout", LAYOUTS)
def test_an_inline_comment_whose_text_is_gone_is_kept_with_a_warning(
    confluence_api: Factory, layout: str
) -> None:
    api = confluence_api(layout)
    fx = build_fixture(api)
    api.add_comment(fx["deep"], "<p>Why three?</p>", inline=True, selection="three levels")
    api.edit(fx["deep"], body="<p>nested two levels now</p>")  # the marked text is gone
    conn = connector(api)
    ref = next(r for r in conn.list_refs().refs if r.document_id == fx["deep"])
    document = conn.fetch(ref)
    comments = comments_markdown(document)
    assert "text no longer on the page “three levels”" in comments and "Why three?" in comments
    (warning,) = document.warnings
    assert "no longer on the page" in warning and "“three levels”" in warning
    assert "nested two levels now" in document.data.decode()  # the page itself is intact


@pytest.mark.parametrize("layout", LAYOUTS)
def test_inline_comments_can_be_left_out_at_no_cost(confluence_api: Factory, layout: str) -> None:
    api = confluence_api(layout)
    fx = build_fixture(api)
    api.add_comment(fx["deep"], "<p>Why three?</p>", inline=True, selection="three")
    conn = connector(api, include_inline_comments=False)
    start = {ref.document_id: ref.version for ref in conn.list_refs().refs}
    api.resolve(next(c.id for c in api.content.values() if c.type == "comment"))
    documents = conn.fetch_many(conn.list_refs().refs)
    assert {ref.document_id: ref.version for ref in conn.list_refs().refs} == start
    assert api.requests["comments"] == 0 and api.requests["children"] == 0
    assert not any(b"Why three?" in d.data for d in documents if isinstance(d, SourceDocument))


# --- what a space holds ---------------------------------------------------------------


@pytest.mark.parametrize("layout", LAYOUTS)
def test_archived_pages_are_skipped_unless_asked_for_then_marked(
    confluence_api: Factory, layout: str
) -> None:
    api = confluence_api(layout)
    fx = build_fixture(api)
    api.archive(fx["notes"])
    assert fx["notes"] not in ids(connector(api).list_refs().refs)  # current content only
    # (whiteboards are Cloud's: asking for them changes nothing on Data Center)
    conn = connector(api, include_archived=True, include_whiteboards=True)
    listing = conn.list_refs()
    assert listing.complete and {fx["notes"], fx["txt"]} <= ids(listing.refs)
    refs = {ref.document_id: ref for ref in listing.refs}
    notes, changelog = conn.fetch_many([refs[fx["notes"]], refs[fx["txt"]]])
    assert isinstance(notes, SourceDocument) and isinstance(changelog, SourceDocument)
    assert notes.metadata["archived"] is True and changelog.metadata["archived"] is True
    assert notes.ref.version == refs[fx["notes"]].version
    assert "archived" not in conn.fetch(refs[fx["guide"]]).metadata
    api.archive(fx["notes"], archived=False)  # restoring bumps no version: the page and
    after = {ref.document_id: ref.version for ref in conn.list_refs().refs}  # its files relist
    assert {d for d in refs if refs[d].version != after[d]} == {fx["notes"], fx["txt"], fx["xlsx"]}
