"""Bank statements (schemas/bank_statement.py): reading a bank's CSV export and matching its lines
to invoices and tenants. Every expected value is written out by hand."""

from __future__ import annotations

import time
from datetime import date
from decimal import Decimal as D

import pytest

from schemas.bank_matching import Match, match_lines
from schemas.bank_statement import MAX_BYTES, BadLine, BankLine, InvalidStatement, parse_statement, read_statement
from schemas.errors import SchemaError

HEADER = "流水号,交易日期,金额,对方户名,附言"
ROW = "T1,2026-01-05,12.30,张三,GB-2026-000001"
LINE = BankLine(2, "T1", date(2026, 1, 5), D("12.30"), "张三", "GB-2026-000001")


def statement(*rows: str, header: str = HEADER, newline: str = "\n", encoding: str = "utf-8") -> bytes:
    return newline.join((header, *rows)).encode(encoding) + newline.encode(encoding)


def only(row: str, header: str = HEADER) -> BankLine | BadLine:
    """The one line a statement of `row` gives, good or bad."""
    lines, bad = parse_statement(statement(row, header=header))
    assert len(lines) + len(bad) == 1, (lines, bad)
    return (lines or bad)[0]


def refusal(data: bytes) -> str:
    with pytest.raises(InvalidStatement) as caught:
        parse_statement(data)
    message = str(caught.value)
    assert "\n" not in message
    return message


# --- The header -----------------------------------------------------------------------------------

_DEFAULT = {"txn_id": "流水号", "received_on": "交易日期", "amount": "金额", "payer": "对方户名", "remittance": "附言"}
_ORDER = ("txn_id", "received_on", "amount", "payer", "remittance")


@pytest.mark.parametrize("field, name", [
    ("txn_id", "流水号"), ("txn_id", "交易流水号"), ("txn_id", "交易流水"), ("txn_id", "transaction id"),
    ("txn_id", "transaction_id"), ("txn_id", "txn_id"),
    ("received_on", "交易日期"), ("received_on", "日期"), ("received_on", "记账日期"), ("received_on", "date"),
    ("received_on", "value date"),
    ("amount", "金额"), ("amount", "交易金额"), ("amount", "贷方金额"), ("amount", "贷方发生额"), ("amount", "收入金额"),
    ("amount", "amount"), ("amount", "credit"),
    ("payer", "对方户名"), ("payer", "付款人"), ("payer", "付款人名称"), ("payer", "对方账户名称"),
    ("payer", "对方单位名称"), ("payer", "payer"),
    ("remittance", "附言"), ("remittance", "摘要"), ("remittance", "用途"), ("remittance", "备注"),
    ("remittance", "remittance"), ("remittance", "memo"),
    # case, blanks, '_' for ' ', full-width forms, a unit suffix
    ("txn_id", "  Transaction ID "), ("txn_id", "TXN_ID"), ("txn_id", "Transaction_Id"),
    ("received_on", "Value  Date"), ("received_on", "ＤＡＴＥ"),
    ("amount", "金额(元)"), ("amount", "交易金额（元）"), ("amount", "Amount (CNY)"), ("amount", "金额（人民币）"),
    ("amount", "credit(RMB)"),
])
def test_each_header_name_is_read(field, name):
    names = dict(_DEFAULT, **{field: name})
    header = ",".join(names[f] for f in _ORDER)
    read = read_statement(statement(ROW, header=header))
    assert read.lines == (LINE,) and read.bad == ()
    assert read.columns[field] == name.strip()


def test_columns_in_any_order_and_unknown_ones_ignored():
    header = "余额,附言,对方账号,金额,交易日期,备用,对方户名,流水号"
    row = "\"99,999.00\",GB-2026-000001,6222\u202e0000,12.30,2026-01-05,\x07,张三,T1"
    # the unknown 对方账号 holds a bidi override and 备用 a BEL: never read, never checked
    assert parse_statement(statement(row, header=header)) == ([LINE], [])


def test_the_payer_column_is_optional():
    header = "流水号,交易日期,金额,附言"
    assert only("T1,2026-01-05,12.30,GB-2026-000001", header) == BankLine(
        2, "T1", date(2026, 1, 5), D("12.30"), "", "GB-2026-000001")


@pytest.mark.parametrize("header, missing", [
    ("交易日期,金额,对方户名,附言", "no transaction id column (name it 流水号, 交易流水号, 交易流水, transaction id, "
                              "transaction_id or txn_id)"),
    ("流水号,金额,对方户名,附言", "no date column (name it 交易日期, 日期, date, 记账日期 or value date)"),
    ("流水号,交易日期,对方户名,附言", "no amount column (name it 金额, 交易金额, 贷方金额, 贷方发生额, 收入金额, amount or credit)"),
    ("流水号,交易日期,金额,对方户名", "no remittance column (name it 附言, 摘要, 用途, 备注, remittance or memo)"),
    ("交易时间,交易金额,交易附言", "no transaction id column (name it 流水号, 交易流水号, 交易流水, transaction id, "
                            "transaction_id or txn_id) and no date column (name it 交易日期, 日期, date, 记账日期 or "
                            "value date) and no remittance column (name it 附言, 摘要, 用途, 备注, remittance or memo)"),
])
def test_a_missing_required_column_is_refused_with_its_names(header, missing):
    assert refusal(statement(ROW, header=header)) == (
        f"the header (line 1) has {missing}; the header must be the file's first line")


@pytest.mark.parametrize("header, message", [
    ("流水号,交易日期,金额,交易金额,附言",
     "the header names the amount more than once ('金额' in column 3, '交易金额' in column 4): keep one"),
    ("流水号,交易日期,金额,流水号,附言",
     "the header names the transaction id more than once ('流水号' in column 1, '流水号' in column 4): keep one"),
    ("流水号,交易日期,金额,付款人,对方户名,附言",
     "the header names the payer more than once ('付款人' in column 4, '对方户名' in column 5): keep one"),
    ("流水号,交易日期,金额,交易日期,附言",  # the same date name twice: nothing to prefer
     "the header names the date more than once ('交易日期' in column 2, '交易日期' in column 4): keep one"),
    ("流水号,Amount,AMOUNT,交易日期,附言",
     "the header names the amount more than once ('Amount' in column 2, 'AMOUNT' in column 3): keep one"),
])
def test_a_column_named_twice_is_refused(header, message):
    assert refusal(statement("T1,2026-01-05,12.30,12.30,x", header=header)) == message


def test_of_two_date_columns_the_transaction_date_is_read():
    # 记账日期 (posting) comes first in the file; 交易日期 (the day the money came) is the one read
    read = read_statement(statement("T1,2026-01-06,2026-01-05,12.30,x", header="流水号,记账日期,交易日期,金额,附言"))
    assert read.lines[0].received_on == date(2026, 1, 5)
    assert read.columns["received_on"] == "交易日期"


def test_several_remittance_columns_are_read_joined():
    header = "流水号,摘要,交易日期,金额,附言,备注"
    read = read_statement(statement("T1,汇入,2026-01-05,12.30,GB-2026-000001,", header=header))
    assert read.lines[0].remittance == "汇入 | GB-2026-000001"  # the empty 备注 adds nothing
    assert read.columns["remittance"] == "摘要 | 附言 | 备注"


# --- Encodings and separators ----------------------------------------------------------------------

_CHINESE_ROW = "T1,2026年01月05日,\"1,234.56\",北京某某科技有限公司,支付GB-2026-000001服务费"
_CHINESE_LINE = BankLine(2, "T1", date(2026, 1, 5), D("1234.56"), "北京某某科技有限公司", "支付GB-2026-000001服务费")


@pytest.mark.parametrize("data, encoding", [
    (statement(_CHINESE_ROW), "utf-8"),
    (b"\xef\xbb\xbf" + statement(_CHINESE_ROW), "utf-8-sig"),
    (statement(_CHINESE_ROW, encoding="gbk"), "gb18030"),
    (statement(_CHINESE_ROW, encoding="gb2312"), "gb18030"),
    (statement(_CHINESE_ROW, encoding="gb18030"), "gb18030"),
    (statement(_CHINESE_ROW, newline="\r\n", encoding="gbk"), "gb18030"),
    (b"\x84\x31\x95\x33" + statement(_CHINESE_ROW, encoding="gb18030"), "gb18030"),  # GB18030's own BOM
])
def test_utf8_and_gb18030_are_read(data, encoding):
    read = read_statement(data)
    assert (read.lines, read.bad, read.encoding) == ((_CHINESE_LINE,), (), encoding)
    assert read.columns["txn_id"] == "流水号"  # no byte-order mark left on the first name


def test_a_name_only_gb18030_has_is_read():
    # U+20000 is four bytes in GB18030 (95 32 82 36) and not in GBK at all
    data = statement("T1,2026-01-05,12.30,\U00020000记,x", encoding="gb18030")
    assert data.count(b"\x95\x32\x82\x36") == 1
    assert read_statement(data).lines[0].payer == "\U00020000记"


def test_an_ascii_header_with_a_gbk_payer_is_gb18030():
    data = "txn_id,date,amount,payer,memo\nT1,2026-01-05,12.30,".encode() + "张三".encode("gbk") + b",x\n"
    read = read_statement(data)
    assert (read.encoding, read.lines[0].payer) == ("gb18030", "张三")


@pytest.mark.parametrize("data, message", [
    (("\ufeff" + HEADER + "\n").encode("utf-16-le"),
     "the file is UTF-16 or UTF-32 text: save it as CSV in UTF-8 or GB18030"),
    (("\ufeff" + HEADER + "\n").encode("utf-16-be"), "the file is UTF-16 text: save it as CSV in UTF-8 or GB18030"),
    (("\ufeff" + HEADER + "\n").encode("utf-32-le"),
     "the file is UTF-16 or UTF-32 text: save it as CSV in UTF-8 or GB18030"),
    (("\ufeff" + HEADER + "\n").encode("utf-32-be"), "the file is UTF-32 text: save it as CSV in UTF-8 or GB18030"),
    ("txn_id,date,amount,memo\n".encode("utf-16-le"),  # no BOM: every other byte is NUL
     "the file holds a NUL byte (line 1): it is not text; save it as CSV in UTF-8 or GB18030"),
    (b"PK\x03\x04\x14\x00\x06\x00",
     "the file is an Excel workbook (xlsx) or another zip, not CSV: save it as CSV (UTF-8)"),
    (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", "the file is an Excel 97 workbook (xls), not CSV: save it as CSV (UTF-8)"),
    (b"txn_id,date,amount,memo\nT1,2026-01-05,1.00,caf\xe9\n",  # Latin-1: E9 then a line break is no GB18030
     "the file is neither UTF-8 nor GB18030/GBK (line 2): save it as CSV in UTF-8"),
    (b"\xef\xbb\xbftxn_id,date,amount,memo\nT1,2026-01-05,1.00,\xb8\xb6\n",  # a UTF-8 BOM, then GBK's 付
     "the file starts with UTF-8's byte-order mark but is not UTF-8 (line 2): save it as CSV in UTF-8"),
    (b"txn_id,date,amount,memo\nT1,2026-01-05,1.00,a\x00b\n",
     "the file holds a NUL byte (line 2): it is not text; save it as CSV in UTF-8 or GB18030"),
])
def test_other_encodings_and_formats_are_refused(data, message):
    assert refusal(data) == message


def test_tab_separated_when_the_header_has_tabs_and_no_comma():
    data = statement("T1\t2026-01-05\t1,234.56\t张三\tGB-2026-000001", header=HEADER.replace(",", "\t"))
    read = read_statement(data)
    assert read.delimiter == "\t"
    assert read.lines == (BankLine(2, "T1", date(2026, 1, 5), D("1234.56"), "张三", "GB-2026-000001"),)


def test_a_header_with_tabs_and_commas_is_comma_separated():
    # the tab is then a blank around the first name, trimmed
    read = read_statement(statement(ROW, header="\t流水号,交易日期,金额,对方户名,附言"))
    assert (read.delimiter, read.lines) == (",", (LINE,))


# --- Fields -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, amount", [
    ("12.30", D("12.30")),
    ("12.3", D("12.30")),
    ("12", D("12.00")),
    ("0.01", D("0.01")),
    ("007.50", D("7.50")),
    ('"1,234.56"', D("1234.56")),
    ('"12,345,678.90"', D("12345678.90")),
    ('"1,000"', D("1000.00")),
    ("+12.30", D("12.30")),
    ("¥12.30", D("12.30")),
    ("￥12.30", D("12.30")),
    ('"+¥1,234.56"', D("1234.56")),
    ("\t12.30", D("12.30")),  # a tab that keeps Excel from reading the number
    ('" 12.30 "', D("12.30")),
    ("100000000.00", D("100000000.00")),  # the largest: ¥100,000,000.00
    ('"100,000,000"', D("100000000.00")),
])
def test_amounts_read(text, amount):
    line = only(f"T1,2026-01-05,{text},张三,x")
    assert isinstance(line, BankLine)
    assert line.amount == amount and line.amount.as_tuple().exponent == -2


_NOT_AN_AMOUNT = "is not an amount: write digits with at most two decimals, e.g. 1234.56 or \"1,234.56\""


@pytest.mark.parametrize("text, reason", [
    ("-12.30", "a debit, not a receipt"),
    ('"-1,234.56"', "a debit, not a receipt"),
    ("-¥5", "a debit, not a receipt"),
    ("0", "the amount is zero"),
    ("0.00", "the amount is zero"),
    ("-0.00", "the amount is zero"),
    ("", "no amount (a debit line of a statement with separate credit and debit columns? keep only receipts)"),
    ("12.345", "the amount '12.345' has more than two decimals"),
    ('"1,234.567"', "the amount '1,234.567' has more than two decimals"),
    ("100000000.01", "the amount '100000000.01' is above ¥100,000,000.00"),
    ("1e3", f"the amount '1e3' {_NOT_AN_AMOUNT}"),
    ("1E+2", f"the amount '1E+2' {_NOT_AN_AMOUNT}"),
    ("NaN", f"the amount 'NaN' {_NOT_AN_AMOUNT}"),
    ("Infinity", f"the amount 'Infinity' {_NOT_AN_AMOUNT}"),
    ("-Infinity", f"the amount '-Infinity' {_NOT_AN_AMOUNT}"),
    ("1_000", f"the amount '1_000' {_NOT_AN_AMOUNT}"),  # Decimal would take it
    ("١٢", f"the amount '١٢' {_NOT_AN_AMOUNT}"),  # Arabic-Indic digits: Decimal would take them too
    ("１２.３０", f"the amount '１２.３０' {_NOT_AN_AMOUNT}"),  # full-width digits
    ('"1,23.00"', f"the amount '1,23.00' {_NOT_AN_AMOUNT}"),  # a misplaced group
    ('"1234,567.00"', f"the amount '1234,567.00' {_NOT_AN_AMOUNT}"),
    (".50", f"the amount '.50' {_NOT_AN_AMOUNT}"),
    ("12.", f"the amount '12.' {_NOT_AN_AMOUNT}"),
    ("12.30元", f"the amount '12.30元' {_NOT_AN_AMOUNT}"),
    ("CNY12.30", f"the amount 'CNY12.30' {_NOT_AN_AMOUNT}"),
    ("¥-12.30", f"the amount '¥-12.30' {_NOT_AN_AMOUNT}"),
    ("(12.30)", f"the amount '(12.30)' {_NOT_AN_AMOUNT}"),
    ("1 234.56", f"the amount '1 234.56' {_NOT_AN_AMOUNT}"),
])
def test_amounts_refused(text, reason):
    assert only(f"T1,2026-01-05,{text},张三,x") == BadLine(2, reason)


@pytest.mark.parametrize("text, day", [
    ("2026-01-05", date(2026, 1, 5)),
    ("2026/01/05", date(2026, 1, 5)),
    ("20260105", date(2026, 1, 5)),
    ("2026年01月05日", date(2026, 1, 5)),
    ("2026/1/5", date(2026, 1, 5)),  # as Excel rewrites it
    ("2026-1-05", date(2026, 1, 5)),
    ("2026年1月5日", date(2026, 1, 5)),
    ("2028-02-29", date(2028, 2, 29)),  # a leap year
    ("2000-01-01", date(2000, 1, 1)),
    ("2099-12-31", date(2099, 12, 31)),
])
def test_dates_read(text, day):
    line = only(f"T1,{text},12.30,张三,x")
    assert isinstance(line, BankLine) and line.received_on == day


_FORMS = "write 2026-01-05, 2026/01/05, 20260105 or 2026年01月05日"


@pytest.mark.parametrize("text, reason", [
    ("", "no date"),
    ("2026-02-30", "the date '2026-02-30' does not exist"),
    ("2026-13-01", "the date '2026-13-01' does not exist"),
    ("20260229", "the date '20260229' does not exist"),  # 2026 is no leap year
    ("2026年00月05日", "the date '2026年00月05日' does not exist"),
    ("1999-12-31", "the date '1999-12-31' is not in the years 2000 to 2099"),
    ("2100-01-01", "the date '2100-01-01' is not in the years 2000 to 2099"),
    ("05/01/2026", f"the date '05/01/2026' is not a date: {_FORMS}"),
    ("2026.01.05", f"the date '2026.01.05' is not a date: {_FORMS}"),
    ("2026-01-05 10:23:11", f"the date '2026-01-05 10:23:11' is not a date: {_FORMS}"),
    ("2026-01-05T00:00", f"the date '2026-01-05T00:00' is not a date: {_FORMS}"),
    ("2026015", f"the date '2026015' is not a date: {_FORMS}"),
    ("2026/01-05", f"the date '2026/01-05' is not a date: {_FORMS}"),
    ("２０２６-01-05", f"the date '２０２６-01-05' is not a date: {_FORMS}"),
    ("46027", f"the date '46027' is not a date: {_FORMS}"),  # Excel's serial day number
])
def test_dates_refused(text, reason):
    assert only(f"T1,{text},12.30,张三,x") == BadLine(2, reason)


_TXN_RULE = "is not 1 to 58 ASCII letters, digits, '.', '_' or '-'"


@pytest.mark.parametrize("text, reason", [
    ("", "no transaction id"),
    ("T 1", f"the transaction id 'T 1' {_TXN_RULE}"),
    ("T/1", f"the transaction id 'T/1' {_TXN_RULE}"),
    ("流水1", f"the transaction id '流水1' {_TXN_RULE}"),
    ("Ｔ1", f"the transaction id 'Ｔ1' {_TXN_RULE}"),
    ("x" * 59, f"the transaction id '{'x' * 40}…' {_TXN_RULE}"),
    ('="2026010500001"', f"the transaction id '=\"2026010500001\"' {_TXN_RULE}"),
])
def test_transaction_ids_refused(text, reason):
    field = '"' + text.replace('"', '""') + '"'
    assert only(f"{field},2026-01-05,12.30,张三,x") == BadLine(2, reason)


@pytest.mark.parametrize("text", ["T1", "x" * 58, "2026010500001", "a.b_c-d", "-1", ".x"])
def test_transaction_ids_read(text):
    line = only(f"{text},2026-01-05,12.30,张三,x")
    assert isinstance(line, BankLine) and line.txn_id == text


# --- Lines --------------------------------------------------------------------------------------

@pytest.mark.parametrize("row, reason", [
    ("T1,2026-01-05,12.30,张三", "4 fields where the header has 5"),
    ("T1,2026-01-05,12.30,张三,x,", "6 fields where the header has 5"),
    ("T1,2026-01-05,1,234.56,张三,x", "6 fields where the header has 5"),  # an unquoted thousands separator
    ('T1,2026-01-05,12.30,"张三,x', "not a CSV line: field 4 opens a quote and does not close it"),
    ('T1,2026-01-05,12.30,"张三"x,x', "not a CSV line: field 4 has text after its closing quote"),
    ('T1,2026-01-05,12.30,"张三" ,x', "not a CSV line: field 4 has text after its closing quote"),
    ('T1,2026-01-05,12.30,张"三,x', "not a CSV line: field 4 holds a quote but is not quoted: quote it and double its quotes"),
    ("T1,2026-01-05,12.30,张三,\x07ring", "the remittance holds the control or format character U+0007"),
    ("T1,2026-01-05,12.30,张三,\x1b[31mred", "the remittance holds the control or format character U+001B"),
    ("T1,2026-01-05,12.30,张三,a\rb", "the remittance holds the control or format character U+000D"),
    ("T1,2026-01-05,12.30,张三,a\tb", "the remittance holds the control or format character U+0009"),
    ("T1,2026-01-05,12.30,张三,\u202eGB-2026-000001", "the remittance holds the control or format character U+202E"),
    ("T1,2026-01-05,12.30,\u2067acme\u2069,x", "the payer holds the control or format character U+2067"),
    ("T1,2026-01-05,12.30,张三,ac\u200bme", "the remittance holds the control or format character U+200B"),
    ("T1,2026-01-05,12.30,张三,a\u2028b", "the remittance holds the control or format character U+2028"),
    ("T1,2026-01-05,12.30,张三,a\x85b", "the remittance holds the control or format character U+0085"),
    ("T1\u202e,2026-01-05,12.30,张三,x", "the transaction id holds the control or format character U+202E"),
    ("T1,2026-01-05\x00,12.30,张三,x", None),  # a NUL: the whole file is refused (below)
    ("T1,2026-01-05,12.30,张三," + "x" * 501, "the remittance is longer than 500 characters (501)"),
    ("T1,2026-01-05,12.30," + "张" * 501 + ",x", "the payer is longer than 500 characters (501)"),
    ("T1,2026-01-05,12.30,张三," + "x" * 1_000_000, "the remittance is longer than 500 characters (1000000)"),
    # every problem, joined
    (",2026-02-30,-5,张三,x", "no transaction id; the date '2026-02-30' does not exist; a debit, not a receipt"),
    ("T1,\u202e2026-01-05,12.3x,张三,x\x07",
     "the date holds the control or format character U+202E; the remittance holds the control or format "
     "character U+0007; the amount '12.3x' " + _NOT_AN_AMOUNT),
])
def test_bad_lines(row, reason):
    if reason is None:
        assert "NUL byte" in refusal(statement(row))
        return
    assert only(row) == BadLine(2, reason)


def test_a_field_of_500_characters_is_read():
    line = only("T1,2026-01-05,12.30," + "张" * 500 + "," + "x" * 500)
    assert isinstance(line, BankLine) and (len(line.payer), len(line.remittance)) == (500, 500)


def test_formulas_are_text():
    line = only('T1,2026-01-05,12.30,"=HYPERLINK(""x"")",=cmd|\' /C calc\'!A0')
    assert line == BankLine(2, "T1", date(2026, 1, 5), D("12.30"), '=HYPERLINK("x")', "=cmd|' /C calc'!A0")
    for text in ("+1+1", "-2+3", "@SUM(A1)"):
        assert only(f"T1,2026-01-05,12.30,张三,{text}").remittance == text


def test_blank_lines_and_empty_rows_are_skipped_with_their_numbers_kept():
    data = statement("", "T1,2026-01-05,12.30,张三,a", "   ", ",,,,", "\t", " , , ,\u3000, ", "T2,2026-01-06,1,,", "")
    read = read_statement(data)
    assert read.lines == (BankLine(3, "T1", date(2026, 1, 5), D("12.30"), "张三", "a"),
                          BankLine(8, "T2", date(2026, 1, 6), D("1.00"), "", ""))
    assert (read.bad, read.skipped) == ((), ())


def test_crlf_line_numbers():
    data = statement("T1,2026-01-05,12.30,张三,a", "", "T2,2026-01-06,bad,,", newline="\r\n")
    assert parse_statement(data) == (
        [BankLine(2, "T1", date(2026, 1, 5), D("12.30"), "张三", "a")],
        [BadLine(4, f"the amount 'bad' {_NOT_AN_AMOUNT}")])


def test_a_broken_quote_spoils_its_line_only():
    data = statement('T1,2026-01-05,12.30,"张三,a', "T2,2026-01-06,1.00,李四,b")
    assert parse_statement(data) == (
        [BankLine(3, "T2", date(2026, 1, 6), D("1.00"), "李四", "b")],
        [BadLine(2, "not a CSV line: field 4 opens a quote and does not close it")])


def test_a_quote_never_spans_lines():
    # a remittance with a line break, as a spreadsheet would quote it: two bad lines, never one joined field
    data = statement('T1,2026-01-05,12.30,张三,"first', 'second"', "T2,2026-01-06,1.00,李四,b")
    assert parse_statement(data) == (
        [BankLine(4, "T2", date(2026, 1, 6), D("1.00"), "李四", "b")],
        [BadLine(2, "not a CSV line: field 5 opens a quote and does not close it"),
         BadLine(3, "not a CSV line: field 1 holds a quote but is not quoted: quote it and double its quotes")])


def test_quotes_and_doubled_quotes():
    line = only('"T1","2026-01-05","12.30","张""三""","a,b"')
    assert line == BankLine(2, "T1", date(2026, 1, 5), D("12.30"), '张"三"', "a,b")


@pytest.mark.parametrize("row", [
    ",合计,\"1,246.86\",,",
    "合计,,\"1,246.86\",,",
    "合计,,,,",
    ",总计：,\"1,246.86\",,",
    ",本页合计,1.00,,",
    ",小计,1.00,,",
    "Total:,,1.00,,",
    "TOTALS,,1.00,,",
    "合计,1.00",  # fewer fields: still a totals row
])
def test_totals_rows_are_skipped_and_listed(row):
    read = read_statement(statement("T1,2026-01-05,12.30,张三,a", row))
    assert (read.lines, read.bad, read.skipped) == (
        (BankLine(2, "T1", date(2026, 1, 5), D("12.30"), "张三", "a"),), (), (3,))


def test_a_line_with_a_transaction_id_is_never_a_totals_row():
    header = "附言,流水号,交易日期,金额"
    read = read_statement(statement("合计,T9,2026-01-05,5.00", "总计,,2026-01-05,5", header=header))
    assert read.lines == (BankLine(2, "T9", date(2026, 1, 5), D("5.00"), "", "合计"),)
    assert read.skipped == (3,)


def test_a_repeated_transaction_id_makes_the_later_lines_bad():
    data = statement(
        "T1,2026-01-05,12.30,张三,a",
        "T2,2026-01-05,1.00,张三,b",
        "T1,2026-01-06,12.30,张三,a",   # the same transfer exported twice
        "t1,2026-01-06,3.00,张三,c",    # ids are compared exactly
        "T2,2026-01-07,-1,张三,b",      # repeated and a debit: both said
        "T1,2026-01-08,5.00,张三,d",
        "T3,bad,5.00,张三,e",
        "T3,2026-01-08,5.00,张三,e",    # the first T3 is bad: this one still repeats it
    )
    assert parse_statement(data) == (
        [BankLine(2, "T1", date(2026, 1, 5), D("12.30"), "张三", "a"),
         BankLine(3, "T2", date(2026, 1, 5), D("1.00"), "张三", "b"),
         BankLine(5, "t1", date(2026, 1, 6), D("3.00"), "张三", "c")],
        [BadLine(4, "the transaction id T1 repeats line 2"),
         BadLine(6, "a debit, not a receipt; the transaction id T2 repeats line 3"),
         BadLine(7, "the transaction id T1 repeats line 2"),
         BadLine(8, f"the date 'bad' is not a date: {_FORMS}"),
         BadLine(9, "the transaction id T3 repeats line 8")])


def test_a_header_alone_is_an_empty_statement():
    assert parse_statement(statement()) == ([], [])
    assert parse_statement(HEADER.encode()) == ([], [])  # without a final line break


# --- The file as a whole --------------------------------------------------------------------------

@pytest.mark.parametrize("data, message", [
    (b"", "line 1 is empty: the first line must be the header, e.g. 流水号,交易日期,金额,对方户名,附言"),
    (b"\n" + statement(ROW), "line 1 is empty: the first line must be the header, e.g. 流水号,交易日期,金额,对方户名,附言"),
    (b" \t \r\n", "line 1 is empty: the first line must be the header, e.g. 流水号,交易日期,金额,对方户名,附言"),
    (statement(ROW, newline="\r"),
     "the lines end in a bare CR (old Mac line ends): save the file with LF or CRLF line ends"),
    (statement(ROW, header='流水号,"交易日期,金额,对方户名,附言'),
     "the header (line 1) is not CSV: field 2 opens a quote and does not close it"),
    ("账号：6222 0000 1111\n".encode() + statement(ROW),  # a preamble above the header
     "the header (line 1) has no transaction id column (name it 流水号, 交易流水号, 交易流水, transaction id, "
     "transaction_id or txn_id) and no date column (name it 交易日期, 日期, date, 记账日期 or value date) and no amount "
     "column (name it 金额, 交易金额, 贷方金额, 贷方发生额, 收入金额, amount or credit) and no remittance column (name it "
     "附言, 摘要, 用途, 备注, remittance or memo); the header must be the file's first line"),
])
def test_files_refused(data, message):
    assert refusal(data) == message


def test_invalid_statement_is_a_schema_error():
    assert issubclass(InvalidStatement, SchemaError)


def test_ten_mib_is_read_and_one_byte_more_is_refused():
    head = statement(ROW)
    pad = b" " * (MAX_BYTES - len(head) - 1) + b"\n"  # one blank line of spaces: skipped
    assert len(head + pad) == 10 * 1024 * 1024
    assert parse_statement(head + pad) == ([LINE], [])
    assert refusal(head + b" " + pad) == "the file is larger than 10 MiB (10,485,761 bytes): split it into several files"


def test_a_hundred_thousand_lines_are_read_and_one_more_is_refused():
    # the header and 99,999 blank lines: 100,000 lines
    assert parse_statement((HEADER + "\n" * 100_000).encode()) == ([], [])
    assert refusal((HEADER + "\n" * 100_001).encode()) == (
        "the file has more than 100,000 lines (100,001): split it into several files")
    # a last line without its line break counts
    assert refusal((HEADER + "\n" * 100_000 + "x").encode()) == (
        "the file has more than 100,000 lines (100,001): split it into several files")


@pytest.mark.parametrize("line", [
    '"' + '""' * 1_000_000,             # a quote opened and never closed, a million doubled quotes inside
    '"' + 'a""' * 500_000 + ',',
    ",".join(["x"] * 1_000_000),        # a million fields
])
def test_hostile_lines_take_linear_time(line):
    started = time.perf_counter()
    lines, bad = parse_statement(statement(line))
    assert lines == [] and len(bad) == 1
    assert time.perf_counter() - started < 5  # ≈ 0.1 s; a backtracking quote would take hours


# --- Matching ------------------------------------------------------------------------------------

INVOICES = {
    "GB-2026-000003": "acme",
    "GB-2026-000004": "acme",
    "GB-2026-000007": "beta",
    "GB-2025-000120": "acme.cn",
}
TENANTS = {"acme", "beta", "acme.cn", "Gamma_1"}


def received(remittance: str, payer: str = "") -> BankLine:
    return BankLine(2, "T1", date(2026, 1, 5), D("100.00"), payer, remittance)


@pytest.mark.parametrize("remittance, tenant, invoices, how, why", [
    # by invoice number
    ("GB-2026-000003", "acme", ("GB-2026-000003",), "invoice", "remittance names GB-2026-000003 of acme"),
    ("支付GB-2026-000003服务费", "acme", ("GB-2026-000003",), "invoice", "remittance names GB-2026-000003 of acme"),
    ("GB-2026-000004,GB-2026-000003 GB-2026-000004", "acme", ("GB-2026-000004", "GB-2026-000003"), "invoice",
     "remittance names GB-2026-000004 and GB-2026-000003 of acme"),
    ("inv GB-2026-000003 for acme", "acme", ("GB-2026-000003",), "invoice",
     "remittance names GB-2026-000003 of acme"),  # its own tenant beside it: no contradiction
    ("gb-2026-000003", "acme", ("GB-2026-000003",), "invoice", "remittance names GB-2026-000003 of acme"),
    ("ＧＢ－２０２６－０００００３", "acme", ("GB-2026-000003",), "invoice",
     "remittance names GB-2026-000003 of acme"),  # full-width, as a Chinese input method types it
    ("发票GB-2026-000003.", "acme", ("GB-2026-000003",), "invoice", "remittance names GB-2026-000003 of acme"),
    ("(GB-2025-000120)", "acme.cn", ("GB-2025-000120",), "invoice", "remittance names GB-2025-000120 of acme.cn"),
    ("GB-2026-000003 GB-2026-999999", "acme", ("GB-2026-000003",), "invoice",
     "remittance names GB-2026-000003 of acme; GB-2026-999999 is not an issued invoice"),
    # ambiguous invoices
    ("GB-2026-000003 GB-2026-000007", None, (), "unmatched",
     "names invoices of tenants acme (GB-2026-000003) and beta (GB-2026-000007): ambiguous"),
    ("GB-2026-000007 GB-2026-000003 GB-2026-000004", None, (), "unmatched",
     "names invoices of tenants beta (GB-2026-000007) and acme (GB-2026-000003, GB-2026-000004): ambiguous"),
    ("beta pays GB-2026-000003", None, (), "unmatched",
     "names GB-2026-000003 of acme but also tenant beta: ambiguous"),
    # unknown invoice numbers
    ("GB-2026-999999", None, (), "unmatched",
     "GB-2026-999999 is not an issued invoice and no registered tenant id is in the remittance"),
    ("GB-2026-999999 GB-2024-000001", None, (), "unmatched",
     "GB-2026-999999 and GB-2024-000001 are not issued invoices and no registered tenant id is in the remittance"),
    ("GB-2026-999999 acme", "acme", (), "tenant", "remittance names tenant acme; GB-2026-999999 is not an issued invoice"),
    # not an invoice number: inside a longer token, or other digits
    ("GB-2026-0000031", None, (), "unmatched", "no invoice number or registered tenant id in the remittance"),
    ("XGB-2026-000003", None, (), "unmatched", "no invoice number or registered tenant id in the remittance"),
    ("GB-2026-000003-1", None, (), "unmatched", "no invoice number or registered tenant id in the remittance"),
    ("GB-2026-000003a", None, (), "unmatched", "no invoice number or registered tenant id in the remittance"),
    ("GB_2026_000003", None, (), "unmatched", "no invoice number or registered tenant id in the remittance"),
    ("GB-26-000003", None, (), "unmatched", "no invoice number or registered tenant id in the remittance"),
    ("GB-٢٠٢٦-٠٠٠٠٠٣", None, (), "unmatched", "no invoice number or registered tenant id in the remittance"),
    # by tenant id
    ("acme", "acme", (), "tenant", "remittance names tenant acme"),
    ("acme公司充值", "acme", (), "tenant", "remittance names tenant acme"),
    ("top-up for acme.", "acme", (), "tenant", "remittance names tenant acme"),
    ("acme.cn 充值", "acme.cn", (), "tenant", "remittance names tenant acme.cn"),
    ("Gamma_1", "Gamma_1", (), "tenant", "remittance names tenant Gamma_1"),
    ("acme acme", "acme", (), "tenant", "remittance names tenant acme"),
    ("=acme|' /C calc'!A0", "acme", (), "tenant", "remittance names tenant acme"),  # text, never run
    # never a part of a word, never another case
    ("acme2", None, (), "unmatched", "no invoice number or registered tenant id in the remittance"),
    ("xacme", None, (), "unmatched", "no invoice number or registered tenant id in the remittance"),
    ("acme_ltd", None, (), "unmatched", "no invoice number or registered tenant id in the remittance"),
    ("acme-gpu", None, (), "unmatched", "no invoice number or registered tenant id in the remittance"),
    ("ACME", None, (), "unmatched", "no invoice number or registered tenant id in the remittance"),
    ("gamma_1", None, (), "unmatched", "no invoice number or registered tenant id in the remittance"),
    ("acme.cn.hk", None, (), "unmatched", "no invoice number or registered tenant id in the remittance"),
    ("ａｃｍｅ", "acme", (), "tenant", "remittance names tenant acme"),  # full-width letters are the same letters
    # ambiguous tenants
    ("acme and beta", None, (), "unmatched", "names tenants acme and beta: ambiguous"),
    ("acme beta Gamma_1", None, (), "unmatched", "names tenants acme, beta and Gamma_1: ambiguous"),
    ("acme beta GB-2026-999999", None, (), "unmatched",
     "names tenants acme and beta: ambiguous; GB-2026-999999 is not an issued invoice"),
    # nothing
    ("货款", None, (), "unmatched", "no invoice number or registered tenant id in the remittance"),
    ("", None, (), "unmatched", "the remittance is empty"),
])
def test_matching(remittance, tenant, invoices, how, why):
    line = received(remittance)
    assert match_lines([line], INVOICES, TENANTS) == [Match(line, tenant, invoices, how, why)]


def test_a_tenant_id_ending_in_a_full_stop_is_ambiguous_with_the_one_without():
    line = received("acme.")
    assert match_lines([line], {}, {"acme", "acme."}) == [
        Match(line, None, (), "unmatched", "names tenants acme. and acme: ambiguous")]


def test_the_payer_is_never_matched_on():
    line = received("货款", payer="acme")
    assert match_lines([line], INVOICES, TENANTS) == [
        Match(line, None, (), "unmatched", "no invoice number or registered tenant id in the remittance")]


def test_matches_keep_the_lines_order():
    lines = [BankLine(n, f"T{n}", date(2026, 1, 5), D("1.00"), "", text)
             for n, text in ((2, "beta"), (3, "GB-2026-000003"), (4, "x"))]
    assert [(m.line.line_no, m.tenant, m.how) for m in match_lines(lines, INVOICES, TENANTS)] == [
        (2, "beta", "tenant"), (3, "acme", "invoice"), (4, None, "unmatched")]


def test_a_statement_read_and_matched():
    data = statement(
        "2026010500001,2026-01-05,\"1,130.00\",某某科技,付GB-2026-000003",
        "2026010500002,2026/01/05,500,某某网络,beta 预充值",
        "2026010500003,20260106,-20.00,银行,手续费",
        "2026010500004,2026年01月06日,88.00,张三,货款",
        ",合计,\"1,698.00\",,",
        encoding="gbk")
    lines, bad = parse_statement(data)
    assert bad == [BadLine(4, "a debit, not a receipt")]
    assert [(m.line.txn_id, m.line.amount, m.tenant, m.invoices, m.how) for m in match_lines(lines, INVOICES, TENANTS)] == [
        ("2026010500001", D("1130.00"), "acme", ("GB-2026-000003",), "invoice"),
        ("2026010500002", D("500.00"), "beta", (), "tenant"),
        ("2026010500004", D("88.00"), None, (), "unmatched"),
    ]
