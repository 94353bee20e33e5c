"""Legacy binary Office files (DOC, XLS, PPT): LibreOffice converts them headless to
the OOXML format, whose normalizer then does the rest.

Each conversion runs `soffice` in its own temporary directory holding the input, the
output and a fresh LibreOffice profile (`-env:UserInstallation`): two conversions that
shared a profile would collide on its lock, and a crashed one would leave it broken.
The whole process group is killed on timeout (soffice forks soffice.bin).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from config.errors import ErrorCode
from normalizers.model import NormalizeContext, NormalizedDocument, Normalizer
from normalizers.registry import FORMATS

LIBREOFFICE_APT_INSTALL = (
    "apt-get install -y --no-install-recommends "
    "libreoffice-writer-nogui libreoffice-calc-nogui libreoffice-impress-nogui "
    "libreoffice-draw-nogui"
)


@dataclass(frozen=True)
class Conversion:
    source_ext: str
    # The import filter is forced: left to detect the type, LibreOffice imports a damaged
    # file as plain text and "converts" it into pages of mojibake.
    import_filter: str
    target: str  # the OOXML format whose normalizer takes over
    export_filter: str


DOC_TO_DOCX = Conversion(".doc", "MS Word 97", "docx", "docx:MS Word 2007 XML")
XLS_TO_XLSX = Conversion(".xls", "MS Excel 97", "xlsx", "xlsx:Calc MS Excel 2007 XML")
PPT_TO_PPTX = Conversion(".ppt", "MS PowerPoint 97", "pptx", "pptx:Impress MS PowerPoint 2007 XML")
# OOXML saved again by LibreOffice: the last resort of `normalizers.fallback`.
DOCX_ROUND_TRIP = Conversion(".docx", "MS Word 2007 XML", "docx", "docx:MS Word 2007 XML")
XLSX_ROUND_TRIP = Conversion(
    ".xlsx", "Calc MS Excel 2007 XML", "xlsx", "xlsx:Calc MS Excel 2007 XML"
)
PPTX_ROUND_TRIP = Conversion(
    ".pptx", "Impress MS PowerPoint 2007 XML", "pptx", "pptx:Impress MS PowerPoint 2007 XML"
)


def find_soffice() -> str | None:
    return shutil.which("soffice") or shutil.which("libreoffice")


def convert_with_libreoffice(data: bytes, conversion: Conversion, ctx: NormalizeContext) -> bytes:
    """The bytes of `data` converted to `conversion.target` (docx/xlsx/pptx)."""
    soffice = find_soffice()
    if soffice is None:
        raise ctx.fail(
            ErrorCode.UNSUPPORTED_FORMAT,
            f"{conversion.source_ext} files need LibreOffice (soffice), which is not "
            f"installed; install it with: {LIBREOFFICE_APT_INSTALL}",
        )
    with tempfile.TemporaryDirectory(prefix="ingest-soffice-") as workdir:
        root = Path(workdir)
        source = root / f"document{conversion.source_ext}"
        source.write_bytes(data)
        outdir = root / "out"
        command = [
            soffice,
            f"-env:UserInstallation={(root / 'profile').as_uri()}",
            "--headless",
            "--invisible",
            "--norestore",
            "--nolockcheck",
            "--nodefault",
            f"--infilter={conversion.import_filter}",
            "--convert-to",
            conversion.export_filter,
            "--outdir",
            str(outdir),
            str(source),
        ]
        output = _run(command, root, ctx)
        target = conversion.target
        converted = outdir / f"document.{target}"
        if not converted.is_file() or converted.stat().st_size == 0:
            errors = [line for line in output.splitlines() if "error" in line.lower()]
            detail = " ".join(errors or output.split())[:500] or "no output file"
            raise ctx.fail(
                ErrorCode.CORRUPT,
                f"LibreOffice could not convert it to {target.upper()}: {detail}",
            )
        return converted.read_bytes()


def _run(command: list[str], workdir: Path, ctx: NormalizeContext) -> str:
    env = {**os.environ, "HOME": str(workdir)}  # nothing lands in the real home directory
    process = subprocess.Popen(
        command,
        cwd=workdir,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group, killed whole on timeout
    )
    try:
        stdout, _ = process.communicate(timeout=ctx.limits.conversion_timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        # The same bytes would time out again: the file is over the processing budget
        # (too large or too complex), which TOO_LARGE says; it is not known to be damaged.
        raise ctx.fail(
            ErrorCode.TOO_LARGE,
            f"LibreOffice did not convert it within limits.conversion_timeout_s "
            f"({ctx.limits.conversion_timeout_s:g} s)",
        ) from None
    return stdout.decode("utf-8", "replace")


def _legacy_normalizer(conversion: Conversion) -> Normalizer:
    def normalize(data: bytes, ctx: NormalizeContext) -> NormalizedDocument:
        converted = convert_with_libreoffice(data, conversion, ctx)
        entry = FORMATS.get(conversion.target)
        if entry is None:
            raise ctx.fail(
                ErrorCode.UNSUPPORTED_FORMAT, f"no {conversion.target.upper()} normalizer"
            )
        document = entry.normalize(converted, ctx)
        document.metadata.setdefault("converted_with", "libreoffice")
        return document

    return normalize


normalize_doc = _legacy_normalizer(DOC_TO_DOCX)
normalize_xls = _legacy_normalizer(XLS_TO_XLSX)
normalize_ppt = _legacy_normalizer(PPT_TO_PPTX)
