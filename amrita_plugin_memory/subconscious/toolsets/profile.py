"""The loop's user profile tools (always with L3): a line window and line edits."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from amrita_core import FunctionDefinitionSchema, ToolContext
from nonebot import logger

from ...tools.args import ToolArgError
from ...tools.schemas import define, prop
from ..context import LoopContext
from ..profile_store import MAX_WINDOW, ProfileStore
from .base import LoopTool
from .knowledge import guard_kb, line_props, parse_line, window_hint

__all__ = ["ProfileToolset", "profile_schemas"]


def profile_schemas() -> dict[str, FunctionDefinitionSchema]:
    """The loop's profile tools."""
    section = prop("string", "画像的部分：summary=摘要，body=正文", enum=["summary", "body"])
    return {
        "subconscious_get_profile": define(
            "subconscious_get_profile",
            "读取用户画像（带行号）。不指定 section 时返回摘要和正文；"
            f"start_line / end_line 是行滑动窗口（每次最多 {MAX_WINDOW} 行）。",
            {"section": section, **line_props()},
            [],
        ),
        "subconscious_update_profile": define(
            "subconscious_update_profile",
            "按行增量修改用户画像：insert 在 start_line 之前插入 content（start_line=总行数+1 为追加）；"
            "replace 把 start_line..end_line（省略 end_line 即单行）替换为 content；"
            "delete 删除 start_line..end_line。content 可含多行。修改后行号会变化，连续修改前请重新读取。",
            {
                "operation": prop("string", "操作", enum=["replace", "insert", "delete"]),
                "section": prop(
                    "string",
                    "画像的部分（默认 body）：summary=摘要，body=正文",
                    enum=["summary", "body"],
                    default="body",
                ),
                "start_line": prop("integer", "起始行号（从 1 开始）", minimum=1),
                "end_line": prop("integer", "结束行号（含；replace / delete 使用）", minimum=1),
                "content": prop("string", "新内容（insert / replace 必填，可多行）"),
            },
            ["operation", "start_line"],
        ),
    }


class ProfileToolset:
    """The profile tool group (always present with L3)."""

    name = "profile"

    def __init__(self, ctx: LoopContext, store: ProfileStore) -> None:
        self.ctx = ctx
        self.store = store

    def tools(self) -> list[LoopTool]:
        defs = profile_schemas()
        return [
            LoopTool(defs["subconscious_get_profile"], self.get_profile),
            LoopTool(defs["subconscious_update_profile"], self.update_profile),
        ]

    async def prompt_section(self) -> str:
        guide = self.ctx.render_guide("prompt_profile_file")
        try:
            profile = await self.store.load()
        except (OSError, UnicodeDecodeError) as exc:
            logger.warning(f"[Subconscious] 读取用户画像失败：{exc.__class__.__name__}: {exc}")
            return guide
        if not profile.summary and not profile.body:
            status = "（当前画像为空。）"
        else:
            status = f"（当前画像：摘要 {len(profile.summary)} 行，正文 {len(profile.body)} 行。）"
        return f"{guide}\n{status}"

    async def get_profile(self, args: Mapping[str, Any], ctx: ToolContext) -> dict[str, Any]:
        async def run() -> dict[str, Any]:
            section = args.get("section")
            start = parse_line(args, "start_line", default=1)
            end = parse_line(args, "end_line", default=None)
            if section is None or section == "":
                summary = window_hint(await self.store.read("summary"))
                body = window_hint(await self.store.read("body", start, end))
                empty = not summary["total_lines"] and not body["total_lines"]
                result: dict[str, Any] = {"ok": True, "summary": summary, "body": body}
                if empty:
                    result["note"] = (
                        "画像为空：可用 subconscious_update_profile 的 insert（start_line=1）开始构建"
                    )
                return result
            return {"ok": True, **window_hint(await self.store.read(section, start, end))}

        return await guard_kb("subconscious_get_profile", run)

    async def update_profile(self, args: Mapping[str, Any], ctx: ToolContext) -> dict[str, Any]:
        async def run() -> dict[str, Any]:
            operation = args.get("operation")
            start = parse_line(args, "start_line", default=None)
            if start is None:
                raise ToolArgError("缺少参数 start_line")
            end = parse_line(args, "end_line", default=None)
            content = args.get("content")
            if operation in ("replace", "insert") and not isinstance(content, str):
                raise ToolArgError(f"operation={operation} 需要参数 content（字符串，可多行）")
            section = args.get("section") or "body"
            result = await self.store.update(
                operation, section=section, start_line=start, end_line=end, content=content
            )
            cycle = self.ctx.current_cycle
            if cycle is not None:
                cycle.actions["profile"] += 1
            logger.info(
                f"[Subconscious] Profile {operation} {section} line {start}"
                f"{f'-{end}' if end and end != start else ''} (now {result['total_lines']} lines)"
            )
            return result

        return await guard_kb("subconscious_update_profile", run)
