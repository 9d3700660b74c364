"""Extraction answers the way real models write them (``prompting/memory_ops.py``).

Reasoning models (DeepSeek-R1, Qwen3 in thinking mode) and most local models
served by Ollama do not answer with a bare JSON object: they think aloud in
``<think>…</think>`` first (drafts of the answer included), wrap the JSON in a
fence with prose around it, add a note after it, answer a plain list, or put
full-width punctuation around it. The strings below are written in those
shapes (no network). The counter-examples are answers that must stay
malformed: JSON only inside the reasoning, two different answers, an object
that is not the answer, deep nesting (malformed, never ``RecursionError``).
The persona extraction reads its answer the same way.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tests.lazy import lazy_import
from tests.reliability_stats import STATS

OPS = lazy_import("amrita_plugin_memory.prompting.memory_ops")
TEXT = lazy_import("amrita_plugin_memory.core.text")
PERSONA = lazy_import("amrita_plugin_memory.prompting.persona")

CAT = {"op": "add", "content": "用户养了一只叫年糕的橘猫", "importance": "high", "tags": ["宠物"]}
JOB = {"op": "update", "ref": "M1", "content": "用户跳槽到了腾讯，做后端开发"}
ANSWER = json.dumps({"memories": [CAT, JOB]}, ensure_ascii=False)
PRETTY = json.dumps({"memories": [CAT, JOB]}, ensure_ascii=False, indent=2)
DRAFT = json.dumps({"memories": [{"op": "add", "content": "用户养猫"}]}, ensure_ascii=False)
EXPECTED = [
    ("add", "", "用户养了一只叫年糕的橘猫"),
    ("update", "M1", "用户跳槽到了腾讯，做后端开发"),
]


def parse(text: str) -> Any:
    limits = OPS.OpLimits(max_ops=8, content_chars=200, tags=3, tag_chars=16)
    return OPS.parse_memory_ops(text, refs={"M1", "M2"}, limits=limits)


def ops_of(text: str) -> list[tuple[str, str, str]]:
    parsed = parse(text)
    assert not parsed.malformed, parsed.ignored
    return [(o.op, o.ref, o.content) for o in parsed.ops]


SHAPES: dict[str, str] = {
    # DeepSeek-R1 under Ollama: a long think with a draft, then a fenced answer.
    "deepseek-r1 think with a draft, then a fence": (
        "<think>\n好的，我现在需要处理用户的消息。用户说他养了一只橘猫叫年糕，还说跳槽去了腾讯。\n"
        f"先写个草稿：{DRAFT}\n"
        "不对，草稿没有写猫的名字，而且已有记忆 M1 说他在海豚医疗上班，应该用 update。\n"
        "</think>\n\n"
        f"```json\n{PRETTY}\n```"
    ),
    # The chat template already opened the think: only the closing tag is in the answer.
    "deepseek-r1 distill, only the closing tag": (
        f"嗯，用户提到了宠物和工作变动，M1 需要更新。\n草稿：{DRAFT}\n</think>\n\n{ANSWER}"
    ),
    # Qwen3 in thinking mode: English reasoning, bare JSON after it.
    "qwen3 thinking mode": (
        "<think>\nOkay, let me see. The user said they have a ginger cat called 年糕 and that "
        'they moved to Tencent. The memory M1 is outdated, so I should use "update".\n'
        f"Something like {DRAFT} but with the name.\n</think>\n\n{PRETTY}"
    ),
    # Qwen3 with thinking switched off still sends an empty think block.
    "qwen3 empty think": f"<think>\n\n</think>\n\n{ANSWER}",
    "thinking tag, any case": f"<Thinking>\n草稿 {DRAFT}\n</THINKING>\n{ANSWER}",
    # Local instruction models under Ollama (qwen2.5, llama3.1): prose, fence, a note.
    "ollama prose, fence and a note": (
        "根据用户最近的消息，以下是需要记住的信息：\n\n"
        f"```json\n{PRETTY}\n```\n\n"
        "说明：\n1. 用户提到了宠物的名字 [1]，属于长期信息。\n2. 工作变动更新了 M1。"
    ),
    "bare JSON with a note after it": f"{ANSWER}\n\n注：没有需要归档的旧记忆。",
    "fence without a language and trailing spaces": f"```\n{PRETTY}\n```   \n",
    "full-width colon and full stop around it": f"结果如下：{ANSWER}。",
    "full-width quotes around it": f"我的回答是“{ANSWER}”",
    "a top-level list of ops": f"```json\n{json.dumps([CAT, JOB], ensure_ascii=False)}\n```",
    "the same answer twice (fenced, then repeated)": f"```json\n{PRETTY}\n```\n即：{ANSWER}",
    # The rule for several objects: the one with a "memories" key is the answer.
    "an unrelated object first, then the answer": (
        '我先整理了一下用户的信息：{"pet": "橘猫", "name": "年糕"}，然后给出操作：\n' + ANSWER
    ),
    "an op example in prose, then the answer": (
        f"每条操作形如 {json.dumps(CAT, ensure_ascii=False)}。最终结果：\n{ANSWER}"
    ),
    "deep nesting only inside the reasoning": "<think>" + "[" * 100_000 + f"</think>{ANSWER}",
}


@pytest.mark.parametrize("answer", list(SHAPES.values()), ids=list(SHAPES))
def test_answer_shapes_of_real_models_are_understood(answer: str) -> None:
    STATS.inputs_tried += 1
    assert ops_of(answer) == EXPECTED


def test_an_empty_list_means_nothing_to_remember() -> None:
    for answer in (
        "[]",
        "没有需要记住的内容：[]",
        '<think>用户只是在打招呼。</think>\n{"memories": []}',
    ):
        parsed = parse(answer)
        assert not parsed.malformed and parsed.ops == [], answer


MALFORMED: dict[str, str] = {
    "the only JSON is inside the think": f"<think>\n草稿：{ANSWER}\n</think>\n用户只是在闲聊，没有需要记住的。",
    "an unclosed think (cut off while reasoning)": f"<think>\n用户说他养了猫。先写：{ANSWER}",
    "two different answers in prose": f"第一版：{DRAFT}\n修改后：{ANSWER}",
    "an object that is not the answer": (
        '{"name": "write_memory", "arguments": {"content": "用户养了一只叫年糕的橘猫"}}'
    ),
    "an op object alone": json.dumps(CAT, ensure_ascii=False),
    "memories is not a list": '好的：{"memories": {"op": "add", "content": "用户喜欢猫"}}',
    "a list that is not of ops": "用户提到了两件事 [1] [2]，都不重要。",
    "prose only": "我觉得应该记住：用户喜欢猫",
    "deep nesting": "[" * 100_000,
    "deep nesting inside the answer": '{"memories": ' + "[" * 100_000 + "]" * 100_000 + "}",
    "deep objects": '{"a":' * 50_000 + "1" + "}" * 50_000,
    "an answer over the size bound": "好" * 200_001 + ANSWER,
    # Brackets hidden in strings so the bracket count sees nothing deep, each start
    # parsing far before it breaks off: bounded work, not seconds.
    "many starts that break off late": ('["]",' + "1," * 100) * 900 + "x",
}


@pytest.mark.parametrize("answer", list(MALFORMED.values()), ids=list(MALFORMED))
def test_counter_examples_are_malformed_never_an_exception(answer: str) -> None:
    STATS.inputs_tried += 1
    started = time.monotonic()
    parsed = parse(answer)
    assert parsed.malformed and parsed.ops == [], parsed.ignored
    assert len(parsed.ignored) == 1 and parsed.ignored[0].startswith("malformed")
    assert time.monotonic() - started < 3  # bounded work (generous for a shared machine)


def test_strip_reasoning_rule() -> None:
    strip = TEXT.strip_reasoning
    assert strip("<think>a</think>b") == "b"
    assert strip("a</think>b") == "b"  # the opening tag was in the chat template
    assert strip("<think>a</think>b<think>c</think>d") == "d"  # the last closing tag counts
    assert strip("b<think>unfinished") == "b"  # an unclosed think hides what follows
    assert strip("< think >a< /Think >b") == "b"
    assert strip("no reasoning {} here") == "no reasoning {} here"


def test_persona_answers_get_the_same_reading() -> None:
    update = {"user": "用户_1111", "field": "兴趣", "value": "围棋", "confidence": 0.9}
    body = json.dumps({"updates": [update]}, ensure_ascii=False)
    for answer in (
        f'<think>\n用户_1111 说周末去下围棋。草稿 {{"updates": []}}\n</think>\n\n```json\n{body}\n```',
        f"分析如下：\n{body}\n以上。",
    ):
        parsed = PERSONA.parse_updates(
            answer,
            labels={"用户_1111": "1111"},
            allowed=["1111"],
            min_confidence=0.65,
            max_persona_chars=700,
        )
        assert [(u.user_id, u.value) for u in parsed.updates] == [("1111", "围棋")], parsed.ignored
    nested = PERSONA.parse_updates(
        "[" * 100_000, labels={}, allowed=[], min_confidence=0.5, max_persona_chars=700
    )
    assert nested.updates == [] and len(nested.ignored) == 1
