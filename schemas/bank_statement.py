"""A bank's statement export (CSV), read for `gpubill payment import FILE` (issue 38); its lines are
matched to invoices and tenants by schemas/bank_matching.py. Pure: bytes in, lines out; no file,
clock or database.

Reading (`read_statement`, `parse_statement`; docs/bank_statements.md says the same for finance):

- **Size.** At most MAX_BYTES (10 MiB) and MAX_LINES (100,000) lines, else `InvalidStatement`.
- **Encoding.** UTF-8 (a byte-order mark is dropped), else GB18030 (which reads GBK and GB2312,
  what Chinese banks' exports often are). Anything else — UTF-16, a NUL byte, an Excel
  workbook, bytes neither decodes — is `InvalidStatement`. A file in another 8-bit encoding
  may still decode as GB18030: its header then names no known column and is refused.
- **Lines.** One record per line (LF or CRLF): a quoted field may hold the delimiter and `""`
  but never a line break, so a broken quote spoils one line, not the rest of the file, and
  `line_no` is the line an editor shows (the header is line 1). Comma-separated; tab-separated
  when the header holds a tab and no comma. A quote inside an unquoted field, or text after a
  closing quote, makes the line bad.
- **Header** (line 1). Names compared case-insensitively, trimmed, full-width forms read as
  ASCII (NFKC), `_` as a space, and a unit suffix `(元)`, `(人民币)`, `(CNY)` or `(RMB)` dropped:

      transaction id  流水号, 交易流水号, 交易流水, transaction id, transaction_id, txn_id   required
      date            交易日期, 日期, date, 记账日期, value date                              required
      amount          金额, 交易金额, 贷方金额, 贷方发生额, 收入金额, amount, credit           required
      payer           对方户名, 付款人, 付款人名称, 对方账户名称, 对方单位名称, payer          optional
      remittance      附言, 摘要, 用途, 备注, remittance, memo                                required

  Other columns are ignored (never read, never checked). The remittance is required: without
  it no line can be matched, and a missing one is far likelier a name we do not know than a
  bank that exports none — refusing names the accepted names. The payer is optional: it is
  shown, never matched on. A column named twice is refused, with two exceptions that real
  exports need: several date columns (交易日期 and 记账日期, say) — the first in the list above
  is read; several remittance columns (摘要 and 附言, say) — read joined with " | ", in header
  order, so an invoice number in either is found.
- **Fields** are trimmed of spaces, tabs, U+3000 and U+00A0 (banks pad numbers with a tab so
  that Excel keeps them as text). A field read that holds a control or format character (bidi
  overrides included) or is longer than MAX_FIELD_CHARS (500) makes the line bad; its text is
  kept as text, never interpreted (`=cmd|...` is a remittance like any other).
- **Transaction id**: 1 to 58 ASCII letters, digits, `.`, `_`, `-` (the payment's ref is
  `bank-{txn_id}`, an id of schemas/ids.py). A second line with the same id is bad.
- **Date**: `2026-01-05`, `2026/01/05`, `20260105`, `2026年01月05日` (month and day may have one
  digit where separated: `2026/1/5`, as Excel rewrites them); years 2000-2099; no time.
- **Amount**: CNY received, `[+]` then `[¥|￥]` then digits, thousands grouped by commas
  (`"1,234.56"`, quoted in a CSV) or not at all, at most two decimals; more than 0 and at
  most MAX_AMOUNT (¥100,000,000.00). A leading `-` is "a debit, not a receipt"; zero, NaN,
  exponents, `_` and non-ASCII digits are refused. Read as Decimal from the checked text,
  with two decimals.
- **Skipped**, not bad: blank lines, lines of empty fields (`,,,,`), and totals rows — a line
  whose first non-empty field is 合计, 总计, 小计, 本页合计, 本页小计, 累计, total, totals or
  subtotal (a trailing `:` or `：` allowed) and whose transaction id is empty or that word. A
  real payment has a transaction id, so none is ever skipped; `Statement.skipped` lists them.
- A line is bad for every problem it has, joined with "; " (`BadLine.reason`).

    SchemaError
    └── InvalidStatement   the file as a whole cannot be read (schemas/errors.py has the base)
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from typing import Literal, Mapping

from schemas.errors import SchemaError

__all__ = [
    "BadLine", "BankLine", "InvalidStatement", "MAX_AMOUNT", "MAX_BYTES", "MAX_FIELD_CHARS", "MAX_LINES",
    "MAX_TXN_ID_CHARS", "Statement", "parse_statement", "read_statement",
]

MAX_BYTES = 10 * 1024 * 1024
MAX_LINES = 100_000
MAX_FIELD_CHARS = 500
MAX_TXN_ID_CHARS = 58  # "bank-" + 58 stays within the id syntax's 64 characters
MAX_AMOUNT = Decimal("100000000.00")
_CENT = Decimal("0.01")


class InvalidStatement(SchemaError):
    """The file as a whole cannot be read: not CSV, an unknown encoding, a required column missing,
    too large. str() is one line that says what to fix."""


@dataclass(frozen=True)
class BankLine:
    """One receipt of the statement, checked."""

    line_no: int  # the line's number in the file (the header is line 1)
    txn_id: str  # the bank's transaction id (流水号); the payment's ref is f"bank-{txn_id}"
    received_on: date  # 交易日期
    amount: Decimal  # CNY received, > 0, two decimals, at most MAX_AMOUNT
    payer: str  # 对方户名 ("" when empty or without the column)
    remittance: str  # 附言 ("" when empty)


@dataclass(frozen=True)
class BadLine:
    """A line that is not a receipt we can take; `reason` is one line naming every problem."""

    line_no: int
    reason: str


@dataclass(frozen=True)
class Statement:
    """A statement as read: its receipts, its bad lines, and how the file was read."""

    lines: tuple[BankLine, ...]
    bad: tuple[BadLine, ...]
    skipped: tuple[int, ...]  # line numbers of the totals rows skipped (blank lines are not listed)
    encoding: Literal["utf-8", "utf-8-sig", "gb18030"]
    delimiter: Literal[",", "\t"]
    columns: Mapping[str, str]  # field ("txn_id", "received_on", ...) -> the header name(s) read for it


# --- The header ---------------------------------------------------------------------------------

# Field -> accepted names, in order of preference (the order matters only for the date).
_NAMES: dict[str, tuple[str, ...]] = {
    "txn_id": ("流水号", "交易流水号", "交易流水", "transaction id", "transaction_id", "txn_id"),
    "received_on": ("交易日期", "日期", "date", "记账日期", "value date"),
    "amount": ("金额", "交易金额", "贷方金额", "贷方发生额", "收入金额", "amount", "credit"),
    "payer": ("对方户名", "付款人", "付款人名称", "对方账户名称", "对方单位名称", "payer"),
    "remittance": ("附言", "摘要", "用途", "备注", "remittance", "memo"),
}
_LABELS = {"txn_id": "transaction id", "received_on": "date", "amount": "amount", "payer": "payer",
           "remittance": "remittance"}
_REQUIRED = ("txn_id", "received_on", "amount", "remittance")
_UNIT_SUFFIX = re.compile(r"\s*\((?:元|人民币|人民币元|cny|rmb)\)$")


def _header_key(name: str) -> str:
    # A second byte-order mark (an editor's, after the exporter's) must not hide the first name.
    key = unicodedata.normalize("NFKC", name.replace("\ufeff", "")).strip().lower().replace("_", " ")
    key = " ".join(_UNIT_SUFFIX.sub("", key).split())
    return key


_FIELD_OF = {_header_key(name): field for field, names in _NAMES.items() for name in names}
_RANK = {_header_key(name): rank for names in _NAMES.values() for rank, name in enumerate(names)}


@dataclass(frozen=True)
class _Columns:
    width: int
    txn_id: int
    received_on: int
    amount: int
    payer: int | None
    remittance: tuple[int, ...]
    names: Mapping[str, str]


def _columns(cells: list[str]) -> _Columns:
    found: dict[str, list[int]] = {field: [] for field in _NAMES}
    for i, cell in enumerate(cells):
        field = _FIELD_OF.get(_header_key(cell))
        if field is not None:
            found[field].append(i)
    missing = [f for f in _REQUIRED if not found[f]]
    if missing:
        raise InvalidStatement(
            "the header (line 1) has " + " and ".join(
                f"no {_LABELS[f]} column (name it {_alternatives(_NAMES[f])})" for f in missing)
            + "; the header must be the file's first line")
    chosen: dict[str, list[int]] = {}
    for field, at in found.items():
        if len(at) > 1 and field == "received_on":
            # 交易日期 and 记账日期 side by side: the transaction date is the day the money came.
            ranks = sorted(_RANK[_header_key(cells[i])] for i in at)
            if ranks[0] != ranks[1]:
                at = [min(at, key=lambda i: _RANK[_header_key(cells[i])])]
        if len(at) > 1 and field != "remittance":
            named = ", ".join(f"{cells[i].strip()!r} in column {i + 1}" for i in at)
            raise InvalidStatement(f"the header names the {_LABELS[field]} more than once ({named}): keep one")
        chosen[field] = at
    return _Columns(
        width=len(cells), txn_id=chosen["txn_id"][0], received_on=chosen["received_on"][0],
        amount=chosen["amount"][0], payer=chosen["payer"][0] if chosen["payer"] else None,
        remittance=tuple(chosen["remittance"]),
        names={field: " | ".join(cells[i].strip() for i in at) for field, at in chosen.items() if at})


def _alternatives(names: tuple[str, ...]) -> str:
    return ", ".join(names[:-1]) + " or " + names[-1]


# --- Bytes to lines -------------------------------------------------------------------------------

_SIGNATURES = (
    (b"PK\x03\x04", "an Excel workbook (xlsx) or another zip, not CSV: save it as CSV (UTF-8)"),
    (b"\xd0\xcf\x11\xe0", "an Excel 97 workbook (xls), not CSV: save it as CSV (UTF-8)"),
    (b"\xff\xfe", "UTF-16 or UTF-32 text: save it as CSV in UTF-8 or GB18030"),
    (b"\xfe\xff", "UTF-16 text: save it as CSV in UTF-8 or GB18030"),
    (b"\x00\x00\xfe\xff", "UTF-32 text: save it as CSV in UTF-8 or GB18030"),
)


def _decode(data: bytes) -> tuple[str, Literal["utf-8", "utf-8-sig", "gb18030"]]:
    for signature, what in _SIGNATURES:
        if data.startswith(signature):
            raise InvalidStatement(f"the file is {what}")
    if b"\x00" in data:
        line = data[:data.index(b"\x00")].count(b"\n") + 1
        raise InvalidStatement(f"the file holds a NUL byte (line {line}): it is not text; save it as CSV in UTF-8 or GB18030")
    if data.startswith(b"\xef\xbb\xbf"):
        try:
            return data[3:].decode("utf-8"), "utf-8-sig"
        except UnicodeDecodeError as exc:
            line = data[:exc.start + 3].count(b"\n") + 1
            raise InvalidStatement(
                f"the file starts with UTF-8's byte-order mark but is not UTF-8 (line {line}): save it as CSV in UTF-8") from exc
    try:
        return data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError as utf8_error:
        try:
            text = data.decode("gb18030")
        except UnicodeDecodeError as exc:
            line = data[:utf8_error.start].count(b"\n") + 1
            raise InvalidStatement(
                f"the file is neither UTF-8 nor GB18030/GBK (line {line}): save it as CSV in UTF-8") from exc
        # GB18030's own byte-order mark (84 31 95 33) decodes to U+FEFF.
        return text.removeprefix("\ufeff"), "gb18030"


def _physical_lines(text: str) -> list[str]:
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # the file's last line break ends a line, it does not start one
    return [line.removesuffix("\r") for line in lines]


_QUOTED = re.compile(r'"((?:[^"]|"")*+)"')


class _NotCsv(ValueError):
    """A line that is not one CSV record; str() is the reason."""


def _split(line: str, delimiter: str) -> list[str]:
    """The fields of one CSV line (RFC 4180 within a line); raises _NotCsv."""
    fields: list[str] = []
    pos, end = 0, len(line)
    while True:
        if line.startswith('"', pos):
            quoted = _QUOTED.match(line, pos)
            if quoted is None:
                raise _NotCsv(f"field {len(fields) + 1} opens a quote and does not close it")
            fields.append(quoted.group(1).replace('""', '"'))
            pos = quoted.end()
            if pos < end and line[pos] != delimiter:
                raise _NotCsv(f"field {len(fields)} has text after its closing quote")
        else:
            stop = line.find(delimiter, pos)
            stop = end if stop < 0 else stop
            field = line[pos:stop]
            if '"' in field:
                raise _NotCsv(f"field {len(fields) + 1} holds a quote but is not quoted: quote it and double its quotes")
            fields.append(field)
            pos = stop
        if pos >= end:
            return fields
        pos += 1  # the delimiter; a delimiter at the very end leaves one more, empty, field
        if pos == end:
            fields.append("")
            return fields


_BLANKS = " \t\u3000\u00a0"


def _fields(line: str, delimiter: str) -> list[str]:
    return [field.strip(_BLANKS) for field in _split(line, delimiter)]


# --- Fields ----------------------------------------------------------------------------------------

_TXN_ID = re.compile(r"[A-Za-z0-9._-]{1,%d}" % MAX_TXN_ID_CHARS)
_AMOUNT = re.compile(r"([+-]?)[¥￥]?((?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]+)?)")
_DATES = (
    re.compile(r"(?P<y>[0-9]{4})-(?P<m>[0-9]{1,2})-(?P<d>[0-9]{1,2})"),
    re.compile(r"(?P<y>[0-9]{4})/(?P<m>[0-9]{1,2})/(?P<d>[0-9]{1,2})"),
    re.compile(r"(?P<y>[0-9]{4})(?P<m>[0-9]{2})(?P<d>[0-9]{2})"),
    re.compile(r"(?P<y>[0-9]{4})年(?P<m>[0-9]{1,2})月(?P<d>[0-9]{1,2})日"),
)
_DATE_FORMS = "2026-01-05, 2026/01/05, 20260105 or 2026年01月05日"
_TOTALS = frozenset(("合计", "总计", "小计", "本页合计", "本页小计", "累计", "total", "totals", "subtotal"))
_REFUSED_CATEGORIES = frozenset(("Cc", "Cf", "Cs", "Zl", "Zp"))


def _shown(value: str) -> str:
    """A value quoted for a reason: escapes what is not printable, cut to 40 characters."""
    return repr(value if len(value) <= 40 else value[:40] + "…")


def _text_problem(label: str, value: str) -> str | None:
    # isprintable() is False for every refused category (and for more): the exact look, per
    # character, only for the few fields that have something unusual.
    if not value.isprintable():
        for ch in value:
            if unicodedata.category(ch) in _REFUSED_CATEGORIES:
                return f"the {label} holds the control or format character U+{ord(ch):04X}"
    if len(value) > MAX_FIELD_CHARS:
        return f"the {label} is longer than {MAX_FIELD_CHARS} characters ({len(value)})"
    return None


def _txn_id(value: str) -> tuple[str | None, str | None]:
    if value == "":
        return None, "no transaction id"
    if _TXN_ID.fullmatch(value) is None:
        return None, (f"the transaction id {_shown(value)} is not 1 to {MAX_TXN_ID_CHARS} ASCII letters, "
                      "digits, '.', '_' or '-'")
    return value, None


def _date(value: str) -> tuple[date | None, str | None]:
    if value == "":
        return None, "no date"
    for form in _DATES:
        parts = form.fullmatch(value)
        if parts is not None:
            year, month, day = int(parts["y"]), int(parts["m"]), int(parts["d"])
            if not 2000 <= year <= 2099:
                return None, f"the date {_shown(value)} is not in the years 2000 to 2099"
            try:
                return date(year, month, day), None
            except ValueError:
                return None, f"the date {_shown(value)} does not exist"
    return None, f"the date {_shown(value)} is not a date: write {_DATE_FORMS}"


def _amount(value: str) -> tuple[Decimal | None, str | None]:
    if value == "":
        return None, "no amount (a debit line of a statement with separate credit and debit columns? keep only receipts)"
    parts = _AMOUNT.fullmatch(value)
    if parts is None:
        return None, (f"the amount {_shown(value)} is not an amount: write digits with at most two decimals, "
                      "e.g. 1234.56 or \"1,234.56\"")
    sign, digits = parts.groups()
    if "." in digits and len(digits) - digits.index(".") - 1 > 2:
        return None, f"the amount {_shown(value)} has more than two decimals"
    amount = Decimal(digits.replace(",", ""))  # the checked text: digits, at most one point
    if amount == 0:
        return None, "the amount is zero"
    if sign == "-":
        return None, "a debit, not a receipt"
    if amount > MAX_AMOUNT:
        return None, f"the amount {_shown(value)} is above ¥100,000,000.00"
    return amount.quantize(_CENT), None


def _is_totals(fields: list[str], columns: _Columns) -> bool:
    first = next((f for f in fields if f), "")
    word = first.rstrip(":：").strip(_BLANKS).lower()
    if word not in _TOTALS:
        return False
    txn = fields[columns.txn_id] if columns.txn_id < len(fields) else ""
    return txn == "" or txn == first


def _line(line_no: int, fields: list[str], columns: _Columns) -> tuple[BankLine | None, list[str]]:
    problems: list[str] = []
    raw = {"transaction id": fields[columns.txn_id], "date": fields[columns.received_on],
           "amount": fields[columns.amount], "payer": fields[columns.payer] if columns.payer is not None else ""}
    raw.update({"remittance" if len(columns.remittance) == 1 else f"remittance (column {i + 1})": fields[i]
                for i in columns.remittance})
    clean: dict[str, str] = {}
    for label, value in raw.items():
        problem = _text_problem(label, value)
        if problem is None:
            clean[label] = value
        else:
            problems.append(problem)
    txn_id = received_on = amount = None
    if "transaction id" in clean:
        txn_id, problem = _txn_id(clean["transaction id"])
        problems += [problem] if problem else []
    if "date" in clean:
        received_on, problem = _date(clean["date"])
        problems += [problem] if problem else []
    if "amount" in clean:
        amount, problem = _amount(clean["amount"])
        problems += [problem] if problem else []
    if problems or txn_id is None or received_on is None or amount is None:
        return None, problems
    remittance = " | ".join(fields[i] for i in columns.remittance if fields[i])
    return BankLine(line_no, txn_id, received_on, amount, clean["payer"], remittance), []


def read_statement(data: bytes) -> Statement:
    """The statement in `data` (the file's bytes): every line read, in file order — receipts as
    BankLines, the lines that are not as BadLines with every reason, totals rows skipped and
    listed. Raises InvalidStatement when the file as a whole cannot be read (the module
    docstring says when). A transaction id a line repeats makes the later line bad, naming the
    first (even when that one is bad for another reason: the import takes none then anyway)."""
    data = bytes(data)
    if len(data) > MAX_BYTES:
        raise InvalidStatement(f"the file is larger than 10 MiB ({len(data):,} bytes): split it into several files")
    text, encoding = _decode(data)
    lines = _physical_lines(text)
    if len(lines) > MAX_LINES:
        raise InvalidStatement(f"the file has more than {MAX_LINES:,} lines ({len(lines):,}): split it into several files")
    if not lines or lines[0].strip(_BLANKS) == "":
        raise InvalidStatement("line 1 is empty: the first line must be the header, e.g. 流水号,交易日期,金额,对方户名,附言")
    header = lines[0]
    if "\r" in header:
        raise InvalidStatement("the lines end in a bare CR (old Mac line ends): save the file with LF or CRLF line ends")
    delimiter: Literal[",", "\t"] = "\t" if "\t" in header and "," not in header else ","
    try:
        columns = _columns(_fields(header, delimiter))
    except _NotCsv as exc:
        raise InvalidStatement(f"the header (line 1) is not CSV: {exc}") from None

    good: list[BankLine] = []
    bad: list[BadLine] = []
    skipped: list[int] = []
    first_seen: dict[str, int] = {}
    for line_no, line in enumerate(lines[1:], start=2):
        if line.strip(_BLANKS) == "":
            continue
        try:
            fields = _fields(line, delimiter)
        except _NotCsv as exc:
            bad.append(BadLine(line_no, f"not a CSV line: {exc}"))
            continue
        if not any(fields):
            continue  # ",,,,": a spreadsheet's empty row
        if _is_totals(fields, columns):
            skipped.append(line_no)
            continue
        if len(fields) != columns.width:
            bad.append(BadLine(line_no, f"{len(fields)} fields where the header has {columns.width}"))
            continue
        receipt, problems = _line(line_no, fields, columns)
        txn = fields[columns.txn_id]
        if _TXN_ID.fullmatch(txn):
            if txn in first_seen:
                problems.append(f"the transaction id {txn} repeats line {first_seen[txn]}")
                receipt = None
            else:
                first_seen[txn] = line_no
        if receipt is None:
            bad.append(BadLine(line_no, "; ".join(problems)))
        else:
            good.append(receipt)
    return Statement(tuple(good), tuple(bad), tuple(skipped), encoding, delimiter, dict(columns.names))


def parse_statement(data: bytes) -> tuple[list[BankLine], list[BadLine]]:
    """The receipts and the bad lines of the statement in `data` (read_statement's, in file order)."""
    statement = read_statement(data)
    return list(statement.lines), list(statement.bad)
