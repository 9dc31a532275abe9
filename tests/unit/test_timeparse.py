"""Time parsing: turn timestamps, dates mentioned in text, and their display form."""

from __future__ import annotations

import dataclasses
from datetime import UTC, date, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contextfs.conversations.timeparse import (
    DateMention,
    format_date,
    format_range,
    parse_timestamp,
    resolve_relative,
    session_date,
)

REF = date(2023, 8, 15)  # a Tuesday
D = date


# --- parse_timestamp --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        # ISO 8601
        ("2023-05-08", datetime(2023, 5, 8)),
        ("2023-05-08T13:56", datetime(2023, 5, 8, 13, 56)),
        ("2023-05-08T13:56:07", datetime(2023, 5, 8, 13, 56, 7)),
        ("2023-05-08 13:56:07", datetime(2023, 5, 8, 13, 56, 7)),
        ("2023-05-08T13:56:07.25", datetime(2023, 5, 8, 13, 56, 7, 250000)),
        ("2023-05-08T13:56:07.123456789", datetime(2023, 5, 8, 13, 56, 7, 123456)),
        ("2023-05-08T13:56:07Z", datetime(2023, 5, 8, 13, 56, 7, tzinfo=UTC)),
        ("2023-05-08t13:56:07z", datetime(2023, 5, 8, 13, 56, 7, tzinfo=UTC)),
        ("2023-05-08T13:56:07.5+05:30",
         datetime(2023, 5, 8, 13, 56, 7, 500000, tzinfo=timezone(timedelta(hours=5, minutes=30)))),
        ("2023-05-08 13:56:07 -0400",
         datetime(2023, 5, 8, 13, 56, 7, tzinfo=timezone(timedelta(hours=-4)))),
        ("2023-05-08 13:56 UTC", datetime(2023, 5, 8, 13, 56, tzinfo=UTC)),
        ("20230508T135607Z", datetime(2023, 5, 8, 13, 56, 7, tzinfo=UTC)),
        ("20230508", datetime(2023, 5, 8)),
        ("  2023-05-08  ", datetime(2023, 5, 8)),
        # RFC 2822
        ("Tue, 14 Mar 2023 18:05:00 +0000", datetime(2023, 3, 14, 18, 5, tzinfo=UTC)),
        ("Tue, 14 Mar 2023 18:05:00 GMT", datetime(2023, 3, 14, 18, 5, tzinfo=UTC)),
        ("14 Mar 2023 18:05:00 -0700",
         datetime(2023, 3, 14, 18, 5, tzinfo=timezone(timedelta(hours=-7)))),
        ("Tue, 14 Mar 2023 18:05:00 EST",
         datetime(2023, 3, 14, 18, 5, tzinfo=timezone(timedelta(hours=-5)))),
        # human forms
        ("1:56 pm on 8 May, 2023", datetime(2023, 5, 8, 13, 56)),
        ("10:04 am on 17 July, 2023", datetime(2023, 7, 17, 10, 4)),
        ("12:30 am on 1 January, 2024", datetime(2024, 1, 1, 0, 30)),
        ("12:05 PM on 1 January, 2024", datetime(2024, 1, 1, 12, 5)),
        ("8 May 2023", datetime(2023, 5, 8)),
        ("8th of May 2023", datetime(2023, 5, 8)),
        ("May 8, 2023", datetime(2023, 5, 8)),
        ("May 8th 2023", datetime(2023, 5, 8)),
        ("May 8 2023 at 1:56 PM", datetime(2023, 5, 8, 13, 56)),
        ("Monday, May 8, 2023 1:56:30 p.m.", datetime(2023, 5, 8, 13, 56, 30)),
        ("8 May, 2023 13:56", datetime(2023, 5, 8, 13, 56)),
        ("8 May 2023 1pm", datetime(2023, 5, 8, 13)),
        ("Sept 8, 2023", datetime(2023, 9, 8)),
        ("08-May-2023", datetime(2023, 5, 8)),
        ("2023/05/08", datetime(2023, 5, 8)),
        ("2023/5/8 13:56", datetime(2023, 5, 8, 13, 56)),
        ("08.05.2023", datetime(2023, 5, 8)),  # day first
        ("8.5.2023 13:56", datetime(2023, 5, 8, 13, 56)),
        ("13/05/2023", datetime(2023, 5, 13)),  # slashes: only when unambiguous
        ("05/13/2023", datetime(2023, 5, 13)),
        ("05/05/2023", datetime(2023, 5, 5)),
    ],
)  # fmt: skip
def test_parse_timestamp_forms(raw, expected):
    got = parse_timestamp(raw)
    assert got == expected
    assert (got.tzinfo is None) == (expected.tzinfo is None)


def test_naive_input_gives_naive_aware_input_gives_aware():
    assert parse_timestamp("2023-05-08T13:56:00").tzinfo is None
    assert parse_timestamp("1:56 pm on 8 May, 2023").tzinfo is None
    assert parse_timestamp("2023-05-08T13:56:00Z").utcoffset() == timedelta(0)
    assert parse_timestamp("2023-05-08T13:56:00+02:00").utcoffset() == timedelta(hours=2)


@pytest.mark.parametrize(
    "raw",
    [1683554160, 1683554160.0, "1683554160", 1683554160000, "1683554160000", 1683554160000.0],
)
def test_epoch_seconds_and_milliseconds_by_magnitude(raw):
    assert parse_timestamp(raw) == datetime(2023, 5, 8, 13, 56, tzinfo=UTC)


def test_epoch_keeps_fractions_and_is_utc():
    got = parse_timestamp(1683554160.5)
    assert got == datetime(2023, 5, 8, 13, 56, 0, 500000, tzinfo=UTC)
    assert parse_timestamp("1683554160123") == datetime(2023, 5, 8, 13, 56, 0, 123000, tzinfo=UTC)
    assert parse_timestamp(0) == datetime(1970, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    "raw",
    [
        "", "   ", "hello", "yesterday", "42", "2023", "May 2023", "13:56", "1:56 pm",
        "2023-13-01", "2023-02-30", "2023-05-08T25:00", "08/05/2023",  # ambiguous d/m
        "13 pm on 8 May, 2023", "8 May 2023 at 1:56 PM and 2 PM", "30 Febtember 2023",
        "Tue, 14 Mar 2023 18:05:00 +9999", "2023-05-08 -0500", "x" * 1000, "2023-05-08 junk",
        "12.03.2023.1", True, False, None, float("nan"), float("inf"), -float("inf"),
        10**400, 1e300, [], {}, b"2023-05-08",
    ],
)  # fmt: skip
def test_junk_is_none(raw):
    assert parse_timestamp(raw) is None


@given(st.dates())
def test_format_date_round_trips_through_iso(d):
    assert format_date(parse_timestamp(d.isoformat())) == format_date(d)


@given(st.datetimes(min_value=datetime(1000, 1, 1), timezones=st.none() | st.just(UTC)))
def test_iso_datetimes_round_trip(dt):
    assert parse_timestamp(dt.isoformat()) == dt
    assert parse_timestamp(dt.isoformat(sep=" ")) == dt


@given(st.dates(min_value=date(1900, 1, 1), max_value=date(2099, 12, 31)))
def test_human_forms_round_trip(d):
    month = d.strftime("%B")
    for text in (f"{d.day} {month} {d.year}", f"{month} {d.day}, {d.year}",
                 f"{d.day:02}.{d.month:02}.{d.year}", f"{d.year}/{d.month}/{d.day}",
                 f"1:56 pm on {d.day} {month}, {d.year}"):  # fmt: skip
        assert parse_timestamp(text).date() == d, text


@given(st.text(max_size=60) | st.integers() | st.floats())
def test_parse_timestamp_never_raises(raw):
    got = parse_timestamp(raw)
    assert got is None or isinstance(got, datetime)


# --- session_date -----------------------------------------------------------------------


def test_session_date_is_the_earliest_parseable():
    stamps = [None, "junk", "2023-05-09T08:00:00", "1:56 pm on 8 May, 2023", "2023-05-10"]
    assert session_date(stamps) == datetime(2023, 5, 8, 13, 56)


def test_session_date_mixes_aware_and_naive_and_epochs():
    stamps = ["2023-05-08T14:00:00Z", 1683554160, "2023-05-08T13:00:00+00:00"]
    assert session_date(stamps) == datetime(2023, 5, 8, 13, 0, tzinfo=UTC)
    assert session_date(["2023-05-08T10:00:00", 1683554160]) == datetime(2023, 5, 8, 10, 0)
    assert session_date(iter(["2023-05-08"])) == datetime(2023, 5, 8)


def test_session_date_none_when_nothing_parses():
    assert session_date([]) is None
    assert session_date([None, "", "junk", "13:56"]) is None


# --- format_date / format_range ---------------------------------------------------------


def test_format_date():
    assert format_date(D(2023, 3, 14)) == "14 March 2023"
    assert format_date(D(2023, 5, 1)) == "1 May 2023"
    assert format_date(datetime(2023, 12, 31, 23, 59)) == "31 December 2023"


@pytest.mark.parametrize(
    ("start", "end", "expected"),
    [
        (D(2023, 3, 14), D(2023, 3, 14), "14 March 2023"),
        (D(2023, 3, 6), D(2023, 3, 12), "6–12 March 2023"),
        (D(2023, 3, 1), D(2023, 3, 31), "March 2023"),
        (D(2024, 2, 1), D(2024, 2, 29), "February 2024"),
        (D(2023, 2, 1), D(2023, 2, 27), "1–27 February 2023"),
        (D(2023, 1, 1), D(2023, 12, 31), "2023"),
        (D(2023, 2, 28), D(2023, 3, 5), "28 February – 5 March 2023"),
        (D(2022, 12, 28), D(2023, 1, 3), "28 December 2022 – 3 January 2023"),
        (D(2023, 3, 12), D(2023, 3, 6), "6–12 March 2023"),  # reversed: put in order
        (datetime(2023, 3, 6, 9), datetime(2023, 3, 6, 18), "6 March 2023"),
    ],
)
def test_format_range(start, end, expected):
    assert format_range(start, end) == expected


# --- resolve_relative -------------------------------------------------------------------


def _one(text, ref=REF):
    found = resolve_relative(text, ref)
    assert len(found) == 1, found
    return found[0]


@pytest.mark.parametrize(
    ("text", "start", "end"),
    [
        ("yesterday", D(2023, 8, 14), None),
        ("today", D(2023, 8, 15), None),
        ("tonight", D(2023, 8, 15), None),
        ("this morning", D(2023, 8, 15), None),
        ("this evening", D(2023, 8, 15), None),
        ("last night", D(2023, 8, 14), None),
        ("tomorrow", D(2023, 8, 16), None),
        ("the day before yesterday", D(2023, 8, 13), None),
        ("the day after tomorrow", D(2023, 8, 17), None),
        ("two days ago", D(2023, 8, 13), None),
        ("2 days ago", D(2023, 8, 13), None),
        ("twenty days ago", D(2023, 7, 26), None),
        ("a couple of days ago", D(2023, 8, 13), None),
        ("a couple weeks ago", D(2023, 8, 1), None),
        ("a few days ago", D(2023, 8, 12), None),
        ("a week ago", D(2023, 8, 8), None),
        ("three weeks ago", D(2023, 7, 25), None),
        ("six months ago", D(2023, 2, 15), None),
        ("a year ago", D(2022, 8, 15), None),
        ("in two weeks", D(2023, 8, 29), None),
        ("3 days from now", D(2023, 8, 18), None),
        ("last Tuesday", D(2023, 8, 8), None),
        ("last Monday", D(2023, 8, 14), None),
        ("this past Sunday", D(2023, 8, 13), None),
        ("next Tuesday", D(2023, 8, 22), None),
        ("next Friday", D(2023, 8, 25), None),  # next week's, not this week's
        ("this Friday", D(2023, 8, 18), None),
        ("this Monday", D(2023, 8, 21), None),  # passed this week, not said in the past
        ("on Tuesday", D(2023, 8, 22), None),  # no tense: the coming one
        ("on Friday", D(2023, 8, 18), None),
        ("Saturday", D(2023, 8, 19), None),
        ("last week", D(2023, 8, 7), D(2023, 8, 13)),
        ("this week", D(2023, 8, 14), D(2023, 8, 20)),
        ("next week", D(2023, 8, 21), D(2023, 8, 27)),
        ("last weekend", D(2023, 8, 12), D(2023, 8, 13)),
        ("this past weekend", D(2023, 8, 12), D(2023, 8, 13)),
        ("this weekend", D(2023, 8, 19), D(2023, 8, 20)),
        ("next weekend", D(2023, 8, 26), D(2023, 8, 27)),
        ("last month", D(2023, 7, 1), D(2023, 7, 31)),
        ("this month", D(2023, 8, 1), D(2023, 8, 31)),
        ("next month", D(2023, 9, 1), D(2023, 9, 30)),
        ("last year", D(2022, 1, 1), D(2022, 12, 31)),
        ("next year", D(2024, 1, 1), D(2024, 12, 31)),
        ("in March", D(2023, 3, 1), D(2023, 3, 31)),
        ("in August", D(2023, 8, 1), D(2023, 8, 31)),
        ("in October", D(2023, 10, 1), D(2023, 10, 31)),  # no tense: the nearer one
        ("in early March", D(2023, 3, 1), D(2023, 3, 31)),
        ("last March", D(2023, 3, 1), D(2023, 3, 31)),
        ("last August", D(2022, 8, 1), D(2022, 8, 31)),
        ("next March", D(2024, 3, 1), D(2024, 3, 31)),
        ("in may", D(2023, 5, 1), D(2023, 5, 31)),
    ],
)
def test_relative_expressions(text, start, end):
    m = _one(text)
    assert (m.start, m.end) == (start, end or start)
    assert m.text == text
    assert m.span == (0, len(text))
    assert m.relative is True


@pytest.mark.parametrize(
    ("text", "start", "relative"),
    [
        ("on 12 March", D(2023, 3, 12), True),
        ("12 March", D(2023, 3, 12), True),
        ("the 12th of March", D(2023, 3, 12), True),
        ("March 12th", D(2023, 3, 12), True),
        ("Dec 12", D(2023, 12, 12), True),
        ("March 12, 2022", D(2022, 3, 12), False),
        ("12 March 2022", D(2022, 3, 12), False),
        ("on 8 May, 2023", D(2023, 5, 8), False),
        ("on Tuesday, 14 March 2023", D(2023, 3, 14), False),
        ("2023-03-12", D(2023, 3, 12), False),
        ("on 2023/03/12", D(2023, 3, 12), False),
        ("12.03.2023", D(2023, 3, 12), False),
    ],
)
def test_explicit_dates(text, start, relative):
    m = _one(text)
    assert (m.start, m.end, m.relative, m.text) == (start, start, relative, text)


@pytest.mark.parametrize(
    ("text", "start", "end"),
    [
        ("in May 2022", D(2022, 5, 1), D(2022, 5, 31)),
        ("March 2021", D(2021, 3, 1), D(2021, 3, 31)),
        ("in 2021", D(2021, 1, 1), D(2021, 12, 31)),
    ],
)
def test_explicit_periods(text, start, end):
    m = _one(text)
    assert (m.start, m.end, m.relative) == (start, end, False)


def test_spans_point_into_the_text_in_order():
    text = "I met Ana last Tuesday, and we spoke again yesterday about the trip in March."
    found = resolve_relative(text, REF)
    assert [m.text for m in found] == ["last Tuesday", "yesterday", "in March"]
    assert [m.start for m in found] == [D(2023, 8, 8), D(2023, 8, 14), D(2023, 3, 1)]
    for m in found:
        assert text[m.span[0] : m.span[1]] == m.text


def test_embedded_timestamp_text():
    m = _one("we talked at 1:56 pm on 8 May, 2023")
    assert (m.text, m.start) == ("on 8 May, 2023", D(2023, 5, 8))


def test_longest_expression_wins_overlaps():
    assert _one("the day before yesterday").start == D(2023, 8, 13)  # not "yesterday"
    assert _one("last weekend").end == D(2023, 8, 13)  # not "last week"
    assert _one("Tuesday, 14 March 2023").start == D(2023, 3, 14)  # not a bare Tuesday


def test_this_weekday_already_passed_is_the_coming_one_unless_said_in_the_past():
    # REF is a Tuesday: its Monday has passed
    assert _one("We fly out this Monday, me and Dev").start == D(2023, 8, 21)
    assert _one("I saw her this Monday").start == D(2023, 8, 14)
    assert _one("We walked there this Monday").start == D(2023, 8, 14)
    assert _one("My exam is this Friday").start == D(2023, 8, 18)  # still ahead: this week's


def test_a_weekday_in_the_present_tense_is_a_plan_and_in_the_past_tense_gone():
    # REF is Tuesday 15 August 2023
    assert _one("We fly out on Sunday, me and Euan, for a long weekend").start == D(2023, 8, 20)
    assert _one("The party is on Saturday").start == D(2023, 8, 19)
    assert _one("I'm seeing the vet on Friday").start == D(2023, 8, 18)
    assert _one("I had an interview on Wednesday").start == D(2023, 8, 9)
    assert _one("They rang him on Monday and offered him the job").start == D(2023, 8, 14)
    assert _one("Will proposed on Wednesday, on the beach!").start == D(2023, 8, 9)  # a name
    assert _one("Sunday was the best day").start == D(2023, 8, 13)


def test_future_tense_moves_weekdays_and_months_forward():
    assert _one("I will see her on Friday").start == D(2023, 8, 18)
    assert _one("I'll call on Tuesday").start == D(2023, 8, 22)
    assert _one("we're going to Paris in March").start == D(2024, 3, 1)
    assert _one("Dev said he could start in March").start == D(2024, 3, 1)
    assert _one("We went to Paris in October").start == D(2022, 10, 1)
    assert _one("The one in May?", D(2024, 2, 3)).start == D(2024, 5, 1)
    assert _one("The one in December?", D(2024, 2, 3)).start == D(2023, 12, 1)
    assert _one("We met on Friday. I will call her soon.").start == D(2023, 8, 11)


def test_ref_may_be_a_datetime():
    ref = datetime(2023, 8, 15, 23, 30, tzinfo=UTC)
    assert _one("yesterday", ref).start == D(2023, 8, 14)


def test_month_arithmetic_clamps_to_month_end():
    assert _one("a month ago", D(2023, 3, 31)).start == D(2023, 2, 28)
    assert _one("a year ago", D(2024, 2, 29)).start == D(2023, 2, 28)
    assert _one("last month", D(2023, 1, 10)).start == D(2022, 12, 1)


def test_weekend_on_the_weekend():
    sunday = D(2023, 8, 13)
    assert (_one("this weekend", sunday).start, _one("this weekend", sunday).end) == (
        D(2023, 8, 12), D(2023, 8, 13))  # fmt: skip
    assert _one("last weekend", sunday).start == D(2023, 8, 5)


@pytest.mark.parametrize(
    "text",
    [
        "", "nothing to see here", "12/03/2023", "3/4", "this may be fine", "these 2 may be",
        "over Christmas", "on Tuesdays I swim", "May I ask?", "version 1.2.3", "at 13:56",
        "I march on", "weekly meeting", "lasting yesterdayish",
    ],
)  # fmt: skip
def test_no_dates(text):
    assert resolve_relative(text, REF) == []


def test_label_and_frozen_value():
    m = _one("last weekend")
    assert m.label == "12–13 August 2023"
    assert _one("last month").label == "July 2023"
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.start = D(2020, 1, 1)  # type: ignore[misc]
    assert not hasattr(m, "__dict__")
    assert m == DateMention((0, 12), "last weekend", D(2023, 8, 12), D(2023, 8, 13), True)


_WORDS = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
          "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen",
          "eighteen", "nineteen", "twenty"]  # fmt: skip


@given(st.integers(1, 20), st.dates(min_value=date(1900, 1, 1)), st.booleans())
def test_n_days_ago_in_digits_and_words(n, ref, words):
    text = f"{_WORDS[n - 1] if words else n} days ago"
    assert _one(text, ref).start == ref - timedelta(days=n)


@given(st.dates(min_value=date(1900, 1, 1), max_value=date(2099, 12, 31)))
def test_last_week_and_last_month_contain_the_right_days(ref):
    week = _one("last week", ref)
    assert week.start.weekday() == 0 and week.end - week.start == timedelta(days=6)
    assert week.end < ref <= week.end + timedelta(days=7)
    month = _one("last month", ref)
    assert month.start.day == 1 and month.end + timedelta(days=1) == ref.replace(day=1)


@given(st.text(max_size=80), st.dates())
def test_resolve_relative_never_raises(text, ref):
    for m in resolve_relative(text, ref):
        assert text[m.span[0] : m.span[1]] == m.text
        assert m.start <= m.end


# --- days counted from another day, fortnights, "after next" ------------------------------

WED = D(2024, 3, 27)  # a Wednesday


@pytest.mark.parametrize(
    ("text", "start", "end"),
    [
        ("a week tomorrow", D(2024, 4, 4), None),
        ("two weeks tomorrow", D(2024, 4, 11), None),
        ("a week on Friday", D(2024, 4, 5), None),
        ("a week next Tuesday", D(2024, 4, 9), None),
        ("a week from Friday", D(2024, 4, 5), None),
        ("a week today", D(2024, 4, 3), None),
        ("a week yesterday", D(2024, 3, 19), None),
        ("a week last Tuesday", D(2024, 3, 19), None),
        ("on Tuesday week", D(2024, 4, 9), None),
        ("Tuesday week", D(2024, 4, 9), None),
        ("the Friday after next", D(2024, 4, 5), None),
        ("a fortnight ago", D(2024, 3, 13), None),
        ("in a fortnight", D(2024, 4, 10), None),
        ("in a fortnight's time", D(2024, 4, 10), None),
        ("in two weeks' time", D(2024, 4, 10), None),
        ("a fortnight from now", D(2024, 4, 10), None),
        ("a fortnight on Saturday", D(2024, 4, 13), None),
        ("a fortnight tomorrow", D(2024, 4, 11), None),
        ("the week after next", D(2024, 4, 8), D(2024, 4, 14)),
        ("the weekend after next", D(2024, 4, 13), D(2024, 4, 14)),
        ("the month after next", D(2024, 5, 1), D(2024, 5, 31)),
        ("the day after tomorrow", D(2024, 3, 29), None),
    ],
)
def test_days_counted_from_another_day(text, start, end):
    m = _one(text, WED)
    assert (m.start, m.end, m.text, m.relative) == (start, end or start, text, True)


def test_a_compound_phrase_is_one_date_not_its_last_word():
    m = _one("I've actually got an interview a week tomorrow for a product analyst role", WED)
    assert (m.text, m.start) == ("a week tomorrow", D(2024, 4, 4))
    assert _one("Shall we say a week on Friday?", WED).start == D(2024, 4, 5)
    assert _one("The gig is on Tuesday week.", WED).start == D(2024, 4, 9)


def test_a_week_today_said_of_the_past_counts_back():
    assert _one("It was a week today that we landed", WED).start == D(2024, 3, 20)
    assert _one("It's been a week today since the move", WED).start == D(2024, 3, 20)
    assert _one("The wedding is a week today", WED).start == D(2024, 4, 3)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("We swim twice a week on Friday", ["on Friday"]),
        ("I work a week Monday to Friday", ["Monday", "Friday"]),
    ],
)
def test_a_frequency_or_a_span_is_no_day_counted_from_another(text, said):
    assert [m.text for m in resolve_relative(text, WED)] == said


_AHEAD = ["on {wd} week", "{wd} week", "the {wd} after next", "a week on {wd}",
          "a fortnight on {wd}", "a week next {wd}", "next {wd}"]  # fmt: skip


_DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]


@given(st.dates(min_value=date(1900, 1, 1), max_value=date(2099, 12, 1)),
       st.sampled_from(_DAYS), st.sampled_from(_AHEAD),
       st.sampled_from(["We met {}.", "We meet {}.", "{}"]))  # fmt: skip
def test_a_phrase_looking_ahead_never_gives_a_day_gone(ref, wd, phrase, sentence):
    text = sentence.format(phrase.format(wd=wd))
    m = _one(text, ref)
    assert m.text.lower() == phrase.format(wd=wd).lower()
    assert m.start > ref and m.start.strftime("%A") == wd
    if "week" in phrase or "after next" in phrase:
        assert m.start - ref > timedelta(days=7)


# --- a weekday with no past tense, a day of the month alone --------------------------------

WED_21_OCT = D(2026, 10, 21)
WED_4_MAR = D(2026, 3, 4)


@pytest.mark.parametrize(
    ("text", "ref", "said", "day"),
    [
        # no past tense governs the weekday: the coming one
        ("Sorry, I meant Wednesday, not Tuesday.", WED_21_OCT, "Wednesday", D(2026, 10, 28)),
        ("Got it, Wednesday at 10.", WED_21_OCT, "Wednesday", D(2026, 10, 28)),
        ("See you at the staff meeting on Friday.", WED_4_MAR, "on Friday", D(2026, 3, 6)),
        ("Did you mean Friday?", WED_4_MAR, "Friday", D(2026, 3, 6)),
        ("We've got a meeting on Friday.", WED_4_MAR, "on Friday", D(2026, 3, 6)),
        ("We went to the beach and on Sunday we fly home.", WED_4_MAR, "on Sunday",
         D(2026, 3, 8)),
        # the day it is said on, named as such
        ("Happy Wednesday!", WED_4_MAR, "Wednesday", WED_4_MAR),
        ("It's Wednesday, finally.", WED_4_MAR, "Wednesday", WED_4_MAR),
        # a past tense does govern it: the one gone by
        ("On Friday, I went to the cinema.", WED_4_MAR, "On Friday", D(2026, 2, 27)),
        ("I met Sara on Friday and she is lovely.", WED_4_MAR, "on Friday", D(2026, 2, 27)),
        # "next <weekday>" is that day of next week, "this coming" the coming one
        ("The review is next Thursday.", WED_21_OCT, "next Thursday", D(2026, 10, 29)),
        ("The review is this coming Thursday.", WED_21_OCT, "this coming Thursday",
         D(2026, 10, 22)),
        ("My dentist appointment is next Tuesday at 10.", WED_21_OCT, "next Tuesday",
         D(2026, 10, 27)),
        # a weekday of a week named with it
        ("Sorry, I meant Thursday next week.", WED_4_MAR, "Thursday next week", D(2026, 3, 12)),
        ("Let's say next week on Monday.", WED_4_MAR, "next week on Monday", D(2026, 3, 9)),
        ("It was Monday last week.", WED_4_MAR, "Monday last week", D(2026, 2, 23)),
        # a day of the month alone: the next one on or after the day said, back when past
        ("The 12th.", WED_4_MAR, "The 12th", D(2026, 3, 12)),
        ("We fly to Ålesund on the 22nd.", D(2026, 12, 7), "on the 22nd", D(2026, 12, 22)),
        ("It's on the 2nd, sadly.", D(2026, 12, 7), "on the 2nd", D(2027, 1, 2)),
        ("Today is the 7th, right?", D(2026, 12, 7), "the 7th", D(2026, 12, 7)),
        ("I paid the rent on the 3rd.", D(2026, 12, 7), "on the 3rd", D(2026, 12, 3)),
        ("I paid the rent on the 9th.", D(2026, 12, 7), "on the 9th", D(2026, 11, 9)),
        ("It's due the 31st.", D(2026, 4, 7), "the 31st", D(2026, 5, 31)),  # April has 30
        ("Can we do the 3rd of next month?", D(2026, 4, 7), "the 3rd of next month",
         D(2026, 5, 3)),
        # with its weekday: the next such day that is that weekday
        ("Got it, Thursday the 12th.", WED_4_MAR, "Thursday the 12th", D(2026, 3, 12)),
        ("The job interview is on Thursday the 29th.", WED_21_OCT, "on Thursday the 29th",
         D(2026, 10, 29)),
        ("The party is on Friday 13th.", WED_4_MAR, "on Friday 13th", D(2026, 3, 13)),
        ("Is it Tuesday the 1st?", WED_4_MAR, "Tuesday the 1st", D(2026, 9, 1)),
    ],
)  # fmt: skip
def test_a_weekday_or_day_of_the_month_said_with_no_past_tense_is_ahead(text, ref, said, day):
    """A day a turn names with no past tense governing it is the coming one: "I meant
    Wednesday", "Got it, Thursday the 12th" (said on a Wednesday, a week on, not the one
    gone by); "on the 22nd" is the next 22nd, not nothing."""
    m = next(m for m in resolve_relative(text, ref) if m.text == said)
    assert (m.start, m.end, m.relative) == (day, day, True)


@pytest.mark.parametrize("text", [
    "She lives on the 3rd floor.",
    "It's a house from the 18th century.",
    "That's the 2nd time this week I've been late.",  # "this week" is a period, no day
    "He came in the 3rd round.",
    "The 5th edition is better.",
])  # fmt: skip
def test_an_ordinal_that_counts_something_is_no_day(text):
    assert [m.text for m in resolve_relative(text, WED_4_MAR) if m.start == m.end] == []
