"""Link records (docs/chunking.md#links), persisted per tenant so that for any document one can
list its outgoing and incoming links, and chunk payloads carry both counts for ranking boosts.

One small JSON file per linking document under `<cache dir>/links/<tenant>/`, written
atomically; incoming links are found by reading them all (a few KB per document), which
happens once per run.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from stage_cache.store import write_atomic


@dataclass(frozen=True)
class StoredLink:
    target_url: str
    link_type: str  # page | attachment | external | anchor
    target_document_id: str | None = None  # set where the target is a synced document
    text: str = ""


class LinkStore:
    def __init__(self, cache_dir: str | Path, tenant_id: str) -> None:
        tenant = hashlib.sha256(tenant_id.encode()).hexdigest()[:16]
        self.root = Path(cache_dir) / "links" / tenant

    def _path(self, document_id: str) -> Path:
        return self.root / f"{hashlib.sha256(document_id.encode()).hexdigest()}.json"

    def put(self, document_id: str, links: list[StoredLink]) -> None:
        data = json.dumps({"document_id": document_id, "links": [asdict(link) for link in links]})
        _write_atomic(self._path(document_id), data)

    def remove(self, document_ids: list[str]) -> None:
        for document_id in document_ids:
            self._path(document_id).unlink(missing_ok=True)

    def outgoing(self, document_id: str) -> list[StoredLink]:
        try:
            data = json.loads(self._path(document_id).read_text("utf-8"))
        except FileNotFoundError:
            return []
        return [StoredLink(**link) for link in data["links"]]

    def _all(self) -> Iterator[tuple[str, list[StoredLink]]]:
        """Every linking document's links, one file at a time: reconcile reads them all,
        and a list of them would grow with the documents."""
        for path in sorted(self.root.glob("*.json")) if self.root.is_dir() else []:
            data = json.loads(path.read_text("utf-8"))
            yield data["document_id"], [StoredLink(**link) for link in data["links"]]

    def incoming(self, document_id: str) -> list[tuple[str, StoredLink]]:
        """(linking document, link) for every stored link that resolves to `document_id`."""
        return [
            (source, link)
            for source, links in self._all()
            for link in links
            if link.target_document_id == document_id and source != document_id
        ]

    def incoming_counts(self) -> dict[str, int]:
        counts: Counter[str] = Counter()
        for source, links in self._all():
            targets = {link.target_document_id for link in links} - {None, source}
            counts.update(t for t in targets if t is not None)
        return dict(counts)

    def pushed_counts(self) -> dict[str, int]:
        """The incoming counts last written to Qdrant payloads."""
        try:
            data: dict[str, int] = json.loads((self.root / "pushed.json.snapshot").read_text())
        except FileNotFoundError:
            return {}
        return data

    def save_pushed_counts(self, counts: dict[str, int]) -> None:
        # atomic: a run killed mid-write must not leave a torn file every later run trips on
        _write_atomic(self.root / "pushed.json.snapshot", json.dumps(counts, sort_keys=True))

    def save_listing_index(self, scope: str, index: dict[str, Any]) -> None:
        """What the latest listing of `scope` knows for resolving links (titles, ids)."""
        _write_atomic(self._listing_index_path(scope), json.dumps(index))

    def listing_index(self, scope: str) -> tuple[int, Path]:
        """(modification time in ns, path) of the saved listing index; (0, path) if none."""
        path = self._listing_index_path(scope)
        try:
            return path.stat().st_mtime_ns, path
        except FileNotFoundError:
            return 0, path

    def _listing_index_path(self, scope: str) -> Path:
        return self.root / f"listing-{hashlib.sha256(scope.encode()).hexdigest()[:16]}.index"

    def mark_unpushed(self, document_ids: list[str]) -> None:
        """Documents whose points are about to be (re)written without `links_in`: they stay
        marked until a push writes it, so a run killed between indexing and the push is
        made good by the next run even though it finds them unchanged."""
        for document_id in document_ids:
            name = hashlib.sha256(document_id.encode()).hexdigest()
            _write_atomic(self.root / "unpushed" / name, document_id)

    def unpushed(self) -> list[str]:
        folder = self.root / "unpushed"
        if not folder.is_dir():
            return []
        return sorted(p.read_text("utf-8") for p in folder.iterdir() if not p.name.startswith("."))

    def clear_unpushed(self, document_ids: list[str]) -> None:
        for document_id in document_ids:
            name = hashlib.sha256(document_id.encode()).hexdigest()
            (self.root / "unpushed" / name).unlink(missing_ok=True)


def _write_atomic(path: Path, data: str) -> None:
    """Link files are rebuilt by the next run if lost, so they are not fsynced."""
    write_atomic(path, (data.encode("utf-8"),), prefix=".links-", fsync=False)
