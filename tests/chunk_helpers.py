"""Builders of Markdown with known token sizes, for the chunking tests."""

from __future__ import annotations

from chunking import Chunk, ChunkedDocument, DocumentInfo, chunk_document, validate_chunks
from chunking.tokens import TokenCounter, get_token_counter
from config.settings import ChunkingSettings

SENTENCES = [
    "The ingestion service keeps the search index in step with the wiki.",
    "Сервис загрузки держит поисковый индекс в согласии с вики.",
    "Every page is normalized to Markdown before it is split into chunks.",
    "Каждая страница сначала приводится к Markdown, затем делится на фрагменты.",
    "Token counts come from the same tokenizer the embedding model uses.",
    "Подсчёт токенов выполняется тем же токенизатором, что и у модели.",
    "A failed document is reported and the others carry on.",
    "Ошибочный документ попадает в отчёт, остальные обрабатываются дальше.",
]


def paragraph(counter: TokenCounter, tokens: int, seed: int = 0) -> str:
    """Whole sentences adding up to at most `tokens` (and within a sentence of it)."""
    out: list[str] = []
    used = 0
    i = seed
    while True:
        sentence = SENTENCES[i % len(SENTENCES)]
        n = counter.count(sentence)
        if used + n > tokens:
            break
        out.append(sentence)
        used += n
        i += 1
    return " ".join(out)


def chunked(text: str | bytes, settings: ChunkingSettings, **info: object) -> ChunkedDocument:
    document = chunk_document(text, DocumentInfo(document_id="doc-1", **info), settings)  # type: ignore[arg-type]
    report = validate_chunks(document.chunks, document.text, settings, document.blocks)
    assert report.ok, report.violations
    counter = get_token_counter(settings.tokenizer)
    assert [c.token_count for c in document.chunks] == counter.count_many(
        [c.md_text for c in document.chunks]
    )
    again = chunk_document(text, DocumentInfo(document_id="doc-1", **info), settings)  # type: ignore[arg-type]
    assert [c.to_record() for c in again.chunks] == [c.to_record() for c in document.chunks]
    return document


def types(chunks: tuple[Chunk, ...]) -> list[str]:
    return [c.chunk_type for c in chunks]
