"""An amount of yuan in Chinese capital numerals (大写金额), as zh-CN invoices print their total.

    rmb_capitals(Decimal("12.49")) -> "人民币壹拾贰元肆角玖分"

The rules of the People's Bank of China's 《支付结算办法》 for amounts in words:

- digits 零壹贰叁肆伍陆柒捌玖, units 拾佰仟 within a group of four, groups 万 and 亿;
  a ten is written 壹拾 (never a bare 拾), so nothing can be put in front of it;
- a run of zeros inside the number is one 零 (100,005 → 壹拾万零伍元); zeros at the end of
  a group are not written (1,000,000 → 壹佰万元);
- whole yuan end in 整 (12.00 → 壹拾贰元整); an amount with 角 but no 分 ends after 角; an
  amount with 分 never takes 整; 零 stands for a zero 角 between 元 and 分 (12.09 → 壹拾贰元零玖分);
  when the 元 digit is zero and 角 follows, the 零 may be left out and is (1,680.32 →
  壹仟陆佰捌拾元叁角贰分);
- below one yuan the 元 is not written (0.49 → 肆角玖分); zero is 零元整; a negative amount
  (a credit note's) is 负 in front.
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

__all__ = ["rmb_capitals"]

_DIGITS = "零壹贰叁肆伍陆柒捌玖"
_UNITS = ("", "拾", "佰", "仟")
_GROUPS = ("", "万", "亿", "万亿")


def _group(n: int) -> str:
    """0 < n < 10,000 in capitals, zeros inside collapsed to one 零, trailing zeros dropped."""
    text, zero = "", False
    for place in (3, 2, 1, 0):
        digit = n // 10**place % 10
        if digit == 0:
            zero = bool(text)
            continue
        text += ("零" if zero else "") + _DIGITS[digit] + _UNITS[place]
        zero = False
    return text


def _yuan(n: int) -> str:
    """The whole yuan n > 0, in groups of four digits."""
    groups = []
    while n:
        groups.append(n % 10_000)
        n //= 10_000
    if len(groups) > len(_GROUPS):
        raise ValueError("amount too large for capital numerals")
    text = ""
    for index in range(len(groups) - 1, -1, -1):
        value = groups[index]
        if value == 0:
            continue
        lower_written = index < len(groups) - 1
        # a group after a higher one that does not fill its four places, or after skipped groups, needs 零
        skipped = lower_written and (value < 1000 or groups[index + 1] == 0)
        text += ("零" if skipped and text else "") + _group(value) + _GROUPS[index]
    return text


def rmb_capitals(amount: Decimal) -> str:
    """"人民币" and `amount` (yuan, rounded half up to the fen) in capital numerals; see the module docstring."""
    fen_total = int((abs(amount) * 100).to_integral_value(rounding=ROUND_HALF_UP))
    sign = "负" if amount < 0 and fen_total else ""
    yuan, jiao, fen = fen_total // 100, fen_total // 10 % 10, fen_total % 10
    if fen_total == 0:
        return "人民币零元整"
    text = _yuan(yuan) + "元" if yuan else ""
    if jiao:
        text += _DIGITS[jiao] + "角"
    elif fen and yuan:
        text += "零"
    if fen:
        text += _DIGITS[fen] + "分"
    if not jiao and not fen:
        text += "整"
    return f"人民币{sign}{text}"
