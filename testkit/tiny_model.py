"""A tiny random-weight model shaped like BGE-M3, for tests that need a real embedder.

BGE-M3 is an `XLMRobertaModel` (24 layers, hidden 1024, vocabulary 250,002) with a
`sparse_linear.pt` head beside it. The tiny twin keeps the vocabulary (so the project's
real tokenizer drives it) and shrinks everything else, and is loaded by
`indexing.embedders.BgeM3Embedder` exactly as `BAAI/bge-m3` would be: a local directory
named in `embedder.model`.

Import the fixture in a test module (`from testkit.tiny_model import tiny_model_dir`) or
call `build_tiny_model(path)` directly (the benchmark does).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from chunking.tokens import write_tokenizer_dir
from config.settings import EmbedderSettings
from indexing.embedders import BgeM3Embedder

VOCAB_SIZE = 250_002
HIDDEN_SIZE = 32
SEED = 20240501
# Sparse head: a bias of 1 with small weights keeps every token weight positive and
# near 1, so a sparse score is about the number of shared distinct tokens. Tests can
# then construct keyword queries whose sparse ranking is known in advance.
SPARSE_BIAS = 1.0
SPARSE_WEIGHT_STD = 0.01


def build_tiny_model(
    target: Path,
    *,
    sparse_head: bool = True,
    pooler: bool = False,
    hidden_size: int = HIDDEN_SIZE,
) -> Path:
    """Write a deterministic tiny XLM-RoBERTa model, its tokenizer and (optionally) a
    sparse head into `target`. `pooler` saves the pooling layer too, as many checkpoints
    do (all-MiniLM-L6-v2's), which the embedder does not load; `hidden_size` is the
    vector size."""
    import torch
    from transformers import XLMRobertaConfig, XLMRobertaModel

    torch.manual_seed(SEED)
    config = XLMRobertaConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=hidden_size,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=8194,
        type_vocab_size=1,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
    )
    model = XLMRobertaModel(config, add_pooling_layer=pooler)
    target.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(target)
    write_tokenizer_dir(target)
    if sparse_head:
        head = torch.nn.Linear(hidden_size, 1)
        with torch.no_grad():
            head.weight.normal_(0.0, SPARSE_WEIGHT_STD)
            head.bias.fill_(SPARSE_BIAS)
        torch.save(head.state_dict(), target / "sparse_linear.pt")
    return target


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model directory, built once per test session."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny-bge-m3"))


@pytest.fixture(scope="session")
def wider_tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Another model for a model swap: vectors of 48, no sparse head."""
    return build_tiny_model(
        tmp_path_factory.mktemp("tiny-wider"), sparse_head=False, hidden_size=48
    )


@pytest.fixture(scope="session")
def tiny_embedder(tiny_model_dir: Path) -> BgeM3Embedder:
    """The tiny model loaded once per session through the BGE-M3 code path (CPU)."""
    settings = EmbedderSettings.model_validate(
        {"model": str(tiny_model_dir), "device": "cpu", "batch_size": 8}
    )
    return BgeM3Embedder(settings)
