"""Fallback readers (docs/sources.md#nothing-is-lost): a file that one library cannot parse but a
user's office suite opens goes through the next reader before it is reported `CORRUPT`.

A format module lists its readers best first; `first_that_reads` returns the first
document one of them produces. A reader that says `CORRUPT`, or whose library raises,
hands over to the next; any other error (`TOO_LARGE`, `ENCRYPTED`, ...) ends the chain,
because the next reader would meet the same limit or lock. When a later reader wins,
the document carries a warning naming it and why the earlier ones failed (it reaches
the run report as a warning, not an error). The last resort of the OOXML formats is a
LibreOffice round trip: the file saved again by LibreOffice, then the first reader.
"""

from __future__ import annotations

import contextlib
import zipfile
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

from config.errors import ErrorCode, IngestError
from normalizers.libreoffice import Conversion, convert_with_libreoffice, find_soffice
from normalizers.model import NormalizeContext, NormalizedDocument, Normalizer
from normalizers.ooxml import check_true_sizes, without_doctypes

_MESSAGE_CHARS = 300  # of each failed reader's message, in the final one


@dataclass(frozen=True)
class Reader:
    name: str  # names the reader in messages: "openpyxl", "python-calamine", ...
    read: Normalizer


def first_that_reads(
    readers: Sequence[Reader], data: bytes, ctx: NormalizeContext
) -> NormalizedDocument:
    failures: list[str] = []
    for reader in readers:
        try:
            document = reader.read(data, ctx)
        except IngestError as exc:
            if exc.code is not ErrorCode.CORRUPT:
                raise
            failures.append(f"{reader.name}: {exc.message[:_MESSAGE_CHARS]}")
        except MemoryError:
            raise
        except Exception as exc:  # a library choked on the bytes: the next reader may not
            failures.append(f"{reader.name}: {type(exc).__name__}: {exc}"[:_MESSAGE_CHARS])
        else:
            if failures:
                note = f"read with {reader.name} because " + "; ".join(failures)
                document.warnings = (note, *document.warnings)
                document.metadata.setdefault("reader", reader.name)
            return document
    raise ctx.fail(ErrorCode.CORRUPT, "no reader could read it: " + "; ".join(failures))


def office_round_trip(conversion: Conversion, then: Reader) -> Reader:
    """The last resort: LibreOffice opens the OOXML file and saves it again (same
    format), which rewrites whatever the libraries choked on (it also reads past bad
    checksums and damaged parts); `then` reads the result. Off with
    `limits.office_round_trip: false` (it costs seconds per damaged file)."""

    def read(data: bytes, ctx: NormalizeContext) -> NormalizedDocument:
        if not ctx.limits.office_round_trip:
            raise ctx.fail(ErrorCode.CORRUPT, "limits.office_round_trip is off")
        if find_soffice() is None:
            raise ctx.fail(ErrorCode.CORRUPT, "LibreOffice (soffice) is not installed")
        check_true_sizes(data, ctx)
        # Unreadable parts: LibreOffice gets the bytes as they are (it refuses DOCTYPEs).
        with contextlib.suppress(
            IngestError,
            zipfile.BadZipFile,
            OSError,
            EOFError,
            zlib.error,
            ValueError,
            NotImplementedError,
        ):
            data = without_doctypes(data)
        return then.read(convert_with_libreoffice(data, conversion, ctx), ctx)

    return Reader(f"a LibreOffice round trip and {then.name}", read)
