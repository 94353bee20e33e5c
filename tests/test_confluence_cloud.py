"""Confluence Cloud on REST v2 against the local API's Cloud layout, where the v1
endpoints Atlassian removed answer 410 (the `confluence_api` fixture fails a test that
calls one): v2 for everything v2 offers, v1 only for CQL, read restrictions and group
names; a 410 never deletes; without CQL nothing is lost; restrictions that cannot be
read fail closed."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from config.errors import ErrorCode, IngestError
from connectors.base import DocumentGone, SourceDocument
from connectors.confluence import ConfluenceConnector
from connectors.confluence.comments import COMMENTS_OPENING
from testkit.confluence_api import FakeConfluence, add_bulk_pages, build_fixture, confluence_api
from tests.test_confluence_connector import EXTENSIONS, acl_payload, connector, listed

__all__ = ["confluence_api"]  # the fixture factory, used by name below

Factory = Callable[..., FakeConfluence]
# The v1 endpoints a Cloud listing, fetch or poll may use: v2 has no equivalent.
V1_KEPT = {
    "/rest/api/search",
    "/rest/api/group/by-id",
    "/rest/api/content/{id}/restriction/byOperation/read",
}


def versions(conn: ConfluenceConnector) -> dict[str, str]:
    listing = conn.list_refs()
    assert listing.complete, listing.errors
    return {ref.document_id: ref.version for ref in listing.refs}


def documents(conn: ConfluenceConnector) -> dict[str, SourceDocument]:
    fetched = conn.fetch_many(conn.list_refs().refs)
    assert all(isinstance(doc, SourceDocument) for doc in fetched), fetched
    return {d.ref.document_id: d for d in fetched if isinstance(d, SourceDocument)}


# --- the APIs used -----------------------------------------------------------------


def test_listing_fetch_and_poll_use_v2_and_only_the_v1_that_v2_lacks(
    confluence_api: Factory,
) -> None:
    api = confluence_api("cloud")
    fx = build_fixture(api)
    api.add_comment(fx["guide"], "<p>Works on ARM too.</p>", when=datetime(2024, 5, 1, tzinfo=UTC))
    conn = connector(api)
    docs = documents(conn)
    assert set(docs) == {
        c.id
        for c in api.content.values()
        if c.type in ("page", "blogpost") or c.title.lower().endswith(tuple(EXTENSIONS))
    }
    api.edit(fx["notes"], body="<p>2.0</p>")
    assert {ref.document_id for ref in conn.poll(datetime.now(UTC))} == {fx["notes"]}
    assert api.removed_calls == []
    assert api.v1_paths() <= V1_KEPT
    v2 = {p for p in api.paths if "/api/v2/" in p}
    assert f"/wiki/api/v2/spaces/{api.space_ids['ENG']}/pages" in v2
    assert "/wiki/api/v2/pages" in v2 and "/wiki/api/v2/attachments" in v2
    assert all(p.startswith("/wiki/") and not p.startswith("/wiki/wiki") for p in api.paths)


def test_the_listing_costs_requests_per_250_items_not_per_page(confluence_api: Factory) -> None:
    api = confluence_api("cloud")
    api.add_space("BIG")
    add_bulk_pages(api, "BIG", 1100)
    conn = connector(api, spaces=["BIG"], page_size=250)
    listing = conn.list_refs()
    assert listing.complete and len(listing.refs) == 1100
    # spaces, permissions, 5 pages of pages, blog posts, 11 of CQL (the server caps v1
    # at 100), group names, attachments: no request per page
    assert sum(api.requests.values()) <= 22, api.requests
    before = sum(api.requests.values())
    assert versions(conn) == {ref.document_id: ref.version for ref in listing.refs}
    assert sum(api.requests.values()) - before <= 21  # relisting: group names are known


@pytest.mark.parametrize("next_in_body", [True, False])
def test_v2_cursors_are_followed_through_links_next_or_the_link_header(
    confluence_api: Factory, next_in_body: bool
) -> None:
    api = confluence_api("cloud", v2_max_limit=7)
    api.next_in_body = next_in_body
    build_fixture(api)
    bulk = add_bulk_pages(api, "OPS", 60)
    listing = connector(api, page_size=250).list_refs()
    assert listing.complete
    assert set(bulk) <= {ref.document_id for ref in listing.refs}
    assert api.requests["list"] >= 60 // 7
    assert not any(p.startswith("/wiki/wiki") for p in api.paths)


def test_missing_space_is_named_and_the_others_listed(confluence_api: Factory) -> None:
    api = confluence_api("cloud")
    fx = build_fixture(api)
    listing = connector(api, spaces=["ENG", "NOPE"]).list_refs()
    assert not listing.complete
    assert len(listing.errors) == 1 and "space NOPE" in listing.errors[0]
    assert fx["guide"] in {ref.document_id for ref in listing.refs}


# --- 410 is never a deletion -------------------------------------------------------


def test_410_on_a_content_endpoint_is_an_api_problem_and_never_a_deletion(
    confluence_api: Factory,
) -> None:
    api = confluence_api("cloud")
    fx, conn, refs = listed(api)
    api.delete(fx["notes"])  # a real deletion reads as one: v2 answers 404
    with pytest.raises(DocumentGone):
        conn.fetch(refs[fx["notes"]])
    api.retire("/api/v2/pages")
    api.retire("/api/v2/attachments")
    results = conn.fetch_many([refs[fx["guide"]], refs[fx["deep"]], refs[fx["pdf"]]])
    for result in results:
        assert isinstance(result, IngestError) and not isinstance(result, DocumentGone)
        assert result.code is ErrorCode.FETCH_FAILED and not result.transient
        assert "410 Gone" in result.message and "/wiki/api/v2/" in result.message
        assert "kept" in result.message


def test_space_lookup_answering_410_fails_the_listing_naming_the_space(
    confluence_api: Factory,
) -> None:
    api = confluence_api("cloud")
    build_fixture(api)
    api.retire("/api/v2/spaces")
    listing = connector(api).list_refs()
    assert not listing.complete and listing.refs == ()
    assert "ENG" in listing.errors[0] and "410" in listing.errors[0]
    assert "confluence.cloud" not in listing.errors[0]  # the hint is for Data Center reads


def test_a_cloud_site_read_as_data_center_fails_the_listing_saying_what_to_set(
    confluence_api: Factory,
) -> None:
    """A Cloud site on a domain of its own is not recognized by its host name: read as
    Data Center, its removed v1 endpoints answer 410, and the error says which setting
    reads it through REST v2."""
    api = confluence_api("cloud")
    build_fixture(api)
    listing = connector(api, cloud=False).list_refs()
    assert not listing.complete and listing.refs == ()
    assert len(listing.errors) == 3  # one per space, each naming it
    for space, error in zip(("ENG", "HR", "OPS"), listing.errors, strict=True):
        assert space in error and "410 Gone" in error and "confluence.cloud: true" in error
    assert api.removed_calls  # the v1 endpoints this test means to call
    api.removed_calls.clear()


# --- without CQL -------------------------------------------------------------------


def test_without_cql_the_listing_reads_the_same_versions_another_way(
    confluence_api: Factory,
) -> None:
    api = confluence_api("cloud")
    fx = build_fixture(api)
    api.add_comment(fx["guide"], "<p>first</p>")
    reply_to = api.add_comment(fx["notes"], "<p>question</p>")
    api.add_comment(fx["notes"], "<p>answer</p>", reply_to=reply_to, author="alice")
    with_cql = versions(connector(api))
    api.retire("/rest/api/search")
    conn = connector(api)
    before = api.requests["restrictions"]
    assert versions(conn) == with_cql
    pages = sum(1 for c in api.content.values() if c.type in ("page", "blogpost"))
    assert api.requests["restrictions"] - before == pages  # read page by page
    docs = documents(conn)
    assert acl_payload(docs[fx["secret_child"]])["users"] == [api.users["alice"].account_id]
    assert docs[fx["guide"]].labels == ("install", "howto")  # labels through v2
    assert b"answer" in docs[fx["notes"]].data


def test_poll_without_cql_compares_the_listing_with_the_last(confluence_api: Factory) -> None:
    api = confluence_api("cloud")
    fx = build_fixture(api)
    conn = connector(api)
    conn.list_refs()
    since = datetime.now(UTC)
    api.retire("/rest/api/search")
    api.edit(fx["notes"], body="<p>2.0</p>")
    api.restrict(fx["ops_home"], groups=["ops"])  # no new version in Confluence
    api.add_comment(fx["vacation"], "<p>Спасибо</p>")
    changed = {ref.document_id for ref in conn.poll(since)}
    assert changed == {fx["notes"], fx["ops_home"], fx["vacation"]}
    assert api.requests["retired"] >= 1


def test_unreadable_restrictions_fail_closed(confluence_api: Factory) -> None:
    api = confluence_api("cloud")
    fx = build_fixture(api)
    api.retire("/rest/api/search")
    api.retire("/rest/api/content")  # the read restrictions too
    conn = connector(api)
    listing = conn.list_refs()
    assert listing.complete  # every page listed: nothing is deleted
    refs = {ref.document_id: ref for ref in listing.refs}
    assert refs[fx["guide"]].version.endswith(".unreadable")
    for result in conn.fetch_many([refs[fx["guide"]], refs[fx["pdf"]]]):
        assert isinstance(result, IngestError) and not isinstance(result, DocumentGone)
        assert "who may read it is unknown" in result.message and "410" in result.message


# --- access ------------------------------------------------------------------------


def test_space_permissions_narrow_every_page_and_a_change_relists_them(
    confluence_api: Factory,
) -> None:
    api = confluence_api("cloud")
    fx = build_fixture(api)
    api.grant_space("HR", users=["ivan"], groups=["hr"])
    conn = connector(api)
    before = versions(conn)
    vacation = documents(conn)[fx["vacation"]]
    assert acl_payload(vacation) == {
        "public": False,
        "users": [],
        "groups": [],
        "restricted": False,
        "space": "HR",
        "space_open": False,
        "space_users": [api.users["ivan"].account_id],
        "space_groups": ["hr"],
    }
    api.grant_space("HR", groups=["hr", "managers"])
    after = versions(conn)
    hr = {c.id for c in api.content.values() if c.space_key == "HR"}
    assert {d for d in before if before[d] != after[d]} == hr


def test_a_space_role_with_read_access_is_left_out_and_noted_once_per_listing(
    confluence_api: Factory, caplog: pytest.LogCaptureFixture
) -> None:
    """A space role (Cloud's role-based space access): v2 names the role, not its
    members, so its read permission is left out of the ACL (narrower, never wider) and the
    listing says so once for the space, for the run report, instead of logging a warning."""
    api = confluence_api("cloud")
    fx = build_fixture(api)
    api.grant_space("HR", groups=["hr"], roles=["role-viewer", "role-editor"])
    conn = connector(api)
    with caplog.at_level(logging.WARNING):
        listing = conn.list_refs()
    assert listing.complete
    assert listing.notes == (
        "space HR: read access granted to 2 roles is left out of the ACL (it holds users "
        "and groups): members find the space's pages only through a user or group "
        "permission, so access is narrower than in Confluence, never wider",
    )
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    vacation = acl_payload(documents(conn)[fx["vacation"]])
    assert (vacation["space_users"], vacation["space_groups"]) == ([], ["hr"])
    api.grant_space("HR", groups=["hr"])  # the roles' permission withdrawn: nothing to say
    assert conn.list_refs().notes == ()


# --- comments ----------------------------------------------------------------------


def test_comments_are_appended_and_a_new_edited_or_deleted_one_relists_the_page(
    confluence_api: Factory,
) -> None:
    api = confluence_api("cloud")
    fx = build_fixture(api)
    conn = connector(api, include_inline_comments=False)
    start = versions(conn)
    first = api.add_comment(fx["guide"], "<p>Works on <strong>ARM</strong> too.</p>")
    api.add_comment(fx["guide"], "<p>Confirmed.</p>", reply_to=first, author="ivan")
    api.add_comment(fx["guide"], "<p>inline remark</p>", inline=True)
    commented = versions(conn)
    assert {d for d in start if start[d] != commented[d]} == {fx["guide"]}
    doc = documents(conn)[fx["guide"]]
    assert doc.ref.version == commented[fx["guide"]]  # fetch and listing agree
    text = doc.data.decode()
    assert COMMENTS_OPENING in text and "Bob Builder" in text and "Иван Петров" in text
    assert text.index("ARM") < text.index("Confirmed")
    assert "inline remark" not in text
    api.edit(first, body="<p>Works on ARM and RISC-V.</p>")
    edited = versions(conn)
    assert {d for d in edited if edited[d] != commented[d]} == {fx["guide"]}
    api.delete(first)  # with its reply
    deleted = versions(conn)
    assert deleted[fx["guide"]] == start[fx["guide"]]


def test_pages_without_comments_cost_no_comment_request(confluence_api: Factory) -> None:
    api = confluence_api("cloud")
    fx = build_fixture(api)
    api.add_comment(fx["notes"], "<p>nice</p>")
    documents(connector(api))
    assert api.requests["comments"] == 1  # the commented page's, nothing for the rest
    api.requests.clear()
    docs = documents(connector(api, include_comments=False))
    assert api.requests["comments"] == 0
    assert b"Comments" not in docs[fx["notes"]].data


# --- folders -----------------------------------------------------------------------


def test_folders_are_ancestors_and_breadcrumbs_never_documents(confluence_api: Factory) -> None:
    api = confluence_api("cloud")
    fx = build_fixture(api)
    shelf = api.add_folder("ENG", "Runbook shelf", parent=fx["eng_home"])
    inner = api.add_folder("ENG", "Databases", parent=shelf)
    failover = api.add_page("ENG", "Failover", "<p>Promote the replica.</p>", parent=inner)
    api.restrict(shelf, groups=["dba"])  # a folder's restriction narrows what is under it
    conn = connector(api)
    listed = versions(conn)
    assert failover in listed and not {shelf, inner} & set(listed)
    assert api.requests["folder"] == 2  # each folder read once per listing, not per page
    page = documents(conn)[failover]
    assert page.breadcrumbs == (
        "Engineering",
        "Engineering Home",
        "Runbook shelf",
        "Databases",
        "Failover",
    )
    assert [a["title"] for a in page.metadata["ancestors"]] == [
        "Engineering Home",
        "Runbook shelf",
        "Databases",
    ]
    assert acl_payload(page)["restricted"] is True and acl_payload(page)["groups"] == ["dba"]
    assert page.warnings == ()

    api.move(fx["deep"], inner)  # into a folder: its page and its attachment change
    moved = versions(conn)
    assert {d for d in listed if listed[d] != moved[d]} == {fx["deep"], fx["md"]}
    assert documents(conn)[fx["deep"]].breadcrumbs[-3:] == (
        "Runbook shelf",
        "Databases",
        "Deep Child",
    )
    api.move(fx["deep"], fx["guide"])  # and out again
    assert versions(conn) == listed


def test_a_folder_loop_or_an_unreadable_folder_is_warned_and_the_page_indexed(
    confluence_api: Factory,
) -> None:
    api = confluence_api("cloud")
    build_fixture(api)
    loop = api.add_folder("ENG", "Loop")
    looped = api.add_page("ENG", "Looped", "<p>round and round</p>", parent=loop)
    api.move(loop, looped)  # a broken answer: the folder inside the page inside it
    hidden = api.add_folder("ENG", "Hidden")
    orphan = api.add_page("ENG", "Orphan", "<p>under a folder no one sees</p>", parent=hidden)
    api.forbid(hidden)
    conn = connector(api)
    docs = documents(conn)
    assert docs[looped].breadcrumbs == ("Engineering", "Loop", "Looped")
    assert any("loop back to page" in w for w in docs[looped].warnings)
    assert docs[orphan].breadcrumbs == ("Engineering", "Orphan")
    assert any("folder" in w and "cannot be read" in w for w in docs[orphan].warnings)
    assert b"under a folder no one sees" in docs[orphan].data


# --- whiteboards, databases, smart links -------------------------------------------


def test_whiteboards_are_title_link_and_breadcrumb_records_when_asked_for(
    confluence_api: Factory,
) -> None:
    api = confluence_api("cloud")
    fx = build_fixture(api)
    board = api.add_whiteboard("ENG", "Quokka migration board", parent=fx["guide"])
    table = api.add_whiteboard("ENG", "Release tracker", kind="database")
    link = api.add_whiteboard("ENG", "Status dashboard", parent=fx["guide"], kind="embed")
    assert not {board, table, link} & set(versions(connector(api)))  # off by default
    conn = connector(api, include_whiteboards=True)
    api.requests.clear()
    listed = versions(conn)
    assert {board, table, link} <= set(listed)
    # found by one CQL request per space, with their ancestors: none per whiteboard
    assert api.requests["whiteboard"] == api.requests["database"] == api.requests["embed"] == 0
    docs = documents(conn)
    record = docs[board]
    assert record.ref.kind == "whiteboard" and record.title == "Quokka migration board"
    assert record.source_url == f"{api.base_url}/spaces/ENG/whiteboard/{board}"
    assert record.breadcrumbs == (
        "Engineering",
        "Engineering Home",
        "Install Guide",
        "Quokka migration board",
    )
    text = record.data.decode()
    assert "Whiteboard <strong>Quokka migration board</strong>" in text
    assert "Engineering › Engineering Home › Install Guide" in text and record.source_url in text
    assert acl_payload(record)["space"] == "ENG"
    assert "Database" in docs[table].data.decode() and "Smart link" in docs[link].data.decode()
    api.delete(board)
    assert board not in versions(conn)  # deleted: gone from a complete listing
    assert versions(conn)[table] == listed[table]


def test_without_cql_whiteboards_make_the_listing_incomplete_naming_why(
    confluence_api: Factory,
) -> None:
    api = confluence_api("cloud")
    fx = build_fixture(api)
    api.add_whiteboard("ENG", "Quokka migration board", parent=fx["guide"])
    api.retire("/rest/api/search")
    listing = connector(api, include_whiteboards=True, spaces=["ENG"]).list_refs()
    assert not listing.complete and fx["guide"] in {ref.document_id for ref in listing.refs}
    assert listing.errors == (
        "whiteboards, databases and smart links of space ENG: only CQL search lists them, "
        "and it is not available",
    )
