"""Captions: a vision model at an OpenAI-compatible chat-completions endpoint describes a
picture in a sentence or two. One `VisionCaptioner` serves a run: it asks at most
`vision.max_per_run` times (a cached caption costs no request) and keeps each caption by
the picture's bytes and the model, so a picture is described once."""

from __future__ import annotations

import base64
import hashlib
import logging
import threading

import requests

from config.http_retry import RetriesExhausted, post_retrying
from config.settings import VisionSettings
from normalizers.pictures.images import Picture, UnreadablePicture, for_tesseract
from normalizers.pictures.reader import PictureCache

log = logging.getLogger(__name__)

# Bump with PROMPT, or when what a cached caption holds changes.
CAPTION_CACHE_VERSION = "1"
PROMPT = (
    "Describe this picture in one or two sentences for a search index: what it shows and "
    "what it is about. Do not transcribe its text word for word."
)
MAX_CAPTION_TOKENS = 120


class VisionCaptioner:
    """Describes pictures with `settings.model` at `settings.url` (`Captioner`)."""

    def __init__(
        self,
        settings: VisionSettings,
        *,
        cache: PictureCache | None = None,
        session: requests.Session | None = None,
    ) -> None:
        if not (settings.url and settings.model):
            raise ValueError("captions need vision.url and vision.model")
        self.settings = settings
        self.model = settings.model
        self.endpoint = settings.url.rstrip("/") + "/chat/completions"
        self.cache = cache
        self.session = session or requests.Session()
        if settings.api_key is not None:
            secret = settings.api_key.get_secret_value()
            self.session.headers["Authorization"] = f"Bearer {secret}"
        self.requested = 0  # requests this run, against `max_per_run`
        self._lock = threading.Lock()

    def caption(self, data: bytes, picture: Picture) -> str:
        """A sentence or two on the picture; "" past the run's bound or where the
        endpoint fails (the picture keeps its text; the failure is logged)."""
        key = hashlib.sha256(
            "|".join(
                ("caption", CAPTION_CACHE_VERSION, self.model, hashlib.sha256(data).hexdigest())
            ).encode()
        ).hexdigest()
        cached = self.cache.get(key) if self.cache is not None else None
        if cached is not None:
            return cached.decode()
        with self._lock:
            if self.requested >= self.settings.max_per_run:
                return ""
            self.requested += 1
        try:
            image = for_tesseract(data, picture)  # PNG or JPEG, transparency on white
        except UnreadablePicture:
            return ""
        caption = self._ask(image, "image/jpeg" if image[:3] == b"\xff\xd8\xff" else "image/png")
        if caption and self.cache is not None:
            self.cache.put(key, caption.encode())
        return caption

    def _ask(self, image: bytes, mime: str) -> str:
        url = f"data:{mime};base64,{base64.b64encode(image).decode()}"
        body = {
            "model": self.model,
            "max_tokens": MAX_CAPTION_TOKENS,
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": PROMPT},
                        {"type": "image_url", "image_url": {"url": url}},
                    ],
                }
            ],
        }
        try:
            response = post_retrying(
                self.session,
                self.endpoint,
                body,
                timeout_s=self.settings.timeout_s,
                max_retries=self.settings.max_retries,
                backoff_s=self.settings.retry_backoff_s,
            )
        except RetriesExhausted as exc:
            log.warning("captions: %s %s", self.endpoint, exc)
            return ""
        if response.status_code != 200:
            log.warning("captions: %s answered HTTP %d", self.endpoint, response.status_code)
            return ""
        try:
            content = response.json()["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError):
            log.warning("captions: %s answered no chat completion", self.endpoint)
            return ""
        return " ".join(str(content or "").split())
