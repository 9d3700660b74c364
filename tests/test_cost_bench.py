"""The cost benchmark's arithmetic on requests written here (the figures come from
``uv run --frozen python -m bench.cost_bench``; this checks what it counts)."""

from __future__ import annotations

from typing import Any

from bench.cost_metrics import Recorder, kind_of, rendered, shared_prefix

SIX = "write_memory read_memory update_memory delete_memory list_memory update_memo".split()


def tool(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": "", "parameters": {}}}


def request(history: list[str], message: str, *, tools: bool) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "SYS\n<MEMO>\nm\n</MEMO>"}]
    for i, text in enumerate(history):
        messages.append({"role": "user" if i % 2 == 0 else "assistant", "content": text})
    messages.append({"role": "user", "content": message})
    body: dict[str, Any] = {"messages": messages}
    if tools:
        body["tools"] = [tool("agent_stop"), *(tool(n) for n in SIX)]
    return body


def test_shared_prefix_and_kinds() -> None:
    assert shared_prefix("abcdef", "abcxyz") == 3
    assert shared_prefix("", "abc") == 0 and shared_prefix("abc", "abc") == 3
    assert kind_of({"messages": [{"role": "system", "content": "[memory-extraction]…"}]}) == (
        "extraction"
    )
    assert kind_of({"messages": [{"role": "system", "content": "[persona-extraction]…"}]}) == (
        "persona"
    )
    assert kind_of({"tools": [tool("report")], "messages": [{"role": "user", "content": ""}]}) == (
        "check"
    )
    assert kind_of(request([], "hi", tools=True)) == "tool-calling"
    assert kind_of({"messages": [{"role": "system", "content": "[episode-summary]\n…"}]}) == (
        "episode"
    )
    assert kind_of(request([], "hi", tools=False)) == "final"


def test_prefix_share_and_blocks_per_turn() -> None:
    section = "\n\n[记忆插件附注：…]\n<MEMORIES>\n- a\n</MEMORIES>"
    recorder = Recorder(frozenset(SIX))
    first = request([], "u1" + section, tools=True)
    second = request(["u1", "a1"], "u2" + section, tools=True)
    recorder.turn("private:1", 0, [first])
    recorder.turn("private:1", 1, [second])
    recorder.turn("private:2", 0, [request([], "other", tools=True)])  # another chat: no share
    [(index, share)] = recorder.shares["tool-calling"]
    before, after = rendered(first), rendered(second)
    assert index == 1 and share == shared_prefix(before, after) / len(after)
    assert after[: int(share * len(after))].endswith('"content":"u1')  # through the last message
    blocks = recorder.blocks
    assert blocks["MEMORIES"] == [len("<MEMORIES>\n- a\n</MEMORIES>") + 1] * 2 + [0]
    assert blocks["memo"] == [len("<MEMO>\nm\n</MEMO>") + 1] * 3
    assert blocks["tools"][0] == len(
        '[{"type":"function","function":{"name":"write_memory","description":"","parameters":{}}}'
        + "".join(
            f',{{"type":"function","function":{{"name":"{n}","description":"","parameters":{{}}}}}}'
            for n in SIX[1:]
        )
        + "]"
    )
    summary = recorder.summary(private=3, group=0, answered=3)
    assert summary["prefix_share"]["tool-calling"]["all"]["n"] == 1
    assert summary["requests_per_100_messages"]["tool-calling"] == 100.0
