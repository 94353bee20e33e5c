"""The picture reader: real tesseract on pictures of real text (tests/picture_helpers.py)."""

from __future__ import annotations

import io
import re
import subprocess
import time
import zlib
from pathlib import Path

import pytest
from PIL import Image

from config.errors import ConfigError
from config.settings import PicturesSettings, load_settings
from flows.report import RunSummary, pictures_line, summary_markdown
from markdown_text import normalize_markdown
from normalizers.model import PictureSkipped
from normalizers.pictures import PictureReader, PictureReading, picture_setup
from normalizers.pictures.ocr import installed_languages
from stage_cache.store import StageCache
from tasks.outcome import PictureTally
from tasks.stages import PictureStageCache
from tests.picture_helpers import oversized_picture, text_picture

LANGUAGES = "eng+rus"
# Real screenshots and test pictures of the pictures benchmark, each with its licence.
SCREENSHOTS = Path(__file__).resolve().parents[1] / "bench" / "data" / "pictures" / "screenshots"


def reader(cache_dir: Path | None = None, **settings: object) -> PictureReader:
    cache = PictureStageCache(StageCache(cache_dir)) if cache_dir is not None else None
    return PictureReader(
        PicturesSettings(**settings),  # type: ignore[arg-type]
        languages=LANGUAGES,
        cache=cache,
    )


def test_reads_english_and_russian_lines_into_a_quote_named_by_the_picture() -> None:
    picture = text_picture(["Quarterly revenue grew", "Выручка выросла за квартал"])
    pictures = reader()
    markdown = pictures.text(picture, "chart_1.png")
    assert markdown.splitlines()[0] == "> *Picture (chart_1.png):*"
    assert "> Quarterly revenue grew" in markdown
    assert "> Выручка выросла за квартал" in markdown
    assert pictures.counts.read == 1 and pictures.counts.ocr_seconds > 0
    # the quote survives the shared Markdown pass as it is
    document = f"Before.\n\n{markdown}\n\nAfter.\n"
    assert normalize_markdown(document, ()).text == document


def test_paragraphs_stay_apart_and_markdown_in_the_text_is_escaped() -> None:
    picture = text_picture(["# not a heading", "", "", "second block"], size=(700, 400))
    markdown = reader().text(picture, "x.png")
    assert r"> \# not a heading" in markdown
    assert ">\n> second block" in markdown


def test_small_grey_text_of_a_screenshot_at_1x_is_read_whole() -> None:
    # 13 px grey text as headless Chromium draws it at 1x: read at that size, tesseract
    # splits host names and loses words (time enough for a read more on a busy machine)
    pictures = reader(timeout_s=600)
    markdown = pictures.text((SCREENSHOTS / "chromium-endpoints.png").read_bytes(), "ui.png")
    for host in ("gannet-egress.internal", "petrel-billing.internal", "tern-metrics.internal"):
        assert host in markdown
    assert "Last checked 2 minutes ago by probe runner 4 in zone prod-eu-west" in markdown


def test_text_turned_a_quarter_is_turned_back() -> None:
    # the terminal screenshot turned 90 degrees counter-clockwise (its pixels, no EXIF);
    # time enough for three reads on a busy machine
    pictures = reader(timeout_s=600)
    markdown = pictures.text((SCREENSHOTS / "chromium-terminal-turned.png").read_bytes(), "t.png")
    assert "> $ make release VERSION=2.4.1" in markdown
    assert "> error: release aborted, nothing was published" in markdown


def test_a_short_line_upside_down_or_turned_is_read() -> None:
    # one line is too little for orientation detection to tell which way is up
    upright = Image.open(io.BytesIO(text_picture(["Quarterly revenue grew"])))
    for degrees in (90, 180):
        turned = io.BytesIO()
        upright.rotate(degrees, expand=True).save(turned, format="PNG")
        markdown = reader().text(turned.getvalue(), "turned.png")
        assert "> Quarterly revenue grew" in markdown, degrees


def test_without_orientation_data_a_warning_names_the_package_and_turned_text_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    listing = subprocess.run(["tesseract", "--list-langs"], capture_output=True, text=True)
    tessdata = Path(re.findall(r'"(.+?)"', listing.stdout)[0])
    for name in ("eng.traineddata", "rus.traineddata", "configs"):  # all but osd
        (tmp_path / name).symlink_to(tessdata / name)
    monkeypatch.setenv("TESSDATA_PREFIX", str(tmp_path))
    installed_languages.cache_clear()
    try:
        setup, warnings = picture_setup(PicturesSettings())  # type: ignore[call-arg]
        assert setup.languages == LANGUAGES
        assert warnings == [
            "tesseract has no orientation data (apt-get install tesseract-ocr-osd): "
            "turned text in pictures is found only by reading them turned each way"
        ]
        upside_down = io.BytesIO()
        Image.open(io.BytesIO(text_picture(["Quarterly revenue grew"]))).rotate(180).save(
            upside_down, format="PNG"
        )
        assert "> Quarterly revenue grew" in reader().text(upside_down.getvalue(), "u.png")
    finally:
        installed_languages.cache_clear()


def test_a_photo_is_read_as_its_exif_orientation_shows_it() -> None:
    # stored on its side, with EXIF orientation 6 (turn it a quarter clockwise to view)
    photo = (SCREENSHOTS / "tesseractjs-simple-90.jpg").read_bytes()
    assert Image.open(io.BytesIO(photo)).getexif()[0x0112] == 6
    assert "> Tesseract.js" in reader().text(photo, "photo.jpg")


def test_small_pictures_are_skipped_by_area_and_by_side() -> None:
    pictures = reader(min_pixels=10_000, min_side=24)
    assert pictures.text(text_picture(["OK"], size=(90, 90)), "icon.png") == ""
    assert pictures.text(text_picture(["a long thin strip"], size=(900, 20)), "rule.png") == ""
    assert pictures.counts.skipped == {"small": 2}
    assert pictures.counts.read == 0


def test_a_repeated_picture_is_read_once_per_document() -> None:
    logo = text_picture(["Acme Widgets"])
    pictures = reader()
    assert "Acme Widgets" in pictures.text(logo, "logo.png")
    assert pictures.text(logo, "logo.png") == ""
    assert pictures.counts.skipped == {"repeat": 1}
    # another document's reader reads it again
    assert "Acme Widgets" in reader().text(logo, "logo.png")


def test_pictures_past_the_cap_are_skipped() -> None:
    pictures = reader(max_per_document=1)
    assert "first" in pictures.text(text_picture(["first slide"]), "1.png")
    assert pictures.text(text_picture(["second slide"]), "2.png") == ""
    assert pictures.counts.read == 1 and pictures.counts.skipped == {"cap": 1}


def test_words_below_the_confidence_threshold_are_dropped() -> None:
    picture = text_picture(["Quarterly revenue grew"], blurred=["smudged ledger entries"])
    everything = reader(min_confidence=0).read(picture)
    confident = reader(min_confidence=60).read(picture)
    assert isinstance(everything, PictureReading) and isinstance(confident, PictureReading)
    every_word = " ".join(" ".join(p) for p in everything.paragraphs).split()
    sure_words = " ".join(" ".join(p) for p in confident.paragraphs).split()
    assert {"Quarterly", "revenue", "grew"} <= set(sure_words)
    assert len(sure_words) < len(every_word)


def test_a_timeout_is_counted_not_raised() -> None:
    pictures = reader(timeout_s=0.001)
    assert pictures.text(text_picture(["too slow"]), "slow.png") == ""
    assert pictures.counts.skipped == {"timeout": 1}


def test_a_skipped_picture_says_why_and_each_skip_is_counted() -> None:
    pictures = reader(timeout_s=0.001)
    tiny = io.BytesIO()
    Image.new("RGB", (10, 10), "white").save(tiny, format="PNG")
    assert pictures.read(tiny.getvalue()) == PictureSkipped("small")
    assert pictures.read(b"not a picture at all") == PictureSkipped("unreadable")
    assert pictures.plain(text_picture(["too slow"])) == PictureSkipped("timeout")
    assert pictures.counts.skipped == {"small": 1, "unreadable": 1, "timeout": 1}


def test_a_picture_over_pillows_pixel_limit_is_skipped_as_large_not_unreadable() -> None:
    pictures = reader()
    assert pictures.text(oversized_picture(), "poster.png") == ""
    assert pictures.counts.skipped == {"large": 1}


def test_unreadable_bytes_are_counted() -> None:
    pictures = reader()
    assert pictures.text(text_picture(["cut off"])[:60], "cut.png") == ""
    assert pictures.text(b"not a picture at all", "x.png") == ""
    assert pictures.counts.skipped == {"unreadable": 2}


def test_webp_and_gif_are_read_through_png() -> None:
    for fmt in ("WEBP", "GIF"):
        markdown = reader().text(text_picture(["Converted picture"], format=fmt), f"p.{fmt}")
        assert "Converted picture" in markdown, fmt


def test_a_cached_picture_is_not_read_again(tmp_path: Path) -> None:
    picture = text_picture(["Cached words here"])
    first = reader(tmp_path)
    markdown = first.text(picture, "a.png")
    assert first.counts.ocr_seconds > 0
    assert len(list((tmp_path / "pictures").rglob("*"))) > 0
    second = reader(tmp_path)
    assert second.text(picture, "a.png") == markdown
    assert second.counts.read == 1 and second.counts.ocr_seconds == 0
    # other languages are another result
    other = PictureReader(PicturesSettings(), languages="eng", cache=first.cache)  # type: ignore[call-arg]
    other.text(picture, "a.png")
    assert other.counts.ocr_seconds > 0


def test_counts_reach_metadata_only_when_there_were_pictures() -> None:
    pictures = reader()
    assert pictures.counts.metadata() == {}
    pictures.text(text_picture(["Something"]), "a.png")
    pictures.text(b"junk", "b.png")
    meta = pictures.counts.metadata()
    assert meta["read"] == 1 and meta["skipped"] == {"unreadable": 1} and meta["ocr_seconds"] > 0


def test_setup_without_ocr_reads_nothing() -> None:
    setup, warnings = picture_setup(PicturesSettings(ocr=False))  # type: ignore[call-arg]
    assert setup.reader() is None and warnings == []
    setup, warnings = picture_setup(PicturesSettings())  # type: ignore[call-arg]
    assert setup.languages == LANGUAGES and warnings == []


def test_limits_ocr_is_another_name_of_pictures_ocr(tmp_path: Path) -> None:
    assert load_settings({"limits.ocr": False}).pictures.ocr is False
    assert load_settings(environ={"INGEST_LIMITS__OCR": "false"}).pictures.ocr is False
    config = tmp_path / "old.yaml"
    config.write_text("limits:\n  ocr: false\n")
    assert load_settings(config_file=config).pictures.ocr is False
    # a later layer's new name wins over an earlier layer's old one
    overridden = load_settings({"pictures.ocr": True}, config_file=config)
    assert overridden.pictures.ocr is True
    both = tmp_path / "both.yaml"
    both.write_text("limits:\n  ocr: false\npictures:\n  ocr: true\n")
    with pytest.raises(
        ConfigError, match=r"limits\.ocr \(False\) is another name of pictures\.ocr \(True\)"
    ) as e:
        load_settings(config_file=both)
    assert "set one of them" in str(e.value) and str(both) in str(e.value)
    with pytest.raises(ConfigError, match="set one of them"):
        load_settings(environ={"INGEST_LIMITS__OCR": "false", "INGEST_PICTURES__OCR": "true"})
    same = tmp_path / "same.yaml"
    same.write_text("limits:\n  ocr: true\npictures:\n  ocr: true\n  min_side: 10\n")
    assert load_settings(config_file=same).pictures.min_side == 10


def test_captions_need_an_endpoint_and_a_model() -> None:
    with pytest.raises(ConfigError, match=r"vision\.url and vision\.model"):
        load_settings({"vision.enabled": True, "vision.url": "http://127.0.0.1:1/v1"})


def test_the_report_counts_diagrams_pictures_skips_and_ocr_time() -> None:
    batch, other = PictureTally(), PictureTally()
    pictures = reader()
    pictures.text(text_picture(["Counted picture"]), "a.png")
    pictures.text(text_picture(["tiny"], size=(40, 40)), "icon.png")
    batch.add_document(
        {"format": "pptx", "diagram_pages": 2, "pictures": pictures.counts.metadata()}
    )
    batch.add_document({"format": "markdown"})  # no pictures: nothing counted
    other.add_document({"diagram_pages": 1, "pictures": {"read": 2, "skipped": {"small": 1}}})
    batch.merge(other)
    counted = batch.summary()
    assert counted["diagrams"] == 3 and counted["read"] == 3
    assert counted["skipped"] == {"small": 2} and counted["ocr_seconds"] > 0
    summary = RunSummary(
        source="files:docs",
        tenant_id="default",
        mode="incremental",
        listing_complete=True,
        seen=3,
        unchanged=0,
        changed=0,
        new=3,
        deleted=0,
        failed=[],
        stages={},
        seconds={},
        chunks=4,
        chunk_counts={},
        token_histogram={},
        started="2026-11-28T03:00:00+00:00",
        wall_seconds=1.0,
        pictures=counted,
    )
    data = summary.as_dict()
    assert data["pictures"] == counted and data["chunks"] == 4  # beside the old fields
    line = (
        f"3 diagram pages and 3 pictures read, skipped: 2 small; OCR {counted['ocr_seconds']:.1f} s"
    )
    assert pictures_line(data) == line
    assert f"\n{line}.\n" in summary_markdown(summary)  # the run's artifact
    # a run that met no picture says nothing of them
    assert pictures_line({**data, "pictures": PictureTally().summary()}) is None


def test_a_picture_claiming_a_billion_pixels_is_not_decoded() -> None:
    png = bytearray(text_picture(["bomb"]))
    # IHDR: width and height after the 8-byte signature, length and type; then its CRC
    png[16:24] = (40_000).to_bytes(4, "big") + (30_000).to_bytes(4, "big")
    png[29:33] = zlib.crc32(bytes(png[12:29])).to_bytes(4, "big")
    pictures = reader()
    started = time.perf_counter()
    assert pictures.text(bytes(png), "bomb.png") == ""
    assert pictures.counts.skipped == {"large": 1}  # over Pillow's limit, told as such
    assert time.perf_counter() - started < 1.0
