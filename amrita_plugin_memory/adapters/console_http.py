"""The admin API's FastAPI routes (``/api/memory/...``): HTTP in, console operation, JSON out.

Thin by design: every route reads the request (query string, path segment,
raw JSON body), calls one method of :class:`~..console.service.ConsoleService`
and wraps the result in the WebUI's response envelope
``{"code", "message", "success", "data"}``. Validation, limits, errors and
the audit log are the console layer's.

Security: the router is reachable only behind the WebUI's login middleware
or the local token (:mod:`.console_auth`). No GET changes anything; a write
must carry a JSON body (or none) and, when the browser sends an ``Origin``,
come from the WebUI's own origin, so a page of another site cannot trigger one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, JSONResponse
from nonebot import logger

from ..console.errors import ConsoleError
from ..console.params import json_body
from ..console.service import ConsoleService
from ..core.errors import ErrorKind

__all__ = ["PAGE_MODULE", "build_router", "envelope"]

PAGE_MODULE = Path(__file__).with_name("static") / "memory_console.js"
"""The page (a static ES module using the WebUI's React), served by :func:`build_router`."""

ActorOf = Callable[[Request], Awaitable[str]]

_KNOWLEDGE_FIELDS = ("title", "summary", "body")


def envelope(status: int, message: str, data: Any = None) -> JSONResponse:
    return JSONResponse(
        {"code": status, "message": message, "success": status < 400, "data": data},
        status_code=status,
    )


def _same_origin(request: Request) -> bool:
    origin = request.headers.get("origin")
    if not origin:
        return True  # not a browser's cross-origin request (curl, the command line)
    host = request.headers.get("host", "")
    return urlsplit(origin).netloc.lower() == host.lower()


async def _body(request: Request, allowed: tuple[str, ...]) -> dict[str, Any]:
    raw = await request.body()
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if raw.strip() and kind != "application/json":
        raise ConsoleError(
            ErrorKind.INVALID, "请求体必须是 JSON（Content-Type: application/json）", status=415
        )
    return json_body(raw, allowed)


def build_router(service: ConsoleService, actor_of: ActorOf) -> APIRouter:
    """The routes of the admin API (mounted under ``/api/memory``)."""
    router = APIRouter()

    async def respond(
        request: Request,
        call: Callable[[], Awaitable[Any]],
        *,
        status: int = 200,
        local: bool = True,
    ) -> JSONResponse:
        """The envelope of ``call``'s answer; ``local``: its stamps in the owner's zone
        (every answer but a user's export, which keeps UTC: ``console/dates``)."""
        if request.method != "GET" and not _same_origin(request):
            return envelope(403, "跨站请求被拒绝")
        try:
            data = await call()
        except ConsoleError as exc:
            return envelope(exc.status, exc.message)
        except Exception as exc:
            logger.opt(exception=exc).error(f"[Memory] 控制台接口 {request.url.path} 出错")
            return envelope(500, f"内部错误：{exc.__class__.__name__}")
        return envelope(status, "ok", service.shown(data) if local else data)

    def query(request: Request) -> dict[str, str]:
        return dict(request.query_params)

    # -- overview -------------------------------------------------------------

    @router.get("/status")
    async def status(request: Request) -> JSONResponse:
        return await respond(request, lambda: service.status(query(request)))

    @router.get("/partitions")
    async def partitions(request: Request) -> JSONResponse:
        return await respond(request, lambda: service.memories.partitions(query(request)))

    # -- memories -----------------------------------------------------------------

    @router.get("/memories")
    async def memories(request: Request) -> JSONResponse:
        return await respond(request, lambda: service.memories.list(query(request)))

    @router.patch("/memories/{memory_id}")
    async def update_memory(request: Request, memory_id: str) -> JSONResponse:
        async def call() -> Any:
            body = await _body(request, ("content", "tags", "importance"))
            partition = request.query_params.get("partition")
            return await service.memories.update(
                await actor_of(request), memory_id, partition, body
            )

        return await respond(request, call)

    @router.delete("/memories/{memory_id}")
    async def delete_memory(request: Request, memory_id: str) -> JSONResponse:
        async def call() -> Any:
            partition = request.query_params.get("partition")
            return await service.memories.delete(await actor_of(request), memory_id, partition)

        return await respond(request, call)

    @router.get("/timeline")
    async def timeline(request: Request) -> JSONResponse:
        return await respond(request, lambda: service.timeline.timeline(query(request)))

    # -- archive ----------------------------------------------------------------------

    @router.get("/archive")
    async def archive(request: Request) -> JSONResponse:
        return await respond(request, lambda: service.archive.list(query(request)))

    @router.post("/archive/sweep")
    async def archive_sweep(request: Request) -> JSONResponse:
        async def call() -> Any:
            await _body(request, ())
            return await service.archive.sweep(await actor_of(request))

        return await respond(request, call)

    # ``path``: an id with a slash still reaches the handler (and gets its clear answer).
    @router.post("/archive/{row_id:path}/restore")
    async def archive_restore(request: Request, row_id: str) -> JSONResponse:
        async def call() -> Any:
            await _body(request, ())
            return await service.archive.restore(await actor_of(request), row_id)

        return await respond(request, call)

    # -- memos ----------------------------------------------------------------------

    @router.get("/memos")
    async def memos(request: Request) -> JSONResponse:
        return await respond(request, lambda: service.memos.list(query(request)))

    @router.get("/memos/{uni_id}")
    async def memo(request: Request, uni_id: str) -> JSONResponse:
        return await respond(request, lambda: service.memos.get(uni_id))

    @router.put("/memos/{uni_id}")
    async def put_memo(request: Request, uni_id: str) -> JSONResponse:
        async def call() -> Any:
            body = await _body(request, ("content",))
            return await service.memos.put(await actor_of(request), uni_id, body)

        return await respond(request, call)

    @router.delete("/memos/{uni_id}")
    async def delete_memo(request: Request, uni_id: str) -> JSONResponse:
        async def call() -> Any:
            return await service.memos.delete(await actor_of(request), uni_id)

        return await respond(request, call)

    # -- knowledge base and profile ----------------------------------------------------

    @router.get("/knowledge")
    async def knowledge(request: Request) -> JSONResponse:
        return await respond(request, lambda: service.knowledge.list(query(request)))

    @router.post("/knowledge")
    async def create_knowledge(request: Request) -> JSONResponse:
        async def call() -> Any:
            body = await _body(request, _KNOWLEDGE_FIELDS)
            return await service.knowledge.create(await actor_of(request), body)

        return await respond(request, call, status=201)

    @router.get("/knowledge/{kid}")
    async def knowledge_entry(request: Request, kid: str) -> JSONResponse:
        return await respond(request, lambda: service.knowledge.get(kid))

    @router.patch("/knowledge/{kid}")
    async def update_knowledge(request: Request, kid: str) -> JSONResponse:
        async def call() -> Any:
            body = await _body(request, _KNOWLEDGE_FIELDS)
            return await service.knowledge.update(await actor_of(request), kid, body)

        return await respond(request, call)

    @router.delete("/knowledge/{kid}")
    async def delete_knowledge(request: Request, kid: str) -> JSONResponse:
        async def call() -> Any:
            return await service.knowledge.delete(await actor_of(request), kid)

        return await respond(request, call)

    @router.get("/profile")
    async def profile(request: Request) -> JSONResponse:
        return await respond(request, service.profile.get)

    @router.put("/profile/{section}")
    async def put_profile(request: Request, section: str) -> JSONResponse:
        async def call() -> Any:
            body = await _body(request, ("content",))
            return await service.profile.put(await actor_of(request), section, body)

        return await respond(request, call)

    # -- group awareness: personas and self memory ----------------------------------------

    @router.get("/personas")
    async def personas(request: Request) -> JSONResponse:
        return await respond(request, lambda: service.groups.personas(query(request)))

    @router.get("/personas/{user_id}")
    async def persona(request: Request, user_id: str) -> JSONResponse:
        return await respond(request, lambda: service.groups.persona(user_id))

    @router.patch("/personas/{user_id}")
    async def update_persona(request: Request, user_id: str) -> JSONResponse:
        async def call() -> Any:
            body = await _body(request, ("field", "value"))
            return await service.groups.set_field(await actor_of(request), user_id, body)

        return await respond(request, call)

    @router.delete("/personas/{user_id}")
    async def clear_persona(request: Request, user_id: str) -> JSONResponse:
        async def call() -> Any:
            return await service.groups.clear(await actor_of(request), user_id)

        return await respond(request, call)

    @router.get("/self")
    async def self_memory(request: Request) -> JSONResponse:
        return await respond(request, service.groups.self_memory)

    @router.post("/self")
    async def add_self(request: Request) -> JSONResponse:
        async def call() -> Any:
            body = await _body(request, ("content",))
            return await service.groups.add_self(await actor_of(request), body)

        return await respond(request, call, status=201)

    @router.delete("/self/{entry_id}")
    async def delete_self(request: Request, entry_id: str) -> JSONResponse:
        async def call() -> Any:
            return await service.groups.delete_self(await actor_of(request), entry_id)

        return await respond(request, call)

    # -- one user's data: export, what a forget removes, the forget ------------------------

    @router.get("/users/{user_id}/export")
    async def export_user(request: Request, user_id: str) -> JSONResponse:
        async def call() -> Any:
            return await service.users.export(await actor_of(request), user_id)

        return await respond(request, call, local=False)

    @router.get("/users/{user_id}/forget")
    async def forget_preview(request: Request, user_id: str) -> JSONResponse:
        return await respond(request, lambda: service.users.preview(user_id))

    @router.delete("/users/{user_id}")
    async def forget_user(request: Request, user_id: str) -> JSONResponse:
        async def call() -> Any:
            return await service.users.forget(await actor_of(request), user_id)

        return await respond(request, call)

    @router.post("/import")
    async def import_memories(request: Request) -> JSONResponse:
        async def call() -> Any:
            body = await _body(request, ("lines",))
            return await service.imports.run(await actor_of(request), body)

        return await respond(request, call)

    # -- maintenance ---------------------------------------------------------------------

    @router.get("/backups")
    async def backups(request: Request) -> JSONResponse:
        async def call() -> Any:
            return service.jobs.backups()

        return await respond(request, call)

    @router.post("/backups")
    async def create_backup(request: Request) -> JSONResponse:
        async def call() -> Any:
            await _body(request, ())
            return await service.jobs.create_backup(await actor_of(request))

        return await respond(request, call, status=201)

    @router.post("/backups/{name}/restore")
    async def restore(request: Request, name: str) -> JSONResponse:
        async def call() -> Any:
            await _body(request, ())
            return await service.jobs.start_restore(await actor_of(request), name)

        return await respond(request, call, status=202)

    @router.post("/reindex")
    async def reindex(request: Request) -> JSONResponse:
        async def call() -> Any:
            await _body(request, ())
            return await service.jobs.start_reindex(await actor_of(request))

        return await respond(request, call, status=202)

    @router.get("/jobs/current")
    async def current_job(request: Request) -> JSONResponse:
        async def call() -> Any:
            return {"job": service.jobs.current(), "busy": service.jobs.busy}

        return await respond(request, call)

    # -- the page ----------------------------------------------------------------------------

    @router.get("/ui/console.js", include_in_schema=False)
    async def page_module() -> FileResponse:
        return FileResponse(
            PAGE_MODULE,
            media_type="text/javascript; charset=utf-8",
            headers={"Cache-Control": "no-cache"},
        )

    return router
