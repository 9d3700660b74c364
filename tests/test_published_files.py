"""The L3 loop's files as the published ``amrita-plugin-memory`` 0.8.1 left them, taken over
by a runner in-process: its knowledge base (the committed fixture's index, entry file and
vector) imported through ``KnowledgeBaseManager``, once, also after an interruption; its
profile read as it is; its prompt templates set aside. The bot process: ``tests/test_published_bot.py``.
"""

from __future__ import annotations

import functools
import json
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.helpers import runtime
from tests.published_data import FIXTURE, KNOWLEDGE_COLLECTION, published_collections
from tests.test_knowledge import assert_in_step, vectors
from tests.test_knowledge_tools import make_runner

__all__ = ["make_runner"]  # the fixture, imported for pytest

PUBLISHED_KID = "3b3ed1e2"
BODY = ["年糕是一只橘猫。", "只吃无谷猫粮，每天两顿。", "---", "不能喂牛奶。"]


def published_knowledge(data: Path) -> None:
    """The fixture's knowledge index and entry file in ``data``."""
    source = FIXTURE / "data" / "amrita_plugin_memory"
    data.mkdir(parents=True, exist_ok=True)
    shutil.copy(source / "knowledge_index.json", data / "knowledge_index.json")
    shutil.copytree(source / "knowledge", data / "knowledge")


async def published_vector(collection: str) -> None:
    """The fixture's knowledge vector (id = the published kid, no document) in ``collection``."""
    kb = published_collections()[KNOWLEDGE_COLLECTION]
    conn = runtime().connection
    col = await conn.get_collection(collection)
    await conn.run(
        functools.partial(col.add, ids=kb.ids, metadatas=kb.metadatas, embeddings=kb.embeddings)
    )


async def test_the_published_knowledge_base_is_imported_once(
    tmp_path: Path, make_runner: Callable[..., Any], logs: list[str]
) -> None:
    data = tmp_path / "data"
    published_knowledge(data)
    collection = f"kbt-{uuid.uuid4().hex[:12]}"
    await published_vector(collection)
    runner = make_runner(data_dir=data, knowledge_collection_name=collection)
    # A suggestion queued by the published plugin's chat tool names the old id.
    await runner.loop_state.mutate(
        lambda d: d["knowledge_suggestions"].append(
            {
                "id": "published0001",
                "time": "",
                "action": "update",
                "title": "年糕的饮食",
                "kid": PUBLISHED_KID,
                "body": "加一条：不吃鱼",
                "reason": "",
                "source": "",
            }
        )
    )
    await runner.start()
    await runner.knowledge_validation
    kb = runner.knowledge

    (entry,) = await kb.list()
    assert entry["title"] == "年糕的饮食" and entry["summary"] == "用户的橘猫年糕只吃无谷猫粮"
    window = await kb.read(entry["kid"])
    assert window["lines"] == [f"{n}: {line}" for n, line in enumerate(BODY, 1)]
    hits = await kb.search("年糕吃什么猫粮", top_k=3)
    assert hits[0]["kid"] == entry["kid"]
    await assert_in_step(kb)  # the published vector is gone, the new one in step
    assert set(await vectors(kb)) == {entry["kid"]}

    backup = data / "backups" / "published-knowledge"
    moved = backup / "knowledge" / f"KNOWLEDGE_{PUBLISHED_KID}.md"
    original = FIXTURE / "data" / "amrita_plugin_memory" / "knowledge" / moved.name
    assert moved.read_text(encoding="utf-8") == original.read_text(encoding="utf-8")
    assert isinstance(
        json.loads((backup / "knowledge_index.json").read_text(encoding="utf-8")), list
    )
    record = json.loads((backup / "imported.json").read_text(encoding="utf-8"))
    assert record == {"ids": {PUBLISHED_KID: entry["kid"]}, "failed": {}}
    assert [p.name for p in kb.dir.iterdir()] == [f"KNOWLEDGE_{entry['kid']}.md"]
    (suggestion,) = (await runner.loop_state.read())["knowledge_suggestions"]
    assert suggestion["kid"] == entry["kid"]
    assert any("已导入已发布插件的 1 条知识" in line for line in logs)

    logs.clear()
    again = make_runner(data_dir=data, knowledge_collection_name=collection)
    await again.start()
    await again.knowledge_validation
    assert [e["kid"] for e in await again.knowledge.list()] == [entry["kid"]]
    assert not any("已发布" in line for line in logs)


async def test_an_interrupted_import_creates_every_entry_exactly_once(
    tmp_path: Path, make_runner: Callable[..., Any]
) -> None:
    """A kill after the files were moved aside and one entry was created (its index not yet
    written): the next start creates the missing entry and not the other one again."""
    data = tmp_path / "data"
    published_knowledge(data)
    second = data / "knowledge" / "KNOWLEDGE_aa11bb22.md"
    second.write_text("# 读书会规则\n每次带上本周读的书\n---\n签到时报书名。\n", encoding="utf-8")
    collection = f"kbt-{uuid.uuid4().hex[:12]}"
    first = make_runner(data_dir=data, knowledge_collection_name=collection)
    from amrita_plugin_memory.subconscious.published_files import KNOWLEDGE_BACKUP, _move_aside

    backup = data / "backups" / KNOWLEDGE_BACKUP
    _move_aside(data, backup)  # what the import does first
    done = await first.knowledge.create("年糕的饮食", "用户的橘猫年糕只吃无谷猫粮", "\n".join(BODY))
    first.knowledge.index_path.unlink()  # killed before the index was written

    runner = make_runner(data_dir=data, knowledge_collection_name=collection)
    await runner.start()
    await runner.knowledge_validation
    listed = {e["title"]: e["kid"] for e in await runner.knowledge.list()}
    assert listed.keys() == {"年糕的饮食", "读书会规则"}
    assert listed["年糕的饮食"] == done.kid
    await assert_in_step(runner.knowledge)
    record = json.loads((backup / "imported.json").read_text(encoding="utf-8"))
    assert set(record["ids"]) == {PUBLISHED_KID, "aa11bb22"}


async def test_the_published_profile_is_read_as_it_is(
    tmp_path: Path, make_runner: Callable[..., Any]
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(FIXTURE / "data" / "amrita_plugin_memory" / "user_profile.md", data)
    runner = make_runner(data_dir=data)
    summary = await runner.profile.read("summary")
    body = await runner.profile.read("body")
    assert summary["lines"] == ["1: 程序员，住在杭州，养了一只橘猫"]
    assert body["lines"] == ["1: 职业：程序员", "2: 城市：杭州", "3: 宠物：橘猫年糕"]
    await runner.profile.update("insert", start_line=4, content="饮食：不吃香菜")
    assert (await runner.profile.read("body"))["total_lines"] == 4
    text = (data / "user_profile.md").read_text(encoding="utf-8")
    assert text.splitlines()[:2] == ["程序员，住在杭州，养了一只橘猫", "---"]


def test_the_published_prompt_templates_are_set_aside(
    tmp_path: Path, make_runner: Callable[..., Any], logs: list[str]
) -> None:
    prompt = tmp_path / "config" / "prompt"
    prompt.mkdir(parents=True)
    # Stand-ins written here (the published plugin's own texts are not in the repository):
    # its main template names a variable this loop does not give, and it writes a README.
    (prompt / "README.md").write_text("# 提示词模板说明\n", encoding="utf-8")
    (prompt / "subconscious_main.md.jinja2").write_text(
        "日期：{{ current_date }}\n", encoding="utf-8"
    )
    (prompt / "profile_guide.md.jinja2").write_text(
        "用 subconscious_get_profile 读画像\n", encoding="utf-8"
    )
    runner = make_runner(data_dir=tmp_path / "data")
    aside = tmp_path / "data" / "backups" / "published-prompts"
    assert sorted(p.name for p in aside.iterdir()) == [
        "README.md",
        "profile_guide.md.jinja2",
        "subconscious_main.md.jinja2",
    ]
    assert not (prompt / "README.md").exists()
    from amrita_plugin_memory.subconscious.consts import DEFAULTS

    assert (prompt / "subconscious_main.md.jinja2").read_text(encoding="utf-8") == DEFAULTS[
        "prompt_file"
    ]
    assert "current_date" not in runner.templates.path("prompt_file").read_text(encoding="utf-8")
    assert any("提示词模板" in line and "published-prompts" in line for line in logs)

    # This plugin's own templates (edited or not) are never moved.
    (prompt / "subconscious_main.md.jinja2").write_text(
        "我的模板 {{ target_user_id }}\n", encoding="utf-8"
    )
    make_runner(data_dir=tmp_path / "data")
    assert (
        (prompt / "subconscious_main.md.jinja2").read_text(encoding="utf-8").startswith("我的模板")
    )
