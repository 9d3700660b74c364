"""Mounting the admin console: the WebUI page, the API router, its WebSocket channel, the local token.

Everything is registered at plugin import time, as the WebUI requires
(its SPA catch-all route is added at driver startup and would otherwise
shadow ours). Without the WebUI (``WEBUI_ENABLE=false``) there is no page and
no browser access, but ``ambot memory`` still reaches the running bot
through the local token. Without a FastAPI driver there is no console.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from nonebot import get_driver, logger

from ..console.service import ConsoleService
from ..services import MemoryRuntime
from ..storage.groups.stores import GroupStores
from ..subconscious.runner import SubconsciousRunner
from ..upkeep.users.user_data import UserData
from .console_auth import API_PREFIX, LocalToken, LocalTokenMiddleware, webui_actor
from .console_http import build_router

__all__ = ["PAGE_PATH", "WS_CHANNEL", "setup_console"]

WS_CHANNEL = "amrita_memory"
"""The WebUI WebSocket channel with the progress of maintenance jobs."""
PAGE_PATH = "/memory/console"
PAGE_NAME = "记忆管理"
PAGE_CATEGORY = "记忆"


def _asgi_app() -> FastAPI | None:
    import nonebot

    try:
        app = nonebot.get_app()
    except Exception:
        return None
    return app if isinstance(app, FastAPI) else None


def _webui_enabled() -> bool:
    try:
        from amrita.plugins.webui.service.config import get_webui_config

        return bool(get_webui_config().webui_enable)
    except Exception:
        return False


def setup_console(
    runtime: MemoryRuntime,
    runner: SubconsciousRunner | None = None,
    groups: GroupStores | None = None,
    user_data: UserData | None = None,
) -> ConsoleService | None:
    """Build the console and register its routes, page, channel and local token."""
    app = _asgi_app()
    if app is None:
        logger.info("[Memory] 当前驱动不是 FastAPI，记忆管理控制台未启用")
        return None
    webui = _webui_enabled()

    async def publish(message: dict[str, Any]) -> None:
        from amrita.plugins.webui.API import broadcast_ws

        await broadcast_ws(WS_CHANNEL, message)

    service = ConsoleService(runtime, runner, groups, user_data, publish=publish if webui else None)

    async def actor_of(request: Request) -> str:
        return await webui_actor(request.scope, dict(request.cookies))

    router = build_router(service, actor_of)
    if webui:
        from amrita.plugins.webui.API import register_page, register_router, register_ws_channel

        register_router(router, prefix=API_PREFIX, tags=["amrita_plugin_memory"])
        register_ws_channel(
            WS_CHANNEL,
            lambda: {
                "channel": WS_CHANNEL,
                "data": {"event": "snapshot", "job": service.jobs.current()},
            },
        )
        register_page(
            PAGE_PATH,
            PAGE_NAME,
            category=PAGE_CATEGORY,
            icon="database",
            module_url=f"{API_PREFIX}/ui/console.js",
        )
    else:
        logger.info(
            "[Memory] WebUI 未启用：记忆管理页面不可用（ambot memory 仍可连接运行中的 Bot）"
        )

    local = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)
    local.include_router(router, prefix=API_PREFIX)
    token = LocalToken(runtime.config.data_dir)
    try:
        app.add_middleware(LocalTokenMiddleware, token=token, local_app=local)  # type: ignore[arg-type]
    except RuntimeError as exc:  # the app already serves requests (a plugin loaded late)
        logger.warning(f"[Memory] 无法挂载本地令牌中间件（{exc}）；ambot memory 将无法连接本进程")
        return service
    driver = get_driver()

    async def write_token() -> None:
        token.start(str(driver.config.host), int(driver.config.port))

    async def remove_token() -> None:
        token.stop()

    driver.on_startup(write_token)
    driver.on_shutdown(remove_token)
    return service
