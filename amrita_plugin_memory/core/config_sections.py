"""The sections of the plugin's TOML file (``config.toml``), one class each.

:class:`~.config.ConfigFile` holds one of each (``[subconscious]``,
``[group_context]``, ``[persona]``, ``[self_memory]``, ``[retrieval]``,
``[decay]``, ``[archive]``, ``[active_memory]``, ``[budget]``); loading, the written
default file and the errors naming a key live in :mod:`.config`.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .calendar import zone_named

__all__ = [
    "ActiveMemoryConfig",
    "ArchiveConfig",
    "BudgetConfig",
    "DecayConfig",
    "EpisodesConfig",
    "GroupContextConfig",
    "MemoryConfig",
    "PersonaConfig",
    "RetrievalConfig",
    "Section",
    "SelfMemoryConfig",
    "SubconsciousConfig",
]


class Section(BaseModel):
    """A table of the TOML file: unknown keys ignored here (warned about before validation).

    A field of :class:`~.config.ConfigFile` whose type is a ``Section`` *is* a
    table: loading, the unknown-key warning and the written default file find
    it by that type (nothing else to register). ``comment`` is shown above it.
    """

    comment: ClassVar[str] = ""

    # Unknown keys are detected (and warned about) before validation.
    model_config = ConfigDict(extra="ignore", validate_assignment=True)


class MemoryConfig(Section):
    """``[memory]``: settings of the memory as a whole (not of one layer)."""

    comment: ClassVar[str] = "记忆整体：日期按哪个时区算（空 = 本机时区）"
    """The comment above the table in the written default file."""

    # The owner's calendar (core/calendar): every day boundary, period in a
    # question and shown date; stored stamps stay UTC. An IANA name.
    timezone: str = ""

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        zone_named(value)  # ValueError (named by the key) for an unknown zone
        return value.strip()


class SubconsciousConfig(Section):
    """``[subconscious]``: the L3 offline consolidation loop."""

    comment: ClassVar[str] = "L3 离线巩固循环"
    """The comment above the table in the written default file."""

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


class GroupContextConfig(Section):
    """``[group_context]``: the per-group rolling window (Openmim's L1, its names lower-cased)."""

    comment: ClassVar[str] = "群聊上下文窗口（Openmim L1，默认关闭：会增加每轮的 token）"
    """The comment above the table in the written default file."""

    enabled: bool = False
    context_message_count: int = Field(default=100, ge=1, le=10_000)
    context_max_text_chars: int = Field(default=700, ge=1, le=100_000)
    bot_context_max_chars: int = Field(default=1400, ge=1, le=100_000)
    context_persist_every: int = Field(default=5, ge=1, le=10_000)
    # Clamped to context_message_count when larger (the window holds no more).
    recent_context_messages: int = Field(default=25, ge=1, le=10_000)
    anonymize: bool = True


class PersonaConfig(Section):
    """``[persona]``: one persona per member, learned from group messages (Openmim's L2)."""

    comment: ClassVar[str] = "群成员画像（Openmim L2，需要 group_context；每轮额外一次提取请求）"
    """The comment above the table in the written default file."""

    enabled: bool = False
    update_enabled: bool = True
    max_users_per_turn: int = Field(default=8, ge=1, le=100)
    prompt_max_chars: int = Field(default=1800, ge=1, le=100_000)
    total_max_chars: int = Field(default=700, ge=20, le=100_000)
    update_min_confidence: float = Field(default=0.65, ge=0, le=1)
    update_interval_seconds: float = Field(default=30, ge=0, le=86_400)


class SelfMemoryConfig(Section):
    """``[self_memory]``: what the bot knows about itself (Openmim's L3), kept by superusers."""

    comment: ClassVar[str] = "机器人自我记忆（Openmim L3，超级用户用 /memory self 维护）"
    """The comment above the table in the written default file."""

    max_chars: int = Field(default=2000, ge=1, le=100_000)


class RetrievalConfig(Section):
    """``[retrieval]``: how ``read_memory`` ranks and how ``write_memory`` avoids copies."""

    comment: ClassVar[str] = "检索：关键词通道（混合检索）与写入去重"
    """The comment above the table in the written default file."""

    # A keyword channel (CJK bigrams + whole ASCII/number tokens, IDF coverage)
    # fused with the vector ranking: finds exact numbers, codes and names.
    hybrid: bool = True
    keyword_weight: float = Field(default=0.25, ge=0, le=10)
    # A write that truly repeats a memory of the same partition, scope and origin
    # (the same statement in nearly the same words, ranking/repeats) refreshes it
    # instead of adding a copy, if their vectors are also this close (cosine).
    dedup_on_write: bool = True
    dedup_min_cosine: float = Field(default=0.95, ge=0.5, le=1)


class DecayConfig(Section):
    """``[decay]``: a soft age penalty at retrieval (nothing is deleted).

    A half-life of ``None`` is derived from the spec's keys: ``low`` from
    ``short_term_expiry_days``, ``medium`` from ``long_term_expiry_days``;
    0 means the level never ages.
    """

    comment: ClassVar[str] = (
        "检索时的时间衰减（不删除任何记忆）；半衰期留空 = 取 short/long_term_expiry_days"
    )
    """The comment above the table in the written default file."""

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


class ArchiveConfig(Section):
    """``[archive]``: memories past their lifetime move to the archive (never deleted).

    A lifetime of ``None`` is derived like :class:`DecayConfig`'s half-lives;
    0 means memories of that level never expire. Age counts from ``updated_at``.
    """

    comment: ClassVar[str] = (
        "归档：超过寿命的记忆移入归档（可恢复，从不删除）；寿命留空 = 取 short/long_term_expiry_days"
    )
    """The comment above the table in the written default file."""

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


class ActiveMemoryConfig(Section):
    """``[active_memory]``: the bot learns and recalls without the chat model calling a tool.

    Learning: after answered turns, one isolated request to the chat model per
    batch of a user's messages decides what to add, update or archive.
    Recall: the most relevant memories go into each turn's prompt (``<MEMORIES>``).
    """

    comment: ClassVar[str] = (
        "主动记忆：回答后由聊天模型提取要记住的内容（每批一次额外请求），每轮自动召回相关记忆"
    )
    """The comment above the table in the written default file."""

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
    # A message and a memory in different scripts (an English question, a Chinese
    # memory): e5 scores every such pair alike, so the memory must stand this far
    # above the message's similarity to plain memories of its script (active/recall).
    recall_cross_script_lift: float = Field(default=0.045, ge=0, le=1)
    # Recall's query embedding waits at most this long (the turn goes on without
    # a block); after repeated failures it is skipped until the service answers.
    recall_timeout_seconds: float = Field(default=1.2, ge=0.1, le=30)
    # Bounds: extraction requests in flight in the process, turns waiting per
    # user and chat (the oldest are dropped), turns and characters per request.
    max_concurrent_requests: int = Field(default=4, ge=1, le=64)
    max_pending_turns: int = Field(default=40, ge=1, le=10_000)
    max_turns_per_request: int = Field(default=16, ge=1, le=100)
    max_request_chars: int = Field(default=20_000, ge=4_000, le=200_000)
    # Tell a user once, in private, the first time something was learned about them.
    notice: bool = True


class BudgetConfig(Section):
    """``[budget]``: a daily cap on the tokens of the plugin's own background requests.

    Counted: active memory's extraction, persona extraction and the L3 loop
    (prompt + completion tokens, as the provider reports them, else estimated).
    Never counted nor delayed: chat turns. When a cap is reached, the requests
    it covers wait for the next local day. 0 = no cap.
    """

    comment: ClassVar[str] = (
        "后台预算：插件自己的后台请求（主动记忆提取、画像提取、L3 循环）每天最多用多少 token；0 = 不限"
    )
    """The comment above the table in the written default file."""

    # Whole bot, every process on the store together (the ledger is shared).
    # strict: a TOML ``true`` or a string is an error, never a cap of 1 token.
    background_tokens_per_day: int = Field(default=3_000_000, ge=0, le=10**12, strict=True)
    # One user's share: what a flood from one user can spend in a day.
    background_tokens_per_user_per_day: int = Field(default=300_000, ge=0, le=10**12, strict=True)


class EpisodesConfig(Section):
    """``[episodes]``: past conversations kept as short episodes and recalled by time (#48)."""

    comment: ClassVar[str] = "对话片段：每段对话结束后保存摘要，问“上次聊了什么”时按时间召回"
    """The comment above the table in the written default file."""

    enabled: bool = True
    idle_minutes: float = Field(default=30, ge=1, le=1440)
    """A conversation ends after this long without a message (or at the local day's end)."""
    summarize: bool = True
    """Summaries by the background model (``false``: extractive only, no request)."""
    short_chars: int = Field(default=120, ge=0, le=10_000)
    """A conversation of at most two messages and this many characters gets no request."""
    max_request_chars: int = Field(default=6000, ge=500, le=200_000)
    max_lines: int = Field(default=400, ge=10, le=10_000)
    """A conversation is ended early once it has this many lines (a bound)."""
    recall: bool = True
    """The ``<EPISODES>`` block when a message asks about past conversations."""
    recall_max_episodes: int = Field(default=3, ge=1, le=20)
    recall_max_chars: int = Field(default=600, ge=100, le=10_000)
