"""The CLI contract of docs/operations.md#the-command-line (names, options, JSON fields, exit
codes), its readable output, and the commands the README and docs/configuration.md name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import BaseModel

from config.settings import Settings
from config.sources import settings_models
from flows.cli import main

RECORD_FIELDS = {
    "chunk_id",
    "tenant_id",
    "document_id",
    "source_version_id",
    "ordinal",
    "chunk_type",
    "headings_path",
    "chunk_path",
    "md_text",
    "overlap_prefix",
    "embed_text",
    "char_start",
    "char_end",
    "block_start_idx",
    "block_end_idx",
    "token_count",
    "source_type",
    "file_path",
    "source_url",
    "title",
    "labels",
    "updated_at",
    "author",
}
ROOT = Path(__file__).resolve().parents[1]


def test_chunk_jsonl_prints_one_record_per_chunk(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = tmp_path / "guide.md"
    # The rule keeps the small table's section from merging into the paragraph's.
    doc.write_text(
        "# Guide\n\nFirst paragraph.\n\n---\n\n## Part\n\n| a | b |\n|---|---|\n| 1 | 2 |\n"
    )
    assert main(["chunk", str(doc), "--format", "jsonl"]) == 0
    lines = capsys.readouterr().out.strip().split("\n")
    records = [json.loads(line) for line in lines]
    assert [r["chunk_type"] for r in records] == ["paragraph", "table"]
    assert set(records[0]) >= RECORD_FIELDS
    assert records[1]["headings_path"] == ["Guide", "Part"]
    assert [r["ordinal"] for r in records] == [0, 1]


def test_chunk_table_format_and_normalize(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = tmp_path / "notes.txt"
    doc.write_text("Line  with   spaces.\r\n\r\n\r\nSecond.\r\n")
    assert main(["normalize", str(doc)]) == 0
    assert capsys.readouterr().out == "Line with spaces.\n\nSecond.\n"
    assert main(["chunk", str(doc), "--format", "table"]) == 0
    assert "paragraph" in capsys.readouterr().out


GUIDE = """# Install guide

Some **bold** words and a [link](http://example.com/very/long/path) that go on for a
while, so that the text is longer than any terminal is wide: it keeps going and going
with more words, and more `code` words, until no column can show all of it.

---

## Upgrade from an older release

| option | meaning |
|---|---|
| `--force` | ignore the caches |
"""


@pytest.mark.parametrize("width", [40, 80, 200])
def test_chunk_table_fits_the_terminal_and_reads_as_text(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    width: int,
) -> None:
    doc = tmp_path / "guide.md"
    doc.write_text(GUIDE)
    monkeypatch.setenv("COLUMNS", str(width))
    assert main(["chunk", str(doc), "--format", "table"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines and max(len(line) for line in lines) <= width
    rows = [line for line in lines if line.startswith("│")]
    assert len(rows) == 2  # a line a chunk, whatever the width
    assert rows[0].rstrip(" │").endswith("…")  # the long text is cut, and says so
    text = "\n".join(rows)
    for mark in ("**", "](", "| ---", "`", "│ /", "# "):
        assert mark not in text, mark
    if width == 200:
        assert "Install guide › Upgrade" in text and "Some bold words and a link" in text


def test_every_argument_of_every_command_has_help() -> None:
    import argparse

    from flows.cli import _parser

    parser = _parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    missing = [
        f"{name} {action.dest}"
        for name, command in commands.choices.items()
        for action in command._actions
        if not action.help or action.help == argparse.SUPPRESS
    ]
    assert not missing, missing


def test_validate_names_the_reason_of_each_chunk_outside_the_budgets(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = tmp_path / "guide.md"
    doc.write_text(GUIDE)
    assert main(["validate", str(doc)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("2 chunks, 0 within [150, 300] tokens, 0 violations")
    assert out[1].startswith("  chunk 0: ") and out[1].endswith("under min: section_end")
    assert out[2].startswith("  chunk 1: ") and out[2].endswith("under min: section_end")


def test_bad_input_exits_1_with_its_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.md"
    bad.write_bytes(b"caf\xe9")
    assert main(["chunk", str(bad)]) == 1
    assert "CHUNKING_FAILED" in capsys.readouterr().err
    fake = tmp_path / "fake.pdf"
    fake.write_bytes(b"this is not a pdf at all")
    assert main(["chunk", str(fake)]) == 1
    assert "CORRUPT" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["normalize", "chunk", "validate"])
def test_a_directory_or_a_missing_path_gets_one_line_that_says_which(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    assert main([command, str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "is a directory" in err and "ingest run files" in err and "no such file" not in err
    assert len(err.strip().splitlines()) == 1
    assert main([command, str(tmp_path / "missing.pdf")]) == 1
    assert "no such file" in capsys.readouterr().err


def test_validate_reports_and_exit_code(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = tmp_path / "ok.md"
    doc.write_text("# T\n\n" + "A sentence about the index. " * 80 + "\n")
    assert main(["validate", str(doc)]) == 0
    assert "0 violations" in capsys.readouterr().out


def test_bad_setting_exits_2_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("chunking:\n  max_tokens: -3\n")
    doc = tmp_path / "d.md"
    doc.write_text("text\n")
    assert main(["chunk", str(doc), "--config", str(config)]) == 2
    assert "chunking.max_tokens" in capsys.readouterr().err


def test_the_configuration_reference_documents_every_setting_and_its_env_var() -> None:
    readme = (ROOT / "docs" / "configuration.md").read_text("utf-8")
    sections = {name: info.annotation for name, info in Settings.model_fields.items()}
    for name, annotation in (sections | settings_models({})).items():
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            for key in annotation.model_fields:
                assert f"`{name}.{key}`" in readme
                assert f"INGEST_{name.upper()}__{key.upper()}" in readme
        else:
            assert f"INGEST_{name.upper()}" in readme


def test_readme_commands_are_the_ones_ci_runs() -> None:
    readme = (ROOT / "README.md").read_text("utf-8")
    ci = (ROOT / ".ci" / "run").read_text("utf-8")
    assert "./install.sh" in readme and "./install.sh" in ci
    assert ".venv/bin/python -m pytest -q" in readme and ".venv/bin/python -m pytest -q" in ci


def test_links_lists_outgoing_and_incoming(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tasks.links import LinkStore, StoredLink

    config = tmp_path / "c.yaml"
    config.write_text(f"cache:\n  dir: {tmp_path / 'cache'}\n")
    store = LinkStore(tmp_path / "cache", "default")
    store.put("page-1", [StoredLink("https://w/display/ENG/B", "page", "page-2", "B")])
    store.put(
        "page-3",
        [
            StoredLink("https://w/display/ENG/B", "page", "page-2", "B"),
            StoredLink("https://x.org", "external"),
        ],
    )
    assert main(["links", "page-2", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert "page-2: 0 outgoing, 2 incoming" in out
    assert "from page-1" in out and "from page-3" in out
    assert store.incoming_counts() == {"page-2": 2}
    assert main(["links", "page-3", "--config", str(config)]) == 0
    assert "page-3: 2 outgoing, 0 incoming" in capsys.readouterr().out
