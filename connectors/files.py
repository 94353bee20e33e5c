"""Document files from local or mounted directories (docs/sources.md#files).

Roots come from `files.paths` (or the constructor): a directory, a glob
(`/mnt/share/docs/**/*.pdf`: the part before the first wildcard is the root), or a single
file. Each root has a label, `name=path` to choose it, else the root directory's name
plus a digest of its absolute path (`docs-3f9a0c1e`): two shares that both have a `docs`
folder never share ids. Two roots with one label are refused at start-up; a label that
already holds another directory's documents in the tenant is refused by the pipeline.

- Document id: `<label>/<POSIX path relative to the root>`. The label keeps ids of
  several roots apart and stays the same when roots are added or reordered (an index
  would not). Ids indexed before labels carried the digest (`docs/<path>`) are
  recognised by their `file_path` and replaced by the new ids (`renamed`).
- A root owns exactly what it can list: a glob root owns only the ids its pattern
  matches (`owns`), so a narrower glob run never deletes the rest of the directory.
- Version: `sha256:<content digest>@<mtime in ns>` (the issue's "content hash + mtime").
  Hashing every byte of a share on every run is the cost of a listing, so the digest is
  reused while a file's (size, mtime, inode) are unchanged: kept in memory between
  listings and, with `state_path`, in a small JSON file between runs. See the report for
  the measured difference.
- Deletions: a file missing from a complete listing is gone. A directory that cannot be
  read makes the listing incomplete (its files may still exist). A file that cannot be
  read is still listed (it exists: it must not be deleted) with a version from its stat,
  plus an error entry; fetching it then fails with `FETCH_FAILED`.
- Reads open the file without following a final symlink and without blocking
  (`O_NOFOLLOW | O_NONBLOCK`), check the open handle is a regular file (a FIFO or device
  swapped in after listing would block forever) and stop at `max_file_bytes`
  (`TOO_LARGE`); each read has `read_timeout_s` (a hung network mount).
- Include/exclude patterns (`**` = any directories, `*`/`?`/`[...]` within a name) are
  matched against the path relative to the root; an excluded directory is not entered.
- Symlinks: followed when they stay inside the root (a file link is listed under its own
  path; directory links are not entered, their targets inside the root are listed
  anyway), refused with an error entry when they point outside. `fetch` refuses ids with
  `..`, absolute paths or anything that resolves outside the root.
- ACL: files carry `{"public": True}`: a share is indexed for everyone who may search the
  collection; POSIX permissions are not mapped.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import re
import stat
from collections.abc import Iterator, Mapping, Sequence, Set
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path, PurePosixPath

from pydantic import Field

from config.errors import ConfigError, ErrorCode, IngestError
from config.limits import within_time_limit
from config.settings import StrictModel
from connectors.base import (
    PUBLIC,
    ConnectorContext,
    DeletionScope,
    DocumentGone,
    DocumentRef,
    IdMigrationResult,
    IndexView,
    Listing,
    SourceDocument,
)

log = logging.getLogger(__name__)

_LABELLED = re.compile(r"^([A-Za-z0-9_.-]+)=(.+)$")
_WILDCARD = re.compile(r"[*?\[]")
# Network shares round or skew mtimes: poll looks this much further back.
POLL_SLACK = timedelta(minutes=1)
_HASH_BLOCK = 1 << 20


def glob_regex(pattern: str) -> re.Pattern[str]:
    """A regex for a POSIX glob over relative paths: `**` spans directories (also none),
    `*` and `?` stay within one name, `[...]` is a character class."""
    parts = pattern.strip("/").split("/")
    regex = ""
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if part == "**":
            regex += ".*" if last else "(?:.*/)?"
            continue
        regex += _segment_regex(part) + ("" if last else "/")
    return re.compile(regex + r"\Z", re.DOTALL)


def _segment_regex(part: str) -> str:
    out, i = [], 0
    while i < len(part):
        char = part[i]
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[" and (end := part.find("]", i + 2)) != -1:
            # Ranges (`0-9`) must survive: escape only what is special inside a class.
            body = part[i + 1 : end].replace("\\", "\\\\").replace("^", "\\^")
            out.append("[^" + body[1:] + "]" if body.startswith("!") else f"[{body}]")
            i = end
        else:
            out.append(re.escape(char))
        i += 1
    return "".join(out)


class FilesSettings(StrictModel):
    """The `files` settings section (docs/configuration.md)."""

    paths: list[str] = Field(default_factory=list)
    include: list[str] = Field(default_factory=lambda: ["**/*"])
    exclude: list[str] = Field(default_factory=lambda: ["**/.*", "**/~$*"])


@dataclass(frozen=True)
class Root:
    label: str
    base: Path  # absolute, symlinks resolved
    pattern: re.Pattern[str] | None  # from a glob or single-file root

    def owns(self, rel: str) -> bool:
        return self.pattern is None or bool(self.pattern.match(rel))

    @property
    def legacy_label(self) -> str:
        """The label of this root's ids before labels carried a digest of the path."""
        return self.base.name or "root"


def root_label(base: Path) -> str:
    """The default label of a root: its name plus a digest of its absolute path."""
    digest = hashlib.sha256(str(base).encode("utf-8", "surrogateescape")).hexdigest()[:8]
    return f"{base.name or 'root'}-{digest}"


def parse_roots(entries: Sequence[str | Path]) -> list[Root]:
    roots: list[Root] = []
    for entry in entries:
        text = str(entry)
        label: str | None = None
        if (match := _LABELLED.match(text)) and not Path(text).exists():
            label, text = match.group(1), match.group(2)
        path = Path(text).expanduser()
        pattern: re.Pattern[str] | None = None
        if _WILDCARD.search(text):
            parts = path.parts
            cut = next(i for i, p in enumerate(parts) if _WILDCARD.search(p))
            path = Path(*parts[:cut]) if cut else Path(".")
            pattern = glob_regex("/".join(parts[cut:]))
        elif path.is_file():
            pattern = re.compile(re.escape(path.name) + r"\Z")
            path = path.parent
        base = path.resolve()
        roots.append(Root(label or root_label(base), base, pattern))
    labels = [r.label for r in roots]
    for label in {lb for lb in labels if labels.count(lb) > 1}:
        clashing = ", ".join(str(r.base) for r in roots if r.label == label)
        raise ConfigError(
            f"two roots are both named {label!r} ({clashing}): name them apart with "
            "'name=path' entries so document ids stay distinct",
            setting="files.paths",
        )
    return roots


@dataclass(frozen=True)
class _Seen:
    size: int
    mtime_ns: int
    inode: int
    digest: str


class FilesConnector:
    source_type = "file"
    settings_model = FilesSettings
    targets_are_paths = True
    targets_setting = "files.paths"

    def __init__(
        self,
        settings: FilesSettings,
        roots: Sequence[str | Path] | None = None,
        *,
        state_path: Path | None = None,
        max_file_bytes: int = 100 * 1024 * 1024,
        read_timeout_s: float = 300.0,
    ) -> None:
        self.roots = parse_roots(settings.paths if roots is None else roots)
        if not self.roots:
            raise ConfigError("no directories to read", setting="files.paths")
        self.max_file_bytes = max_file_bytes
        self.read_timeout_s = read_timeout_s
        self._include = [glob_regex(p) for p in settings.include]
        self._exclude = [glob_regex(p) for p in settings.exclude]
        self._state_path = state_path
        self._seen: dict[str, _Seen] = self._load_state()

    @classmethod
    def from_context(cls, context: ConnectorContext) -> FilesConnector:
        return cls(
            context.section,
            list(context.targets),
            state_path=context.state_path,
            max_file_bytes=context.limits.max_file_bytes,
            read_timeout_s=context.limits.document_timeout_s,
        )

    def __repr__(self) -> str:
        return f"FilesConnector({[f'{r.label}={r.base}' for r in self.roots]!r})"

    # --- listing -----------------------------------------------------------------------

    def list_refs(self) -> Listing:
        refs: list[DocumentRef] = []
        errors: list[str] = []
        unlisted: list[str] = []  # directories whose files are unknown
        seen: dict[str, _Seen] = {}
        for root in self.roots:
            if not root.base.is_dir():
                unlisted.append(f"{root.base}: the root directory does not exist or is not one")
                continue
            for path, rel in self._walk(root, errors, unlisted):
                ref, problem = self._ref(root, path, rel, seen)
                if ref is not None:
                    refs.append(ref)
                if problem:
                    errors.append(problem)
        self._seen = seen
        self._save_state()
        errors = unlisted + errors
        for error in errors:
            log.warning("files listing: %s", error)
        return Listing(refs=tuple(refs), complete=not unlisted, errors=tuple(errors))

    def poll(self, since: datetime) -> Iterator[DocumentRef]:
        """Files whose mtime is at or after `since` (less `POLL_SLACK`). A copy that kept an
        old mtime is found by the next full listing (its content hash differs)."""
        if since.tzinfo is None:
            since = since.replace(tzinfo=UTC)
        cutoff = since - POLL_SLACK
        for ref in self.list_refs().refs:
            if ref.updated_at and datetime.fromisoformat(ref.updated_at) >= cutoff:
                yield ref

    def _walk(
        self, root: Root, errors: list[str], unlisted: list[str]
    ) -> Iterator[tuple[Path, str]]:
        def on_error(exc: OSError) -> None:
            unlisted.append(f"cannot read directory {exc.filename}: {exc.strerror}")

        for directory, dirnames, filenames in os.walk(root.base, onerror=on_error):
            here = Path(directory)
            rel_dir = here.relative_to(root.base).as_posix()
            prefix = "" if rel_dir == "." else rel_dir + "/"
            for name in list(dirnames):
                rel = prefix + name
                if self._excluded(rel):
                    dirnames.remove(name)
                elif (here / name).is_symlink():
                    dirnames.remove(name)  # os.walk would not enter it either; say why
                    if not _inside(here / name, root.base):
                        errors.append(f"{here / name}: symlink to outside the root, refused")
            for name in sorted(filenames):
                rel = prefix + name
                if self._selected(root, rel):
                    yield here / name, rel

    def _excluded(self, rel: str) -> bool:
        return any(p.match(rel) for p in self._exclude)

    def _selected(self, root: Root, rel: str) -> bool:
        if root.pattern is not None and not root.pattern.match(rel):
            return False
        return any(p.match(rel) for p in self._include) and not self._excluded(rel)

    def _ref(
        self, root: Root, path: Path, rel: str, seen: dict[str, _Seen]
    ) -> tuple[DocumentRef | None, str | None]:
        if path.is_symlink() and not _inside(path, root.base):
            return None, f"{path}: symlink to outside the root, refused"
        try:
            info = path.stat()
        except OSError as exc:
            return None, f"{path}: cannot stat ({exc.strerror})"
        if not stat.S_ISREG(info.st_mode):
            return None, f"{path}: not a regular file, skipped"
        document_id = f"{root.label}/{rel}"
        key = str(path)
        previous = self._seen.get(key)
        problem = None
        if previous and (previous.size, previous.mtime_ns, previous.inode) == (
            info.st_size,
            info.st_mtime_ns,
            info.st_ino,
        ):
            digest = previous.digest
        else:
            try:
                digest = _sha256_file(path)
            except OSError as exc:
                digest = f"unreadable-{info.st_size}"
                problem = f"{path}: cannot read ({exc.strerror}); listed, so it is not deleted"
        if problem is None:
            seen[key] = _Seen(info.st_size, info.st_mtime_ns, info.st_ino, digest)
        ref = DocumentRef(
            document_id=document_id,
            version=_version(digest, info.st_mtime_ns),
            source_type="file",
            title=path.name,
            updated_at=_iso_ns(info.st_mtime_ns),
            kind="file",
        )
        return ref, problem

    # --- ownership -----------------------------------------------------------------------

    def owns(self, document_id: str) -> bool:
        """Whether the id is one this connector's roots could list: deletions of a run
        stay within it (a glob root owns only what its pattern matches)."""
        label, _, rel = document_id.partition("/")
        return any(root.label == label and root.owns(rel) for root in self.roots)

    def renamed(self, indexed_paths: Mapping[str, str | None]) -> dict[str, str]:
        """Ids indexed under a root's legacy label (`docs/<path>`, before labels carried
        a digest), recognised by their `file_path`, mapped to the id the root gives the
        same file now."""
        renames: dict[str, str] = {}
        for document_id, file_path in indexed_paths.items():
            label, _, rel = document_id.partition("/")
            if not file_path or not rel:
                continue
            for root in self.roots:
                if label == root.label or label != root.legacy_label:
                    continue
                if Path(file_path) == root.base.joinpath(*PurePosixPath(rel).parts) and root.owns(
                    rel
                ):
                    renames[document_id] = f"{root.label}/{rel}"
        return renames

    def check_indexed(self, index: IndexView) -> None:
        """A root label (`name=path`) that already holds another directory's documents in
        this tenant would overwrite and then delete them: refused before anything is
        written."""
        paths = index.field("file_path")
        for root in self.roots:
            for document_id, file_path in paths.items():
                if not document_id.startswith(f"{root.label}/") or not file_path:
                    continue
                if not Path(file_path).is_relative_to(root.base):
                    raise ConfigError(
                        f"the root label {root.label!r} already holds documents of another "
                        f"directory in tenant {index.tenant_id!r} (e.g. {file_path}); give "
                        f"{root.base} a label of its own with a 'name=path' entry",
                        setting="files.paths",
                    )
                break  # one document tells which directory owns the label

    def migrate_ids(self, index: IndexView, listed: Set[str]) -> IdMigrationResult:
        """Documents indexed under a root's legacy id (`docs/<path>`): those whose file is
        indexed under its current id are replaced (a rename: no deletion guard applies);
        those whose file is no longer listed are retired into the run's deletion scope
        like any other missing document."""
        renames = self.renamed(index.field("file_path"))
        indexed_now = index.indexed(sorted(set(renames.values()) & listed))
        return IdMigrationResult(
            replaced=tuple(sorted(old for old, new in renames.items() if new in indexed_now)),
            retired=frozenset(old for old, new in renames.items() if new not in listed),
        )

    def deletion_scopes(self, retired: frozenset[str]) -> list[DeletionScope]:
        """A run owns the ids its roots can list, and the retired ids of its roots."""
        return [DeletionScope(self.source_type, owns=lambda d: self.owns(d) or d in retired)]

    # --- fetching ----------------------------------------------------------------------

    def fetch(self, ref: DocumentRef) -> SourceDocument:
        root, path = self._resolve(ref.document_id)
        try:
            info, data = within_time_limit(
                lambda: _read_regular_file(path, self.max_file_bytes),
                self.read_timeout_s,
                what="reading the file",
                subject=str(path),
                setting="limits.document_timeout_s",
            )
        except FileNotFoundError:
            raise DocumentGone("the file no longer exists", subject=ref.document_id) from None
        except OSError as exc:
            raise IngestError(
                ErrorCode.FETCH_FAILED, f"cannot read the file: {exc.strerror}", subject=str(path)
            ) from None
        updated_at = _iso_ns(info.st_mtime_ns)
        digest = hashlib.sha256(data).hexdigest()
        relative = ref.document_id[len(root.label) + 1 :]
        return SourceDocument(
            ref=replace(ref, version=_version(digest, info.st_mtime_ns), updated_at=updated_at),
            data=data,
            filename=path.name,
            file_path=str(path),
            title=path.name,
            updated_at=updated_at,
            acl=PUBLIC,
            metadata={"root": root.label, "relative_path": relative},
            breadcrumbs=(root.label, *PurePosixPath(relative).parts),
        )

    def _resolve(self, document_id: str) -> tuple[Root, Path]:
        """The file of an id, refusing anything that would leave its root."""
        label, _, rel = document_id.partition("/")
        root = next((r for r in self.roots if r.label == label), None)
        parts = PurePosixPath(rel).parts
        if (
            root is None
            or not rel
            or rel.startswith("/")
            or "\0" in rel
            or any(p in ("..", ".") for p in parts)
        ):
            raise IngestError(
                ErrorCode.FETCH_FAILED,
                "not a document id of a configured root (path traversal refused)",
                subject=document_id,
            )
        path = root.base.joinpath(*parts)
        if not _inside(path, root.base):
            raise IngestError(
                ErrorCode.FETCH_FAILED,
                "resolves to outside its root (symlink), refused",
                subject=document_id,
            )
        return root, path

    # --- state -------------------------------------------------------------------------

    def _load_state(self) -> dict[str, _Seen]:
        if self._state_path is None or not self._state_path.exists():
            return {}
        try:
            raw = json.loads(self._state_path.read_text(encoding="utf-8"))
            return {key: _Seen(*value) for key, value in raw.items()}
        except (OSError, ValueError, TypeError) as exc:
            log.warning("ignoring unreadable file state %s: %s", self._state_path, exc)
            return {}

    def _save_state(self) -> None:
        if self._state_path is None:
            return
        self._state_path.parent.mkdir(parents=True, exist_ok=True)
        temp = self._state_path.with_suffix(".tmp")
        data = {k: [s.size, s.mtime_ns, s.inode, s.digest] for k, s in self._seen.items()}
        temp.write_text(json.dumps(data), encoding="utf-8")
        temp.replace(self._state_path)


def _inside(path: Path, base: Path) -> bool:
    try:
        return path.resolve().is_relative_to(base)
    except (OSError, RuntimeError):  # a symlink loop
        return False


def _open_regular_file(path: Path) -> tuple[int, os.stat_result]:
    """An open descriptor of `path` that is known to be a regular file. The final
    component is not followed (a symlink swapped in after listing) and the open does not
    block (a FIFO); the check is on the open handle, so nothing can change in between."""
    target = path.resolve() if path.is_symlink() else path  # in-root links were checked
    fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "not a regular file (a FIFO, device or socket)")
        os.set_blocking(fd, True)
        return fd, info
    except BaseException:
        os.close(fd)
        raise


def _read_regular_file(path: Path, max_bytes: int) -> tuple[os.stat_result, bytes]:
    fd, info = _open_regular_file(path)
    with os.fdopen(fd, "rb") as handle:
        if info.st_size > max_bytes:
            raise IngestError(
                ErrorCode.TOO_LARGE,
                f"{info.st_size:,} bytes, over limits.max_file_bytes ({max_bytes:,})",
                subject=str(path),
            )
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:  # grew since the stat
        raise IngestError(
            ErrorCode.TOO_LARGE,
            f"more than limits.max_file_bytes ({max_bytes:,}) bytes",
            subject=str(path),
        )
    return info, data


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    fd, _ = _open_regular_file(path)
    with os.fdopen(fd, "rb") as handle:
        while block := handle.read(_HASH_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def _version(digest: str, mtime_ns: int) -> str:
    return f"sha256:{digest}@{mtime_ns}"


def _iso_ns(mtime_ns: int) -> str:
    return datetime.fromtimestamp(mtime_ns / 1e9, UTC).isoformat()
