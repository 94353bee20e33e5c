"""The sample corpus of the README's quickstart (`samples/docs/`, written by
`samples/build.py`): every document normalizes and chunks cleanly, the broken one fails
with `CORRUPT`, and the committed files are what the generator writes."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from types import ModuleType

import pytest

from chunking import validate_chunks
from config.errors import ErrorCode, IngestError
from config.settings import Settings, load_settings
from normalizers.model import NormalizedDocument
from normalizers.pictures import picture_setup
from tasks.stages import chunk_normalized, local_file_source, normalize_source

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "samples"
DOCS = SAMPLES / "docs"
HAVE_SOFFICE = bool(shutil.which("soffice") or shutil.which("libreoffice"))

# Phrases each document's Markdown must hold: its title, headings and a few facts
# from its tables, lists, notes and code.
EXPECTED: dict[str, tuple[str, ...]] = {
    "handbook/onboarding.md": (
        "# Engineering Onboarding Guide",
        "## Your first week",
        "### Day one checklist",
        "```bash",
        "| Environment | Purpose | Deployed from | Who can deploy |",
        "- Join the chat channels",
    ),
    "handbook/incident-response.docx": (
        "# Incident Response Process",
        "# Severity levels",
        "## Mitigate",
        "| SEV1 | Customers cannot place orders or pay in one or more regions |",
        "1. Confirm the impact from the customer's point of view",
        "- Incident commander: owns the incident",
    ),
    "handbook/oncall-rota.xlsx": (
        "## Rota Q2 2024",
        "## Contacts",
        "| Week starting | Primary | Secondary | Escalation manager | Notes |",
        "| 2024-04-01 | Priya Raman |",
        "| Ольга Смирнова | Data | 4204 | Europe/Moscow | 4 |",
    ),
    "architecture/overview.pptx": (
        "## Slide 1: Northwind Platform Architecture Overview",
        "## Slide 2: System context",
        "  - TLS terminates at the regional load balancers",
        "    - At-least-once delivery; consumers are idempotent",
        "## Slide 3: Service inventory",
        "| order-gateway | Gateway | Go | 4,800 | 99.97% | 99.95% |",
        "## Slide 4: Roadmap 2024",
        "> Notes: Walk through the request path",
    ),
    "architecture/storage-design.pdf": (
        "# Storage Design: Order History",
        "## Current state",
        "### Storage tiers",
        "- Cut storage cost for order history by at least half.",
        "| Tier | Data | Store | Read latency (p99) | Cost per TB-month |",
        "| Warm | 90 days to 2 years | Object storage, standard | 900 ms | EUR 21 |",
        "## Decision",
    ),
    "runbooks/restart-service.html": (
        "# Runbook: Restarting a platform service",
        "## Rolling restart",
        "```bash",
        "rollout restart deployment/inventory-api",
        "| inventory-api | 8 | 4 minutes | warms its cache from Redis on start |",
        "[rollback runbook](",
    ),
    "runbooks/backup.txt": (
        "Database Backup and Restore Runbook",
        "Restoring to a point in time",
        "Step 3. Start the restore.",
    ),
    "legacy/old-policy.doc": (
        "# Acceptable Use of Production Systems",
        "## Change windows",
        "| Emergency | Any time | On-call manager, reviewed afterwards |",
        "1. Log in only through the bastion hosts",
    ),
    "legacy/budget-2019.xls": (
        "## Budget 2019",
        "## Assumptions",
        "| Cost line (EUR) | Q1 | Q2 | Q3 | Q4 | Year |",
        "| Total | 124900 | 121000 | 113600 | 123600 | 483100 |",  # formulas' cached values
    ),
    "architecture/threat-model.drawio": (  # a real draw.io file, three pages
        "Payment Partner",
        "Man-in-the-middle",
        "Packet Sniffing",
        "Phishing",
        "Blackmail",
    ),
    "runbooks/deploy-blocked.png": (  # a screenshot: its text comes from OCR
        "Northwind Deploy Console",
        "Deployment blocked",
        "order-gateway",
        "DEPLOY-417",
    ),
    "ru/руководство.md": (
        "# Руководство по эксплуатации платформы Northwind",
        "## Дежурства",
        "## Действия при сбое",
        "- Основной дежурный отвечает на вызов в течение пятнадцати минут.",
    ),
}
BROKEN = "broken/corrupt.pdf"
LEGACY = {"legacy/old-policy.doc", "legacy/budget-2019.xls"}
SCREENSHOT = "runbooks/deploy-blocked.png"
# Written byte for byte: text, and the draw.io file the build copies unchanged.
BYTE_STABLE = {".md", ".txt", ".html", ".drawio"}
# A screenshot is one short chunk; every other sample makes several.
MIN_CHUNKS = {SCREENSHOT: 1}


def _needs_soffice(name: str) -> None:
    if name in LEGACY and not HAVE_SOFFICE:
        pytest.skip("legacy .doc/.xls need LibreOffice (soffice)")


@pytest.fixture(scope="module")
def settings() -> Settings:
    return load_settings(environ={})


@pytest.fixture(scope="module")
def build_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("samples_build", SAMPLES / "build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def regenerated(build_module: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The corpus written afresh by `samples/build.py` (without the legacy binaries and
    the screenshot, which LibreOffice and Chromium make, slowly and not byte-stable)."""
    out = tmp_path_factory.mktemp("samples")
    build_module.build(out, legacy=False, screenshot=False)
    return out


def _normalize(path: Path, settings: Settings) -> NormalizedDocument:
    """As a run normalizes the file: pictures read by OCR (without a cache)."""
    return normalize_source(
        local_file_source(path), settings.limits, picture_setup(settings.pictures)[0]
    )


def _committed() -> set[str]:
    return {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*") if p.is_file()}


def test_every_committed_sample_has_expectations() -> None:
    assert _committed() == {*EXPECTED, BROKEN}


def test_samples_are_small() -> None:
    sizes = {name: (DOCS / name).stat().st_size for name in _committed()}
    assert all(size < 100_000 for size in sizes.values()), sizes
    assert sum(sizes.values()) < 1_000_000


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_sample_normalizes_and_chunks_cleanly(name: str, settings: Settings) -> None:
    _needs_soffice(name)
    source = local_file_source(DOCS / name)
    normalized = _normalize(DOCS / name, settings)
    for phrase in EXPECTED[name]:
        assert phrase in normalized.markdown, f"{name}: {phrase!r} missing"
    document = chunk_normalized(source, normalized, settings.chunking, settings.tenant_id)
    assert len(document.chunks) >= MIN_CHUNKS.get(name, 2)
    report = validate_chunks(document.chunks, document.text, settings.chunking, document.blocks)
    assert report.ok, report.violations


def test_markdown_front_matter_becomes_metadata(settings: Settings) -> None:
    normalized = _normalize(DOCS / "handbook/onboarding.md", settings)
    assert not normalized.markdown.startswith("---")
    assert normalized.title == "Engineering Onboarding Guide"


def test_broken_pdf_fails_corrupt(settings: Settings) -> None:
    with pytest.raises(IngestError) as failure:
        _normalize(DOCS / BROKEN, settings)
    assert failure.value.code is ErrorCode.CORRUPT


@pytest.mark.parametrize("name", [*sorted(set(EXPECTED) - LEGACY - {SCREENSHOT}), BROKEN])
def test_committed_file_is_what_the_generator_writes(
    name: str, regenerated: Path, settings: Settings
) -> None:
    fresh, committed = regenerated / name, DOCS / name
    assert fresh.is_file() and fresh.stat().st_size > 0
    if fresh.suffix in BYTE_STABLE or name == BROKEN:
        assert fresh.read_bytes() == committed.read_bytes()
    else:
        # Binary packages may differ in bytes across library versions; what they say
        # must not.
        assert _normalize(fresh, settings).markdown == _normalize(committed, settings).markdown
