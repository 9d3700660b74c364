"""Several real bot processes on one memory: the harness of ``tests/test_scale_out.py``.

:class:`SharedMemory` is what the bots share: one ``chroma run`` server (the
session's), one Chroma database on it, and one database for the plugin's
tables (``SQLALCHEMY_BINDS["amrita_plugin_memory"]``; a SQLite file here, the
URL is a parameter so a PostgreSQL one can be given instead). Each
:class:`ScaleBot` is an ``ambot run`` in a project of its own (its own ``.env``,
port, Amrita tables in its own SQLite, local data dir) in remote mode on that
memory, driven through its real interfaces: a OneBot V11 reverse WebSocket
(chat turns whose model, the session's chat server, calls ``write_memory`` /
``read_memory``), the WebUI's admin API (logged in with ``WEBUI_PASSWORD``)
and ``ambot memory`` in its project (which asks the running bot).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import re
import signal
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import websockets

from tests.botproject import BotProject
from tests.chat import BotRecorder
from tests.console_bot import PASSWORD, USER, RunningBot
from tests.events import BOT_ID
from tests.servers import ChatServer, ChromaServer, Reply

__all__ = [
    "DEADLINE",
    "ChatTurns",
    "OneBotLink",
    "ScaleBot",
    "SharedMemory",
    "collection_count",
    "connect_onebot",
    "partition_of",
    "poll_until",
    "running",
    "stored_documents",
]

DEADLINE = 120.0
"""Hang guard of one chat turn or start-up, never a measurement."""

REMEMBER = "记住："
RECALL = "回忆："
_FACT = re.compile(re.escape(REMEMBER) + r"([^。]+。)")
_QUERY = re.compile(re.escape(RECALL) + r"([^。]+。)")
_message_ids = itertools.count(1)


def partition_of(user_id: int) -> str:
    """The personal partition of a QQ user (Amrita's key format, as ``tests.botproject``)."""
    return f"QQPlatform_Private_{user_id}"


@dataclass(frozen=True)
class SharedMemory:
    """What every bot of a test shares: the Chroma server and database, the plugin database."""

    chroma: ChromaServer
    chroma_database: str
    database_url: str

    @classmethod
    def fresh(cls, chroma: ChromaServer, database_url: str) -> SharedMemory:
        return cls(chroma, f"scale_out_{uuid.uuid4().hex[:8]}", database_url)

    def env(self) -> dict[str, str]:
        """The ``.env`` keys that put a bot on this memory (remote mode, the bind)."""
        binds = json.dumps({"amrita_plugin_memory": self.database_url}, separators=(",", ":"))
        return {
            "VECTOR_DB_TYPE": "remote",
            "VECTOR_DB_SERVER": self.chroma.host,
            "VECTOR_DB_PORT": str(self.chroma.port),
            "VECTOR_DB_DATABASE": self.chroma_database,
            "SQLALCHEMY_BINDS": binds,
        }


def chat_config(root: Path, chat_base_url: str) -> None:
    """Amrita's chat on (the session's chat server as its model), replies in one piece."""
    chat_dir = root / "config" / "chat"
    (chat_dir / "models").mkdir(parents=True, exist_ok=True)
    (chat_dir / "config.toml").write_text(
        "enable = true\n\n[function]\nnature_chat_style = false\n", encoding="utf-8"
    )
    preset = {"name": "default", "model": "mock-model", "base_url": chat_base_url}
    preset["api_key"] = "sk-test"
    (chat_dir / "models" / "default.json").write_text(json.dumps(preset), encoding="utf-8")


class ScaleBot:
    """One ``ambot run`` on the shared memory (start with :meth:`start`, stop with :meth:`stop`)."""

    def __init__(
        self,
        root: Path,
        shared: SharedMemory,
        chat: ChatServer,
        *,
        memory_limit: int,
        sections: str = "[active_memory]\nenabled = false\n",
    ) -> None:
        """``sections``: the plugin configuration's tables (besides ``[archive]``, off)."""
        self.project = BotProject(root)
        chat_config(root, chat.base_url)
        plugin = root / "config" / "amrita_plugin_memory" / "config.toml"
        plugin.parent.mkdir(parents=True, exist_ok=True)
        plugin.write_text(
            f"per_session_memory_limit = {memory_limit}\n\n{sections}\n"
            "[archive]\nenabled = false\n",
            encoding="utf-8",
        )
        self.project.write_env(**shared.env())
        self.running = RunningBot(self.project, l3=False)

    @property
    def url(self) -> str:
        return self.running.url

    @property
    def onebot_url(self) -> str:
        return f"ws://127.0.0.1:{self.running.port}/onebot/v11/ws"

    def start(self) -> None:
        self.running.start()

    def stop(self) -> int | None:
        return self.running.stop()

    def log(self) -> str:
        return self.running.log()

    def kill(self) -> None:
        """``kill -9`` the bot's whole process group (no shutdown runs)."""
        proc, self.running.proc = self.running.proc, None
        assert proc is not None, "the bot is not running"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)

    @contextlib.asynccontextmanager
    async def webui(self) -> AsyncIterator[httpx.AsyncClient]:
        """A client logged in through the WebUI's real login."""
        # A sweep of thousands of memories answers only when done: minutes on a busy machine.
        async with httpx.AsyncClient(base_url=self.url, timeout=300) as client:
            resp = await client.post(
                "/api/auth/login", json={"username": USER, "password": PASSWORD}
            )
            assert resp.json()["success"], resp.text
            yield client

    def onebot(self, friends: set[int]) -> contextlib.AbstractAsyncContextManager[OneBotLink]:
        """A OneBot V11 implementation connected to this bot until the block ends."""
        return connect_onebot(self.onebot_url, friends)


@contextlib.asynccontextmanager
async def connect_onebot(
    url: str, friends: set[int], clock: Callable[[], float] = time.time
) -> AsyncIterator[OneBotLink]:
    """A OneBot V11 implementation connected to the bot at ``url`` (its reverse WebSocket)
    until the block ends; its events carry ``clock()`` as their time."""
    headers = {"X-Self-ID": str(BOT_ID), "X-Client-Role": "Universal"}
    async with websockets.connect(url, additional_headers=headers) as ws:
        link = OneBotLink(ws, BotRecorder(friends=set(friends)), clock)
        serving = asyncio.create_task(link.serve())
        try:
            yield link
        finally:
            serving.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await serving


class OneBotLink:
    """The OneBot side of one bot's reverse WebSocket: pushes messages, answers API calls."""

    def __init__(
        self, ws: Any, recorder: BotRecorder, clock: Callable[[], float] = time.time
    ) -> None:
        """``clock``: the time stamped on each event (a bot whose clock is set back gets
        events from its own day, as from a OneBot implementation on the same machine)."""
        self.ws = ws
        self.recorder = recorder
        self.clock = clock

    async def serve(self) -> None:
        async for raw in self.ws:
            frame = json.loads(raw)
            if "action" not in frame:
                continue
            try:
                data = self.recorder.answer(frame["action"], frame.get("params") or {})
                reply = {"status": "ok", "retcode": 0, "data": data}
            except Exception as exc:  # refused like a QQ client would
                reply = {"status": "failed", "retcode": 100, "data": None, "message": str(exc)}
            await self.ws.send(json.dumps({**reply, "echo": frame.get("echo")}))

    def replies(self) -> list[str]:
        return self.recorder.texts("private")

    async def say(self, user_id: int, text: str) -> None:
        """A private message of ``user_id``; returns once the bot has replied."""
        before = len(self.replies())
        event = {
            "time": int(self.clock()),
            "self_id": BOT_ID,
            "post_type": "message",
            "message_type": "private",
            "sub_type": "friend",
            "message_id": next(_message_ids),
            "user_id": user_id,
            "message": [{"type": "text", "data": {"text": text}}],
            "raw_message": text,
            "font": 0,
            "sender": {"user_id": user_id, "nickname": f"user{user_id}"},
        }
        await self.ws.send(json.dumps(event))
        await poll_until(lambda: len(self.replies()) > before, DEADLINE, f"a reply to {text!r}")

    async def say_in_group(self, user_id: int, group_id: int, text: str, *, to_me: bool) -> None:
        """A group message of ``user_id`` (``to_me``: at the bot, which then answers, and
        this returns once it has; otherwise it returns at once)."""
        before = len(self.recorder.texts("group"))
        segments: list[dict[str, Any]] = [{"type": "text", "data": {"text": text}}]
        if to_me:
            segments.insert(0, {"type": "at", "data": {"qq": str(BOT_ID)}})
        event = {
            "time": int(self.clock()),
            "self_id": BOT_ID,
            "post_type": "message",
            "message_type": "group",
            "sub_type": "normal",
            "message_id": next(_message_ids),
            "group_id": group_id,
            "user_id": user_id,
            "message": segments,
            "raw_message": text,
            "font": 0,
            "sender": {"user_id": user_id, "nickname": f"user{user_id}", "role": "member"},
        }
        await self.ws.send(json.dumps(event))
        if to_me:
            await poll_until(
                lambda: len(self.recorder.texts("group")) > before, DEADLINE, f"a reply to {text!r}"
            )


def _text_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


def _parsed(text: str) -> dict[str, Any]:
    """A tool result: the tool's JSON, or Amrita's text when the call itself failed."""
    try:
        return json.loads(text)
    except ValueError:
        return {"ok": None, "failed": text}


class ChatTurns:
    """The chat model of every bot: ``记住：<fact>。`` calls ``write_memory`` with the fact,
    ``回忆：<query>。`` calls ``read_memory``; a tool's result gets a short text. Stateless, so
    bots chatting at once each get the answer their own request asks for."""

    def __init__(self, server: ChatServer) -> None:
        self.server = server
        server.set_rule(self._rule)

    def _rule(self, body: dict[str, Any]) -> Reply | None:
        messages = body.get("messages") or []
        tools = {str((t.get("function") or {}).get("name")) for t in body.get("tools") or []}
        if not messages or "write_memory" not in tools:
            return None
        if messages[-1].get("role") == "tool":
            return Reply.text("好的。")
        last = _text_of(messages[-1])
        if fact := _FACT.search(last):
            args = {
                "content": fact.group(1),
                "tags": ["测试"],
                "importance": "high",
                "scope": "user",
            }
            return Reply.tool_call("write_memory", args)
        if query := _QUERY.search(last):
            return Reply.tool_call("read_memory", {"query": query.group(1), "scope": "user"})
        return None

    def tool_results(self) -> list[dict[str, Any]]:
        """Every tool result the bots sent back to the model (parsed), without repeats."""
        seen: dict[str, str] = {}
        for request in self.server.requests:
            for message in request.get("messages", []):
                if message.get("role") == "tool":
                    seen.setdefault(str(message.get("tool_call_id")), _text_of(message))
        return [_parsed(text) for text in seen.values()]

    def write_result(self, fact: str) -> dict[str, Any]:
        """The ``write_memory`` result for ``fact`` (the turn must have ended)."""
        for result in self.tool_results():
            if (result.get("memory") or {}).get("content") == fact:
                return result
        refusals = [r for r in self.tool_results() if r.get("ok") is False]
        raise AssertionError(f"no stored write of {fact!r} (refusals: {refusals})")


@contextlib.contextmanager
def running(*bots: ScaleBot) -> Iterator[None]:
    """The schema upgraded once from the first bot's project (as the docs say), then every
    bot started; all stopped at the end (the chat server's script and rule cleared)."""
    upgrade = bots[0].project.command("orm", "upgrade")
    assert upgrade.returncode == 0, upgrade.stdout + upgrade.stderr
    started: list[ScaleBot] = []
    try:
        for bot in bots:
            bot.start()
            started.append(bot)
        yield
    finally:
        for bot in started:
            bot.stop()
        from tests.conftest import CHAT

        CHAT.clear()


async def poll_until(condition: Callable[[], bool], guard: float, what: str) -> None:
    """Wait until ``condition()`` holds, polling (``guard`` seconds only guard a hang)."""
    try:
        async with asyncio.timeout(guard):
            # Another process changes the state: polled.
            while not condition():  # noqa: ASYNC110
                await asyncio.sleep(0.05)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


def stored_documents(
    shared: SharedMemory, partition: str, collection: str = "amrita_user_memory"
) -> list[str]:
    """The documents of ``partition`` straight from the shared Chroma database (the live
    memories, or those of another ``collection``: the archive)."""
    import chromadb
    from chromadb.config import Settings

    client = chromadb.HttpClient(
        host=shared.chroma.host,
        port=shared.chroma.port,
        settings=Settings(anonymized_telemetry=False),
        database=shared.chroma_database,
    )
    try:
        found = client.get_collection(collection)
    except Exception:  # not created yet (chromadb raises NotFoundError or ValueError)
        return []
    res = found.get(where={"user_id": partition}, include=["documents"])
    return [str(d) for d in res["documents"] or []]


def collection_count(shared: SharedMemory, collection: str) -> int:
    """Rows in a collection of the shared Chroma database (0 while it does not exist)."""
    import chromadb
    from chromadb.config import Settings

    client = chromadb.HttpClient(
        host=shared.chroma.host,
        port=shared.chroma.port,
        settings=Settings(anonymized_telemetry=False),
        database=shared.chroma_database,
    )
    try:
        return client.get_collection(collection).count()
    except Exception:  # not created yet
        return 0
