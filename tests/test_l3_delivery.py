"""L3 proactive messages with several connected bots, the duplicate helper, and the
framework seams the L3 hooks use.

* ``subconscious_send_to_user`` sends through the bot that last saw a message
  of the target user (recorded by the real L3 message hook), never through
  an arbitrary connected bot; with no such bot, or when it disconnected, it
  fails clearly and the message is queued for the next private turn.
* ``subconscious_duplicate_helper`` compares the stored vectors in one batched
  query: no embedding request, and it still works when the embedding model now
  produces vectors of another dimension (``EMBED_MISMATCH_POLICY=never``).
* The one place that reaches into amrita-sense's hook registry
  (``remove_sense_matcher``) and the strategy's use of Core's public
  ``call_tool`` are checked against the installed frameworks, so a framework
  upgrade that changes them fails here with a clear message.
"""

from __future__ import annotations

import inspect
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.chat import BotRecorder, connect_bot, disconnect_bot, request_tool_results, run_turn
from tests.events import BOT_ID, group_event
from tests.helpers import new_memory, partition, runtime, view_of
from tests.servers import ChatServer, EmbeddingServer, Reply

SECOND_BOT_ID = BOT_ID + 1
_users = iter(range(34001, 34999))

pytestmark = pytest.mark.usefixtures("whole_replies")


@pytest.fixture
async def make_runner(tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    """Runners with their chat hooks registered; everything removed afterwards."""
    from amrita_plugin_memory.adapters.subconscious_hooks import SubconsciousHooks
    from amrita_plugin_memory.subconscious import create_runner

    runners: list[Any] = []

    def make(**overrides: Any) -> Any:
        rt = runtime()
        sub = rt.config.file.subconscious.model_copy(
            update={"enabled": True, "target_user_id": str(next(_users)), **overrides}
        )
        runner = create_runner(
            rt, sub, state_uid=f"test-{uuid.uuid4().hex[:12]}", config_dir=tmp_path / "config"
        )
        runner.hooks = SubconsciousHooks(runner)
        runner.hooks.register()
        runners.append(runner)
        return runner

    yield make
    for runner in runners:
        runner.hooks.unregister()
        await runner.shutdown()


@pytest.fixture
def two_bots() -> Iterator[tuple[tuple[Any, BotRecorder], tuple[Any, BotRecorder]]]:
    """Two connected recording bots (``BOT_ID`` and ``SECOND_BOT_ID``); the second is removed after."""
    first, second = BotRecorder(), BotRecorder()
    bots = (connect_bot(first), first), (connect_bot(second, self_id=SECOND_BOT_ID), second)
    yield bots
    disconnect_bot(SECOND_BOT_ID)


def compose_rule(body: dict[str, Any]) -> Reply | None:
    """The message-composing request (no tools) gets a fixed text; loop requests use the script."""
    return None if body.get("tools") else Reply.text("今天降温了，记得加衣服～")


async def send_cycle(chat_server: ChatServer, runner: Any, intent: str) -> dict[str, Any]:
    """One cycle that asks to send ``intent`` to the user; the tool's result."""
    chat_server.clear()
    chat_server.set_rule(compose_rule)
    chat_server.script(
        Reply.tool_call("subconscious_send_to_user", {"intent": intent}),
        Reply.tool_call("subconscious_iter_stop", {"summary": "处理了主动消息"}),
    )
    result = await runner.run_cycle()
    assert result.outcome == "success", result
    loop = [r for r in chat_server.requests if r.get("tools")]
    (sent,) = request_tool_results(loop[-1])
    return sent


async def target_speaks_via(bot: Any, uid: int, gid: int) -> None:
    """The target user says something in a group, through ``bot`` (not addressed to it)."""
    event = group_event(uid, gid, "大家早", to_me=False).model_copy(
        update={"self_id": int(bot.self_id)}
    )
    await run_turn(bot, event)


def private_sends(recorder: BotRecorder) -> list[tuple[int, str]]:
    return [
        (c.data["user_id"], c.data["message"])
        for c in recorder.calls
        if c.api == "send_private_msg"
    ]


async def test_send_goes_through_the_bot_that_last_saw_the_user(
    chat_server: ChatServer,
    make_runner: Callable[..., Any],
    two_bots: tuple[tuple[Any, BotRecorder], tuple[Any, BotRecorder]],
) -> None:
    import nonebot

    (bot_a, rec_a), (bot_b, rec_b) = two_bots
    assert {str(BOT_ID), str(SECOND_BOT_ID)} <= set(nonebot.get_bots())
    runner = make_runner(allow_send_to_user=True)
    uid = int(runner.target_user_id)

    # No bot has seen the user since start-up: no bot is guessed, the message is queued.
    unknown = await send_cycle(chat_server, runner, "问候一下用户")
    assert unknown["delivered"] is False and unknown["queued"] is True
    assert "目标用户最近没有通过任何已连接的 Bot 联系过" in unknown["reason"]
    assert private_sends(rec_a) == [] and private_sends(rec_b) == []

    # The user speaks through the second bot: that one sends.
    await target_speaks_via(bot_b, uid, 23401)
    assert runner.messenger.bot_id == str(SECOND_BOT_ID)
    via_b = await send_cycle(chat_server, runner, "提醒用户降温加衣")
    assert via_b["delivered"] is True
    assert private_sends(rec_b) == [(uid, "今天降温了，记得加衣服～")]
    assert private_sends(rec_a) == []

    # Another user's message through the first bot changes nothing.
    await run_turn(bot_a, group_event(uid + 500, 23401, "路过", to_me=False))
    assert runner.messenger.bot_id == str(SECOND_BOT_ID)

    # The user now speaks through the first bot: the next message goes through it.
    await target_speaks_via(bot_a, uid, 23402)
    via_a = await send_cycle(chat_server, runner, "提醒用户明天有雨")
    assert via_a["delivered"] is True
    assert private_sends(rec_a) == [(uid, "今天降温了，记得加衣服～")]
    assert len(private_sends(rec_b)) == 1

    # That bot disconnects: a clear failure, the message waits for the next private turn,
    # and the still-connected second bot is not used instead.
    disconnect_bot(BOT_ID)
    gone = await send_cycle(chat_server, runner, "告诉用户周报整理好了")
    assert gone["delivered"] is False and gone["queued"] is True
    assert f"最近与目标用户联系的 Bot（{BOT_ID}）已断开连接" in gone["reason"]
    assert len(private_sends(rec_a)) == 1 and len(private_sends(rec_b)) == 1
    pending = [p["intent"] for p in runner.state["pending_messages"]]
    assert pending == ["问候一下用户", "告诉用户周报整理好了"]


# ---------------------------------------------------------------------------
# The duplicate helper compares stored vectors
# ---------------------------------------------------------------------------


def group_ids(groups: list[dict[str, Any]]) -> set[tuple[frozenset[str], float | None]]:
    return {(frozenset(m["id"] for m in g["memories"]), g["min_distance"]) for g in groups}


async def helper_cycle(chat_server: ChatServer, runner: Any) -> dict[str, Any]:
    chat_server.clear()
    chat_server.script(
        Reply.tool_call("subconscious_duplicate_helper", {"max_distance": 0.6}),
        Reply.tool_call("subconscious_iter_stop", {"summary": "查了重复记忆"}),
    )
    assert (await runner.run_cycle()).outcome == "success"
    loop = [r for r in chat_server.requests if r.get("tools")]
    (result,) = request_tool_results(loop[-1])
    return result


async def test_duplicate_helper_uses_stored_vectors_in_one_query(
    chat_server: ChatServer, embed_server: EmbeddingServer, make_runner: Callable[..., Any]
) -> None:
    from amrita_plugin_memory.subconscious.toolsets.memory import (
        DUPLICATE_NEIGHBOURS,
        find_duplicate_groups,
    )

    rt = runtime()
    runner = make_runner()
    part = partition(int(runner.target_user_id))
    for text in (
        "用户喜欢喝美式咖啡，不加糖",
        "用户很喜欢喝美式咖啡，不加糖。",
        "用户的生日是5月1日",
        "用户养了一只叫团子的橘猫",
        "用户养了一只橘猫，名字叫团子",
        "用户在杭州工作，是后端工程师",
    ):
        await rt.store.add(new_memory(part, "user", text))

    # The groups as the helper found them before: each memory re-embedded and queried alone.
    records = await rt.store.list(view_of(part), limit=50)
    k = min(DUPLICATE_NEIGHBOURS + 1, len(records))
    neighbours = {
        r.id: await rt.store.query_vector(
            view_of(part), (await rt.embedder.embed([r.content], "query"))[0], top_k=k
        )
        for r in records
    }
    expected = group_ids(find_duplicate_groups(records, neighbours, 0.6, calendar=rt.calendar))
    assert expected, "the fixture memories must contain a true repeat"

    calls = embed_server.embed_calls
    found = await helper_cycle(chat_server, runner)
    assert found["ok"] is True and found["scanned"] == 6
    assert group_ids(found["groups"]) == expected
    assert embed_server.embed_calls == calls, "the helper must not embed anything"

    # The embedding model now answers with vectors of another dimension (as after a model
    # switch under EMBED_MISMATCH_POLICY=never): only stored vectors are compared.
    saved = dict(embed_server.model_dims), embed_server.default_dim
    try:
        for name in embed_server.model_dims:
            embed_server.model_dims[name] = 96
        embed_server.default_dim = 96
        again = await helper_cycle(chat_server, runner)
    finally:
        embed_server.model_dims.clear()
        embed_server.model_dims.update(saved[0])
        embed_server.default_dim = saved[1]
    assert again["ok"] is True, again
    assert group_ids(again["groups"]) == expected
    assert embed_server.embed_calls == calls


async def test_duplicate_helper_never_pairs_memories_of_two_origins(
    chat_server: ChatServer, make_runner: Callable[..., Any]
) -> None:
    """The same text written in private and in groups is no duplicate group (issue #23):
    merging them would carry the private memory's text into a group's memory."""
    rt = runtime()
    runner = make_runner()
    part = partition(int(runner.target_user_id))
    text = "用户每天骑车上班"
    private = await rt.store.add(new_memory(part, "user", text))
    in_group = await rt.store.add(new_memory(part, "user", text, origin="group:777"))
    await rt.store.add(new_memory(part, "user", text, origin="group:778"))
    found = await helper_cycle(chat_server, runner)
    assert found["ok"] is True and found["scanned"] == 3
    assert found["groups"] == []  # identical vectors, three origins
    # A repeat from the same group is offered, with that group's memory only.
    again = await rt.store.add(new_memory(part, "user", text + "呀", origin="group:777"))
    found = await helper_cycle(chat_server, runner)
    assert [{m["id"] for m in g["memories"]} for g in found["groups"]] == [{in_group.id, again.id}]
    assert private.id not in str(found["groups"])


# ---------------------------------------------------------------------------
# Framework seams
# ---------------------------------------------------------------------------


async def test_sense_registry_seam_still_matches_amrita_sense() -> None:
    """``remove_sense_matcher`` edits amrita-sense's handler table (no public API for it).

    If this fails after an amrita-sense upgrade, re-read ``amrita_sense.hook.matcher``
    (``EventRegistry`` / ``Matcher`` / ``FunctionData``) and adapt
    ``adapters/hooks.remove_sense_matcher`` — or switch to a public
    unregister API if the new version has one.
    """
    from dataclasses import dataclass

    import amrita_sense
    from amrita_sense import BaseEvent, EventRegistry, MatcherFactory, on_event

    from amrita_plugin_memory.adapters.hooks import remove_sense_matcher

    for name in ("EventRegistry", "MatcherFactory", "on_event", "BaseEvent"):
        assert hasattr(amrita_sense, name), f"amrita_sense no longer exports {name}"
    assert not hasattr(amrita_sense.Matcher, "unregister") and not hasattr(
        EventRegistry, "unregister_handler"
    ), "amrita-sense now has a public way to unregister hooks: use it in remove_sense_matcher"
    params = list(inspect.signature(EventRegistry.get_handlers).parameters)
    assert params == ["self", "event_type"], (
        f"EventRegistry.get_handlers changed its signature to {params}; "
        "remove_sense_matcher relies on get_handlers(event_type)"
    )

    event_type = f"test.seam.{uuid.uuid4().hex[:8]}"

    @dataclass
    class ProbeEvent(BaseEvent[str]):
        def get_event_type(self) -> str:
            return event_type

        @property
        def event_type(self) -> str:
            return event_type

    calls: list[str] = []
    keep, drop = (
        on_event(event_type, priority=7, block=False),
        on_event(event_type, priority=7, block=False),
    )

    # No parameters: amrita-sense resolves annotations as objects, and this
    # module's are strings (``from __future__ import annotations``).
    @keep.handle()
    async def kept() -> None:
        calls.append("kept")

    @drop.handle()
    async def dropped() -> None:
        calls.append("dropped")

    handlers = EventRegistry().get_handlers(event_type)
    assert set(handlers) == {7}, (
        "EventRegistry.get_handlers(event_type) is no longer {priority: [handler data]}"
    )
    assert [getattr(h, "matcher", None) for h in handlers[7]] == [keep, drop], (
        "registered handler data no longer carries its .matcher; remove_sense_matcher "
        "cannot tell whose handlers to remove"
    )
    await MatcherFactory.trigger_event(ProbeEvent())
    assert calls == ["kept", "dropped"]

    assert remove_sense_matcher(drop) == 1
    assert [h.matcher for h in EventRegistry().get_handlers(event_type)[7]] == [keep]
    calls.clear()
    await MatcherFactory.trigger_event(ProbeEvent())
    assert calls == ["kept"], "a removed handler still ran: the registry is not what dispatch reads"
    assert remove_sense_matcher(drop) == 0
    assert remove_sense_matcher(keep) == 1
    assert sum(len(v) for v in EventRegistry().get_handlers(event_type).values()) == 0


def test_strategy_overrides_only_public_core_methods() -> None:
    """The loop's strategy steers Core through public methods only.

    ``call_tool`` (drop calls once the cycle is interrupted) and
    ``single_execute`` (no new round) are Core's public ``AgentStrategy`` API;
    an override of an underscore method would break silently on a Core upgrade.
    """
    from amrita_core.agent.strategy import AgentStrategy
    from amrita_core.builtins.agent import ReActAgentStrategy

    from amrita_plugin_memory.subconscious.workflow import SubconsciousStrategy

    private = [
        name
        for name in vars(SubconsciousStrategy)
        if name.startswith("_")
        and not name.startswith("__")
        and callable(getattr(ReActAgentStrategy, name, None))
    ]
    assert private == [], f"SubconsciousStrategy overrides private Core methods: {private}"
    for name, params in (("call_tool", ["self", "tool_call"]), ("single_execute", ["self"])):
        core = getattr(AgentStrategy, name, None) or getattr(ReActAgentStrategy, name, None)
        assert core is not None and inspect.iscoroutinefunction(core), (
            f"amrita-core no longer has the public async {name}() the L3 strategy overrides"
        )
        assert list(inspect.signature(core).parameters) == params, (
            f"amrita-core changed the signature of {name}: "
            f"{list(inspect.signature(core).parameters)} (expected {params})"
        )
