"""Item 5: memo injection per turn (``MemoService.get`` + render + insert)."""

from __future__ import annotations

import time

from .stats import Row, Summary, fmt_ms, verdict

HIT_TARGET = 0.0001  # s
MISS_TARGET = 0.005  # s

SYSTEM_PROMPT = (
    "<SYSTEM_INSTRUCTIONS>\n"
    + "你是一个友好的聊天机器人，回答要简洁、准确，必要时调用工具。\n" * 40
    + "</SYSTEM_INSTRUCTIONS>\n"
    + "以下是本群最近的聊天记录摘要……\n" * 10
)
MEMO = (
    "身份：用户叫小林，28 岁，杭州，前端开发。\n"
    "偏好：回答先给结论；喜欢冰美式；对花生过敏。\n"
    "工具模式：问天气时直接查询不要确认。\n"
    "近期：在准备十月份的马拉松；下月搬家到滨江。\n"
) * 5  # about 400 characters, a typical full memo


async def bench_memo(rows: list[Row], *, hits: int, misses: int) -> None:
    from amrita_plugin_memory.prompting.blocks import insert_block, render_memo_block
    from amrita_plugin_memory.storage.memo_store import MemoService
    from amrita_plugin_memory.storage.scope import operator_view

    service = MemoService(max_chars=1000)
    uni_id = "QQPlatform_Private_424242"
    result = await service.update(uni_id, MEMO)
    if not result.ok:
        raise RuntimeError(f"memo setup failed: {result}")

    async def turn(source: MemoService = service) -> str:
        memo = await source.get(operator_view(uni_id))
        return insert_block(SYSTEM_PROMPT, render_memo_block(memo, is_group=False))

    await turn()
    hit_times: list[float] = []
    for _ in range(hits):
        started = time.perf_counter()
        await turn()
        hit_times.append(time.perf_counter() - started)
    miss_times: list[float] = []
    for _ in range(misses + 3):
        cold = MemoService(max_chars=1000)  # an empty cache: the row comes from SQLite
        started = time.perf_counter()
        await turn(cold)
        miss_times.append(time.perf_counter() - started)
    hit, miss = Summary.of(hit_times), Summary.of(miss_times[3:])
    rows.append(
        Row(
            "5",
            "sqlite",
            f"memo injection, cache hit ({hits:,} turns)",
            p50=fmt_ms(hit.p50),
            p95=fmt_ms(hit.p95),
            value="verdict on p95",
            target="≤ 0.1 ms",
            verdict=verdict(hit.p95 <= HIT_TARGET),
        )
    )
    rows.append(
        Row(
            "5",
            "sqlite",
            f"memo injection, cache miss ({misses:,} turns)",
            p50=fmt_ms(miss.p50),
            p95=fmt_ms(miss.p95),
            value="verdict on p95",
            target="≤ 5 ms",
            verdict=verdict(miss.p95 <= MISS_TARGET),
        )
    )
