"""The promotion gate of a re-index: with `eval.questions` set, the questions are searched
in the collection the alias names and in the new one (as `eval.user`/`eval.groups`,
through the query API), and the alias moves only if the new collection's recall@5, over
the questions whose targets both hold, is not lower by more than `eval.max_drop`.
Otherwise the re-index fails naming the questions that got worse, and the new collection
is kept for inspection (`force` moves the alias anyway)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from config.errors import ErrorCode, IngestError
from config.settings import Settings
from indexing.handles import IndexHandles
from indexing.reindex import Gate
from query.api import Identity, Index
from query.evaluate import Result, Search, load_questions, run_questions
from query.paired import hit_at, paired, reciprocal


class GateRefused(IngestError):
    """The new collection answers the questions worse than the current one; `verdict`
    is what was compared."""

    def __init__(self, verdict: dict[str, Any]) -> None:
        worse = "; ".join(
            f"line {q['line']}: rank {q['before'] or 'none'} -> {q['after'] or 'none'}: "
            f"{q['question']}"
            for q in verdict["worse"]
        )
        super().__init__(
            ErrorCode.GATE_REFUSED,
            f"the new collection {verdict['build']} answers eval.questions worse: recall@5 "
            f"{verdict['recall@5 before']:.3f} -> {verdict['recall@5 after']:.3f} over "
            f"{verdict['compared']} questions, a drop over eval.max_drop "
            f"{verdict['max_drop']:g}; the alias stays on {verdict['current']}. Worse: "
            f"{worse or 'none'}. {verdict['build']} is kept for inspection: `ingest reindex "
            "--force` moves the alias to it anyway",
            subject="eval.questions",
        )
        self.verdict = verdict

    def __reduce__(self) -> tuple[object, ...]:
        return (GateRefused, (self.verdict,))


def promotion_gate(
    settings: Settings, resources: IndexHandles, *, force: bool = False
) -> Gate | None:
    """The gate `eval.questions` sets (None when unset). The questions file is read now,
    so a bad one stops the re-index before anything is built."""
    if settings.eval.questions is None:
        return None
    questions = load_questions(settings.eval.questions)
    identity = Identity(settings.eval.user, tuple(settings.eval.groups))
    search = Search(None if identity.anonymous else identity)

    def gate(current: str, build: str) -> dict[str, Any]:
        sides = []
        for collection in (current, build):
            with Index(settings, resources=resources, collection=collection) as index:
                sides.append(run_questions(index, questions, search))
        verdict = compared(sides[0], sides[1], settings.eval.max_drop)
        verdict |= {"current": current, "build": build, "forced": force}
        if not verdict["passed"] and not force:
            raise GateRefused(verdict)
        return verdict

    return gate


def compared(before: Sequence[Result], after: Sequence[Result], max_drop: float) -> dict[str, Any]:
    """The gate's comparison over the questions whose targets both collections hold."""
    both = [
        (old, new)
        for old, new in zip(before, after, strict=True)
        if "absent" not in (old.status, new.status)
    ]
    count = max(1, len(both))
    recall_before = sum(hit_at(old.rank, 5) for old, _ in both) / count
    recall_after = sum(hit_at(new.rank, 5) for _, new in both) / count
    return {
        "questions": len(before),
        "compared": len(both),
        "recall@5 before": round(recall_before, 3),
        "recall@5 after": round(recall_after, 3),
        "max_drop": max_drop,
        # rounded as reported, so a tie is no drop
        "passed": round(recall_before - recall_after, 6) <= max_drop,
        **paired([new.rank for _, new in both], [old.rank for old, _ in both]),
        "worse": [
            {
                "line": old.question.line,
                "question": old.question.text,
                "before": old.rank,
                "after": new.rank,
            }
            for old, new in both
            if reciprocal(new.rank) < reciprocal(old.rank)
        ],
    }


def gate_markdown(verdict: dict[str, Any]) -> str:
    """The comparison as a Markdown table (a deployment run's artifact)."""
    moved = "moved" if verdict["passed"] else "kept where it was"
    if verdict["forced"] and not verdict["passed"]:
        moved = "moved anyway (forced)"
    rows = [
        f"### Re-index gate: the alias {moved}",
        "",
        "| | current | new |",
        "|---|---|---|",
        f"| collection | {verdict['current']} | {verdict['build']} |",
        f"| recall@5 ({verdict['compared']} questions) | {verdict['recall@5 before']:.3f} "
        f"| {verdict['recall@5 after']:.3f} |",
        "",
        f"hit@5 won/lost {verdict['hit@5 won/lost']} (McNemar p {verdict['mcnemar p']:.3g}), "
        f"reciprocal rank higher/lower {verdict['rr higher/lower']} (sign test p "
        f"{verdict['sign p']:.3g}); most drop allowed {verdict['max_drop']:g}",
    ]
    if verdict["worse"]:
        rows += ["", "| line | question | rank before | rank after |", "|---|---|---|---|"]
        rows += [
            f"| {q['line']} | {q['question']} | {q['before'] or '-'} | {q['after'] or '-'} |"
            for q in verdict["worse"]
        ]
    return "\n".join(rows)
