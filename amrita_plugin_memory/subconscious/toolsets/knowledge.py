"""The loop's knowledge base tools, and the reads the chat LLM's knowledge tools use.

``subconscious_knowledge_list|read|create|update|delete|search`` on the
three-way synced :class:`~..knowledge_base.KnowledgeBaseManager` (only when
``enable_knowledge``). The chat LLM's ``knowledge_list|read|search`` call the
same read handlers; its ``knowledge_suggest`` is :mod:`.suggestions`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

from amrita_core import FunctionDefinitionSchema, ToolContext
from nonebot import logger

from ...tools.args import ToolArgError, parse_int, parse_text
from ...tools.schemas import define, prop
from ..context import LoopContext, count_action
from ..knowledge_base import SUMMARY_MAX, TITLE_MAX, KnowledgeBaseManager
from ..profile_store import MAX_WINDOW
from .base import LoopTool, guard

__all__ = [
    "KID_CHARS",
    "LIST_MAX",
    "QUERY_CHARS",
    "KnowledgeToolset",
    "guard_kb",
    "kid_prop",
    "knowledge_schemas",
    "line_props",
    "parse_kid",
    "parse_line",
    "search_props",
    "window_hint",
]

QUERY_CHARS: Final = 500
KID_CHARS: Final = 32
SEARCH_TOP_K_MAX: Final = 10
SEARCH_TOP_K_DEFAULT: Final = 5
LIST_MAX: Final = 100
LIST_DEFAULT: Final = 50
LINE_NO_MAX: Final = 1_000_000


async def guard_kb(name: str, call: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
    """Every expected failure (``KnowledgeError``, ``ProfileError``: invalid input, in
    the words of ``core/errors.WORDS``) as an error result the model can act on."""
    return await guard(name, call)


def parse_kid(args: Mapping[str, Any], *, required: bool = True) -> str | None:
    value = args.get("kid")
    if value is None or (isinstance(value, str) and not value.strip()):
        if required:
            raise ToolArgError("缺少参数 kid（知识条目 ID，来自 list / search 的结果）")
        return None
    if not isinstance(value, str) or len(value.strip()) > KID_CHARS:
        raise ToolArgError(f"知识 ID {str(value)[:40]!r} 格式无效")
    return value.strip()


def parse_line(args: Mapping[str, Any], name: str, *, default: int | None) -> int | None:
    if args.get(name) is None:
        return default
    return parse_int(args, name, low=1, high=LINE_NO_MAX, default=default or 1)


def window_hint(result: dict[str, Any]) -> dict[str, Any]:
    """Tell the model how to read on when a window stopped before the end."""
    end = result.get("end_line", result["start_line"] + len(result["lines"]) - 1)
    if result["lines"] and end < result["total_lines"]:
        result["more"] = f"还有后续内容，可用 start_line={end + 1} 继续读取"
    elif (
        not result["lines"]
        and result["total_lines"]
        and result["start_line"] > result["total_lines"]
    ):
        result["more"] = f"start_line 超出范围：共 {result['total_lines']} 行"
    return result


def kid_prop(description: str = "知识条目 ID（来自 list / search 的结果）") -> Any:
    return prop("string", description, maxLength=KID_CHARS)


def line_props() -> dict[str, Any]:
    return {
        "start_line": prop("integer", "起始行号（从 1 开始，含）", minimum=1, default=1),
        "end_line": prop(
            "integer", f"结束行号（含；省略则读到末尾，每次最多 {MAX_WINDOW} 行）", minimum=1
        ),
    }


def search_props() -> dict[str, Any]:
    return {
        "query": prop("string", "检索内容", maxLength=QUERY_CHARS),
        "top_k": prop(
            "integer",
            "返回条数",
            minimum=1,
            maximum=SEARCH_TOP_K_MAX,
            default=SEARCH_TOP_K_DEFAULT,
        ),
    }


def knowledge_schemas(max_chars: int) -> dict[str, FunctionDefinitionSchema]:
    """The loop's knowledge tools."""
    title = prop("string", f"标题（单行，≤{TITLE_MAX} 字）", maxLength=TITLE_MAX)
    summary = prop(
        "string",
        f"摘要：一两句话说明它解决什么问题（单行，≤{SUMMARY_MAX} 字）",
        maxLength=SUMMARY_MAX,
    )
    body = prop("string", f"正文（Markdown，≤{max_chars} 字）", maxLength=max_chars)
    return {
        "subconscious_knowledge_list": define(
            "subconscious_knowledge_list",
            "列出全局知识库的条目（ID、标题、摘要、更新时间；最近更新的在前）。",
            {
                "limit": prop("integer", "条数", minimum=1, maximum=LIST_MAX, default=LIST_DEFAULT),
                "offset": prop("integer", "跳过的条数（翻页）", minimum=0, default=0),
            },
            [],
        ),
        "subconscious_knowledge_read": define(
            "subconscious_knowledge_read",
            f"读取一个知识条目的正文（带行号；可用 start_line / end_line 分段读，每次最多 {MAX_WINDOW} 行）。",
            {"kid": kid_prop(), **line_props()},
            ["kid"],
        ),
        "subconscious_knowledge_create": define(
            "subconscious_knowledge_create",
            "新建一个知识条目。先用 subconscious_knowledge_search 确认没有相近条目。",
            {"title": title, "summary": summary, "body": body},
            ["title", "summary", "body"],
        ),
        "subconscious_knowledge_update": define(
            "subconscious_knowledge_update",
            "修改一个知识条目（title / summary / body 至少提供一项；body 为整体替换，先读取全文再改）。",
            {"kid": kid_prop(), "title": title, "summary": summary, "body": body},
            ["kid"],
        ),
        "subconscious_knowledge_delete": define(
            "subconscious_knowledge_delete",
            "删除一个知识条目（过时、错误或已合并到其他条目时）。",
            {"kid": kid_prop()},
            ["kid"],
        ),
        "subconscious_knowledge_search": define(
            "subconscious_knowledge_search",
            "按语义检索全局知识库（distance 越小越相似）。",
            search_props(),
            ["query"],
        ),
    }


class KnowledgeToolset:
    """The knowledge tool group of the loop, and the reads behind the chat LLM's tools."""

    name = "knowledge"

    def __init__(self, ctx: LoopContext, kb: KnowledgeBaseManager) -> None:
        self.ctx = ctx
        self.kb = kb

    def _shown(self, entry: dict[str, Any]) -> dict[str, Any]:
        """``entry`` as a model reads it: its ``updated_at`` in the owner's zone."""
        stamp = str(entry.get("updated_at") or "")
        return {**entry, "updated_at": self.ctx.calendar.show_stamp(stamp) or stamp}

    # -- group ----------------------------------------------------------------------

    def tools(self) -> list[LoopTool]:
        defs = knowledge_schemas(self.kb.max_chars)
        handlers = {
            "subconscious_knowledge_list": self.list_entries,
            "subconscious_knowledge_read": self.read,
            "subconscious_knowledge_create": self.create,
            "subconscious_knowledge_update": self.update,
            "subconscious_knowledge_delete": self.delete,
            "subconscious_knowledge_search": self.search,
        }
        return [LoopTool(defs[name], handler) for name, handler in handlers.items()]

    async def prompt_section(self) -> str:
        guide = self.ctx.render_guide("prompt_knowledge_file")
        try:
            entries = len(await self.kb.list())
        except OSError as exc:
            logger.warning(f"[Subconscious] 读取知识索引失败：{exc.__class__.__name__}: {exc}")
            return guide
        pending = len(self.ctx.state["knowledge_suggestions"])
        status = f"（知识库现有 {entries} 条；待审查的知识建议 {pending} 条"
        status += "，请用 subconscious_read_suggestions 审阅。）" if pending else "。）"
        return f"{guide}\n{status}"

    # -- reads (loop and chat) ---------------------------------------------------------

    async def list_entries(
        self, args: Mapping[str, Any], ctx: ToolContext | None = None
    ) -> dict[str, Any]:
        async def run() -> dict[str, Any]:
            limit = parse_int(args, "limit", low=1, high=LIST_MAX, default=LIST_DEFAULT)
            offset = parse_int(args, "offset", low=0, high=LINE_NO_MAX, default=0)
            entries = await self.kb.list()
            result: dict[str, Any] = {
                "ok": True,
                "total": len(entries),
                "offset": offset,
                "entries": [self._shown(e) for e in entries[offset : offset + limit]],
            }
            if not entries:
                result["note"] = "知识库为空"
            elif offset + limit < len(entries):
                result["more"] = f"还有更多条目，可用 offset={offset + limit} 继续"
            return result

        return await guard_kb("knowledge_list", run)

    async def read(self, args: Mapping[str, Any], ctx: ToolContext | None = None) -> dict[str, Any]:
        async def run() -> dict[str, Any]:
            kid = parse_kid(args)
            assert kid is not None
            start = parse_line(args, "start_line", default=1)
            end = parse_line(args, "end_line", default=None)
            assert start is not None
            if end is not None and end < start:
                raise ToolArgError("end_line 必须 ≥ start_line")
            return {"ok": True, **window_hint(await self.kb.read(kid, start, end))}

        return await guard_kb("knowledge_read", run)

    async def search(
        self, args: Mapping[str, Any], ctx: ToolContext | None = None
    ) -> dict[str, Any]:
        async def run() -> dict[str, Any]:
            query = parse_text(args, "query", max_chars=QUERY_CHARS)
            top_k = parse_int(
                args, "top_k", low=1, high=SEARCH_TOP_K_MAX, default=SEARCH_TOP_K_DEFAULT
            )
            if not await self.kb.list():
                return {"ok": True, "results": [], "note": "知识库为空"}
            return {"ok": True, "results": await self.kb.search(query, top_k)}

        return await guard_kb("knowledge_search", run)

    # -- writes (loop only) ---------------------------------------------------------------

    async def create(self, args: Mapping[str, Any], ctx: ToolContext) -> dict[str, Any]:
        async def run() -> dict[str, Any]:
            entry = await self.kb.create(args.get("title"), args.get("summary"), args.get("body"))
            count_action(self.ctx, "knowledge_create")
            return {"ok": True, "entry": self._shown(entry.brief())}

        return await guard_kb("subconscious_knowledge_create", run)

    async def update(self, args: Mapping[str, Any], ctx: ToolContext) -> dict[str, Any]:
        async def run() -> dict[str, Any]:
            kid = parse_kid(args)
            entry = await self.kb.update(
                kid, title=args.get("title"), summary=args.get("summary"), body=args.get("body")
            )
            count_action(self.ctx, "knowledge_update")
            return {"ok": True, "entry": self._shown(entry.brief())}

        return await guard_kb("subconscious_knowledge_update", run)

    async def delete(self, args: Mapping[str, Any], ctx: ToolContext) -> dict[str, Any]:
        async def run() -> dict[str, Any]:
            kid = parse_kid(args)
            assert kid is not None
            await self.kb.delete(kid)
            count_action(self.ctx, "knowledge_delete")
            return {"ok": True, "deleted": kid}

        return await guard_kb("subconscious_knowledge_delete", run)
