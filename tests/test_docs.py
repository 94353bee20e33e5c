"""The README, docs/ and bench/README.md stand alone and tell the truth about the code:
the README stays short, no file of the repository cites a document the repository lacks
(a specification, its section numbers, seed documents, design records, issue numbers)
and every `docs/<page>.md#<anchor>` it cites names a heading that exists, every link and
repository path leads somewhere, and every setting, environment variable, `ingest`
command and flag a page names is one the code has."""

from __future__ import annotations

import argparse
import functools
import re
import subprocess
from pathlib import Path

import pytest
from pydantic import BaseModel

from config.settings import ADR_ENV_NAMES, ALIASES, Settings
from config.sources import settings_models
from flows.cli import _parser

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [ROOT / "README.md", *DOCS, ROOT / "bench" / "README.md"]
README_MAX_BYTES = 15_000
# Variables that are no setting: the settings file's name, install.sh's switch.
OTHER_VARIABLES = {"INGEST_CONFIG", "INGEST_SKIP_APT"}
FILE_SUFFIXES = {"py", "md", "yaml", "yml", "toml", "json", "txt", "sh", "pdf", "html"}
# Options of the `prefect` and benchmark commands the pages show, named on their own.
OTHER_FLAGS = {"--host", "--prefect", "--watch", "--param", "--pool", "--prefect-file", "--all"}
# A citation of a document no clone has: the specification's sections, its seed documents,
# design records, issue numbers. (Written so that this file does not match itself.)
CITATION = re.compile(
    r"\bSPEC\b|\u00a7|\bADR-\d{1,4}\b|(?<![\w-])seeds? \d{3}\b|(?<![\w/-])[Ii]ssues? #?\d+"
    r"|\b[Tt]he spec\b"
)
DOCS_REFERENCE = re.compile(r"(?<![\w/.-])(docs/[\w.-]+\.md)#([\w-]+)")
# Documents the project carries as data, not text it writes: test corpora, benchmark corpora,
# the quickstart's sample documents, licences.
DATA = ("tests/corpus/", "bench/data/", "samples/")


def page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


def tracked_files() -> list[str]:
    listing = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    return [name for name in listing.split("\0") if name]


@functools.cache
def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives a page's headings: lowercased, punctuation dropped, spaces
    as hyphens, a repeated heading numbered (`-1`, `-2`); code blocks hold no headings."""
    text = re.sub(r"(?ms)^```.*?^```", "", page.read_text("utf-8"))
    found: set[str] = set()
    for heading in re.findall(r"(?m)^#+ (.+)$", text):
        base = re.sub(r"[^\w\- ]", "", heading).strip().lower().replace(" ", "-")
        anchor, n = base, 0
        while anchor in found:
            n += 1
            anchor = f"{base}-{n}"
        found.add(anchor)
    return found


def sections() -> dict[str, type[BaseModel] | None]:
    """Each settings section and its model (None: a top-level setting)."""
    found: dict[str, type[BaseModel] | None] = {}
    for name, annotation in {
        **{name: info.annotation for name, info in Settings.model_fields.items()},
        **settings_models({}),
    }.items():
        model = annotation if isinstance(annotation, type) else None
        found[name] = model if model is not None and issubclass(model, BaseModel) else None
    return found


def is_setting(section: str, key: str) -> bool:
    section, key = ALIASES.get((section, key), (section, key))  # an earlier name: the setting
    model = sections()[section]
    return model is not None and key in model.model_fields


def code_spans(text: str) -> list[str]:
    """Inline code spans and the lines of fenced code blocks."""
    blocks = re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S)
    rest = re.sub(r"```[a-z]*\n.*?```", "", text, flags=re.S)
    return [line for block in blocks for line in block.splitlines()] + re.findall(
        r"`([^`\n]+)`", rest
    )


def commands() -> dict[str, set[str]]:
    """Each `ingest` command and its flags."""
    (subparsers,) = [a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return {
        name: {flag for action in command._actions for flag in action.option_strings}
        for name, command in subparsers.choices.items()
    }


def test_the_readme_is_short_and_links_every_docs_page() -> None:
    readme = (ROOT / "README.md").read_text("utf-8")
    assert len(readme.encode()) <= README_MAX_BYTES
    for page in DOCS:
        assert f"(docs/{page.name})" in readme, page.name


def test_no_file_cites_what_the_repository_lacks() -> None:
    """Code, tests, benches, settings and pages cite the rules they follow as
    `docs/<page>.md#<anchor>`, and each such anchor is a heading of that page."""
    wrong = []
    for name in tracked_files():
        if name.startswith(DATA) or "LICENSE" in name:
            continue
        try:
            text = (ROOT / name).read_text("utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # a binary file, a submodule, a file deleted from the checkout
        for number, line in enumerate(text.splitlines(), 1):
            if CITATION.search(line):
                wrong.append(f"{name}:{number}: cites a document the repository lacks: {line}")
            for page, anchor in DOCS_REFERENCE.findall(line):
                if not (ROOT / page).is_file() or anchor not in anchors(ROOT / page):
                    wrong.append(f"{name}:{number}: no heading {page}#{anchor}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_links_and_repository_paths_lead_somewhere(page: Path) -> None:
    text = page.read_text("utf-8")
    for target in re.findall(r"\]\((?!https?:|#|<)([^)\s]+)\)", text):
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve()
        assert linked.exists(), target
        if anchor:
            assert anchor in anchors(linked), (target, anchors(linked))
    top = {name.split("/", 1)[0] for name in tracked_files() if "/" in name}
    for span in code_spans(text):
        for path in re.findall(r"(?<![\w./-])((?:[\w.-]+/)+[\w.-]*\w)", span):
            if path.split("/", 1)[0] in top and not any(c in path for c in "*{"):
                assert (ROOT / path).exists(), (span, path)


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_setting_and_variable_named_is_one_the_code_has(page: Path) -> None:
    text = page.read_text("utf-8")
    names = "|".join(sections())
    setting = rf"(?<![\w./@:-])({names})\.([a-z_0-9]+)(?![\w-]|\.[a-z])"
    for section, key in re.findall(setting, text):
        if key in FILE_SUFFIXES:  # a module's file name (files.py), not a setting
            continue
        assert is_setting(section, key), f"{section}.{key}"
    for variable in re.findall(r"\bINGEST_[A-Z0-9_]*[A-Z0-9]\b(?!__\*)", text):
        if variable in OTHER_VARIABLES:
            continue
        path = tuple(p.lower() for p in variable.removeprefix("INGEST_").split("__"))
        if len(path) == 1:
            assert path[0] in sections(), variable
        else:
            assert len(path) == 2 and path[0] in sections(), variable
            assert is_setting(*path), variable
    for variable in re.findall(r"\bCHUNK_[A-Z_]+\b", text):
        assert variable in ADR_ENV_NAMES, variable


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_ingest_command_and_flag_named_is_one_the_code_has(page: Path) -> None:
    known = commands()
    every_flag = set().union(*known.values())
    for span in code_spans(page.read_text("utf-8")):
        # the program at the start of a span or by its path (`ingest` may also be a name
        # other tools give it, e.g. an MCP client's server name)
        found = re.search(r"(?:^|bin/)ingest ((?:--?)?[a-z][a-z-]*)(.*)", span.strip())
        if found and found.group(1).startswith("-"):  # `ingest --help`
            assert found.group(1) in {f for a in _parser()._actions for f in a.option_strings}
        elif found:
            command, rest = found.groups()
            assert command in known, span
            for flag in re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", rest):
                assert flag in known[command], (span, flag)
        elif span.startswith("--"):  # an option named on its own: one of some command's
            flag = span.split()[0].split("=")[0]
            assert flag in every_flag | OTHER_FLAGS, span
