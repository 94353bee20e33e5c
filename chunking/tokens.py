"""Exact BGE-M3 token counts, offline (docs/chunking.md#token-counts).

The bundled tokenizer is the XLM-RoBERTa SentencePiece Unigram model BGE-M3 uses
(vendored as `assets/xlm-roberta-tokenizer.json.xz`, sha256-checked on load). Two
engines count with it and agree exactly:

- `HFTokenCounter`: `tokenizers` with the normalizer and pre-tokenizer set as
  transformers' XLMRobertaTokenizer behaves (the raw JSON differs on whitespace runs);
- `SentencePieceCounter`: the same vocabulary and char-map compiled into a SentencePiece
  model, about 8x faster. The inputs it would count differently are counted exactly
  without loading the `tokenizers` engine (which cost 400 MB) or a second SentencePiece
  one: literal special tokens (`<s>`, `<mask>`...) split the text as transformers splits
  it and count one each; a word holding a character SentencePiece's char-map composes
  with the one before it and the `tokenizers` one does not (half-width voiced sound
  marks ﾞ ﾟ, combining kana voiced marks, conjoining Hangul jamo: decomposed Japanese and
  Korean) is normalized by the `tokenizers` char-map and segmented by a unigram Viterbi
  over the loaded vocabulary, as SentencePiece would with its normalization off.

Counts exclude special tokens. A configured Hugging Face id or local path loads that
tokenizer through `tokenizers` instead.
"""

from __future__ import annotations

import base64
import hashlib
import json
import lzma
import re
import threading
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any, Protocol

from config.errors import ConfigError

ASSET_PATH = Path(__file__).with_name("assets") / "xlm-roberta-tokenizer.json.xz"
ASSET_SHA256 = "0b44a9d7b51c3c62626640cda0e2c2f70fdacdc25bbbd68038369d14ebdf4c39"
# The same vocabulary compiled into a SentencePiece model (`_sentencepiece_model`, checked
# byte for byte by tests/test_tokens.py): loading it skips parsing the 17 MB JSON, which
# cost every process ~150 MB of peak memory and 0.7 s.
MODEL_PATH = Path(__file__).with_name("assets") / "xlm-roberta-sentencepiece.model.xz"
MODEL_SHA256 = "940584b0674069f968d9283d7d8e713c62f27411ebc9c3f8a2f41ce9e6bb3874"
BUNDLED = "bundled"

# Literal added tokens split the text before the model sees it (transformers does this);
# their ids in the XLM-R vocabulary.
_SPECIAL_LITERALS = re.compile(r"<s>|</s>|<pad>|<unk>|<mask>")
_SPECIAL_IDS = MappingProxyType({"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, "<mask>": 250001})
# Characters SentencePiece's char-map composes with the one before them and the tokenizers
# one does not: half-width voiced sound marks (ﾞ ﾟ), combining kana voiced marks (as in
# decomposed Japanese, e.g. macOS file names) and conjoining Hangul jamo (decomposed
# Korean). Every other character counts alike in both (checked by the tests).
_COMPOSING = "\uff9e\uff9f\u3099\u309a\u1100-\u11ff\ua960-\ua97f\ud7b0-\ud7ff"
_SP_DIVERGENT = re.compile(rf"[{_COMPOSING}]|<s>|</s>|<pad>|<unk>|<mask>")
# A word (between ASCII whitespace, where both engines split) holding such a character.
_COMPOSING_WORD = re.compile(rf"[^ \t\n\r]*[{_COMPOSING}][^ \t\n\r]*")


class TokenCounter(Protocol):
    """Counts tokens without special tokens. `name` identifies the tokenizer in cache keys.
    `additive`: texts joined by whitespace count the sum of their counts (true of a
    tokenizer that splits at whitespace before its model runs), so the chunker can add
    up counts instead of counting a joined chunk again."""

    name: str
    additive: bool

    def count(self, text: str) -> int: ...

    def count_many(self, texts: Sequence[str]) -> list[int]: ...

    def encode(self, text: str) -> list[int]: ...


@lru_cache(maxsize=1)
def bundled_tokenizer_json() -> bytes:
    """The vendored tokenizer.json, decompressed and verified."""
    return _verified_asset(ASSET_PATH, ASSET_SHA256)


def bundled_sentencepiece_model() -> bytes:
    """The vendored SentencePiece model compiled from the tokenizer, verified."""
    return _verified_asset(MODEL_PATH, MODEL_SHA256)


def _verified_asset(path: Path, sha256: str) -> bytes:
    raw = lzma.decompress(path.read_bytes())
    digest = hashlib.sha256(raw).hexdigest()
    if digest != sha256:
        raise RuntimeError(
            f"{path} is damaged: sha256 {digest}, expected {sha256}; reinstall the package"
        )
    return raw


def write_tokenizer_dir(target: Path) -> Path:
    """Write the bundled tokenizer as a directory `transformers.AutoTokenizer` loads
    (tokenizer.json + tokenizer_config.json naming XLMRobertaTokenizer)."""
    target.mkdir(parents=True, exist_ok=True)
    (target / "tokenizer.json").write_bytes(bundled_tokenizer_json())
    config = {
        "tokenizer_class": "XLMRobertaTokenizer",
        "model_max_length": 8192,
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "sep_token": "</s>",
        "cls_token": "<s>",
        "pad_token": "<pad>",
        "mask_token": "<mask>",
    }
    (target / "tokenizer_config.json").write_text(json.dumps(config, indent=1))
    return target


def _xlmr_fixups(tokenizer: Any, spec: dict[str, Any]) -> None:
    """Make a raw XLM-R tokenizer.json count as transformers does: char-map normalizer
    only, whitespace split then Metaspace with an always-prepended marker."""
    from tokenizers import normalizers, pre_tokenizers

    normalizer = spec.get("normalizer") or {}
    parts = normalizer.get("normalizers", [normalizer])
    charmap = next((p for p in parts if p.get("type") == "Precompiled"), None)
    if charmap is None or spec.get("model", {}).get("type") != "Unigram":
        return  # not the XLM-R family: use the file as it is
    tokenizer.normalizer = normalizers.Precompiled(
        base64.b64decode(charmap["precompiled_charsmap"])
    )
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace(prepend_scheme="always")]
    )


class HFTokenCounter:
    def __init__(self, tokenizer_json: bytes, name: str) -> None:
        from tokenizers import Tokenizer

        spec = json.loads(tokenizer_json)
        self._tokenizer = Tokenizer.from_str(tokenizer_json.decode("utf-8"))
        self.additive = False  # any tokenizer may be configured: count joined text again
        _xlmr_fixups(self._tokenizer, spec)
        self.name = name

    def encode(self, text: str) -> list[int]:
        ids: list[int] = self._tokenizer.encode(text, add_special_tokens=False).ids
        return ids

    def count(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def count_many(self, texts: Sequence[str]) -> list[int]:
        encodings = self._tokenizer.encode_batch(list(texts), add_special_tokens=False)
        return [len(e.ids) for e in encodings]


class SentencePieceCounter:
    """The bundled vocabulary compiled into a SentencePiece model (fast path)."""

    def __init__(self, model: bytes, name: str) -> None:
        import sentencepiece as spm

        self._processor = spm.SentencePieceProcessor(model_proto=model)
        self._exact: _ExactPath | None = None  # built on the first input that needs it
        self._lock = threading.Lock()
        self.name = name
        # Split at whitespace before the model (and literals, which count one each).
        self.additive = True

    def _exact_path(self) -> _ExactPath:
        with self._lock:
            if self._exact is None:
                self._exact = _ExactPath(self._processor)
            return self._exact

    def encode(self, text: str) -> list[int]:
        if _SP_DIVERGENT.search(text):
            return self._exact_path().encode(text)
        return _fairseq_ids(self._processor.encode(text))

    def count(self, text: str) -> int:
        if _SP_DIVERGENT.search(text):
            return len(self._exact_path().encode(text))
        return len(self._processor.encode(text))

    def count_many(self, texts: Sequence[str]) -> list[int]:
        # One call per text: SentencePiece's list form starts a thread pool per call,
        # which costs more than it saves on the short texts the chunker counts.
        encode = self._processor.encode
        divergent = _SP_DIVERGENT.search
        return [
            len(self._exact_path().encode(text)) if divergent(text) else len(encode(text))
            for text in texts
        ]


def _fairseq_ids(ids: list[int]) -> list[int]:
    # SentencePiece ids are the fairseq ids shifted by one (XLM-R adds <pad> at 1).
    return [i + 1 if i >= 3 else 3 for i in ids]


class _ExactPath:
    """Counts, exactly as transformers' XLM-R tokenizer does, the inputs SentencePiece
    alone would count differently (see the module docstring)."""

    def __init__(self, processor: Any) -> None:
        self._processor = processor
        self._segmenter: _UnnormalizedSegmenter | None = None  # for the first voiced mark

    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        position = 0
        for literal in _SPECIAL_LITERALS.finditer(text):
            ids.extend(self._segment(text[position : literal.start()]))
            ids.append(_SPECIAL_IDS[literal.group(0)])
            position = literal.end()
        ids.extend(self._segment(text[position:]))
        return ids

    def _segment(self, text: str) -> list[int]:
        """Text between literals: words are tokenized one by one in both engines, so
        plain words and half-width katakana words can be encoded apart and joined."""
        ids: list[int] = []
        position = 0
        for word in _COMPOSING_WORD.finditer(text):
            if self._segmenter is None:
                self._segmenter = _UnnormalizedSegmenter(self._processor)
            ids.extend(self._processor.encode(text[position : word.start()]))
            ids.extend(self._segmenter.encode(word.group(0)))
            position = word.end()
        ids.extend(self._processor.encode(text[position:]))
        return _fairseq_ids(ids)


_UNK_PENALTY = 10.0  # SentencePiece scores an unknown character min_score - 10


class _UnnormalizedSegmenter:
    """A word normalized by the `tokenizers` char-map, segmented by the loaded
    SentencePiece vocabulary with SentencePiece's own normalization off: its unigram
    Viterbi (best total score; on a tie the longest last piece) over the one processor,
    so no second engine (about 80 MB) is loaded for these few words."""

    def __init__(self, processor: Any) -> None:
        from sentencepiece import sentencepiece_model_pb2
        from tokenizers import normalizers

        pb: Any = sentencepiece_model_pb2  # generated protobuf module: no type stubs
        proto = pb.ModelProto()
        proto.ParseFromString(processor.serialized_model_proto())
        self._normalizer = normalizers.Precompiled(proto.normalizer_spec.precompiled_charsmap)
        self._processor = processor
        size = processor.get_piece_size()
        self._unk_id = processor.unk_id()
        self._unk_score = min(processor.get_score(i) for i in range(size)) - _UNK_PENALTY
        self._longest = max(len(processor.id_to_piece(i)) for i in range(size))

    def _piece(self, text: str) -> int | None:
        piece_id: int = self._processor.piece_to_id(text)
        if piece_id == self._unk_id or self._processor.is_control(piece_id):
            return None
        return piece_id

    def encode(self, word: str) -> list[int]:
        # SentencePiece's identity normalization still drops and collapses spaces, escapes
        # them as U+2581 and adds the dummy prefix.
        parts = [part for part in self._normalizer.normalize_str(word).split(" ") if part]
        if not parts:
            return []
        text = "\u2581" + "\u2581".join(parts)
        # Forward lattice as SentencePiece walks it: starts in order, a node's best path
        # replaced only by a strictly better one (so a tie keeps the longer last piece),
        # an unknown character where no one-character piece starts.
        best: list[tuple[float, int, int] | None] = [(0.0, 0, -1)] + [None] * len(text)
        for start in range(len(text)):
            reached = best[start]
            assert reached is not None  # every position is reached by a piece or an unknown
            single = False
            for end in range(start + 1, min(len(text), start + self._longest) + 1):
                piece_id = self._piece(text[start:end])
                if piece_id is None:
                    continue
                single = single or end == start + 1
                total = reached[0] + self._processor.get_score(piece_id)
                current = best[end]
                if current is None or total > current[0]:
                    best[end] = (total, start, piece_id)
            current = best[start + 1]
            if not single and (current is None or reached[0] + self._unk_score > current[0]):
                best[start + 1] = (reached[0] + self._unk_score, start, self._unk_id)
        ids: list[int] = []
        end = len(text)
        while end > 0:
            node = best[end]
            assert node is not None
            # A run of unknown characters is one unknown token, as SentencePiece emits it.
            if not (node[2] == self._unk_id and ids and ids[-1] == self._unk_id):
                ids.append(node[2])
            end = node[1]
        return ids[::-1]


def _sentencepiece_model(spec: dict[str, Any]) -> bytes:
    from sentencepiece import sentencepiece_model_pb2

    pb: Any = sentencepiece_model_pb2  # generated protobuf module: no type stubs

    normalizer = spec["normalizer"]
    charmap = next(p for p in normalizer["normalizers"] if p["type"] == "Precompiled")
    model = pb.ModelProto()
    model.trainer_spec.model_type = pb.TrainerSpec.UNIGRAM
    model.trainer_spec.split_by_whitespace = True
    model.trainer_spec.unk_id, model.trainer_spec.bos_id, model.trainer_spec.eos_id = 0, 1, 2
    model.trainer_spec.pad_id = -1
    model.normalizer_spec.name = "nmt_nfkc"
    model.normalizer_spec.precompiled_charsmap = base64.b64decode(charmap["precompiled_charsmap"])
    model.normalizer_spec.add_dummy_prefix = True
    model.normalizer_spec.remove_extra_whitespaces = True
    model.normalizer_spec.escape_whitespaces = True
    kinds = pb.ModelProto.SentencePiece
    for piece, kind in (("<unk>", kinds.UNKNOWN), ("<s>", kinds.CONTROL), ("</s>", kinds.CONTROL)):
        entry = model.pieces.add()
        entry.piece, entry.type, entry.score = piece, kind, 0.0
    # fairseq order: <s> <pad> </s> <unk> then the SentencePiece pieces; <mask> is added last.
    for piece, score in spec["model"]["vocab"][4:-1]:
        entry = model.pieces.add()
        entry.piece, entry.score = piece, score
    data: bytes = model.SerializeToString()
    return data


def get_token_counter(tokenizer: str = BUNDLED) -> TokenCounter:
    """The counter for a `chunking.tokenizer` setting: `bundled`, a local path, or an HF id;
    one per setting and process, however it is called."""
    return _load_counter(tokenizer)


@lru_cache(maxsize=4)
def _load_counter(tokenizer: str) -> TokenCounter:
    if tokenizer == BUNDLED:
        return SentencePieceCounter(bundled_sentencepiece_model(), name="bge-m3-bundled")
    path = Path(tokenizer)
    candidate = path / "tokenizer.json" if path.is_dir() else path
    if candidate.is_file():
        return HFTokenCounter(candidate.read_bytes(), name=f"file:{candidate.resolve()}")
    if path.exists() or tokenizer.startswith((".", "/")):
        raise ConfigError(
            f"no tokenizer.json at {tokenizer!r}; point it at a directory holding tokenizer.json",
            setting="chunking.tokenizer",
        )
    try:
        from tokenizers import Tokenizer

        loaded = Tokenizer.from_pretrained(tokenizer)
    except Exception as exc:
        raise ConfigError(
            f"cannot load tokenizer {tokenizer!r} from the Hugging Face hub ({exc}); "
            "use 'bundled' or a local directory when offline",
            setting="chunking.tokenizer",
        ) from None
    return HFTokenCounter(loaded.to_str().encode("utf-8"), name=f"hf:{tokenizer}")
