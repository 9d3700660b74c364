"""Who may call the admin API: the WebUI's login, or the local token of ``ambot memory``.

Browser requests pass the WebUI's own login middleware (a 401 JSON without
a session). ``ambot memory`` cannot log in (it does not know the WebUI
password, and must not need it), so while the bot runs it sends the random
token the bot wrote at start into ``<data_dir>/.console_token.json`` (0600,
see :mod:`..infra.bot_link`). :class:`LocalTokenMiddleware` sits in front of
the WebUI's middleware: a request to ``/api/memory/...`` that carries the
token header from a local address is answered by a private app holding the
same routes; a wrong or foreign token is a 401; a request without the header
goes on to the WebUI as usual. The token is never logged.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

from nonebot import logger

from ..infra.bot_link import (
    TOKEN_HEADER,
    BotEndpoint,
    remove_token_file,
    token_matches,
    write_token_file,
)

__all__ = [
    "ACTOR_SCOPE_KEY",
    "API_PREFIX",
    "LOCAL_ACTOR",
    "LocalToken",
    "LocalTokenMiddleware",
    "webui_actor",
]

API_PREFIX = "/api/memory"
ACTOR_SCOPE_KEY = "amrita_memory_console_actor"
LOCAL_ACTOR = "ambot memory（本地令牌）"

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class LocalToken:
    """The token of this bot process: written at startup, removed at shutdown."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.endpoint: BotEndpoint | None = None

    def start(self, host: str, port: int) -> None:
        try:
            self.endpoint = write_token_file(self.data_dir, host, port)
        except OSError as exc:
            logger.warning(
                f"[Memory] 无法写入本地令牌文件（{self.data_dir}）：{exc}；"
                "Bot 运行期间 ambot memory 将无法连接本进程"
            )
            return
        logger.info(f"[Memory] 管理接口本地令牌已写入 {self.data_dir}（仅本机、仅本账户可读）")

    def stop(self) -> None:
        if self.endpoint is not None:
            remove_token_file(self.data_dir, self.endpoint.token)
            self.endpoint = None

    def accepts(self, given: str | None) -> bool:
        return self.endpoint is not None and token_matches(self.endpoint.token, given)


def _is_local(client: Any, bound: str) -> bool:
    host = client[0] if isinstance(client, tuple | list) and client else ""
    if host == bound.strip("[]"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _header(scope: Scope, name: str) -> str | None:
    wanted = name.lower().encode("latin-1")
    for key, value in scope.get("headers") or ():
        if key.lower() == wanted:
            return value.decode("latin-1")
    return None


async def _unauthorized(send: Send, message: str) -> None:
    body = json.dumps(
        {"code": 401, "message": message, "success": False, "data": None}, ensure_ascii=False
    ).encode("utf-8")
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/json; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class LocalTokenMiddleware:
    """ASGI middleware: requests with the local token go to ``local_app`` (see module doc)."""

    def __init__(self, app: ASGIApp, *, token: LocalToken, local_app: ASGIApp) -> None:
        self.app = app
        self.token = token
        self.local_app = local_app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope.get("type") != "http" or not path.startswith(API_PREFIX + "/"):
            await self.app(scope, receive, send)
            return
        given = _header(scope, TOKEN_HEADER)
        if given is None:
            await self.app(scope, receive, send)
            return
        endpoint = self.token.endpoint
        bound = endpoint.host if endpoint is not None else ""
        if not (self.token.accepts(given) and _is_local(scope.get("client"), bound)):
            logger.warning(f"[Memory] 管理接口拒绝了一个本地令牌无效的请求：{path}")
            await _unauthorized(send, "本地令牌无效")
            return
        scope[ACTOR_SCOPE_KEY] = LOCAL_ACTOR
        await self.local_app(scope, receive, send)


async def webui_actor(scope: Scope, cookies: dict[str, str]) -> str:
    """The WebUI user of a request (the login middleware has let it in), or the local marker."""
    marked = scope.get(ACTOR_SCOPE_KEY)
    if isinstance(marked, str):
        return marked
    try:
        from amrita.plugins.webui.service.authlib import TOKEN_KEY, TokenManager

        data = await TokenManager().get_token_data(cookies.get(TOKEN_KEY, ""), None)
    except Exception:
        data = None
    name = getattr(data, "username", None)
    return f"WebUI 用户 {name}" if name else "WebUI 用户"
