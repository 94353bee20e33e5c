"""A source kind added from tests/ alone (tests/toy_source.py, registered through the
`sources` setting) runs through the real `ingest` flow end to end: its own settings
section (the shelves a run without targets reads, where its links point), deterministic
point ids, its ACL in the payload and in the search filter, links resolved by its own
`LinkResolver`, a document dropped from the source deleted by the next run. Same harness
as test_flow.py (Prefect API on SQLite, local-mode Qdrant, the tiny model)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import pytest

from chunking.record import compute_chunk_id, point_id
from config.errors import ConfigError
from indexing.embedders import make_embedder
from indexing.search import SearchFilters, search
from stage_cache.sync_log import SourceLog
from tasks.links import LinkStore
from testkit.tiny_model import tiny_model_dir
from tests.test_flow import Workspace, prefect_api, workspace
from tests.toy_source import SHELVES, ToyDocument, ToyShelf

# fixtures used by name
__all__ = ["prefect_api", "tiny_model_dir", "workspace"]

# Every test runs flows on a temporary Prefect API: outside the fast lane.
pytestmark = [pytest.mark.usefixtures("prefect_api"), pytest.mark.slow]

TOY = json.dumps({"toy": "tests.toy_source:ToyConnector"})


def page(title: str, body: str) -> str:
    return f"<html><head><title>{title}</title></head><body><h1>{title}</h1>{body}</body></html>"


@pytest.fixture
def shelf() -> Iterator[ToyShelf]:
    toys = ToyShelf()
    toys.put(
        "toy-a",
        ToyDocument(
            "a.html",
            page("Alpha", "<p>Alpha notes; see <a href='b.html'>Beta</a>.</p>"),
            users=("ann",),
        ),
    )
    toys.put(
        "toy-b",
        ToyDocument(
            "b.html", page("Beta", "<p>Beta holds the zebra runbook.</p>"), groups=("eng",)
        ),
    )
    SHELVES["toys"] = toys
    yield toys
    SHELVES.clear()


def visible_documents(space: Workspace, user: str, groups: tuple[str, ...] = ()) -> set[str]:
    settings = space.settings()
    store = space.store()
    embedder = make_embedder(settings.embedder)
    filters = SearchFilters(tenant_id="default", user=user, groups=groups)
    return {
        str(hit.payload["document_id"]) for hit in search(store, embedder, "notes", 20, filters)
    }


def test_a_toy_source_runs_through_the_flow_end_to_end(
    workspace: Callable[..., Workspace], shelf: ToyShelf
) -> None:
    # its own settings section, validated by its settings model: the shelves a run
    # without targets reads, and where its documents' links point
    space = workspace(
        INGEST_SOURCES=TOY, INGEST_TOY__SHELVES="toys", INGEST_TOY__BASE_URL="https://toys/"
    )
    state, summary = space.run(source="toy")
    assert state.is_completed() and summary["failed"] == [], summary
    assert summary["source"] == "toy:toys" and summary["seen"] == summary["new"] == 2
    # the run's last sync, for readers to list (`list_sources`)
    (synced,) = SourceLog.for_settings(space.settings()).read("default")
    assert (synced.scope, synced.source_type, synced.targets) == ("toy:toys", "toy", ("toys",))
    assert (synced.status, synced.documents) == ("ok", 2)

    points = space.points()
    assert {p["document_id"] for p in points.values()} == {"toy-a", "toy-b"}
    for pid, payload in points.items():
        assert payload["source_type"] == "toy" and payload["space_key"] == "toys"
        assert payload["source_url"].startswith("https://toys/toys/")
        chunk_id = compute_chunk_id(
            "default",
            payload["document_id"],
            payload["source_version_id"],
            payload["ordinal"],
            payload["md_text"],
            payload["chunk_type"],
        )
        assert payload["chunk_id"] == chunk_id and pid == point_id(chunk_id)

    alpha = next(p for p in points.values() if p["document_id"] == "toy-a")
    assert alpha["acl"] == {"public": False, "restricted": True, "users": ["ann"], "groups": []}
    assert visible_documents(space, user="ann") == {"toy-a"}
    assert visible_documents(space, user="bob", groups=("eng",)) == {"toy-b"}
    assert visible_documents(space, user="bob") == set()

    # the link to b.html resolved by the connector's LinkResolver; counted both ways
    links = LinkStore(space.settings().cache.dir, "default").outgoing("toy-a")
    assert [(link.target_url, link.target_document_id) for link in links] == [("b.html", "toy-b")]
    beta = next(p for p in points.values() if p["document_id"] == "toy-b")
    assert alpha["links_out"] == 1 and beta["links_in"] == 1

    # the same source again: nothing changes, not one point id
    state, summary = space.run(source="toy", targets=["toys"])
    assert state.is_completed() and summary["unchanged"] == 2
    (again,) = SourceLog.for_settings(space.settings()).read("default")
    assert again.last_sync >= synced.last_sync and again.documents == 2
    assert space.points() == points

    # one of two documents dropped: 50% of the source, so the deletion must be forced
    del shelf.documents["toy-b"]
    state, summary = space.run(source="toy", targets=["toys"], force_delete=True)
    assert state.is_completed() and summary["deleted"] == 1, summary
    assert set(space.documents()) == {"toy-a"}


def test_an_unknown_source_kind_is_refused_naming_the_known_ones(
    workspace: Callable[..., Workspace],
) -> None:
    space = workspace()
    state = space.run_state(source="wiki", targets=["X"])
    assert state.is_failed()
    with pytest.raises(ConfigError) as refused:
        state.result()
    assert "'wiki'" in refused.value.message
    assert "confluence, files" in refused.value.message
