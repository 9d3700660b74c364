"""Throughput of the period parser (``ranking/when.named_period``, issue #45 item 2).

Every ``read_memory`` and every recalled chat turn asks the parser whether the
question names a period, so its cost is paid per question. This times it over a
mixed list of realistic questions (Chinese and English, with and without a
period, look-alikes such as "最近的地铁站在哪" and "May I ask"), in rounds, and
prints questions per second (median round) per group and overall, and the share
of questions that name a period.

    uv run --frozen python -m bench.period_bench [--rounds 30]

The package needs NoneBot with the plugin loaded (see :mod:`bench.harness`);
only the parser is timed, start-up is not.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Callable
from datetime import datetime
from zoneinfo import ZoneInfo

from .harness import bench_env

ZH_TIMED = [
    "昨天我吃了什么", "今天早上我说了什么", "昨晚我们聊了什么", "前天我去哪了", "三天前我买了什么",
    "两天前我说的那家店叫什么", "前几天我跟你提过的电影是哪部", "这几天我睡得怎么样", "最近我在忙什么",
    "上周我去了哪里", "上上周我见了谁", "上周末我干嘛了", "周三我跟你说了什么", "上周三下午我在哪",
    "星期天我做了什么菜", "礼拜三开会说了什么", "这周我跑了几次步", "这个月我花了多少钱",
    "上个月我读了哪本书", "十月份我去哪旅游了", "十二月我买了什么", "去年我在哪工作",
    "今年我学了什么", "2023年我住在哪", "2023年5月2日我说了什么", "5月2号那天发生了什么",
    "去年十月我去了哪", "上个月5号我在干嘛", "刚才我说的那个名字是什么", "我们第一次聊天的时候说了什么",
    "上次聊天你说了什么", "早上我说要买什么来着", "晚上我提到的那首歌", "一周前我说的计划是什么",
    "三个月前我在哪上班", "两年前我养的狗叫什么", "昨天下午我去了哪", "周日我去了哪家店",
    "上个星期我读完了哪本书", "前些日子我提到的那位朋友", "这两天我吃了什么", "今年三月我去了哪",
    "二〇二三年我在做什么", "上礼拜我见了谁", "本周我加了几次班", "上週三我說了什麼",
    "十月三号我在哪", "大前天我去了哪", "这周三我做了什么", "刚刚你说的那本书",
]  # fmt: skip
ZH_PLAIN = [
    "我的狗叫什么名字", "我对什么过敏", "我在哪家公司上班", "我喜欢喝什么咖啡", "我女朋友叫什么",
    "我家住在哪个小区", "我的生日是哪天", "我最喜欢的电影是什么", "最近的地铁站在哪",
    "离公司最近的咖啡馆是哪家", "我最近一次去医院是什么时候", "明天我要做什么", "下周三我要去哪",
    "下个月的计划是什么", "明年三月我要去哪", "服务很周到吗", "一周年纪念日是哪天", "每周三我做什么",
    "一周一次的健身课在哪", "五月天的演唱会在哪", "我周一到周五几点上班", "我的车牌号是多少",
    "我的猫是什么品种", "我妈妈的手机号是多少", "我在学什么乐器", "我现在住在哪", "我以前住在哪",
    "我还养猫吗", "我之前的工作是什么", "我喜欢吃辣吗", "我的房间号是多少", "我叫什么名字",
    "我有几个孩子", "我在准备什么考试", "我的偶像是谁", "我平时几点睡觉", "我每天早上几点起床",
    "下午茶去哪喝", "早上好", "温度刚刚好吗", "我读过哪些书", "我的血型是什么", "我会说哪些语言",
    "我的老家在哪", "我在哪个城市", "我讨厌什么食物", "我的宠物几岁了", "我打算什么时候结婚",
    "我在用什么手机", "我和你说过我的梦想吗",
]  # fmt: skip
EN_TIMED = [
    "What did I eat yesterday?", "What did I say this morning?", "What did we talk about last night?",
    "What did I buy 3 days ago?", "What did I mention a few days ago?", "What have I been reading lately?",
    "Where did I go last week?", "What did I do last weekend?", "What did I say on Wednesday?",
    "What did I cook last Friday?", "What did I do this week?", "How much did I spend this month?",
    "What book did I read last month?", "Where did I travel in October?", "Where did I work last year?",
    "What did I learn this year?", "What did Maria do on 7 July, 2023?", "Which book on 8th December, 2023?",
    "What did she paint on October 13, 2023?", "What class did she start in December 2023?",
    "What did I say just now?", "What did we talk about the first time we talked?",
    "What did you say the last time we talked?", "What did I do the day before yesterday?",
    "What did I eat yesterday afternoon?", "Who did I meet two weeks ago?", "What did I do in 2023?",
    "What did I plan on May 5?", "What did I do over the weekend?", "What did I say the other day?",
    "What happened the week before last?", "What did I buy a month ago?", "Where was I a year ago?",
    "What did I do in the past 3 days?", "What did I say recently about work?", "What did I do on Monday?",
    "What did I say Tuesday evening?", "What did I mention in the past week?", "What did I do back in March?",
    "What did I order on 2024-02-29?", "What did I say a moment ago?", "What was our last conversation about?",
    "What did I do last December?", "What did I say earlier today?", "What did I do three days ago?",
    "Where did I go on Sunday?", "What did I watch last Saturday?", "When did Melanie go camping in June?",
    "What did I say this afternoon?", "What did I do a couple of days ago?",
]  # fmt: skip
EN_PLAIN = [
    "What is my dog's name?", "Where do I work?", "What am I allergic to?", "What is my favourite movie?",
    "May I ask what my cat is called?", "Where do I live now?", "Do I still play the piano?",
    "What did I use to eat for breakfast?", "What will I do next week?", "What am I doing tomorrow?",
    "Where am I going next Monday?", "What are my weekend plans?", "What do I do every Monday?",
    "What is my sister's phone number?", "What car do I drive?", "Which languages do I speak?",
    "What is my blood type?", "Where did I grow up?", "What is my daughter's name?",
    "What instrument am I learning?", "Who is my favourite author?", "What kind of coffee do I like?",
    "What is my room number?", "What is my licence plate?", "Wait a second, what was that?",
    "What's my cat's breed?", "What do I do for a living?", "What is my hometown?",
    "What exam am I preparing for?", "What are my hobbies?", "Where do I go running?",
    "What is my wife's job?", "What food do I hate?", "Which team do I support?",
    "What did I study at university?", "How old is my son?", "What's my shoe size?",
    "When is my birthday?", "What is my email address?", "What project am I working on?",
    "Who is Caroline?", "What did Melanie paint?", "What is Mochi?", "Where did Jon open his store?",
    "What does Gina like to dance?", "What is the second book in the series?",
    "Did I march in the parade?", "What do I use to clean the floor?", "How many kids do I have?",
    "What is my manager's name?",
]  # fmt: skip
GROUPS = {"zh timed": ZH_TIMED, "zh plain": ZH_PLAIN, "en timed": EN_TIMED, "en plain": EN_PLAIN}
NOW = datetime(2026, 12, 4, 7, 30, tzinfo=ZoneInfo("Asia/Shanghai"))


def _rate(parse: Callable[[str, datetime], object], questions: list[str], rounds: int) -> float:
    """Questions per second, median over ``rounds`` passes over ``questions``."""
    rates = []
    for _ in range(rounds):
        started = time.perf_counter()
        for q in questions:
            parse(q, NOW)
        rates.append(len(questions) / (time.perf_counter() - started))
    return statistics.median(rates)


async def main(rounds: int) -> None:
    async with bench_env():
        from amrita_plugin_memory.ranking.when import named_period, tense

        everything = [q for group in GROUPS.values() for q in group]
        named = sum(named_period(q, NOW) is not None for q in everything)
        print(f"{len(everything)} questions, {named} name a period (now = {NOW.isoformat()})")
        for name, questions in GROUPS.items():
            hits = sum(named_period(q, NOW) is not None for q in questions)
            rate = _rate(named_period, questions, rounds)
            print(
                f"{name:>9}: {len(questions):3d} questions, {hits:3d} named, {rate:>9,.0f} questions/s"
            )
        rate = _rate(named_period, everything, rounds)
        print(
            f"{'all':>9}: {len(everything):3d} questions, named_period {rate:,.0f} questions/s "
            f"({1e6 / rate:.1f} µs each)"
        )
        rate = _rate(lambda q, _now: tense(q), everything, rounds)
        print(f"{'all':>9}: tense {rate:,.0f} questions/s ({1e6 / rate:.1f} µs each)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=30)
    asyncio.run(main(parser.parse_args().rounds))
