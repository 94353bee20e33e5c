"""Legacy files converted in batches: one `soffice` start converts many files, where
LibreOffice's start-up (a second or more) would otherwise be paid once per file.

A run hands a batch's documents to `LegacyBatch.convert` before normalizing them; the
normalizers then find each file's conversion by its content (`NormalizeContext.converted`)
and convert alone only what the batch did not: a file LibreOffice could not read, or one
caught in a call that stopped. So a bad file still fails alone, with the code and message
of its own conversion.

LibreOffice converts a call's files in the order given and goes on past a file it cannot
load. Each file keeps its time limit: a call is killed when no file has come out of it for
`limits.conversion_timeout_s` (so a call's limit grows with its number of files). When a
call stops early (killed or crashed), the file after the last one out is the suspect: it
and the last one out (perhaps cut short) are left to their own conversion, with the
per-file limit, and the files after it go to another call.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
import time
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType, TracebackType

from config.errors import IngestError
from config.settings import LimitsSettings
from normalizers.detection import detect_format
from normalizers.libreoffice import (
    DOC_TO_DOCX,
    PPT_TO_PPTX,
    VSD_TO_FODG,
    XLS_TO_XLSX,
    Conversion,
    converted_path,
    find_soffice,
    kill_soffice,
    profile_dir,
    soffice_command,
    start_soffice,
)

# The formats whose normalizer converts through LibreOffice, and how.
BATCHED: Mapping[str, Conversion] = MappingProxyType(
    {"doc": DOC_TO_DOCX, "xls": XLS_TO_XLSX, "ppt": PPT_TO_PPTX, "vsd": VSD_TO_FODG}
)
_POLL_S = 0.1  # how often a call's output folder is looked at


@dataclass(frozen=True)
class Upcoming:
    """A document about to be normalized: what decides its format."""

    data: bytes
    filename: str
    mime: str | None = None
    fmt: str | None = None  # the format where the source knows it, else detected


class LegacyBatch:
    """A batch's legacy files converted ahead, kept in a temporary folder until `close`."""

    def __init__(self, limits: LimitsSettings) -> None:
        self.limits = limits
        self.calls = 0  # soffice starts made for the batch
        self._root = Path(tempfile.mkdtemp(prefix="ingest-soffice-batch-"))
        self._converted: dict[tuple[str, Conversion], Path] = {}

    def __enter__(self) -> LegacyBatch:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        shutil.rmtree(self._root, ignore_errors=True)

    def get(self, data: bytes, conversion: Hashable) -> bytes | None:
        if not isinstance(conversion, Conversion):
            return None
        path = self._converted.get((_digest(data), conversion))
        try:
            return None if path is None else path.read_bytes()
        except FileNotFoundError:  # closed: a document still read after its batch ended
            return None

    def convert(self, documents: Iterable[Upcoming]) -> None:
        """Converts the legacy files among `documents`, one soffice call per conversion
        (more where a call stops early); a file alone is left to its own conversion, and
        so is a file whose format cannot be told: nothing here fails for one document."""
        soffice = find_soffice()
        if soffice is None:  # each file's own conversion says how to install it
            return
        files: dict[Conversion, dict[str, bytes]] = {}
        for document in documents:
            data = document.data
            if not data.strip() or len(data) > self.limits.max_file_bytes:
                continue  # refused before any conversion
            try:
                fmt = document.fmt or detect_format(data, document.filename, document.mime)
            except IngestError:  # its own normalizing reports it, for it alone
                continue
            conversion = BATCHED.get(fmt)
            if conversion is not None:
                files.setdefault(conversion, {})[_digest(data)] = data
        try:
            for conversion, by_digest in files.items():
                pending = list(by_digest.items())
                while len(pending) > 1:
                    pending = self._call(soffice, conversion, pending)
        except OSError:
            # The temporary folder failed (disk full): what is not converted yet is
            # converted file by file, which reports such a failure per document.
            return

    def _call(
        self, soffice: str, conversion: Conversion, files: list[tuple[str, bytes]]
    ) -> list[tuple[str, bytes]]:
        """Converts `files` in one soffice call; returns those to convert in another
        call, after a call that stopped early."""
        self.calls += 1
        workdir = self._root / f"call-{self.calls}"
        workdir.mkdir()
        sources = [
            workdir / f"{position:05d}{conversion.source_ext}" for position in range(len(files))
        ]
        for source, (_, data) in zip(sources, files, strict=True):
            source.write_bytes(data)
        outputs = [converted_path(workdir, source, conversion) for source in sources]
        with (workdir / "soffice.log").open("wb") as log:
            process = start_soffice(
                soffice_command(soffice, workdir, conversion, sources), workdir, log
            )
            ended = self._wait(process, outputs)
        out = [p for p, output in enumerate(outputs) if output.is_file() and output.stat().st_size]
        last = out[-1] if out else -1
        kept = out if ended else out[:-1]
        for position in kept:
            self._converted[(files[position][0], conversion)] = outputs[position]
        for source in sources:
            source.unlink()
        shutil.rmtree(profile_dir(workdir), ignore_errors=True)
        return [] if ended else files[last + 2 :]

    def _wait(self, process: subprocess.Popen[bytes], outputs: list[Path]) -> bool:
        """Whether the call ended by itself, successfully; it is killed when no file has
        come out of it for the per-file limit."""
        limit = self.limits.conversion_timeout_s
        seen = 0
        deadline = time.monotonic() + limit
        while True:
            try:
                return process.wait(timeout=_POLL_S) == 0
            except subprocess.TimeoutExpired:
                out = sum(output.exists() for output in outputs)
                if out > seen:
                    seen, deadline = out, time.monotonic() + limit
                elif time.monotonic() > deadline:
                    kill_soffice(process)
                    return False


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
