"""Time in conversations: turn timestamps, dates mentioned in text, and their display form.

A pure module (stdlib only, nothing from the project): it reads a turn's `timestamp` in any
common form (`parse_timestamp`), dates a conversation (`session_date`), finds the date
expressions in a text and resolves them against the turn's own time (`resolve_relative`,
"yesterday", "last weekend", "in March", "12 March 2023"...), and formats days and ranges
the way memory bundles show them (`format_date`, `format_range`). Nothing here raises on
odd input: what is not understood is None (or left out of the list).
"""

from __future__ import annotations

import calendar
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, timezone

_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august",
           "september", "october", "november", "december")  # fmt: skip
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_MON = "|".join(_MONTHS) + "|jan|feb|mar|apr|jun|jul|aug|sept|sep|oct|nov|dec"
_WD = "|".join(_WEEKDAYS)
_WD_SHORT = _WD + "|mon|tues|tue|wed|thurs|thur|thu|fri|sat|sun"
_NUMBERS = {
    "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
    "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14,
    "fifteen": 15, "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19,
    "twenty": 20, "a": 1, "an": 1, "a couple of": 2, "a couple": 2, "couple of": 2,
    "couple": 2, "a few": 3, "few": 3,
}  # fmt: skip
_NUM = r"\d{1,3}|" + "|".join(
    sorted((k.replace(" ", r"\s+") for k in _NUMBERS), key=len, reverse=True)
)
_ZONES = {"z": 0, "utc": 0, "gmt": 0, "ut": 0, "est": -5, "edt": -4, "cst": -6, "cdt": -5,
          "mst": -7, "mdt": -6, "pst": -8, "pdt": -7}  # fmt: skip


def _month(word: str) -> int:
    return _MONTHS.index(next(m for m in _MONTHS if m.startswith(word.lower()[:3]))) + 1


# --- timestamps -------------------------------------------------------------------------

_TZ = r"(?P<tz>z|utc|gmt|ut|[ecmp][sd]t|[+-]\d{2}(?::?\d{2})?)"
_ISO_RE = re.compile(
    r"(?P<y>\d{4})(?P<s>-?)(?P<mo>\d{2})(?P=s)(?P<d>\d{2})"
    r"(?:[t ](?P<h>\d{2})(?P<c>:?)(?P<mi>\d{2})(?:(?P=c)(?P<sec>\d{2})(?:[.,](?P<f>\d+))?)?"
    rf"\s*{_TZ}?)?"
)
_TZ_END_RE = re.compile(rf"(?:(?<=:\d\d)|\s+){_TZ}$")
_TIME_RE = re.compile(  # 13:56[:00[.123]] or 1[:56] pm
    r"(?<![\d.:/])(?P<h>\d{1,2})(?=:\d\d|\s*[ap]\.?\s?m\b)"
    r"(?::(?P<mi>\d{2})(?::(?P<sec>\d{2})(?:[.,](?P<f>\d+))?)?)?(?![\d:])"
    r"(?:\s*(?P<ap>[ap])\.?\s?m\b\.?)?"
)
_FILLER_RE = re.compile(rf"\b(?:on|at|the|of|{_WD_SHORT})\b\.?|,")
# fmt: off
_DATE_FORMS = (
    (re.compile(rf"(?P<d>\d{{1,2}})(?:st|nd|rd|th)?[ /-](?P<m>{_MON})\.?[ /-](?P<y>\d{{4}})"),
     "dmy"),
    (re.compile(rf"(?P<m>{_MON})\.? (?P<d>\d{{1,2}})(?:st|nd|rd|th)? (?P<y>\d{{4}})"), "mdy"),
    (re.compile(r"(?P<y>\d{4})([/.-])(?P<m>\d{1,2})\2(?P<d>\d{1,2})"), "ymd"),
    (re.compile(r"(?P<d>\d{1,2})\.(?P<m>\d{1,2})\.(?P<y>\d{4})"), "dmy"),
    (re.compile(r"(?P<a>\d{1,2})/(?P<b>\d{1,2})/(?P<y>\d{4})"), "slash"),
)
# fmt: on


def _tzinfo(tz: str | None) -> timezone | None:
    if not tz:
        return None
    tz = tz.lower()
    if tz in _ZONES:
        return timezone(timedelta(hours=_ZONES[tz]))
    digits = tz[1:].replace(":", "")
    minutes = int(digits[:2]) * 60 + int(digits[2:4] or 0)
    return timezone(timedelta(minutes=-minutes if tz[0] == "-" else minutes))


def _build(y: int, mo: int, d: int, h: int = 0, mi: int = 0, sec: int = 0,
           frac: str | None = None, tz: str | None = None) -> datetime:  # fmt: skip
    micro = int((frac or "")[:6].ljust(6, "0"))
    return datetime(y, mo, d, h, mi, min(sec, 59), micro, tzinfo=_tzinfo(tz))


def _from_epoch(value: float) -> datetime | None:
    if math.isnan(value) or math.isinf(value):
        return None
    for _ in range(3):  # seconds that large are past year 5000: ms, us or ns instead
        if abs(value) >= 1e11:
            value /= 1000
    try:
        return datetime.fromtimestamp(value, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return None


def _human(s: str) -> datetime | None:
    tz = None
    m = _TZ_END_RE.search(s)
    if m:
        tz, s = m["tz"], s[: m.start()]
    h = mi = sec = 0
    frac = None
    m = _TIME_RE.search(s)
    if m:
        h, mi, sec, frac = int(m["h"]), int(m["mi"] or 0), int(m["sec"] or 0), m["f"]
        if m["ap"]:
            if not 1 <= h <= 12:
                return None
            h = h % 12 + (12 if m["ap"] == "p" else 0)
        s = s[: m.start()] + " " + s[m.end() :]
        if _TIME_RE.search(s):
            return None
    elif tz is not None and tz.startswith(("+", "-")):
        return None  # a bare offset with no time of day: too odd to trust
    s = " ".join(_FILLER_RE.sub(" ", s).split())
    for rx, order in _DATE_FORMS:
        dm = rx.fullmatch(s)
        if dm is None:
            continue
        if order == "slash":  # d/m/y or m/d/y: only when it cannot be read both ways
            a, b = int(dm["a"]), int(dm["b"])
            if a != b and a <= 12 and b <= 12:
                return None
            mo, d = (a, b) if b > 12 else (b, a)
        else:
            mo = int(dm["m"]) if dm["m"].isdigit() else _month(dm["m"])
            d = int(dm["d"])
        return _build(int(dm["y"]), mo, d, h, mi, sec, frac, tz)
    return None


def parse_timestamp(value: str | int | float) -> datetime | None:
    """A turn's timestamp as a datetime, None when it is not understood.

    Accepts ISO 8601 (date only or with time, `T` or space, fractional seconds, `Z` or an
    offset, basic form `20230508T135600Z`), RFC 2822 (`Tue, 14 Mar 2023 18:05:00 +0000`),
    epoch seconds / milliseconds (int, float or digit string; milliseconds are told from
    seconds by magnitude) and human forms (`1:56 pm on 8 May, 2023`, `May 8, 2023`,
    `2023/05/08`, `08.05.2023` day-first; `d/m/yyyy` only when unambiguous).

    The result is naive when the input names no zone and aware (a fixed offset) when it
    does; epoch values are instants, so they come back aware in UTC.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, datetime):
        return value
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day)
    if not isinstance(value, str | int | float):
        return None
    try:
        if not isinstance(value, str):
            return _from_epoch(float(value))
        s = value.strip().lower()
        if not s or len(s) > 100:
            return None
        m = _ISO_RE.fullmatch(s)
        if m:
            return _build(int(m["y"]), int(m["mo"]), int(m["d"]), int(m["h"] or 0),
                          int(m["mi"] or 0), int(m["sec"] or 0), m["f"], m["tz"])  # fmt: skip
        if re.fullmatch(r"\d{9,}(?:\.\d+)?", s):
            return _from_epoch(float(s))
        return _human(s)
    except (ValueError, OverflowError):
        return None


def session_date(timestamps: Iterable[str | int | float | None]) -> datetime | None:
    """The earliest parseable timestamp (when the conversation happened), None if none is.

    Aware and naive values are compared with naive ones taken as UTC; the earliest is
    returned as parsed.
    """
    best: tuple[datetime, datetime] | None = None
    for raw in timestamps:
        if raw is None:
            continue
        dt = parse_timestamp(raw)
        if dt is None:
            continue
        key = dt.astimezone(UTC).replace(tzinfo=None) if dt.tzinfo else dt
        if best is None or key < best[0]:
            best = (key, dt)
    return best[1] if best else None


# --- formatting -------------------------------------------------------------------------


def format_date(d: date) -> str:
    """`14 March 2023`."""
    return f"{d.day} {_MONTHS[d.month - 1].capitalize()} {d.year}"


def format_range(start: date, end: date) -> str:
    """`14 March 2023`, `6–12 March 2023`, `March 2023`, `2023`, `28 February – 5 March 2023`."""
    if isinstance(start, datetime):
        start = start.date()
    if isinstance(end, datetime):
        end = end.date()
    if end < start:
        start, end = end, start
    if start == end:
        return format_date(start)
    if (start.month, start.day, end.month, end.day) == (1, 1, 12, 31) and start.year == end.year:
        return str(start.year)
    month = _MONTHS[start.month - 1].capitalize()
    if (start.year, start.month) == (end.year, end.month):
        if start.day == 1 and end == _month_end(start):
            return f"{month} {start.year}"
        return f"{start.day}–{end.day} {month} {start.year}"
    if start.year == end.year:
        return f"{start.day} {month} – {format_date(end)}"
    return f"{format_date(start)} – {format_date(end)}"


# --- dates in text ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DateMention:
    """A date expression found in a text: where it is and the day (or days) it means."""

    span: tuple[int, int]
    text: str
    start: date
    end: date  # == start for a single day
    relative: bool  # resolved against the reference time (no explicit year in the text)

    @property
    def label(self) -> str:
        return format_range(self.start, self.end)


def _month_end(d: date) -> date:
    return date(d.year, d.month, calendar.monthrange(d.year, d.month)[1])


def _add_months(d: date, n: int) -> date:
    y, m = divmod(d.month - 1 + n, 12)
    year, month = d.year + y, m + 1
    return date(year, month, min(d.day, calendar.monthrange(year, month)[1]))


_FUTURE_RE = re.compile(
    r"\b(?-i:will)\b"  # lower case: "Will proposed on Wednesday" names someone
    r"|\b(?:shall|going\s+to|gonna|plan(?:ning|s)?\s+to|intend\s+to|next|upcoming)\b"
    r"|['’]ll\b",
    re.I,
)


_PAST_RE = re.compile(
    r"\b(?:was|were|did|had|went|came|got|saw|told|said|made|took|gave|rang|ran|met|left|"
    r"won|lost|found|bought|sent|began|felt|flew|drove|spent|heard|thought|brought|sat|"
    r"slept|ate|wrote|read\s+it|kept|paid|sold|broke|fell|hit)\b"
    r"|\b(?!(?:need|indeed|speed|proceed|exceed|succeed|feed|seed|bleed|breed|excited|"
    r"interested|tired|scared|worried|bored|supposed|used)\b)[a-z]{2,}ed\b",
    re.I,
)


# A verb in the present tense: with a weekday and no past cue, a plan ("we fly out on
# Sunday", "the party is on Saturday"), as English says what is scheduled
_PRESENT_RE = re.compile(
    r"\b(?:am|is|are|have|has|fly|flies|leave|leaves|start|starts|go|goes|arrive|arrives|"
    r"begin|begins|head|heads|travel|travels|move|moves|meet|meets|drive|drives|visit|"
    r"visits|open|opens|close|closes|finish|finishes|land|lands|get\s+back|gets\s+back)\b"
    r"|['’](?:m|re)\b",
    re.I,
)


def _sentence(text: str, start: int, end: int) -> str:
    lo = max(text.rfind(c, 0, start) for c in ".!?\n") + 1
    his = [i for i in (text.find(c, end) for c in ".!?\n") if i >= 0]
    return text[lo : min(his, default=len(text))]


def _future(text: str, start: int, end: int) -> bool:
    """Whether the sentence around text[start:end] speaks of the future (simple cues)."""
    return bool(_FUTURE_RE.search(_sentence(text, start, end)))


# words that look like a past tense and say nothing of when: "Got it, Wednesday at 10",
# "Sorry, I meant Wednesday", "Did you mean Friday?"; "I've got a meeting" is "I have"
_NO_TENSE_RE = re.compile(
    r"\b(?:got\s+(?:it|that|you)|gotcha|noted|(?:did\s+)?(?:I|you|we|he|she|they)\s+"
    r"(?:meant|mean)|(?:I|you|we|they)(?:['’]ve|\s+have)\s+got|(?:he|she|it)(?:['’]s|\s+has)"
    r"\s+got)\b",
    re.I,
)
# where a clause ends inside a sentence: "We went to the beach and on Sunday we fly home"
_CLAUSE_RE = re.compile(r"[,;:–—(]|\s-\s|\b(?:and|but|so|because|then|while|whereas)\b", re.I)


def _clause(text: str, start: int, end: int) -> str:
    """The clause of the sentence around text[start:end]: from the last comma, dash or
    conjunction before it to the next one after it."""
    lo = max(text.rfind(c, 0, start) for c in ".!?\n") + 1
    his = [i for i in (text.find(c, end) for c in ".!?\n") if i >= 0]
    hi = min(his, default=len(text))
    cuts = [(m.start(), m.end()) for m in _CLAUSE_RE.finditer(text, lo, hi)]
    before = [b for a, b in cuts if b <= start]
    after = [a for a, b in cuts if a >= end]
    return text[max(before, default=lo) : min(after, default=hi)]


def _tense(words: str) -> str | None:
    """ "future", "past" or "present" by the first cues found (a future cue first, as
    "tomorrow I'll tell you what happened" is ahead), None when there is none."""
    words = _NO_TENSE_RE.sub(" ", words)
    if _FUTURE_RE.search(words):
        return "future"
    if _PAST_RE.search(words):
        return "past"
    if _PRESENT_RE.search(words):
        return "present"
    return None


def _told_past(text: str, start: int, end: int) -> bool:
    """Whether the day named at text[start:end] is one gone by, by the tense that governs
    it: its own clause's when it has one ("On Saturday I went", "we went to the beach and
    on Sunday we fly home"), else its sentence's ("On Friday, I went to the cinema");
    with no tense at all ("See you on Friday", "I meant Wednesday, not Tuesday", "Got it,
    Thursday the 12th"), a day to come."""
    for words in (_clause(text, start, end), _sentence(text, start, end)):
        tense = _tense(words)
        if tense is not None:
            return tense == "past"
    return False


def _planned(text: str, start: int, end: int) -> bool:
    """Whether the sentence around text[start:end] says what is ahead: a future cue, or a
    present-tense verb and no past cue."""
    sentence = _NO_TENSE_RE.sub(" ", _sentence(text, start, end))
    if _FUTURE_RE.search(sentence):
        return True
    return bool(_PRESENT_RE.search(sentence)) and not _PAST_RE.search(sentence)


# what may yet happen: "he could start in May", "we hope to go in June"
_MAY_HAPPEN_RE = re.compile(
    r"\b(?:could|can|would|might|should|hope\s+to|hoping\s+to|want\s+to|wants\s+to)\b", re.I
)


def _ahead(text: str, start: int, end: int) -> bool:
    """Whether a month named in the sentence around text[start:end] is one to come: a
    future cue, or what may yet happen ("Dev said he could start in May")."""
    sentence = _sentence(text, start, end)
    return bool(_FUTURE_RE.search(sentence) or _MAY_HAPPEN_RE.search(sentence))


def _months_away(ref: date, year: int, month: int) -> int:
    return abs((year - ref.year) * 12 + month - ref.month)


def _past(text: str, start: int, end: int) -> bool:
    """Whether the sentence around text[start:end] is in the past tense (simple cues: a
    common irregular past, or a word in -ed)."""
    return bool(_PAST_RE.search(_NO_TENSE_RE.sub(" ", _sentence(text, start, end))))


def _n(word: str) -> int:
    word = " ".join(word.lower().split())
    return int(word) if word.isdigit() else _NUMBERS[word]


_Got = tuple[date, date, bool] | None  # start, end, relative; None: not a date after all


def _r_words(m: re.Match[str], ref: date, text: str) -> _Got:
    w = " ".join(m[0].lower().split()).removeprefix("the ")
    offset = {"day before yesterday": -2, "day after tomorrow": 2, "yesterday": -1,
              "last night": -1, "tomorrow": 1}.get(w, 0)  # fmt: skip
    day = ref + timedelta(days=offset)
    return day, day, True


def _shift(ref: date, n: int, unit: str) -> date:
    """`ref` moved by n days, weeks, fortnights, months or years (n < 0: back)."""
    if unit in ("day", "week", "fortnight"):
        return ref + timedelta(days=n * {"day": 1, "week": 7, "fortnight": 14}[unit])
    return _add_months(ref, n * (12 if unit == "year" else 1))


def _r_count(m: re.Match[str], ref: date, text: str) -> _Got:
    future = "dir" not in m.re.groupindex or m["dir"].lower().startswith("from")
    day = _shift(ref, _n(m["n"]) * (1 if future else -1), m["unit"].lower())
    return day, day, True


def _coming(ref: date, weekday: str) -> date:
    """The next `weekday` after `ref` (a week on when `ref` is one)."""
    target = _WEEKDAYS.index(weekday.lower())
    return ref + timedelta(days=(target - ref.weekday()) % 7 or 7)


# what says a span of time has run up to now: "it's been a week today", "since"
_SINCE_RE = re.compile(r"\b(?:been|since|ago)\b", re.I)


def _r_anchored(m: re.Match[str], ref: date, text: str) -> _Got:
    """A day named, then moved by a count of weeks the way it points: "a week tomorrow",
    "a week on Friday", "a fortnight on Saturday", "a week from Friday" forward from
    tomorrow or the coming weekday; "a week yesterday", "a week last Tuesday" back from
    yesterday or the weekday gone; "two weeks today" back when said of the past."""
    n = _n(m["n"])
    unit = m["unit"].lower()
    anchor = m["anchor"].lower()
    how = (m["how"] or "").lower()
    if anchor in _WEEKDAYS and not how:
        return None  # "a week Monday to Friday": a span, not a day
    if anchor == "today":
        sentence = _sentence(text, m.start(), m.end())
        back = _past(text, m.start(), m.end()) or bool(_SINCE_RE.search(sentence))
        day, n = ref, -n if back else n
    elif anchor == "tomorrow":
        day = ref + timedelta(days=1)
    elif anchor == "yesterday":
        day, n = ref - timedelta(days=1), -n
    elif how == "last":  # "a week last Tuesday": the Tuesday a week before last Tuesday
        target = _WEEKDAYS.index(anchor)
        day, n = ref - timedelta(days=(ref.weekday() - target) % 7 or 7), -n
    else:  # "a week on / next / from Tuesday", "a week Tuesday": after the coming one
        day = _coming(ref, anchor)
    day = _shift(day, n, unit)
    return day, day, True


def _r_week_after(m: re.Match[str], ref: date, text: str) -> _Got:
    """A week after the coming weekday, never one gone: "Tuesday week", "on Tuesday
    week", "the Tuesday after next"."""
    day = _coming(ref, m["wd"]) + timedelta(weeks=1)
    return day, day, True


def _r_after_next(m: re.Match[str], ref: date, text: str) -> _Got:
    """Two on from this one: "the week / weekend / month / year after next"."""
    unit = m["unit"].lower()
    if unit == "year":
        return date(ref.year + 2, 1, 1), date(ref.year + 2, 12, 31), True
    if unit == "month":
        first = _add_months(ref.replace(day=1), 2)
        return first, _month_end(first), True
    monday = ref - timedelta(days=ref.weekday()) + timedelta(weeks=2)
    if unit == "week":
        return monday, monday + timedelta(days=6), True
    return monday + timedelta(days=5), monday + timedelta(days=6), True


def _r_period(m: re.Match[str], ref: date, text: str) -> _Got:
    step = {"last": -1, "this past": -1, "next": 1}.get(" ".join(m["dir"].lower().split()), 0)
    unit = m["unit"].lower()
    if unit == "year":
        return date(ref.year + step, 1, 1), date(ref.year + step, 12, 31), True
    if unit == "month":
        first = _add_months(ref.replace(day=1), step)
        return first, _month_end(first), True
    monday = ref - timedelta(days=ref.weekday()) + timedelta(weeks=step)
    if unit == "week":
        return monday, monday + timedelta(days=6), True
    return monday + timedelta(days=5), monday + timedelta(days=6), True


# what names the day it is said on: "It's Friday", "today is Friday", "Happy Friday"
_TODAY_IS_RE = re.compile(
    r"\b(?:it['’]s|it\s+is|today\s+is|today['’]s|happy|finally)\s+(?:(?:a|another)\s+)?\Z",
    re.I,
)


def _r_weekday(m: re.Match[str], ref: date, text: str) -> _Got:
    """A weekday said alone or with "on", "last", "next", "this", "coming". Alone or with
    "on" it is the one gone by when a past tense governs it ("Idris proposed on
    Saturday"), else the coming one ("See you on Friday", "I meant Wednesday"); "next
    Thursday" is the Thursday of next week (said on a Wednesday: eight days on, not
    tomorrow), "this coming Thursday" the coming one."""
    target = _WEEKDAYS.index(m["wd"].lower())
    how = " ".join((m["dir"] or "").lower().split())
    if how == "" and target == ref.weekday() and _TODAY_IS_RE.search(text, 0, m.start()):
        return ref, ref, True  # "Happy Friday!", "It's Friday", said on a Friday
    if how in ("", "on"):
        how = "last" if _told_past(text, m.start(), m.end()) else "coming"
    if how in ("last", "this past"):
        delta = -((ref.weekday() - target) % 7 or 7)
    elif how == "next":  # the one in next week's Monday-Sunday
        delta = 7 - ref.weekday() + target
    elif how in ("this coming", "coming"):
        delta = (target - ref.weekday()) % 7 or 7
    elif target < ref.weekday() and not _past(text, m.start(), m.end()):
        # "this Tuesday" said on a Thursday, not in the past tense ("we fly out this
        # Tuesday"): the coming one; "I saw her this Tuesday": this week's
        delta = target - ref.weekday() + 7
    else:  # "this": the one in the current Monday-Sunday week
        delta = target - ref.weekday()
    day = ref + timedelta(days=delta)
    return day, day, True


def _r_weekday_of_week(m: re.Match[str], ref: date, text: str) -> _Got:
    """A weekday of a week named with it: "Thursday next week", "on Friday of this week",
    "next week on Tuesday", "Monday last week"."""
    step = {"last": -1, "this": 0, "next": 1}[m["dir"].lower()]
    monday = ref - timedelta(days=ref.weekday()) + timedelta(weeks=step)
    day = monday + timedelta(days=_WEEKDAYS.index(m["wd"].lower()))
    return day, day, True


def _month_day(ref: date, d: int, back: bool, weekday: int | None = None) -> date | None:
    """The first day numbered `d` on or after `ref` (on or before it when `back`), of the
    weekday `weekday` when given, within a year and a half; None when there is none."""
    for k in range(19):
        y, mo = divmod(ref.month - 1 + (-k if back else k), 12)
        year, month = ref.year + y, mo + 1
        if d > calendar.monthrange(year, month)[1]:
            continue
        day = date(year, month, d)
        if (day < ref if not back else day > ref) or (
            weekday is not None and day.weekday() != weekday
        ):
            continue
        return day
    return None


def _r_ordinal(m: re.Match[str], ref: date, text: str) -> _Got:
    """A day of the month said by its number alone: "on the 22nd", "The 12th.", "the 3rd
    of next month": the next such day on or after the turn's day, the last one on or
    before it when a past tense governs it ("I paid it on the 3rd"); with a weekday,
    "Thursday the 12th", the next 12th that is a Thursday."""
    d = int(m["d"])
    if not 1 <= d <= 31:
        return None
    which = (m.groupdict().get("which") or "").lower()
    if which:  # "the 3rd of next month"
        first = _add_months(ref.replace(day=1), 1 if which == "next" else 0)
        if d > calendar.monthrange(first.year, first.month)[1]:
            return None
        day = first.replace(day=d)
        return day, day, True
    back = _told_past(text, m.start(), m.end())
    wd = m.groupdict().get("wd")
    found = None
    if wd:
        found = _month_day(ref, d, back, _WEEKDAYS.index(wd.lower()))
    if found is None:
        found = _month_day(ref, d, back)
    if found is None:
        return None
    return found, found, True


def _r_month(m: re.Match[str], ref: date, text: str) -> _Got:
    pre = (m["pre"] or ("in" if m["part"] else "")).lower()  # "early March": in March
    if m["m"] == "may" and not m["y"] and pre not in ("in", "during"):
        return None  # "this may be..."
    month = _month(m["m"])
    if m["y"]:
        year = int(m["y"])
    elif not pre:
        return None
    elif pre == "this":
        year = ref.year
    elif pre == "next" or (pre != "last" and _ahead(text, m.start(), m.end())):
        year = ref.year + (month <= ref.month if pre == "next" else month < ref.month)
    elif pre == "last" or _past(text, m.start(), m.end()):
        year = ref.year - (month >= ref.month if pre == "last" else month > ref.month)
    else:  # no tense to go by ("The one in May?"): the nearer May
        year = min(
            (ref.year - 1, ref.year, ref.year + 1), key=lambda y: _months_away(ref, y, month)
        )
    first = date(year, month, 1)
    return first, _month_end(first), not m["y"]


def _r_year(m: re.Match[str], ref: date, text: str) -> _Got:
    year = int(m["y"])
    return date(year, 1, 1), date(year, 12, 31), False


def _r_explicit(m: re.Match[str], ref: date, text: str) -> _Got:
    groups = m.groupdict()
    mo = groups.get("m") or groups.get("mn")
    assert mo is not None  # every explicit-date rule has a month group, "m" or "mn"
    if mo == "may" and not m["y"]:
        return None  # "these 2 may be..."
    mo_n = int(mo) if mo.isdigit() else _month(mo)
    day = date(int(m["y"]) if m["y"] else ref.year, mo_n, int(m["d"]))
    return day, day, not m["y"]


_ON = r"(?:\bon\s+)?"
_WDP = rf"(?:\b(?:{_WD}),?\s+)?"
_Y = r"(?:\.?,?\s+(?P<y>\d{4})\b)?"  # a dot only after "Mar."
# fmt: off
_TEXT_RULES = [
    (re.compile(r"\b(?:(?:the\s+)?day\s+(?:before\s+yesterday|after\s+tomorrow)|yesterday|"
                r"today|tonight|tomorrow|this\s+(?:morning|afternoon|evening)|last\s+night)\b",
                re.I), _r_words),
    (re.compile(rf"\bin\s+(?P<n>{_NUM})\s+(?P<unit>day|week|fortnight|month|year)s?"
                r"(?:['’]s?\s+time\b|\s+time\b|\b)", re.I), _r_count),
    (re.compile(rf"\b(?P<n>{_NUM})\s+(?P<unit>day|week|fortnight|month|year)s?\s+"
                r"(?P<dir>ago|from\s+now)\b", re.I), _r_count),
    # not "twice a week on Friday", "three times a week today"
    (re.compile(rf"(?<!\bonce\s)(?<!\btwice\s)(?<!\btimes\s)(?<!\bper\s)"
                rf"\b(?P<n>{_NUM})\s+(?P<unit>week|fortnight)s?\s+(?:(?P<how>on|next|last|"
                rf"from)\s+)?(?P<anchor>today|tomorrow|yesterday|{_WD})\b(?!['’]s\b)", re.I),
     _r_anchored),
    (re.compile(rf"(?<!\bevery\s)(?<!\beach\s)\b(?:on\s+)?(?P<wd>{_WD})\s+week\b"
                r"(?![-\s]*\d)", re.I), _r_week_after),
    (re.compile(rf"\bthe\s+(?P<wd>{_WD})\s+after\s+next\b", re.I), _r_week_after),
    (re.compile(r"\bthe\s+(?P<unit>weekend|week|month|year)\s+after\s+next\b", re.I),
     _r_after_next),
    (re.compile(r"\b(?P<dir>last|this\s+past|this|next)\s+(?P<unit>weekend|week|month|year)\b",
                re.I), _r_period),
    (re.compile(rf"\b(?:(?P<dir>last|next|this\s+past|this\s+coming|this|coming|on)\s+)?"
                rf"(?P<wd>{_WD})\b", re.I), _r_weekday),
    (re.compile(rf"\b(?:on\s+)?(?P<wd>{_WD})\s+(?:of\s+|in\s+)?(?P<dir>last|this|next)\s+week\b"
                r"(?!\s*end)", re.I), _r_weekday_of_week),
    (re.compile(rf"\b(?P<dir>last|this|next)\s+week\s+on\s+(?P<wd>{_WD})\b", re.I),
     _r_weekday_of_week),
    # "on the 22nd", "The 12th.", "by the 3rd at noon"; not "the 3rd floor", "the 18th
    # century", "for the 2nd time": only an end, a comma or a word a day is followed by
    (re.compile(r"(?:\b(?:on|by|until|till|from|before|after|since)\s+)?\bthe\s+"
                r"(?P<d>\d{1,2})(?:st|nd|rd|th)\b"
                r"(?:\s+of\s+(?P<which>this|next)\s+month\b)?"
                rf"(?!\s+(?:of\s+)?(?:{_MON})\b)"
                r"(?=\s*(?:[.,;:!?)…]|$|[-–—]\s)|\s+(?:at|and|or|but|then|instead|works|would|"
                r"will|is|was|suits|so|when|too|please|if|because|with|around|from|to(?!\s+last)|"
                r"until|till|through|in\s+the\s+(?:morning|afternoon|evening)|morning|"
                r"afternoon|evening|night)\b)", re.I), _r_ordinal),
    # "Thursday the 12th", "on Friday 29th"
    (re.compile(rf"\b(?:on\s+)?(?P<wd>{_WD}),?\s+(?:the\s+)?(?P<d>\d{{1,2}})(?:st|nd|rd|th)\b"
                rf"(?!\s+(?:of\s+)?(?:{_MON})\b)", re.I), _r_ordinal),
    (re.compile(rf"\b(?:(?P<pre>in|during|last|this|next)\s+)?(?P<part>(?:early|mid|late)[-\s]"
                rf"*)?\b(?P<m>{_MON})\b{_Y}"
                r"(?!\s*\d)", re.I), _r_month),
    (re.compile(r"\b(?:in|during)\s+(?P<y>(?:19|20)\d\d)\b(?![-/.:]\d)", re.I), _r_year),
    (re.compile(rf"{_ON}{_WDP}(?:the\s+)?(?<![\d.:/,])(?P<d>\d{{1,2}})(?:st|nd|rd|th)?\s+"
                rf"(?:of\s+)?(?P<m>{_MON})\b{_Y}", re.I), _r_explicit),
    (re.compile(rf"{_ON}{_WDP}\b(?P<m>{_MON})\.?\s+(?:the\s+)?(?P<d>\d{{1,2}})(?:st|nd|rd|th)?"
                rf"\b{_Y}", re.I), _r_explicit),
    (re.compile(rf"{_ON}{_WDP}(?<![\d/.-])(?P<y>\d{{4}})([-/])(?P<mn>\d{{1,2}})\2"
                r"(?P<d>\d{1,2})(?!\d)", re.I), _r_explicit),
    (re.compile(rf"{_ON}{_WDP}(?<![\d.])(?P<d>\d{{1,2}})\.(?P<mn>\d{{1,2}})\.(?P<y>\d{{4}})"
                r"(?![\d.])", re.I), _r_explicit),
]
# fmt: on


def resolve_relative(text: str, ref: date | datetime) -> list[DateMention]:
    """Every date expression in `text`, resolved against `ref` (the turn's own time).

    Relative days ("yesterday", "the day before yesterday", "three days ago", "a
    fortnight ago", "in a fortnight", "last Tuesday", "on Friday" — the coming one unless
    a past tense governs it, "next Friday" — next week's, "Thursday next week", "on the
    22nd", "Thursday the 12th" — the next such day, the last one when said in the past
    tense), days counted from another ("a week tomorrow", "a week on
    Friday", "a fortnight on Saturday", "a week last Tuesday", "a week yesterday", "a
    week today" — back when said in the past), a week after the coming weekday ("on
    Tuesday week", "the Friday after next": never a day gone), periods ("last week",
    "this weekend", "the week after next", "last month", "in March", "next year") as
    start..end ranges, and explicit dates ("on 12 March", "March 12th, 2023",
    "2023-03-12", "12.03.2023"; `12/03/2023` is ambiguous and skipped). Overlaps keep
    the longest expression ("a week tomorrow" is one date, not "tomorrow"); the result
    is in text order.
    """
    if not isinstance(text, str) or not text:
        return []
    ref_day = ref.date() if isinstance(ref, datetime) else ref
    found: list[tuple[int, int, date, date, bool]] = []
    for rx, rule in _TEXT_RULES:
        for m in rx.finditer(text):
            try:
                got = rule(m, ref_day, text)
            except (ValueError, OverflowError, KeyError):
                continue
            if got is not None:
                found.append((m.start(), m.end(), *got))
    found.sort(key=lambda f: (f[0] - f[1], f[0]))
    taken: list[tuple[int, int, date, date, bool]] = []
    for f in found:
        if all(f[1] <= t[0] or f[0] >= t[1] for t in taken):
            taken.append(f)
    taken.sort()
    return [DateMention((s, e), text[s:e], a, b, rel) for s, e, a, b, rel in taken]
