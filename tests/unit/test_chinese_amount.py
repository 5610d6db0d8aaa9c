"""Amounts in Chinese capital numerals (reports/render/chinese_amount.py), checked against the
rules of 《支付结算办法》 written out by hand."""

from __future__ import annotations

from decimal import Decimal as D

import pytest

from reports.render.chinese_amount import rmb_capitals


@pytest.mark.parametrize("amount, words", [
    ("12.49", "人民币壹拾贰元肆角玖分"),          # the example
    ("0", "人民币零元整"),
    ("0.00", "人民币零元整"),
    ("12.00", "人民币壹拾贰元整"),                # whole yuan: 整
    ("12.40", "人民币壹拾贰元肆角"),              # 角 without 分: nothing after 角
    ("12.09", "人民币壹拾贰元零玖分"),            # a zero 角 between 元 and 分: 零
    ("0.49", "人民币肆角玖分"),                  # below one yuan: no 元
    ("0.09", "人民币玖分"),
    ("10", "人民币壹拾元整"),                    # 壹拾, never a bare 拾
    ("105", "人民币壹佰零伍元整"),
    ("1680.32", "人民币壹仟陆佰捌拾元叁角贰分"),    # zero 元 digit before 角: 零 left out
    ("100005", "人民币壹拾万零伍元整"),            # zeros inside: one 零
    ("10010", "人民币壹万零壹拾元整"),
    ("1000000", "人民币壹佰万元整"),              # trailing zeros of a group: not written
    ("218600", "人民币贰拾壹万捌仟陆佰元整"),      # the 64-card cluster's month, rent + electricity
    ("100000000", "人民币壹亿元整"),
    ("100010001", "人民币壹亿零壹万零壹元整"),
    ("1000000001", "人民币壹拾亿零壹元整"),        # a skipped 万 group: one 零
    ("3180", "人民币叁仟壹佰捌拾元整"),
    ("-10.00", "人民币负壹拾元整"),              # a credit note's amount
])
def test_amounts_in_capitals(amount, words):
    assert rmb_capitals(D(amount)) == words
