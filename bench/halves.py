"""A fixed half of a quality bench's questions set aside: `held-out` is not looked at while
tuning chunking or search, `tuning` is. A question's half comes from a digest of its key
(its corpus or document and its text), so it never changes with the order or number of the
other questions. A bench still searches and saves every question (`--save` pairs with any
half later); `--half` picks the questions its report covers."""

from __future__ import annotations

import argparse
import hashlib
from collections.abc import Sequence

HALVES = ("tuning", "held-out")


def half_of(key: str) -> str:
    return HALVES[hashlib.sha256(key.encode("utf-8")).digest()[0] & 1]


def add_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--half",
        choices=("all", *HALVES),
        default="all",
        help="report only the questions of this fixed half (held-out: not for tuning)",
    )


def chosen(keys: Sequence[str], half: str) -> list[int]:
    """The positions of the questions `--half` reports."""
    return [i for i, key in enumerate(keys) if half in ("all", half_of(key))]
