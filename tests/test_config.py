"""Configuration: spec defaults, validation errors naming the key, TOML file handling."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

from tests.lazy import lazy_import

# The plugin package is importable only once NoneBot has loaded it (pitfall P10).
C = lazy_import("amrita_plugin_memory.core.config")

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT.parent / "shared" / "spec" / "amrita_plugin_memory-0.4.0.md"

SPEC_ENV_DEFAULTS = {
    "VECTOR_DB_TYPE": "local",
    "VECTOR_DB_SERVER": "127.0.0.1",
    "VECTOR_DB_PORT": 8000,
    "VECTOR_DB_SERVER_SSL": False,
    "VECTOR_DB_REMOTE_HEADERS": {},
    "VECTOR_DB_TENANT": "default",
    "VECTOR_DB_DATABASE": "default",
    "EMBEDDING_MODEL_URL": "http://127.0.0.1:11434",
    "EMBEDDING_MODEL_NAME": "auto",
    "EMBEDDING_PROCTOL": "ollama-embed",
    "EMBEDDING_MODEL_API_KEY": "",
    "EMBED_CHECK_ON_STARTUP": True,
    "EMBED_MISMATCH_POLICY": "ask",
    "REEMBED_BATCH_SIZE": 64,
    "REEMBED_BACKUP_KEEP": 3,
}


def test_env_defaults_match_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in SPEC_ENV_DEFAULTS:
        monkeypatch.delenv(key, raising=False)
    env = C.EnvConfig.load({})
    for key, value in SPEC_ENV_DEFAULTS.items():
        assert getattr(env, key.lower()) == value, key


def test_env_reads_overrides_case_insensitively() -> None:
    env = C.EnvConfig.load(
        {"VECTOR_DB_TYPE": "remote", "vector_db_port": "9000", "EMBEDDING_PROCTOL": "openai"}
    )
    assert env.vector_db_type == "remote"
    assert env.vector_db_port == 9000
    assert env.embedding_proctol == "openai"


def test_env_reads_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REEMBED_BATCH_SIZE", "16")
    assert C.EnvConfig.load({}).reembed_batch_size == 16


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("EMBED_MISMATCH_POLICY", "sometimes", "'ask', 'auto' or 'never'"),
        ("VECTOR_DB_TYPE", "cloud", "'local' or 'remote'"),
        ("EMBEDDING_PROCTOL", "ollama", "'openai', 'ollama-embed' or 'local'"),
        ("REEMBED_BATCH_SIZE", 0, "ge 1"),
        ("REEMBED_BATCH_SIZE", 100000, "le 2048"),
        ("REEMBED_BACKUP_KEEP", 0, "ge 1"),
        ("VECTOR_DB_PORT", 70000, "le 65535"),
    ],
)
def test_env_bad_value_names_key_and_allowed_values(key: str, value: object, expected: str) -> None:
    with pytest.raises(C.ConfigError) as info:
        C.EnvConfig.load({key: value})
    message = str(info.value)
    assert key in message
    assert expected in message
    assert "Traceback" not in message


def test_env_example_lists_every_key_with_its_default() -> None:
    example = (ROOT / ".env.example").read_text(encoding="utf-8")
    lines = [line for line in example.splitlines() if line and not line.startswith("#")]
    assert "\n".join(lines) + "\n" == C.env_example()
    for key in SPEC_ENV_DEFAULTS:
        assert re.search(rf"^{key}=", example, re.M), key


def test_spec_env_table_matches_config() -> None:
    """Every env key of the spec's table exists in C.EnvConfig with the spec's default."""
    if not SPEC.exists():
        pytest.skip("spec not available")
    text = SPEC.read_text(encoding="utf-8")
    table = text[text.index("### 环境变量") :]
    keys = re.findall(r"^\| `([A-Z_]+)`", table, re.M)
    assert set(keys) == set(SPEC_ENV_DEFAULTS)


def test_config_file_created_with_spec_defaults(tmp_path: Path) -> None:
    path = tmp_path / "amrita_plugin_memory" / "config.toml"
    warnings: list[str] = []
    config = C.load_config_file(path, warn=warnings.append)
    assert path.exists() and not warnings
    raw = tomllib.loads(path.read_text(encoding="utf-8"))
    assert raw["per_session_memory_limit"] == 50
    assert raw["memo_max_chars"] == 1000
    assert raw["short_term_expiry_days"] == 7 and raw["long_term_expiry_days"] == 90
    sub = raw["subconscious"]
    assert sub == {
        "enabled": False,
        "target_user_id": "",
        "allowed_tools": [],
        "max_iterations": 10,
        "loop_detect_threshold": 3,
        "rethink_base_delay_minutes": 30,
        "rethink_penalty_multiplier": 1.5,
        "rethink_max_delay_minutes": 1440,
        "prompt_file": "prompt/subconscious_main.md.jinja2",
        "prompt_send_file": "prompt/subconscious_send.md.jinja2",
        "prompt_knowledge_file": "prompt/knowledge_guide.md.jinja2",
        "prompt_profile_file": "prompt/profile_guide.md.jinja2",
        "enable_memory_compress": True,
        "allow_send_to_user": False,
        "memory_warn_threshold": 100,
        "max_abstracts": 5,
        "knowledge_max_chars": 10000,
        "knowledge_collection_name": "amrita_global_knowledge",
        "enable_knowledge": True,
        "knowledge_suggest_from": "target",  # not in the spec (tests/test_permissions.py)
    }
    assert config == C.ConfigFile()
    # Loading the written file again gives the same object, silently.
    assert C.load_config_file(path, warn=warnings.append) == config and not warnings


def test_spec_toml_example_matches_defaults() -> None:
    if not SPEC.exists():
        pytest.skip("spec not available")
    text = SPEC.read_text(encoding="utf-8")
    block = text[text.index("```toml\n# L2 记忆") + len("```toml\n") :]
    block = block[: block.index("```")]
    assert C.ConfigFile.model_validate(tomllib.loads(block)) == C.ConfigFile()


def test_unknown_keys_only_warn(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(
        "memo_max_chars = 500\nfuture_key = 1\n[subconscious]\nenabled = true\nnew_thing = 'x'\n",
        encoding="utf-8",
    )
    warnings: list[str] = []
    config = C.load_config_file(path, warn=warnings.append)
    assert config.memo_max_chars == 500 and config.subconscious.enabled
    assert len(warnings) == 2
    assert "future_key" in warnings[0] and "subconscious.new_thing" in warnings[1]


def test_keys_of_retired_rules_only_warn(tmp_path: Path) -> None:
    """A config file of 0.4.0 may hold the keys of the retired present-value and
    word-overlap rules (issue #23): it still loads, with a warning each."""
    path = tmp_path / "config.toml"
    path.write_text(
        "[retrieval]\ndedup_min_text_similarity = 0.5\ndedup_min_cosine = 0.97\n"
        "[decay]\nsupersede_margin = 0.35\n",
        encoding="utf-8",
    )
    warnings: list[str] = []
    config = C.load_config_file(path, warn=warnings.append)
    assert config.retrieval.dedup_min_cosine == 0.97
    assert len(warnings) == 2
    assert "retrieval.dedup_min_text_similarity" in warnings[0]
    assert "decay.supersede_margin" in warnings[1]


@pytest.mark.parametrize(
    ("body", "key"),
    [
        ("memo_max_chars = 0\n", "memo_max_chars"),
        ("per_session_memory_limit = 'many'\n", "per_session_memory_limit"),
        ("[subconscious]\nmax_iterations = -1\n", "subconscious.max_iterations"),
        ("[subconscious]\nenabled = 'perhaps'\n", "subconscious.enabled"),
        (
            "[subconscious]\nknowledge_collection_name = 'a b'\n",
            "subconscious.knowledge_collection_name",
        ),
        ("[budget]\nbackground_tokens_per_day = -1\n", "budget.background_tokens_per_day"),
        ("[budget]\nbackground_tokens_per_day = true\n", "budget.background_tokens_per_day"),
        ("[budget]\nbackground_tokens_per_day = 1.5\n", "budget.background_tokens_per_day"),
        (
            "[budget]\nbackground_tokens_per_user_per_day = '300000'\n",
            "budget.background_tokens_per_user_per_day",
        ),
    ],
)
def test_bad_file_value_names_the_key(tmp_path: Path, body: str, key: str) -> None:
    path = tmp_path / "config.toml"
    path.write_text(body, encoding="utf-8")
    with pytest.raises(C.ConfigError) as info:
        C.load_config_file(path, warn=lambda _: None)
    assert key in str(info.value)


def test_broken_toml_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text("memo_max_chars = = 3\n", encoding="utf-8")
    with pytest.raises(C.ConfigError, match="不是合法的 TOML"):
        C.load_config_file(path, warn=lambda _: None)


def test_render_round_trips_non_default_values() -> None:
    config = C.ConfigFile.model_validate(
        {
            "memo_max_chars": 42,
            "subconscious": {"target_user_id": 'a"b\\c', "allowed_tools": ["x", "y"]},
        }
    )
    assert C.ConfigFile.model_validate(tomllib.loads(C.render_config_toml(config))) == config


def test_a_new_section_is_a_table_without_any_registration() -> None:
    """A ``Section`` field of the file is loaded, warned about and written by its type alone."""
    import tomllib

    from pydantic import Field

    from amrita_plugin_memory.core.config import ConfigFile, render_config_toml
    from amrita_plugin_memory.core.config_sections import Section

    class ExampleConfig(Section):
        comment = "示例段"
        enabled: bool = False
        limit: int = 3

    class Extended(ConfigFile):
        example: ExampleConfig = Field(default_factory=ExampleConfig)

    text = render_config_toml(Extended())
    assert "# 示例段\n[example]\nenabled = false\nlimit = 3" in text
    assert Extended.model_validate(tomllib.loads(text)) == Extended()
    assert "[active_memory]" in render_config_toml()  # the real file is unchanged


def _leaf_keys() -> list[tuple[str, ...]]:
    """Every key of the file as a path (``("subconscious", "enabled")``), sections walked."""
    from pydantic import BaseModel

    def walk(model: type[BaseModel], prefix: tuple[str, ...]) -> list[tuple[str, ...]]:
        keys: list[tuple[str, ...]] = []
        for name, field in model.model_fields.items():
            kind = field.annotation
            if isinstance(kind, type) and issubclass(kind, BaseModel):
                keys += walk(kind, (*prefix, name))
            else:
                keys.append((*prefix, name))
        return keys

    return walk(C.ConfigFile, ())


def test_every_file_key_with_a_bad_value_is_an_error_naming_it(tmp_path: Path) -> None:
    """A new key needs no test of its own for this: every key is tried with a value of a
    type no key takes (a date), in its own table."""
    keys = _leaf_keys()
    assert ("memo_max_chars",) in keys and ("active_memory", "max_pending_turns") in keys
    path = tmp_path / "config.toml"
    for key in keys:
        *tables, name = key
        header = f"[{'.'.join(tables)}]\n" if tables else ""
        path.write_text(f"{header}{name} = 1979-05-27\n", encoding="utf-8")
        with pytest.raises(C.ConfigError) as info:
            C.load_config_file(path, warn=lambda _: None)
        assert ".".join(key) in str(info.value), key


def test_every_file_key_is_written_with_its_default() -> None:
    """Keys whose default is "not set" (``None``) are left out: TOML has no null."""
    loaded = tomllib.loads(C.render_config_toml())
    defaults = C.ConfigFile().model_dump()
    for key in _leaf_keys():
        node: Any = loaded
        default: Any = defaults
        for part in key:
            default = default[part]
        if default is None:
            continue
        for part in key:
            assert part in node, f"{'.'.join(key)} is missing from the written default file"
            node = node[part]
