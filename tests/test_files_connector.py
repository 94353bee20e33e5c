"""The files connector on real directories: ids, versions, patterns, deletions, symlinks,
path traversal, unreadable entries, the stat cache, and the shared corpus."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from config.errors import ConfigError, ErrorCode, IngestError
from connectors.base import PUBLIC, DocumentGone, DocumentRef, SourceDocument, fetch_many
from connectors.files import FilesConnector, FilesSettings, glob_regex, root_label
from testkit.corpus import DOCLING

REPO = Path(__file__).resolve().parents[1]
CORPUS = DOCLING


def settings(**values: object) -> FilesSettings:
    return FilesSettings.model_validate(values)


def write(path: Path, data: bytes | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    path.write_bytes(data)
    return path


@pytest.fixture
def share(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    write(root / "a.md", "# A\n")
    write(root / "sub" / "b.txt", "b")
    write(root / "sub" / "deeper" / "c.pdf", b"%PDF-1.4 tiny")
    write(root / "Отчёт 2024.docx", b"PK\x03\x04 not really")
    write(root / ".hidden", "no")
    write(root / ".git" / "config", "no")
    write(root / "~$lock.docx", "no")
    return root


def ids(connector: FilesConnector) -> set[str]:
    return {ref.document_id for ref in connector.list_refs().refs}


def test_lists_recursively_with_stable_ids_and_default_excludes(share: Path) -> None:
    label = root_label(share)
    conn = FilesConnector(settings(), [share])
    listing = conn.list_refs()
    assert listing.complete and not listing.errors
    assert {r.document_id for r in listing.refs} == {
        f"{label}/a.md",
        f"{label}/sub/b.txt",
        f"{label}/sub/deeper/c.pdf",
        f"{label}/Отчёт 2024.docx",
    }
    ref = next(r for r in listing.refs if r.document_id == f"{label}/sub/b.txt")
    mtime_ns = (share / "sub" / "b.txt").stat().st_mtime_ns
    digest = "3e23e8160039594a33894f6564e1b1348bbd7a0088d42c4acb73eeaed59c009d"  # sha256(b"b")
    assert ref.version == f"sha256:{digest}@{mtime_ns}"
    assert (ref.kind, ref.source_type, ref.title) == ("file", "file", "b.txt")
    assert FilesConnector(settings(), [share]).list_refs().refs == listing.refs  # stable


def test_versions_change_with_content_and_with_mtime(share: Path) -> None:
    label = root_label(share)
    conn = FilesConnector(settings(), [share])
    first = {r.document_id: r.version for r in conn.list_refs().refs}
    write(share / "a.md", "# A changed\n")
    later = time.time() + 5
    os.utime(share / "sub" / "b.txt", (later, later))  # touched only
    second = {r.document_id: r.version for r in conn.list_refs().refs}
    changed = {k for k in first if first[k] != second[k]}
    assert changed == {f"{label}/a.md", f"{label}/sub/b.txt"}
    assert first[f"{label}/sub/b.txt"].split("@")[0] == second[f"{label}/sub/b.txt"].split("@")[0]


def test_include_exclude_and_glob_roots(share: Path) -> None:
    label = root_label(share)
    only_text = FilesConnector(settings(include=["**/*.txt", "*.md"]), [share])
    assert ids(only_text) == {f"{label}/a.md", f"{label}/sub/b.txt"}
    no_sub = FilesConnector(settings(exclude=["sub"]), [share])
    assert f"{label}/sub/b.txt" not in ids(no_sub) and f"{label}/.hidden" in ids(no_sub)
    globbed = FilesConnector(settings(), [str(share / "**" / "*.pdf")])
    assert ids(globbed) == {f"{label}/sub/deeper/c.pdf"}
    single = FilesConnector(settings(), [share / "a.md"])
    assert ids(single) == {f"{label}/a.md"}


def test_roots_are_labelled_and_clashing_labels_refused(tmp_path: Path) -> None:
    write(tmp_path / "x" / "docs" / "one.txt", "1")
    write(tmp_path / "y" / "docs" / "one.txt", "2")
    # Two shares with a `docs` folder each: the digest of the path keeps their ids apart.
    both = FilesConnector(settings(), [tmp_path / "x" / "docs", tmp_path / "y" / "docs"])
    labels = [root.label for root in both.roots]
    assert labels[0] != labels[1] and all(label.startswith("docs-") for label in labels)
    assert ids(both) == {f"{labels[0]}/one.txt", f"{labels[1]}/one.txt"}
    with pytest.raises(ConfigError, match="both named 'docs'") as caught:
        FilesConnector(settings(), [f"docs={tmp_path / 'x' / 'docs'}", f"docs={tmp_path / 'y'}"])
    assert caught.value.subject == "files.paths"
    conn = FilesConnector(
        settings(paths=[f"hr={tmp_path / 'x' / 'docs'}", f"eng={tmp_path / 'y' / 'docs'}"])
    )
    assert ids(conn) == {"hr/one.txt", "eng/one.txt"}
    docs = fetch_many(
        conn, [DocumentRef("hr/one.txt", "", "file"), DocumentRef("eng/one.txt", "", "file")]
    )
    assert [d.data for d in docs if isinstance(d, SourceDocument)] == [b"1", b"2"]


def test_deleted_files_are_missing_from_a_complete_listing(share: Path) -> None:
    label = root_label(share)
    conn = FilesConnector(settings(), [share])
    before = ids(conn)
    (share / "sub" / "b.txt").unlink()
    listing = conn.list_refs()
    assert listing.complete
    assert before - {r.document_id for r in listing.refs} == {f"{label}/sub/b.txt"}


def test_missing_root_makes_the_listing_incomplete(share: Path, tmp_path: Path) -> None:
    listing = FilesConnector(settings(), [share, tmp_path / "gone"]).list_refs()
    assert not listing.complete and "does not exist" in listing.errors[0]
    assert len(listing.refs) == 4


def test_symlinks_outside_the_root_are_refused(share: Path, tmp_path: Path) -> None:
    label = root_label(share)
    outside = write(tmp_path / "secret" / "passwd.txt", "root:x:0:0")
    (share / "leak.txt").symlink_to(outside)
    (share / "leakdir").symlink_to(outside.parent, target_is_directory=True)
    (share / "alias.md").symlink_to(share / "a.md")  # inside: fine
    conn = FilesConnector(settings(), [share])
    listing = conn.list_refs()
    listed = {r.document_id for r in listing.refs}
    assert f"{label}/leak.txt" not in listed and not any("leakdir" in i for i in listed)
    assert f"{label}/alias.md" in listed
    assert listing.complete
    assert sum("symlink to outside the root" in e for e in listing.errors) == 2
    with pytest.raises(IngestError, match="outside its root"):
        conn.fetch(DocumentRef(f"{label}/leak.txt", "v", "file"))
    assert conn.fetch(DocumentRef(f"{label}/alias.md", "v", "file")).data == b"# A\n"


@pytest.mark.parametrize(
    "document_id",
    ["L/../secret/passwd.txt", "L//etc/passwd", "L/sub/../../x", "nope/a.md", "L/", "docs/a.md"],
)
def test_path_traversal_is_refused(share: Path, tmp_path: Path, document_id: str) -> None:
    write(tmp_path / "secret" / "passwd.txt", "root:x:0:0")
    conn = FilesConnector(settings(), [share])
    document_id = document_id.replace("L/", root_label(share) + "/", 1)
    with pytest.raises(IngestError) as caught:
        conn.fetch(DocumentRef(document_id, "v", "file"))
    assert caught.value.code is ErrorCode.FETCH_FAILED
    assert caught.value.subject == document_id


def test_fetch_returns_bytes_metadata_and_the_version_read(share: Path) -> None:
    label = root_label(share)
    conn = FilesConnector(settings(), [share])
    refs = {r.document_id: r for r in conn.list_refs().refs}
    doc = conn.fetch(refs[f"{label}/sub/deeper/c.pdf"])
    assert doc.data == b"%PDF-1.4 tiny" and doc.filename == "c.pdf"
    assert doc.file_path == str(share / "sub" / "deeper" / "c.pdf")
    assert doc.ref.version == refs[f"{label}/sub/deeper/c.pdf"].version
    assert doc.metadata == {"root": label, "relative_path": "sub/deeper/c.pdf"}
    assert doc.acl == PUBLIC
    write(share / "a.md", "# newer\n")
    assert conn.fetch(refs[f"{label}/a.md"]).ref.version != refs[f"{label}/a.md"].version
    (share / "a.md").unlink()
    with pytest.raises(DocumentGone):
        conn.fetch(refs[f"{label}/a.md"])


def test_poll_returns_files_changed_since(share: Path) -> None:
    label = root_label(share)
    old = time.time() - 3600
    for path in share.rglob("*"):
        os.utime(path, (old, old), follow_symlinks=False)
    since = datetime.now(UTC) - timedelta(seconds=1)
    write(share / "sub" / "b.txt", "changed")
    write(share / "new.md", "# new")
    assert {r.document_id for r in FilesConnector(settings(), [share]).poll(since)} == {
        f"{label}/sub/b.txt",
        f"{label}/new.md",
    }


def test_stat_cache_skips_hashing_unchanged_files(share: Path, tmp_path: Path) -> None:
    label = root_label(share)
    state = tmp_path / "state" / "files.json"
    first = {
        r.document_id: r.version
        for r in FilesConnector(settings(), [share], state_path=state).list_refs().refs
    }
    assert len(json.loads(state.read_text())) == 4
    # Same size and mtime, other bytes: a new instance with the state reuses the digest
    # (it did not read the file); without the state it hashes and sees the change.
    target = share / "sub" / "b.txt"
    info = target.stat()
    target.write_bytes(b"c")
    os.utime(target, ns=(info.st_atime_ns, info.st_mtime_ns))
    cached = FilesConnector(settings(), [share], state_path=state).list_refs()
    fresh = FilesConnector(settings(), [share]).list_refs()
    assert {r.document_id: r.version for r in cached.refs} == first
    assert {r.document_id: r.version for r in fresh.refs}[f"{label}/sub/b.txt"] != first[
        f"{label}/sub/b.txt"
    ]


def test_glob_regex() -> None:
    assert glob_regex("**/*").match("a/b/c.pdf") and glob_regex("**/*").match("c.pdf")
    assert glob_regex("**/.*").match(".git") and glob_regex("**/.*").match("a/.x")
    assert not glob_regex("**/.*").match("a/b.x")
    assert glob_regex("**/~$*").match("x/~$doc.docx")
    assert glob_regex("*.md").match("a.md") and not glob_regex("*.md").match("s/a.md")
    assert glob_regex("docs/**").match("docs/a/b") and not glob_regex("docs/**").match("doc")
    assert glob_regex("report-[0-9]?.pdf").match("report-1a.pdf")
    assert not glob_regex("[!a]*").match("abc")


UNREADABLE_SCRIPT = """
import json, sys
sys.path.insert(0, {repo!r})
from connectors.files import FilesConnector, FilesSettings
from connectors.base import DocumentRef
from config.errors import IngestError
conn = FilesConnector(FilesSettings(), ["share=" + {root!r}])
listing = conn.list_refs()
try:
    conn.fetch(DocumentRef("share/locked.txt", "v", "file"))
    fetch_error = None
except IngestError as exc:
    fetch_error = str(exc)
print(json.dumps({{"ids": sorted(r.document_id for r in listing.refs),
                  "complete": listing.complete, "errors": list(listing.errors),
                  "fetch_error": fetch_error}}))
"""


def unprivileged() -> list[str]:
    """A command prefix under which file permissions apply: root reads everything, so
    there the child runs without the capabilities that bypass them."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without util-linux setpriv: permissions cannot apply")
    caps = "-dac_override,-dac_read_search"
    return [setpriv, f"--bounding-set={caps}", f"--inh-caps={caps}"]


def test_unreadable_file_and_directory(tmp_path: Path) -> None:
    root = tmp_path / "share"
    write(root / "ok.txt", "fine")
    locked = write(root / "locked.txt", "secret")
    write(root / "closed" / "inner.txt", "unknown")
    locked.chmod(0o000)
    (root / "closed").chmod(0o000)
    try:
        out = subprocess.run(
            [
                *unprivileged(),
                sys.executable,
                "-c",
                UNREADABLE_SCRIPT.format(repo=str(REPO), root=str(root)),
            ],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
    finally:
        (root / "closed").chmod(0o755)
    result = json.loads(out.stdout)
    # The unreadable file is listed (it exists, so it must not be deleted) with an error;
    # the unreadable directory makes the listing incomplete.
    assert result["ids"] == ["share/locked.txt", "share/ok.txt"]
    assert not result["complete"]
    assert any("locked.txt: cannot read" in e for e in result["errors"])
    assert any("cannot read directory" in e and "closed" in e for e in result["errors"])
    assert "FETCH_FAILED" in result["fetch_error"] and "locked.txt" in result["fetch_error"]


def test_lists_and_fetches_the_corpus() -> None:
    conn = FilesConnector(settings(), [CORPUS])
    listing = conn.list_refs()
    on_disk = [p for p in CORPUS.rglob("*") if p.is_file() and not p.name.startswith(".")]
    assert listing.complete and len(listing.refs) == len(on_disk)
    pdf = next(r for r in listing.refs if r.document_id.endswith(".pdf"))
    doc = conn.fetch(pdf)
    assert doc.data == (CORPUS / pdf.document_id.split("/", 1)[1]).read_bytes()


def test_a_listed_file_swapped_for_a_fifo_fails_fast_instead_of_blocking(share: Path) -> None:
    conn = FilesConnector(settings(), [share])
    refs = {r.document_id: r for r in conn.list_refs().refs}
    target = share / "sub" / "b.txt"
    target.unlink()
    os.mkfifo(target)  # nobody ever writes to it: a blocking open would wait forever
    outcome: list[list[SourceDocument | IngestError]] = []
    worker = threading.Thread(
        target=lambda: outcome.append(fetch_many(conn, [refs[f"{root_label(share)}/sub/b.txt"]])),
        daemon=True,
    )
    worker.start()
    worker.join(20)
    assert not worker.is_alive(), "fetch blocked on a FIFO"
    [error] = outcome[0]
    assert isinstance(error, IngestError) and error.code is ErrorCode.FETCH_FAILED
    assert "not a regular file" in error.message
    # a listing taken now skips it, and says so
    listing = conn.list_refs()
    assert any("not a regular file" in e for e in listing.errors)


def test_a_file_over_the_size_limit_is_refused_without_reading_it_whole(share: Path) -> None:
    write(share / "big.txt", "x" * 5000)
    conn = FilesConnector(settings(), [share], max_file_bytes=1000)
    refs = {r.document_id: r for r in conn.list_refs().refs}
    with pytest.raises(IngestError) as caught:
        conn.fetch(refs[f"{root_label(share)}/big.txt"])
    assert caught.value.code is ErrorCode.TOO_LARGE
    assert "limits.max_file_bytes" in caught.value.message
    assert conn.fetch(refs[f"{root_label(share)}/a.md"]).data == b"# A\n"


def test_a_glob_root_owns_only_the_ids_its_pattern_matches(share: Path) -> None:
    label = root_label(share)
    whole = FilesConnector(settings(), [share])
    globbed = FilesConnector(settings(), [str(share / "[!s]*")])
    assert [r.label for r in globbed.roots] == [label]  # same directory, same ids
    assert whole.owns(f"{label}/sub/b.txt") and not globbed.owns(f"{label}/sub/b.txt")
    assert globbed.owns(f"{label}/a.md") and not globbed.owns("other/a.md")


def test_legacy_ids_are_mapped_to_the_current_ids_by_their_file_path(
    share: Path, tmp_path: Path
) -> None:
    label = root_label(share)
    conn = FilesConnector(settings(), [share])
    other = tmp_path / "elsewhere" / "docs"
    indexed = {
        "docs/a.md": str(share / "a.md"),
        "docs/sub/b.txt": str(share / "sub" / "b.txt"),
        "docs/gone.md": str(share / "gone.md"),  # deleted since: still this root's
        "docs/x.md": str(other / "x.md"),  # another share that was also called docs
        f"{label}/a.md": str(share / "a.md"),  # already current
        "hr/a.md": str(share / "a.md"),  # a label the user chose: not a legacy id
    }
    assert conn.renamed(indexed) == {
        "docs/a.md": f"{label}/a.md",
        "docs/sub/b.txt": f"{label}/sub/b.txt",
        "docs/gone.md": f"{label}/gone.md",
    }
