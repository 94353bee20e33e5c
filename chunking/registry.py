"""Block type -> splitter, the way markdown-it registers its block rules: the chunker
(and a list splitting a table or code block nested in an item) looks a block's type up
here and never branches on it."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from chunking.blocks import BlockType
from chunking.code import CodeSplitter, HtmlSplitter
from chunking.display_math import MathSplitter
from chunking.lists import ListSplitter
from chunking.prose import ParagraphSplitter, QuoteSplitter
from chunking.split import Splitter
from chunking.table import TableSplitter

SPLITTERS: Mapping[BlockType, Splitter] = MappingProxyType(
    {
        BlockType.PARAGRAPH: ParagraphSplitter(),
        BlockType.QUOTE: QuoteSplitter(),
        BlockType.LIST: ListSplitter(),
        BlockType.TABLE: TableSplitter(),
        BlockType.CODE: CodeSplitter(),
        BlockType.HTML: HtmlSplitter(),
        BlockType.MATH: MathSplitter(),
    }
)
