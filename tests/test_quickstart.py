"""The README quickstart as a new user runs it: `ingest run files samples/docs --config
samples/quickstart.yaml` in a fresh process, in a terminal, on Prefect's ephemeral API,
with the quickstart's real model (all-MiniLM-L6-v2 from PyPI).

A per-job PREFECT_HOME whose parents do not exist yet is normal (Prefect creates one level
only, and its server then died with a bare start-up timeout); the output of a normal run
is the progress on stderr (naming its phase while Prefect starts), the summary on stdout
(`> run.log` keeps it), the one CORRUPT line of the sample's truncated PDF and the warning
about the Russian sample's chunks that exceed the small model's window, with no ERROR
line, library table, traceback or telemetry notice; the process ends as it prints its
total; the re-run is all cache hits. The README's tour commands run as printed. The README's example search for a word
of the sample draw.io diagram's labels finds that diagram.

The first run is the session's `quickstart` fixture (tests/quickstart_run.py): the eval
tests read the index it builds.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from config.settings import load_settings
from connectors.files import root_label
from query.api import Index
from tests.process_helpers import run_ingest, wait_for_port
from tests.quickstart_run import Quickstart, in_terminal

# The README's quickstart run end to end, as processes: outside the fast lane.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
NOISE = ("ERROR", "Traceback", "LOAD REPORT", "UNEXPECTED", "Warning", "warn(")


ingest = run_ingest


def tour_commands() -> list[str]:
    """The `ingest` commands of the README's short tour that name the quickstart's
    settings: they must run as printed after the quickstart."""
    readme = (ROOT / "README.md").read_text("utf-8")
    tour = readme.split("## A short tour", 1)[1].split("\n## ", 1)[0]
    spans = re.findall(r"`(\.venv/bin/ingest [^`]+)`", tour)
    return [span for span in spans if "--config samples/quickstart.yaml" in span]


def as_printed(command: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A README command run from the repository's directory, `.venv/bin/ingest` being
    this interpreter's `flows.cli`."""
    words = shlex.split(command)
    assert words[0] == ".venv/bin/ingest", command
    return ingest(words[1:], env | {"COLUMNS": "200"}, ROOT)


def test_quickstart_run_is_quiet_creates_its_directories_and_reruns_from_cache(
    quickstart: Quickstart,
) -> None:
    code, output, home = quickstart.code, quickstart.output, quickstart.home
    env, args, tmp_path = quickstart.env, quickstart.args, quickstart.cwd

    assert code == 0, output
    assert home.is_dir()
    assert not [word for word in NOISE if word in output], output
    assert output.count("CORRUPT") == 1 and "corrupt.pdf" in output
    assert "seen" in output and "unchanged" in output  # the summary table
    # the progress names the phase while Prefect starts; the time says what it took
    assert "starting Prefect" in output and "Prefect start-up" in output
    # the Russian sample's chunks over all-MiniLM-L6-v2's window: said, with the way out
    assert "longer than the input window" in output and "(256 tokens)" in output
    assert "smaller chunk budgets" in output
    # telemetry off (DO_NOT_TRACK): Prefect shows no notice and queues no event (it still
    # keeps its local milestone file under PREFECT_HOME, whatever DO_NOT_TRACK says)
    assert "anonymous usage data" not in output and "DO_NOT_TRACK" not in output

    # `> run.log`: the summary in the file, the progress still in the terminal (stderr)
    log = tmp_path / "run.log"
    code, terminal = in_terminal(args, env, tmp_path, stdout=log)
    assert code == 0, terminal
    kept = log.read_text()
    assert "seen" in kept and "unchanged" in kept and " s in all (the run " in kept, kept
    assert "listing" in terminal and "in all" not in terminal and "seen" not in terminal

    again = ingest([*args, "--json"], env, tmp_path)
    assert again.returncode == 0, again.stderr
    assert not [word for word in NOISE if word in again.stderr], again.stderr
    summary = json.loads(again.stdout)
    assert summary["unchanged"] == summary["seen"] - 1 and summary["new"] == 0


@pytest.mark.parametrize("mode", ["auto", "lexical"])
def test_quickstart_search_finds_the_diagram_by_a_word_of_its_labels(
    quickstart: Quickstart, mode: str
) -> None:
    """The word "phishing" is written only in the labels of the threat model diagram
    (draw.io), so the README's example search finds that diagram's chunk first, in the
    default mode and by exact words."""
    assert quickstart.code == 0, quickstart.output
    config = ["--config", str(ROOT / "samples" / "quickstart.yaml")]
    found = ingest(
        ["search", "phishing", *config, "--mode", mode, "--json"], quickstart.env, quickstart.cwd
    )
    assert found.returncode == 0, found.stderr
    hits = [json.loads(line) for line in found.stdout.splitlines()]
    assert hits, found.stderr
    top = hits[0]
    assert top["document_id"].endswith("architecture/threat-model.drawio"), hits
    assert "phishing" in top["md_text"].lower()


def test_the_readme_tour_commands_run_as_printed_and_show_what_the_index_holds(
    quickstart: Quickstart,
) -> None:
    assert quickstart.code == 0, quickstart.output
    tour = tour_commands()
    assert {command.split()[1] for command in tour} == {
        "chunk",
        "validate",
        "search",
        "eval",
        "mcp",
    }, tour
    servers = [command for command in tour if command.split()[1] == "mcp"]
    settings = load_settings(
        config_file=ROOT / "samples" / "quickstart.yaml", environ=quickstart.env
    )
    with Index(settings) as index:
        whole = index.fetch(f"{root_label(quickstart.docs)}/runbooks/restart-service.html")
    assert whole is not None and whole.span
    ran = {}  # each command's output, without a server running
    for command in tour:
        if command in servers:
            continue
        done = ran[command] = as_printed(command, quickstart.env)
        assert done.returncode == 0, (command, done.stderr)
        if " chunk " in command:  # the chunks the index holds for that file
            rows = re.findall(r"^│\s*\d+\s*│", done.stdout, flags=re.MULTILINE)
            assert len(rows) == len(whole.span), (command, done.stdout)
        if " search " in command:
            assert "backup" in done.stdout, done.stdout
        if " eval " in command:  # the quickstart's questions, each answered within the top 10
            assert "recall@10 1.000" in done.stdout and " absent" not in done.stdout, done.stdout
    search = next(  # one a server answers: no --expand
        command for command in tour if command.split()[1] == "search" and "--expand" not in command
    )
    alone = ran[search]
    for command in servers:  # a server, as printed: the tour's search is answered by it
        with serving(command, quickstart.env):
            served = as_printed(search, quickstart.env)
        assert "answered by `ingest mcp`" in served.stderr, served.stderr
        assert served.stdout == alone.stdout


@contextmanager
def serving(command: str, env: dict[str, str]) -> Iterator[None]:
    """A README command that starts `ingest mcp --http HOST:PORT`, running until the
    block ends, from the moment it takes connections."""
    words = shlex.split(command)
    host, port = words[words.index("--http") + 1].rsplit(":", 1)
    process = subprocess.Popen(
        [sys.executable, "-m", "flows.cli", *words[1:]],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for_port(process, host, int(port))
        yield
    finally:
        process.terminate()
        _, err = process.communicate(timeout=30)
        assert "Traceback" not in err, err
