"""The LangChain and LlamaIndex retrievers (the `langchain` and `llamaindex` extras) over
the query API, on a small index of the quickstart samples and one page only user `ann`
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
from tests.query_helpers import (
    QUESTION,
    RESTART,
    SECRET_TEXT,
    SECRET_URL,
    SECRET_WORD,
    QueryIndex,
    build_query_index,
)
from tests.tiny_model import tiny_model_dir

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
