"""The packer: pieces of one section run -> groups that become chunks (SPEC §3.5).

- tables and code are groups of their own;
- paragraphs, lists and quotes merge while the group is under `target_tokens` and the
  merge stays within `max_tokens`; different kinds merge (`mixed`) only while the total
  stays under `target_tokens`, or while the group is still under `min_tokens`;
- a group under `min_tokens` whose next piece does not fit takes the head of that piece,
  cut at a sentence (or top-level list item) boundary, rather than closing undersized;
- a group still under `min_tokens` joins the group before it when both fit in
  `max_tokens`.

Sizes are estimated as the sum of piece counts plus one token per join, which never
under-counts; the chunker recounts every multi-piece group exactly afterwards.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from chunking.pieces import UNMIXABLE_KINDS, Piece

HeadSplitter = Callable[[Piece, int], "tuple[Piece, Piece] | None"]
ExactCounter = Callable[[list[Piece]], int]


@dataclass
class Group:
    pieces: list[Piece] = field(default_factory=list)
    tokens: int = 0  # estimate while packing; exact once the chunker has recounted

    @property
    def chunk_type(self) -> str:
        kinds = {p.kind for p in self.pieces}
        return kinds.pop() if len(kinds) == 1 else "mixed"

    def add(self, piece: Piece) -> None:
        self.tokens += piece.tokens + (1 if self.pieces else 0)
        self.pieces.append(piece)


@dataclass(frozen=True)
class Packer:
    min_tokens: int
    target_tokens: int
    max_tokens: int
    split_head: HeadSplitter
    exact_tokens: ExactCounter

    def pack(self, pieces: list[Piece]) -> list[Group]:
        groups: list[Group] = []
        current = Group()
        for piece in pieces:
            if piece.kind in UNMIXABLE_KINDS:
                if current.pieces:
                    groups.append(current)
                groups.append(Group([piece], piece.tokens))
                current = Group()
                continue
            if not current.pieces or self._fits(current, piece):
                current.add(piece)
                continue
            if current.tokens < self.min_tokens:
                # Undersized: the estimate may be a token or two high, so measure exactly
                # before cutting the next piece at a sentence or item boundary.
                exact = self.exact_tokens([*current.pieces, piece])
                if exact <= self.max_tokens:
                    current.add(piece)
                    current.tokens = exact
                    continue
                halves = self.split_head(piece, self.max_tokens - current.tokens - 1)
                if halves is not None:
                    current.add(halves[0])
                    piece = halves[1]
            groups.append(current)
            current = Group()
            current.add(piece)
        if current.pieces:
            groups.append(current)
        return self._absorb_undersized(groups)

    def _fits(self, group: Group, piece: Piece) -> bool:
        total = group.tokens + piece.tokens + 1
        if total > self.max_tokens or group.tokens >= self.target_tokens:
            return False
        mixing = any(p.kind != piece.kind for p in group.pieces)
        return not mixing or total < self.target_tokens or group.tokens < self.min_tokens

    def _absorb_undersized(self, groups: list[Group]) -> list[Group]:
        merged: list[Group] = []
        for group in groups:
            previous = merged[-1] if merged else None
            if (
                previous is not None
                and group.tokens < self.min_tokens
                and group.chunk_type not in UNMIXABLE_KINDS
                and previous.chunk_type not in UNMIXABLE_KINDS
                and previous.tokens + group.tokens + 1 <= self.max_tokens
            ):
                for piece in group.pieces:
                    previous.add(piece)
                continue
            merged.append(group)
        return merged
