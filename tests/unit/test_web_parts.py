"""The web page's pure parts: its words in both languages, how a language is picked, how
amounts are written, the chart's geometry, and the session table and CSRF checks."""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal

import pytest

from tenant_api import i18n
from tenant_api.i18n import Words, from_accept_language, money, pick_lang
from tenant_api.web_chart import build_chart, nice_top, period_days
from tenant_api.web_session import Sessions, SessionsFull, same_origin, tokens_match


# -- words and languages ---------------------------------------------------------------------

def test_both_languages_have_every_word_and_the_same_placeholders():
    english, chinese = i18n._WORDS["en"], i18n._WORDS["zh-CN"]
    assert set(english) == set(chinese)
    for key in english:
        assert sorted(re.findall(r"{(\w+)}", english[key])) == sorted(re.findall(r"{(\w+)}", chinese[key])), key
    assert Words("zh-CN")("too_many", seconds=7) == "此地址尝试次数过多，请在 7 秒后重试。"
    with pytest.raises(ValueError, match="unknown language 'fr'"):
        Words("fr")


@pytest.mark.parametrize("header, lang", [
    (None, None), ("", None), ("fr", None), ("*", None),
    ("zh-CN", "zh-CN"), ("zh", "zh-CN"), ("zh-Hans-CN", "zh-CN"), ("zh-TW", "zh-CN"), ("ZH-cn", "zh-CN"),
    ("en-US,zh;q=0.8", "en"), ("zh;q=0.5, en;q=0.4", "zh-CN"), ("fr, zh;q=0.1", "zh-CN"),
    ("en;q=0, zh;q=0.1", "zh-CN"), ("zh;q=abc, en;q=0.2", "en"), ("en, zh", "en"), ("zh, en", "zh-CN"),
    ("x" * 10_000, None),
])
def test_accept_language_picks_the_best_of_our_two(header, lang):
    assert from_accept_language(header) == lang


def test_the_switcher_beats_the_cookie_which_beats_the_browser():
    assert pick_lang("zh-CN", "en", "en") == "zh-CN"
    assert pick_lang(None, "zh-CN", "en") == "zh-CN"
    assert pick_lang("fr", "de", "zh") == "zh-CN"  # unknown choices are ignored, not errors
    assert pick_lang(None, None, None) == "en"


@pytest.mark.parametrize("amount, shown", [
    (Decimal("0"), "¥0.00"), (Decimal("1234.565"), "¥1,234.57"),  # half up, not half even
    (Decimal("1234.564"), "¥1,234.56"), (Decimal("1000000"), "¥1,000,000.00"),
    (Decimal("-10"), "\u2212¥10.00"), (Decimal("-0.001"), "¥0.00"), (7, "¥7.00"),
])
def test_amounts_are_yuan_with_two_decimals_grouped(amount, shown):
    assert money(amount) == shown


def test_a_float_amount_is_refused():
    with pytest.raises(TypeError):
        money(1.1)  # type: ignore[arg-type]


# -- the chart -------------------------------------------------------------------------------

@pytest.mark.parametrize("largest, top", [
    (Decimal(0), Decimal(4)),          # nothing: a 0..4 grid
    (Decimal(4), Decimal(4)),          # step 1
    (Decimal(11), Decimal(20)),        # step 2.75 → 5
    (Decimal(10), Decimal(20)),        # step 2.5 → 5
    (Decimal("0.3"), Decimal("0.4")),  # step 0.075 → 0.1
    (Decimal("1234.5"), Decimal(2000)),  # step 308.6 → 500
    (Decimal(8000), Decimal(8000)),    # step 2000 exactly
])
def test_the_axis_ends_at_the_first_nice_tick_above_the_largest_value(largest, top):
    assert nice_top(largest) == top


def test_period_days_are_the_calendar_months():
    assert len(period_days("2026-03")) == 31 and period_days("2028-02")[-1] == "2028-02-29"


@dataclass(frozen=True)
class Day:
    day: str
    gpu_hours: Decimal
    spend: Decimal


def test_bars_and_line_are_drawn_to_scale():
    # plot: 760 − 56 − 64 = 640 px wide, 280 − 16 − 36 = 228 px high; 31 slots of 640/31 px
    # hours axis 0..20 (largest 10), spend axis 0..20 (largest 11):
    #   day 1: 10 h → 10/20 × 228 = 114 px; day 3: 5 h → 57 px; spend 11 → y = 16 + 228 − 11/20 × 228 = 118.6
    zeros = [Day(f"2026-03-{d:02d}", Decimal(0), Decimal(0)) for d in (2, *range(4, 32))]
    chart = build_chart("2026-03", [Day("2026-03-01", Decimal(10), Decimal(11)),
                                    Day("2026-03-03", Decimal(5), Decimal("5.5")), *zeros], hours_word="GPU-hours")
    assert len(chart.bars) == 31 and not chart.empty
    assert [b.height for b in chart.bars[:4]] == [114.0, 0.0, 57.0, 0.0]
    assert chart.bars[0].y == 16 + 228 - 114
    assert chart.bars[0].label == "2026-03-01: 10.00 GPU-hours · ¥11.00"
    assert [t.left for t in chart.ticks] == ["0", "5", "10", "15", "20"]
    assert [t.right for t in chart.ticks] == ["¥0", "¥5", "¥10", "¥15", "¥20"]
    points = chart.line.split()
    assert len(points) == 3 and points[0] == f"{round(56 + 640 / 31 / 2, 2)},118.6"  # stops at the last day with usage
    assert len(chart.dots) == 2 and [d.text for d in chart.days] == ["1", "5", "10", "15", "20", "25", "30"]
    assert chart.rows == (("2026-03-01", "10.00", "¥11.00"), ("2026-03-03", "5.00", "¥5.50"))


def test_small_figures_get_decimals_on_the_axes_and_no_usage_is_an_empty_chart():
    chart = build_chart("2026-02", [Day("2026-02-10", Decimal("0.3"), Decimal("0.07"))], hours_word="h")
    assert [t.left for t in chart.ticks] == ["0.0", "0.1", "0.2", "0.3", "0.4"]  # 0.3 → top 0.4
    assert [t.right for t in chart.ticks] == ["¥0.00", "¥0.02", "¥0.04", "¥0.06", "¥0.08"]  # 0.07 → 0.08
    empty = build_chart("2026-02", [], hours_word="h")
    assert empty.empty and len(empty.bars) == 28 and empty.line == "" and empty.rows == ()


# -- sessions and CSRF -----------------------------------------------------------------------

class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def test_sessions_end_when_idle_when_old_and_oldest_first_when_too_many():
    clock = Clock()
    sessions = Sessions(clock=clock, idle_s=100, lifetime_s=250, max_sessions=2)
    first, _ = sessions.start("key-1")
    for _ in range(2):
        clock.now += 90
        assert sessions.find(first) is not None  # kept alive by use …
    clock.now += 71
    assert sessions.find(first) is None  # … but not past its lifetime (251 s > 250 s)
    a, _ = sessions.start("key-a")
    b, _ = sessions.start("key-b")
    c, _ = sessions.start("key-c")
    assert sessions.find(a) is None and sessions.find(b) is not None and sessions.find(c) is not None
    clock.now += 101
    assert sessions.find(b) is None
    assert all(len(k) == 32 for k in sessions._open) and c.encode() not in b"".join(sessions._open)  # digests only
    assert sessions.find(None) is None and sessions.find("") is None and sessions.find("x" * 200) is None


def test_one_tenants_keys_signing_in_again_and_again_never_end_another_tenants_session():
    # issue 21, finding 7: 7 keys of one tenant made 10,055 sessions and pushed another's out
    clock = Clock()
    sessions = Sessions(clock=clock, max_sessions=50, max_per_key=4, max_per_tenant=20)
    theirs, _ = sessions.start("beta-key", key_id="k_beta", tenant="beta")
    operator, _ = sessions.start("op-key", key_id="k_op", tenant="")
    for n in range(10_055):
        clock.now += 0.006
        sessions.start(f"acme-key-{n % 7}", key_id=f"k_acme{n % 7}", tenant="acme")
    assert sessions.find(theirs) is not None and sessions.find(operator) is not None
    assert len(sessions) == 2 + 20  # acme holds its tenant's cap, no more
    assert {len(group) for key, group in sessions._of_key.items() if key.startswith("k_acme")} <= {2, 3, 4}


def test_past_its_cap_a_key_loses_its_own_least_recently_used_session():
    clock = Clock()
    sessions = Sessions(clock=clock, max_per_key=3)
    ids = [sessions.start("acme", key_id="k_a", tenant="acme")[0] for _ in range(3)]
    other, _ = sessions.start("acme-2", key_id="k_b", tenant="acme")
    clock.now += 1
    assert sessions.find(ids[0]) is not None  # used: now the most recent of k_a
    fourth, _ = sessions.start("acme", key_id="k_a", tenant="acme")
    assert [sessions.find(i) is not None for i in ids] == [True, False, True]
    assert sessions.find(fourth) is not None and sessions.find(other) is not None


def test_a_full_table_ends_the_tenants_own_session_or_refuses_never_anothers():
    clock = Clock()
    sessions = Sessions(clock=clock, idle_s=100, max_sessions=3)
    beta = [sessions.start("b", key_id=f"k_b{n}", tenant="beta")[0] for n in range(2)]
    acme, _ = sessions.start("a", key_id="k_a", tenant="acme")
    again, _ = sessions.start("a2", key_id="k_a2", tenant="acme")  # full: acme's own oldest goes
    assert sessions.find(acme) is None and sessions.find(again) is not None
    assert all(sessions.find(b) is not None for b in beta)
    with pytest.raises(SessionsFull):
        sessions.start("g", key_id="k_g", tenant="gamma")  # no session of its own to give up
    assert len(sessions) == 3
    clock.now += 101  # all idle too long: expired ones make room first
    sessions.start("g", key_id="k_g", tenant="gamma")
    assert len(sessions) == 1


def test_each_session_has_its_own_random_ids():
    sessions = Sessions()
    (one, s1), (two, s2) = sessions.start("k"), sessions.start("k")
    assert one != two and s1.csrf != s2.csrf and len(one) == 43 and s1.token == "k"


@pytest.mark.parametrize("headers, ok", [
    ({"origin": "http://portal.test"}, True),
    ({"origin": "HTTP://Portal.test"}, True),
    ({"origin": "http://portal.test:8080"}, False),
    ({"origin": "https://portal.test"}, True),  # a TLS proxy in front: the browser is on https
    ({"origin": "null"}, False),
    ({"origin": "http://portal.test.evil"}, False),
    ({"referer": "http://portal.test/?lang=en"}, True),
    ({"referer": "http://evil.test/http://portal.test"}, False),
    ({"origin": "http://evil.test", "referer": "http://portal.test/"}, False),  # Origin decides when present
    ({}, False),
])
def test_a_post_must_come_from_this_origin(headers, ok):
    assert same_origin(headers, "http", "portal.test") is ok


def test_over_https_a_post_from_the_http_page_is_refused():
    assert same_origin({"origin": "https://portal.test"}, "https", "portal.test")
    assert not same_origin({"origin": "http://portal.test"}, "https", "portal.test")


def test_tokens_match_only_when_both_are_there_and_equal():
    assert tokens_match("abc", "abc") and not tokens_match("abc", "abd")
    assert not tokens_match("", "") and not tokens_match(None, None) and not tokens_match("abc", None)
