"""Per-turn blocks after the chat history, in this request only, never in the stored history.

Providers bill a request's unchanged prefix (the part that equals the start
of an earlier request) at a fraction of the price. Amrita's system prompt and
the stored chat history stay the same from one turn to the next, so what the
plugin shows for one turn only goes after them: :func:`add_turn_block`
appends a block to the current user message *of this request*, after the
user's words (``prompting/turn_section`` renders the section and says why the
model can tell it from the user's text). What rarely changes (``<SELF>``, the
memo) stays in the system prompt.

Why in the user's message and not a message of its own: two user messages in
a row are refused by some providers ("deepseek-reasoner does not support
successive user or assistant messages"), and a system message after the
history is moved to the top by other chat templates (DeepSeek's), which would
cost the whole cached prefix again.

Why it is never stored: Amrita keeps ``wrap.unwrap(exclude_system=True)`` as
the session's history, after the pre-completion hooks and again after the
completion hooks (``amrita_core/chatmanager/chat_object.py``, ``_pre_runner``
and ``_post_runner``; ``COMMIT_MEMORY`` writes it after the latter). The
message shown here is a :class:`TurnMessage` that carries the user's own
message; the completion hook of :func:`register_turn_context` (priority 1,
the first to run) puts that message back into the wrap before Amrita's last
copy. Deep copies of the wrap (the agent's context, its rollback backup)
carry it too, so whichever wrap reaches the completion hook is restored. A
turn that fails before the completion hooks commits nothing.
"""

# No ``from __future__ import annotations``: amrita-sense injects handler
# arguments by their annotation objects.

from typing import Any

from amrita_core import CompletionEvent
from amrita_core.types import SendMessageWrap
from amrita_core.types.content import USER_INPUT, TextContent
from amrita_core.types.message import Message
from pydantic import PrivateAttr

from ..prompting.turn_section import quote_user_text, render_turn_section

__all__ = [
    "TURN_CONTEXT_PRIORITY",
    "TurnMessage",
    "add_turn_block",
    "register_turn_context",
    "restore_user_message",
    "user_message",
]

TURN_CONTEXT_PRIORITY = 1
"""The completion hook runs first: every later hook, and Amrita's copy, see the user's own message."""


class TurnMessage(Message[USER_INPUT]):
    """The current user message as this request shows it: the user's message, then the section."""

    _stored: Message[Any] = PrivateAttr()
    """The user's own message: what the chat history keeps."""
    _blocks: list[str] = PrivateAttr(default_factory=list)


def _quoted(part: Any) -> Any:
    """A content part with the user's text quoted (``prompting.turn_section.quote_user_text``)."""
    if isinstance(part, dict):
        if part.get("type") == "text":
            return {**part, "text": quote_user_text(str(part.get("text") or ""))}
        return part
    if isinstance(part, TextContent):
        return part.model_copy(update={"text": quote_user_text(part.text)})
    return part


def _with_section(content: Any, section: str) -> Any:
    """The user's content (quoted: the section cannot be typed), then the section."""
    if isinstance(content, str):
        return f"{quote_user_text(content)}\n\n{section}" if content else section
    parts = [_quoted(part) for part in content or []]
    return [*parts, {"type": "text", "text": f"\n\n{section}"}]


def add_turn_block(wrap: SendMessageWrap, block: str) -> None:
    """Show ``block`` (rendered by ``prompting/blocks``) after the user's message, in this
    request only; blocks follow each other in the order they were added."""
    if not block:
        return
    query = wrap.user_query
    if isinstance(query, TurnMessage):
        shown = query
    else:
        shown = TurnMessage.model_validate(query.model_dump())
        shown._stored = query
        wrap.user_query = shown
    shown._blocks.append(block)
    # Validated like every message's content (a list becomes typed content parts).
    shown.content = TurnMessage.model_validate(
        {
            "role": shown.role,
            "content": _with_section(shown._stored.content, render_turn_section(shown._blocks)),
        }
    ).content


def user_message(wrap: SendMessageWrap) -> Message[Any]:
    """The current user message as the user sent it (without the plugin's section)."""
    query = wrap.user_query
    return query._stored if isinstance(query, TurnMessage) else query


def restore_user_message(wrap: SendMessageWrap) -> bool:
    """Put the user's own message back in place of the shown one; whether there was one."""
    query = wrap.user_query
    if not isinstance(query, TurnMessage):
        return False
    wrap.user_query = query._stored
    return True


def register_turn_context() -> None:
    """Register the completion hook that keeps the section out of the stored history."""
    from amrita_core import on_completion

    hook = on_completion(priority=TURN_CONTEXT_PRIORITY, block=False)

    @hook.handle()
    async def keep_history_clean(event: CompletionEvent) -> None:
        restore_user_message(event.get_context_messages())
