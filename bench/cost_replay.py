"""One bot of the cost benchmark (:mod:`bench.cost_bench`), run in a process of its own.

    python -m bench.cost_replay --variant memory|plain --out FILE [--messages N] [--group N]

A real NoneBot + OneBot V11 + Amrita chat bot, with (``memory``) or without
(``plain``) this plugin, in a throw-away project directory, answering LoCoMo
messages (public data, ``../shared/data/locomo``; read, never copied) replayed
as OneBot events through NoneBot, as the tests drive turns (``tests/chat.py``).
The model is the tests' OpenAI-compatible server with one fixed script: a
tool-calling request is answered without a tool call, the final request with a
short reply, an extraction with one ``add`` per user message it shows, a
persona request with one field per member it asks about, an episode summary
with a fixed one-line summary. Embeddings: the
bundled multilingual-e5-small in process (``EMBEDDING_PROCTOL=local``), so
recall picks what the default thresholds pick.

Each speaker of the first conversations is a user in a private chat (every
message is a turn); with ``--group`` one more conversation is replayed as a
group chat (group awareness on: window, personas), one message in
:data:`ADDRESSED_EVERY` addressed to the bot. With the plugin every user has a memo (two of their first messages).
The figures are written to ``--out`` as JSON; :mod:`bench.cost_bench` prints them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .cost_metrics import Recorder
from .harness import VENV_BIN, nonebot_kwargs

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "locomo" / "locomo_observations.json"
TOOL_ROUND_REPLY = "嗯嗯，我在听。"
FINAL_REPLY = "好的，我记住了，你继续说吧。"
EPISODE_SUMMARY = "用户聊了最近的生活和打算。"
PRIVATE_UID = 7_100_000
GROUP_UID = 7_200_000
GROUP_ID = 7_300_001
ADDRESSED_EVERY = 4
"""In the group chat, one message in this many is addressed to the bot."""


def _messages(
    path: Path, private: int, group: int
) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """``(user id, text)`` of the private replay (speakers of the first conversations, in
    order, ``private`` messages in all) and of the group replay (the next conversation)."""
    convs = json.loads(path.read_text(encoding="utf-8"))["conversations"]
    out: list[tuple[int, str]] = []
    used = 0
    for c, conv in enumerate(convs):
        used = c + 1
        speakers = {s: PRIVATE_UID + 10 * c + i for i, s in enumerate(conv["speakers"])}
        for o in conv["observations"]:
            if len(out) < private:
                out.append((speakers.get(o["speaker"], PRIVATE_UID + 10 * c + 9), o["text"]))
        if len(out) >= private:
            break
    grouped: list[tuple[int, str]] = []
    if group and used < len(convs):
        conv = convs[used]
        speakers = {s: GROUP_UID + i for i, s in enumerate(conv["speakers"])}
        grouped = [
            (speakers.get(o["speaker"], GROUP_UID + 9), o["text"]) for o in conv["observations"]
        ]
    return out, grouped[:group]


def _write_project(work: Path, chat_url: str, variant: str) -> None:
    chat = work / "config" / "chat"
    (chat / "models").mkdir(parents=True, exist_ok=True)
    (chat / "config.toml").write_text("enable = true\n", encoding="utf-8")
    preset = {"name": "default", "model": "mock-model", "base_url": chat_url, "api_key": "sk-bench"}
    (chat / "models" / "default.json").write_text(json.dumps(preset), encoding="utf-8")
    if variant == "memory":
        plugin = work / "config" / "amrita_plugin_memory" / "config.toml"
        plugin.parent.mkdir(parents=True, exist_ok=True)
        plugin.write_text(
            "[archive]\nfirst_sweep_delay_minutes = 100000\n\n"
            "[group_context]\nenabled = true\n\n[persona]\nenabled = true\n"
            "update_interval_seconds = 0\n",
            encoding="utf-8",
        )


_USER_LINE = re.compile(r"^用户：(.*)$", re.M)
_ASKED = re.compile(r"需要分析的成员：(.*)")


def _model(body: dict[str, Any]) -> Any:
    """The scripted model: one fixed answer per kind of request."""
    from tests.servers import Reply

    first = str(body["messages"][0].get("content") or "")
    shown = str(body["messages"][-1].get("content") or "")
    if first.startswith("[memory-extraction]"):
        ops = [{"op": "add", "content": t.strip()} for t in _USER_LINE.findall(shown)][:8]
        return Reply.text(json.dumps({"memories": ops}, ensure_ascii=False))
    if first.startswith("[episode-summary]"):
        return Reply.text(json.dumps({"summary": EPISODE_SUMMARY, "topics": ["聊天"]}))
    if first.startswith("[persona-extraction]"):
        asked = _ASKED.search(shown)
        labels = [x.strip() for x in asked.group(1).split("、")] if asked else []
        updates = []
        for label in labels:
            said = [
                line.split(": ", 1)[1]
                for line in shown.splitlines()
                if line.startswith(f"{label}: ")
            ]
            if said:
                updates.append(
                    {"user": label, "field": "兴趣", "value": said[-1][:40], "confidence": 0.9}
                )
        return Reply.text(json.dumps({"updates": updates}, ensure_ascii=False))
    if body.get("tools"):
        return Reply.text(TOOL_ROUND_REPLY)
    return Reply.text(FINAL_REPLY)


async def _replay(
    recorder: Recorder,
    server: Any,
    turns: list[tuple[str, int, Any]],
    progress: Callable[[int], None],
) -> None:
    from tests.chat import BotRecorder, make_bot, run_turn

    bot = make_bot(BotRecorder())
    for i, (session, index, event) in enumerate(turns):
        before = len(server.requests)
        await run_turn(bot, event)
        recorder.turn(session, index, server.requests[before:])
        progress(i)


async def _settle(variant: str) -> None:
    if variant != "memory":
        return
    from amrita_plugin_memory.adapters.active_hooks import current_active
    from amrita_plugin_memory.adapters.episode_hooks import current_episodes
    from amrita_plugin_memory.adapters.group_hooks import current_hooks

    hooks = current_active()
    if hooks is not None:
        async with asyncio.timeout(600):
            await hooks.active.flush()
    groups = current_hooks()
    if groups is not None:
        async with asyncio.timeout(600):
            await groups.awareness.drain()
    episodes = current_episodes()
    if episodes is not None:
        # The replay takes minutes, not the idle gap: every chat's conversation is closed
        # as at the local day's end, so each sends its one summary request.
        async with asyncio.timeout(600):
            await episodes.service.recorder.flush()
            await episodes.service.closer.run_once(time.time() + 2 * 86400)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from tests.servers import ChatServer

    os.environ["PATH"] = f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"
    private, grouped = _messages(args.data, args.messages, args.group)
    work = Path(tempfile.mkdtemp(prefix="apm-cost-"))
    server = ChatServer()
    server.start()
    driver: Any = None
    cwd = Path.cwd()
    try:
        server.set_rule(_model)
        _write_project(work, server.base_url, args.variant)
        import nonebot
        from nonebot.adapters.onebot.v11 import Adapter

        values = nonebot_kwargs(work, "http://127.0.0.1:9") | {
            "embedding_proctol": "local",
            "embedding_model_name": "auto",
        }
        nonebot.init(**values)
        driver = nonebot.get_driver()
        driver.register_adapter(Adapter)
        os.chdir(work)
        nonebot.load_plugin(
            "amrita_plugin_memory" if args.variant == "memory" else "amrita.plugins.chat"
        )
        await driver._lifespan.startup()
        from amrita.plugins.chat.config import config_manager

        config_manager.config.function.nature_chat_style = False  # no 1-3 s pauses
        if args.variant == "memory":
            await _set_memos(private + grouped)
        from tests.events import group_event, private_event

        seen: dict[str, int] = {}
        turns: list[tuple[str, int, Any]] = []
        for uid, text in private:
            session = f"private:{uid}"
            turns.append((session, seen.get(session, 0), private_event(uid, text)))
            seen[session] = seen.get(session, 0) + 1
        for n, (uid, text) in enumerate(grouped):
            # One message in ADDRESSED_EVERY is to the bot (a turn); the others are chat
            # among members, which group awareness observes and Amrita does not answer.
            to_me = n % ADDRESSED_EVERY == ADDRESSED_EVERY - 1
            event = group_event(uid, GROUP_ID, text, to_me=to_me)
            turns.append((f"group:{GROUP_ID}", n // ADDRESSED_EVERY, event))
        recorder = Recorder(_chat_tools(args.variant), group_sessions={f"group:{GROUP_ID}"})

        def progress(i: int) -> None:
            if (i + 1) % 50 == 0:
                print(f"[{args.variant}] {i + 1}/{len(turns)} turns", file=sys.stderr, flush=True)

        await _replay(recorder, server, turns, progress)
        await _settle(args.variant)
        recorder.background(server.requests)
        answered = len(private) + len(grouped) // ADDRESSED_EVERY
        return recorder.summary(private=len(private), group=len(grouped), answered=answered)
    finally:
        if driver is not None:
            try:
                await driver._lifespan.shutdown()
            except Exception as exc:  # the figures are already taken
                print(f"shutdown: {exc!r}", file=sys.stderr)
        server.stop()
        os.chdir(cwd)
        shutil.rmtree(work, ignore_errors=True)


def _chat_tools(variant: str) -> frozenset[str]:
    """The names of the chat tools the plugin registers (from its declarations)."""
    if variant != "memory":
        return frozenset()
    import amrita_plugin_memory
    from amrita_plugin_memory.tools.surface import declared_tools

    rt = amrita_plugin_memory.runtime
    assert rt is not None
    return frozenset(tool.name for tool in declared_tools(rt.tools))


async def _set_memos(messages: list[tuple[int, str]]) -> None:
    """Each user's memo: two of their first messages (what an owner's users typically have)."""
    import amrita_plugin_memory
    from amrita_plugin_memory.storage.keys import user_key

    rt = amrita_plugin_memory.runtime
    assert rt is not None
    firsts: dict[int, list[str]] = {}
    for uid, text in messages:
        firsts.setdefault(uid, [])
        if len(firsts[uid]) < 2:
            firsts[uid].append(text)
    for uid, texts in firsts.items():
        memo = "\n".join(f"- {t}" for t in texts)[:300]
        result = await rt.memo.update(user_key(uid), memo)
        assert result.ok, result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--variant", choices=("memory", "plain"), required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--messages", type=int, default=318)
    parser.add_argument("--group", type=int, default=60)
    args = parser.parse_args(argv)
    figures = asyncio.run(run(args))
    args.out.write_text(json.dumps(figures, ensure_ascii=False), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
