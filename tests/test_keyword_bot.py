"""A real bot with no embedding model anywhere (``EMBEDDING_ENABLED=false``, issue #47).

``ambot run`` in a fresh project whose embedding URL points at a port nothing listens on;
the scripted chat model calls the memory tools. A memory written in one turn is found in
the next — by ``read_memory`` and by active recall's ``<MEMORIES>`` block — in Chinese
and in English; the ``/memory`` commands and ``ambot memory status`` work and say the
mode; nothing is embedded, no traceback.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.botproject import BotProject, ambot_ok
from tests.console_bot import RunningBot
from tests.published_data import OWNER
from tests.servers import ChatServer, Reply
from tests.test_published_bot import onebot, private
from tests.test_walkthrough import copy_example_chat

pytestmark = pytest.mark.process

NOWHERE = "http://127.0.0.1:9"  # the discard port: no embedding service anywhere
HIKING = "用户每周六去香山爬山"
CHESS = "The user plays chess with his father every Sunday"


async def test_a_bot_without_an_embedding_model_remembers_and_recalls(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    project = BotProject(tmp_path / "bot")
    copy_example_chat(project.root, chat_server.base_url)
    project.write_env(
        EMBEDDING_ENABLED="false",
        EMBEDDING_MODEL_URL=NOWHERE,
        SUPERUSERS=f'["{OWNER}"]',
    )
    bot = RunningBot(project, l3=False)
    bot.start()
    try:
        log = bot.log()
        assert "无嵌入模式（EMBEDDING_ENABLED=false）" in log
        assert "已关闭（EMBEDDING_ENABLED=false，关键词检索）" in log
        async with onebot(bot, chat_server) as chat:
            for said, content in (("记住：我每周六去香山爬山", HIKING), ("I play chess", CHESS)):
                (written,) = await chat.turn(
                    private(said),
                    Reply.tool_call(
                        "write_memory",
                        {
                            "content": content,
                            "tags": ["测试"],
                            "importance": "medium",
                            "scope": "user",
                        },
                    ),
                )
                assert written["ok"] is True, written

            found = await chat.tool(
                private("我周六一般去哪儿？"), "read_memory", query="周六 去哪", scope="user"
            )
            assert found["memories"][0]["content"] == HIKING
            found = await chat.tool(
                private("what game do I play on Sunday?"),
                "read_memory",
                query="game on Sunday",
                scope="user",
            )
            assert found["memories"][0]["content"] == CHESS

            # Active recall: the next turn's message shares the memory's words.
            await chat.turn(private("这周六香山还去爬山吗"))
            assert any("<MEMORIES>" in s and HIKING in s for s in chat.seen()), chat.seen()
            await chat.turn(private("Chess with my father again this Sunday?"))
            assert any("<MEMORIES>" in s and CHESS in s for s in chat.seen()), chat.seen()
            await chat.turn(private("哈哈"))
            assert not any("<MEMORIES>" in s for s in chat.seen())

            listing = "\n".join(await chat.command(private("/memory user list")))
            assert HIKING in listing and CHESS in listing
            searched = "\n".join(await chat.command(private("/memory user search 香山")))
            assert HIKING in searched
            assert "\n".join(await chat.command(private("/memory help")))
            assert "\n".join(await chat.command(private("/memory auto")))
            assert "\n".join(await chat.command(private("/memory memo")))

        status = ambot_ok(project.ambot("status"))
        assert "无嵌入模式" in status
        assert "Traceback" not in bot.log()
    finally:
        bot.stop()
