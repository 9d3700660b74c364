"""Two bots on one store: a forget through one is final in the other; labels stay unique.

Two ``ambot run`` (``tests/scale_out_bots.py``) in remote mode on the session's
``chroma run`` and one database of the session's PostgreSQL cluster, with active
memory, the group window, personas and the L3 loop on (the same target user in
both). Users are forgotten through bot A (``ambot memory forget`` in its project,
which asks the running bot); what bot B held or was doing for them must not bring
anything back:

* turns B queued for active memory before the forget are never learned (B takes
  the forget as a point in time, not as a state when its batch leaves the queue);
* B's L3 loop neither writes back the waiting message and abstract the forget
  removed nor delivers that message, and a cycle B began before the forget writes
  nothing after it;
* while A's forget is still running (its partition's lease held here by the test, so
  it waits in the middle), B's persona extraction does not send the forgotten
  member's earlier group messages to the model.

And two members of one group that two bots named never get one label: the
second bot's cache never saw the first's label, the database's unique index
does (the allocation retries with the next free label).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections import deque
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from tests.conftest import CHAT, env_for
from tests.scale_out_bots import (
    DEADLINE,
    ScaleBot,
    SharedMemory,
    partition_of,
    poll_until,
    running,
    stored_documents,
)
from tests.servers import ChromaServer, Reply
from tests.servers.postgres import PostgresServer

pytestmark = pytest.mark.timeout(900)  # two bots started, a dozen chat turns and cycles

TARGET = 10031  # the L3 loop's target user (both bots)
LEARNER = 10032  # active memory
SWITCHER = 10036  # active memory: off and on again
MEMBER, SPEAKER, GROUP = 10033, 10034, 20031  # a group window and personas
FIRST, HOLDER, SECOND, LABELS = 10035, 20001234, 30001234, 20032  # labels
USERS = {TARGET, LEARNER, SWITCHER, MEMBER, SPEAKER, FIRST, HOLDER, SECOND}

SECTIONS = f"""\
[active_memory]
enabled = true
batch_messages = 2
idle_seconds = 3600
notice = false
recall = false

[group_context]
enabled = true
context_persist_every = 1

[persona]
enabled = true
update_interval_seconds = 0

[subconscious]
enabled = true
target_user_id = "{TARGET}"
rethink_base_delay_minutes = 0.01
enable_knowledge = false
"""

STOP = Reply.tool_call("subconscious_iter_stop", {"summary": "无事可做"})


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


def _tools(body: dict[str, Any]) -> set[str]:
    return {str((t.get("function") or {}).get("name")) for t in body.get("tools") or []}


class Model:
    """The chat model of both bots: active memory's extraction adds every message it is
    shown, persona extraction learns nothing, an L3 cycle follows the next plan (a list
    of replies, one per request; nothing planned: it stops), a chat turn gets text."""

    def __init__(self) -> None:
        self.plans: deque[list[Reply]] = deque()
        self._cycle: list[Reply] = []
        CHAT.clear()
        CHAT.set_rule(self.rule)

    def rule(self, body: dict[str, Any]) -> Reply | None:
        messages = body.get("messages") or []
        system = _text(messages[0]) if messages else ""
        if system.startswith("[memory-extraction]"):
            said = [line[3:] for line in _text(messages[-1]).splitlines() if line[:3] == "用户："]
            adds = [
                {"op": "add", "content": t, "importance": "medium", "tags": ["测"]} for t in said
            ]
            return Reply.text(json.dumps({"memories": adds}, ensure_ascii=False))
        if system.startswith("[persona-extraction]"):
            return Reply.text('{"updates": []}')
        if any(name.startswith("subconscious_") for name in _tools(body)):
            if messages[-1].get("role") != "tool":  # a cycle's first request
                self._cycle = list(self.plans.popleft()) if self.plans else []
            return self._cycle.pop(0) if self._cycle else STOP
        return None

    @staticmethod
    def requests(marker: str) -> list[str]:
        """Every request (as JSON text) whose first message starts with ``marker`` (an
        extraction), or that offers tools named so (``subconscious_``: the loop), or a
        chat turn whose last message says ``marker``."""
        out = []
        for body in CHAT.requests:
            messages = body.get("messages") or []
            first = _text(messages[0]) if messages else ""
            tools = _tools(body)
            loop = any(t.startswith("subconscious_") for t in tools)
            if first.startswith(marker) or any(t.startswith(marker) for t in tools):
                out.append(json.dumps(body, ensure_ascii=False))
            elif not first.startswith("[") and not loop and messages:
                if marker in _text(messages[-1]):
                    out.append(json.dumps(body, ensure_ascii=False))
        return out

    @staticmethod
    def tool_result(name: str) -> dict[str, Any] | None:
        """The result the bots sent back for the first call of tool ``name``."""
        for body in CHAT.requests:
            calls: dict[str, str] = {}
            for message in body.get("messages") or []:
                for call in message.get("tool_calls") or []:
                    calls[str(call.get("id"))] = str((call.get("function") or {}).get("name"))
                if (
                    message.get("role") == "tool"
                    and calls.get(str(message.get("tool_call_id"))) == name
                ):
                    return json.loads(_text(message))
        return None


@pytest.fixture(scope="module")
def database(postgres: PostgresServer) -> str:
    return postgres.url(postgres.create_database("forget"))


@pytest.fixture(scope="module")
def bots(
    tmp_path_factory: Any, chroma_server: ChromaServer, database: str
) -> Iterator[tuple[ScaleBot, ScaleBot, SharedMemory]]:
    shared = SharedMemory.fresh(chroma_server, database)
    root = tmp_path_factory.mktemp("scale-out-forget")
    a, b = (
        ScaleBot(root / name, shared, CHAT, memory_limit=50, sections=SECTIONS)
        for name in ("a", "b")
    )
    with running(a, b):
        yield a, b, shared


@pytest.fixture
def model() -> Iterator[Model]:
    yield Model()
    CHAT.clear()


@contextlib.asynccontextmanager
async def sql(url: str) -> AsyncIterator[Any]:
    """The shared database, read from the test (an async engine; disposed at the end)."""
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(url)
    try:
        yield engine
    finally:
        await engine.dispose()


async def query(engine: Any, statement: str, **params: Any) -> list[Any]:
    from sqlalchemy import text

    async with engine.connect() as connection:
        return list((await connection.execute(text(statement), params)).all())


async def forget(bot: ScaleBot, user_id: int, *, check: bool = True) -> str:
    """``ambot memory forget`` of ``user_id`` through ``bot``; its output."""
    done = await asyncio.to_thread(
        bot.project.ambot, "forget", "--user", str(user_id), "--yes", timeout=DEADLINE
    )
    output = done.stdout + done.stderr
    if check:
        assert done.returncode == 0, output
        assert f"已遗忘用户 {user_id}" in done.stdout and "由运行中的 Bot" in done.stdout
    return output


async def test_turns_queued_before_a_forget_elsewhere_are_never_learned(
    bots: tuple[ScaleBot, ScaleBot, SharedMemory], model: Model
) -> None:
    a, b, shared = bots
    cat = "我养了一只猫叫年糕"
    async with b.onebot(USERS) as chat_b:
        await chat_b.say(LEARNER, "我的工号是A7731")  # queued by B (a batch is two turns)
        await forget(a, LEARNER)
        # Two more turns fill a batch, whether B already dropped the first turn (the
        # forget's feed row) or its batch drops it before building the request.
        await chat_b.say(LEARNER, cat)
        await chat_b.say(LEARNER, "年糕今年三岁")
        await poll_until(
            lambda: cat in stored_documents(shared, partition_of(LEARNER)),
            DEADLINE,
            "B's extraction to store what it learned",
        )
    assert model.requests("[memory-extraction]")
    assert not [r for r in model.requests("[memory-extraction]") if "A7731" in r]  # never sent
    assert not [d for d in stored_documents(shared, partition_of(LEARNER)) if "A7731" in d]


async def test_an_opt_out_through_a_voids_what_b_queued_even_after_auto_on(
    bots: tuple[ScaleBot, ScaleBot, SharedMemory], model: Model
) -> None:
    """``/memory auto off`` through A is a point in time too: switched on again at once
    (through B), what the user said before it (queued in B) is still never learned."""
    a, b, shared = bots
    cat = "我养了一只猫叫团子"
    async with a.onebot(USERS) as chat_a, b.onebot(USERS) as chat_b:
        await chat_b.say(SWITCHER, "我的车牌号是浙A9K551")  # queued by B
        await chat_a.say(SWITCHER, "/memory auto off")
        assert "已关闭主动记忆" in chat_a.replies()[-1], chat_a.replies()
        # On again at once, through B (a second command within Amrita's 5 s would be ignored).
        await chat_b.say(SWITCHER, "/memory auto on")
        assert "已开启主动记忆" in chat_b.replies()[-1], chat_b.replies()
        await chat_b.say(SWITCHER, cat)
        await chat_b.say(SWITCHER, "团子今年两岁")
        await poll_until(
            lambda: cat in stored_documents(shared, partition_of(SWITCHER)),
            DEADLINE,
            "B's extraction to store what it learned",
        )
    assert not [r for r in model.requests("[memory-extraction]") if "9K551" in r]
    assert not [d for d in stored_documents(shared, partition_of(SWITCHER)) if "9K551" in d]


async def test_bs_loop_keeps_nothing_of_a_target_forgotten_through_a(
    bots: tuple[ScaleBot, ScaleBot, SharedMemory], model: Model, database: str
) -> None:
    a, b, _ = bots
    note = Reply.tool_call("subconscious_note_for_user", {"intent": "提醒他按时吃降压药"})
    model.plans.append(
        [note, Reply.tool_call("subconscious_iter_stop", {"summary": "记下了吃药提醒"})]
    )
    async with b.onebot(USERS) as chat_b, sql(database) as db:
        await chat_b.say(TARGET, "最近有点累")  # plans B's cycle
        await poll_until(
            lambda: "Cycle #1 success" in b.log(), DEADLINE, "B's first cycle to note a message"
        )
        assert (model.tool_result("subconscious_note_for_user") or {}).get("ok") is True

        await forget(a, TARGET)
        await chat_b.say(TARGET, "今天天气不错")  # B's next private turn of the target
        turn = model.requests("今天天气不错")
        assert turn, "no request of the target's turn"
        assert "降压药" not in "".join(turn), "B delivered a note from before the forget"

        # The turn planned B's next cycle; its end saves the state: nothing comes back.
        await poll_until(
            lambda: "Cycle #2 success" in b.log(), DEADLINE, "B's cycle after the forget"
        )
        items = await query(db, "SELECT kind, data FROM amrita_plugin_memory_loop_item")
        state = await query(db, "SELECT data FROM amrita_plugin_memory_subconscious_state")
    stored = json.dumps([list(r) for r in [*items, *state]], ensure_ascii=False, default=str)
    assert "降压药" not in stored and "吃药提醒" not in stored, stored
    assert "无事可做" in stored  # the cycle after the forget is kept


async def test_a_cycle_b_began_before_a_forget_through_a_writes_nothing(
    bots: tuple[ScaleBot, ScaleBot, SharedMemory], model: Model
) -> None:
    a, b, shared = bots
    release = threading.Event()
    write = Reply.tool_call(
        "subconscious_write_memory",
        {"content": "用户生病了，在吃降压药", "tags": ["健康"], "importance": "high"},
    )
    model.plans.append([Reply(tool_calls=write.tool_calls, hold=release), STOP])
    try:
        async with b.onebot(USERS) as chat_b:
            before = len(model.requests("subconscious_"))
            await chat_b.say(TARGET, "周末去爬山了")  # plans B's cycle
            await poll_until(
                lambda: len(model.requests("subconscious_")) > before,
                DEADLINE,
                "B's cycle to ask the model (held)",
            )
            await forget(a, TARGET)
            release.set()  # the model answers the cycle begun before the forget
            await poll_until(
                lambda: model.tool_result("subconscious_write_memory") is not None,
                DEADLINE,
                "the result of B's tool call",
            )
    finally:
        release.set()
    result = model.tool_result("subconscious_write_memory")
    assert result is not None and result.get("ok") is False, result
    assert not [d for d in stored_documents(shared, partition_of(TARGET)) if "降压药" in d]


async def test_bs_persona_work_leaves_out_a_member_while_a_forgets_them(
    bots: tuple[ScaleBot, ScaleBot, SharedMemory], model: Model, database: str
) -> None:
    from sqlalchemy.ext.asyncio import async_sessionmaker

    from amrita_plugin_memory.storage.memory_store import MEMORY_COLLECTION
    from amrita_plugin_memory.storage.shared.coherence import Coherence
    from amrita_plugin_memory.storage.shared.leases import Leases

    a, b, shared = bots
    env = env_for("remote", shared.chroma, vector_db_database=shared.chroma_database)
    coherence = Coherence.remote(env, MEMORY_COLLECTION)
    assert coherence.leases is not None
    async with b.onebot(USERS) as chat_b, sql(database) as db:
        await chat_b.say_in_group(MEMBER, GROUP, "我是牙医，住在西湖边", to_me=False)
        await poll_until_rows(
            db, "SELECT id FROM amrita_plugin_memory_group_message WHERE user_id = :u",
            u=str(MEMBER),
        )  # fmt: skip
        # Another writer holds the member's partition: A's forget will wait in the middle.
        leases = Leases(sessions=async_sessionmaker(db), scope=coherence.leases.scope)
        name = coherence.lease_name(partition_of(MEMBER))
        assert await leases.try_take(name, "test", ttl=120)
        forgetting = asyncio.create_task(forget(a, MEMBER, check=False))
        try:
            await poll_until_rows(
                db, "SELECT at_us FROM amrita_plugin_memory_forgotten_user WHERE user_id = :u",
                u=str(MEMBER),
            )  # fmt: skip
            assert not forgetting.done()
            await chat_b.say_in_group(SPEAKER, GROUP, "我喜欢周末去爬山", to_me=True)
            await poll_until(
                lambda: bool(model.requests("[persona-extraction]")),
                DEADLINE,
                "B's persona extraction",
            )
        finally:
            await leases.release(name, "test")
        if f"已遗忘用户 {MEMBER}" not in await forgetting:
            # A busy machine kept the lease past A's wait (30 s): the forget stopped after
            # its tombstone; run again, it completes (what matters here was checked above).
            await forget(a, MEMBER)
    (request,) = model.requests("[persona-extraction]")
    assert "爬山" in request and "牙医" not in request


async def poll_until_rows(db: Any, statement: str, **params: Any) -> None:
    async with asyncio.timeout(DEADLINE):  # hang guard
        # Another process writes the rows: polled.
        while not await query(db, statement, **params):  # noqa: ASYNC110
            await asyncio.sleep(0.05)


async def test_two_bots_never_give_two_members_one_label(
    bots: tuple[ScaleBot, ScaleBot, SharedMemory], model: Model, database: str
) -> None:
    a, b, _ = bots
    async with a.onebot(USERS) as chat_a, b.onebot(USERS) as chat_b, sql(database) as db:
        await chat_b.say_in_group(FIRST, LABELS, "大家好", to_me=True)  # B reads the group
        await chat_a.say_in_group(HOLDER, LABELS, "我是新来的", to_me=True)  # A: 用户_1234
        await chat_b.say_in_group(SECOND, LABELS, "我也是新来的", to_me=True)  # same digits
        rows = await query(
            db,
            "SELECT user_id, label FROM amrita_plugin_memory_group_label WHERE group_id = :g",
            g=str(LABELS),
        )
    labels = dict(rows)
    assert len(set(labels.values())) == len(labels) == 3, labels
    assert labels[str(HOLDER)] == "用户_1234" and labels[str(SECOND)] == "用户_01234"
