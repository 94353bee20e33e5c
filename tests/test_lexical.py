"""The lexical (contextual BM25) encoder (docs/qdrant.md#lexical-retrieval): terms, stop words,
stemming, stable 32-bit ids, BM25 term-frequency weights, and hostile text."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from config.settings import LexicalSettings
from indexing.lexical import LexicalEncoder, stop_words, term_id

ROOT = Path(__file__).resolve().parent.parent

ENGLISH = "The backup jobs are running nightly; restart the failed jobs with max_retries=3."
RUSSIAN = "Резервные копии создаются каждую ночь, а упавшие задания перезапускаются вручную."
# Golden vectors: MurmurHash3 (32-bit, seed 0, unsigned) of each stemmed term's UTF-8
# bytes; a change here changes every lexical vector ever written (bump LEXICAL_VERSION).
ENGLISH_TERMS = [
    "backup",
    "job",
    "run",
    "night",
    "restart",
    "fail",
    "job",
    "max_retries",
    "max",
    "retri",
    "3",
]
ENGLISH_IDS = [
    2405859532,
    1947820556,
    4051061832,
    3797557799,
    1210806435,
    838568274,
    1947820556,
    1251290187,
    3264452507,
    3552938510,
    264741300,
]
RUSSIAN_TERMS = ["резервн", "коп", "созда", "кажд", "ноч", "упа", "задан", "перезапуска", "вручн"]
RUSSIAN_IDS = [
    1102813758,
    2500073854,
    1178228189,
    707032732,
    896447058,
    1859286793,
    1833418254,
    3369969378,
    3150931796,
]


@pytest.fixture(scope="module")
def encoder() -> LexicalEncoder:
    return LexicalEncoder(LexicalSettings())  # type: ignore[call-arg]


def test_golden_terms_and_ids_in_english_and_russian(encoder: LexicalEncoder) -> None:
    assert encoder.terms(ENGLISH) == ENGLISH_TERMS
    assert [term_id(t) for t in ENGLISH_TERMS] == ENGLISH_IDS
    assert encoder.terms(RUSSIAN) == RUSSIAN_TERMS
    assert [term_id(t) for t in RUSSIAN_TERMS] == RUSSIAN_IDS
    assert sorted(encoder.encode(ENGLISH)) == sorted(set(ENGLISH_IDS))


def test_vectors_are_the_same_in_another_process_with_another_hash_seed(
    encoder: LexicalEncoder,
) -> None:
    """Python's own str hash changes per process; the term ids must not."""
    script = (
        "import json, sys\n"
        "from config.settings import LexicalSettings\n"
        "from indexing.lexical import LexicalEncoder\n"
        "e = LexicalEncoder(LexicalSettings())\n"
        "print(json.dumps([sorted(e.encode(t).items()) for t in sys.argv[1:]]))\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    done = subprocess.run(
        [sys.executable, "-c", script, ENGLISH, RUSSIAN],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        env=env,
    )
    theirs = [[(int(k), v) for k, v in pairs] for pairs in json.loads(done.stdout)]
    assert theirs == [
        sorted(encoder.encode(ENGLISH).items()),
        sorted(encoder.encode(RUSSIAN).items()),
    ]


def test_stop_words_of_both_languages_are_dropped(encoder: LexicalEncoder) -> None:
    assert {"the", "and", "which", "would"} <= stop_words("en")
    assert {"и", "не", "что", "для", "между"} <= stop_words("ru")
    assert encoder.terms("The service and the queue") == ["servic", "queue"]
    assert encoder.terms("Не то, что нужно для сервера") == ["нужн", "сервер"]
    # ё is read as е, as the Russian list writes it
    assert encoder.terms("ещё") == encoder.terms("еще") == []


def test_inflected_forms_share_a_stem_per_script(encoder: LexicalEncoder) -> None:
    assert len(set(encoder.terms("restart restarts restarting restarted"))) == 1
    assert len(set(encoder.terms("сервер сервера серверов серверами"))) == 1
    # a word of another script, or digits, is kept as it is
    assert encoder.terms("東京 2024") == ["東京", "2024"]


def test_configured_languages_decide_which_scripts_are_stemmed() -> None:
    english_only = LexicalEncoder(LexicalSettings(languages=["en"]))  # type: ignore[call-arg]
    assert english_only.terms("серверов restarting") == ["серверов", "restart"]
    # and whose stop words apply
    assert english_only.terms("и the") == ["и"]


def test_identifiers_keep_their_whole_form_and_give_their_parts(encoder: LexicalEncoder) -> None:
    assert encoder.terms("set embedder.tokens_per_batch") == [
        "set",
        "embedd",
        "tokens_per_batch",
        "token",
        "per",
        "batch",
    ]
    assert encoder.terms("ERR_CONN_RESET") == ["err_conn_reset", "err", "conn", "reset"]
    assert encoder.terms("__init__") == ["init"]


def test_weights_are_bm25_term_frequency_saturated_and_length_normalized() -> None:
    settings = LexicalSettings(k1=1.2, b=0.75, avg_len=4.0)  # type: ignore[call-arg]
    encoder = LexicalEncoder(settings)
    weights = encoder.encode("queue queue queue worker")  # 4 terms: length = avg_len
    assert weights[term_id("queue")] == pytest.approx(3 * 2.2 / (3 + 1.2))
    assert weights[term_id("worker")] == pytest.approx(2.2 / (1 + 1.2))
    longer = encoder.encode("worker " + " ".join(f"w{i}" for i in range(11)))  # 12 terms
    norm = 1.2 * (1 - 0.75 + 0.75 * 12 / 4.0)
    assert longer[term_id("worker")] == pytest.approx(2.2 / (1 + norm))
    assert longer[term_id("worker")] < weights[term_id("worker")]


def test_a_query_weighs_each_distinct_term_once(encoder: LexicalEncoder) -> None:
    query = encoder.encode_query("restart restarting the worker")
    assert query == {term_id("restart"): 1.0, term_id("worker"): 1.0}


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   \n\n",
        "# ",
        "the of and to",
        "— … ¿? !!! ---",
        "\x00\x01\x02\x1b\x7f\u200b",
    ],
)
def test_texts_without_terms_give_empty_vectors(encoder: LexicalEncoder, text: str) -> None:
    assert encoder.encode(text) == {}
    assert encoder.encode_query(text) == {}


def test_hostile_words_are_bounded_and_mixed_scripts_do_not_crash(
    encoder: LexicalEncoder,
) -> None:
    huge = "x" * 10_000
    (term,) = encoder.terms(huge)
    assert term == "x" * LexicalSettings().max_term_chars  # type: ignore[call-arg]
    mixed = encoder.terms("Qdrantклиент сервер\x00server ＡＰＩ")
    assert "qdrantклиент" in mixed and len(mixed) == 4
    assert encoder.terms("Heading only\n===") == ["head"]
    assert all(0 <= t < 2**32 for t in encoder.encode(huge + " " + RUSSIAN))


def test_the_encoder_id_changes_with_its_settings(encoder: LexicalEncoder) -> None:
    other = LexicalEncoder(LexicalSettings(k1=1.5))  # type: ignore[call-arg]
    assert encoder.id != other.id
    assert encoder.id == LexicalEncoder(LexicalSettings()).id  # type: ignore[call-arg]
