"""Constants of the L3 loop: default prompt templates and where they live.

The four Jinja2 templates are created under ``<config_dir>/prompt/`` from the
defaults below when missing (:func:`ensure_prompt_file`); an operator may edit
them freely afterwards, the plugin never overwrites an existing file. Each
template is rendered with exactly the variables listed in
:data:`TEMPLATE_VARIABLES` (the spec's table); an unknown variable is an error
(``StrictUndefined``), reported in the log without crashing the loop.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

__all__ = [
    "DEFAULT_KNOWLEDGE_GUIDE",
    "DEFAULT_MAIN_PROMPT",
    "DEFAULT_PROFILE_GUIDE",
    "DEFAULT_SEND_PROMPT",
    "HISTORY_KEEP_MESSAGES",
    "JOB_ID_PREFIX",
    "PENDING_MAX",
    "SESSION_SUMMARY_CACHE_SIZE",
    "STATE_UID",
    "TEMPLATE_VARIABLES",
    "ensure_prompt_file",
]

STATE_UID: Final = "amrita_memory"
"""Primary key of the loop's row in the ``SubconsciousState`` table."""

JOB_ID_PREFIX: Final = "amrita_memory_subconscious"
"""APScheduler job id prefix of the planned cycle (one job per target user)."""

SESSION_SUMMARY_CACHE_SIZE: Final = 128
"""Archived-session summaries kept in memory (session id → summary)."""

HISTORY_KEEP_MESSAGES: Final = 20
"""Recent chat messages of the target shown verbatim to the loop; older ones
are summarized (``enable_memory_compress``) or dropped."""

HISTORY_MESSAGE_CHARS: Final = 400
"""Characters of one chat message shown to the loop (longer ones are cut)."""

PENDING_MAX: Final = 10
"""Messages waiting for the target user's next private turn, at most."""

SEND_TIMEOUT_SECONDS: Final = 20.0
"""Timeout of one ``send_private_msg`` call."""

SHUTDOWN_GRACE_SECONDS: Final = 5.0
"""How long shutdown waits for a running cycle to stop before cancelling it."""

TEMPLATE_VARIABLES: Final[dict[str, tuple[str, ...]]] = {
    "prompt_file": (
        "character_prompt",
        "last_run",
        "last_abstracts",
        "current_time",
        "target_user_id",
        "total_runs",
    ),
    "prompt_send_file": ("character_prompt", "intent", "memory_context", "current_time"),
    "prompt_knowledge_file": ("current_time", "target_user_id"),
    "prompt_profile_file": ("current_time", "target_user_id"),
}
"""Config key of each template → the variables it is rendered with."""


DEFAULT_MAIN_PROMPT: Final = """\
你是 Bot 的「离线巩固循环」——类似大脑的默认模式网络（DMN）。
用户（ID：{{ target_user_id }}）此刻没有在聊天，你在后台独自整理关于他/她的长期记忆。
你**不是**在和用户对话：你写下的文字用户看不到，你只能通过工具做事。

## Bot 的角色设定（帮助你理解 Bot 与用户的关系；不要扮演）
{{ character_prompt }}

## 运行信息
- 当前时间：{{ current_time }}
- 已完成的整理轮数：{{ total_runs }}
- 上一轮：{{ last_run }}

## 最近几轮做了什么（从旧到新）
{{ last_abstracts }}

## 记忆分层
- **L1 备忘录**：每轮对话都会注入的一小段陈述性事实（身份、稳定偏好、用户要求的工具调用模式、高度浓缩的近期上下文），
  有严格字数上限，只能整篇替换。读写：subconscious_read_memo / subconscious_update_memo。
- **L2 向量记忆**：按需检索的长尾事实（具体事件、项目细节、长尾偏好）。
  读写：subconscious_read_memory / subconscious_list_memory / subconscious_write_memory /
  subconscious_update_memory / subconscious_delete_memory。

## 本轮可做的事（按需挑选，不必面面俱到）
1. **去重合并**：调用 subconscious_duplicate_helper 找出疑似重复的记忆组；确认确实重复后，
   用 subconscious_update_memory 把其中一条改写为融合后的完整内容，再用 subconscious_delete_memory 删除其余条目。
   内容不同的记忆不要合并。
2. **重要性校准**：身份与长期偏好为 high，一般事实为 medium，琐碎或可能过时的为 low。
3. **标签管理**：标签应简短、有意义、同义标签统一写法。
4. **备忘录压缩**：备忘录接近上限时，把细节用 subconscious_write_memory 下放到 L2，备忘录只留指针
   （例如「用户有 3 个项目，细节见记忆」），按 身份 > 偏好 > 工具模式 > 近期上下文 排序，压缩时从尾部开始删。
   备忘录只写陈述性事实，不写祈使句规则。
5. **查漏补缺**：需要时用 subconscious_read_chat_context（最近聊天）或 subconscious_read_sessions（归档会话摘要）
   找出值得长期记住但尚未记录的事实。
6. **想对用户说的话**：确有必要时（例如约定的提醒、关心），用 subconscious_send_to_user 或
   subconscious_note_for_user（以实际可用的工具为准）。没有必要就不要打扰用户。

## 规则
- 只整理这位用户的个人记忆；不要编造事实，不确定就不改。
- 删除前确认其内容已被保留在别处或确实无用。
- 同一个工具不要用相同参数反复调用。
- 工作量适度。完成后**必须**调用 subconscious_iter_stop，并在 summary 中用一两句话写下本轮做了什么
  （下一轮会看到这段摘要，据此接着整理）。
"""

DEFAULT_SEND_PROMPT: Final = """\
你将以下面的角色身份，主动给用户发一条私聊消息。

## 角色设定
{{ character_prompt }}

## 当前时间
{{ current_time }}

## 想表达的意图
{{ intent }}

## 相关记忆
{{ memory_context }}

## 要求
- 用角色的口吻，自然、简短（一到三句话），像熟人之间的消息；
- 只输出要发送的消息正文，不要解释、前缀或引号；
- 不要提及「记忆库」「后台整理」等内部机制。
"""

DEFAULT_KNOWLEDGE_GUIDE: Final = """\
## 全局知识库使用指南（当前时间：{{ current_time }}）
- 知识库存放**可迁移的经验**（做法、结论、踩过的坑），对所有用户通用；关于用户 {{ target_user_id }} 本人的事实不要写进知识库。
- 新建前先搜索，已有相近条目时更新而不是重复创建。
- 每个条目聚焦一个主题，标题简洁，正文结构清晰。
- 审查对话 LLM 提交的知识建议：有价值的采纳，重复或不可靠的忽略。
"""

DEFAULT_PROFILE_GUIDE: Final = """\
## 用户画像构建指南（当前时间：{{ current_time }}）
- 画像描述用户 {{ target_user_id }} 是怎样的人：身份背景、性格、兴趣、沟通习惯、长期目标。
- 渐进式构建：每轮只做小的增量修改，不要整篇重写。
- 只写有依据的结论；推测要标注「可能」。
- 与备忘录互补：备忘录存每轮都要用的事实，画像存对这个人的整体理解。
"""

DEFAULTS: Final[dict[str, str]] = {
    "prompt_file": DEFAULT_MAIN_PROMPT,
    "prompt_send_file": DEFAULT_SEND_PROMPT,
    "prompt_knowledge_file": DEFAULT_KNOWLEDGE_GUIDE,
    "prompt_profile_file": DEFAULT_PROFILE_GUIDE,
}
"""Config key of each template → its default content."""


def ensure_prompt_file(path: Path, default: str) -> bool:
    """Create ``path`` with ``default`` when it does not exist; ``True`` if created.

    An existing file (even an empty one) is the operator's and is left alone.
    """
    if path.exists():
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(default, encoding="utf-8")
    return True
