"""Exact BGE-M3 counts: every golden case of the BGE-M3 tokenizer (tests/bge_m3_golden_cases.json), both engines."""

from __future__ import annotations

import json
import lzma
import random
import unicodedata
from pathlib import Path
from typing import Any

import pytest

from chunking import tokens
from chunking.tokens import (
    HFTokenCounter,
    SentencePieceCounter,
    bundled_sentencepiece_model,
    bundled_tokenizer_json,
    get_token_counter,
    write_tokenizer_dir,
)
from config.errors import ConfigError

GOLDEN = json.loads((Path(__file__).with_name("bge_m3_golden_cases.json")).read_text("utf-8"))
BOS, EOS = 0, 2


@pytest.fixture(scope="module", params=["sentencepiece", "tokenizers"])
def engine(request: pytest.FixtureRequest) -> tokens.TokenCounter:
    if request.param == "sentencepiece":
        return SentencePieceCounter(bundled_sentencepiece_model(), "bundled")
    return HFTokenCounter(bundled_tokenizer_json(), "bundled")


@pytest.mark.parametrize("case", GOLDEN["cases"], ids=lambda c: repr(c["text"][:24]))
def test_golden_ids_with_special_tokens(engine: tokens.TokenCounter, case: dict[str, Any]) -> None:
    assert [BOS, *engine.encode(case["text"]), EOS] == case["ids"]
    assert engine.count(case["text"]) == len(case["ids"]) - 2


@pytest.mark.parametrize("case", GOLDEN["no_special_cases"], ids=lambda c: repr(c["text"]))
def test_golden_ids_without_special_tokens(
    engine: tokens.TokenCounter, case: dict[str, Any]
) -> None:
    assert engine.encode(case["text"]) == case["ids"]


def test_count_many_matches_count_for_every_golden_case(engine: tokens.TokenCounter) -> None:
    texts = [c["text"] for c in GOLDEN["cases"]]
    assert engine.count_many(texts) == [engine.count(t) for t in texts]


def test_shipped_sentencepiece_model_is_the_one_compiled_from_the_tokenizer() -> None:
    """The vendored model is derived data: compiling the vendored tokenizer.json again
    gives it byte for byte (so the two engines cannot drift apart)."""
    compiled = tokens._sentencepiece_model(json.loads(bundled_tokenizer_json()))
    assert bundled_sentencepiece_model() == compiled


def test_default_counter_is_the_fast_engine_and_is_cached() -> None:
    first = get_token_counter()
    assert isinstance(first, SentencePieceCounter)
    assert get_token_counter() is first


def test_counts_add_up_when_split_at_whitespace(counter: tokens.TokenCounter) -> None:
    sentences = ["Первое предложение здесь.", "Second sentence, in English!", "Третье: 42 шт."]
    assert counter.count(" ".join(sentences)) == sum(counter.count(s) for s in sentences)


def test_damaged_asset_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    raw = bytearray(bundled_tokenizer_json())
    raw[100] ^= 1
    damaged = tmp_path / "tok.json.xz"
    damaged.write_bytes(lzma.compress(bytes(raw), preset=0))
    monkeypatch.setattr(tokens, "ASSET_PATH", damaged)
    bundled_tokenizer_json.cache_clear()
    try:
        with pytest.raises(RuntimeError, match="damaged"):
            bundled_tokenizer_json()
    finally:
        bundled_tokenizer_json.cache_clear()


def test_local_tokenizer_directory_counts_like_the_bundled_one(
    tmp_path: Path, counter: tokens.TokenCounter
) -> None:
    directory = write_tokenizer_dir(tmp_path / "bge")
    local = get_token_counter(str(directory))
    assert isinstance(local, HFTokenCounter)
    for case in GOLDEN["cases"]:
        assert local.count(case["text"]) == counter.count(case["text"])


def test_missing_local_tokenizer_names_the_setting(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as error:
        get_token_counter(str(tmp_path / "nowhere"))
    assert error.value.subject == "chunking.tokenizer"


HALF_WIDTH = [chr(c) for c in range(0xFF61, 0xFFA0)]


def test_half_width_katakana_and_special_literals_count_as_transformers_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The inputs SentencePiece alone counts differently are counted exactly without
    loading the `tokenizers` engine: every half-width katakana and punctuation character
    alone and in pairs (voiced marks), special literals glued to words, mixed lines."""
    reference = HFTokenCounter(bundled_tokenizer_json(), "bundled")

    def refuse() -> bytes:
        raise AssertionError("the tokenizers engine was loaded")

    monkeypatch.setattr(tokens, "bundled_tokenizer_json", refuse)
    fast = SentencePieceCounter(bundled_sentencepiece_model(), "bundled")
    texts = [*HALF_WIDTH, *(a + b for a in HALF_WIDTH for b in HALF_WIDTH)]
    texts += [
        "x<s>y </s><pad> <unk>z<mask>",
        "Цена ｶﾞｲﾄﾞ 100 руб. <s> and ﾊﾟﾋﾟﾌﾟ!",
        "|------|ｶﾞ|------|",
        "｢半角｣､ｶﾀｶﾅ･ﾃｽﾄ｡",
        "  ｶﾞ\n\tﾟ  <mask>  ",
        "<s>",
        "",
    ]
    assert fast.count_many(texts) == reference.count_many(texts)
    for text in texts[-6:]:
        assert fast.encode(text) == reference.encode(text)


def test_decomposed_japanese_and_korean_count_as_transformers_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Text in NFD (macOS file names, some exports): kana with combining voiced marks and
    conjoining Hangul jamo, which SentencePiece's char-map composes and the tokenizers one
    does not, mixed with half-width marks and runs of unknown characters. Counted exactly
    with the one SentencePiece engine already loaded: no second engine is built."""
    reference = HFTokenCounter(bundled_tokenizer_json(), "bundled")
    fast = SentencePieceCounter(bundled_sentencepiece_model(), "bundled")
    import sentencepiece

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a second SentencePiece engine was built")

    monkeypatch.setattr(sentencepiece, "SentencePieceProcessor", refuse)
    words = ["がぎぐげご", "パピプペポ", "デジタル化", "한국어", "테스트 문서", "ｶﾞｲﾄﾞ"]
    texts = [unicodedata.normalize("NFD", w) for w in words]
    alphabet = ["か", "ハ", "ア", "ｶ", "\u3099", "\u309a", "ﾞ", "ﾟ", "\u1100", "\u1161"]
    alphabet += ["\u11a8", "\ud7b0", "\ua960", "가", "𠀋", "😀", "x", "-", " ", "\t"]
    rng = random.Random(7)
    texts += ["".join(rng.choices(alphabet, k=rng.randint(1, 30))) for _ in range(2000)]
    assert [fast.encode(t) for t in texts] == [reference.encode(t) for t in texts]
    assert fast.count_many(texts) == reference.count_many(texts)
