"""The `ingest` flow on Confluence Cloud (REST v2, the removed v1 endpoints answering 410:
the `confluence_api` fixture fails a test that calls one): what the space does without an
edit (a move, a comment, the search index gone) reaches the index on the next
incremental run, nothing else is redone, and `ingest search --user` shows a space's pages
only to those who may read the space.

Same harness as `test_flow.py` (real Prefect API on SQLite, local-mode Qdrant, the local
Confluence API, the tiny BGE-M3-shaped model). The first run, an unchanged re-run, edits,
deletions, restriction changes and a 429 storm on Cloud are in test_flow.py and
test_flow_faults.py, which run on the same Cloud layout.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from flows.cli import main
from stage_cache.store import StageCache
from tasks.pipeline import reindex_collection
from tasks.resources import Resources
from testkit.confluence_api import FakeConfluence, Fixture, build_fixture, confluence_api
from testkit.tiny_model import tiny_model_dir
from tests.test_flow import ENG_DOCUMENTS, Workspace, eng, prefect_api, workspace

# fixtures used by name
__all__ = ["confluence_api", "eng", "prefect_api", "tiny_model_dir", "workspace"]

# Every test runs flows on a temporary Prefect API: outside the fast lane.
pytestmark = [pytest.mark.usefixtures("prefect_api"), pytest.mark.slow]


def indexed(
    make: Callable[..., Workspace], eng: tuple[FakeConfluence, Fixture]
) -> tuple[FakeConfluence, Fixture, Workspace]:
    api, fx = eng
    space = make(api=api)
    state, summary = space.run(source="confluence", targets=["ENG"])
    assert state.is_completed() and summary["failed"] == [], summary["failed"]
    assert api.removed_calls == []
    return api, fx, space


def changed_documents(before: dict[str, set[str]], after: dict[str, set[str]]) -> set[str]:
    return {d for d in after if after[d] != before.get(d)}


def test_unchanged_rerun_fetches_no_body_and_embeds_nothing(
    workspace: Callable[..., Workspace], eng: tuple[FakeConfluence, Fixture]
) -> None:
    api, _, space = indexed(workspace, eng)
    before = space.points()
    api.requests.clear()
    state, summary = space.run(source="confluence", targets=["ENG"])
    assert state.is_completed()
    assert summary["unchanged"] == summary["seen"] == len(ENG_DOCUMENTS)
    assert summary["fetch"]["done"] == 0 and summary["embed"]["done"] == 0
    # the listing only: no page batch (bodies), no attachment, no comment, no download
    assert api.requests["pages"] == api.requests["attachment"] == api.requests["download"] == 0
    assert api.requests["comments"] == 0
    assert space.points() == before


def test_a_moved_page_gets_its_new_ancestors_without_being_embedded_again(
    workspace: Callable[..., Workspace], eng: tuple[FakeConfluence, Fixture]
) -> None:
    api, fx, space = indexed(workspace, eng)
    before = space.documents()
    api.move(fx["deep"], fx["notes"])  # from under the guide to under the release notes
    state, summary = space.run(source="confluence", targets=["ENG"])
    assert state.is_completed() and summary["failed"] == []
    # the page and its attachment (which carries the page's ancestors), nothing else
    assert changed_documents(before, space.documents()) == {fx["deep"], fx["md"]}
    assert summary["embed"]["done"] == 0  # same text: the embeddings are reused
    deep = [p for p in space.points().values() if p["document_id"] == fx["deep"]]
    assert deep and all(
        [a["title"] for a in p["ancestors"]] == ["Engineering Home", "Release Notes"] for p in deep
    )

    # Folders are in the tree, never documents: a new one changes nothing; a page moved
    # into one (or out again) gets its breadcrumbs, with its attachment, and nothing else.
    shelf = api.add_folder("ENG", "Old releases", parent=fx["eng_home"])
    state, summary = space.run(source="confluence", targets=["ENG"])
    assert state.is_completed() and summary["unchanged"] == summary["seen"] == len(ENG_DOCUMENTS)
    before = space.documents()
    api.move(fx["deep"], shelf)
    state, summary = space.run(source="confluence", targets=["ENG"])
    assert state.is_completed() and summary["failed"] == [] and summary["embed"]["done"] == 0
    assert changed_documents(before, space.documents()) == {fx["deep"], fx["md"]}
    crumbs = {
        tuple(p["breadcrumbs"]) for p in space.points().values() if p["page_id"] == fx["deep"]
    }
    assert crumbs == {
        ("Engineering", "Engineering Home", "Old releases", "Deep Child"),
        ("Engineering", "Engineering Home", "Old releases", "Deep Child", "README.md"),
    }
    assert shelf not in space.documents()


@pytest.mark.parametrize("layout", ["cloud", "dc"])
def test_each_comment_added_edited_resolved_or_deleted_reindexes_its_page_only(
    workspace: Callable[..., Workspace],
    confluence_api: Callable[..., FakeConfluence],
    layout: str,
) -> None:
    api = confluence_api(layout)
    fx = build_fixture(api)
    api, fx, space = indexed(workspace, (api, fx))

    def rerun_changes_only_notes(what: str) -> str:
        before = space.documents()
        state, summary = space.run(source="confluence", targets=["ENG"])
        assert state.is_completed() and summary["failed"] == [], what
        assert (summary["changed"], summary["unchanged"]) == (1, len(ENG_DOCUMENTS) - 1), what
        assert changed_documents(before, space.documents()) == {fx["notes"]}, what
        return "\n".join(
            p["md_text"] for p in space.points().values() if p["document_id"] == fx["notes"]
        )

    question = api.add_comment(fx["notes"], "<p>Does 1.0 support ARM64 servers?</p>")
    api.add_comment(fx["notes"], "<p>Yes, since 1.0.</p>", reply_to=question, author="alice")
    text = rerun_changes_only_notes("footer comments added")
    assert "ARM64" in text and "Yes, since 1.0." in text and "Bob Builder" in text
    remark = api.add_comment(
        fx["notes"], "<p>Which images?</p>", inline=True, selection="smaller images"
    )
    text = rerun_changes_only_notes("inline comment added")
    assert "inline comment (open) on “smaller images”" in text and "Which images?" in text
    api.edit(remark, body="<p>Which base images?</p>")
    assert "Which base images?" in rerun_changes_only_notes("inline comment edited")
    api.resolve(remark)
    assert "inline comment (resolved)" in rerun_changes_only_notes("inline comment resolved")
    api.delete(remark)
    assert "base images" not in rerun_changes_only_notes("inline comment deleted")
    # the comments are no part of the page a reader can land in: their chunks cite it
    comment_chunks = [p for p in space.points().values() if "ARM64" in p["md_text"]]
    assert comment_chunks and all("#" not in p["citation_url"] for p in comment_chunks)


def test_without_cql_an_incremental_run_still_sees_edits_and_redoes_nothing_else(
    workspace: Callable[..., Workspace], eng: tuple[FakeConfluence, Fixture]
) -> None:
    api, fx, space = indexed(workspace, eng)
    before = space.documents()
    api.retire("/rest/api/search")  # the search answers 410 from now on
    state, summary = space.run(source="confluence", targets=["ENG"])
    assert state.is_completed() and summary["failed"] == []
    assert summary["unchanged"] == len(ENG_DOCUMENTS)  # the same versions, read another way
    assert space.documents() == before
    api.edit(fx["guide"], body="<p>Install with the new installer.</p>")
    api.restrict(fx["notes"], groups=["release-managers"])
    state, summary = space.run(source="confluence", targets=["ENG"])
    assert state.is_completed() and summary["failed"] == []
    changed = changed_documents(before, space.documents())
    notes_and_attachments = {
        p["document_id"] for p in space.points().values() if p.get("page_id") == fx["notes"]
    }
    assert changed == {fx["guide"]} | notes_and_attachments
    assert api.requests["retired"] >= 2


def search_ids(space: Workspace, *args: str, capsys: pytest.CaptureFixture[str]) -> set[str]:
    space.activate()
    capsys.readouterr()
    assert main(["search", "policy handbook text", "--limit", "50", "--json", *args]) == 0
    hits: list[dict[str, Any]] = [
        json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()
    ]
    return {hit["space_key"] for hit in hits}


def test_a_user_who_may_not_read_a_space_never_finds_its_pages(
    workspace: Callable[..., Workspace],
    confluence_api: Callable[..., FakeConfluence],
    capsys: pytest.CaptureFixture[str],
) -> None:
    api = confluence_api("cloud")
    stamp = datetime.now(UTC) - timedelta(days=1)
    for key in ("PUB", "HR"):
        api.add_space(key)
        home = api.add_page(key, f"{key} home", "<p>policy handbook text</p>", when=stamp)
        api.add_page(key, f"{key} policy", "<p>policy handbook text</p>", parent=home, when=stamp)
    api.grant_space("HR", users=["ivan"], groups=["hr"])
    space = workspace(api=api)
    state, summary = space.run(source="confluence", targets=["PUB", "HR"])
    assert state.is_completed() and summary["failed"] == []
    bob, ivan = api.users["bob"].account_id, api.users["ivan"].account_id
    assert search_ids(space, "--user", bob, "--group", "confluence-users", capsys=capsys) == {"PUB"}
    assert search_ids(space, "--user", bob, "--group", "hr", capsys=capsys) == {"HR"}
    assert search_ids(space, "--user", ivan, capsys=capsys) == {"HR"}
    assert search_ids(space, capsys=capsys) == {"PUB", "HR"}  # no ACL filter asked


def test_a_whiteboard_is_found_by_its_name_and_removed_once_deleted(
    workspace: Callable[..., Workspace],
    eng: tuple[FakeConfluence, Fixture],
    capsys: pytest.CaptureFixture[str],
) -> None:
    api, fx = eng
    board = api.add_whiteboard("ENG", "Quokka migration board", parent=fx["guide"])
    space = workspace(api=api, INGEST_CONFLUENCE__INCLUDE_WHITEBOARDS="true")
    state, summary = space.run(source="confluence", targets=["ENG"])
    assert state.is_completed() and summary["failed"] == []
    assert summary["seen"] == len(ENG_DOCUMENTS) + 1

    def found(query: str) -> list[dict[str, Any]]:
        space.activate()
        capsys.readouterr()
        assert main(["search", query, "--mode", "sparse", "--limit", "3", "--json"]) == 0
        return [json.loads(line) for line in capsys.readouterr().out.splitlines() if line]

    (hit, *_) = found("Quokka")
    assert hit["document_id"] == board and hit["title"] == "Quokka migration board"
    assert hit["citation_url"] == f"{api.base_url}/spaces/ENG/whiteboard/{board}"
    assert main(["search", "Quokka", "--mode", "sparse", "--limit", "1"]) == 0
    assert capsys.readouterr().out.splitlines()[1].strip() == hit["citation_url"]  # the link
    assert hit["breadcrumbs"] == [
        "Engineering",
        "Engineering Home",
        "Install Guide",
        "Quokka migration board",
    ]
    api.delete(board)
    state, summary = space.run(source="confluence", targets=["ENG"])
    assert state.is_completed() and summary["deleted"] == 1
    assert board not in space.documents()
    assert all(hit["document_id"] != board for hit in found("Quokka"))


def test_a_page_pruned_from_the_stage_cache_is_fetched_again_by_a_chunking_reindex(
    workspace: Callable[..., Workspace], eng: tuple[FakeConfluence, Fixture]
) -> None:
    """Every normalized text pruned from the stage cache: a re-index for other budgets
    lists the space once, fetches its documents again through the connector and goes on."""
    api, _, space = indexed(workspace, eng)
    before = space.documents()
    cache = Path(space.activate().cache.dir)
    normalized = [path for path in (cache / "normalize").rglob("*") if path.is_file()]
    assert normalized
    for path in normalized:
        os.utime(path, (0, 0))
    StageCache(cache).prune(max_age_s=86_400)  # what `ingest cache prune` calls
    assert not any(path.exists() for path in normalized)

    api.requests.clear()
    space.env["INGEST_CHUNKING__MAX_TOKENS"] = "280"
    settings = space.activate()
    resources = Resources(settings)
    try:
        result = reindex_collection(settings, resources)
    finally:
        resources.close()
    assert result.moved and result.rechunked
    assert api.requests["pages"] > 0  # the bodies, fetched again
    assert all(path.exists() for path in normalized)  # normalized again, by the same keys
    assert set(space.documents()) == set(before)
