"""What a short text about a person is about: a small bilingual lexicon of life topics.

A small embedding model links a question to a memory through the words they
share in meaning, and it misses the ones a person would not: "我现在的公司叫什么"
and "用户在火山互娱上班" share no word and no name, and e5-small ranks "用户家里的
猫叫花卷" (the "叫…" of a name) closer. Both are about *work*. This module
names the topics of everyday facts that users tell their bot (work, home,
family, pets, school, health, …) and the words that signal them, so that the
keyword channel can match a question and a memory on their topic as well as on
their words (a thesaurus, as in a search engine's synonym filter).

The lexicon is deliberately plain: substrings for Chinese (no segmentation is
needed, and the entries are chosen so that common words do not contain them:
``住在`` rather than ``住``, which is also in ``记住``); whole words or phrases for
English, a phrase matched first and its words not matched again ("work out" is
sport, not work). A text may have several topics or none; none is the usual
case for a question that is not about the user's life (then nothing changes).
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["TOPICS", "TOPIC_PREFIX", "topic_tokens", "topics_of"]

TOPIC_PREFIX = "#"
"""Topic tokens are ``#work``, ``#home``…: no keyword token starts with ``#``
(:func:`~.ranking.tokenize` keeps letters and digits only)."""

# fmt: off
TOPICS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # name: (Chinese substrings, English words)
    "work": (
        ("公司", "上班", "单位", "工作", "跳槽", "入职", "离职", "辞职", "岗位", "职位", "职业",
         "同事", "上司", "老板", "领导", "工号", "加班", "打卡", "出差", "实习", "工资", "薪水",
         # occupations: "用户在拾光文化做测试工程师" is about work without saying so
         "工程师", "程序员", "设计师", "分析师", "产品经理", "经理", "主管", "运营", "会计",
         "销售", "客服", "律师", "医生", "护士", "教师", "老师", "司机", "厨师", "公务员"),
        ("work", "works", "worked", "working", "job", "jobs", "company", "employer", "office",
         "colleague", "colleagues", "coworker", "boss", "manager", "career", "salary",
         "intern", "internship", "engineer", "developer", "programmer", "designer", "analyst",
         "accountant", "lawyer", "doctor", "nurse", "teacher", "driver", "chef"),
    ),
    "home": (
        ("住在", "住哪", "住址", "地址", "家住", "居住", "搬家", "搬到", "搬去", "小区", "租房",
         "房租", "公寓", "门牌", "楼栋", "门禁"),
        ("live", "lives", "living", "address", "moved", "move", "apartment", "flat", "rent",
         "neighborhood", "neighbourhood"),
    ),
    "phone": (
        ("手机", "电话", "手机号"),
        ("phone", "phones", "mobile", "cellphone", "iphone", "pixel", "galaxy"),
    ),
    "number": (
        ("号码", "尾号", "手机号", "后四位", "微信号", "qq号"),
        ("number", "digits", "ends"),
    ),
    "computer": (
        ("电脑", "笔记本", "平板", "显卡", "键盘", "耳机"),
        ("laptop", "computer", "pc", "macbook", "tablet", "ipad", "keyboard", "headphones"),
    ),
    "account": (
        ("密码", "账号", "账户", "邮箱", "登录", "wifi", "wi-fi"),
        ("password", "passwords", "account", "email", "login", "wifi", "username"),
    ),
    "pet": (
        ("猫", "狗", "宠物", "主子", "铲屎", "遛狗", "猫粮", "狗粮", "喵", "汪", "养了一只",
         "养的", "喵星人", "汪星人", "猫咪", "狗狗"),
        ("cat", "cats", "kitten", "dog", "dogs", "puppy", "pet", "pets", "vet"),
    ),
    "family": (
        ("妈妈", "爸爸", "母亲", "父亲", "老妈", "老爸", "爸妈", "妹妹", "姐姐", "哥哥", "弟弟",
         "爷爷", "奶奶", "外公", "外婆", "姥姥", "姥爷", "老婆", "老公", "儿子", "女儿", "家人"),
        ("mom", "mum", "mother", "dad", "father", "parents", "sister", "brother", "grandma",
         "grandpa", "wife", "husband", "son", "daughter", "family"),
    ),
    "friends": (
        ("朋友", "好友", "闺蜜", "室友", "合租", "同学", "发小", "网友"),
        ("friend", "friends", "roommate", "flatmate", "classmate", "classmates", "buddy"),
    ),
    "hometown": (
        ("老家", "家乡", "籍贯", "哪里人", "哪儿人", "出生地", "故乡"),
        ("hometown", "grew", "homeland"),
    ),
    "school": (
        ("学校", "大学", "毕业", "母校", "专业", "学院", "读书", "上学", "本科", "研究生", "硕士",
         "博士", "高中", "初中", "届"),
        ("school", "university", "college", "graduated", "graduate", "major", "degree",
         "studied", "alumni"),
    ),
    "study": (
        ("考试", "考研", "备考", "复习", "证书", "雅思", "托福", "四级", "六级", "考证"),
        ("exam", "exams", "test", "ielts", "toefl", "certificate", "revising", "studying"),
    ),
    "birthday": (
        ("生日", "出生", "几岁", "年龄"),
        ("birthday", "born", "age", "old"),
    ),
    "health": (
        ("过敏", "医院", "医生", "牙医", "看牙", "牙", "血型", "型血", "体检", "吃药", "生病",
         "疫苗", "诊所"),
        ("allergy", "allergic", "doctor", "dentist", "blood", "hospital", "medicine", "clinic",
         "checkup", "vaccine"),
    ),
    "food": (
        ("吃", "喝", "口味", "忌口", "菜", "饭", "零食", "奶茶", "咖啡", "饮料", "辣"),
        ("eat", "eats", "food", "foods", "drink", "drinks", "coffee", "tea", "dish", "spicy",
         "snack", "snacks"),
    ),
    "sport": (
        ("运动", "健身", "跑步", "游泳", "打球", "篮球", "足球", "羽毛球", "排球", "乒乓", "瑜伽",
         "私教", "教练", "骑行", "爬山", "锻炼", "撸铁", "带我练"),
        ("sport", "sports", "gym", "workout", "work out", "works out", "worked out",
         "working out", "run", "running", "swim", "swimming", "yoga", "coach", "trainer",
         "basketball", "football", "soccer", "badminton", "volleyball", "tennis", "cycling",
         "hiking"),
    ),
    "music": (
        ("歌", "音乐", "演唱会", "乐队", "专辑"),
        ("music", "song", "songs", "singer", "concert", "band", "album"),
    ),
    "shows": (
        ("电影", "追剧", "电视剧", "综艺", "动漫", "番剧", "美剧", "纪录片"),
        ("movie", "movies", "film", "films", "show", "shows", "series", "anime", "drama"),
    ),
    "reading": (
        ("看书", "读书", "小说", "阅读", "书"),
        ("book", "books", "novel", "novels", "reading", "read"),
    ),
    "game": (
        ("游戏", "主玩", "开黑", "上分", "段位", "角色", "steam", "uid"),
        ("game", "games", "gaming", "main", "mains", "steam", "uid", "rank"),
    ),
    "car": (
        ("车牌", "开车", "停车", "汽车", "买车", "车位", "驾照", "一辆", "座驾", "爱车",
         "什么车"),
        ("car", "cars", "drive", "drives", "driving", "parking", "plate"),
    ),
    "commute": (
        ("通勤", "地铁", "公交", "打车", "坐车", "骑车"),
        ("commute", "subway", "metro", "bus", "train"),
    ),
    "travel": (
        ("旅游", "旅行", "出去玩", "度假", "假期", "国庆", "五一", "机票", "酒店", "景点"),
        ("trip", "travel", "travelling", "traveling", "holiday", "vacation", "hotel", "flight"),
    ),
    "name": (
        ("称呼", "叫我", "叫他", "叫她", "改叫", "昵称", "外号", "网名", "小名"),
        ("nickname", "call", "called"),
    ),
    "personality": (
        ("性格", "内向", "外向", "mbti", "害怕", "怕"),
        ("personality", "mbti", "introvert", "extrovert", "afraid", "scared", "fear"),
    ),
    "parcel": (
        ("快递", "包裹", "驿站", "取件", "取货码", "网购"),
        ("parcel", "package", "delivery", "courier"),
    ),
}
# fmt: on


class _Lexicon:
    """:data:`TOPICS` prepared for one quick pass over a short text.

    Chinese words are indexed by their first character (a text of 30 characters
    costs 30 dictionary lookups, not one substring search per word); English
    text is split into words, phrases are looked up before single words.
    """

    def __init__(self, topics: dict[str, tuple[tuple[str, ...], tuple[str, ...]]]) -> None:
        self.by_first: dict[str, list[tuple[str, frozenset[str]]]] = {}
        self.words: dict[str, set[str]] = {}
        self.phrases: dict[str, set[str]] = {}
        zh: dict[str, set[str]] = {}
        for name, (zh_words, en_words) in topics.items():
            for word in zh_words:
                zh.setdefault(word, set()).add(name)
            for word in en_words:
                table = self.phrases if " " in word else self.words
                table.setdefault(word, set()).add(name)
        for word in sorted(zh, key=len, reverse=True):
            self.by_first.setdefault(word[0], []).append((word, frozenset(zh[word])))

    def topics(self, text: str) -> set[str]:
        norm = unicodedata.normalize("NFKC", text).lower()
        found: set[str] = set()
        for i, ch in enumerate(norm):
            for word, names in self.by_first.get(ch, ()):
                if norm.startswith(word, i):
                    found |= names
        words = _WORD.findall(norm)
        if not words:
            return found
        padded = f" {' '.join(words)} "
        for phrase, names in self.phrases.items():
            if f" {phrase} " in padded:
                found |= names
                padded = padded.replace(f" {phrase} ", "  ")
        for word in padded.split():
            names = self.words.get(word)
            if names:
                found |= names
        return found


_WORD = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
_LEXICON = _Lexicon(TOPICS)


def topics_of(text: str) -> set[str]:
    """The topics ``text`` is about (see :data:`TOPICS`; often none)."""
    return _LEXICON.topics(text)


def topic_tokens(text: str) -> list[str]:
    """``text``'s topics as keyword tokens (``#work``…), for the keyword index."""
    return [TOPIC_PREFIX + name for name in sorted(topics_of(text))]
