"""Table grouping (docs/chunking.md#table-grouping; setting `group_related_tables`, off by
default): adjacent tables of one section with at most `table_group_max_gap_lines` lines
between them form one chunk up to `max_tokens`, with whatever lies between them (a
caption). The chunk records how many tables it holds (`table_group_count`)."""

from __future__ import annotations

from chunking.group import ExactCounter, Group


def group_tables(
    groups: list[Group], text: str, max_gap_lines: int, limit: int, exact: ExactCounter
) -> list[Group]:
    """`groups` (exact counts, one section run, in order) with runs of nearby tables,
    and the groups between them, joined while the chunk stays within `limit`."""
    out: list[Group] = []
    at = 0
    while at < len(groups):
        group = groups[at]
        at += 1
        if group.chunk_type != "table":
            out.append(group)
            continue
        while True:
            following = _next_table(groups, at, text, group, max_gap_lines)
            if following is None:
                break
            between = [p for g in groups[at : following + 1] for p in g.pieces]
            tokens = exact([*group.pieces, *between])
            if tokens > limit:
                break
            group = Group([*group.pieces, *between], tokens)
            at = following + 1
        out.append(group)
    return out


def _next_table(
    groups: list[Group], at: int, text: str, table: Group, max_gap_lines: int
) -> int | None:
    """The index of the next table group when only `max_gap_lines` lines lie between
    it and `table`."""
    end = table.pieces[-1].end
    for index in range(at, len(groups)):
        candidate = groups[index]
        if text.count("\n", end, candidate.pieces[0].start) - 1 > max_gap_lines:
            return None
        if candidate.chunk_type == "table":
            return index
        if candidate.chunk_type == "code":
            return None  # a code block between them is no caption
    return None
