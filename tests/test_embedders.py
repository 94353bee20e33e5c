"""Embedders: the BGE-M3 code path on a tiny random-weight model, and the
OpenAI-compatible backend against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import hashlib
import json
import math
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from config.errors import ConfigError, ErrorCode, IngestError
from config.settings import EmbedderSettings
from indexing.embedders import BgeM3Embedder, OpenAIEmbedder, make_embedder, pooling_mode
from testkit.tiny_model import HIDDEN_SIZE, tiny_embedder, tiny_model_dir
from tests.process_helpers import run_python

__all__ = ["tiny_embedder", "tiny_model_dir"]  # fixtures used below

TEXTS = [
    "Backups run nightly.",
    "Резервные копии создаются каждую ночь, а восстановление идёт через сервис-деск.",
    "A much longer English sentence about key rotation, vaults, audit trails and the "
    "quarterly review that the security team runs with every product owner.",
    "x",
]


def settings(**values: Any) -> EmbedderSettings:
    return EmbedderSettings.model_validate(values)


# --- BGE-M3 code path -----------------------------------------------------------------


def test_dense_vectors_are_unit_norm_and_sized_by_the_model(tiny_embedder):
    embeddings = tiny_embedder.embed(TEXTS)
    assert tiny_embedder.vector_size == HIDDEN_SIZE
    assert [len(e.dense) for e in embeddings] == [HIDDEN_SIZE] * len(TEXTS)
    for embedding in embeddings:
        assert math.isclose(math.sqrt(sum(v * v for v in embedding.dense)), 1.0, rel_tol=1e-5)
    assert len({tuple(e.dense) for e in embeddings}) == len(TEXTS)


def test_vectors_do_not_depend_on_batching_padding_or_order(tiny_embedder):
    texts = [f"{text} (variant {i})" for i in range(5) for text in TEXTS]  # > one batch of 8
    together = tiny_embedder.embed(texts[::-1])[::-1]
    alone = [tiny_embedder.embed([text])[0] for text in texts]
    for a, b in zip(together, alone, strict=True):
        assert max(abs(x - y) for x, y in zip(a.dense, b.dense, strict=True)) < 1e-5
        assert a.sparse is not None and b.sparse is not None and a.sparse.keys() == b.sparse.keys()
        assert max(abs(a.sparse[k] - b.sparse[k]) for k in a.sparse) < 1e-5


def test_sparse_weights_are_max_per_token_without_special_tokens(tiny_embedder):
    text = "vault vault vault keys"
    (embedding,) = tiny_embedder.embed([text])
    assert embedding.sparse is not None
    token_ids = tiny_embedder.token_ids(text)
    assert set(embedding.sparse) == set(token_ids)  # one entry per distinct token
    assert not {0, 1, 2} & set(embedding.sparse)  # <s>, <pad>, </s>
    assert all(w > 0 for w in embedding.sparse.values())


def test_a_fresh_load_is_deterministic_and_the_id_follows_the_sparse_switch(
    tiny_embedder, tiny_model_dir
):
    dense_only = BgeM3Embedder(settings(model=str(tiny_model_dir), device="cpu", sparse=False))
    assert dense_only.model_id != tiny_embedder.model_id
    assert not dense_only.has_sparse
    fresh, first = dense_only.embed(TEXTS), tiny_embedder.embed(TEXTS)
    for a, b in zip(fresh, first, strict=True):
        assert a.sparse is None
        assert max(abs(x - y) for x, y in zip(a.dense, b.dense, strict=True)) < 1e-6


def test_model_id_changes_with_the_weights(tiny_model_dir, tmp_path):
    from indexing.embedders import local_model_id

    copy = linked_copy(tiny_model_dir, tmp_path / "retrained", skip="model.safetensors")
    data = bytearray((tiny_model_dir / "model.safetensors").read_bytes())
    data[-1] ^= 0xFF  # one byte of the last tensor differs
    (copy / "model.safetensors").write_bytes(bytes(data))
    ids = {local_model_id(d, sparse=True, max_length=8192) for d in (tiny_model_dir, copy)}
    assert len({i.split("@")[1] for i in ids}) == 2


def linked_copy(source: Path, target: Path, skip: str) -> Path:
    """The model directory with every file but `skip` symlinked (fast, no 50 MB copy)."""
    target.mkdir()
    for file in source.iterdir():
        if file.name != skip:
            (target / file.name).symlink_to(file)
    return target


def test_missing_sparse_head_is_an_error_naming_the_file(tiny_model_dir, tmp_path):
    copy = linked_copy(tiny_model_dir, tmp_path / "no-head", skip="sparse_linear.pt")
    with pytest.raises(ConfigError) as failure:
        BgeM3Embedder(settings(model=str(copy), device="cpu"))
    assert str(copy / "sparse_linear.pt") in str(failure.value)
    assert failure.value.subject == "embedder.sparse"


def test_corrupt_sparse_head_is_an_error_naming_the_file(tiny_model_dir, tmp_path):
    copy = linked_copy(tiny_model_dir, tmp_path / "bad-head", skip="sparse_linear.pt")
    (copy / "sparse_linear.pt").write_bytes(b"not a state dict")
    embedder = BgeM3Embedder(settings(model=str(copy), device="cpu"))  # lazy: nothing read
    with pytest.raises(ConfigError, match=r"sparse_linear\.pt cannot be loaded"):
        embedder.embed(["x"])


def test_uncached_hub_id_explains_how_to_get_the_files(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hf-cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ConfigError, match="not in the local Hugging Face cache") as failure:
        make_embedder(settings(model="BAAI/bge-m3"))
    assert "download" in str(failure.value) and failure.value.subject == "embedder.model"


def test_missing_model_directory_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="not a model directory"):
        make_embedder(settings(model=str(tmp_path / "nowhere")))


# --- OpenAI-compatible HTTP -----------------------------------------------------------


def fake_vector(text: str, size: int) -> list[float]:
    digest = hashlib.sha256(text.encode()).digest()
    return [digest[i % len(digest)] / 255.0 for i in range(size)]


class EmbeddingServer:
    """`POST /v1/embeddings` with deterministic vectors; `failures` holds the statuses
    (with an optional Retry-After) to answer before the next success."""

    def __init__(self, size: int = 8) -> None:
        self.size = size
        self.failures: list[tuple[int, str | None]] = []
        self.requests: list[dict[str, Any]] = []
        self.auth: list[str | None] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append(body)
                server.auth.append(self.headers.get("Authorization"))
                if self.path != "/v1/embeddings":
                    self._send(404, {"error": "not found"})
                elif server.failures:
                    status, retry_after = server.failures.pop(0)
                    self._send(status, {"error": "busy"}, retry_after)
                else:
                    data = [
                        {
                            "object": "embedding",
                            "index": i,
                            "embedding": fake_vector(t, server.size),
                        }
                        for i, t in enumerate(body["input"])
                    ]
                    self._send(200, {"object": "list", "data": data[::-1]})  # any order

            def _send(self, status: int, payload: Any, retry_after: str | None = None) -> None:
                raw = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                if retry_after is not None:
                    self.send_header("Retry-After", retry_after)
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[EmbeddingServer]:
    server = EmbeddingServer()
    yield server
    server.close()


def openai(server: EmbeddingServer, **values: Any) -> OpenAIEmbedder:
    base = {"kind": "openai", "url": server.url, "model": "bge-m3", "retry_backoff_s": 0.01}
    embedder = make_embedder(settings(**{**base, **values}))
    assert isinstance(embedder, OpenAIEmbedder)
    return embedder


def test_openai_backend_batches_and_keeps_input_order(server):
    embedder = openai(server, batch_size=3, api_key="s3cret-key")
    texts = [f"text {i}" for i in range(7)]

    embeddings = embedder.embed(texts)

    assert [e.dense for e in embeddings] == [fake_vector(t, 8) for t in texts]
    assert [len(r["input"]) for r in server.requests] == [3, 3, 1]
    assert {r["model"] for r in server.requests} == {"bge-m3"}
    assert set(server.auth) == {"Bearer s3cret-key"}
    assert embedder.vector_size == 8 and not embedder.has_sparse
    assert "s3cret" not in embedder.model_id and "s3cret" not in repr(vars(embedder))


def test_openai_vector_size_probes_the_endpoint_when_not_configured(server):
    embedder = openai(server)
    assert embedder.vector_size == 8
    assert len(server.requests) == 1
    configured = openai(server, vector_size=8)
    assert configured.vector_size == 8 and len(server.requests) == 1


def test_openai_retries_429_with_retry_after_and_5xx_with_backoff(server):
    server.failures = [(429, "0"), (503, None), (502, None)]
    embedder = openai(server)
    (embedding,) = embedder.embed(["hello"])
    assert embedding.dense == fake_vector("hello", 8)
    assert len(server.requests) == 4


def test_openai_gives_up_after_max_retries_as_a_transient_failure(server):
    server.failures = [(503, None)] * 3
    embedder = openai(server, max_retries=2)
    with pytest.raises(IngestError) as failure:
        embedder.embed(["hello"])
    assert failure.value.code is ErrorCode.EMBED_FAILED and failure.value.transient
    assert "3 attempts" in str(failure.value) and len(server.requests) == 3


def test_openai_client_errors_are_not_retried(server):
    server.failures = [(400, None)]
    embedder = openai(server)
    with pytest.raises(IngestError) as failure:
        embedder.embed(["hello"])
    assert not failure.value.transient and "HTTP 400" in str(failure.value)
    assert len(server.requests) == 1


def test_openai_wrong_vector_size_is_refused(server):
    embedder = openai(server, vector_size=16)
    with pytest.raises(IngestError, match="vector size"):
        embedder.embed(["hello"])


def test_openai_unreachable_endpoint_is_transient(tmp_path: Path):
    embedder = make_embedder(
        settings(kind="openai", url="http://127.0.0.1:9", max_retries=1, retry_backoff_s=0.01)
    )
    with pytest.raises(IngestError) as failure:
        embedder.embed(["hello"])
    assert failure.value.transient and "ConnectionError" in str(failure.value)


def test_openai_needs_a_url():
    with pytest.raises(ConfigError, match="base URL"):
        make_embedder(settings(kind="openai"))


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (None, "cls"),
        ({"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False}, "cls"),
        ({"pooling_mode_cls_token": False, "pooling_mode_mean_tokens": True}, "mean"),
    ],
)
def test_pooling_follows_the_model_directory(tmp_path, config, expected):
    if config is not None:
        (tmp_path / "1_Pooling").mkdir()
        (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps(config))
    assert pooling_mode(tmp_path) == expected


def test_unsupported_pooling_is_a_config_error(tmp_path):
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling" / "config.json").write_text('{"pooling_mode_max_tokens": true}')
    with pytest.raises(ConfigError, match="only CLS and mean"):
        pooling_mode(tmp_path)


# --- token budget, windows, lazy and quiet loading --------------------------------------


def test_batches_stay_within_the_token_budget_and_match_unbatched_embedding(tiny_model_dir):
    """One text far over the window and many short ones in one call: no forward pass is
    padded past `tokens_per_batch`, the long text is embedded whole (window by window,
    never cut), and every vector equals the text embedded alone."""
    embedder = BgeM3Embedder(
        settings(model=str(tiny_model_dir), device="cpu", batch_size=64, tokens_per_batch=256)
    )
    assert embedder.window == 256  # the budget caps the window (the model takes 8192)
    long_text = " ".join(f"word{i}" for i in range(600))  # about 1,800 tokens
    short = [f"{text} ({i})" for i in range(12) for text in TEXTS]
    texts = [*short[:20], long_text, *short[20:]]

    together = embedder.embed(texts)

    assert 0 < embedder.largest_batch_tokens <= 256
    content = len(embedder.token_ids(long_text))
    assert together[20].windows == math.ceil(content / (256 - 2)) > 1
    assert {e.windows for i, e in enumerate(together) if i != 20} == {1}
    for text, embedding in zip(texts, together, strict=True):
        (alone,) = embedder.embed([text])
        assert max(abs(x - y) for x, y in zip(embedding.dense, alone.dense, strict=True)) < 1e-5
        assert embedding.sparse is not None and alone.sparse is not None
        assert embedding.sparse.keys() == alone.sparse.keys()
    # The tail of the long text counts: its tokens are weighted, its vector is not that
    # of its first window (the tiny model's CLS vectors differ little, hence 1e-4).
    (head,) = embedder.embed([embedder_text_of_first_window(embedder, long_text)])
    assert set(together[20].sparse or {}) > set(head.sparse or {})
    assert max(abs(x - y) for x, y in zip(head.dense, together[20].dense, strict=True)) > 1e-4


def embedder_text_of_first_window(embedder: BgeM3Embedder, text: str) -> str:
    words = text.split()
    while len(embedder.token_ids(" ".join(words))) > embedder.window - 2:
        words = words[: len(words) * 9 // 10]
    return " ".join(words)


@pytest.mark.parametrize("seed", range(5))
def test_packed_batches_hold_every_sequence_once_within_the_budget(seed):
    import random

    from indexing.embedders import pack_batches

    rng = random.Random(seed)
    lengths = [rng.choice([1, 3, 17, 64, 200, 500, 512]) for _ in range(rng.randint(1, 300))]
    batches = pack_batches(lengths, tokens_per_batch=1024, batch_size=16)
    assert sorted(i for batch in batches for i in batch) == list(range(len(lengths)))
    for batch in batches:
        assert len(batch) <= 16
        assert len(batch) * max(lengths[i] for i in batch) <= 1024


@pytest.mark.slow
def test_the_model_loads_only_when_something_is_embedded(tiny_model_dir):
    """Constructing the embedder (what a run with nothing to embed does) reads the model
    directory's small files only: model id, vector size and window come without torch."""
    done = run_python(
        f"""
        import sys
        from config.settings import EmbedderSettings
        from indexing.embedders import BgeM3Embedder
        embedder = BgeM3Embedder(EmbedderSettings(model={str(tiny_model_dir)!r}, device="cpu"))
        print(embedder.vector_size, embedder.window, embedder.model_id)
        print("torch" in sys.modules, "transformers" in sys.modules, embedder.loaded)
        embedder.embed(["hello"])
        print("torch" in sys.modules, embedder.loaded)
        """
    )
    assert done.returncode == 0, done.stderr
    sizes, before, after = done.stdout.splitlines()
    loaded = BgeM3Embedder(settings(model=str(tiny_model_dir), device="cpu"))
    assert sizes == f"{HIDDEN_SIZE} 8192 {loaded.model_id}"
    assert before == "False False False"
    assert after == "True True"


@pytest.mark.slow
def test_loading_and_embedding_print_nothing(tmp_path):
    """A checkpoint with weights the embedder does not load (a pooler, as
    all-MiniLM-L6-v2 ships) makes transformers print a LOAD REPORT table, and loading
    prints a progress bar; the embedder's load and embed print neither, nor anything."""
    from testkit.tiny_model import build_tiny_model

    model = build_tiny_model(tmp_path / "with-pooler", pooler=True)
    done = run_python(
        f"""
        import os
        from config.settings import EmbedderSettings
        from indexing.embedders import BgeM3Embedder
        embedder = BgeM3Embedder(EmbedderSettings(model={str(model)!r}, device="cpu"))
        embedder.embed(["hello", "word " * 9000])  # the second is over the window
        os.write(1, b"MARK\\n"); os.write(2, b"MARK\\n")
        from transformers import AutoModel
        AutoModel.from_pretrained({str(model)!r}, add_pooling_layer=False)
        """
    )
    assert done.returncode == 0, done.stderr
    ours, theirs = done.stderr.split("MARK\n")
    assert "LOAD REPORT" in theirs and "Loading weights" in theirs  # the precondition
    assert ours == "" and done.stdout == "MARK\n"
