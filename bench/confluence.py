"""Benchmark (run by hand): list and fetch a 10,000-page space from the local Confluence
API with the default settings, then an unchanged-space incremental pass, on Cloud (REST
v2) and on Data Center (REST v1), with the requests each made.

    .venv/bin/python -m bench.confluence [--pages 10000] [--body-bytes 5000]
        [--layout cloud|dc|both] [--comments 0] [--inline-comments 0] [--without-cql]
        [--fetch many|one]

Targets: Cloud full list + fetch under 2 minutes, unchanged incremental poll
under 1 s, no removed v1 endpoint called. Fetching runs as the flow does: batches of
`run.batch_size` refs through `fetch_many`, as many batches at once as
`confluence.max_concurrency`. The incremental pass is the CQL poll since the full run
started (nothing changed, so nothing is fetched); the cheap full listing that decides
deletions, and so every incremental run of the flow, is timed as well. `--comments N`
puts a footer comment on N pages, `--inline-comments N` an inline comment on N pages
spread evenly (e.g. 1,000 on 10,000 pages); `--without-cql` makes Cloud's CQL search
answer 410 (restrictions are then read page by page, comments through v2, and the poll
compares listings).
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

from config.settings import load_settings
from connectors.base import SourceDocument, fetch_each
from connectors.confluence import ConfluenceConnector
from normalizers.registry import supported_extensions
from testkit.confluence_api import FakeConfluence, add_bulk_pages


def requests_made(api: FakeConfluence, since: int) -> int:
    return sum(api.requests.values()) - since


def fill_space(api: FakeConfluence, args: argparse.Namespace) -> None:
    """The BENCH space: `--pages` pages, their comments, and CQL retired if asked."""
    api.add_space("BENCH")
    pages = add_bulk_pages(api, "BENCH", args.pages, body_bytes=args.body_bytes)
    stamp = datetime.now(UTC) - timedelta(days=3)  # as old as the pages
    for page in pages[: args.comments]:
        api.add_comment(page, "<p>A comment on this page.</p>", when=stamp)
    step = max(1, args.pages // args.inline_comments) if args.inline_comments else 0
    for page in pages[::step][: args.inline_comments] if step else []:
        api.add_comment(
            page, "<p>Is this still true?</p>", inline=True, selection="Lorem ipsum", when=stamp
        )
    if args.without_cql and api.layout == "cloud":
        api.retire("/rest/api/search")


def full_run(
    api: FakeConfluence, connector: ConfluenceConnector, batch_size: int, args: argparse.Namespace
) -> tuple[Any, dict[str, Any]]:
    """List and fetch the space as the flow does: the listing and the figures."""
    started = time.monotonic()
    listing = connector.list_refs()
    listed_s = time.monotonic() - started
    requests_list = sum(api.requests.values())
    batches = [listing.refs[i : i + batch_size] for i in range(0, len(listing.refs), batch_size)]
    fetch_batch = (
        connector.fetch_many
        if args.fetch == "many"
        else functools.partial(fetch_each, connector.fetch)
    )
    with ThreadPoolExecutor(max_workers=connector.settings.max_concurrency) as pool:
        results = [doc for batch in pool.map(fetch_batch, batches) for doc in batch]
    full_s = time.monotonic() - started
    docs = [d for d in results if isinstance(d, SourceDocument)]
    return listing, {
        "listed": len(listing.refs),
        "fetched": len(docs),
        "failed": len(results) - len(docs),
        "bytes_fetched": sum(len(d.data) for d in docs),
        "requests_listing": requests_list,
        "requests_full_run": sum(api.requests.values()),
        "list_s": round(listed_s, 2),
        "list_and_fetch_s": round(full_s, 2),
    }


def incremental(
    api: FakeConfluence, connector: ConfluenceConnector, listing: Any, sync_started: datetime
) -> dict[str, Any]:
    """The unchanged space polled since the full run started, then listed in full."""
    before_poll = sum(api.requests.values())
    started = time.monotonic()
    changed = list(connector.poll(sync_started))
    poll_s = time.monotonic() - started
    requests_poll = requests_made(api, before_poll)
    before_relist = sum(api.requests.values())
    started = time.monotonic()
    relisted = connector.list_refs()
    relist_s = time.monotonic() - started
    known = {ref.document_id: ref.version for ref in listing.refs}
    unchanged = all(known.get(r.document_id) == r.version for r in relisted.refs)
    return {
        "requests_incremental_poll": requests_poll,
        "requests_full_relisting": requests_made(api, before_relist),
        "incremental_poll_s": round(poll_s, 2),
        "incremental_changed": len(changed),
        "full_relisting_s": round(relist_s, 2),
        "relisting_complete_and_unchanged": relisted.complete and unchanged,
    }


def run(layout: str, args: argparse.Namespace) -> dict[str, Any]:
    with FakeConfluence(layout) as api:  # type: ignore[arg-type]
        fill_space(api, args)
        cloud = layout == "cloud"
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
        conf = settings.section("confluence")
        connector = ConfluenceConnector(
            conf, api.token, attachment_extensions=supported_extensions()
        )
        sync_started = datetime.now(UTC)
        listing, full = full_run(api, connector, settings.run.batch_size, args)
        polled = incremental(api, connector, listing, sync_started)
        removed = len(api.removed_calls)
        by_route = dict(sorted(api.requests.items()))
    return {
        "layout": layout,
        "api": "REST v2 (+ v1 CQL, restrictions)" if cloud else "REST v1",
        "without_cql": bool(args.without_cql and cloud),
        "fetch": args.fetch,
        "pages": args.pages,
        "pages_with_comments": min(args.comments, args.pages),
        "pages_with_inline_comments": min(args.inline_comments, args.pages),
        "body_bytes": args.body_bytes,
        "max_concurrency": conf.max_concurrency,
        "requests_per_second": conf.requests_per_second,
        "page_size": conf.page_size,
        **{key: full.pop(key) for key in list(full) if not key.endswith("_s")},
        "requests_incremental_poll": polled.pop("requests_incremental_poll"),
        "requests_full_relisting": polled.pop("requests_full_relisting"),
        "requests_by_route": by_route,
        "removed_v1_calls": removed,
        **full,
        **polled,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--pages", type=int, default=10_000)
    parser.add_argument("--body-bytes", type=int, default=5_000)
    parser.add_argument("--layout", choices=["cloud", "dc", "both"], default="both")
    parser.add_argument("--comments", type=int, default=0, help="pages with a footer comment")
    parser.add_argument(
        "--inline-comments", type=int, default=0, help="pages with an inline comment"
    )
    parser.add_argument(
        "--without-cql", action="store_true", help="Cloud: the CQL search answers 410"
    )
    parser.add_argument(
        "--fetch",
        choices=["many", "one"],
        default="many",
        help="fetch_many per batch (default), or fetch() per page for comparison",
    )
    args = parser.parse_args()
    layouts = ["cloud", "dc"] if args.layout == "both" else [args.layout]
    print(json.dumps([run(layout, args) for layout in layouts], indent=2))


if __name__ == "__main__":
    main()
