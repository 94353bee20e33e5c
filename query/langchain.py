"""A LangChain retriever over the index (`pip install ".[langchain]"`): the project's own
search (hybrid where the collection allows, its filters and access rules), each hit a
`Document` whose text is the chunk and whose metadata is the few fields worth citing
(`Hit.metadata`), not the whole payload.

    from query.api import Identity, Index
    from query.langchain import IndexRetriever

    index = Index.open("settings.yaml")
    retriever = IndexRetriever(index=index, identity=Identity("ann", ("staff",)), k=5)
    docs = retriever.invoke("how do I restart a service")
"""

from __future__ import annotations

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict

from indexing.search import SearchMode
from query.api import PUBLIC, Identity, Index


class IndexRetriever(BaseRetriever):
    """`identity`: whose access applies (default: public documents only); `spaces` and
    `labels` narrow the search; `mode` None: the `search.mode` setting."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    index: Index
    identity: Identity = PUBLIC
    k: int = 5
    mode: SearchMode | None = None
    spaces: tuple[str, ...] = ()
    labels: tuple[str, ...] = ()

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        hits = self.index.search(
            query,
            identity=self.identity,
            limit=self.k,
            mode=self.mode,
            containers=self.spaces,
            labels=self.labels,
        )
        return [
            Document(page_content=hit.text, metadata=hit.metadata(), id=hit.chunk_id)
            for hit in hits
        ]
