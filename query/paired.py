"""Paired comparison of two retrieval runs over the same questions: which questions one
found within the top 5 and the other did not (McNemar's exact test), and whose reciprocal
rank is higher (a sign test), so that a difference of a few questions is not read as a
gain; and the sign test of any per-item score. Used by `ingest eval --against`, the
re-index gate and the benchmarks."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

Rank = int | None  # a question's rank of its first hit within the top 10; None: not found


def two_sided_binomial(wins: int, losses: int) -> float:
    """Exact two-sided p of `wins` against `losses` under a fair coin (ties dropped)."""
    n = wins + losses
    if n == 0:
        return 1.0
    tail: float = sum(math.comb(n, k) for k in range(min(wins, losses) + 1)) / 2**n
    return min(1.0, 2 * tail)


def sign_test(a: Sequence[float], b: Sequence[float]) -> dict[str, Any]:
    """Per item, score `a` against score `b`: the mean difference, how many items each
    scored higher on (equal within float noise is a tie) and the sign test's p."""
    won = sum(1 for x, y in zip(a, b, strict=True) if x > y + 1e-9)
    lost = sum(1 for x, y in zip(a, b, strict=True) if y > x + 1e-9)
    return {
        "diff": round((sum(a) - sum(b)) / len(a), 3),
        "won/lost": f"{won}/{lost}",
        "p": round(two_sided_binomial(won, lost), 4),
    }


def hit_at(rank: Rank, k: int) -> bool:
    return rank is not None and rank <= k


def reciprocal(rank: Rank) -> float:
    return 1 / rank if rank else 0.0


def paired(a: Sequence[Rank], b: Sequence[Rank]) -> dict[str, Any]:
    """Per question, `a` against `b`: hit@5 won/lost with McNemar's exact p, and
    reciprocal rank higher/lower with the sign test's p."""
    hit_a = [hit_at(r, 5) for r in a]
    hit_b = [hit_at(r, 5) for r in b]
    won = sum(1 for x, y in zip(hit_a, hit_b, strict=True) if x and not y)
    lost = sum(1 for x, y in zip(hit_a, hit_b, strict=True) if y and not x)
    rr_a = [reciprocal(r) for r in a]
    rr_b = [reciprocal(r) for r in b]
    higher = sum(1 for x, y in zip(rr_a, rr_b, strict=True) if x > y)
    lower = sum(1 for x, y in zip(rr_a, rr_b, strict=True) if x < y)
    count = max(1, len(a))
    return {
        "recall@5 diff": round((sum(hit_a) - sum(hit_b)) / count, 3),
        "hit@5 won/lost": f"{won}/{lost}",
        "mcnemar p": round(two_sided_binomial(won, lost), 4),
        "mrr diff": round((sum(rr_a) - sum(rr_b)) / count, 3),
        "rr higher/lower": f"{higher}/{lower}",
        "sign p": round(two_sided_binomial(higher, lower), 4),
    }
