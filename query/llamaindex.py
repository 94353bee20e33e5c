"""A LlamaIndex retriever over the index (`pip install ".[llamaindex]"`): the project's
own search (hybrid where the collection allows, its filters and access rules), each hit a
`TextNode` whose text is the chunk and whose metadata is the few fields worth citing
(`Hit.metadata`); the LLM sees the text, the title and the link, the embedder the text
and the title.

    from query.api import Identity, Index
    from query.llamaindex import IndexRetriever

    index = Index.open("settings.yaml")
    retriever = IndexRetriever(index, identity=Identity("ann", ("staff",)), k=5)
    nodes = retriever.retrieve("how do I restart a service")
"""

from __future__ import annotations

from collections.abc import Sequence

from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from indexing.search import SearchMode
from query.api import PUBLIC, Hit, Identity, Index

LLM_SEES = ("title", "citation_url")


class IndexRetriever(BaseRetriever):
    """`identity`: whose access applies (default: public documents only); `spaces` and
    `labels` narrow the search; `mode` None: the `search.mode` setting."""

    def __init__(
        self,
        index: Index,
        *,
        identity: Identity = PUBLIC,
        k: int = 5,
        mode: SearchMode | None = None,
        spaces: Sequence[str] = (),
        labels: Sequence[str] = (),
    ) -> None:
        super().__init__()
        self.index = index
        self.identity = identity
        self.k = k
        self.mode = mode
        self.spaces = tuple(spaces)
        self.labels = tuple(labels)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        hits = self.index.search(
            query_bundle.query_str,
            identity=self.identity,
            limit=self.k,
            mode=self.mode,
            containers=self.spaces,
            labels=self.labels,
        )
        return [NodeWithScore(node=_node(hit), score=hit.score) for hit in hits]


def _node(hit: Hit) -> TextNode:
    metadata = hit.metadata()
    return TextNode(
        id_=hit.chunk_id,
        text=hit.text,
        metadata=metadata,
        excluded_llm_metadata_keys=[key for key in metadata if key not in LLM_SEES],
        excluded_embed_metadata_keys=[key for key in metadata if key != "title"],
    )
