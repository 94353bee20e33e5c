"""Typed settings and their loader (docs/configuration.md#configuration-reference).

Precedence, lowest to highest: `config/config.yaml` (every default), a chunking profile,
the file named by `INGEST_CONFIG` (or `--config`), environment variables (`INGEST_` prefix,
`__` for nesting, plus the short names `CHUNK_*`), then explicit overrides (flow or
deployment parameters). Every key is checked: an unknown key or a bad value raises
`ConfigError` naming the setting and where it came from.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)

from config.errors import ConfigError
from config.sources import settings_models

DEFAULT_CONFIG_PATH = Path(__file__).with_name("config.yaml")
ENV_PREFIX = "INGEST_"
CONFIG_FILE_ENV = "INGEST_CONFIG"


def env_name(setting: str) -> str:
    """The environment variable that sets `setting` (`files.paths` -> INGEST_FILES__PATHS)."""
    return ENV_PREFIX + setting.replace(".", "__").upper()


# Short environment names of the budgets (docs/chunking.md#budgets), accepted beside the INGEST_
# names.
ADR_ENV_NAMES: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "CHUNK_MIN_TOKENS": ("chunking", "min_tokens"),
        "CHUNK_TARGET_TOKENS": ("chunking", "target_tokens"),
        "CHUNK_MAX_TOKENS": ("chunking", "max_tokens"),
        "CHUNK_OVERLAP_BASE": ("chunking", "overlap_tokens"),
        "CHUNK_OVERSIZE_BLOCK_LIMIT": ("chunking", "oversize_block_limit"),
    }
)

# Settings known by an earlier name too: (section, old name) -> (section, the setting's
# name), in its own section or another. A layer that sets the old name sets the new one at
# that layer's precedence; a layer that sets both to different values is refused.
ALIAS, ALIASED = "bind_tokens", "bind_before_tokens"
ALIASES: Mapping[tuple[str, ...], tuple[str, ...]] = MappingProxyType(
    {("chunking", ALIAS): ("chunking", ALIASED), ("limits", "ocr"): ("pictures", "ocr")}
)

ChunkingProfile = Literal["adr-002", "seed-000", "seed-002"]
# Languages the project knows: the embedder's window check measures them, the lexical
# vector stems and drops stop words of them.
Language = Literal["en", "ru"]
LANGUAGES: tuple[Language, ...] = ("en", "ru")

# Budget presets (docs/chunking.md#budgets). `seed-002` comes with no minimum or oversize limit:
# packing closes before its soft max (450), a single block splits only above its hard max (520,
# also the oversize limit), and 15% of its 350 target is the overlap.
PROFILES: Mapping[str, dict[str, int]] = MappingProxyType(
    {
        "adr-002": {
            "min_tokens": 150,
            "target_tokens": 250,
            "max_tokens": 300,
            "overlap_tokens": 50,
            "oversize_block_limit": 600,
        },
        "seed-000": {
            "min_tokens": 120,
            "target_tokens": 650,
            "max_tokens": 900,
            "overlap_tokens": 80,
            "oversize_block_limit": 1800,
        },
        "seed-002": {
            "min_tokens": 100,
            "target_tokens": 350,
            "soft_max_tokens": 450,
            "max_tokens": 520,
            "overlap_tokens": 52,
            "oversize_block_limit": 520,
        },
    }
)


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=True)


class ChunkingSettings(StrictModel):
    profile: ChunkingProfile | None = None
    min_tokens: int = Field(150, gt=0)
    target_tokens: int = Field(250, gt=0)
    max_tokens: int = Field(300, gt=0)
    # Packing closes a chunk before this many tokens; a single block up to `max_tokens`
    # stays whole (docs/chunking.md#budgets). None: the same as `max_tokens`.
    soft_max_tokens: int | None = Field(None, gt=0)
    overlap_tokens: int = Field(50, ge=0)
    oversize_block_limit: int = Field(600, gt=0)
    overlap_max_share: float = Field(0.35, ge=0.0, le=1.0)
    # Bound context (docs/chunking.md#bound-context): the nearest prose of a section, up to this
    # many tokens, joins the table or code block after it (its caption, lead-in, explanation) ...
    # (a bound chunk stays within max_tokens whatever these say)
    bind_before_tokens: int = Field(128, ge=0)
    # ... and after a code block its output and explanation, up to this many tokens.
    bind_after_tokens: int = Field(80, ge=0)
    # Adjacent tables of one section at most `table_group_max_gap_lines` lines apart form
    # one chunk up to max_tokens (docs/chunking.md#table-grouping).
    group_related_tables: bool = False
    table_group_max_gap_lines: int = Field(10, ge=0)
    # "bundled" = the vendored BGE-M3 tokenizer; otherwise a Hugging Face id or local path.
    tokenizer: str = "bundled"

    @model_validator(mode="after")
    def _budgets_are_ordered(self) -> ChunkingSettings:
        pairs = [
            ("min_tokens", "target_tokens"),
            ("target_tokens", "max_tokens"),
            ("max_tokens", "oversize_block_limit"),
        ]
        if self.soft_max_tokens is not None:
            pairs[1:2] = [("target_tokens", "soft_max_tokens"), ("soft_max_tokens", "max_tokens")]
        for low, high in pairs:
            if getattr(self, low) > getattr(self, high):
                raise ValueError(
                    f"chunking.{low} ({getattr(self, low)}) must be <= "
                    f"chunking.{high} ({getattr(self, high)})"
                )
        if self.overlap_tokens >= self.min_tokens:
            raise ValueError(
                f"chunking.overlap_tokens ({self.overlap_tokens}) must be < "
                f"chunking.min_tokens ({self.min_tokens})"
            )
        return self

    @model_validator(mode="before")
    @classmethod
    def _bind_tokens_is_bind_before_tokens(cls, data: Any) -> Any:
        """`bind_tokens`, the setting's earlier name, still sets `bind_before_tokens`."""
        if isinstance(data, dict) and ALIAS in data:
            data = dict(data)
            alias = data.pop(ALIAS)
            if data.setdefault(ALIASED, alias) != alias:
                raise ValueError(
                    f"chunking.{ALIAS} ({alias}) is another name of chunking.{ALIASED} "
                    f"({data[ALIASED]}): set one of them"
                )
        return data

    @property
    def pack_max_tokens(self) -> int:
        """Where packing closes a chunk (the soft max, or `max_tokens`)."""
        return self.soft_max_tokens if self.soft_max_tokens is not None else self.max_tokens


class LimitsSettings(StrictModel):
    max_file_bytes: int = Field(100 * 1024 * 1024, gt=0)
    max_pdf_pages: int = Field(2000, gt=0)
    max_sheet_cells: int = Field(5_000_000, gt=0)
    max_decompressed_bytes: int = Field(512 * 1024 * 1024, gt=0)
    conversion_timeout_s: float = Field(120.0, gt=0)
    document_timeout_s: float = Field(600.0, gt=0)
    include_hidden_sheets: bool = False
    # An OOXML file no library reads goes through LibreOffice before it is CORRUPT.
    office_round_trip: bool = True


class PicturesSettings(StrictModel):
    """Text in pictures: tesseract reads the pictures documents hold, image files and PDF
    pages without a text layer."""

    # Off: no OCR anywhere (a picture keeps its alt text; image files are unsupported).
    # On without tesseract or a language's data: a warning at start-up, that part off.
    ocr: bool = True
    languages: list[Language] = Field(default_factory=lambda: list(LANGUAGES), min_length=1)
    # Smaller pictures hold no text worth reading (icons, bullets, logos): skipped.
    min_pixels: int = Field(10_000, ge=0)  # width x height
    min_side: int = Field(24, ge=0)  # the shorter side
    # Pictures read per document at most; the rest are skipped (counted).
    max_per_document: int = Field(50, ge=0)
    # One picture's OCR; past it the picture is skipped (counted), the document goes on.
    timeout_s: float = Field(30.0, gt=0)
    # Words tesseract is less sure of (0-100) are dropped: noise from photos and lines.
    min_confidence: float = Field(60.0, ge=0, le=100)


class VisionSettings(StrictModel):
    """Captions: a vision model at an OpenAI-compatible chat-completions endpoint
    describes each picture once, beside its OCR text."""

    enabled: bool = False
    url: str | None = None  # the API base, e.g. http://localhost:8000/v1
    model: str | None = None
    api_key: SecretStr | None = None
    # Pictures described per run at most (the rest keep their OCR text only).
    max_per_run: int = Field(200, ge=0)
    timeout_s: float = Field(60.0, gt=0)
    max_retries: int = Field(3, ge=0)
    retry_backoff_s: float = Field(1.0, ge=0)

    @model_validator(mode="after")
    def _enabled_needs_an_endpoint(self) -> VisionSettings:
        if self.enabled and not (self.url and self.model):
            raise ValueError("vision.enabled needs vision.url and vision.model")
        return self


class QdrantSettings(StrictModel):
    # The embedded store at `path` when `url` is unset: Qdrant Edge in-process, or
    # qdrant-client's local mode (for a platform without an Edge wheel).
    engine: Literal["edge", "local"] = "edge"
    path: str = ".ingest/qdrant"
    url: str | None = None
    api_key: SecretStr | None = None
    # Name of a Prefect Secret block holding the API key (used when `api_key` is unset).
    api_key_secret_block: str | None = None
    collection: str = "chunks"
    shard_number: int = Field(1, gt=0)
    replication_factor: int = Field(1, gt=0)
    on_disk: bool = False
    # `int8`: the chunk vector's HNSW graph is built and searched over int8 copies of
    # its vectors (scalar quantization, kept in RAM; the float vectors rescore what they
    # find), which cuts the build at the end of a first large run by about a third.
    # `none`: floats only. Read when a collection is created.
    quantization: Literal["int8", "none"] = "int8"
    upsert_batch_size: int = Field(256, gt=0)
    timeout_s: float = Field(60.0, gt=0)
    # A collection a re-index moved the alias away from is dropped after this many days
    # (by the next run's reconcile or re-index); `ingest reindex --drop-old` drops it at once.
    keep_old_days: float = Field(7.0, ge=0)
    # Edge: a segment's HNSW index is built at the end of a run once it holds more than
    # this many vectors of one name (each part vector of a chunk counts, about 3.4 a
    # chunk, so parts cross it first); below it an exact search stays under ~40 ms.
    optimize_threshold: int = Field(20_000, ge=0)
    # An embedded store is open in one process at a time (a lock file beside it): how long
    # a run or a reader waits for the process that holds it before giving up.
    lock_wait_s: float = Field(10.0, ge=0)
    # A reader of an embedded store (`ingest mcp`, the retrievers, `query.api.Index`) lets
    # it go after this many seconds without a query, so an idle reader blocks no run; the
    # next query opens it again.
    idle_release_s: float = Field(5.0, ge=0)


class EmbedderSettings(StrictModel):
    kind: Literal["bge-m3", "openai"] = "bge-m3"
    model: str = "BAAI/bge-m3"
    url: str | None = None
    api_key: SecretStr | None = None
    # None: taken from the model (1024 for BGE-M3); set it for `openai` endpoints.
    vector_size: int | None = Field(None, gt=0)
    sparse: bool = True
    # Most texts per forward pass (and per HTTP request of the openai kind).
    batch_size: int = Field(32, gt=0)
    # Padded tokens per forward pass (texts x longest of them): bounds the embedder's
    # memory whatever the input; no single input is longer than this either.
    tokens_per_batch: int = Field(16384, gt=0)
    # Upper bound on the model's input window (the model's own limit applies too).
    max_length: int = Field(8192, gt=0)
    # Chunk budgets that could make an embed_text longer than the model's window:
    # refuse at start-up, or shrink the chunking budgets to fit (with a warning).
    on_overflow: Literal["refuse", "shrink"] = "refuse"
    # BGE-M3 tokens set aside for embed_text's context header (title > headings).
    header_tokens: int = Field(32, ge=0)
    # Languages the start-up window check measures the model's tokenizer on.
    languages: list[Language] = Field(default_factory=lambda: list(LANGUAGES), min_length=1)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    timeout_s: float = Field(60.0, gt=0)
    max_retries: int = Field(6, ge=0)
    retry_backoff_s: float = Field(1.0, ge=0)


class LexicalSettings(StrictModel):
    """The `lexical` sparse vector: contextual BM25 over each chunk's embed_text
    (docs/qdrant.md#lexical-retrieval)."""

    enabled: bool = True
    # Stemmers and stop words: a word is stemmed by the language of its script (Cyrillic:
    # ru, Latin: en) when that language is listed, else kept as it is.
    languages: list[Language] = Field(default_factory=lambda: list(LANGUAGES), min_length=1)
    k1: float = Field(1.2, ge=0)
    b: float = Field(0.75, ge=0, le=1)
    # Mean terms per embed_text, the length BM25 normalizes by: measured on the chunker's
    # output at the default budgets (bench/retrieval.py prints it).
    avg_len: float = Field(84.0, gt=0)
    # Longer words (hashes, base64) are cut to this many characters before hashing.
    max_term_chars: int = Field(64, ge=8)


class PartsSettings(StrictModel):
    """The `dense_parts` multivector: each chunk's parts (whole sentences, lines, table row
    or code line groups) embedded by the same model, a chunk scored by its best part."""

    enabled: bool = True
    # BGE-M3 tokens a part holds at most (a sentence or line over it is cut into windows).
    max_tokens: int = Field(96, gt=0)


SearchModeSetting = Literal["auto", "hybrid", "dense", "lexical", "sparse"]
SearchExpandSetting = Literal["none", "passage", "neighbours", "section"]


class SearchSettings(StrictModel):
    # auto: hybrid (dense + lexical + BGE-M3 sparse, fused by RRF) over what the
    # collection holds; the others search one vector (sparse: BGE-M3's own).
    mode: SearchModeSetting = "auto"
    # Candidates each vector contributes to a hybrid search, whatever the limit asked (a
    # larger limit asks for that many): the fused list is only cut by the limit, so the
    # first k results are the same for every limit from k up to this.
    prefetch_limit: int = Field(40, gt=0)
    # What a result is (docs/qdrant.md#passages): `passage`, hits that touch in a document
    # joined into one result of at most `passage_tokens` (hits taken until there are as many
    # results as asked), a piece of a split block taking in the rest of it up to that, a
    # hit under `passage_grow_tokens` its neighbours up to that; `none`, each chunk alone;
    # `neighbours` and `section` widen every hit (up to 1024 tokens unless asked otherwise).
    expand: SearchExpandSetting = "passage"
    passage_tokens: int = Field(512, gt=0)
    passage_grow_tokens: int = Field(256, ge=0)


class EvalSettings(StrictModel):
    """The promotion gate of `ingest reindex`: with `questions` set, the alias moves to a
    new collection only if its recall@5 on those questions is not lower than the current
    one's by more than `max_drop`."""

    # A questions file (YAML or JSONL, as `ingest eval` reads it); None: no gate.
    questions: Path | None = None
    # Whose access the gate's searches apply; neither set: no access filter.
    user: str | None = None
    groups: list[str] = Field(default_factory=list)
    max_drop: float = Field(0.02, ge=0, le=1)


class McpClient(StrictModel):
    """One bearer token `ingest mcp --http` accepts, and whose access it carries."""

    token: SecretStr | None = None
    # Name of a Prefect Secret block holding the token (used when `token` is unset).
    token_secret_block: str | None = None
    user: str | None = None
    groups: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _token_and_identity(self) -> McpClient:
        if (self.token is None) == (self.token_secret_block is None):
            raise ValueError("set either token or token_secret_block")
        if self.user is None and not self.groups:
            raise ValueError("set the user or the groups whose access the token carries")
        return self


class McpSettings(StrictModel):
    """`ingest mcp`: how much one answer may hold, and the HTTP clients' tokens."""

    max_results: int = Field(20, gt=0)  # a search's limit is cut to this
    max_text_chars: int = Field(4000, gt=0)  # a result's text is cut to this, said in it
    # Client name -> its token and identity. Set: every HTTP request needs one of them.
    clients: dict[str, McpClient] = Field(default_factory=dict)


class CacheSettings(StrictModel):
    dir: str = ".ingest/cache"
    enabled: bool = True
    fsync: bool = True


class ReconcileSettings(StrictModel):
    max_delete_share: float = Field(0.2, ge=0.0, le=1.0)


class RunSettings(StrictModel):
    batch_size: int = Field(100, gt=0)
    task_runner: Literal["threads", "dask"] = "threads"
    max_workers: int = Field(4, gt=0)
    dask_address: str | None = None
    dask_n_workers: int = Field(2, gt=0)
    task_retries: int = Field(3, ge=0)
    task_retry_delay_s: float = Field(5.0, ge=0)
    malloc_arenas: int = Field(2, ge=0)


class Settings(StrictModel):
    """Every setting. Beside the sections below, one section per source kind (`confluence`,
    `files`, a kind the `sources` setting adds) whose connector class declares a
    `settings_model` (config/sources.py): `section(kind)`. Build it with `load_settings`,
    which validates each source section by its model."""

    # Source sections are the extra entries; `load_settings` refuses any other.
    model_config = ConfigDict(extra="allow", validate_assignment=True, frozen=True)

    tenant_id: str = Field("default", min_length=1)
    chunking: ChunkingSettings = Field(default_factory=ChunkingSettings)  # type: ignore[arg-type]
    limits: LimitsSettings = Field(default_factory=LimitsSettings)  # type: ignore[arg-type]
    pictures: PicturesSettings = Field(default_factory=PicturesSettings)  # type: ignore[arg-type]
    vision: VisionSettings = Field(default_factory=VisionSettings)  # type: ignore[arg-type]
    qdrant: QdrantSettings = Field(default_factory=QdrantSettings)  # type: ignore[arg-type]
    embedder: EmbedderSettings = Field(default_factory=EmbedderSettings)  # type: ignore[arg-type]
    lexical: LexicalSettings = Field(default_factory=LexicalSettings)  # type: ignore[arg-type]
    parts: PartsSettings = Field(default_factory=PartsSettings)  # type: ignore[arg-type]
    search: SearchSettings = Field(default_factory=SearchSettings)  # type: ignore[arg-type]
    eval: EvalSettings = Field(default_factory=EvalSettings)  # type: ignore[arg-type]
    mcp: McpSettings = Field(default_factory=McpSettings)  # type: ignore[arg-type]
    cache: CacheSettings = Field(default_factory=CacheSettings)
    reconcile: ReconcileSettings = Field(default_factory=ReconcileSettings)  # type: ignore[arg-type]
    run: RunSettings = Field(default_factory=RunSettings)  # type: ignore[arg-type]
    # More source kinds: kind -> "module:Class" of its connector (config/sources.py).
    sources: dict[str, str] = Field(default_factory=dict)

    @field_validator("sources")
    @classmethod
    def _sources_name_classes(cls, sources: dict[str, str]) -> dict[str, str]:
        for kind, target in sources.items():
            module, _, name = target.partition(":")
            if not (kind and module and name):
                raise ValueError(f"{kind!r}: {target!r} is no 'module:Class'")
        return sources

    def section(self, kind: str) -> Any:
        """The settings section of source kind `kind` (an instance of its connector's
        `settings_model`), None where the kind has none."""
        return (self.__pydantic_extra__ or {}).get(kind)

    def value(self, dotted: str) -> Any:
        """The setting named `dotted` (`run.batch_size`, `confluence.spaces`), None where
        there is none. A source's section is an extra field: read by attribute too."""
        node: Any = self
        for part in dotted.split("."):
            node = getattr(node, part, None)
        return node


def _validating_model(sections: Mapping[str, type[BaseModel]]) -> type[Settings]:
    """`Settings` with a typed field per source section and no other extra key: what the
    merged layers are validated against, so errors and environment variables name a
    source's settings as they name the others."""
    fields: dict[str, Any] = {
        kind: (model, Field(default_factory=model)) for kind, model in sections.items()
    }
    return create_model("Settings", __base__=Settings, __cls_kwargs__={"extra": "forbid"}, **fields)


# --- loading -------------------------------------------------------------------------

Layer = tuple[str, dict[str, Any]]  # (where it came from, nested values)


def load_settings(
    overrides: Mapping[str, Any] | None = None,
    *,
    config_file: str | Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """Merge every configuration layer and validate the result.

    `overrides` may be nested (`{"chunking": {"max_tokens": 280}}`) or dotted
    (`{"chunking.max_tokens": 280}`); `None` values in it are ignored so that optional
    flow parameters left empty do not erase lower layers.
    """
    env = os.environ if environ is None else environ
    default = str(DEFAULT_CONFIG_PATH)
    layers: list[Layer] = [(default, _aliased(_read_yaml(DEFAULT_CONFIG_PATH), default))]
    user_file = config_file or env.get(CONFIG_FILE_ENV)
    if user_file:
        layers.append((str(user_file), _aliased(_read_yaml(Path(user_file)), str(user_file))))
    parameters = _aliased(_nest(overrides or {}), "parameters")
    model = _validating_model(settings_models(_registered_sources(layers, env, parameters)))
    env_values, env_names = _env_layer(env, model)
    layers.append(("environment", env_values))
    if parameters:
        layers.append(("parameters", parameters))

    profile = next(
        (
            values["chunking"]["profile"]
            for _, values in reversed(layers)
            if isinstance(values.get("chunking"), dict) and values["chunking"].get("profile")
        ),
        None,
    )
    if profile is not None:
        if profile not in PROFILES:
            raise ConfigError(
                f"unknown profile {profile!r}; choose one of {sorted(PROFILES)}",
                setting="chunking.profile",
            )
        layers.insert(1, (f"profile {profile}", {"chunking": dict(PROFILES[profile])}))

    merged: dict[str, Any] = {}
    origin: dict[tuple[str, ...], str] = {}
    for source, values in layers:
        _merge_into(merged, values, source, origin, ())
    for path, name in env_names.items():
        if origin.get(path) == "environment":
            origin[path] = f"environment variable {name}"
    try:
        validated = model.model_validate(merged)
    except ValidationError as exc:
        raise _config_error(exc, origin) from None
    values = {name: getattr(validated, name) for name in model.model_fields}
    return Settings.model_construct(validated.model_fields_set, **values)


def _registered_sources(
    layers: list[Layer], env: Mapping[str, str], parameters: Mapping[str, Any]
) -> dict[str, str]:
    """The `sources` setting as the layers, `INGEST_SOURCES` and the parameters set it,
    well-formed entries only (validation reports the others): whose sections to read."""
    found: dict[str, Any] = {}
    raw = env.get(f"{ENV_PREFIX}SOURCES")
    from_env = _parse_env_value(raw, dict[str, str]) if raw is not None else None
    for values in [*(values.get("sources") for _, values in layers), from_env]:
        if isinstance(values, Mapping):
            found.update(values)
    if isinstance(parameters.get("sources"), Mapping):
        found.update(parameters["sources"])
    return {
        str(kind): target
        for kind, target in found.items()
        if isinstance(target, str) and all(target.partition(":")[::2])
    }


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            f"cannot read configuration file: {exc.strerror}", setting=str(path)
        ) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start}): "
            "save the file as UTF-8",
            setting=str(path),
        ) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"invalid YAML: {_yaml_problem(exc)}", setting=str(path)) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError("the top level must be a mapping of settings", setting=str(path))
    return data


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """What is wrong and where, without the text around it: PyYAML's own message quotes
    the failing line, which may hold a secret (`token: "...`)."""
    if not isinstance(exc, yaml.MarkedYAMLError):
        return type(exc).__name__
    parts = [
        f"{text} (line {mark.line + 1}, column {mark.column + 1})" if mark else text
        for text, mark in ((exc.context, exc.context_mark), (exc.problem, exc.problem_mark))
        if text
    ]
    return ", ".join(parts) or "malformed"


def _env_layer(
    env: Mapping[str, str], model: type[Settings]
) -> tuple[dict[str, Any], dict[tuple[str, ...], str]]:
    """The settings the environment sets, and the variable that set each of them."""
    values: dict[str, Any] = {}
    names: dict[tuple[str, ...], str] = {}
    adr = {k: v for k, v in env.items() if k in ADR_ENV_NAMES}
    for name, raw in sorted(adr.items()):
        _set_path(values, ADR_ENV_NAMES[name], raw)
        names[ADR_ENV_NAMES[name]] = name
    for name, raw in sorted(env.items()):
        if not name.startswith(ENV_PREFIX) or name == CONFIG_FILE_ENV:
            continue
        path = tuple(part.lower() for part in name[len(ENV_PREFIX) :].split("__"))
        path = ALIASES.get(path, path)
        field = _field_for(path, model)
        if field is None:
            raise ConfigError(
                "unknown setting in the environment; see the configuration reference in "
                "docs/configuration.md for the names",
                setting=name,
            )
        other = names.get(path)
        if other is not None and other.startswith(ENV_PREFIX) and env[other] != raw:
            raise ConfigError(
                f"{other} ({env[other]}) and {name} ({raw}) name one setting: set one of them",
                setting=".".join(path),
            )
        _set_path(values, path, _parse_env_value(raw, field))
        names[path] = name
    return values, names


def _field_for(path: tuple[str, ...], model: type[BaseModel]) -> Any | None:
    for i, part in enumerate(path):
        info = model.model_fields.get(part)
        if info is None:
            return None
        annotation = info.annotation
        if i == len(path) - 1:
            return annotation
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return None
        model = annotation
    return None


def _parse_env_value(raw: str, annotation: Any) -> Any:
    origin = getattr(annotation, "__origin__", None)
    if origin is dict:
        try:
            return json.loads(raw)
        except json.JSONDecodeError:
            return raw  # refused by validation, naming the variable
    if origin is list:
        text = raw.strip()
        if text.startswith("["):
            try:
                return json.loads(text)
            except json.JSONDecodeError:
                return raw
        return [item.strip() for item in text.split(",") if item.strip()]
    return raw


def _aliased(values: dict[str, Any], source: str) -> dict[str, Any]:
    """A layer's values with every setting named by an earlier name renamed (`ALIASES`),
    into its section; a layer naming both with different values is refused."""
    for (section, old), (new_section, new) in ALIASES.items():
        inner = values.get(section)
        if not (isinstance(inner, dict) and old in inner):
            continue
        value = inner.pop(old)
        if not inner:
            del values[section]
        target = values.setdefault(new_section, {})
        if not isinstance(target, dict):
            continue  # not a mapping: validation names the section
        if target.setdefault(new, value) != value:
            raise ConfigError(
                f"{section}.{old} ({value}) is another name of {new_section}.{new} "
                f"({target[new]}): set one of them (from {source})",
                setting=f"{new_section}.{new}",
            )
    return values


def _nest(overrides: Mapping[str, Any]) -> dict[str, Any]:
    nested: dict[str, Any] = {}
    for key, value in overrides.items():
        if value is None:
            continue
        if isinstance(value, Mapping):
            inner = _nest(value)
            if inner:
                _set_path(nested, tuple(key.split(".")), inner)
        else:
            _set_path(nested, tuple(key.split(".")), value)
    return nested


def _set_path(target: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    node = target
    for part in path[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    existing = node.get(path[-1])
    if isinstance(existing, dict) and isinstance(value, dict):
        existing.update(value)
    else:
        node[path[-1]] = value


def _merge_into(
    target: dict[str, Any],
    values: Mapping[str, Any],
    source: str,
    origin: dict[tuple[str, ...], str],
    prefix: tuple[str, ...],
) -> None:
    for key, value in values.items():
        path = (*prefix, str(key))
        if isinstance(value, Mapping):
            if not isinstance(target.get(key), dict):
                target[key] = {}
                origin[path] = source
            _merge_into(target[key], value, source, origin, path)
        else:
            target[key] = value
            origin[path] = source


def _config_error(exc: ValidationError, origin: Mapping[tuple[str, ...], str]) -> ConfigError:
    first = exc.errors()[0]
    path = tuple(str(p) for p in first["loc"])
    setting = ".".join(path) or "settings"
    where = _origins(path, first["msg"], origin)
    if first["type"] == "extra_forbidden":
        # an unknown section is named with the layer that brought it, whatever it holds
        where = f" (from {origin[path]})" if path in origin else where
        message = f"unknown setting{where}; check its spelling against config/config.yaml"
    else:
        message = f"{first['msg'].removeprefix('Value error, ')}{where}"
    extra = len(exc.errors()) - 1
    if extra:
        message += f" (and {extra} more problem{'s' if extra > 1 else ''})"
    return ConfigError(message, setting=setting)


def _origins(path: tuple[str, ...], message: str, origin: Mapping[tuple[str, ...], str]) -> str:
    """Where the values behind an error came from: the leaf's layer, or for a cross-field
    error (`chunking.min_tokens (400) must be <= ...`) the layer of each setting named."""
    if path in origin and not any(key[: len(path)] == path for key in origin if key != path):
        return f" (from {origin[path]})"
    named = [
        key
        for key in origin
        if len(key) == len(path) + 1 and key[: len(path)] == path and ".".join(key) in message
    ]
    sources = [f"{'.'.join(key)} from {origin[key]}" for key in sorted(named)]
    return f" ({'; '.join(sources)})" if sources else ""
