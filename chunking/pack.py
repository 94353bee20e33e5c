"""The packer: pieces of one section run -> groups that become chunks (docs/chunking.md#packing).

- tables and code are groups of their own; with `group_related_tables`, nearby tables
  of the run then form one group (`table_groups`), and a table or code group still
  under `min_tokens` merges with a neighbour that fits (`small_blocks`);
- paragraphs, lists and quotes merge while the group is under `target_tokens` and the
  merge stays within the packing limit; different kinds merge (`mixed`) only while the total
  stays under `target_tokens`, or while the group is still under `min_tokens`;
- a group under `min_tokens` whose next piece does not fit takes the head of that piece,
  cut at a sentence (or top-level list item) boundary, rather than closing undersized;
- a group still under `min_tokens` joins the group before it when both fit in
  the packing limit, or else takes whole trailing sentences from it when both then keep at
  least `min_tokens`.

`pack` may start from a carried group: a small section merging forward (`merge`) is
packed as the head of the next section's first group, its pieces pinned there.

Sizes are estimated as the sum of piece counts plus one token per join, which never
under-counts; a decision the join slack alone would flip is measured exactly, and every
group is measured exactly before the undersize passes.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

from chunking.group import ExactCounter, Group
from chunking.pieces import HEADING, UNMIXABLE_KINDS, Piece
from chunking.small_blocks import merge_small_blocks
from chunking.table_groups import group_tables

HeadSplitter = Callable[[Piece, int], "tuple[Piece, Piece] | None"]
TailSplitter = Callable[[Piece, int, int], "tuple[Piece, Piece] | None"]


@dataclass(frozen=True)
class Packer:
    min_tokens: int
    target_tokens: int
    limit: int  # the packing limit: `max_tokens`, or `soft_max_tokens`
    split_head: HeadSplitter
    split_tail: TailSplitter
    exact_tokens: ExactCounter
    document: str
    table_gap_lines: int | None  # group nearby tables (`group_related_tables`), or None

    def pack(self, pieces: list[Piece], head: Group | None = None) -> list[Group]:
        groups: list[Group] = []
        current = Group(list(head.pieces), head.tokens, exact=False) if head else Group()
        pinned = len(current.pieces)
        for piece in pieces:
            if piece.kind in UNMIXABLE_KINDS:
                if current.pieces:
                    groups.append(current)
                current = Group()
                groups.append(Group([piece], piece.tokens))
                continue
            if not current.pieces or self._fits(current, piece):
                current.add(piece)
                continue
            if current.tokens < self.min_tokens:
                halves = self.split_head(piece, self.limit - current.tokens - 1)
                if halves is not None:
                    current.add(halves[0])
                    piece = halves[1]
            groups.append(current)
            current = Group()
            current.add(piece)
        if current.pieces:
            groups.append(current)
        self._measure(groups)
        if self.table_gap_lines is not None:
            groups = group_tables(
                groups, self.document, self.table_gap_lines, self.limit, self.exact_tokens
            )
        groups = merge_small_blocks(groups, self.min_tokens, self.limit, self.exact_tokens)
        groups = self._rebalance(self._absorb_undersized(groups), pinned)
        # Rebalancing moves prose between groups: a small block that fitted nowhere may
        # fit beside a group that gave some away.
        return merge_small_blocks(groups, self.min_tokens, self.limit, self.exact_tokens)

    def _fits(self, group: Group, piece: Piece) -> bool:
        if group.tokens >= self.target_tokens:
            return False
        total = group.tokens + piece.tokens + 1
        if total > self.limit:
            # The estimate counts a token per join; measure when only that slack is over.
            if total - len(group.pieces) > self.limit:
                return False
            total = self.exact_tokens([*group.pieces, piece])
            if total > self.limit:
                return False
        mixing = any(p.kind not in (piece.kind, HEADING) for p in group.pieces)
        if not mixing or total < self.target_tokens:
            return True
        # Kinds mix past the target only to lift a group that is still under min_tokens.
        if not group.exact and group.tokens - len(group.pieces) < self.min_tokens:
            self._measure([group])
        return group.tokens < self.min_tokens

    def _measure(self, groups: list[Group]) -> None:
        for group in groups:
            if not group.exact:
                group.tokens = self.exact_tokens(group.pieces)
                group.exact = True

    def _absorb_undersized(self, groups: list[Group]) -> list[Group]:
        merged: list[Group] = []
        for group in groups:
            previous = merged[-1] if merged else None
            if (
                previous is not None
                and group.tokens < self.min_tokens
                and group.chunk_type not in UNMIXABLE_KINDS
                and previous.chunk_type not in UNMIXABLE_KINDS
                and previous.tokens + group.tokens <= self.limit  # joined, at least this
            ):
                tokens = self.exact_tokens([*previous.pieces, *group.pieces])
                if tokens <= self.limit:
                    previous.extend(group, tokens)
                    continue
            merged.append(group)
        return merged

    def _rebalance(self, groups: list[Group], pinned: int) -> list[Group]:
        for index, (previous, group) in enumerate(itertools.pairwise(groups)):
            keep = pinned + 1 if index == 0 else 1  # pieces that never move
            if (
                group.tokens >= self.min_tokens
                or group.chunk_type in UNMIXABLE_KINDS
                or previous.chunk_type in UNMIXABLE_KINDS
            ):
                continue
            need = self.min_tokens - group.tokens + 1
            room = min(previous.tokens - self.min_tokens, self.limit - group.tokens) - 1
            if room < need:
                continue
            # Whole trailing pieces (paragraphs, list items) first, then sentences; a table
            # or code piece stays where small blocks or table grouping put it.
            moved, count = 0, 0
            for piece in reversed(previous.pieces[keep:]):
                if moved >= need or piece.kind in UNMIXABLE_KINDS:
                    break
                moved += piece.tokens + 1
                count += 1
            if need <= moved <= room:
                for piece in previous.pieces[-count:]:
                    previous.tokens -= piece.tokens + 1
                group.pieces[:0] = previous.pieces[-count:]
                group.tokens += moved
                del previous.pieces[-count:]
                previous.exact = group.exact = False
                continue
            if len(previous.pieces) < keep:
                continue
            halves = self.split_tail(previous.pieces[-1], need, room)
            if halves is None:
                continue
            head, tail = halves
            previous.tokens -= previous.pieces[-1].tokens - head.tokens
            previous.pieces[-1] = head
            group.pieces.insert(0, tail)
            group.tokens += tail.tokens + 1
            previous.exact = group.exact = False
        return groups
