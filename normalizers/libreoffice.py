"""LibreOffice, headless: finding `soffice`, the conversions the normalizers make with it
(legacy Office and Visio files, the OOXML round trip of `normalizers.fallback`), the
command that runs one, and its time limit and errors.

Each conversion runs `soffice` in its own working directory holding the input, the
output and a fresh LibreOffice profile (`-env:UserInstallation`): two conversions that
shared a profile would collide on its lock, and a crashed one would leave it broken.
The whole process group is killed on timeout (soffice forks soffice.bin). A run converts
its batches' files ahead, many per start (`normalizers.legacy_batch`); a file's own
conversion here is then only for what that did not convert.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from config.errors import ErrorCode
from normalizers.model import NormalizeContext

LIBREOFFICE_APT_INSTALL = (
    "apt-get install -y --no-install-recommends "
    "libreoffice-writer-nogui libreoffice-calc-nogui libreoffice-impress-nogui "
    "libreoffice-draw-nogui"
)

_OUTDIR = "out"  # in a conversion's working directory


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
# Visio's binary drawings as flat ODF, which `normalizers.diagrams.visio` reads.
VSD_TO_FODG = Conversion(".vsd", "Visio Document", "fodg", "fodg:OpenDocument Drawing Flat XML")


def find_soffice() -> str | None:
    return shutil.which("soffice") or shutil.which("libreoffice")


def convert_with_libreoffice(data: bytes, conversion: Conversion, ctx: NormalizeContext) -> bytes:
    """The bytes of `data` converted to `conversion.target` (docx/xlsx/pptx): the batch's
    conversion of it where one was made ahead (`ctx.converted`), else its own."""
    if ctx.converted is not None and (ahead := ctx.converted.get(data, conversion)) is not None:
        return ahead
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
        output = _run(soffice_command(soffice, root, conversion, [source]), root, ctx)
        target = conversion.target
        converted = converted_path(root, source, conversion)
        if not converted.is_file() or converted.stat().st_size == 0:
            errors = [line for line in output.splitlines() if "error" in line.lower()]
            detail = " ".join(errors or output.split())[:500] or "no output file"
            raise ctx.fail(
                ErrorCode.CORRUPT,
                f"LibreOffice could not convert it to {target.upper()}: {detail}",
            )
        return converted.read_bytes()


def soffice_command(
    soffice: str, workdir: Path, conversion: Conversion, sources: list[Path]
) -> list[str]:
    """The command converting `sources` into `workdir`/out, with a fresh profile in
    `workdir`/profile."""
    return [
        soffice,
        f"-env:UserInstallation={profile_dir(workdir).as_uri()}",
        "--headless",
        "--invisible",
        "--norestore",
        "--nolockcheck",
        "--nodefault",
        f"--infilter={conversion.import_filter}",
        "--convert-to",
        conversion.export_filter,
        "--outdir",
        str(workdir / _OUTDIR),
        *map(str, sources),
    ]


def profile_dir(workdir: Path) -> Path:
    """The LibreOffice profile of the conversions run in `workdir`."""
    return workdir / "profile"


def converted_path(workdir: Path, source: Path, conversion: Conversion) -> Path:
    """Where a conversion run in `workdir` writes the file converted from `source`."""
    return workdir / _OUTDIR / f"{source.stem}.{conversion.target}"


def start_soffice(
    command: list[str], workdir: Path, output: int | IO[bytes] = subprocess.PIPE
) -> subprocess.Popen[bytes]:
    """`command` started in `workdir`, its output (stdout and stderr) to `output`."""
    env = {**os.environ, "HOME": str(workdir)}  # nothing lands in the real home directory
    return subprocess.Popen(
        command,
        cwd=workdir,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=output,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group, killed whole on timeout
    )


def kill_soffice(process: subprocess.Popen[bytes]) -> None:
    os.killpg(process.pid, signal.SIGKILL)
    process.communicate()


def _run(command: list[str], workdir: Path, ctx: NormalizeContext) -> str:
    process = start_soffice(command, workdir)
    try:
        stdout, _ = process.communicate(timeout=ctx.limits.conversion_timeout_s)
    except subprocess.TimeoutExpired:
        kill_soffice(process)
        # The same bytes would time out again: the file is over the processing budget
        # (too large or too complex), which TOO_LARGE says; it is not known to be damaged.
        raise ctx.fail(
            ErrorCode.TOO_LARGE,
            f"LibreOffice did not convert it within limits.conversion_timeout_s "
            f"({ctx.limits.conversion_timeout_s:g} s)",
        ) from None
    return stdout.decode("utf-8", "replace")
