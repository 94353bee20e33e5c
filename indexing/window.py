"""The chunk budgets against the embedding model's input window (never
truncate silently).

A chunk's `embed_text` is a one-line context header, the overlap prefix and `md_text`.
The chunk budgets count chunking (BGE-M3) tokens; the model counts its own, so at
start-up `fit_budgets_to_window(settings)` converts the worst case:

- the window: the model's input window (its directory's JSON files, `embedder.max_length`)
  minus the special tokens its tokenizer adds;
- the ratio: model tokens per chunking token, the worst over the paragraphs of
  `indexing.calibration` in `embedder.languages`, both tokenizers run on them (no torch);
- the longest `embed_text` the budgets allow: `embedder.header_tokens` for the header,
  plus the larger of `max_tokens + overlap_tokens` (paragraph and mixed chunks) and
  `oversize_block_limit` (a code or table block kept whole, its bound context included).

If that, times the ratio, is over the window, the run is refused with a message naming
both numbers, or, with `embedder.on_overflow: shrink`, the chunking budgets are scaled
down to fit and a warning says so. The ratio is measured, not a bound: a chunk that still
exceeds the window (text in another language, a long title) is embedded window by window
and reported (`Embedding.windows`, `SyncResult.over_window`), never cut.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path

from chunking.tokens import ASSET_SHA256, BUNDLED, get_token_counter
from config.errors import ConfigError
from config.settings import ChunkingSettings, Settings
from indexing.calibration import CALIBRATION
from indexing.embedders import read_model_files, resolve_model_dir

# Budgets `shrink` scales by one factor (their order and `overlap < min` hold after it).
_PACKING = ("min_tokens", "target_tokens", "max_tokens", "overlap_tokens")


@dataclass(frozen=True)
class WindowFit:
    """The outcome of the start-up check."""

    settings: Settings  # as given, or with the chunking budgets shrunk to fit
    window: int | None  # model tokens left for the text; None when not checked (openai)
    ratio: float  # model tokens per chunking token, worst on the calibration text
    longest_embed_text: int  # chunking tokens the budgets allow (header included)
    warning: str | None = None  # what shrinking changed


def longest_embed_text(chunking: ChunkingSettings, header_tokens: int) -> int:
    """Chunking tokens of the longest `embed_text` the budgets allow."""
    body = max(chunking.max_tokens + chunking.overlap_tokens, chunking.oversize_block_limit)
    return header_tokens + body


def fit_budgets_to_window(settings: Settings) -> WindowFit:
    """Check (and with `on_overflow: shrink`, fit) the chunk budgets to the embedding
    model's window. Call it once at start-up, before chunking, with the run's settings;
    use the settings it returns. Raises ConfigError when the budgets do not fit."""
    embedder = settings.embedder
    longest = longest_embed_text(settings.chunking, embedder.header_tokens)
    if embedder.kind == "openai":  # the server's window and tokenizer are not known here
        return WindowFit(settings, None, 1.0, longest)
    directory = resolve_model_dir(embedder.model)
    files = read_model_files(directory, min(embedder.max_length, embedder.tokens_per_batch))
    specials, ratio = _measure(directory, settings)
    room = files.window - specials
    needed = math.ceil(longest * ratio)
    if needed <= room:
        return WindowFit(settings, room, ratio, longest)
    allowed = math.floor(room / ratio)  # chunking tokens that fit
    explain = (
        f"chunks' embed_text can reach {longest} chunking tokens (embedder.header_tokens "
        f"{embedder.header_tokens} + max(chunking.max_tokens {settings.chunking.max_tokens} "
        f"+ overlap_tokens {settings.chunking.overlap_tokens}, oversize_block_limit "
        f"{settings.chunking.oversize_block_limit})), about {needed} tokens of the embedding "
        f"model ({ratio:.2f} of its tokens per chunking token at worst on "
        f"{'/'.join(embedder.languages)} text), but its window holds {room} "
        f"({files.window} with {specials} special tokens; embedder.model {embedder.model})"
    )
    body = allowed - embedder.header_tokens
    if embedder.on_overflow == "refuse" or body < 2:
        raise ConfigError(
            f"{explain}. Lower chunking.max_tokens + overlap_tokens and "
            f"oversize_block_limit to at most {body}, or set embedder.on_overflow: shrink "
            "to scale the chunk budgets down to fit",
            setting="embedder.on_overflow"
            if embedder.on_overflow == "shrink"
            else "chunking.max_tokens",
        )
    chunking = shrink_budgets(settings.chunking, body)
    fitted = settings.model_copy(update={"chunking": chunking})
    budgets = ", ".join(
        f"{name} {getattr(chunking, name)}" for name in (*_PACKING, "oversize_block_limit")
    )
    return WindowFit(
        fitted,
        room,
        ratio,
        longest_embed_text(chunking, embedder.header_tokens),
        warning=f"{explain}: chunk budgets shrunk to {budgets} (embedder.on_overflow: shrink)",
    )


def shrink_budgets(chunking: ChunkingSettings, body: int) -> ChunkingSettings:
    """The budgets fitted so that `max_tokens + overlap_tokens` and `oversize_block_limit`
    are at most `body`: the packing budgets (min, target, soft max, max, overlap) scaled
    by one factor, which keeps their order, and the oversize limit lowered to `body`
    (bound context never passes the new max: the binding budgets need no change)."""
    factor = min(1.0, body / (chunking.max_tokens + chunking.overlap_tokens))
    scaled: dict[str, int | None] = {
        name: max(1, math.floor(getattr(chunking, name) * factor)) for name in _PACKING
    }
    minimum = int(scaled["min_tokens"] or 1)
    scaled["overlap_tokens"] = min(math.floor(chunking.overlap_tokens * factor), minimum - 1)
    if chunking.soft_max_tokens is not None:
        scaled["soft_max_tokens"] = max(1, math.floor(chunking.soft_max_tokens * factor))
    scaled["oversize_block_limit"] = min(chunking.oversize_block_limit, body)
    return ChunkingSettings.model_validate({**chunking.model_dump(), **scaled})


def _measure(directory: Path, settings: Settings) -> tuple[int, float]:
    """(special tokens per input, worst model tokens per chunking token) for the model in
    `directory`, from its tokenizer.json through `tokenizers` (no torch)."""
    languages = settings.embedder.languages
    path = directory / "tokenizer.json"
    if not path.is_file():
        raise ConfigError(
            f"{directory} has no tokenizer.json, which the start-up window check reads",
            setting="embedder.model",
        )
    raw = path.read_bytes()
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_str(raw.decode("utf-8"))
    specials = int(tokenizer.num_special_tokens_to_add(False))
    if settings.chunking.tokenizer == BUNDLED and hashlib.sha256(raw).hexdigest() == ASSET_SHA256:
        return specials, 1.0  # the model tokenizes exactly as the chunker counts
    # The file's own truncation and padding (all-MiniLM-L6-v2's cuts at 128) would cap counts.
    tokenizer.no_truncation()
    tokenizer.no_padding()
    counter = get_token_counter(settings.chunking.tokenizer)
    paragraphs = [text for language in languages for text in CALIBRATION[language]]
    model_counts = [
        len(e.ids) for e in tokenizer.encode_batch(paragraphs, add_special_tokens=False)
    ]
    chunk_counts = counter.count_many(paragraphs)
    return specials, max(m / c for m, c in zip(model_counts, chunk_counts, strict=True))
