"""L1 memo: a short text per uni_id, replaced whole, injected into every prompt.

The memo of a private chat is the user's own row; the memo of a group chat is
the group's row. Writes are whole-text replacements with a hard character
limit (``memo_max_chars``): appending would make the limit meaningless, so an
over-long text is refused and the model is told the lengths to compress.

Reads go through an in-process LRU cache (write-through invalidation); an
empty memo is cached too, so chats without a memo cost no query per turn.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

from amrita_core import PreCompletionEvent
from nonebot_plugin_amrita.cache import LRUCache
from nonebot_plugin_orm import get_session

from .models import UserMemo, db_now
from .vector import PartitionLocks

__all__ = [
    "MemoService",
    "MemoWriteResult",
    "insert_memo_block",
    "register_memo_hook",
    "render_memo_block",
]

MEMO_CACHE_SIZE = 128


@dataclass(frozen=True, slots=True)
class MemoWriteResult:
    """Outcome of :meth:`MemoService.update`."""

    ok: bool
    current_chars: int
    attempted_chars: int
    limit: int


class MemoService:
    """Reads and writes memos in the ``UserMemo`` table."""

    def __init__(self, max_chars: int, cache_size: int = MEMO_CACHE_SIZE) -> None:
        self.max_chars = max_chars
        self._cache: LRUCache[str, str] = LRUCache(cache_size)
        self._locks = PartitionLocks()

    async def get(self, uni_id: str) -> str:
        """The memo of ``uni_id`` (``""`` when there is none)."""
        if uni_id in self._cache:
            return self._cache.get(uni_id) or ""
        async with get_session() as session:
            row = await session.get(UserMemo, uni_id)
            text = row.content if row is not None else ""
        self._cache.put(uni_id, text)
        return text

    async def update(self, uni_id: str, content: str) -> MemoWriteResult:
        """Replace the memo of ``uni_id``; refuse (write nothing) above the limit.

        Writes of one uni_id are serialised, so concurrent writers leave exactly
        one of their texts, never a mix.
        """
        async with self._locks.hold(uni_id):
            current = await self.get(uni_id)
            attempted = len(content)
            if attempted > self.max_chars:
                return MemoWriteResult(False, len(current), attempted, self.max_chars)
            async with get_session() as session:
                row = await session.get(UserMemo, uni_id)
                if row is None:
                    session.add(UserMemo(user_id=uni_id, content=content, updated_at=db_now()))
                else:
                    row.content = content
                    row.updated_at = db_now()
                await session.commit()
            self._cache.put(uni_id, content)
            return MemoWriteResult(True, attempted, attempted, self.max_chars)

    def forget(self, uni_id: str) -> None:
        """Drop a cached entry (after a write from elsewhere)."""
        self._cache.pop(uni_id, None)


def render_memo_block(memo: str, *, is_group: bool) -> str:
    """The ``<MEMO>`` block for the system prompt.

    The memo text is HTML-escaped so that a memo containing ``</MEMO>`` or
    other markup stays inside its block and cannot pose as instructions.
    """
    owner = "本群" if is_group else "该用户"
    return (
        "<MEMO>\n"
        f"以下是你为{owner}维护的备忘录（L1 常驻记忆，可信背景事实；需要修改时调用 update_memo 整篇替换）：\n"
        f"{html.escape(memo.strip(), quote=False)}\n"
        "</MEMO>"
    )


def insert_memo_block(system_prompt: str, block: str) -> str:
    """Place the block inside Amrita's instructions when they are delimited."""
    marker = "</SYSTEM_INSTRUCTIONS>"
    if marker in system_prompt:
        return system_prompt.replace(marker, f"{block}\n{marker}", 1)
    return f"{system_prompt}\n{block}"


def register_memo_hook(service: MemoService) -> None:
    """Inject the memo into every LLM request of a chat turn (priority 15, non-blocking).

    The block is added to the rendered system prompt (``train``) of this turn
    only: Amrita persists ``memory`` and ``user_query`` after the hooks, never
    ``train``, so the memo reaches every request of the turn without ever
    being saved into the chat history.
    """
    from amrita.plugins.chat.runtime import try_get_amrita_ctx
    from amrita_core import on_precompletion
    from nonebot import logger

    from .keys import target_from_event

    hook = on_precompletion(priority=15, block=False)

    # amrita-sense injects by annotation, resolved from this module's globals.
    @hook.handle()
    async def inject_memo(event: PreCompletionEvent) -> None:
        amrita_ctx = try_get_amrita_ctx(event.chat_object)
        if not amrita_ctx:
            return  # a background agent, not a chat turn
        target = target_from_event(amrita_ctx["event"])
        try:
            memo = await service.get(target.session)
        except Exception as exc:  # the chat must go on without its memo
            logger.warning(f"[Memory] 读取备忘录失败，本轮不注入：{exc.__class__.__name__}: {exc}")
            return
        if not memo.strip():
            return
        train = event.get_context_messages().train
        if isinstance(train.content, str):
            block = render_memo_block(memo, is_group=target.is_group)
            train.content = insert_memo_block(train.content, block)
