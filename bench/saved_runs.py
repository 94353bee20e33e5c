"""Per-question results kept between runs of a quality bench, so that two checkouts (a
change and the code before it) are paired question by question: run the old checkout
with `--save FILE`, the new one with `--against FILE`."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

Results = Mapping[tuple[str, str], Sequence[Any]]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--save", type=Path, help="write each question's result per method and mode to FILE"
    )
    parser.add_argument(
        "--against",
        type=Path,
        help="pair each method and mode with the same one in FILE (another checkout's --save)",
    )


def save(path: Path, results: Results) -> None:
    path.write_text(json.dumps({" ".join(key): list(value) for key, value in results.items()}))


def saved_pairs(path: Path, results: Results) -> list[tuple[str, Sequence[Any], Sequence[Any]]]:
    """(method and mode, this run's results, the saved run's) for each one both hold."""
    earlier: dict[str, list[Any]] = json.loads(path.read_text())
    pairs: list[tuple[str, Sequence[Any], Sequence[Any]]] = []
    for key, value in results.items():
        name = " ".join(key)
        if name not in earlier:
            continue
        if len(earlier[name]) != len(value):
            raise SystemExit(
                f"--against {path}: {name!r} has {len(earlier[name])} questions there and "
                f"{len(value)} here; pair runs of the same questions"
            )
        pairs.append((name, value, earlier[name]))
    return pairs
