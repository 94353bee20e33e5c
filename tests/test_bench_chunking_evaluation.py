"""The public chunking benchmark scores pieces where the benchmark's own code places them
(the first copy of their text), and each quality bench sets aside a fixed half of its
questions. On the vendored corpora and questions (`bench/data/chunking_evaluation/`)."""

from __future__ import annotations

from bench import halves
from bench.chunking_evaluation import (
    ANY_COPY,
    BOUNDARIES_ASIDE,
    IN_ORDER,
    MEASURES,
    NOWHERE,
    Piece,
    Question,
    load_corpora,
    load_questions,
    scored,
    window_pieces,
)
from bench.retrieval_questions import QUESTIONS


def test_a_repeated_window_is_placed_at_the_first_copy_of_its_text() -> None:
    finance = load_corpora()["finance"]
    pieces = window_pieces({"finance": finance}, len)
    moved = [p for p in pieces if p.first_copy[0] < p.in_order[0]]
    assert moved, "finance.md repeats whole windows"
    for piece in moved:
        start, end = piece.first_copy
        target = piece.text.removesuffix(".")
        assert finance[start:end] == target
        assert finance.find(target) == start


def _later_copy(extra: int) -> tuple[Question, Piece]:
    """A question of one reference whose text its corpus repeats later, and a piece of that
    later copy and the `extra` characters after it, standing first where it was cut."""
    corpora = load_corpora()
    for question in load_questions():
        corpus = corpora[question.corpus]
        start, end = question.references[0]
        later = corpus.find(corpus[start:end], start + 1)
        text = corpus[later : later + end - start + extra]
        if (
            len(question.references) == 1
            and later >= end
            and (not extra or corpus.find(text) == later)
        ):
            piece = Piece.placed(
                question.corpus, corpus, (later, later + len(text)), text, text, 10
            )
            return question, piece
    raise AssertionError("no question's reference is repeated later in its corpus")


def test_a_reference_is_credited_to_a_piece_holding_a_later_copy_of_it() -> None:
    question, piece = _later_copy(0)
    measures = scored(question, {measure: [piece] for measure in MEASURES})
    assert measures["recall@5"] > 0.99 and measures["within 1000"] > 0.99
    assert measures[f"recall@5 {IN_ORDER}"] == 0.0


def test_any_copy_credits_a_passage_whose_text_holds_a_later_copy_of_the_reference() -> None:
    question, piece = _later_copy(300)  # a passage: the copy and the text after it
    measures = scored(question, {measure: [piece] for measure in MEASURES})
    assert measures["recall@5"] == 0.0  # placed where its whole text stands: the later copy
    assert measures[f"recall@5 {ANY_COPY}"] == 1.0


def test_boundaries_aside_credit_two_sentences_that_hold_a_reference_between_them() -> None:
    corpora = load_corpora()
    for question in load_questions():
        corpus = corpora[question.corpus]
        start, end = question.references[0]
        stop = corpus.find(". ", start, end - 2)
        first, second = corpus[start : stop + 1], corpus[stop + 2 : end]
        if (
            len(question.references) == 1
            and stop > start
            and corpus.find(first[:-1]) == start
            and corpus.find(second) == stop + 2
            and not second[0].isspace()
        ):
            break
    else:
        raise AssertionError("no question's reference spans two sentences")
    pieces = [
        Piece.placed(question.corpus, corpus, NOWHERE, text, text, 10) for text in (first, second)
    ]
    measures = scored(question, {measure: pieces for measure in MEASURES})
    # The benchmark's placement drops the first piece's full stop (and the second's, where
    # the excerpt keeps it), and the space after it is in neither piece.
    assert end - start - 3 <= round(measures["recall@5"] * (end - start)) < end - start
    assert measures[f"recall@5 {BOUNDARIES_ASIDE}"] == 1.0


def test_each_bench_splits_its_questions_into_two_fixed_halves() -> None:
    for keys in (
        [q.key for q in load_questions()],
        [q.key for q in QUESTIONS],
    ):
        tuning, held_out = halves.chosen(keys, "tuning"), halves.chosen(keys, "held-out")
        assert sorted(tuning + held_out) == list(range(len(keys)))
        assert 0.4 < len(held_out) / len(keys) < 0.6
        # A question's half is its own: the others' order or number does not move it.
        assert halves.chosen(keys[::-1], "held-out") == [len(keys) - 1 - i for i in held_out[::-1]]
        assert halves.chosen(keys[:10], "held-out") == [i for i in held_out if i < 10]
