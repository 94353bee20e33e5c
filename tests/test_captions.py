"""Captions against a local OpenAI-compatible chat-completions endpoint: a real HTTP
server on 127.0.0.1 that records each request and answers as the test scripts it."""

from __future__ import annotations

import base64
import io
import json
import logging
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from pydantic import SecretStr

from config.settings import PicturesSettings, VisionSettings, load_settings
from normalizers.pictures import PictureReader
from normalizers.pictures.captions import VisionCaptioner
from normalizers.pictures.images import Picture, probe
from stage_cache.store import StageCache
from tasks.stages import PictureStageCache, normalize_config, run_pictures
from tests.picture_helpers import text_picture

SECRET = "sk-vision-secret-123"
CAPTION = "A bar chart of quarterly revenue, rising each quarter."


class FakeVision:
    """Answers POST /v1/chat/completions: first the scripted (status, headers) failures,
    then a completion whose content is CAPTION."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.failures: list[tuple[int, dict[str, str]]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.requests.append(
                    {"path": self.path, "headers": dict(self.headers), "body": body}
                )
                status, headers = fake.failures.pop(0) if fake.failures else (200, {})
                answer = {
                    "id": "chatcmpl-1",
                    "object": "chat.completion",
                    "model": body.get("model"),
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": f"  {CAPTION}\n"},
                            "finish_reason": "stop",
                        }
                    ],
                }
                data = json.dumps(answer if status == 200 else {"error": "busy"}).encode()
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"


@pytest.fixture()
def vision() -> Iterator[FakeVision]:
    fake = FakeVision()
    thread = threading.Thread(target=fake.server.serve_forever, daemon=True)
    thread.start()
    yield fake
    fake.server.shutdown()
    fake.server.server_close()


def captioner(fake: FakeVision, cache_dir: Path | None = None, **settings: Any) -> VisionCaptioner:
    cache = PictureStageCache(StageCache(cache_dir)) if cache_dir is not None else None
    vision = VisionSettings(
        enabled=True, url=fake.url, model="llava-test", api_key=SecretStr(SECRET), **settings
    )
    return VisionCaptioner(vision, cache=cache)


def reader(captions: VisionCaptioner) -> PictureReader:
    return PictureReader(
        PicturesSettings(),  # type: ignore[call-arg]
        languages="eng+rus",
        cache=captions.cache,
        captioner=captions,
    )


def test_the_caption_stands_beside_the_text_and_the_request_has_the_chat_shape(
    vision: FakeVision,
) -> None:
    picture = text_picture(["Revenue by quarter"], format="WEBP")
    markdown = reader(captioner(vision)).text(picture, "chart.webp")
    assert markdown == (f"> *Picture (chart.webp):* {CAPTION}\n>\n> Revenue by quarter")
    (request,) = vision.requests
    assert request["path"] == "/v1/chat/completions"
    assert request["headers"]["Authorization"] == f"Bearer {SECRET}"
    body = request["body"]
    assert body["model"] == "llava-test" and body["max_tokens"] > 0
    (message,) = body["messages"]
    assert message["role"] == "user"
    text, image = message["content"]
    assert text["type"] == "text" and text["text"]
    assert image["type"] == "image_url"
    prefix, _, encoded = image["image_url"]["url"].partition(",")
    assert prefix == "data:image/png;base64"  # WebP is sent as PNG
    sent = Image.open(io.BytesIO(base64.b64decode(encoded)))
    assert sent.format == "PNG" and sent.size == Image.open(io.BytesIO(picture)).size


def test_429_and_503_are_retried_after_the_wait_the_endpoint_asks(vision: FakeVision) -> None:
    vision.failures = [(429, {"Retry-After": "1"}), (503, {"Retry-After": "1"})]
    captions = captioner(vision, retry_backoff_s=0)
    started = time.monotonic()
    assert captions.caption(*picture_and_probe(["Retried"])) == CAPTION
    assert time.monotonic() - started >= 2.0  # both waits were waited, not backed off
    assert len(vision.requests) == 3


def test_retries_exhausted_leave_the_text_alone_and_log_no_secret(
    vision: FakeVision, caplog: pytest.LogCaptureFixture
) -> None:
    vision.failures = [(503, {})] * 3
    captions = captioner(vision, max_retries=2, retry_backoff_s=0)
    with caplog.at_level(logging.DEBUG):
        markdown = reader(captions).text(text_picture(["Plain words"]), "p.png")
    assert markdown == "> *Picture (p.png):*\n>\n> Plain words"
    assert len(vision.requests) == 3
    assert "gave up after 3 attempts" in caplog.text and SECRET not in caplog.text


def test_a_caption_is_asked_once_per_picture_and_model(vision: FakeVision, tmp_path: Path) -> None:
    picture = picture_and_probe(["Cached caption"])
    assert captioner(vision, tmp_path).caption(*picture) == CAPTION
    # the next run: from the cache, no request
    assert captioner(vision, tmp_path).caption(*picture) == CAPTION
    assert len(vision.requests) == 1
    other_model = VisionCaptioner(
        VisionSettings(enabled=True, url=vision.url, model="other"),  # type: ignore[call-arg]
        cache=PictureStageCache(StageCache(tmp_path)),
    )
    assert other_model.caption(*picture) == CAPTION
    assert len(vision.requests) == 2
    assert not any(SECRET.encode() in p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())


def test_at_most_max_per_run_pictures_are_described(vision: FakeVision) -> None:
    captions = captioner(vision, max_per_run=1)
    assert captions.caption(*picture_and_probe(["First"])) == CAPTION
    assert captions.caption(*picture_and_probe(["Second"])) == ""
    assert len(vision.requests) == 1


def test_no_request_without_captions_on(vision: FakeVision, tmp_path: Path) -> None:
    base = {"cache.dir": str(tmp_path), "vision.url": vision.url, "vision.model": "llava"}
    for overrides in ({}, base):  # no vision.url; a URL but captions off
        setup = run_pictures(load_settings(overrides))
        assert setup.captioner is None
        pictures = setup.reader()
        assert pictures is not None
        assert "Quiet" in pictures.text(text_picture(["Quiet please"]), "q.png")
    assert vision.requests == []
    on = load_settings({**base, "vision.enabled": True, "vision.api_key": SECRET})
    assert run_pictures(on).captioner is not None
    # the model is part of the normalize stage's key, the key is not
    assert SECRET not in json.dumps(normalize_config(on))
    assert normalize_config(on) != normalize_config(load_settings(base))


def picture_and_probe(lines: list[str]) -> tuple[bytes, Picture]:
    data = text_picture(lines)
    return data, probe(data)
