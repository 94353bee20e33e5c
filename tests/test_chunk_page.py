"""The chunk page (`ingest chunk FILE --format html`), loaded in a real browser: Debian's
headless Chromium, driven over the DevTools protocol. Every chunk must be drawn with its
text intact and its parts marked, the page must load nothing but itself and raise no
script error, and a document's own markup must stay text. A screenshot of each run is
kept in the test's temporary directory."""

from __future__ import annotations

import base64
import contextlib
import io
import json
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from websockets.sync.client import connect
from websockets.sync.connection import Connection

from chunking import ChunkedDocument, get_token_counter, validate_chunks
from chunking.parts import part_spans
from config.settings import ChunkingSettings, LimitsSettings, PartsSettings
from flows.chunk_page import PageBudgets, render_chunk_page
from flows.cli import main
from tasks.stages import chunk_normalized, local_file_source, normalize_source

# Each test drives headless Chromium: outside the fast lane.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
PARTS = PartsSettings()  # type: ignore[call-arg]
LIMITS = LimitsSettings()  # type: ignore[call-arg]

# A real handbook page, then what a page may quote (markup that must stay text), a code
# block that is one long line, and a closing line after a rule (a chunk under min_tokens).
_JSON_LINE = "{" + ", ".join(f'"region-{i}": {{"spare": {i * 7}}}' for i in range(30)) + "}"
HOSTILE = (
    "\n\n## Pasting markup\n\nA page may quote markup: <script>window.__pwned = 1</script> "
    'and </pre><img src=x onerror="window.__pwned = 2"> &amp; stay text.\n\n'
    "## Reservation limits\n\nThe limits file is one line of JSON:\n\n"
    f"```json\n{_JSON_LINE}\n```\n\n---\n\nLast updated by the platform team.\n"
)

# What the page shows, read from its DOM once drawn.
_MEASURE = """(() => {
  const sections = [...document.querySelectorAll('section.chunk')];
  return {
    ordinals: sections.map(s => Number(s.dataset.ordinal)),
    drawn: sections.filter(s => {
      const box = s.getBoundingClientRect(); return box.width > 0 && box.height > 0;
    }).length,
    texts: sections.map(s => s.querySelector('pre.text').textContent),
    parts: sections.map(s => s.querySelectorAll('.part.first').length),
    partLabels: sections.map(s => s.querySelector('.meta .parts')?.textContent ?? null),
    where: sections.map(s => s.querySelector('.meta .where')?.textContent ?? null),
    notes: sections.map(s => [...s.querySelectorAll('.notes li')].map(li => li.textContent)),
    bars: document.querySelectorAll('svg.histogram a rect').length,
    barLinks: [...document.querySelectorAll('svg.histogram a')].map(a => a.getAttribute('href')),
    scripts: document.scripts.length,
    images: document.images.length,
    pwned: typeof window.__pwned,
  };
})()"""


class DevTools:
    """A DevTools protocol session with one page of a headless Chromium."""

    def __init__(self, socket: Connection) -> None:
        self.socket = socket
        self.events: list[dict[str, Any]] = []
        self.calls = 0
        self.session: str | None = None

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.calls += 1
        message: dict[str, Any] = {"id": self.calls, "method": method, "params": params}
        if self.session and not method.startswith(("Target.", "Browser.")):
            message["sessionId"] = self.session
        self.socket.send(json.dumps(message))
        while True:
            reply = json.loads(self.socket.recv(timeout=60))
            if reply.get("id") == self.calls:
                assert "error" not in reply, (method, reply["error"])
                result: dict[str, Any] = reply["result"]
                return result
            self.events.append(reply)

    def wait_for(self, event: str) -> None:
        while not any(e.get("method") == event for e in self.events):
            self.events.append(json.loads(self.socket.recv(timeout=60)))

    def errors(self) -> list[str]:
        """Script exceptions, console errors and the browser's own error log entries."""
        found = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                found.append(json.dumps(params["exceptionDetails"])[:300])
            elif method == "Runtime.consoleAPICalled" and params["type"] == "error":
                found.append(json.dumps(params["args"])[:300])
            elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
                found.append(params["entry"]["text"])
        return found

    def requests(self) -> list[str]:
        return [
            e["params"]["request"]["url"]
            for e in self.events
            if e.get("method") == "Network.requestWillBeSent"
        ]


@contextlib.contextmanager
def chromium(profile: Path) -> Iterator[DevTools]:
    process = subprocess.Popen(
        [
            CHROMIUM,
            "--headless",
            "--disable-gpu",
            "--no-sandbox",
            "--hide-scrollbars",
            "--remote-debugging-port=0",
            f"--user-data-dir={profile}",
            "--window-size=1100,1400",
            "about:blank",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        endpoint = None
        for line in process.stderr:
            match = re.search(r"DevTools listening on (ws://\S+)", line)
            if match:
                endpoint = match.group(1)
                break
        assert endpoint, "Chromium did not open its DevTools endpoint"
        # Chromium goes on logging: drain its stderr so it never blocks on a full pipe.
        threading.Thread(target=process.stderr.read, daemon=True).start()
        with connect(endpoint, max_size=None, open_timeout=30) as socket:
            tools = DevTools(socket)
            target = tools.call("Target.createTarget", url="about:blank")["targetId"]
            tools.session = tools.call("Target.attachToTarget", targetId=target, flatten=True)[
                "sessionId"
            ]
            for domain in ("Page", "Runtime", "Log", "Network"):
                tools.call(f"{domain}.enable")
            yield tools
            tools.call("Browser.close")
    finally:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=20)
        if process.poll() is None:
            process.kill()
            process.wait()


def load(page: Path, tmp_path: Path) -> tuple[dict[str, Any], DevTools]:
    """The page loaded in Chromium: what its DOM shows, and the session's events; a
    screenshot of it lands in `tmp_path`."""
    with chromium(tmp_path / "profile") as tools:
        tools.call("Page.navigate", url=page.as_uri())
        tools.wait_for("Page.loadEventFired")
        shown = tools.call("Runtime.evaluate", expression=_MEASURE, returnByValue=True)
        picture = tools.call("Page.captureScreenshot", format="png")
    (tmp_path / "chunk-page.png").write_bytes(base64.b64decode(picture["data"]))
    value: dict[str, Any] = shown["result"]["value"]
    return value, tools


def records(path: Path) -> list[dict[str, Any]]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["chunk", str(path)]) == 0
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_every_chunk_is_drawn_with_its_text_parts_and_reasons(tmp_path: Path) -> None:
    source = tmp_path / "onboarding.md"
    source.write_text(
        (ROOT / "samples/docs/handbook/onboarding.md").read_text(encoding="utf-8") + HOSTILE,
        encoding="utf-8",
    )
    page = tmp_path / "page.html"
    assert main(["chunk", str(source), "--format", "html", "-o", str(page)]) == 0
    chunks = records(source)
    shown, tools = load(page, tmp_path)

    assert tools.errors() == []
    assert tools.requests() == [page.as_uri()]  # self-contained: nothing else is fetched
    assert shown["ordinals"] == [c["ordinal"] for c in chunks]
    assert shown["drawn"] == len(chunks) and shown["bars"] == len(chunks)
    assert shown["barLinks"] == [f"#chunk-{c['ordinal']}" for c in chunks]
    # the document's markup is text on the page, never elements
    assert (shown["scripts"], shown["images"], shown["pwned"]) == (0, 0, "undefined")
    assert shown["texts"] == [c["md_text"] for c in chunks]
    assert any("<script>window.__pwned = 1</script>" in text for text in shown["texts"])
    counter = get_token_counter()
    assert shown["parts"] == [
        len(part_spans(c["md_text"], PARTS.max_tokens, counter)) for c in chunks
    ]
    assert max(shown["parts"]) > 1
    # each chunk's count of parts, in words: "1 part", "3 parts"
    assert 1 in shown["parts"]
    assert shown["partLabels"] == [f"{n} part" if n == 1 else f"{n} parts" for n in shown["parts"]]
    assert shown["where"] == [None] * len(chunks)  # Markdown has no pages
    settings = ChunkingSettings()  # type: ignore[call-arg]
    under = [c["ordinal"] for c in chunks if c["token_count"] < settings.min_tokens]
    assert under, "the fixture has a chunk under min_tokens"
    for ordinal in under:
        reason = chunks[ordinal]["undersize_reason"]
        assert shown["notes"][ordinal] == [f"under min: {reason}"]
    assert (tmp_path / "chunk-page.png").read_bytes().startswith(b"\x89PNG")


def test_a_pdf_chunk_shows_its_pages(tmp_path: Path) -> None:
    source = ROOT / "samples/docs/architecture/storage-design.pdf"
    page = tmp_path / "page.html"
    assert main(["chunk", str(source), "--format", "html", "-o", str(page)]) == 0
    chunks = records(source)
    shown, tools = load(page, tmp_path)
    assert tools.errors() == []
    pages = [(c["page_start"], c["page_end"]) for c in chunks]
    assert (1, 2) in pages and (1, 1) in pages  # one chunk across pages, one on one page
    assert shown["where"] == [
        f"page {start}" if start == end else f"pages {start}–{end}" for start, end in pages
    ]


def chunked(path: Path) -> ChunkedDocument:
    source = local_file_source(path)
    settings = ChunkingSettings()  # type: ignore[call-arg]
    return chunk_normalized(source, normalize_source(source, LIMITS), settings, "default")


def test_a_chunk_over_max_shows_its_reason_and_the_findings(tmp_path: Path) -> None:
    document = chunked(ROOT / "samples/docs/runbooks/restart-service.html")
    settings = ChunkingSettings()  # type: ignore[call-arg]
    # the first chunk as a block kept whole over max_tokens would be recorded
    first = replace(document.chunks[0], token_count=settings.max_tokens + 40, oversize=True)
    document = replace(document, chunks=(first, *document.chunks[1:]))
    page = tmp_path / "page.html"
    page.write_text(
        render_chunk_page(
            document, "restart-service.html", PageBudgets(settings, None), get_token_counter()
        ),
        encoding="utf-8",
    )
    shown, tools = load(page, tmp_path)
    assert tools.errors() == []
    assert shown["drawn"] == len(document.chunks)
    assert shown["parts"] == [0] * len(document.chunks)  # part vectors off: none marked
    notes = shown["notes"][0]
    assert notes[0] == (
        f"over max: oversize {first.chunk_type} kept whole "
        f"(up to oversize_block_limit {settings.oversize_block_limit})"
    )
    # and what validation finds about it (a count over max_tokens it does not allow)
    report = validate_chunks(document.chunks, document.text, settings, document.blocks)
    findings = [f"{v.rule}: {v.message}" for v in report.violations if v.ordinal == 0]
    assert findings and notes[1:] == findings


@pytest.mark.parametrize("fmt", ["jsonl", "table"])
def test_output_file_holds_what_stdout_would(fmt: str, tmp_path: Path) -> None:
    source = ROOT / "samples/docs/runbooks/restart-service.html"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["chunk", str(source), "--format", fmt]) == 0
    written = tmp_path / f"chunks.{fmt}"
    assert main(["chunk", str(source), "--format", fmt, "-o", str(written)]) == 0
    assert written.read_text(encoding="utf-8") == out.getvalue()
