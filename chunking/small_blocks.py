"""Small blocks (docs/chunking.md#small-blocks): a table or code chunk still under
`min_tokens` after binding (or a chunk it merged into, still under `min_tokens`) is
not left alone when a neighbour of its section can take it. It merges with the previous
group when the two fit the packing limit, else with the next; several small tables or
code blocks in a row merge with each other the same way.
A table or code chunk of `min_tokens` or more never takes part (it never mixes). Whole
groups merge, so nothing atomic is cut; the result is `mixed` when it holds prose."""

from __future__ import annotations

from chunking.group import ExactCounter, Group
from chunking.pieces import UNMIXABLE_KINDS


def merge_small_blocks(
    groups: list[Group], min_tokens: int, limit: int, exact: ExactCounter
) -> list[Group]:
    """`groups` (exact counts, one section run, in order) with every small table or code
    group merged into a neighbour that fits."""
    merged = list(groups)

    def joined(first: Group, second: Group) -> int | None:
        """The exact count of the two as one chunk, or None when they may not merge."""
        if first.large(min_tokens) or second.large(min_tokens):
            return None
        if first.tokens + second.tokens > limit:  # joined, the counts add at least this much
            return None
        tokens = exact([*first.pieces, *second.pieces])
        return tokens if tokens <= limit else None

    at = 0
    while at < len(merged):
        group = merged[at]
        if group.tokens >= min_tokens or not any(p.kind in UNMIXABLE_KINDS for p in group.pieces):
            at += 1
            continue
        if at > 0 and (tokens := joined(merged[at - 1], group)) is not None:
            merged[at - 1].extend(group, tokens)
            del merged[at]
            at -= 1  # the grown group may itself be a small block that the next can join
            continue
        if at + 1 < len(merged) and (tokens := joined(group, merged[at + 1])) is not None:
            group.extend(merged[at + 1], tokens)
            del merged[at + 1]
            continue
        at += 1
    return merged
