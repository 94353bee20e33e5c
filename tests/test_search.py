"""Search: dense, sparse and hybrid (RRF) queries, payload filters and the expansion of
hits to their neighbours or section, on Qdrant local mode (or `QDRANT_URL`) with the tiny
BGE-M3-shaped model.

The tiny model's dense vectors are random, but its sparse head gives every token a weight
near 1 (see testkit/tiny_model.py), so a sparse score counts shared tokens: a keyword query
is decided by the sparse side, alone or fused with the dense side."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from chunking import Chunk, DocumentInfo, chunk_document
from config.settings import ChunkingSettings, load_settings
from flows.cli import main
from indexing.embedders import BgeM3Embedder
from indexing.reconcile import DocumentChunks, sync_documents
from indexing.search import SearchFilters, joined_markdown, search
from query.api import Index
from stage_cache.store import StageCache
from testkit.index_helpers import (
    CountingStore,
    make_document,
    open_store,
    qdrant_settings,
    store_factory,
)
from testkit.tiny_model import tiny_embedder, tiny_model_dir
from tests.query_helpers import ROOT, QueryIndex, build_query_index

__all__ = ["store_factory", "tiny_embedder", "tiny_model_dir"]  # fixtures used below

KEYWORD = "Zanzibar"
TARGET = f"The {KEYWORD} office keeps the spare badge printer in room four."
OTHERS = [
    "Invoices are approved by the finance lead before the end of each month.",
    "The staging cluster is rebuilt every Sunday night from the golden image.",
    "New laptops are ordered through the procurement portal with a cost centre.",
    "Holiday requests need two weeks of notice and the manager's approval.",
]


@pytest.fixture
def indexed(store_factory: Any, tiny_embedder: BgeM3Embedder, tmp_path: Path) -> CountingStore:
    store: CountingStore = store_factory(tiny_embedder.vector_size, sparse=True)
    cache = StageCache(tmp_path / "cache")
    documents = [
        make_document(
            "acme",
            "handbook",
            "v1",
            [*OTHERS[:2], TARGET],
            title="Office handbook",
            source_type="confluence",
            source_url="https://wiki.example/display/OPS/Handbook",
            space_key="OPS",
            labels=("office", "howto"),
            extra={"acl": {"public": True, "users": [], "groups": []}},
        ),
        make_document(
            "acme",
            "finance",
            "v1",
            OTHERS[2:],
            title="Finance notes",
            space_key="FIN",
            labels=("finance",),
            extra={
                "acl": {"public": False, "users": ["ann"], "groups": ["finance"]},
                "archived": True,
            },
        ),
        make_document("globex", "handbook", "v1", [TARGET], title="Globex handbook"),
    ]
    for tenant in ("acme", "globex"):
        mine = [d for d in documents if d.chunks[0].tenant_id == tenant]
        sync_documents(store, tiny_embedder, cache, tenant, mine)
    return store


def token_set(embedder: BgeM3Embedder, text: str) -> set[int]:
    return set(embedder.token_ids(text))


def test_keyword_query_finds_its_chunk_through_sparse_and_hybrid(indexed, tiny_embedder):
    query = token_set(tiny_embedder, KEYWORD)
    # Precondition: only the target chunk shares tokens with the query.
    assert query <= token_set(tiny_embedder, TARGET)
    assert all(not query & token_set(tiny_embedder, other) for other in OTHERS)
    acme = SearchFilters(tenant_id="acme")

    sparse_hits = search(indexed, tiny_embedder, KEYWORD, limit=5, filters=acme, mode="sparse")
    assert [h.md_text for h in sparse_hits] == [TARGET]  # nothing else shares a token

    hybrid = search(indexed, tiny_embedder, KEYWORD, limit=5, filters=acme)
    assert hybrid[0].md_text == TARGET
    assert len(hybrid) == 5  # fused with the (random) dense candidates
    top = hybrid[0]
    assert top.title == "Office handbook" and top.headings_path == ["Intro"]
    assert top.source == "https://wiki.example/display/OPS/Handbook"
    assert top.document_id == "handbook" and top.payload["tenant_id"] == "acme"


def test_dense_search_returns_records_with_their_source(indexed, tiny_embedder):
    hits = search(indexed, tiny_embedder, "badge printer", limit=10, mode="dense")
    assert len(hits) == 6
    assert all(-1.0 <= h.score <= 1.0 for h in hits)
    finance = next(h for h in hits if h.document_id == "finance")
    assert finance.source == "/share/finance.docx"
    # The same text embedded as a query matches its own chunk best (cosine 1 vs random).
    (exact,) = search(
        indexed, tiny_embedder, "Office handbook > Intro\n" + TARGET, limit=1, mode="dense"
    )
    assert exact.md_text == TARGET


def test_a_copy_of_a_better_hits_text_in_its_document_is_left_out_and_made_up_for(
    store_factory: Any, tiny_embedder: BgeM3Embedder, tmp_path: Path
) -> None:
    store: CountingStore = store_factory(tiny_embedder.vector_size, sparse=True)
    # A document that repeats the target, its spacing changed; another that holds it once.
    copy = TARGET.replace(" office ", "  office\n")
    documents = [
        make_document("acme", "handbook", "v1", [TARGET, OTHERS[0], copy, OTHERS[1]]),
        make_document("acme", "copied", "v1", [TARGET, OTHERS[2]]),
        make_document("acme", "finance", "v1", OTHERS[3:]),
    ]
    sync_documents(store, tiny_embedder, StageCache(tmp_path / "cache"), "acme", documents)
    acme = SearchFilters(tenant_id="acme")
    for mode in ("sparse", "hybrid"):
        hits = search(store, tiny_embedder, KEYWORD, limit=5, filters=acme, mode=mode)
        found = [hit.document_id for hit in hits if " ".join(hit.md_text.split()) == TARGET]
        assert sorted(found) == ["copied", "handbook"], (mode, found)
    hits = search(store, tiny_embedder, KEYWORD, limit=5, filters=acme)
    assert len(hits) == 5  # seven chunks, one a copy: the others make up the limit


def documents_found(store: CountingStore, embedder: BgeM3Embedder, **filters: Any) -> set[str]:
    # " the" appears in every chunk, so the sparse side matches them all.
    hits = search(store, embedder, "the", limit=20, filters=SearchFilters(**filters), mode="sparse")
    return {f"{h.payload['tenant_id']}/{h.document_id}" for h in hits}


def test_filters_by_tenant_space_labels_source_type_and_archived(indexed, tiny_embedder):
    assert documents_found(indexed, tiny_embedder) == {
        "acme/handbook",
        "acme/finance",
        "globex/handbook",
    }
    assert documents_found(indexed, tiny_embedder, tenant_id="globex") == {"globex/handbook"}
    assert documents_found(indexed, tiny_embedder, tenant_id="acme", containers=("FIN",)) == {
        "acme/finance"
    }
    assert documents_found(indexed, tiny_embedder, labels=("howto", "nothing")) == {"acme/handbook"}
    assert documents_found(indexed, tiny_embedder, source_types=("confluence",)) == {
        "acme/handbook"
    }
    # archived content (confluence.include_archived) left out, or alone
    assert documents_found(indexed, tiny_embedder, archived=False) == {
        "acme/handbook",
        "globex/handbook",
    }
    assert documents_found(indexed, tiny_embedder, archived=True) == {"acme/finance"}


def test_acl_filter_shows_public_chunks_and_those_granted_to_user_or_group(indexed, tiny_embedder):
    acme = {"tenant_id": "acme"}
    assert documents_found(indexed, tiny_embedder, **acme, user="bob") == {"acme/handbook"}
    assert documents_found(indexed, tiny_embedder, **acme, user="ann") == {
        "acme/handbook",
        "acme/finance",
    }
    assert documents_found(indexed, tiny_embedder, **acme, user="bob", groups=("finance",)) == {
        "acme/handbook",
        "acme/finance",
    }


def test_points_of_one_score_come_in_the_order_of_their_ids(store_factory, tiny_embedder, tmp_path):
    """Copies score alike; the engine returns ties in the order its segments hold them,
    which another build of the same points need not share, so results would move
    between builds."""
    store = store_factory(tiny_embedder.vector_size, sparse=True)
    copies = [make_document("acme", f"copy{n}", "v1", [TARGET], title="Notes") for n in range(8)]
    sync_documents(store, tiny_embedder, StageCache(tmp_path / "cache"), "acme", copies)
    hits = search(store, tiny_embedder, KEYWORD, limit=8, mode="dense")
    assert len(hits) == 8 and len({h.score for h in hits}) == 1  # all tied
    ids = [c.chunks[0].point_id for c in copies]
    assert ids != sorted(ids)  # written out of the order of their ids
    assert [h.payload["chunk_id"] for h in hits] == [
        c.chunks[0].chunk_id for c in sorted(copies, key=lambda c: c.chunks[0].point_id)
    ]


def test_sparse_search_needs_sparse_vectors(store_factory, tiny_embedder):
    dense_only = store_factory(tiny_embedder.vector_size, sparse=False)
    with pytest.raises(ValueError, match="sparse"):
        search(dense_only, tiny_embedder, "x", mode="sparse")
    assert search(dense_only, tiny_embedder, "x") == []  # auto: dense on an empty collection


# --- expand: neighbours, section, merged hits -------------------------------------------

SECTION_TEXT = (
    "Backups of the {name} cluster run every night at two and are kept for thirty-five "
    "days, with a weekly copy in the disaster recovery region for a year."
)
HANDBOOK = f"""# Handbook

## Backups

{SECTION_TEXT.format(name="orders")}

{SECTION_TEXT.format(name="billing")}

The Zanzibar restore drill replays the write-ahead log into a scratch instance and compares the row counts with the source every Sunday.

Quokka alerts page the on-call engineer when the newest base backup is older than twenty-six hours or a log segment is late.

{SECTION_TEXT.format(name="inventory")}

## Restores

Restoring replaces data, so it needs the approval of the incident commander and of the owner of the affected service before anything starts.

Never restore over the live primary: restore into a new instance, verify it, then switch the traffic over to it.
"""


SMALL_BUDGETS = ChunkingSettings.model_validate(
    {
        "min_tokens": 10,
        "target_tokens": 30,
        "max_tokens": 45,
        "overlap_tokens": 0,
        "oversize_block_limit": 90,
        "bind_tokens": 0,
    }
)


def handbook_chunks(tenant: str = "acme") -> list[Chunk]:
    """The real chunker's records of HANDBOOK, one paragraph per chunk (small budgets)."""
    info = DocumentInfo(
        document_id="handbook", tenant_id=tenant, source_version_id="v1", title="Handbook"
    )
    return list(chunk_document(HANDBOOK, info, SMALL_BUDGETS).chunks)


@pytest.fixture
def handbook(
    store_factory: Any, tiny_embedder: BgeM3Embedder, tmp_path: Path
) -> tuple[CountingStore, list[Chunk]]:
    store: CountingStore = store_factory(tiny_embedder.vector_size, sparse=True)
    chunks = handbook_chunks()
    document = DocumentChunks("handbook", "v1", chunks)
    sync_documents(store, tiny_embedder, StageCache(tmp_path / "cache"), "acme", [document])
    return store, chunks


def containing(chunks: list[Chunk], word: str) -> Chunk:
    (chunk,) = [c for c in chunks if word in c.md_text]
    return chunk


def test_the_handbook_has_the_structure_the_expand_tests_need(handbook):
    _, chunks = handbook
    target = containing(chunks, "Zanzibar")
    assert 0 < target.ordinal < len(chunks) - 1  # neighbours on both sides
    same_section = [c for c in chunks if c.section_id == target.section_id]
    assert len(same_section) >= 4 and len({c.section_id for c in chunks}) >= 2
    assert containing(chunks, "Quokka").ordinal == target.ordinal + 1


def test_neighbours_widen_a_hit_to_the_chunks_before_and_after_it(handbook, tiny_embedder):
    store, chunks = handbook
    target = containing(chunks, "Zanzibar")
    (hit,) = search(store, tiny_embedder, "Zanzibar", limit=1, mode="sparse", expand="neighbours")
    assert hit.chunk_id == target.chunk_id and hit.hits == (target.chunk_id,)
    ordinals = [c["ordinal"] for c in hit.context]
    assert ordinals == [target.ordinal - 1, target.ordinal, target.ordinal + 1]
    expected = [chunks[o].md_text for o in ordinals]
    assert hit.text == "\n\n".join(expected)
    assert hit.tokens == sum(chunks[o].token_count for o in ordinals)
    assert hit.headings_path == ["Handbook", "Backups"]


def test_section_widens_a_hit_to_its_whole_section_only(handbook, tiny_embedder):
    store, chunks = handbook
    target = containing(chunks, "Zanzibar")
    section = [c for c in chunks if c.section_id == target.section_id]
    (hit,) = search(store, tiny_embedder, "Zanzibar", limit=1, mode="sparse", expand="section")
    assert [c["chunk_id"] for c in hit.context] == [c.chunk_id for c in section]
    assert "Restoring replaces data" not in hit.text  # the next section stays out


def test_expansion_stops_at_the_token_cap_growing_on_both_sides(handbook, tiny_embedder):
    store, chunks = handbook
    target = containing(chunks, "Zanzibar")
    before, after = chunks[target.ordinal - 1], chunks[target.ordinal + 1]
    cap = target.token_count + before.token_count + after.token_count - 1  # not all three
    (hit,) = search(
        store,
        tiny_embedder,
        "Zanzibar",
        limit=1,
        mode="sparse",
        expand="section",
        expand_tokens=cap,
    )
    ordinals = [c["ordinal"] for c in hit.context]
    assert target.ordinal in ordinals and ordinals == list(range(ordinals[0], ordinals[-1] + 1))
    assert hit.tokens <= cap
    assert ordinals[0] == target.ordinal - 1  # the chunk before is taken first
    (alone,) = search(
        store, tiny_embedder, "Zanzibar", limit=1, mode="sparse", expand="section", expand_tokens=1
    )
    assert [c["ordinal"] for c in alone.context] == [target.ordinal]  # the hit always stays


def test_hits_of_one_document_that_touch_become_one_result(handbook, tiny_embedder):
    store, chunks = handbook
    zanzibar, quokka = containing(chunks, "Zanzibar"), containing(chunks, "Quokka")
    plain = search(store, tiny_embedder, "Zanzibar Quokka", limit=2, mode="sparse")
    assert {h.chunk_id for h in plain} == {zanzibar.chunk_id, quokka.chunk_id}
    (merged,) = search(
        store, tiny_embedder, "Zanzibar Quokka", limit=2, mode="sparse", expand="neighbours"
    )
    assert merged.hits == tuple(h.chunk_id for h in plain)  # best first
    assert merged.chunk_id == plain[0].chunk_id and merged.score == plain[0].score
    ordinals = [c["ordinal"] for c in merged.context]
    assert ordinals == list(range(zanzibar.ordinal - 1, quokka.ordinal + 2))


def test_a_passage_joins_hits_that_touch_within_its_limit_and_stays_apart_past_it(
    handbook, tiny_embedder
):
    store, chunks = handbook
    zanzibar, quokka = containing(chunks, "Zanzibar"), containing(chunks, "Quokka")
    both = zanzibar.token_count + quokka.token_count
    words = "Zanzibar Quokka"
    (joined,) = search(
        store, tiny_embedder, words, limit=2, mode="sparse", expand="passage",
        expand_tokens=both, grow_tokens=0,
    )  # fmt: skip
    assert [c["ordinal"] for c in joined.context] == [zanzibar.ordinal, quokka.ordinal]
    assert set(joined.hits) == {zanzibar.chunk_id, quokka.chunk_id} and joined.tokens == both
    apart = search(
        store, tiny_embedder, words, limit=2, mode="sparse", expand="passage",
        expand_tokens=both - 1, grow_tokens=0,
    )  # fmt: skip
    # Past the limit each hit is a result of its own, as search found it: no shared chunk.
    assert [(h.chunk_id, h.context) for h in apart] == [
        (h.chunk_id, ()) for h in search(store, tiny_embedder, words, limit=2, mode="sparse")
    ]


def test_a_small_hit_grows_into_its_neighbours_up_to_the_grow_limit(handbook, tiny_embedder):
    store, chunks = handbook
    target = containing(chunks, "Zanzibar")
    before = chunks[target.ordinal - 1]
    grow = target.token_count + before.token_count  # room for one neighbour, the one before
    (hit,) = search(
        store, tiny_embedder, "Zanzibar", limit=1, mode="sparse", expand="passage",
        expand_tokens=1000, grow_tokens=grow,
    )  # fmt: skip
    assert [c["ordinal"] for c in hit.context] == [before.ordinal, target.ordinal]
    assert hit.chunk_id == target.chunk_id and hit.hits == (target.chunk_id,)
    assert before.md_text in hit.text and target.md_text in hit.text


def test_passages_take_hits_in_rank_order_until_there_are_as_many_as_asked(
    store_factory, tiny_embedder, tmp_path
):
    store = store_factory(tiny_embedder.vector_size, sparse=True)
    entries = [  # the fewer times an entry says "ledger", the lower it ranks
        f"Entry {n} of the year. {'ledger ' * (8 - n)}{'quiet ' * n}closes the books at the "
        "end of every month for the auditors."
        for n in range(8)
    ]
    info = DocumentInfo(document_id="books", tenant_id="acme", source_version_id="v1")
    text = "# Books\n\n" + "\n\n".join(entries) + "\n"
    chunks = list(chunk_document(text, info, SMALL_BUDGETS).chunks)
    assert len(chunks) == len(entries)  # an entry a chunk
    document = DocumentChunks("books", "v1", chunks)
    sync_documents(store, tiny_embedder, StageCache(tmp_path / "cache"), "acme", [document])
    ranked = [h.chunk_id for h in search(store, tiny_embedder, "ledger", limit=8, mode="sparse")]
    cap = sum(c.token_count for c in chunks[:4])  # four entries join, a fifth does not
    passages = search(
        store, tiny_embedder, "ledger", limit=2, mode="sparse", expand="passage",
        expand_tokens=cap, grow_tokens=0,
    )  # fmt: skip
    held = [set(p.hits) or {p.chunk_id} for p in passages]
    # The best four hits join into one result, so a fifth makes the second: more hits
    # than twice the limit asked.
    assert len(passages) == 2 and len(held[0]) == 4 and passages[0].chunk_id == ranked[0]
    assert set().union(*held) == set(ranked[:5])  # in rank order, none skipped


def test_a_context_budget_takes_the_best_hits_in_rank_order_ungrown(handbook, tiny_embedder):
    store, _ = handbook
    words = "backups cluster"
    plain = search(store, tiny_embedder, words, limit=4, mode="sparse")
    budget = plain[0].tokens + plain[1].tokens + plain[2].tokens - 1  # two of them fit
    fitting = search(
        store, tiny_embedder, words, limit=4, mode="sparse", expand="passage",
        expand_tokens=1000, grow_tokens=1000, tokens=budget,
    )  # fmt: skip
    held = [set(p.hits) or {p.chunk_id} for p in fitting]
    assert set().union(*held) == {plain[0].chunk_id, plain[1].chunk_id}  # and not grown
    assert sum(p.tokens for p in fitting) <= budget
    alone = search(store, tiny_embedder, words, limit=4, mode="sparse", tokens=budget)
    assert [h.chunk_id for h in alone] == [h.chunk_id for h in plain[:2]]


SPLIT_PARAGRAPH = (
    "The Wombat archive keeps every signed contract for ten years in the vault downstairs. "
    "Each contract is scanned on arrival and checked against the register by the clerk. "
    "A scan that cannot be read is redone the same day from the paper original. "
    "The paper originals move to cold storage after the first year of keeping. "
    "Auditors may ask for any original with a week of notice through the records desk."
)


def test_a_passage_returns_a_paragraph_the_chunker_split_whole_within_its_limit(
    store_factory, tiny_embedder, tmp_path
):
    store = store_factory(tiny_embedder.vector_size, sparse=True)
    text = (
        f"# Records\n\n{SECTION_TEXT.format(name='records')}\n\n{SPLIT_PARAGRAPH}\n\n"
        f"{SECTION_TEXT.format(name='archive')}\n"
    )
    info = DocumentInfo(document_id="records", tenant_id="acme", source_version_id="v1")
    chunks = list(chunk_document(text, info, SMALL_BUDGETS).chunks)
    wombat = containing(chunks, "Wombat")
    split = [c for c in chunks if c.block_start_idx == c.block_end_idx == wombat.block_end_idx]
    assert len(split) >= 2 and split[0] == wombat and wombat.ordinal > 0  # a neighbour before
    assert split[-1].ordinal < len(chunks) - 1  # and after
    document = DocumentChunks("records", "v1", chunks)
    sync_documents(store, tiny_embedder, StageCache(tmp_path / "cache"), "acme", [document])
    whole = sum(c.token_count for c in split)

    def passage(cap: int) -> Any:
        (hit,) = search(
            store, tiny_embedder, "Wombat", limit=1, mode="sparse", expand="passage",
            expand_tokens=cap, grow_tokens=1,  # no hit is small enough to grow
        )  # fmt: skip
        return hit

    hit = passage(whole)
    assert hit.chunk_id == wombat.chunk_id and hit.hits == (wombat.chunk_id,)
    assert [c["ordinal"] for c in hit.context] == [c.ordinal for c in split]
    assert hit.text == " ".join(c.md_text for c in split) == SPLIT_PARAGRAPH  # one again
    assert hit.tokens == whole
    assert passage(whole - 1).context == ()  # a paragraph past the limit: the hit alone


def test_points_without_neighbour_ids_expand_by_document_and_ordinal(handbook, tiny_embedder):
    """Points written by the previous chunker have no prev/next ids or section id."""
    store, chunks = handbook
    physical = store.resolve()
    assert physical is not None
    store.client.delete_payload(
        physical,
        keys=["prev_chunk_id", "next_chunk_id", "section_id"],
        points=[c.point_id for c in chunks],
        wait=True,
    )
    target = containing(chunks, "Zanzibar")
    for expand in ("neighbours", "section"):
        (hit,) = search(store, tiny_embedder, "Zanzibar", limit=1, mode="sparse", expand=expand)
        assert "prev_chunk_id" not in hit.payload
        assert [c["ordinal"] for c in hit.context] == [
            target.ordinal - 1,
            target.ordinal,
            target.ordinal + 1,
        ]


def test_joined_text_puts_back_headings_and_a_table_header_kept_aside():
    chunks = [
        {"headings_path": ["Guide", "Install"], "md_text": "Run the installer."},
        {"headings_path": ["Guide", "Install", "Linux"], "md_text": "Use the package."},
        {
            "headings_path": ["Guide", "Ports"],
            "md_text": "| 443 | https |",
            "table_header": "| port | use |\n| --- | --- |",
        },
    ]
    assert joined_markdown(chunks) == (
        "Run the installer.\n\n### Linux\n\nUse the package.\n\n## Ports\n\n"
        "| port | use |\n| --- | --- |\n| 443 | https |"
    )


def test_joined_neighbours_repeat_no_heading_and_keep_one_table(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The quickstart's runbook as the quickstart chunks it: a section split over two
    chunks (the second repeats its heading) and a table split over two (the second piece
    under a shortened header, the full one in `table_header`). Joined, each heading and
    the table's header appear once, and the table's rows stay one table."""
    source = ROOT / "samples/docs/runbooks/restart-service.html"
    config = ROOT / "samples/quickstart.yaml"
    assert main(["chunk", str(source), "--config", str(config)]) == 0
    chunks = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    split = [c for c in chunks if c["md_text"].startswith("## Before you start")]
    assert split and "## Before you start" in chunks[split[0]["ordinal"] - 1]["md_text"]
    piece = next(c for c in chunks if c["table_header"])
    assert piece["md_text"].split("\n")[0] != piece["table_header"].split("\n")[0]

    joined = joined_markdown(chunks)
    headings = [line for line in joined.split("\n") if line.startswith("#")]
    assert len(headings) == len(set(headings)), headings
    assert joined.count(piece["table_header"]) == 1
    table = [line for line in joined.split("\n") if line.startswith("| ")]
    assert table[0] == piece["table_header"].split("\n")[0]
    rows = "\n".join(table[2:])
    assert f"{rows}\n" in joined or joined.endswith(rows)  # no blank line between the pieces
    assert "| Service | Replicas | Typical | Notes |" not in joined  # the shortened header
    for chunk in chunks:  # every row and sentence of every chunk is there
        for line in chunk["md_text"].split("\n"):
            if line.strip() and not line.startswith(("#", "| Service", "|-")):
                assert line in joined, line


def test_search_command_expands_and_does_not_repeat_the_title(
    tiny_model_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = qdrant_settings(tmp_path)
    config = tmp_path / "search.yaml"
    config.write_text(
        "embedder:\n"
        f"  model: {tiny_model_dir}\n"
        "  device: cpu\n"
        "qdrant:\n"
        f"  path: {settings.path}\n"
        f"  collection: {settings.collection}\n"
        "tenant_id: acme\n"
    )
    embedder = BgeM3Embedder(load_settings(config_file=config).embedder)
    store = open_store(settings, embedder.vector_size, sparse=True)
    chunks = handbook_chunks()
    sync_documents(
        store,
        embedder,
        StageCache(tmp_path / "cache"),
        "acme",
        [DocumentChunks("handbook", "v1", chunks)],
    )
    store.connection.close()
    target = containing(chunks, "Zanzibar")

    args = ["search", "Zanzibar", "--config", str(config), "--mode", "sparse", "--limit", "1"]
    args += ["--expand", "none"]  # the chunk alone (a passage would take in its neighbours)
    monkeypatch.setenv("COLUMNS", "200")
    assert main(args) == 0
    printed = capsys.readouterr()
    heading, source, preview = printed.out.splitlines()
    assert "not filtered by access" in printed.err  # no --user/--group: said, not silent
    assert heading.endswith("] Handbook > Backups")  # not "Handbook > Handbook > Backups"
    assert source.strip() == "handbook"  # no file path or URL: the document id
    assert preview.strip() == target.md_text.replace("Zanzibar", "**Zanzibar**")

    monkeypatch.setenv("COLUMNS", "60")  # a narrow terminal: the line is cut, said by "…"
    assert main(args) == 0
    preview = capsys.readouterr().out.splitlines()[2]
    assert len(preview) <= 60 and "…" in preview and "**Zanzibar**" in preview
    assert preview.strip().strip("…").replace("**", "") in target.md_text

    assert main([*args, "--expand", "neighbours"]) == 0
    out = capsys.readouterr().out
    assert f"chunks {target.ordinal - 1}-{target.ordinal + 1}" in out
    assert chunks[target.ordinal - 1].md_text in out and chunks[target.ordinal + 1].md_text in out

    assert main([*args, "--expand", "section", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    section = [c for c in chunks if c.section_id == target.section_id]
    assert record["chunk_id"] == target.chunk_id
    assert record["expanded"]["chunk_ids"] == [c.chunk_id for c in section]
    assert record["expanded"]["hits"] == [target.chunk_id]

    assert main([*args, "--user", "ann", "--group", "staff"]) == 0
    assert "not filtered by access" not in capsys.readouterr().err


def test_snippets_are_plain_text_cut_at_a_word_with_an_ellipsis() -> None:
    from query.snippet import plain_text, snippet

    markdown = (
        "## Ports\n\n| port | use |\n| --- | --- |\n| 443 | **https** |\n\n"
        "Run `systemctl restart api` as in [the guide](https://wiki.example/guide).\n\n"
        "- first\n- second\n"
    )
    assert plain_text(markdown) == (
        "Ports · port · use · 443 · https · Run systemctl restart api as in the guide. · "
        "first · second"
    )
    cut = snippet(markdown, 40)
    assert cut == "Ports · port · use · 443 · https · Run…" and len(cut) <= 40
    assert snippet("short", 40) == "short"


def test_hits_under_one_heading_say_where_in_the_document_they_are(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from flows.cli import _print_hits, _shown
    from indexing.search import SearchHit
    from query.api import Hit

    def hit(ordinal: int, **fields: Any) -> Hit:
        payload = {
            "chunk_id": f"c{ordinal}",
            "document_id": "report.pdf",
            "title": "Report",
            "headings_path": [],
            "md_text": f"**Text** of part {ordinal}.",
            "ordinal": ordinal,
            "citation_url": f"file:///share/report.pdf#page={ordinal + 1}",
            **fields,
        }
        return Hit.of(SearchHit.of(payload, 1.0 / (ordinal + 1)))

    monkeypatch.setenv("COLUMNS", "100")
    hits = [
        hit(0, page_start=1),
        hit(3),
        hit(5, sheet="Rota"),
        hit(1, title="Other", headings_path=["Intro"]),
    ]
    _print_hits([_shown(found, whole=False) for found in hits], "part")
    lines = capsys.readouterr().out.splitlines()
    headings = [line for line in lines if line[0].isdigit()]
    assert headings == [
        "1. [1.000] Report · page 1",
        "2. [0.250] Report · part 4",
        "3. [0.167] Report · sheet Rota",
        "4. [0.500] Other > Intro",  # its heading is its own: nothing added
    ]
    assert lines[1] == "   file:///share/report.pdf#page=1"
    assert lines[2] == "   Text of **part** 0."  # no Markdown; the query's word marked


QUESTIONS = (
    "how do I restart a service",
    "who do I ask about my first week",
    "where are the logs of the service",
    "laptop and accounts for a new starter",
    "what to check after a restart",
    "bonus pool",
)


@pytest.fixture(scope="module")
def query_index(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> QueryIndex:
    # the text and office samples (no LibreOffice, no OCR): enough chunks to rank
    samples = ROOT / "samples" / "docs"
    readable = {".md", ".html", ".txt", ".docx", ".pptx", ".xlsx", ".pdf"}
    files = tuple(
        path
        for path in sorted(samples.rglob("*"))
        if path.suffix in readable and path.parent.name != "broken"
    )
    return build_query_index(tmp_path_factory.mktemp("prefix-index"), tiny_model_dir, files)


def test_the_first_hits_do_not_depend_on_the_limit_asked(query_index: QueryIndex) -> None:
    """An agent asking again with a larger limit sees the same first results: the
    candidates each vector gives a hybrid search do not follow the limit, which only cuts
    the fused list. (Hybrid only: the tiny model's dense scores tie to the 5th decimal,
    and one vector's exact ties may come in any order. Chunks alone: a passage may take in
    a later hit that touches it.)"""
    with Index.open(query_index.config) as index:
        for question in QUESTIONS:
            ranked = {
                limit: [
                    hit.chunk_id
                    for hit in index.search(question, limit=limit, mode="hybrid", expand="none")
                ]
                for limit in (1, 3, 5, 10, 20, 40)
            }
            assert len(ranked[40]) >= 20, (question, ranked)  # the index holds enough
            for limit, ids in ranked.items():
                for larger in (other for other in ranked if other > limit):
                    assert ranked[larger][:limit] == ids, (question, limit, larger)
