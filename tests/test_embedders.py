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
from tests.tiny_model import HIDDEN_SIZE, tiny_embedder, tiny_model_dir

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
    tokenizer = tiny_embedder._tokenizer
    text = "vault vault vault keys"
    (embedding,) = tiny_embedder.embed([text])
    assert embedding.sparse is not None
    token_ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert set(embedding.sparse) == set(token_ids)  # one entry per distinct token
    specials = {tokenizer.cls_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id}
    assert not specials & set(embedding.sparse)
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
    with pytest.raises(ConfigError, match=r"sparse_linear\.pt cannot be loaded"):
        BgeM3Embedder(settings(model=str(copy), device="cpu"))


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
