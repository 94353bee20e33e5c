"""Which process holds an embedded store (Qdrant Edge, qdrant-client's local mode).

An embedded store is open in one process at a time: the engines lock their own files,
but only fail with "WouldBlock" or "already accessed", never saying who holds them. So a
process that opens a store first takes `<qdrant.path>/store.lock` (an advisory `flock`)
and writes into it who it is (pid, command, since when); a process that finds the lock
taken waits a bounded time for it, then says in one line who holds the store and what to
do. The lock belongs to the process: the connections of one process share it (counted),
and the last one closed lets it go. The kernel drops it when the process dies, so a
crashed holder never leaves the store locked.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import sys
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO

from config.errors import ErrorCode, IngestError

LOCK_FILE = "store.lock"
log = logging.getLogger(__name__)
# How often a waiting process tries the lock again.
_POLL_S = 0.1


@dataclass(frozen=True)
class StoreHolder:
    """What the holder wrote into the lock file when it took it."""

    pid: int
    command: str
    since: str

    def describe(self) -> str:
        return f"`{self.command}` (pid {self.pid}, since {self.since})"


class _Held:
    def __init__(self, handle: IO[str]) -> None:
        self.handle = handle
        self.count = 1


class _ThisProcess:
    """The store locks this process holds and the name it gives itself in them. One per
    process, by nature: a lock belongs to an open file, so two connections of one process
    must share one handle or block each other."""

    def __init__(self) -> None:
        self.command: str | None = None
        self.held: dict[Path, _Held] = {}
        self.guard = threading.Lock()


_THIS_PROCESS = _ThisProcess()


def name_this_process(command: str) -> None:
    """How the lock file names this process (the command line: `ingest mcp`)."""
    _THIS_PROCESS.command = command


def process_command() -> str:
    """What this process is, as a user would name it: what it named itself (`ingest
    mcp`, `ingest run`), a Prefect flow run, else the program's name. Only these words:
    the arguments (paths, queries) stay out of a file others read."""
    if _THIS_PROCESS.command:
        return _THIS_PROCESS.command
    program = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    flow_run = os.environ.get("PREFECT__FLOW_RUN_ID")
    if flow_run:
        return f"Prefect flow run {flow_run}"
    if program in ("", "-c", "-m"):
        return Path(sys.executable).name
    return program


def read_holder(directory: Path) -> StoreHolder | None:
    """The live process the lock file names, None when none is written (or it is
    unreadable: the holder is between taking the lock and writing itself) or the one
    named has ended without letting go (the kernel dropped its lock)."""
    try:
        data = json.loads((directory / LOCK_FILE).read_text(encoding="utf-8"))
        holder = StoreHolder(int(data["pid"]), str(data["command"]), str(data["since"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    try:
        os.kill(holder.pid, 0)  # signal 0: only whether the process exists
    except PermissionError:  # it does, under another user
        return holder
    except OSError:
        return None
    return holder


def store_busy(directory: Path, waited_s: float) -> IngestError:
    """The one-line error of a store another process holds: which store, who holds it,
    what to do. Transient (its documents are retried by the next run), but no task
    retries it at once: the opening already waited `qdrant.lock_wait_s`."""
    holder = read_holder(directory)
    if holder is not None and holder.pid == os.getpid():
        # this process has the lock file, yet the engine's own lock is taken: by a
        # process that does not write the lock file (an older version of this tool)
        holder = None
    who = holder.describe() if holder else "another process"
    if holder is not None and holder.command == "ingest mcp":
        advice = (
            "stop or wait for the `ingest mcp` server (it lets the store go after "
            "qdrant.idle_release_s without a query; one that does not is an older version: "
            "restart it)"
        )
    else:
        advice = "wait for it to finish or stop it"
    waited = f" after waiting {waited_s:g} s (qdrant.lock_wait_s)" if waited_s else ""
    return IngestError(
        ErrorCode.STORE_BUSY,
        f"the embedded Qdrant store at {directory} is held by {who}{waited}: {advice}, "
        "then run again; a Qdrant server (qdrant.url) lets several processes use one index at once",
        subject=str(directory),
        transient=True,
    )


def acquire(directory: Path, wait_s: float) -> None:
    """Take the store's lock for this process (or count one more user where it holds it
    already), waiting up to `wait_s` seconds for another process to let it go; raises
    `store_busy` when it does not."""
    directory = directory.resolve()
    with _THIS_PROCESS.guard:
        held = _THIS_PROCESS.held.get(directory)
        if held is not None:
            held.count += 1
            return
        directory.mkdir(parents=True, exist_ok=True)
        handle = open(directory / LOCK_FILE, "a+", encoding="utf-8")  # noqa: SIM115 (kept open while held)
        started = time.monotonic()
        waiting = False
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                waited = time.monotonic() - started
                if waited >= wait_s:
                    handle.close()
                    raise store_busy(directory, round(wait_s, 1)) from None
                if not waiting:  # a command that seems to hang says why, once
                    waiting = True
                    holder = read_holder(directory)
                    log.warning(
                        "the embedded Qdrant store at %s is held by %s: waiting up to %g s "
                        "for it (qdrant.lock_wait_s)",
                        directory,
                        holder.describe() if holder else "another process",
                        wait_s,
                    )
                time.sleep(min(_POLL_S, wait_s - waited))
        if waiting:
            log.warning(
                "got the embedded Qdrant store at %s after waiting %.1f s",
                directory,
                time.monotonic() - started,
            )
        handle.seek(0)
        handle.truncate()
        since = datetime.now().astimezone().isoformat(timespec="seconds")
        handle.write(json.dumps({"pid": os.getpid(), "command": process_command(), "since": since}))
        handle.flush()
        _THIS_PROCESS.held[directory] = _Held(handle)


def release(directory: Path) -> None:
    """One user of this process's lock is done; the last one lets the store go."""
    directory = directory.resolve()
    with _THIS_PROCESS.guard:
        held = _THIS_PROCESS.held.get(directory)
        if held is None:
            return
        held.count -= 1
        if held.count:
            return
        del _THIS_PROCESS.held[directory]
        held.handle.seek(0)
        held.handle.truncate()  # no holder named once it is free
        held.handle.flush()
        fcntl.flock(held.handle, fcntl.LOCK_UN)
        held.handle.close()
