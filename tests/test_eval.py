"""`ingest eval` through the real command line over the quickstart: the samples indexed by
`ingest run` (Qdrant Edge, the quickstart's small model: the session's quickstart run,
tests/quickstart_run.py), the quickstart's questions file
searched through the query API, saved, paired with another run, the `--self` check made
from the normalized documents, and bad input named by its line."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from config.settings import load_settings
from query.api import Index
from query.evaluate import Targets, load_questions, matches
from tests.process_helpers import run_ingest
from tests.quickstart_run import CONFIG, ROOT, Quickstart

# Each test runs ingest commands as processes: outside the fast lane.
pytestmark = pytest.mark.slow

QUESTIONS = ROOT / "samples" / "questions.yaml"


@dataclass(frozen=True)
class Indexed:
    env: dict[str, str]
    cwd: Path


def ingest(args: list[str], indexed: Indexed) -> subprocess.CompletedProcess[str]:
    return run_ingest([*args, "--config", str(CONFIG)], indexed.env, indexed.cwd)


@pytest.fixture(scope="module")
def indexed(quickstart: Quickstart, tmp_path_factory: pytest.TempPathFactory) -> Indexed:
    """The index of the session's quickstart run, which these tests only read; the files
    they write go in a directory of their own."""
    assert quickstart.code == 0, quickstart.output
    return Indexed(quickstart.env, tmp_path_factory.mktemp("eval"))


@dataclass(frozen=True)
class Saved:
    """`ingest eval` of the quickstart's questions in the default mode, `--json --save`:
    what it printed and the file it kept (the tests below only read them)."""

    report: dict[str, Any]
    path: Path


@pytest.fixture(scope="module")
def hybrid(indexed: Indexed) -> Saved:
    saved = indexed.cwd / "hybrid.json"
    done = ingest(["eval", str(QUESTIONS), "--json", "--save", str(saved)], indexed)
    assert done.returncode == 0, done.stderr
    return Saved(json.loads(done.stdout), saved)


def test_eval_finds_the_quickstart_questions_where_search_ranks_them(
    indexed: Indexed, hybrid: Saved
) -> None:
    report, saved = hybrid.report, hybrid.path
    questions = load_questions(QUESTIONS)
    assert report["questions"] == report["measured"] == len(questions)
    assert {"recall@1", "recall@5", "recall@10", "mrr@10"} == set(report["overall"])
    assert {"runbooks", "diagram", "screenshot"} <= set(report["tags"])
    assert json.loads(saved.read_text())["results"] == report["results"]
    # Each rank is the one the query API's search gives (the reader's own path), and the
    # quickstart's questions are answered by its files within the top 10.
    settings = load_settings(config_file=CONFIG, environ=indexed.env)
    with Index(settings) as index:
        targets = Targets(frozenset(index.store().facet("document_id", index.filters(None))))
        for question, result in zip(questions, report["results"], strict=True):
            documents = targets.resolve(question.target)
            hits = index.search(question.text, identity=None, limit=10)
            rank = next(
                (i for i, hit in enumerate(hits, 1) if matches(question, documents, hit)), None
            )
            assert result["rank"] == rank, (question, result)
            assert result["status"] == "found", result
            assert result["hit"]["citation_url"], result
    assert report["overall"]["recall@10"] == 1.0

    text = ingest(["eval", str(QUESTIONS)], indexed)
    assert text.returncode == 0, text.stderr
    assert "recall@5" in text.stdout and "screenshot (1)" in text.stdout
    assert f"line {questions[0].line}: rank " in text.stdout


def test_eval_against_a_saved_run_pairs_question_by_question(
    indexed: Indexed, hybrid: Saved
) -> None:
    lexical = indexed.cwd / "lexical.json"
    second = ingest(
        ["eval", str(QUESTIONS), "--mode", "lexical", "--save", str(lexical), "--json"], indexed
    )
    assert second.returncode == 0, second.stderr
    paired = ingest(
        ["eval", str(QUESTIONS), "--mode", "lexical", "--against", str(hybrid.path), "--json"],
        indexed,
    )
    assert paired.returncode == 0, paired.stderr
    against = json.loads(paired.stdout)["against"]
    before = {r["key"]: r["rank"] for r in json.loads(hybrid.path.read_text())["results"]}
    now = {r["key"]: r["rank"] for r in json.loads(lexical.read_text())["results"]}
    changed = {key for key in now if now[key] != before[key]}
    assert against["paired"] == len(now)
    assert len(against["changed"]) == len(changed)
    won = sum(1 for key in now if (now[key] or 99) <= 5 < (before[key] or 99))
    lost = sum(1 for key in now if (before[key] or 99) <= 5 < (now[key] or 99))
    assert against["hit@5 won/lost"] == f"{won}/{lost}"

    same = ingest(["eval", str(QUESTIONS), "--against", str(hybrid.path)], indexed)
    assert same.returncode == 0, same.stderr
    assert "hit@5 won/lost 0/0" in same.stdout, same.stdout


def test_eval_reports_a_target_not_in_the_index_and_does_not_count_it(indexed: Indexed) -> None:
    questions = indexed.cwd / "absent.jsonl"
    questions.write_text(
        json.dumps(
            {"question": "How do I restart a service?", "target": "runbooks/restart-service.html"}
        )
        + "\n"
        + json.dumps({"question": "Where is the holiday policy?", "target": "handbook/holidays.md"})
        + "\n"
    )
    done = ingest(["eval", str(questions), "--json"], indexed)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["questions"], report["measured"], report["absent"]) == (2, 1, 1)
    assert [r["status"] for r in report["results"]][1] == "absent"
    assert report["overall"]["recall@10"] == 1.0  # the absent one is no miss
    text = ingest(["eval", str(questions)], indexed)
    assert (
        "line 2: absent" in text.stdout
        and "handbook/holidays.md is not in the index" in text.stdout
    )


@pytest.mark.parametrize(
    ("name", "content", "said"),
    [
        (
            "bad.jsonl",
            '{"question": "a", "target": "b"}\n{"question": "c",\n',
            "bad.jsonl:2: not a JSON",
        ),
        ("bad.yaml", "- question: a\n  target: b\n- question: c\n", "bad.yaml:3: `target`"),
        (
            "bad.yaml",
            "- question: a\n  target: b\n  colour: red\n",
            "bad.yaml:1: unknown field colour",
        ),
        (
            "bad.yaml",
            "- question: a\n  target: https://wiki.example/display/ENG/Home\n",
            "bad.yaml:1: https://wiki.example/display/ENG/Home is no Confluence page URL",
        ),
    ],
)
def test_eval_names_the_line_of_bad_input(
    indexed: Indexed, name: str, content: str, said: str
) -> None:
    questions = indexed.cwd / name
    questions.write_text(content)
    done = ingest(["eval", str(questions)], indexed)
    assert done.returncode == 2
    assert said in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_eval_self_finds_sections_from_the_normalized_documents(indexed: Indexed) -> None:
    done = ingest(["eval", "--self", "--json"], indexed)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert "documents_not_in_cache" not in report
    assert report["measured"] == report["questions"] > 20
    assert set(report["tags"]) == {"heading", "phrase"}
    kinds = {r["tags"][0] for r in report["results"]}
    assert kinds == {"heading", "phrase"}
    # the questions come from the documents the run indexed, each of its target file
    assert {r["target"].split("/", 1)[1].split("/")[0] for r in report["results"]} >= {
        "runbooks",
        "handbook",
    }
    assert 0 < report["overall"]["recall@10"] <= 1
