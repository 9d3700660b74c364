"""The English conversation topics and question wordings of the episode set (issue #48),
and the shapes both languages share (:class:`Topic`, :class:`Wordings`).

Roles of a topic's lines: ``a`` the member the conversation is about, ``o`` another group
member (left out in a private chat), ``bot`` the bot.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TOPICS", "WORDINGS", "Topic", "Wordings"]


@dataclass(frozen=True, slots=True)
class Topic:
    key: str
    noun: str
    """What a topic question calls it (「上回说的{noun}怎么样了」, "how did the {noun} go")."""
    lines: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Wordings:
    """Question templates of one language (``{wd}`` a weekday, ``{topic}`` a noun, ``{name}`` a
    person never in the chat)."""

    last_private: tuple[str, ...]
    last_group: tuple[str, ...]
    yesterday_private: tuple[str, ...]
    yesterday_group: tuple[str, ...]
    weekday_private: tuple[str, ...]
    weekday_group: tuple[str, ...]
    first_private: tuple[str, ...]
    first_group: tuple[str, ...]
    topic_private: tuple[str, ...]
    topic_group: tuple[str, ...]
    plain: tuple[str, ...]
    """Questions that ask for no past conversation (a fact, the weather, a goodbye, tomorrow)."""
    other_person: tuple[str, ...]
    weekdays: tuple[str, ...]
    """Monday first."""
    strangers: tuple[str, ...]
    """Names never given to a member."""


TOPICS: tuple[Topic, ...] = (
    Topic("interview", "job interview", (
        ("a", "I've got a job interview tomorrow at 2pm, a fintech startup. Kind of nervous."),
        ("bot", "You'll be fine! What's the role, and how are you preparing?"),
        ("a", "Data analyst. Two rounds, the second one with the head of analytics."),
        ("o", "I interviewed there last year, they love SQL puzzles in round two."),
        ("bot", "Then practise a couple of window-function queries out loud."),
        ("a", "Good idea, I'll also walk through my churn model project."),
        ("o", "Good luck, tell us how it goes!"),
        ("bot", "Fingers crossed. Let me know how it went."),
    )),
    Topic("moving", "move", (
        ("a", "We're moving house next Saturday, from Brooklyn to Queens."),
        ("bot", "Big step! Have you booked movers yet?"),
        ("a", "Yes, a small company, two guys and a van for $650."),
        ("o", "Wrap the plates in towels, I broke half my dishes last time."),
        ("a", "Ha, noted. I still need to buy boxes and tape."),
        ("bot", "Is the new place closer to work?"),
        ("a", "Much closer, twenty minutes instead of an hour."),
        ("o", "Housewarming party then!"),
    )),
    Topic("trip", "Lisbon trip", (
        ("a", "Booked a trip to Lisbon for five days in October!"),
        ("bot", "Lovely! What are you planning to see?"),
        ("a", "Belém, the tram 28, and a day trip to Sintra."),
        ("o", "Go to Sintra early, the queues at Pena Palace get crazy."),
        ("a", "Thanks, I'll take the first train out."),
        ("bot", "And try the pastéis de nata in Belém, they're famous for a reason."),
    )),
    Topic("vet", "vet visit", (
        ("a", "Took my dog Biscuit to the vet today, he's been limping."),
        ("bot", "Oh no, what did the vet say?"),
        ("a", "A sprained paw. Anti-inflammatories and no long walks for a week."),
        ("o", "Poor Biscuit, give him a treat from me."),
        ("bot", "Keep him calm and check the paw for swelling each day."),
        ("a", "Will do, we go back for a check-up on Friday."),
    )),
    Topic("exam", "exam results", (
        ("a", "My bar exam results came out this morning. I passed!"),
        ("bot", "Congratulations! That's huge."),
        ("a", "Thanks! The essay part was the hardest, I scored just above the line."),
        ("o", "Amazing, we need to celebrate!"),
        ("a", "Now I have to sort out the admission paperwork."),
        ("bot", "Make a checklist of the deadlines so nothing slips."),
        ("a", "Yes, the character and fitness form is due next month."),
    )),
    Topic("game_night", "game night", (
        ("a", "Board game night at mine on Friday? Thinking Catan and Codenames."),
        ("o", "I'm in! I'll bring snacks."),
        ("a", "We need at least six for Codenames, who else?"),
        ("o", "My roommate wants to come, she's a Catan shark."),
        ("bot", "Sounds fun. Want me to keep score for you?"),
        ("a", "Sure, starting at 7pm."),
    )),
    Topic("marathon", "marathon training", (
        ("a", "I signed up for the Chicago marathon, my first one."),
        ("bot", "Wow! How many weeks do you have to train?"),
        ("a", "Sixteen weeks. Long run this Sunday is 18 km."),
        ("o", "Get proper shoes fitted, my knees hated me the first year."),
        ("a", "Already did, new Brooks from the running store."),
        ("bot", "Remember the easy days matter as much as the long runs."),
        ("a", "Yeah, the plan has three easy runs a week."),
    )),
    Topic("renovation", "kitchen renovation", (
        ("a", "The kitchen renovation finally started, they ripped out the old cabinets."),
        ("bot", "Exciting! What's the new design?"),
        ("a", "White shaker cabinets, butcher block counters, an island."),
        ("o", "Butcher block needs oiling, just so you know."),
        ("a", "Yes, the contractor said every couple of months."),
        ("bot", "How long will you be without a kitchen?"),
        ("a", "About six weeks, lots of takeout ahead."),
    )),
    Topic("birthday", "birthday party", (
        ("a", "Planning a surprise party for my sister's 30th next Saturday."),
        ("bot", "How fun! Where is it going to be?"),
        ("a", "Back room of an Italian place downtown, about fifteen people."),
        ("o", "Want me to handle the cake? I know a great bakery."),
        ("a", "Yes please! Chocolate, she loves chocolate."),
        ("bot", "Maybe a slideshow of old photos too, people love that."),
        ("a", "Ooh good idea, I'll ask my mom for the albums."),
    )),
    Topic("car", "car shopping", (
        ("a", "Shopping for a car, stuck between a Prius and a Model 3."),
        ("bot", "How far do you drive each day, and can you charge at home?"),
        ("a", "About 30 miles, and there's a garage with an outlet."),
        ("o", "I love my EV, charging at home is so cheap."),
        ("a", "My worry is road trips to my parents, it's 400 miles."),
        ("bot", "Test drive both this weekend and check the chargers on that route."),
    )),
    Topic("baking", "sourdough", (
        ("a", "Baked my first sourdough loaf today!"),
        ("bot", "Nice! How did it turn out?"),
        ("a", "Crust was great but the crumb was a bit dense."),
        ("o", "Probably underproofed, try a longer bulk ferment."),
        ("a", "The kitchen is cold, maybe that's why."),
        ("bot", "An oven with just the light on makes a good proofing box."),
    )),
    Topic("series", "TV series", (
        ("a", "Started watching Severance, I'm hooked."),
        ("bot", "Great show! Which episode are you on?"),
        ("a", "Episode six, that ending was wild."),
        ("o", "No spoilers please, I'm only on episode three!"),
        ("a", "My lips are sealed. The office scenes are so creepy."),
        ("bot", "Tell me what you think of the finale when you get there."),
    )),
)  # fmt: skip

WORDINGS = Wordings(
    last_private=(
        "What did we talk about last time?",
        "Remind me, what did we chat about last time?",
    ),
    last_group=("What did the group talk about last time?", "What did we all discuss last time?"),
    yesterday_private=("What did we discuss yesterday?", "What were we talking about yesterday?"),
    yesterday_group=("What did the group talk about yesterday?",),
    weekday_private=("What did we talk about last {wd}?",),
    weekday_group=("What did the group discuss last {wd}?",),
    first_private=("What was our first chat about?", "Do you remember our first chat?"),
    first_group=("What was this group's first chat about?",),
    topic_private=(
        "How did the {topic} go that we talked about?",
        "Any news on the {topic} we discussed?",
    ),
    topic_group=("How did the {topic} go that you all talked about?",),
    plain=(
        "What's the weather like today?",
        "What's my dog's name?",
        "Talk to you next time!",
        "What should we talk about tomorrow?",
    ),
    other_person=("How did {name}'s {topic} go?", "Did {name} ever tell us about the {topic}?"),
    weekdays=("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"),
    strangers=("Derek", "Aunt Carol", "Mr. Patel"),
)
