"""Retrieval measured on a team's own questions (`ingest eval`): each question is searched
through the query API exactly as a reader searches (the default mode, the caller's
identity and filters), and the rank of the first hit that is the question's target
(a document, and where given a phrase the hit must hold) gives recall@1/5/10 and MRR@10,
overall and per tag. A target the index does not hold (for this identity) is reported
as absent, not counted as a miss: an unsynced page says nothing about the search.

A questions file is YAML (a list of mappings) or JSONL (one mapping a line):
`question`, `target` (a Confluence page id or URL, a file path as the share names it, or
a document id), optionally `phrase` and `tags`. Every error names the file and line.

`self_questions` makes known-item questions from the normalized documents of the
stage cache (a section's heading path, a rare phrase of its text), never from the
index's chunks, so two collections built from the same documents are measured alike.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from chunking.blocks import BlockType
from chunking.parse import parse_blocks
from query.api import Hit, Identity, Index
from query.paired import Rank, hit_at, paired, reciprocal
from query.snippet import plain_text

FIELDS = frozenset({"question", "target", "phrase", "tags"})
CUTOFFS = (1, 5, 10)
SELF_LIMIT = 200  # questions `--self` asks at most, spread evenly over the corpus
PHRASE_WORDS = 6
MAX_DOCUMENTS = 10_000_000  # a facet's limit: every document of the index
_PAGE_URL = re.compile(r"/pages/(\d+)|[?&]pageId=(\d+)")
_SPACES = re.compile(r"\s+")
_WORD = re.compile(r"\w[\w.\-]*\w|\w", re.UNICODE)
_SENTENCE = re.compile(r"(?<=[.!?])\s+| · ")


class QuestionsInvalid(ValueError):
    """A questions file that cannot be read; the message names the file and line."""


@dataclass(frozen=True)
class Question:
    line: int
    text: str
    target: str
    phrase: str | None = None
    tags: tuple[str, ...] = ()
    # Made by `--self`: a hit of the section the question came from is the target found.
    section: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """What pairs a question with itself in another run."""
        return f"{self.text}\n{self.target}\n{self.phrase or ''}"


def load_questions(path: Path) -> list[Question]:
    """The questions of a YAML or JSONL file, each checked; `QuestionsInvalid` names the
    line of the first bad one."""
    try:
        text = path.read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise QuestionsInvalid(f"{path}: cannot read the questions file ({exc})") from exc
    items = _jsonl_items(path, text) if path.suffix == ".jsonl" else _yaml_items(path, text)
    questions = [_question(path, line, item) for line, item in items]
    if not questions:
        raise QuestionsInvalid(f"{path}: no questions in the file")
    return questions


def _jsonl_items(path: Path, text: str) -> list[tuple[int, Any]]:
    items = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            items.append((number, json.loads(line)))
        except ValueError as exc:
            raise QuestionsInvalid(f"{path}:{number}: not a JSON object ({exc})") from exc
    return items


def _yaml_items(path: Path, text: str) -> list[tuple[int, Any]]:
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        values = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        raise QuestionsInvalid(f"{path}{where}: not valid YAML ({exc})") from exc
    if root is None:
        return []
    if not isinstance(root, yaml.SequenceNode) or not isinstance(values, list):
        raise QuestionsInvalid(
            f"{path}:{root.start_mark.line + 1}: expected a list of questions "
            "(`- question: ...` items)"
        )
    nodes = root.value
    return [(node.start_mark.line + 1, value) for node, value in zip(nodes, values, strict=True)]


def _question(path: Path, line: int, item: Any) -> Question:
    where = f"{path}:{line}"
    if not isinstance(item, dict):
        raise QuestionsInvalid(f"{where}: expected a mapping with `question` and `target`")
    unknown = sorted(set(map(str, item)) - FIELDS)
    if unknown:
        raise QuestionsInvalid(
            f"{where}: unknown field {', '.join(unknown)} (known: {', '.join(sorted(FIELDS))})"
        )
    text, target = item.get("question"), item.get("target")
    if not isinstance(text, str) or not text.strip():
        raise QuestionsInvalid(f"{where}: `question` must be the text to search")
    if not isinstance(target, str | int) or not str(target).strip():
        raise QuestionsInvalid(
            f"{where}: `target` must name what should be found: a Confluence page id or "
            "URL, a file path or a document id"
        )
    if _is_url(str(target)) and not _PAGE_URL.search(str(target)):
        raise QuestionsInvalid(
            f"{where}: {target} is no Confluence page URL (…/pages/ID/… or ?pageId=ID)"
        )
    phrase = item.get("phrase")
    if phrase is not None and (not isinstance(phrase, str) or not phrase.strip()):
        raise QuestionsInvalid(f"{where}: `phrase` must be text the hit holds")
    tags = item.get("tags") or []
    tags = [tags] if isinstance(tags, str) else tags
    if not isinstance(tags, list) or not all(isinstance(t, str | int) for t in tags):
        raise QuestionsInvalid(f"{where}: `tags` must be a list of words")
    return Question(line, text.strip(), str(target).strip(), phrase, tuple(map(str, tags)))


def _is_url(target: str) -> bool:
    return target.startswith(("http://", "https://"))


@dataclass(frozen=True)
class Targets:
    """The documents of the index a reader may see, to resolve questions' targets."""

    document_ids: frozenset[str]

    def resolve(self, target: str) -> tuple[str, ...]:
        """The documents `target` names: a document id, a Confluence page (id or URL), or
        every file whose path within its share ends with the path given; () when the
        index holds none of them."""
        if target in self.document_ids:
            return (target,)
        match = _PAGE_URL.search(target) if _is_url(target) else None
        if match is not None:
            page = match.group(1) or match.group(2)
            return (page,) if page in self.document_ids else ()
        wanted = target.replace("\\", "/").removeprefix("./").strip("/")
        return tuple(
            sorted(
                document
                for document in self.document_ids
                if "/" in document
                and (
                    document.split("/", 1)[1] == wanted
                    or document.endswith(f"/{wanted}")
                    or wanted.endswith(f"/{document.split('/', 1)[1]}")
                )
            )
        )


def _folded(text: str) -> str:
    return _SPACES.sub(" ", text).strip().casefold()


def matches(question: Question, documents: Sequence[str], hit: Hit) -> bool:
    """Whether `hit` is what the question asks for."""
    if hit.document_id not in documents:
        return False
    if question.section and hit.headings_path == question.section:
        return True
    return question.phrase is None or _folded(question.phrase) in _folded(plain_text(hit.text))


@dataclass(frozen=True)
class Search:
    """How every question is searched: the reader's identity (None: the operator's
    unfiltered view), filters and mode, as `ingest search` takes them."""

    identity: Identity | None = None
    limit: int = 10
    mode: Any = None  # a SearchMode; None: the `search.mode` setting
    tenant: str | None = None
    containers: tuple[str, ...] = ()
    labels: tuple[str, ...] = ()


@dataclass(frozen=True)
class Result:
    question: Question
    status: str  # found | missed | absent (the target is not in the index)
    rank: Rank = None
    hit: dict[str, Any] | None = None  # the matching hit, else the first

    def record(self) -> dict[str, Any]:
        return {
            "line": self.question.line,
            "question": self.question.text,
            "target": self.question.target,
            "phrase": self.question.phrase,
            "tags": list(self.question.tags),
            "key": self.question.key,
            "status": self.status,
            "rank": self.rank,
            "hit": self.hit,
        }


def visible_documents(index: Index, search: Search) -> frozenset[str]:
    """The ids of the documents the search may find."""
    filters = index.filters(
        search.identity, tenant=search.tenant, containers=search.containers, labels=search.labels
    )
    return frozenset(index.store().facet("document_id", filters, limit=MAX_DOCUMENTS))


def run_questions(
    index: Index,
    questions: Sequence[Question],
    search: Search,
    progress: Callable[[], None] | None = None,
) -> list[Result]:
    """Each question searched as `search` says, its rank found."""
    targets = Targets(visible_documents(index, search))
    results = []
    for question in questions:
        documents = targets.resolve(question.target)
        if not documents:
            results.append(Result(question, "absent"))
        else:
            hits = index.search(
                question.text,
                identity=search.identity,
                limit=search.limit,
                mode=search.mode,
                tenant=search.tenant,
                containers=search.containers,
                labels=search.labels,
            )
            results.append(_ranked(question, documents, hits))
        if progress is not None:
            progress()
    return results


def _ranked(question: Question, documents: Sequence[str], hits: Sequence[Hit]) -> Result:
    for rank, hit in enumerate(hits, 1):
        if matches(question, documents, hit):
            return Result(question, "found", rank, _hit_record(hit))
    return Result(question, "missed", None, _hit_record(hits[0]) if hits else None)


def _hit_record(hit: Hit) -> dict[str, Any]:
    return {
        "document_id": hit.document_id,
        "heading": hit.heading,
        "citation_url": hit.citation_url,
        "score": round(hit.score, 4),
    }


def measures(ranks: Sequence[Rank]) -> dict[str, float]:
    """recall@1/5/10 and MRR@10 over questions whose targets the index holds."""
    count = max(1, len(ranks))
    found = {f"recall@{k}": round(sum(hit_at(r, k) for r in ranks) / count, 3) for k in CUTOFFS}
    return {**found, "mrr@10": round(sum(reciprocal(r) for r in ranks if hit_at(r, 10)) / count, 3)}


def report(results: Sequence[Result], search: Search) -> dict[str, Any]:
    """The run as one JSON object: the measures overall and per tag, each question's
    result (what `--save` keeps and `--against` reads)."""
    measured = [r for r in results if r.status != "absent"]
    tags = sorted({tag for r in measured for tag in r.question.tags})
    return {
        "questions": len(results),
        "measured": len(measured),
        "absent": len(results) - len(measured),
        "mode": search.mode or "default",
        "limit": search.limit,
        "overall": measures([r.rank for r in measured]),
        "tags": {
            tag: {
                "questions": sum(1 for r in measured if tag in r.question.tags),
                **measures([r.rank for r in measured if tag in r.question.tags]),
            }
            for tag in tags
        },
        "results": [r.record() for r in results],
    }


def load_saved(path: Path) -> dict[str, Any]:
    """A report `--save` wrote."""
    try:
        saved = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError) as exc:
        raise QuestionsInvalid(f"{path}: not a report `ingest eval --save` wrote ({exc})") from exc
    if not isinstance(saved, dict) or not isinstance(saved.get("results"), list):
        raise QuestionsInvalid(f"{path}: not a report `ingest eval --save` wrote (no results)")
    return saved


def compare(now: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    """This run against an earlier one, question by question over the questions measured
    in both: the paired measures, and each question whose rank changed."""
    earlier = {r["key"]: r for r in before["results"] if r.get("status") != "absent"}
    pairs = [
        (r, earlier[r["key"]])
        for r in now["results"]
        if r["status"] != "absent" and r["key"] in earlier
    ]
    changed = [
        {
            "line": r["line"],
            "question": r["question"],
            "rank": r["rank"],
            "before": b["rank"],
            "change": "won" if reciprocal(r["rank"]) > reciprocal(b["rank"]) else "lost",
        }
        for r, b in pairs
        if r["rank"] != b["rank"]
    ]
    return {
        "paired": len(pairs),
        **paired([r["rank"] for r, _ in pairs], [b["rank"] for _, b in pairs]),
        "now": measures([r["rank"] for r, _ in pairs]),
        "before": measures([b["rank"] for _, b in pairs]),
        "changed": changed,
    }


@dataclass
class _Section:
    document_id: str
    path: tuple[str, ...]
    text: str = ""
    words: list[str] = field(default_factory=list)


def self_questions(
    markdown_of: Callable[[str], str | None],
    document_ids: Iterable[str],
    limit: int = SELF_LIMIT,
) -> tuple[list[Question], int]:
    """Known-item questions from the normalized Markdown of `document_ids`
    (`markdown_of`: a document's, None where the stage cache no longer holds it): per
    section, its heading path and a rare phrase of its text, at most `limit` spread
    evenly. Returns them and how many documents the cache lacked."""
    sections: list[_Section] = []
    missing = 0
    for document_id in sorted(document_ids):
        markdown = markdown_of(document_id)
        if markdown is None:
            missing += 1
            continue
        sections += _sections(document_id, markdown)
    frequency = Counter(word for s in sections for word in set(s.words))
    headings = Counter(s.path for s in sections)
    step = max(1.0, 2 * len(sections) / limit)  # up to two questions a section
    questions: list[Question] = []
    for number in range(min(len(sections), (limit + 1) // 2)):
        section = sections[int(number * step)]
        if section.path and headings[section.path] == 1:  # a shared path names no one section
            questions.append(
                Question(
                    number + 1,
                    " ".join(section.path),
                    section.document_id,
                    section.path[-1],
                    ("heading",),
                    section.path,
                )
            )
        phrase = _rare_phrase(section.text, frequency)
        if phrase is not None:
            questions.append(
                Question(number + 1, phrase, section.document_id, phrase, ("phrase",), section.path)
            )
    return questions[:limit], missing


def _sections(document_id: str, markdown: str) -> list[_Section]:
    """The document's sections: the text under each heading, with its heading path (as
    the chunker names it)."""
    stack: list[tuple[int, str]] = []
    sections = [_Section(document_id, ())]
    for block in parse_blocks(markdown):
        if block.type is BlockType.HEADING:
            while stack and stack[-1][0] >= block.level:
                stack.pop()
            stack.append((block.level, block.heading_text))
            sections.append(_Section(document_id, tuple(name for _, name in stack)))
        else:
            sections[-1].text += "\n\n" + block.text
    for section in sections:
        section.text = plain_text(section.text)
        section.words = [w.casefold() for w in _WORD.findall(section.text)]
    return [s for s in sections if s.words]


def _rare_phrase(text: str, frequency: Counter[str]) -> str | None:
    """PHRASE_WORDS words of one sentence of `text` around its rarest word in the corpus;
    None when no sentence is that long."""
    best: tuple[tuple[int, int], str] | None = None
    for sentence in _SENTENCE.split(text):
        words = sentence.split()
        if len(words) < PHRASE_WORDS:
            continue
        for start in range(len(words) - PHRASE_WORDS + 1):
            window = words[start : start + PHRASE_WORDS]
            found = [w.casefold() for w in _WORD.findall(" ".join(window))]
            score = (min((frequency[w] for w in found), default=0), -len(max(found, key=len)))
            if best is None or score < best[0]:
                best = (score, " ".join(window))
    return best[1] if best is not None else None


def _measure_line(found: dict[str, float]) -> str:
    return "  ".join(f"{name} {value:.3f}" for name, value in found.items())


def report_lines(found: dict[str, Any], name: str) -> list[str]:
    """The report for a terminal: the measures overall and per tag, then each question's
    rank and best hit with its link."""
    lines = [
        f"{name}: {found['questions']} questions, {found['measured']} measured, "
        f"{found['absent']} with a target not in the index (search: {found['mode']}, "
        f"top {found['limit']})",
        _measure_line(found["overall"]),
    ]
    for tag, measured in found["tags"].items():
        count = measured["questions"]
        rest = {k: v for k, v in measured.items() if k != "questions"}
        lines.append(f"  {tag} ({count}): {_measure_line(rest)}")
    for result in found["results"]:
        status = result["status"]
        where = f"rank {result['rank']}" if status == "found" else status
        lines.append(f"line {result['line']}: {where}: {result['question']}")
        if status == "absent":
            lines.append(f"   {result['target']} is not in the index (not counted)")
        elif result["hit"] is not None:
            hit = result["hit"]
            best = "hit" if status == "found" else "best hit, not the target"
            link = hit["citation_url"] or hit["document_id"]
            lines.append(f"   {best}: {hit['heading']}  {link}")
    return lines


def comparison_lines(comparison: dict[str, Any], name: str) -> list[str]:
    """`--against`'s pairing for a terminal."""
    now, before = comparison["now"], comparison["before"]
    lines = [
        f"against {name}: {comparison['paired']} questions measured in both",
        f"  recall@5 {before['recall@5']:.3f} -> {now['recall@5']:.3f}, "
        f"MRR@10 {before['mrr@10']:.3f} -> {now['mrr@10']:.3f}",
        f"  hit@5 won/lost {comparison['hit@5 won/lost']} (McNemar p "
        f"{comparison['mcnemar p']:.3g}); reciprocal rank higher/lower "
        f"{comparison['rr higher/lower']} (sign test p {comparison['sign p']:.3g})",
    ]
    for changed in comparison["changed"]:
        lines.append(
            f"  {changed['change']}: line {changed['line']}: rank {changed['before']} -> "
            f"{changed['rank']}: {changed['question']}"
        )
    return lines
