"""Structure-aware Markdown chunking under exact BGE-M3 token budgets (docs/chunking.md#rules).

parse -> blocks -> pieces -> pack -> validate, each a small module; plain Python.
"""

from chunking.chunker import ChunkedDocument, chunk_document, chunk_markdown
from chunking.record import Chunk, DocumentInfo, compute_chunk_id, point_id
from chunking.tokens import TokenCounter, get_token_counter
from chunking.validate import ValidationReport, Violation, validate_chunks

__all__ = [
    "Chunk",
    "ChunkedDocument",
    "DocumentInfo",
    "TokenCounter",
    "ValidationReport",
    "Violation",
    "chunk_document",
    "chunk_markdown",
    "compute_chunk_id",
    "get_token_counter",
    "point_id",
    "validate_chunks",
]
