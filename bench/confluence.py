"""Benchmark (run by hand): list and fetch a 10,000-page space from the local Confluence
API with the default settings, then an unchanged-space incremental pass.

    .venv/bin/python -m bench.confluence [--pages 10000] [--body-bytes 5000] [--layout cloud]

Targets (issue 4): full list + fetch under 2 minutes, unchanged incremental under 10 s.
Fetching runs as the flow does: batches of `run.batch_size` refs through `fetch_many`, as
many batches at once as `confluence.max_concurrency`. The incremental pass is the CQL poll
since the full run started (nothing changed, so nothing is fetched); the cheap full
listing that decides deletions is timed as well.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

from config.errors import IngestError
from config.settings import load_settings
from connectors.base import DocumentRef, SourceDocument
from connectors.confluence import ConfluenceConnector
from normalizers.base import supported_extensions
from tests.confluence_api import FakeConfluence, add_bulk_pages


def fetch_one_by_one(
    connector: ConfluenceConnector,
) -> Callable[[Sequence[DocumentRef]], list[SourceDocument | IngestError]]:
    def fetch(refs: Sequence[DocumentRef]) -> list[SourceDocument | IngestError]:
        results: list[SourceDocument | IngestError] = []
        for ref in refs:
            try:
                results.append(connector.fetch(ref))
            except IngestError as exc:
                results.append(exc)
        return results

    return fetch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--pages", type=int, default=10_000)
    parser.add_argument("--body-bytes", type=int, default=5_000)
    parser.add_argument("--layout", choices=["cloud", "dc"], default="cloud")
    parser.add_argument(
        "--fetch",
        choices=["many", "one"],
        default="many",
        help="fetch_many per batch (default), or fetch() per page for comparison",
    )
    args = parser.parse_args()

    with FakeConfluence(args.layout) as api:
        api.add_space("BENCH")
        add_bulk_pages(api, "BENCH", args.pages, body_bytes=args.body_bytes)
        cloud = args.layout == "cloud"
        settings = load_settings(
            {
                "confluence": {
                    "url": api.base_url,
                    "cloud": cloud,
                    "username": api.username if cloud else None,
                    "spaces": ["BENCH"],
                }
            },
            environ={},
        )
        conf = settings.confluence
        connector = ConfluenceConnector(
            conf, api.token, attachment_extensions=supported_extensions()
        )

        sync_started = datetime.now(UTC)
        started = time.monotonic()
        listing = connector.list_refs()
        listed_s = time.monotonic() - started
        batches = [
            listing.refs[i : i + settings.run.batch_size]
            for i in range(0, len(listing.refs), settings.run.batch_size)
        ]
        fetch_batch = connector.fetch_many if args.fetch == "many" else fetch_one_by_one(connector)
        with ThreadPoolExecutor(max_workers=conf.max_concurrency) as pool:
            results = [doc for batch in pool.map(fetch_batch, batches) for doc in batch]
        full_s = time.monotonic() - started
        docs = [d for d in results if isinstance(d, SourceDocument)]
        requests_full = sum(api.requests.values())

        started = time.monotonic()
        changed = list(connector.poll(sync_started))
        poll_s = time.monotonic() - started
        started = time.monotonic()
        relisted = connector.list_refs()
        relist_s = time.monotonic() - started
        known = {ref.document_id: ref.version for ref in listing.refs}
        unchanged = all(known.get(r.document_id) == r.version for r in relisted.refs)

    print(
        json.dumps(
            {
                "layout": args.layout,
                "fetch": args.fetch,
                "pages": args.pages,
                "body_bytes": args.body_bytes,
                "max_concurrency": conf.max_concurrency,
                "requests_per_second": conf.requests_per_second,
                "page_size": conf.page_size,
                "listed": len(listing.refs),
                "fetched": len(docs),
                "failed": len(results) - len(docs),
                "bytes_fetched": sum(len(d.data) for d in docs),
                "requests_full_run": requests_full,
                "list_s": round(listed_s, 2),
                "list_and_fetch_s": round(full_s, 2),
                "incremental_poll_s": round(poll_s, 2),
                "incremental_changed": len(changed),
                "full_relisting_s": round(relist_s, 2),
                "relisting_complete_and_unchanged": relisted.complete and unchanged,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
