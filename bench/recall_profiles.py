"""One benchmark user's values for the fact templates (:mod:`bench.recall_facts`).

Values are drawn from small pools with a seeded generator, so several users
share a pet name or a city (what keeps cross-partition leakage honest: the
same token lives in other partitions) while every number and code is unique
inside a partition. Two people of the same partition never share a name.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

__all__ = ["make_profile"]

# fmt: off
_ZH_CITIES: dict[str, tuple[str, tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {
    # city: (plate prefix, districts, streets, subway stations)
    "广州": ("粤A", ("天河区", "海珠区", "越秀区", "番禺区", "白云区"),
             ("体育东路", "江南西路", "东风中路", "市桥街", "机场路"),
             ("体育西路", "岗顶", "公园前", "客村", "珠江新城")),
    "深圳": ("粤B", ("南山区", "福田区", "宝安区", "龙华区"),
             ("科技园路", "华强北路", "新安四路", "民治大道"), ("科技园", "车公庙", "深大", "民治")),
    "杭州": ("浙A", ("西湖区", "滨江区", "余杭区", "拱墅区"),
             ("文一西路", "江南大道", "五常大道", "莫干山路"), ("龙翔桥", "文三路", "滨和路", "凤起路")),
    "成都": ("川A", ("武侯区", "高新区", "锦江区", "成华区"),
             ("人民南路", "天府大道", "红星路", "建设路"), ("春熙路", "天府广场", "金融城", "孵化园")),
    "武汉": ("鄂A", ("洪山区", "江汉区", "武昌区", "东湖高新区"),
             ("珞喻路", "解放大道", "中北路", "光谷大道"), ("光谷广场", "街道口", "循礼门", "中南路")),
    "南京": ("苏A", ("鼓楼区", "玄武区", "江宁区", "建邺区"),
             ("中山北路", "珠江路", "双龙大道", "江东中路"), ("新街口", "鼓楼", "元通", "百家湖")),
}

_EN_CITIES: dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {
    "Seattle": (("Capitol Hill", "Ballard", "Fremont", "Queen Anne"),
                ("Pine Street", "Market Street", "Leary Way", "Galer Street"),
                ("Westlake", "Capitol Hill", "University Street", "Beacon Hill")),
    "Toronto": (("the Annex", "Leslieville", "Liberty Village", "Yorkville"),
                ("Bloor Street", "Queen Street East", "King Street West", "Davenport Road"),
                ("St. George", "Union", "Dundas", "Bay")),
    "Melbourne": (("Fitzroy", "Carlton", "Richmond", "Brunswick"),
                  ("Brunswick Street", "Lygon Street", "Swan Street", "Sydney Road"),
                  ("Flinders Street", "Parliament", "Southern Cross", "Melbourne Central")),
}

ZH: dict[str, tuple[str, ...]] = {
    "cat": ("年糕", "豆包", "汤圆", "芝麻", "布丁", "团子", "糯米", "可乐", "花卷", "奶盖"),
    "cat_color": ("橘", "三花", "黑白", "银渐层", "狸花", "蓝白"),
    "cat_food": ("渴望", "皇家", "爱肯拿", "巅峰", "网易严选", "诚实一口"),
    "dog": ("旺财", "馒头", "可可", "土豆", "球球", "大黄", "饺子", "雪球"),
    "dog_breed": ("柯基", "柴犬", "金毛", "边牧", "泰迪", "比熊"),
    "vet": ("瑞派宠物医院", "芭比堂", "新瑞鹏宠物医院", "安安宠医", "宠颐生"),
    "person": ("张子豪", "李思雨", "王一鸣", "陈可欣", "刘浩然", "赵雨桐", "周子涵", "吴俊杰",
               "孙嘉怡", "徐明轩", "马晓婷", "胡文博", "郭佳琪", "林子轩", "何思远"),
    "boss": ("老周", "刘姐", "陈总", "赵哥", "王经理", "黄老师"),
    "sister": ("小满", "朵朵", "乐乐", "甜甜", "安安"),
    "sister_grade": ("初二", "高一", "五年级", "大一", "初三"),
    "lunch": ("黄焖鸡", "沙县小吃", "麻辣烫", "猪脚饭", "兰州拉面"),
    "school": ("中山大学", "华中科技大学", "浙江工业大学", "四川大学", "南京邮电大学", "西北大学"),
    "major": ("计算机", "英语", "土木工程", "会计", "新闻", "电子信息"),
    "hometown": ("湖南衡阳", "江西赣州", "河南信阳", "山东临沂", "广西桂林", "安徽阜阳"),
    "game": ("原神", "王者荣耀", "明日方舟", "英雄联盟", "崩坏：星穹铁道"),
    "game_nick": ("夜雨听风", "一只咸鱼", "北岛以北", "糖醋排骨", "不吃香菜", "星河漫游"),
    "car": ("比亚迪海豹", "特斯拉Model 3", "小鹏P7", "大众朗逸", "丰田卡罗拉", "理想L6"),
    "car_color": ("白色", "灰色", "黑色", "蓝色"),
    "allergy": ("花生", "芒果", "海鲜", "青霉素", "尘螨", "菠萝"),
    "dislike": ("香菜", "折耳根", "苦瓜", "榴莲", "茄子", "香菇"),
    "fav_food": ("螺蛳粉", "火锅", "肠粉", "热干面", "烤鱼", "酸菜鱼", "煲仔饭"),
    "drink": ("杨枝甘露", "珍珠奶茶", "芝士葡萄", "生椰拿铁", "茉莉奶绿"),
    "sugar": ("三分糖", "五分糖", "无糖", "七分糖"),
    "singer": ("周杰伦", "陈奕迅", "五月天", "邓紫棋", "毛不易", "告五人", "薛之谦"),
    "sport": ("羽毛球", "篮球", "乒乓球", "网球", "排球"),
    "day": ("周三晚上", "周六上午", "周二晚上", "周日下午", "周四晚上"),
    "roommate_job": ("护士", "程序员", "设计师", "老师", "销售"),
    "mbti": ("INFJ", "ENTP", "ISTJ", "INFP", "ESFJ", "INTP"),
    "clinic": ("拜博口腔", "瑞尔齿科", "马泷齿科", "通策口腔"),
    "exam": ("考研", "雅思", "教师资格证考试", "注册会计师考试", "软考"),
    "exam_date": ("12月21日", "11月8日", "10月25日", "12月6日"),
    "book": ("《三体》", "《活着》", "《百年孤独》", "《人类简史》", "《置身事内》", "《平凡的世界》"),
    "show": ("繁花", "漫长的季节", "狂飙", "庆余年", "我的阿勒泰"),
    "laptop": ("联想小新Pro14", "MacBook Air", "华为MateBook 14", "拯救者Y9000P", "ThinkPad X1"),
    "blood": ("A", "B", "O", "AB"),
    "fear": ("蟑螂", "蛇", "蜘蛛", "打雷"),
    "job": ("后端开发", "产品经理", "UI设计师", "数据分析师", "测试工程师", "新媒体运营"),
    "company": ("星河科技", "蓝鲸游戏", "拾光文化", "云帆物流", "青橙教育", "火山互娱", "海豚医疗"),
    "nick": ("小鱼", "阿杰", "老王", "大壮", "糖糖", "阿飞", "小白"),
    "holiday": ("大理", "西安", "厦门", "青岛", "重庆", "三亚", "哈尔滨"),
    "phone_model": ("iPhone 13", "iPhone 15 Pro", "小米14", "华为Mate 60", "OPPO Find X7", "vivo X100"),
    "month": ("3", "4", "9", "10", "11"),
}

EN: dict[str, tuple[str, ...]] = {
    "cat": ("Mochi", "Biscuit", "Pudding", "Latte", "Toffee", "Noodle"),
    "cat_color": ("orange", "calico", "tuxedo", "grey tabby"),
    "cat_food": ("Orijen", "Royal Canin", "Acana", "Ziwi Peak"),
    "dog": ("Buddy", "Pepper", "Cooper", "Bean", "Waffle"),
    "dog_breed": ("corgi", "shiba inu", "golden retriever", "border collie"),
    "vet": ("Banfield Pet Hospital", "Greenwood Vet Clinic", "Harbor Animal Hospital"),
    "person": ("Jake Miller", "Priya Shah", "Tom Becker", "Hannah Lee", "Oscar Diaz", "Mia Chen",
               "Liam Walsh", "Nora Kim", "Ethan Ross", "Chloe Martin"),
    "boss": ("Mark", "Linda", "Rachel", "Steve"),
    "sister": ("Emma", "Lily", "Zoe", "Ruby"),
    "sister_grade": ("8th grade", "10th grade", "5th grade", "her first year of college"),
    "lunch": ("burritos", "poke bowls", "pho", "sandwiches"),
    "school": ("University of Leeds", "McGill University", "UBC", "Monash University"),
    "major": ("computer science", "economics", "civil engineering", "journalism"),
    "hometown": ("Portland, Oregon", "Halifax", "Adelaide", "Leeds"),
    "game": ("Genshin Impact", "League of Legends", "Overwatch 2", "Valorant"),
    "game_nick": ("NightOwl42", "SaltyPanda", "QuietStorm", "PixelMoth"),
    "car": ("Honda Civic", "Mazda 3", "Tesla Model Y", "Subaru Outback"),
    "car_color": ("white", "grey", "blue", "red"),
    "allergy": ("peanuts", "shellfish", "penicillin", "cashews"),
    "dislike": ("cilantro", "olives", "blue cheese", "mushrooms"),
    "fav_food": ("ramen", "tacos", "pho", "dumplings", "pad thai"),
    "drink": ("oat flat white", "iced americano", "chai latte", "matcha latte"),
    "sugar": ("no sugar", "one sugar", "extra vanilla"),
    "singer": ("Taylor Swift", "Coldplay", "Adele", "Hozier", "Billie Eilish"),
    "sport": ("badminton", "basketball", "tennis", "squash"),
    "day": ("Wednesday evening", "Saturday morning", "Tuesday night", "Sunday afternoon"),
    "roommate_job": ("nurse", "software developer", "designer", "teacher"),
    "mbti": ("INFJ", "ENTP", "ISTJ", "INFP"),
    "clinic": ("Bright Smile Dental", "Parkside Dental", "Maple Dental Care"),
    "exam": ("CFA Level I", "IELTS", "AWS Solutions Architect exam", "bar exam"),
    "exam_date": ("December 6", "November 15", "October 25"),
    "book": ("Project Hail Mary", "Sapiens", "The Midnight Library", "Educated"),
    "show": ("Severance", "The Bear", "Shogun", "Slow Horses"),
    "laptop": ("MacBook Air", "ThinkPad X1 Carbon", "Dell XPS 13", "Framework 13"),
    "blood": ("A", "B", "O", "AB"),
    "fear": ("spiders", "snakes", "cockroaches", "thunderstorms"),
    "job": ("backend developer", "product manager", "UI designer", "data analyst", "QA engineer"),
    "company": ("Brightwave Labs", "Northpeak Games", "Cedar Logistics", "Bluefin Health", "Orbit Media"),
    "nick": ("Sam", "Bex", "Jay", "Max", "Kit"),
    "holiday": ("Lisbon", "Kyoto", "Banff", "Iceland", "Tasmania"),
    "phone_model": ("iPhone 13", "iPhone 15 Pro", "Pixel 8", "Galaxy S24"),
    "month": ("March", "April", "September", "October"),
}

_MAINS: dict[str, tuple[str, ...]] = {
    "原神": ("胡桃", "那维莱特", "雷电将军", "钟离"),
    "王者荣耀": ("李白", "孙尚香", "诸葛亮", "瑶"),
    "明日方舟": ("能天使", "银灰", "史尔特尔", "艾雅法拉"),
    "英雄联盟": ("亚索", "金克丝", "锤石", "阿狸"),
    "崩坏：星穹铁道": ("丹恒", "刃", "卡芙卡", "银狼"),
    "Genshin Impact": ("Hu Tao", "Neuvillette", "Raiden Shogun", "Zhongli"),
    "League of Legends": ("Yasuo", "Jinx", "Thresh", "Ahri"),
    "Overwatch 2": ("Mercy", "Reinhardt", "Tracer", "Ana"),
    "Valorant": ("Jett", "Sage", "Omen", "Reyna"),
}

# fmt: on

_CHOICE_SLOTS = (
    "cat cat_color cat_food dog dog_breed vet boss sister sister_grade lunch school major "
    "hometown game_nick car car_color allergy dislike fav_food drink sugar singer sport "
    "roommate_job mbti clinic exam exam_date book show laptop blood fear job game"
).split()
"""Slots filled with one value of their pool."""


class _Numbers:
    """Digits and codes unique inside one partition."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.used: set[str] = set()

    def fresh(self, make: str) -> str:
        while True:
            value = "".join(self._char(c) for c in make)
            if value not in self.used and not any(value in u or u in value for u in self.used):
                self.used.add(value)
                return value

    def _char(self, c: str) -> str:
        if c == "9":
            return str(self.rng.randint(1, 9))
        if c == "0":
            return str(self.rng.randint(0, 9))
        if c == "A":
            return self.rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ")
        return c


def _pick(rng: random.Random, pool: Sequence[str], n: int) -> list[str]:
    return rng.sample(list(pool), n)


def make_profile(index: int, lang: str) -> dict[str, str]:
    """The slot values of user ``index`` (``lang`` is ``zh`` or ``en``)."""
    rng = random.Random(1000 + index)
    pools = ZH if lang == "zh" else EN
    num = _Numbers(rng)
    p: dict[str, str] = {}
    for slot in _CHOICE_SLOTS:
        p[slot] = rng.choice(pools[slot])
    p["vet_month"] = rng.choice(pools["month"])
    p["sport_day"], p["dentist_day"] = _pick(rng, pools["day"], 2)
    p["friend"], p["colleague"], p["coach"], p["roommate"] = _pick(rng, pools["person"], 4)
    p["cat_age"] = str(rng.randint(2, 9))
    p["grad_year"] = str(rng.randint(2012, 2022))
    p["shoe"] = str(rng.randint(36, 44))
    p["height"] = str(rng.randint(158, 186))
    p["coach_price"] = str(rng.choice((200, 260, 300, 350, 400)))
    p["line"] = str(rng.randint(1, 9))
    if lang == "zh":
        city = rng.choice(list(_ZH_CITIES))
        plate_prefix, districts, streets, stations = _ZH_CITIES[city]
        p["plate"] = f"{plate_prefix}·{num.fresh('A0A00')}"
        p["birthday"], p["mom_birthday"] = (f"{m}月{d}日" for m, d in _dates(rng, 2))
    else:
        city = rng.choice(list(_EN_CITIES))
        districts, streets, stations = _EN_CITIES[city]
        p["plate"] = num.fresh("AA00 AAA")
        p["birthday"], p["mom_birthday"] = (f"{_MONTHS[m - 1]} {d}" for m, d in _dates(rng, 2))
    p["station"] = rng.choice(stations)
    p["trip_city"], p["holiday_old"], p["holiday_new"] = _pick(rng, pools["holiday"], 3)
    p["district_old"], p["district_new"] = _pick(rng, districts, 2)
    p["street_old"], p["street_new"] = _pick(rng, streets, 2)
    p["company_old"], p["company_new"] = _pick(rng, pools["company"], 2)
    p["nick_old"], p["nick_new"] = _pick(rng, pools["nick"], 2)
    p["phone_model_old"], p["phone_model_new"] = _pick(rng, pools["phone_model"], 2)
    p["main_old"], p["main_new"] = _pick(rng, _MAINS[p["game"]], 2)
    p["hotel_room"] = num.fresh("9" + "00" + "0")  # e.g. 1602
    p["meet_room"] = num.fresh("90" + "9")  # e.g. 803
    p["parking"] = num.fresh("B2-900")
    p["emp_code"] = num.fresh("A9000")  # e.g. A1037
    p["locker"] = num.fresh("A900")
    p["parcel"] = num.fresh("9-9-9000")
    p["mom_phone"], p["phone_old"], p["phone_new"] = (num.fresh("9000") for _ in range(3))
    p["door_code"] = num.fresh("#900000")
    p["qq_game"], p["qq_class"] = (num.fresh("900000000") for _ in range(2))
    p["game_uid"] = num.fresh("1" + "00000000")
    p["steam"] = num.fresh("9000000000")
    p["wifi_old"], p["wifi_new"] = (num.fresh(w + "0000") for w in _pick(rng, _WIFI_WORDS, 2))
    return p


_WIFI_WORDS = ("Tiger", "xiaomao", "Sunny", "happyhome", "Panda", "chenjia", "Rainbow")
_MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)


def _dates(rng: random.Random, n: int) -> list[tuple[int, int]]:
    out: set[tuple[int, int]] = set()
    while len(out) < n:
        out.add((rng.randint(1, 12), rng.randint(1, 28)))
    return sorted(out, key=lambda _: rng.random())
