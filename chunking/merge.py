"""Small sections merge (docs/chunking.md#small-sections-merge): the groups of every section, with
the headings between them, become drafts of chunks.

A section whose content would make a chunk under `min_tokens` merges forward: the next
section's packing continues it while the merged chunk stays within `target_tokens` (or,
while still under `min_tokens`, within the packing limit), taking whole blocks and,
under `min_tokens`, the head of one cut at a sentence or item; else it merges backward
into the previous chunk when the two fit. A section whose only content is a table or
code chunk under `min_tokens` merges the same way, its block whole. A merge never takes
a table or code chunk of `min_tokens` or more, never crosses a horizontal rule (one
`Stretch` lies between two rules), and never leaves its sections' common parent: a
draft is valid only when every heading above its content is in its `headings_path` or
a line of its `md_text` (`layout`), which rules out crossing a heading of a higher
level than the sections merged.

A heading with no content of its own (directly followed by another heading) is kept:
as a line of the chunk it merges into, or in the path of the chunk that follows it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from chunking.group import Group
from chunking.pieces import UNMIXABLE_KINDS, Piece

Entry = tuple[int, int]  # a heading on the stack: (level, section ordinal)
Stack = tuple[Entry, ...]


@dataclass(frozen=True)
class Heading:
    piece: Piece  # the heading line, as it would appear in a merged chunk
    entry: Entry
    before: Stack  # the heading stack just before this heading and just after it
    after: Stack


@dataclass(frozen=True)
class Content:
    group: Group
    stack: Stack  # the headings this content lives under


Item = Heading | Content


@dataclass(frozen=True)
class Layout:
    path: Stack  # the chunk's headings_path
    skip: int  # leading headings that live in the path, not in md_text


@dataclass
class Draft:
    """Items only ever grow (appended or extended), so a layout is reused while the
    item count is unchanged."""

    items: list[Item] = field(default_factory=list)
    _laid: tuple[int, Layout | None] = field(default=(-1, None), repr=False, compare=False)

    @property
    def contents(self) -> list[Content]:
        return [item for item in self.items if isinstance(item, Content)]

    def unmixable(self, min_tokens: int) -> bool:
        """Does it hold a table or code chunk (bound context inside) of `min_tokens` or
        more? A smaller one, alone in its section or in a `mixed` group, merges like
        prose: whole groups merge, so its block stays whole."""
        return any(c.group.large(min_tokens) for c in self.contents)

    @property
    def opens_section(self) -> bool:
        """Does it start at a heading of the document (not one repeated on top)?"""
        first = self.items[0] if self.items else None
        return isinstance(first, Heading) and not first.piece.synthetic

    def layout(self) -> Layout | None:
        if self._laid[0] != len(self.items):
            self._laid = (len(self.items), layout(self.items))
        return self._laid[1]

    def pieces(self, skip: int) -> list[Piece]:
        pieces: list[Piece] = []
        for item in self.items[skip:]:
            if isinstance(item, Heading):
                pieces.append(item.piece)
            else:
                pieces.extend(item.group.pieces)
        return pieces


def layout(items: list[Item]) -> Layout | None:
    """The path of a chunk made of `items` and how many leading headings it leaves out
    of `md_text` (as many as possible), or None when some content would lose a heading
    above it: neither in the path nor a line of the chunk."""
    lead = 0
    while lead < len(items) and isinstance(items[lead], Heading):
        lead += 1
    contents = [item for item in items if isinstance(item, Content)]
    for skip in range(lead if contents else 0, -1, -1):
        first = items[skip]
        base = first.before if isinstance(first, Heading) else first.stack
        included = [item for item in items[skip:] if isinstance(item, Heading)]
        stacks = [base, *(h.after for h in included), *(c.stack for c in contents)]
        path = _common_prefix(stacks)
        on_path = set(path)
        if any(h.entry not in on_path for h in items[:skip] if isinstance(h, Heading)):
            continue
        lines = {h.entry for h in included}
        if all(entry in lines for c in contents for entry in c.stack[len(path) :]):
            return Layout(path, skip)
    return None


def _common_prefix(stacks: list[Stack]) -> Stack:
    shortest = min(stacks, key=len)
    for depth, entry in enumerate(shortest):
        if any(stack[depth] != entry for stack in stacks):
            return shortest[:depth]
    return shortest


class Stretch:
    """Drafts of one stretch between horizontal rules, built section run by section run.

    A draft under `min_tokens` (or a merged draft under `target_tokens`) is carried into
    the next section's packing (`carry`): the packer fills it from that section's
    pieces. A draft that opens a section, stays under `min_tokens` and cannot carry
    joins the draft before it when the two fit (`_backward`)."""

    def __init__(
        self, min_tokens: int, target_tokens: int, limit: int, headings: dict[Entry, Heading]
    ) -> None:
        self.min_tokens = min_tokens
        self.target_tokens = target_tokens
        self.limit = limit  # the packing limit
        self.headings = headings  # every heading seen in the document so far, by entry
        self.drafts: list[Draft] = []
        self.pending: list[Heading] = []  # headings since the last content

    def heading(self, heading: Heading) -> None:
        self.headings[heading.entry] = heading
        self.pending.append(heading)

    def carry(self, stack: Stack, first: Piece) -> tuple[Draft, int] | None:
        """The last draft with the headings since, to pack as the head of the next
        section's first group, and how many of its leading headings the merged chunk
        leaves to its path; None when it should not or cannot merge forward."""
        if not self.drafts or not self.pending:
            return None
        if first.kind in UNMIXABLE_KINDS and first.tokens >= self.min_tokens:
            return None
        last = self.drafts[-1]
        if last.unmixable(self.min_tokens) or not last.contents:
            return None
        size = self._size(last)
        if size >= self.target_tokens or (size >= self.min_tokens and not _merged(last)):
            return None
        if _level(stack) < _floor(last):
            return None  # a heading above the merged sections' level (an H2 run stops at H1)
        probe = Content(Group([first], first.tokens), stack)
        found = layout([*last.items, *self.pending, probe])
        if found is None:
            continued = self._continued(last, [*self.pending, probe])
            if continued is None:
                return None  # the merge would leave the sections' common parent
            last = continued
            found = layout([*last.items, *self.pending, probe])
        assert found is not None
        self.drafts.pop()
        carried = Draft([*last.items, *self.pending])
        self.pending = []
        return carried, found.skip

    def uncarry(self, carried: Draft) -> None:
        """The packer took nothing into the carried draft: put things back."""
        first_heading = next(
            i
            for i in range(len(carried.items), 0, -1)
            if not isinstance(carried.items[i - 1], Heading)
        )
        self.drafts.append(Draft(carried.items[:first_heading]))
        self.pending = [h for h in carried.items[first_heading:] if isinstance(h, Heading)]

    def add(
        self, groups: list[Group], stack: Stack, carried: Draft | None = None, skip: int = 0
    ) -> None:
        """A section run's groups; with `carried`, the first group starts with its pieces
        (less the `skip` leading headings its path holds)."""
        if not groups:
            return
        rest = groups
        if carried is not None:
            pinned = len(carried.pieces(skip))
            pieces = groups[0].pieces[pinned:]
            own = Group(pieces, sum(p.tokens for p in pieces) + len(pieces) - 1, exact=False)
            self.drafts.append(Draft([*carried.items, Content(own, stack)]))
            rest = groups[1:]
        for group in rest:
            content = Content(group, stack)
            if not self.pending:
                self.drafts.append(Draft([content]))
                continue
            self._backward()
            previous = self.drafts[-1] if self.drafts else None
            self.drafts.extend(self._open(previous, self.pending, content))
            self.pending = []

    def finish(self) -> list[Draft]:
        self._backward()
        if self.pending:
            if self.drafts and self._fits([*self.drafts[-1].items, *self.pending]):
                self.drafts[-1].items.extend(self.pending)
            else:
                self.drafts.append(Draft(list(self.pending)))
        return self.drafts

    def tokens(self, items: list[Item], skip: int) -> int:
        """Upper bound of the chunk's count: its parts plus a token per join."""
        parts = [
            item.piece.tokens if isinstance(item, Heading) else item.group.tokens
            for item in items[skip:]
        ]
        return sum(parts) + len(parts) - 1

    def _fits(self, items: list[Item]) -> bool:
        found = layout(items)
        return found is not None and self.tokens(items, found.skip) <= self.limit

    def _size(self, draft: Draft) -> int:
        found = draft.layout()
        return self.tokens(draft.items, found.skip if found else 0)

    def _backward(self) -> None:
        """The last draft, a section start under `min_tokens` that could not merge
        forward, joins the draft before it when the two fit."""
        drafts = self.drafts
        if len(drafts) < 2:
            return
        previous, last = drafts[-2], drafts[-1]
        if (
            not last.opens_section
            or last.unmixable(self.min_tokens)
            or previous.unmixable(self.min_tokens)
            or self._size(last) >= self.min_tokens
            or _floor(last) < _floor(previous)
        ):
            return
        if self._fits([*previous.items, *last.items]):
            previous.items.extend(last.items)
            drafts.pop()
            return
        continued = self._continued(previous, last.items)
        if continued is not None and self._fits([*continued.items, *last.items]):
            drafts[-2:] = [Draft([*continued.items, *last.items])]

    def _continued(self, draft: Draft, following: list[Item]) -> Draft | None:
        """A draft that continues its section (its section's heading is in an earlier
        chunk's path), with that heading line repeated on top, as a repeated table header
        is, so it may merge past its section's end; None when that does not lay out."""
        if not draft.items or not isinstance(draft.items[0], Content):
            return None
        first = draft.items[0]
        start = first.group.pieces[0]
        for depth in range(len(first.stack) - 1, max(-1, len(first.stack) - 3), -1):
            known = [self.headings.get(entry) for entry in first.stack[depth:]]
            if any(heading is None for heading in known):
                return None
            repeated: list[Item] = [
                Heading(
                    Piece(
                        heading.piece.kind,
                        start.start,
                        start.start,  # no characters of its own: the original is elsewhere
                        heading.piece.text,
                        heading.piece.tokens,
                        start.block_index,
                        synthetic=True,
                    ),
                    heading.entry,
                    heading.before,
                    heading.after,
                )
                for heading in known
                if heading is not None
            ]
            if layout([*repeated, *draft.items, *following]) is not None:
                return Draft([*repeated, *draft.items])
        return None

    def _open(
        self, previous: Draft | None, pending: list[Heading], content: Content
    ) -> list[Draft]:
        """The draft a section's first content opens, after headings without content of
        their own. Those go forward as its first lines, unless it is a table or code
        chunk or would pass the limit with them: then back into the previous chunk when
        they fit there, else (rarely) a chunk of their own."""
        on_stack = set(content.stack)
        cut = max((i + 1 for i, h in enumerate(pending) if h.entry not in on_stack), default=0)
        opened = Draft([*pending, content])
        if not cut or (
            content.group.chunk_type not in UNMIXABLE_KINDS and self._size(opened) <= self.limit
        ):
            return [opened]
        rest = Draft([*pending[cut:], content])
        if previous is not None and self._fits([*previous.items, *pending[:cut]]):
            previous.items.extend(pending[:cut])
            return [rest]
        if self._size(opened) <= self.limit:
            return [opened]
        return [Draft(list(pending[:cut])), rest]


def _level(stack: Stack) -> int:
    """The heading level of the section content with this stack lives in (0: the root)."""
    return stack[-1][0] if stack else 0


def _floor(draft: Draft) -> int:
    """The highest heading level (smallest number) among the draft's content sections:
    a merge never takes in content from a section above it."""
    return min((_level(c.stack) for c in draft.contents), default=0)


def _merged(draft: Draft) -> bool:
    """Has the draft already taken in a heading after its first content?"""
    first = next(i for i, item in enumerate(draft.items) if isinstance(item, Content))
    return any(isinstance(item, Heading) for item in draft.items[first:])


def split_back(draft: Draft) -> list[Draft]:
    """A merged draft whose exact count passed the limit, undone: each content with the
    headings before it; headings after the last content on their own."""
    parts: list[Draft] = []
    current: list[Item] = []
    for item in draft.items:
        current.append(item)
        if isinstance(item, Content):
            parts.append(Draft(current))
            current = []
    if current:
        parts.append(Draft(current))
    return parts
