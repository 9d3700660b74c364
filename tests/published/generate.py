"""Produce ``tests/published/bot-0.8.1``: data written by the published ``amrita-plugin-memory``.

Not a test and not run by CI: it regenerates the committed fixture. It drives the
*published* plugin itself (installed from the package registry into a scratch
virtual environment, never vendored) in a throw-away bot project, the way its users
fill their data: a real ``ambot run`` of that environment, a OneBot V11 client on the
reverse WebSocket, a scripted OpenAI-compatible chat model (``tests/servers``) whose
tool calls are the published plugin's own tools, and the repository's test embedding
server speaking the Ollama protocol (``EMBEDDING_PROCTOL=ollama-embed``: the published
plugin's ``openai`` protocol fails with the installed amrita-core, "Model adapter
text-gen does not support embedding"). What it writes:

* memories in both scopes: two personal ones of user 10001 (one said in private, one
  said in group 20001), one personal one of user 10002 (said in the group), one group
  memory of group 20001;
* a personal memo (10001) and a group memo (20001);
* a knowledge suggestion queued from the chat (``knowledge_suggest``);
* one L3 cycle triggered with ``/memory dmn``: a knowledge entry, the user profile,
  a message sent to the user, the loop's state row.

Usage (see README.md beside this file)::

    uv venv /tmp/adopt/pubvenv -p 3.11
    VIRTUAL_ENV=/tmp/adopt/pubvenv uv pip install amrita-plugin-memory==0.8.1
    uv run --frozen python -m tests.published.generate --venv /tmp/adopt/pubvenv
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import websockets

from tests.botproject import PYPROJECT
from tests.events import BOT_ID
from tests.servers import ChatServer, EmbeddingServer, Reply, free_port
from tests.test_walkthrough import OneBotClient, group_mention, private_message, until

HERE = Path(__file__).resolve().parent
FIXTURE = HERE / "bot-0.8.1"
OWNER = 10001  # the operator (superuser) and the L3 loop's target user
MEMBER = 10002
GROUP = 20001
EMBED_MODEL = "nomic-embed-text:latest"  # 384 dimensions on the test server

# The published plugin's own configuration file (its keys): the loop on, for OWNER.
PLUGIN_CONFIG = f"""\
[subconscious]
enabled = true
target_user_id = "{OWNER}"
enable_knowledge = true
allow_send_to_user = true
"""

# (marker in the user's message, the tool call the scripted model makes)
CHAT_TURNS: list[tuple[str, str, dict[str, Any]]] = [
    (
        "我的猫叫年糕",
        "write_memory",
        {
            "content": "用户的猫叫年糕，是只橘猫",
            "tags": "宠物,猫",
            "importance": "high",
            "scope": "user",
        },
    ),
    (
        "我是程序员",
        "update_memo",
        {"content": "用户是程序员，住在杭州，喜欢简短的回答"},
    ),
    (
        "读书会",
        "write_memory",
        {
            "content": "本群每周五晚上八点开读书会",
            "tags": "活动",
            "importance": "medium",
            "scope": "group",
        },
    ),
    (
        "去成都出差",
        "write_memory",
        {
            "content": "用户下个月去成都出差",
            "tags": "行程",
            "importance": "low",
            "scope": "user",
        },
    ),
    (
        "群备忘",
        "update_memo",
        {"content": "本群是读书会群，群主是 10001"},
    ),
    (
        "我对花生过敏",
        "write_memory",
        {
            "content": "用户对花生过敏",
            "tags": "健康",
            "importance": "high",
            "scope": "user",
        },
    ),
    (
        "记进知识库",
        "knowledge_suggest",
        {
            "action": "create",
            "title": "读书会签到规则",
            "summary": "读书会每次签到要带上本周读的书",
            "body": "签到时报上书名和读到的页数。\n迟到超过十五分钟算缺席。",
            "reason": "群友多次问到签到规则",
        },
    ),
]

# The L3 cycle: one tool call per step, then the end of the cycle.
LOOP_STEPS: list[tuple[str, dict[str, Any]]] = [
    ("subconscious_get_context", {}),
    (
        "subconscious_knowledge_create",
        {
            "title": "年糕的饮食",
            "summary": "用户的橘猫年糕只吃无谷猫粮",
            "body": "年糕是一只橘猫。\n只吃无谷猫粮，每天两顿。\n---\n不能喂牛奶。",
        },
    ),
    (
        "subconscious_update_profile",
        {
            "summary": "程序员，住在杭州，养了一只橘猫",
            "new_lines": "职业：程序员\n城市：杭州\n宠物：橘猫年糕",
        },
    ),
    (
        "subconscious_send_to_user",
        {"intent": "提醒用户周五的读书会", "memory_context": "本群每周五晚上八点开读书会"},
    ),
    ("subconscious_iter_stop", {"summary": "新建了年糕的饮食知识，整理了用户画像"}),
]
LOOP_MARK = "subconscious_get_context"


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


def model(body: dict[str, Any]) -> Reply | None:
    """The scripted model: the published plugin's tools, chosen by what was said."""
    messages = body.get("messages") or []
    tools = {t["function"]["name"] for t in body.get("tools") or [] if "function" in t}
    if not tools:
        # Requests without tools: the loop's message to the user, summaries.
        return Reply.text("周五晚上八点有读书会，别忘了带书。")
    if messages and messages[-1].get("role") == "tool":
        if LOOP_MARK not in tools:
            return Reply.text("好的，记住了。")
    if LOOP_MARK in tools:
        done = sum(1 for m in messages if m.get("role") == "tool")
        if done < len(LOOP_STEPS):
            name, args = LOOP_STEPS[done]
            return Reply.tool_call(name, args)
        return Reply.text("本轮整理完成")
    said = next((_text(m) for m in reversed(messages) if m.get("role") == "user"), "")
    for marker, name, args in CHAT_TURNS:
        if marker in said:
            return Reply.tool_call(name, args)
    return Reply.text("好的")


def group_message(user_id: int, text: str) -> dict[str, Any]:
    return group_mention(text, user_id=user_id, group_id=GROUP, role="owner")


def from_user(user_id: int, text: str) -> dict[str, Any]:
    return private_message(text, user_id)


def write_project(root: Path, *, port: int, chat_url: str, embed_url: str) -> None:
    root.mkdir(parents=True)
    (root / "pyproject.toml").write_text(PYPROJECT, encoding="utf-8")
    env = {
        "DRIVER": "~fastapi",
        "HOST": "127.0.0.1",
        "PORT": str(port),
        "LOCALSTORE_USE_CWD": "true",
        "LOG_LEVEL": "INFO",
        "SUPERUSERS": f'["{OWNER}"]',
        "EMBEDDING_PROCTOL": "ollama-embed",
        "EMBEDDING_MODEL_URL": embed_url,
        "EMBEDDING_MODEL_NAME": EMBED_MODEL,
    }
    (root / ".env").write_text("".join(f"{k}={v}\n" for k, v in env.items()), encoding="utf-8")
    chat = root / "config" / "chat"
    (chat / "models").mkdir(parents=True)
    (chat / "config.toml").write_text('enable = true\npreset = "scripted"\n', encoding="utf-8")
    preset = {
        "name": "scripted",
        "model": "mock-model",
        "base_url": chat_url,
        "api_key": "sk-test",
        "protocol": "__main__",
        "max_context": 16000,
        "max_output": 1024,
    }
    (chat / "models" / "scripted.json").write_text(json.dumps(preset), encoding="utf-8")
    plugin = root / "config" / "amrita_plugin_memory"
    plugin.mkdir(parents=True)
    (plugin / "config.toml").write_text(PLUGIN_CONFIG, encoding="utf-8")


def process_env(venv: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    # Amrita's WebUI runs `uv --version`: the published venv's bin first, then ours (uv).
    env["PATH"] = os.pathsep.join(
        [str(venv / "bin"), str(Path(sys.executable).parent), env["PATH"]]
    )
    env["PYTHONUNBUFFERED"] = "1"
    env["NO_COLOR"] = "1"
    return env


async def drive(url: str, chat: ChatServer, log: Path) -> None:
    headers = {"X-Self-ID": str(BOT_ID), "X-Client-Role": "Universal"}
    async with websockets.connect(url, additional_headers=headers) as ws:
        client = OneBotClient(ws)
        client.recorder.friends = {OWNER, MEMBER}
        serving = asyncio.create_task(client.serve())

        async def turn(event: dict[str, Any]) -> None:
            before = len(client.recorder.sent())
            await ws.send(json.dumps(event))
            await until(lambda: len(client.recorder.sent()) > before, f"a reply to {event}")

        try:
            await turn(from_user(OWNER, "记住：我的猫叫年糕，是只橘猫"))
            await turn(from_user(OWNER, "我是程序员，住在杭州"))
            await turn(group_message(OWNER, "记一下：本群每周五开读书会"))
            await turn(group_message(OWNER, "我下个月去成都出差"))
            await turn(group_message(OWNER, "把群备忘更新一下"))
            await turn(group_message(MEMBER, "我对花生过敏"))
            await turn(from_user(OWNER, "把签到规则记进知识库吧"))
            before = len(client.recorder.sent())
            await ws.send(json.dumps(from_user(OWNER, "/memory dmn")))
            # The cycle ends with its state saved ("Cycle done" in the bot's log).
            await until(lambda: "Cycle done" in log.read_text(encoding="utf-8"), "the L3 cycle")
            assert len(client.recorder.sent()) > before
        finally:
            serving.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await serving


def main() -> None:
    parser = argparse.ArgumentParser(description="Regenerate tests/published/bot-0.8.1.")
    parser.add_argument("--venv", type=Path, required=True, help="venv with the published plugin")
    parser.add_argument("--work", type=Path, default=Path("/tmp/adopt/pubbot"))
    parser.add_argument("--out", type=Path, default=FIXTURE)
    args = parser.parse_args()
    venv: Path = args.venv.resolve()
    work: Path = args.work
    if work.exists():
        shutil.rmtree(work)

    with EmbeddingServer() as embed, ChatServer() as chat:
        chat.set_rule(model)
        port = free_port()
        write_project(work, port=port, chat_url=chat.base_url, embed_url=embed.url)
        env = process_env(venv)
        ambot = str(venv / "bin" / "ambot")
        upgrade = subprocess.run(
            [ambot, "orm", "upgrade"],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if upgrade.returncode:
            raise SystemExit(f"ambot orm upgrade failed:\n{upgrade.stdout}\n{upgrade.stderr}")
        log = work / "bot.log"
        with log.open("wb") as out:
            bot = subprocess.Popen(
                [ambot, "run"],
                cwd=work,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            deadline = time.monotonic() + 180
            while "Application startup complete" not in log.read_text(encoding="utf-8"):
                if bot.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(log.read_text(encoding="utf-8")[-4000:])
                time.sleep(0.3)
            asyncio.run(drive(f"ws://127.0.0.1:{port}/onebot/v11/ws", chat, log))
        finally:
            os.killpg(bot.pid, signal.SIGTERM)
            bot.wait(60)

    out_dir: Path = args.out
    if out_dir.exists():
        shutil.rmtree(out_dir)
    (out_dir / "config").mkdir(parents=True)
    # nonebot-plugin-orm keeps copies of the migration scripts it ran in
    # data/nonebot_plugin_orm/migrations, and the published plugin writes its prompt
    # templates under config/: both are the packages' own code and text, not data, and
    # are left out (nonebot-plugin-orm rewrites the copies at the next upgrade).
    shutil.copytree(work / "data", out_dir / "data", ignore=shutil.ignore_patterns("migrations"))
    plugin_config = out_dir / "config" / "amrita_plugin_memory"
    plugin_config.mkdir(parents=True)
    shutil.copy(work / "config" / "amrita_plugin_memory" / "config.toml", plugin_config)
    print(f"fixture written to {out_dir}")


if __name__ == "__main__":
    main()
