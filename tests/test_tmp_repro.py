from __future__ import annotations

import pytest

from tests.confluence_api import confluence_api
from tests.test_flow import ENG_DOCUMENTS, NO_CHUNKS, eng, ids_of, prefect_api, workspace
from tests.tiny_model import tiny_model_dir

__all__ = ["confluence_api", "eng", "prefect_api", "tiny_model_dir", "workspace"]
pytestmark = pytest.mark.usefixtures("prefect_api")


@pytest.mark.parametrize("i", range(6))
def test_repro(workspace, eng, i):
    api, fx = eng
    space = workspace(api=api, INGEST_RUN__BATCH_SIZE="1")
    state, summary = space.run(source="confluence", targets=["ENG"])
    docs = space.documents()
    missing = ids_of(fx, [n for n in ENG_DOCUMENTS if n not in NO_CHUNKS]) - set(docs)
    assert (state.is_completed(), summary["failed"], missing) == (True, [], set())
