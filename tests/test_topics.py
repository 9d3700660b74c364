"""Life topics as keyword tokens: a question and a memory about the same part of the
user's life match even when they share no word (``core/topics``), with the real model."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.botproject import make_runtime
from tests.lazy import lazy_import

TP = lazy_import("amrita_plugin_memory.core.topics")
R = lazy_import("amrita_plugin_memory.core.ranking")
K = lazy_import("amrita_plugin_memory.storage.keys")
T = lazy_import("amrita_plugin_memory.tools.memory_tools")


@pytest.mark.parametrize(
    ("text", "topics"),
    [
        ("我现在的公司叫什么", {"work"}),
        ("用户在海豚医疗上班，岗位是UI设计师", {"work"}),
        ("用户搬家了，现在住在天河区", {"home"}),
        ("记住我说的话", set()),  # 记住 holds 住 but is not about a home
        ("用户是B型血", {"health"}),
        ("我家汪星人叫啥", {"pet"}),
        ("Where do I work now?", {"work"}),
        ("When do I usually work out?", {"sport"}),  # not a job
        ("The user's mother's phone ends in 1736", {"family", "phone", "number"}),
        ("今天天气不错", set()),
    ],
)
def test_topics_of_everyday_texts(text: str, topics: set[str]) -> None:
    assert TP.topics_of(text) == topics


def test_topics_are_keyword_tokens_of_their_own() -> None:
    assert TP.topic_tokens("用户的室友在公司上班") == ["#friends", "#work"]
    assert not any(t.startswith(TP.TOPIC_PREFIX) for t in R.tokenize("#work 公司"))
    index = R.KeywordIndex(["用户在海豚医疗上班，岗位是UI设计师", "用户家里的猫叫花卷"])
    # No word of the question is in either memory; the topic is in the first.
    assert index.coverage("我的公司叫什么") == {0: pytest.approx(1.0)}


FACTS = [
    "用户的室友叫赵雨桐，是做设计师的",
    "用户在海豚医疗上班，岗位是UI设计师",
    "用户家里的猫叫花卷，是一只狸花猫",
    "用户是安徽阜阳人，春节会回老家",
    "用户有个妹妹叫甜甜，在读高一",
    "用户最近在读《三体》，读到一半了",
    "用户特别喜欢酸菜鱼，几乎每周都吃",
]


@pytest.fixture
async def rt(tmp_path: Path) -> AsyncIterator[Any]:
    runtime = make_runtime(tmp_path, embedding_proctol="local", embedding_model_name="auto")
    runtime.embedder.timeout = 60.0
    yield runtime
    await runtime.close()


async def _top(rt: Any, query: str) -> list[str]:
    caller = T.caller_for_user(K.target_from_ids(50001, None))
    result = await rt.tools.read_memory(caller, {"query": query, "top_k": 3})
    assert result["ok"], result
    return [m["content"] for m in result["memories"]]


async def test_a_question_finds_the_memory_of_its_topic(rt: Any) -> None:
    part = K.user_key("50001")
    for text in FACTS:
        await rt.store.add(part, "user", text)
    # e5-small alone ranks "叫…" memories (the roommate's, the cat's name) first.
    rt.store.settings = dataclasses.replace(rt.store.settings, hybrid=False, decay=False)
    assert (await _top(rt, "我的公司叫什么"))[0] != FACTS[1]
    rt.store.settings = dataclasses.replace(rt.store.settings, hybrid=True, decay=True)
    assert (await _top(rt, "我的公司叫什么"))[0] == FACTS[1]
