"""When a sentence says something happened or will happen, as a calendar date.

Why it exists: a memory read in a later session must not say "yesterday". A sentence's time
words are resolved against the time its message was written (passed in; wm_core reads no
clock): "yesterday", "last night", "last Tuesday", "next Friday", "two weeks ago", "last May", "in
September", "the 28th", "June 12", "2026-03-05", "5 March 2026", "at Christmas".

The rules, stated once:

- a weekday alone ("on Saturday") is the previous one for a sentence in the past tense, else
  the coming one; "last Tuesday" the one before the message day; "this Friday" the one of the
  message's week; "next Friday" the one of the following week (weeks start on Monday);
  "by Friday" the coming one;
- a month alone ("in April") is the latest one not after the message's month for a sentence
  in the past tense, else the next one not before it; "last May" the latest one before the
  message's month, "next June" the next one after it;
- a day and month without a year take the message's year;
- "last week" / "next week" are seven days back or ahead; "last month" / "next month" and
  "last year" / "next year" the month or year; "last summer" the latest summer not in
  progress.

A :class:`When` keeps its precision (day, month or year): the event time is its first day and
the text says "in 2026-09" rather than a day nobody stated.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass
from typing import Final

MONTHS: Final = (
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
)
_WEEKDAYS: Final = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_MONTH = "|".join(MONTHS) + r"|jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec"
_DAY = "|".join(_WEEKDAYS)
_NUM_WORDS: Final = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "couple of": 2,
    "few": 3,
}
_NUM = r"\d{1,3}|a|an|one|two|three|four|five|six|seven|eight|nine|ten|a couple of|a few"

_PATTERNS: Final = (
    ("iso", re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")),
    ("dmy", re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?({_MONTH})\.?,?\s+(\d{{4}})\b", re.I)),
    ("mdy", re.compile(rf"\b({_MONTH})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?,?\s+(\d{{4}})\b", re.I)),
    ("md", re.compile(rf"\b({_MONTH})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?\b(?!:)", re.I)),
    ("dm", re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?({_MONTH})\b", re.I)),
    ("word", re.compile(r"\b(today|tonight|this (?:morning|afternoon|evening)|yesterday|"
                        r"(?<!our )(?<!my )(?<!the )(?<!his )(?<!her )(?<!their )(?<!first )last night|tomorrow|the day before yesterday|the day after tomorrow)\b",
                        re.I)),
    ("ago", re.compile(rf"\b({_NUM})\s+(day|week|month|year)s?\s+ago\b", re.I)),
    ("in_n", re.compile(rf"\bin\s+({_NUM})\s+(day|week|month|year)s?\b", re.I)),
    ("rel_unit", re.compile(r"\b(last|next|this)\s+(week|month|year|weekend)\b", re.I)),
    ("season", re.compile(r"\b(last|next|this)\s+(summer|winter|spring|autumn|fall)\b", re.I)),
    # ("on Thursday evenings" is a habit, not a date)
    ("rel_day", re.compile(
        rf"\b(last|next|this|on|by|coming|until)\s+({_DAY})\b"
        r"(?!\s+(?:evenings|mornings|nights|afternoons|lunchtimes)\b)",
        re.I,
    )),
    # "at the end of June", "mid-May": a part of the month is read as the month
    ("rel_month", re.compile(rf"\b(last|next|this|in|since|by|until|from|throughout|all\s+of|"
                             rf"(?:end|start|beginning|middle)\s+of|mid)[\s-]+({_MONTH})\b(?!\s+\d)",
                             re.I)),
    # "on the 2nd" is this or next month's, unless a month follows ("the 2nd of May": "dm")
    ("nth", re.compile(r"\b(?:on|by|until|from|before)\s+the\s+(\d{1,2})(?:st|nd|rd|th)\b(?!\s+of\b)",
                       re.I)),
    ("year", re.compile(r"\b(?:in|since|during)\s+((?:19|20)\d{2})\b", re.I)),
    ("holiday", re.compile(r"\b(christmas eve|christmas|new year's eve|new year's day|halloween|"
                           r"valentine's day)\b", re.I)),
)  # fmt: skip
# Holidays on a fixed day: (month, day).
_HOLIDAYS: Final = {
    "christmas eve": (12, 24),
    "christmas": (12, 25),
    "new year's eve": (12, 31),
    "new year's day": (1, 1),
    "halloween": (10, 31),
    "valentine's day": (2, 14),
}

_FUTURE: Final = re.compile(
    r"\b(?:will|'ll|shall|going to|gonna|plan(?:ning)? to|planned|scheduled|expecting|"
    r"is turning|are turning|upcoming|next|tomorrow|starts|begins|is due|are due|due|"
    # a booking is for what is coming: "I've signed up for the marathon in October"
    r"signed up for|booked|registered for|(?:bought|got) tickets|"
    r"i'm (?:starting|taking|flying|going|visiting|running|seeing|playing|meeting)|"
    r"(?:we're|we are|i am) \w+ing|"
    # what must still be done is ahead: "need to get the application in by 30 September"
    r"needs? to|must|deadline|due by|"
    # a timetable in the present simple: "then I start at a consultancy in October"
    r"(?:i|we|they|he|she)\s+(?:then\s+)?(?:start|starts|begin|begins|leave|leaves|fly|flies|"
    r"move|moves|arrive|arrives|finish|finishes|return|returns)\s|"
    # "is getting married in October", "they're moving in June": a present progressive, dated
    r"(?:is|are|'s|'re|'m)\s+(?:\w+ly\s+)?(?:getting|moving|starting|having|coming|flying|"
    r"leaving|visiting|taking|going|doing|running|playing|hosting|throwing|expecting))\b",
    re.IGNORECASE,
)
_PAST: Final = re.compile(
    r"\b(?:was|were|had|did|went|got|broke|lost|quit|left|took|made|met|saw|came|began|ran|"
    r"won|bought|sold|gave|fell|wrote|spent|found|became|grew|flew|drove|ate|told|said|"
    r"tore|hurt|caught|sent|kept|felt|paid|threw|wore|slept|built|held|sat|stood|chose|"
    r"forgot|rode|swam|sang|drank|taught|brought|thought|heard|understood|"
    # "last" dates the past ("last week", "last May"), not "my last day is the 30th"
    rf"been|ago|yesterday|last(?=\s+(?:week|weekend|month|year|night|time|summer|winter|spring|"
    rf"autumn|fall|{_DAY}|{_MONTH})\b)|\w{{3,}}ed)\b",
    re.IGNORECASE,
)


# Every time the patterns know starts with a digit or one of these words.
_ANY_TIME: Final = re.compile(
    rf"\d|\b(?:{_MONTH}|{_DAY}|today|tonight|this|yesterday|tomorrow|the day|ago|last|next|"
    rf"in\s+(?:{_NUM})|christmas|new year's|halloween|valentine's)\b",
    re.IGNORECASE,
)
_HAVE_GOT: Final = re.compile(r"\b(?:i've|we've|you've|i have|we have|has|have)\s+got\b", re.I)


@dataclass(frozen=True, slots=True)
class When:
    """A resolved time: its first day and its precision ("day", "month" or "year")."""

    day: datetime.date
    precision: str
    start: int  # where the time words are in the sentence
    end: int
    named: bool = False  # a holiday: the text keeps its name ("Christmas (2026-12-25)")

    @property
    def iso(self) -> str:
        """The event time (its first day)."""
        return self.day.isoformat()

    @property
    def label(self) -> str:
        """The time as a memory states it: 2026-04-01, 2026-09 or 2025."""
        if self.precision == "month":
            return self.day.isoformat()[:7]
        if self.precision == "year":
            return str(self.day.year)
        return self.day.isoformat()


def _month(name: str) -> int:
    name = name.lower()[:3]
    return [m[:3] for m in MONTHS].index(name) + 1


def _number(text: str) -> int:
    text = text.lower()
    if text.isdigit():
        return int(text)
    return _NUM_WORDS.get(text.removeprefix("a ").strip(), 1)


def _date(year: int, month: int, day: int) -> datetime.date | None:
    try:
        return datetime.date(year, month, day)
    except ValueError:
        return None


def _shift_months(day: datetime.date, months: int) -> datetime.date:
    index = day.year * 12 + day.month - 1 + months
    return datetime.date(index // 12, index % 12 + 1, 1)


def is_past(sentence: str) -> bool:
    """Whether a sentence reads as past rather than present or future ("I've got" is a
    present: a possession, not a past)."""
    text = _HAVE_GOT.sub("have", sentence)
    return not _FUTURE.search(text) and bool(_PAST.search(text))


def _tense_near(sentence: str, match: re.Match[str], past: bool) -> bool:
    """Whether the part of the sentence a time is said in (between the commas around it)
    reads as past: "I broke my wrist in February, the cast comes off next week" puts February
    behind; the sentence's own tense (``past``) when that part has no tense of its own."""
    start = max(sentence.rfind(",", 0, match.start()), sentence.rfind(";", 0, match.start())) + 1
    ends = [i for i in (sentence.find(",", match.end()), sentence.find(";", match.end())) if i >= 0]
    part = _HAVE_GOT.sub("have", sentence[start : min(ends) if ends else len(sentence)])
    if _FUTURE.search(part):
        return False
    return True if _PAST.search(part) else past


def _resolve(kind: str, match: re.Match[str], base: datetime.date, past: bool) -> When | None:
    start, end = match.span()
    g = match.groups()
    found: datetime.date | None = None
    precision = "day"
    if kind == "iso":
        found = _date(int(g[0]), int(g[1]), int(g[2]))
    elif kind == "dmy":
        found = _date(int(g[2]), _month(g[1]), int(g[0]))
    elif kind == "mdy":
        found = _date(int(g[2]), _month(g[0]), int(g[1]))
    elif kind in ("md", "dm"):
        month, day = (_month(g[0]), int(g[1])) if kind == "md" else (_month(g[1]), int(g[0]))
        found = _date(base.year, month, day)
        # a day without a year is the nearest one in the sentence's direction: "January 6"
        # said on 21 December of what is coming is next year's, of what is past this year's
        if found is not None and not past and (base - found).days > 31:
            found = _date(base.year + 1, month, day)
        elif found is not None and past and (found - base).days > 31:
            found = _date(base.year - 1, month, day)
    elif kind == "word":
        word = g[0].lower()
        offset = {
            "yesterday": -1,
            "last night": -1,
            "tomorrow": 1,
            "the day before yesterday": -2,
        }.get(word, 0)
        offset = 2 if word == "the day after tomorrow" else offset
        found = base + datetime.timedelta(days=offset)
    elif kind in ("ago", "in_n"):
        n = _number(g[0]) * (-1 if kind == "ago" else 1)
        unit = g[1].lower()
        if unit in ("day", "week"):
            found = base + datetime.timedelta(days=n * (7 if unit == "week" else 1))
        elif unit == "month":
            found, precision = _shift_months(base, n), "month"
        else:
            found, precision = datetime.date(base.year + n, 1, 1), "year"
    elif kind == "rel_unit":
        step = {"last": -1, "next": 1, "this": 0}[g[0].lower()]
        unit = g[1].lower()
        if unit in ("week", "weekend"):
            if unit == "weekend":
                saturday = base + datetime.timedelta(days=(5 - base.weekday()) % 7)
                found = saturday + datetime.timedelta(days=7 * step)
            else:
                found = base + datetime.timedelta(days=7 * step)
        elif unit == "month":
            found, precision = _shift_months(base, step), "month"
        else:
            found, precision = datetime.date(base.year + step, 1, 1), "year"
    elif kind == "season":
        step = {"last": -1, "next": 1, "this": 0}[g[0].lower()]
        first = {"spring": 3, "summer": 6, "autumn": 9, "fall": 9, "winter": 12}[g[1].lower()]
        year = base.year
        if step < 0 and base.month < first + 3:
            year -= 1
        elif step > 0 and base.month >= first:
            year += 1
        found, precision = datetime.date(year, first, 1), "year"
    elif kind == "rel_day":
        word, target = g[0].lower(), _WEEKDAYS.index(g[1].lower())
        monday = base - datetime.timedelta(days=base.weekday())
        if word == "last":
            back = (base.weekday() - target) % 7 or 7
            found = base - datetime.timedelta(days=back)
        elif word == "this":
            found = monday + datetime.timedelta(days=target)
        elif word == "next":
            found = monday + datetime.timedelta(days=7 + target)
        elif word == "on" and past:
            back = (base.weekday() - target) % 7 or 7
            found = base - datetime.timedelta(days=back)
        else:
            found = base + datetime.timedelta(days=(target - base.weekday()) % 7 or 7)
    elif kind == "rel_month":
        word, month = g[0].lower(), _month(g[1])
        parts = ("end", "start", "beginning", "middle", "mid", "from", "throughout", "all")
        word = "in" if word.startswith(parts) else word
        year = base.year
        if word == "last" or (word in ("in", "since") and past):
            year -= month > base.month or (word == "last" and month == base.month)
        elif word == "next" or word in ("in", "by", "until", "this"):
            year += month < base.month or (word == "next" and month == base.month)
        found, precision = datetime.date(year, month, 1), "month"
    elif kind == "nth":
        day = int(g[0])
        found = _date(base.year, base.month, day)
        if found is not None and found < base and not past:
            nxt = _shift_months(base, 1)
            found = _date(nxt.year, nxt.month, day)
    elif kind == "year":
        found, precision = datetime.date(int(g[0]), 1, 1), "year"
    elif kind == "holiday":
        month, day = _HOLIDAYS[g[0].lower()]
        found = datetime.date(base.year, month, day)  # this year's, or the nearest one ahead
        if not past and found < base:  # or behind, in the sentence's direction
            found = datetime.date(base.year + 1, month, day)
        elif past and found > base:
            found = datetime.date(base.year - 1, month, day)
        return When(found, precision, start, end, named=True)
    if found is None:
        return None
    return When(found, precision, start, end)


def resolve_when(sentence: str, base: str | None) -> When | None:
    """The first time a sentence states, made absolute against ``base`` (the ISO date of its
    message); None when it states none, or only a relative one and no ``base`` is known."""
    if not _ANY_TIME.search(sentence):
        return None  # most sentences state no time: one search instead of fourteen
    day = datetime.date.fromisoformat(base[:10]) if base else None
    past = is_past(sentence)
    best: When | None = None
    for kind, pattern in _PATTERNS:
        for match in pattern.finditer(sentence):
            if kind not in ("iso", "dmy", "mdy", "year") and day is None:
                continue
            if kind == "rel_month" and match.group(2).lower() == "may" and not match.group(1).lower(
            ).startswith(("last", "next", "in", "this", "since", "end", "start", "beginning", "mid")):  # fmt: skip
                continue
            found = _resolve(
                kind, match, day or datetime.date(1970, 1, 1), _tense_near(sentence, match, past)
            )
            if found is not None and (best is None or found.start < best.start):
                best = found
            break
    return best
