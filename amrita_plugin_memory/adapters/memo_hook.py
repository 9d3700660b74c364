"""The L1 memo in every chat turn's system prompt (pre-completion hook),
and the start-up migration of its keys."""

# No ``from __future__ import annotations``: amrita-sense injects handler
# arguments by their annotation objects.

from amrita_core import PreCompletionEvent

from ..prompting.blocks import insert_block, render_memo_block
from ..storage.memo_store import MemoService
from ..storage.scope import ScopeRules
from ..storage.usage import UsageLedger
from .events import target_from_event

__all__ = ["register_memo_hook", "register_memo_key_migration"]


def register_memo_hook(service: MemoService, usage: UsageLedger | None = None) -> None:
    """Inject the memo into every LLM request of a chat turn (priority 15, non-blocking).

    Every chat turn passes here first: ``usage`` counts the turn (with the chat
    tools offered) and the memo's characters, in memory only.

    The block is added to the rendered system prompt (``train``) of this turn
    only: Amrita persists ``memory`` and ``user_query`` after the hooks, never
    ``train``, so the memo reaches every request of the turn without ever
    being saved into the chat history.
    """
    from amrita.plugins.chat.runtime import try_get_amrita_ctx
    from amrita_core import on_precompletion
    from nonebot import logger

    hook = on_precompletion(priority=15, block=False)

    # amrita-sense injects by annotation, resolved from this module's globals.
    @hook.handle()
    async def inject_memo(event: PreCompletionEvent) -> None:
        amrita_ctx = try_get_amrita_ctx(event.chat_object)
        if not amrita_ctx:
            return  # a background agent, not a chat turn
        if usage is not None:
            usage.count_turn()
        target = target_from_event(amrita_ctx["event"])
        try:
            memo = await service.get(ScopeRules().of_turn(target).chat_view())
        except Exception as exc:  # the chat must go on without its memo
            logger.warning(f"[Memory] 读取备忘录失败，本轮不注入：{exc.__class__.__name__}: {exc}")
            return
        if not memo.strip():
            return
        train = event.get_context_messages().train
        if isinstance(train.content, str):
            block = render_memo_block(memo, is_group=target.is_group)
            train.content = insert_block(train.content, block)
            if usage is not None:
                usage.count_block("memo", len(block))


def register_memo_key_migration(service: MemoService) -> None:
    """Move memo rows with a legacy key to the current format at driver start-up.

    nonebot_plugin_orm creates its engine and brings the schema up to date in
    its own ``on_startup`` hook, registered when the plugin required it, i.e.
    before this one; NoneBot runs start-up hooks one after another in that
    order, and before the bot serves any message. A failure is logged and the
    bot starts anyway (the next start tries again).
    """
    from nonebot import get_driver, logger

    async def migrate_memo_keys() -> None:
        try:
            report = await service.migrate_keys()
        except Exception as exc:
            logger.warning(
                f"[Memory] 备忘录键迁移失败，下次启动重试：{exc.__class__.__name__}: {exc}"
            )
            return
        if report.moved:
            logger.info(
                f"[Memory] 已把 {report.moved} 条旧格式键的备忘录迁移到当前格式"
                f"（其中 {len(report.conflicts)} 条与已有备忘录冲突，保留了较新的）"
            )

    get_driver().on_startup(migrate_memo_keys)
