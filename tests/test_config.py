"""Settings: precedence, short budget names, profiles, refusals that name the setting, secrets."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from config.errors import ConfigError
from config.settings import PROFILES, Settings, load_settings
from config.sources import settings_models
from tests.toy_source import ToySettings

# The toy source kind (tests/toy_source.py), registered through the `sources` setting.
TOY_SOURCE = json.dumps({"toy": "tests.toy_source:ToyConnector"})


def test_defaults_come_from_config_yaml() -> None:
    settings = load_settings(environ={})
    assert settings.chunking.max_tokens == 300
    assert settings.chunking.min_tokens == 150
    assert settings.qdrant.path == ".ingest/qdrant"
    assert settings.qdrant.collection == "chunks"
    assert settings.embedder.kind == "bge-m3"
    assert settings.tenant_id == "default"


def test_every_field_has_its_default_written_in_config_yaml() -> None:
    import yaml

    from config.settings import DEFAULT_CONFIG_PATH

    written = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text("utf-8"))
    model_defaults = Settings().model_dump()  # type: ignore[call-arg]
    # A source's section holds its defaults in its connector's settings model; written in
    # config.yaml (the built-in ones are), it must say every one of them.
    sources = {kind: model().model_dump() for kind, model in settings_models({}).items()}
    model_defaults |= {kind: values for kind, values in sources.items() if kind in written}
    assert set(model_defaults) >= {"confluence", "files"}
    for section, values in model_defaults.items():
        if isinstance(values, dict):
            assert set(written[section]) == set(values), section
            for key, value in values.items():
                assert written[section][key] == value, f"{section}.{key}"
        else:
            assert written[section] == values


def test_precedence_file_then_env_then_parameters(tmp_path: Path) -> None:
    user = tmp_path / "user.yaml"
    user.write_text("chunking:\n  max_tokens: 280\n  target_tokens: 240\ntenant_id: from-file\n")
    env = {"INGEST_CONFIG": str(user), "INGEST_TENANT_ID": "from-env"}
    settings = load_settings(environ=env)
    assert (settings.chunking.max_tokens, settings.chunking.target_tokens) == (280, 240)
    assert settings.tenant_id == "from-env"
    settings = load_settings({"tenant_id": "from-param", "chunking.max_tokens": 290}, environ=env)
    assert settings.tenant_id == "from-param"
    assert settings.chunking.max_tokens == 290
    assert settings.chunking.target_tokens == 240


def test_adr_names_and_nested_env_names() -> None:
    env = {
        "CHUNK_MAX_TOKENS": "280",
        "CHUNK_MIN_TOKENS": "120",
        "CHUNK_OVERLAP_BASE": "40",
        "CHUNK_TARGET_TOKENS": "200",
        "CHUNK_OVERSIZE_BLOCK_LIMIT": "500",
        "INGEST_QDRANT__URL": "http://127.0.0.1:6333",
        "INGEST_CONFLUENCE__SPACES": "ENG, OPS",
    }
    settings = load_settings(environ=env)
    c = settings.chunking
    assert (c.min_tokens, c.target_tokens, c.max_tokens, c.overlap_tokens) == (120, 200, 280, 40)
    assert c.oversize_block_limit == 500
    assert settings.qdrant.url == "http://127.0.0.1:6333"
    assert settings.section("confluence").spaces == ["ENG", "OPS"]


def test_ingest_name_wins_over_adr_name() -> None:
    env = {"CHUNK_MAX_TOKENS": "280", "INGEST_CHUNKING__MAX_TOKENS": "290"}
    assert load_settings(environ=env).chunking.max_tokens == 290


@pytest.mark.parametrize(
    ("env", "setting", "fragment"),
    [
        ({"INGEST_QDRANT__URLL": "x"}, "INGEST_QDRANT__URLL", "unknown setting"),
        ({"CHUNK_MAX_TOKENS": "many"}, "chunking.max_tokens", "valid integer"),
        ({"CHUNK_MIN_TOKENS": "400"}, "chunking", "chunking.min_tokens (400) must be <="),
        ({"CHUNK_OVERLAP_BASE": "150"}, "chunking", "chunking.overlap_tokens (150) must be <"),
        ({"INGEST_EMBEDDER__KIND": "word2vec"}, "embedder.kind", "bge-m3"),
        ({"INGEST_CHUNKING__PROFILE": "huge"}, "chunking.profile", "unknown profile"),
        # a source's section, validated by its connector's settings model
        ({"INGEST_CONFLUENCE__URLL": "x"}, "INGEST_CONFLUENCE__URLL", "unknown setting"),
        ({"INGEST_CONFLUENCE__PAGE_SIZE": "900"}, "confluence.page_size", "less than or equal"),
        ({"INGEST_FILES__PATH": "/x"}, "INGEST_FILES__PATH", "unknown setting"),
        ({"INGEST_WIKI__URL": "x"}, "INGEST_WIKI__URL", "unknown setting"),
        ({"INGEST_SOURCES": '{"wiki": "no_such.module:Wiki"}'}, "sources", "cannot import"),
    ],
)
def test_bad_settings_are_refused_naming_the_setting(
    env: dict[str, str], setting: str, fragment: str
) -> None:
    with pytest.raises(ConfigError) as error:
        load_settings(environ=env)
    assert error.value.subject == setting
    assert fragment in str(error.value)


@pytest.mark.parametrize(
    ("text", "setting"),
    [
        ("qdrant:\n  colection: typo\n", "qdrant.colection"),
        ("confluence:\n  spaces: [ENG]\n  space: OPS\n", "confluence.space"),
        ("wiki:\n  url: x\n", "wiki"),
    ],
)
def test_unknown_key_in_a_file_names_key_and_file(tmp_path: Path, text: str, setting: str) -> None:
    user = tmp_path / "bad.yaml"
    user.write_text(text)
    with pytest.raises(ConfigError) as error:
        load_settings(config_file=user, environ={})
    assert error.value.subject == setting
    assert str(user) in str(error.value)


def test_profile_sets_budgets_and_explicit_numbers_still_win() -> None:
    settings = load_settings(environ={"INGEST_CHUNKING__PROFILE": "seed-000"})
    assert settings.chunking.max_tokens == PROFILES["seed-000"]["max_tokens"]
    assert settings.chunking.target_tokens == 650
    settings = load_settings(
        {"chunking": {"max_tokens": 850}}, environ={"INGEST_CHUNKING__PROFILE": "seed-000"}
    )
    assert settings.chunking.max_tokens == 850
    assert settings.chunking.min_tokens == 120


def test_every_profile_is_a_valid_configuration() -> None:
    for name in PROFILES:
        assert load_settings({"chunking.profile": name}, environ={}).chunking.profile == name


def test_secrets_print_masked_and_survive_pickling() -> None:
    settings = load_settings(
        environ={"INGEST_CONFLUENCE__TOKEN": "tok-s3cret", "INGEST_QDRANT__API_KEY": "qk-s3cret"}
    )
    for text in (repr(settings), str(settings), settings.model_dump_json()):
        assert "s3cret" not in text
    assert settings.section("confluence").token is not None
    assert settings.section("confluence").token.get_secret_value() == "tok-s3cret"
    assert pickle.loads(pickle.dumps(settings)) == settings


def test_config_error_pickles_with_its_setting() -> None:
    error = ConfigError("bad", setting="chunking.max_tokens")
    clone = pickle.loads(pickle.dumps(error))
    assert (clone.subject, clone.message, str(clone)) == (error.subject, "bad", str(error))


def test_cross_field_error_names_where_each_value_came_from(tmp_path: Path) -> None:
    user = tmp_path / "user.yaml"
    user.write_text("chunking:\n  max_tokens: 280\n")
    with pytest.raises(ConfigError) as error:
        load_settings(config_file=user, environ={"CHUNK_MIN_TOKENS": "290"})
    message = str(error.value)
    assert "chunking.min_tokens from environment variable CHUNK_MIN_TOKENS" in message
    assert "chunking.target_tokens from" in message and "config.yaml" in message
    with pytest.raises(ConfigError) as error:
        load_settings(config_file=user, environ={"INGEST_CHUNKING__TARGET_TOKENS": "290"})
    assert f"chunking.max_tokens from {user}" in str(error.value)
    assert "environment variable INGEST_CHUNKING__TARGET_TOKENS" in str(error.value)


@pytest.mark.parametrize(
    "text",
    [
        'confluence:\n  token: "SECRET-VALUE-123\n  url: x\n',
        "confluence:\n  token: [SECRET-VALUE-123\n",
        "qdrant:\n  api_key: SECRET-VALUE-123: nested: colon\n",
        "confluence:\n\ttoken: SECRET-VALUE-123\n",
    ],
)
def test_a_yaml_error_names_the_place_but_never_echoes_the_text(tmp_path: Path, text: str) -> None:
    user = tmp_path / "secret.yaml"
    user.write_text(text)
    with pytest.raises(ConfigError) as error:
        load_settings(config_file=user, environ={})
    message = str(error.value)
    assert "SECRET-VALUE" not in message
    assert str(user) in message and "invalid YAML" in message and "line " in message


def test_a_config_file_that_is_not_utf8_gets_one_clear_error(tmp_path: Path) -> None:
    user = tmp_path / "latin1.yaml"
    user.write_bytes("tenant_id: café\n".encode("latin-1"))
    with pytest.raises(ConfigError) as error:
        load_settings(config_file=user, environ={})
    assert error.value.subject == str(user)
    assert "not UTF-8" in error.value.message and "0xe9" in error.value.message


def test_a_plugin_source_setting_is_validated_by_its_own_model() -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings(environ={"INGEST_SOURCES": TOY_SOURCE, "INGEST_TOY__SHELFS": "toys"})
    assert refused.value.subject == "INGEST_TOY__SHELFS"
    with pytest.raises(ConfigError) as refused:
        load_settings(
            {"toy": {"base_url": ["not", "text"]}}, environ={"INGEST_SOURCES": TOY_SOURCE}
        )
    assert refused.value.subject == "toy.base_url"
    settings = load_settings(environ={"INGEST_SOURCES": TOY_SOURCE, "INGEST_TOY__SHELVES": "a, b"})
    assert settings.section("toy") == ToySettings(shelves=["a", "b"])
