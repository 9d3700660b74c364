"""Life topics as keyword tokens: a question and a memory about the same part of the
user's life match even when they share no word (``core/topics``). The end-to-end
ranking with the real model is in ``test_retrieval.py``."""

from __future__ import annotations

import pytest

from tests.lazy import lazy_import

TP = lazy_import("amrita_plugin_memory.core.topics")
R = lazy_import("amrita_plugin_memory.core.ranking")


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


@pytest.mark.parametrize(
    ("text", "topics"),
    [
        ("用户在拾光文化做测试工程师", {"work"}),  # an occupation is work
        ("The user is a nurse", {"work"}),
        ("用户希望大家叫他阿杰", {"name"}),
    ],
)
def test_occupations_and_nicknames(text: str, topics: set[str]) -> None:
    assert TP.topics_of(text) == topics


def test_the_topics_of_someone_else_are_not_the_users() -> None:
    assert R.topic_keys("用户的室友是做设计师的") == ["#friends~", "#work~"]
    assert R.topic_keys("用户是做设计师的") == ["#work"]
    index = R.KeywordIndex(["用户的室友是做设计师的", "用户在海豚医疗上班", "用户是A型血"])
    # The roommate's work is not the answer to the user's own question...
    assert index.coverage("我的公司叫什么") == {1: pytest.approx(1.0)}
    # ...but a question naming someone matches the topic of both kinds, weighed as one
    # term: the user's own work memory is not outweighed by the rarer marked kind.
    got = index.coverage("Who is my boss?")
    assert got[0] == pytest.approx(got[1]) and 2 not in got
