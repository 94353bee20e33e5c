"""The content-addressed stage cache: keys, atomic and verified entries, concurrency,
report and prune, the embedding codec, `cached` and `embed_with_cache`."""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from pydantic import SecretStr

from config.settings import CacheSettings, EmbedderSettings, Settings, load_settings
from connectors.confluence.settings import ConfluenceSettings
from indexing.embed_cache import decode_embedding, embed_key, embed_with_cache, encode_embedding
from indexing.embedders import Embedding
from stage_cache.cached import JSON, cached
from stage_cache.keys import CacheKey, config_hash, stage_key
from stage_cache.store import StageCache

KEY = stage_key("chunk", "1", "cfg", "a" * 64)


@pytest.fixture
def cache(tmp_path: Path) -> StageCache:
    return StageCache(tmp_path / "cache")


def test_keys_depend_on_every_part():
    keys = {
        stage_key("chunk", "1", "cfg", "in"),
        stage_key("normalize", "1", "cfg", "in"),
        stage_key("chunk", "2", "cfg", "in"),
        stage_key("chunk", "1", "cfg2", "in"),
        stage_key("chunk", "1", "cfg", "in2"),
    }
    assert len({k.digest for k in keys}) == 5
    assert stage_key("chunk", "1", "cfg", "in") == stage_key("chunk", "1", "cfg", "in")
    assert embed_key("m1", "text").digest != embed_key("m2", "text").digest
    assert len(KEY.digest) == 64


def test_config_hash_ignores_secrets_and_follows_everything_else():
    base = ConfluenceSettings.model_validate({"url": "https://wiki", "token": "one"})
    other_token = base.model_copy(update={"token": SecretStr("two")})
    other_url = base.model_copy(update={"url": "https://other"})
    assert config_hash(base) == config_hash(other_token)
    assert config_hash(base) != config_hash(other_url)
    assert config_hash({"a": 1, "api_key": "k1"}) == config_hash({"a": 1, "api_key": "k2"})
    assert config_hash({"a": 1, "b": [1, 2]}) == config_hash({"b": [1, 2], "a": 1})
    embedder = EmbedderSettings.model_validate({"api_key": "sk-secret"})
    assert "sk-secret" not in str(config_hash(embedder))


def test_round_trip_and_json_helpers(cache):
    assert cache.get(KEY) is None
    cache.put(KEY, b"\x00binary\xff")
    assert cache.get(KEY) == b"\x00binary\xff"
    json_key = stage_key("normalize", "1", "cfg", "b" * 64)
    cache.put_json(json_key, {"markdown": "# Заголовок", "pages": [1, 2]})
    assert cache.get_json(json_key) == {"markdown": "# Заголовок", "pages": [1, 2]}
    assert cache.path(KEY).parent.parent.name == "chunk"


def test_truncated_entry_is_a_miss_and_is_removed(cache):
    cache.put(KEY, b"x" * 1000)
    path = cache.path(KEY)
    path.write_bytes(path.read_bytes()[:500])  # as if a crash cut the file
    assert cache.get(KEY) is None
    assert not path.exists()


def test_corrupted_entry_is_a_miss_and_is_removed(cache):
    cache.put(KEY, b"payload-bytes")
    path = cache.path(KEY)
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x01
    path.write_bytes(bytes(data))
    assert cache.get(KEY) is None and not path.exists()
    path.write_bytes(b"")  # an empty file
    assert cache.get(KEY) is None and not path.exists()


def test_failed_write_leaves_no_entry_and_no_temp_file(cache, monkeypatch):
    def broken_fsync(fd: int) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="disk full"):
        cache.put(KEY, b"value")
    monkeypatch.undo()
    assert cache.get(KEY) is None
    assert list(cache.path(KEY).parent.iterdir()) == []


def test_concurrent_threads_writing_one_key_leave_one_valid_entry(cache):
    value = os.urandom(256 * 1024)
    seen: list[bytes | None] = []
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            for _ in range(20):
                cache.put(KEY, value)
                seen.append(cache.get(KEY))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    # Every read saw either nothing yet or the whole value, never a partial one.
    assert {s for s in seen if s is not None} == {value}
    assert cache.get(KEY) == value
    assert [p.name for p in cache.path(KEY).parent.iterdir()] == [KEY.digest]


def _process_writer(root: str, rounds: int) -> None:
    cache = StageCache(root)
    for i in range(rounds):
        cache.put(stage_key("chunk", "1", "cfg", str(i % 5)), f"value {i % 5}".encode() * 1000)


def test_concurrent_processes_writing_the_same_keys(tmp_path):
    root = str(tmp_path / "cache")
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_process_writer, args=(root, 40)) for _ in range(3)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
    assert [w.exitcode for w in workers] == [0, 0, 0]
    cache = StageCache(root)
    for i in range(5):
        assert cache.get(stage_key("chunk", "1", "cfg", str(i))) == f"value {i}".encode() * 1000
    assert cache.report().entries == 5 and cache.report().temp_files == 0


def test_report_counts_entries_and_bytes_per_stage(cache):
    cache.put(stage_key("normalize", "1", "c", "1"), b"a" * 100)
    cache.put(stage_key("normalize", "1", "c", "2"), b"b" * 50)
    cache.put(embed_key("model", "text"), b"c" * 10)
    report = cache.report()
    assert set(report.stages) == {"normalize", "embed"}
    assert report.stages["normalize"].entries == 2 and report.stages["embed"].entries == 1
    assert report.entries == 3
    # Each entry is its payload plus a fixed header.
    header = report.stages["embed"].bytes - 10
    assert report.bytes == 160 + 3 * header


def test_prune_by_age_by_size_and_abandoned_temp_files(cache):
    now = time.time()
    keys = [stage_key("chunk", "1", "c", str(i)) for i in range(4)]
    for age_days, key in zip((10, 3, 2, 0), keys, strict=True):
        cache.put(key, b"v" * 1000)
        stamp = now - age_days * 86400
        os.utime(cache.path(key), (stamp, stamp))
    temp = cache.path(keys[0]).parent / ".tmp-dead-writer"
    temp.write_bytes(b"half")
    os.utime(temp, (now - 7200, now - 7200))

    by_age = cache.prune(max_age_s=7 * 86400)
    assert by_age.removed == 2  # the 10-day entry and the abandoned temp file
    assert cache.get(keys[0]) is None and not temp.exists()

    entry_size = cache.path(keys[1]).stat().st_size
    by_size = cache.prune(max_bytes=entry_size + 10)  # room for one: the newest stays
    assert (by_size.removed, by_size.freed_bytes) == (2, 2 * entry_size)
    assert cache.get(keys[3]) == b"v" * 1000
    assert cache.get(keys[1]) is None and cache.get(keys[2]) is None


def test_prune_and_report_leave_state_links_and_connector_files_alone(cache, tmp_path):
    """The run state, link records and files-connector state live in the cache directory
    too; pruning them would lose links of unchanged documents for good."""
    from tasks.links import LinkStore, StoredLink
    from tasks.state import DocumentState, SyncState

    cache.put(KEY, b"v" * 100)
    root = cache.root
    state = SyncState(root / "state" / "abc.json")
    state.update({"doc": DocumentState("1", "fp")})
    links = LinkStore(root, "default")
    links.put("doc", [StoredLink("https://example.com", "external")])
    links.mark_unpushed(["doc"])
    (root / "files").mkdir()
    (root / "files" / "0123456789abcdef.json").write_text("{}")
    old = time.time() - 365 * 86400
    for path in root.rglob("*"):
        os.utime(path, (old, old))

    assert set(cache.report().stages) == {"chunk"}
    assert cache.entry_keys() == [KEY]
    assert cache.prune(max_age_s=1, max_bytes=0).removed == 1  # the one entry
    assert SyncState(root / "state" / "abc.json").get("doc") == DocumentState("1", "fp")
    assert [link.target_url for link in links.outgoing("doc")] == ["https://example.com"]
    assert links.unpushed() == ["doc"]
    assert (root / "files" / "0123456789abcdef.json").exists()


def _record_states(path: str, worker: int) -> None:
    from tasks.state import DocumentState, SyncState

    for i in range(20):
        SyncState(Path(path)).update({f"w{worker}-{i}": DocumentState(str(i), "fp")})


def test_concurrent_state_updates_from_threads_and_processes_lose_nothing(tmp_path):
    """Index batches record their documents concurrently, each through its own SyncState
    read at its start (threads of one run, Dask worker processes): every update lands."""
    from tasks.state import SyncState

    path = str(tmp_path / "state" / "scope.json")
    threads = [threading.Thread(target=_record_states, args=(path, w)) for w in range(3)]
    processes = [
        multiprocessing.get_context("spawn").Process(target=_record_states, args=(path, w))
        for w in range(3, 5)
    ]
    workers: list[threading.Thread | multiprocessing.process.BaseProcess] = [*threads, *processes]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    state = SyncState(Path(path))
    missing = [f"w{w}-{i}" for w in range(5) for i in range(20) if state.get(f"w{w}-{i}") is None]
    assert missing == []


def test_source_log_keeps_each_scopes_last_sync_per_tenant(tmp_path):
    """Runs of several sources (and tenants) finish concurrently: each keeps its entry;
    a reader sees only the targets among the containers it may search."""
    from stage_cache.sync_log import SourceLog, SourceSync

    log = SourceLog(tmp_path / "state" / "sources.json")

    def run(tenant: str, scope: str, at: str) -> None:
        kind, _, targets = scope.partition(":")
        log.record(tenant, SourceSync(scope, kind, tuple(targets.split(",")), at, "ok", 3))

    runs = [
        threading.Thread(target=run, args=(tenant, scope, f"2026-11-26T1{i}:00:00+00:00"))
        for i, (tenant, scope) in enumerate(
            [("acme", "confluence:ENG,HR"), ("acme", "file:/share"), ("globex", "file:/share")]
        )
    ]
    for thread in runs:
        thread.start()
    for thread in runs:
        thread.join(30)
    run("acme", "file:/share", "2026-11-26T19:00:00+00:00")  # the same scope again: replaced

    acme = {sync.scope: sync for sync in log.read("acme")}
    assert set(acme) == {"confluence:ENG,HR", "file:/share"}
    assert acme["file:/share"].last_sync == "2026-11-26T19:00:00+00:00"
    assert [sync.scope for sync in log.read("globex")] == ["file:/share"]
    visible = acme["confluence:ENG,HR"].visible_part({"ENG": 12})
    assert (visible.scope, visible.targets) == ("confluence:ENG", ("ENG",))

    (tmp_path / "state" / "sources.json").write_text("{not json")
    assert log.read("acme") == []  # unreadable: listed again after the next runs

    (tmp_path / "blocked").write_text("")  # a file where the log's directory would be
    SourceLog(tmp_path / "blocked" / "sources.json").record(  # a run does not fail on it
        "acme", SourceSync("file:/share", "file", ("/share",), "2026-11-26", "ok", 1)
    )


def test_a_read_refreshes_an_old_entry_for_prune(cache):
    cache.put(KEY, b"v")
    old = time.time() - 30 * 86400
    os.utime(cache.path(KEY), (old, old))
    assert cache.get(KEY) == b"v"
    assert cache.prune(max_age_s=86400).removed == 0


def test_disabled_cache_stores_nothing(tmp_path):
    cache = StageCache.from_settings(
        CacheSettings.model_validate({"dir": str(tmp_path / "c"), "enabled": False})
    )
    cache.put(KEY, b"v")
    assert cache.get(KEY) is None and not (tmp_path / "c").exists()


def test_stage_names_cannot_escape_the_cache_directory(cache):
    with pytest.raises(ValueError, match="stage name"):
        cache.path(CacheKey("../etc", "0" * 64))


# --- embeddings -----------------------------------------------------------------------


def test_embedding_codec_round_trips_float32():
    dense = [0.1, -0.25, 0.5, 1e-7]
    with_sparse = Embedding(dense=dense, sparse={5: 0.75, 250001: 0.125})
    decoded = decode_embedding(encode_embedding(with_sparse))
    assert decoded.sparse == {5: 0.75, 250001: 0.125}
    assert all(abs(a - b) < 1e-7 for a, b in zip(decoded.dense, dense, strict=True))
    assert decode_embedding(encode_embedding(Embedding(dense=dense))).sparse is None
    assert decode_embedding(encode_embedding(Embedding(dense=dense, sparse={}))).sparse == {}
    # 4 bytes per dimension: a 1024-d BGE-M3 vector is about 4 KiB.
    assert len(encode_embedding(Embedding(dense=[0.0] * 1024))) == 8 + 4096


class LengthEmbedder:
    """A deterministic real embedder (vector from the text's length and first char)."""

    has_sparse = False
    vector_size = 2

    def __init__(self, model_id: str = "length-v1") -> None:
        self.model_id = model_id
        self.calls: list[list[str]] = []

    def embed(self, texts: Sequence[str]) -> list[Embedding]:
        self.calls.append(list(texts))
        return [Embedding(dense=[float(len(t)), float(ord(t[0]))]) for t in texts]


def test_embed_with_cache_embeds_each_new_text_once(cache):
    embedder = LengthEmbedder()
    first = embed_with_cache(embedder, ["aa", "bbb", "aa"], cache)
    assert embedder.calls == [["aa", "bbb"]]
    assert (first.hits, first.misses) == (0, 2)
    assert [e.dense for e in first.values] == [[2.0, 97.0], [3.0, 98.0], [2.0, 97.0]]

    second = embed_with_cache(embedder, ["bbb", "cccc", "aa"], cache)
    assert embedder.calls[1:] == [["cccc"]]
    assert (second.hits, second.misses) == (2, 1)
    assert [e.dense[0] for e in second.values] == [3.0, 4.0, 2.0]

    other_model = LengthEmbedder("length-v2")
    embed_with_cache(other_model, ["aa"], cache)
    assert other_model.calls == [["aa"]]  # a new model id never reuses old vectors


def test_embed_with_cache_hit_path_makes_no_call(cache):
    embedder = LengthEmbedder()
    embed_with_cache(embedder, ["x", "y"], cache)
    embeddings, hits, misses = embed_with_cache(embedder, ["y", "x"], cache)
    assert len(embedder.calls) == 1 and (hits, misses) == (2, 0)
    assert [e.dense for e in embeddings] == [[1.0, 121.0], [1.0, 120.0]]


def test_cached_computes_once_and_a_forced_stage_reads_nothing_but_writes(cache):
    computed: list[str] = []

    def compute() -> dict[str, str]:
        computed.append("x")
        return {"value": str(len(computed))}

    assert cached(cache, KEY, compute, JSON) == ({"value": "1"}, False)
    assert cached(cache, KEY, compute, JSON) == ({"value": "1"}, True)
    assert cached(cache, KEY, compute, JSON, reuse=False) == ({"value": "2"}, False)
    assert cache.get_json(KEY) == {"value": "2"} and len(computed) == 2


def test_stage_keys_follow_only_their_own_configuration():
    """Changing the chunk budget changes the chunk key, not the normalize key; changing
    the model changes embedding keys only (docs/architecture.md#the-stage-cache)."""
    settings = load_settings(environ={})
    tighter = load_settings({"chunking.max_tokens": 280}, environ={})
    source = "f" * 64

    def keys(s: Settings) -> tuple[CacheKey, CacheKey]:
        normalize = stage_key("normalize", "1", config_hash(s.limits), source)
        chunk = stage_key("chunk", "1", config_hash(s.chunking), "normalized-sha")
        return normalize, chunk

    assert keys(settings)[0] == keys(tighter)[0]
    assert keys(settings)[1] != keys(tighter)[1]
    assert embed_key("model-a", "text") != embed_key("model-b", "text")


def test_without_fsync_entries_are_still_atomic_and_verified(tmp_path, monkeypatch):
    synced: list[int] = []
    monkeypatch.setattr(os, "fsync", synced.append)
    cache = StageCache.from_settings(
        CacheSettings.model_validate({"dir": str(tmp_path / "c"), "fsync": False})
    )
    cache.put(KEY, b"value" * 100)
    assert synced == [] and cache.get(KEY) == b"value" * 100
    path = cache.path(KEY)
    path.write_bytes(path.read_bytes()[:-1])  # a torn write after power loss
    assert cache.get(KEY) is None and not path.exists()
    StageCache(tmp_path / "d").put(KEY, b"v")
    assert len(synced) == 1  # the default syncs
