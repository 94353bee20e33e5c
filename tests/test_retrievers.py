"""The query API (`query.api.Index`) and the LangChain and LlamaIndex retrievers (the
`langchain` and `llamaindex` extras) over it, on a small index of the quickstart samples and one page only user `ann`
may read (tests/query_helpers.py): the chunk as the text, the few citing fields as
metadata, and the reader's access applied."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from llama_index.core.schema import MetadataMode

from config.settings import load_settings
from query.api import PUBLIC, Identity, Index
from query.langchain import IndexRetriever as LangChainRetriever
from query.llamaindex import IndexRetriever as LlamaIndexRetriever
from testkit.tiny_model import tiny_model_dir
from tests.query_helpers import (
    QUESTION,
    RESTART,
    SECRET_TEXT,
    SECRET_URL,
    SECRET_WORD,
    QueryIndex,
    build_query_index,
)

__all__ = ["tiny_model_dir"]  # fixture used below

METADATA = {
    "title",
    "citation_url",
    "breadcrumbs",
    "headings_path",
    "document_id",
    "chunk_id",
    "score",
    "source_type",
}
ANN, BOB = Identity("ann"), Identity("bob", ("staff",))


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> QueryIndex:
    return build_query_index(tmp_path_factory.mktemp("retriever-index"), tiny_model_dir)


@pytest.fixture(scope="module")
def index(built: QueryIndex) -> Iterator[Index]:
    with Index(load_settings(config_file=built.config, environ={})) as opened:
        yield opened


def test_langchain_documents_are_chunks_with_citing_metadata(
    index: Index, built: QueryIndex
) -> None:
    documents = LangChainRetriever(index=index, k=3).invoke(QUESTION)

    best = documents[0]
    assert set(best.metadata) == METADATA
    assert best.metadata["document_id"] == built.restart_id
    assert best.metadata["citation_url"] == RESTART.resolve().as_uri()
    assert best.metadata["breadcrumbs"] == ["restart-service.html"]
    assert best.id == best.metadata["chunk_id"]
    payload = index.fetch(best.metadata["chunk_id"])
    assert payload is not None and best.page_content == payload.text  # the chunk, as indexed
    assert len(documents) == 3


def test_langchain_retriever_applies_the_identity(index: Index) -> None:
    def links(identity: Identity) -> list[str]:
        retriever = LangChainRetriever(index=index, identity=identity, k=5)
        return [doc.metadata["citation_url"] for doc in retriever.invoke(SECRET_WORD)]

    assert links(ANN)[0] == SECRET_URL
    assert SECRET_URL not in links(BOB)
    assert SECRET_URL not in links(PUBLIC)
    spaces = LangChainRetriever(index=index, identity=ANN, spaces=("HR",), k=5)
    assert [doc.metadata["citation_url"] for doc in spaces.invoke(QUESTION)] == [SECRET_URL]


def test_llamaindex_nodes_show_the_llm_text_title_and_link_only(index: Index) -> None:
    retriever = LlamaIndexRetriever(index, identity=ANN, k=5)
    found = retriever.retrieve(SECRET_WORD)

    best = found[0]
    assert set(best.node.metadata) == METADATA
    assert best.node.metadata["citation_url"] == SECRET_URL
    assert best.score == best.node.metadata["score"]
    llm_view = best.node.get_content(metadata_mode=MetadataMode.LLM)
    assert SECRET_TEXT in llm_view and SECRET_URL in llm_view and "Bonus pool" in llm_view
    for hidden in ("document_id", "chunk_id", "breadcrumbs", "score", "source_type"):
        assert hidden not in llm_view, hidden
    assert len(llm_view) < len(SECRET_TEXT) + 150  # the text, not a page of metadata


def test_llamaindex_retriever_applies_the_identity(index: Index) -> None:
    def links(identity: Identity) -> list[str]:
        nodes = LlamaIndexRetriever(index, identity=identity, k=5).retrieve(SECRET_WORD)
        return [node.node.metadata["citation_url"] for node in nodes]

    assert links(ANN)[0] == SECRET_URL
    assert SECRET_URL not in links(BOB)
    assert SECRET_URL not in links(PUBLIC)


def test_fetch_widens_a_chunk_or_gives_its_document_to_whoever_may_read_it(
    index: Index, built: QueryIndex
) -> None:
    (best,) = index.search(QUESTION, limit=1)
    assert best.document_id == built.restart_id
    neighbours = {c for c in (best.prev_chunk_id, best.next_chunk_id) if c}
    assert neighbours
    alone = index.fetch(best.chunk_id)
    assert alone is not None and alone.text == best.text and alone.span == ()
    around = index.fetch(best.chunk_id, expand="neighbours")
    assert around is not None and set(around.span) == neighbours | {best.chunk_id}
    whole = index.fetch(best.chunk_id, expand="document")
    assert whole is not None and whole == index.fetch(best.document_id)
    assert best.text in whole.text and whole.citation_url == RESTART.resolve().as_uri()

    assert index.fetch(built.secret_id) is None  # PUBLIC, the default
    assert index.fetch(built.secret_id, identity=BOB) is None
    secret = index.fetch(built.secret_id, identity=ANN)
    assert secret is not None and secret.text == SECRET_TEXT
    # None: no access filter at all, the operator's view of `ingest search`
    assert index.fetch(built.secret_id, identity=None) is not None


def test_an_index_not_built_yet_says_what_to_run(tmp_path: Path) -> None:
    from query.api import IndexMissing

    settings = load_settings({"qdrant": {"path": str(tmp_path / "q")}}, environ={})
    with Index(settings) as empty, pytest.raises(IndexMissing, match="run `ingest run` first"):
        empty.search(QUESTION)
