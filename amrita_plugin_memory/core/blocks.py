"""Delimited blocks that the plugin adds to system prompts."""

from __future__ import annotations

import html

__all__ = ["insert_block", "render_memo_block"]


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


def insert_block(system_prompt: str, block: str) -> str:
    """Place the block inside Amrita's instructions when they are delimited."""
    marker = "</SYSTEM_INSTRUCTIONS>"
    if marker in system_prompt:
        return system_prompt.replace(marker, f"{block}\n{marker}", 1)
    return f"{system_prompt}\n{block}"
