"""The buyer block from the registry (issue 23, item 2; migration 0019): a tenant's legal
name, tax id, address and e-mail, checked before anything is written, stored, read back,
changed by `update_tenant` / `gpubill tenant update`, and refused in one printable line.

The valid 统一社会信用代码 used throughout, 91350100M000100Y43, checked by hand
(billing_rules/parties.py: values 0-9, A=10 … M=21 … Y=30 without I O S V Z; weights 3^i mod 31):

    chars    9  1  3  5  0  1  0  0  M   0  0  0  1  0  0  Y   4
    weights  1  3  9 27 19 26 16 17 20  29 25 13  8 24 10 30  28
    Σ = 9 + 3 + 27 + 135 + 26 + 21×20 + 8 + 30×30 + 4×28 = 1640;  1640 mod 31 = 28
    check = (31 − 28) mod 31 = 3  → the 18th character is '3' (…Y44 fails, …Y43 holds)
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from billing.errors import NotFound
from billing.tenants import (
    ACTIVE,
    COLUMNS,
    SUSPENDED,
    InvalidTenant,
    TenantExists,
    add_tenant,
    check_address,
    check_buyer,
    check_email,
    check_legal_name,
    check_tax_id,
    find_tenant,
    list_tenants,
    set_status,
    update_tenant,
    utc_ms,
)
from tests.chdb_template import migrated_dsn
from tests.unit.cli_run import run_cli
from tests.unit.test_tenants import assert_one_printable_line
from warehouse import migrations
from warehouse.connection import open_database

USCC = "91350100M000100Y43"
BUYER = {"legal_name": "福州示例科技有限公司", "tax_id": USCC,
         "address": "福建省福州市鼓楼区示例路 1 号", "email": "billing@example.com.cn"}


# -------------------------------------------------------------------------- checks (pure)


@pytest.mark.parametrize("value, stored", [
    (USCC, USCC),
    (f"  {USCC}\n", USCC),  # surrounding whitespace dropped, nothing else
    ("DE123456789", "DE123456789"),  # a VAT number: not the USCC shape, no check character asked
    ("GB-123-4567", "GB-123-4567"),
    ("1234", "1234"),
    ("9" * 40, "9" * 40),
    ("", ""),  # not given
])
def test_a_tax_id_is_kept_as_given(value, stored):
    assert check_tax_id(value) == stored


@pytest.mark.parametrize("value, reason", [
    ("91350100M000100Y44", "fails its check character: the 18th should be '3'"),
    ("9135010OM000100Y43", "never uses: O"),  # the letter O for a zero
    # never upper-cased silently: the operator says which code is meant
    ("91350100m000100y43", "lower-case letters: give it in upper case, 91350100M000100Y43"),
    ("de123456789", "lower-case letters"),
    ("９１３５０１００Ｍ０００１００Ｙ４３", r"U\+FF19 \(FULLWIDTH DIGIT NINE\) at character 1"),
    ("GB 123 4567", r"U\+0020 \(SPACE\) at character 3"),
    ("GB\u202e1234", r"U\+202E \(RIGHT-TO-LEFT OVERRIDE\)"),
    ("GB/1234", r"U\+002F \(SOLIDUS\)"),
    ("ab1", "3 characters long: 4 to 40"),
    ("9" * 41, "41 characters long: 4 to 40"),
    ("-1234", "begins or ends with '-'"),
])
def test_a_tax_id_that_may_not_be_stored_is_refused_in_one_printable_line(value, reason):
    with pytest.raises(InvalidTenant, match=reason) as refused:
        check_tax_id(value)
    assert_one_printable_line(str(refused.value))


@pytest.mark.parametrize("value, stored", [
    ("billing@example.com.cn", "billing@example.com.cn"),
    (" Finance.Team+inv@Example.co.uk ", "Finance.Team+inv@Example.co.uk"),  # blanks dropped, case kept
    ("a@b.xn--fiqs8s", "a@b.xn--fiqs8s"),  # an internationalised top-level domain in its xn-- form
    ("", ""),
])
def test_an_email_is_one_plain_address(value, stored):
    assert check_email(value) == stored


@pytest.mark.parametrize("value, reason", [
    ("a@b.cn\nBcc: x@y.cn", r"U\+000A \(a control character\) at character 7"),  # header injection
    ("a@b.cn\r", r"U\+000D"),
    ("a@b.cn\n", r"U\+000A"),  # not stripped: a line break in an address is noticed
    ("a@@b.cn", "has 2 '@'"),
    ("a@b@c.cn", "has 2 '@'"),
    ("a@b.cn,c@d.cn", "has 2 '@'"),  # a list is not one address
    ("billing.example.cn", "has 0 '@'"),
    ('"a b"@b.cn', r"U\+0020 \(SPACE\)"),
    ('"ab"@b.cn', "no quotes, angle brackets"),
    ("<a@b.cn>", "no quotes, angle brackets"),
    ("a..b@b.cn", "dot-separated words"),
    ("ä@b.cn", r"U\+00E4"),
    ("a@例子.cn", r"U\+4F8B"),
    ("a@localhost", "a domain such as example.com"),
    ("a@-b.cn", "a domain such as example.com"),
    ("a@b.c", "a domain such as example.com"),
    ("a" * 65 + "@b.cn", "1-64 letters"),
    # 8 + 1 + 4 × (60 + 1) + 2 = 255 characters, each part within its own limit
    ("a" * 8 + "@" + "".join(c * 60 + "." for c in "bcde") + "cn", "255 characters long: at most 254"),
])
def test_an_email_that_is_not_one_plain_address_is_refused_in_one_printable_line(value, reason):
    with pytest.raises(InvalidTenant, match=reason) as refused:
        check_email(value)
    assert_one_printable_line(str(refused.value))


def test_legal_name_and_address_are_checked_like_a_display_name_and_bounded():
    assert check_legal_name("  Acme GmbH ") == "Acme GmbH" and check_legal_name("") == ""
    assert check_legal_name("x" * 200) == "x" * 200 and check_address("y" * 300) == "y" * 300
    assert check_legal_name("شركة بيتا") == "شركة بيتا"  # right to left by itself, no override needed
    for check, value, reason in [
        (check_legal_name, "Acme\u202eCorp", r"legal name has U\+202E \(RIGHT-TO-LEFT OVERRIDE\) at character 5"),
        (check_legal_name, "Acme\u200bCorp", r"U\+200B"),
        (check_legal_name, "x" * 201, "legal name is 201 characters long: at most 200"),
        (check_address, "Road 1\nCity", r"address has U\+000A"),  # one line on the invoice
        (check_address, "a\u2066b", r"U\+2066"),
        (check_address, "y" * 301, "address is 301 characters long: at most 300"),
    ]:
        with pytest.raises(InvalidTenant, match=reason) as refused:
            check(value)
        assert_one_printable_line(str(refused.value))


def test_check_buyer_checks_the_given_fields_only():
    assert check_buyer(legal_name=" X ", tax_id=None, email="a@b.cn") == {"legal_name": "X", "email": "a@b.cn"}
    with pytest.raises(TypeError):
        check_buyer(phone="1")


# -------------------------------------------------------------------------- the registry


@pytest.fixture
def db(tmp_path):
    with open_database(migrated_dsn(tmp_path / "ch")) as database:
        yield database


def rows(db) -> list[tuple]:
    """Every row of the registry as stored (not only the latest), oldest first; times in UTC."""
    return [tuple(utc_ms(value) if isinstance(value, datetime) else value for value in row)
            for row in db.query(f"SELECT {', '.join(COLUMNS)} FROM tenants ORDER BY tenant, updated_at")]


def test_the_buyer_fields_round_trip_through_the_database(db):
    at = datetime(2026, 3, 1, 8, tzinfo=UTC)
    added, created = add_tenant(db, "acme", "Acme", note="signed", now=at, **BUYER)
    assert created and {field: getattr(added, field) for field in BUYER} == BUYER
    assert find_tenant(db, "acme") == added and list_tenants(db) == [added]
    assert rows(db) == [("acme", "Acme", ACTIVE, at, at, "signed", *BUYER.values())]


def test_a_row_from_before_the_migration_reads_empty_buyer_fields(tmp_path):
    old_columns = ("tenant", "display_name", "status", "created_at", "updated_at", "note")
    at = datetime(2026, 1, 1, tzinfo=UTC)
    with open_database(f"chdb://{tmp_path / 'ch'}", migrate=False) as database:
        buyer = "0019_tenant_buyer.sql"
        for _, name, sql in migrations.migrations():
            if name < buyer:  # the schema as it was
                for statement in migrations.split_statements(sql):
                    database.command(statement)
        database.insert("tenants", [("old", "Old", ACTIVE, at, at, "")], old_columns)
        (_, _, sql), = [m for m in migrations.migrations() if m[1] == buyer]
        for statement in migrations.split_statements(sql):
            database.command(statement)
        old = find_tenant(database, "old")
        assert (old.display_name, old.legal_name, old.tax_id, old.address, old.email) == ("Old", "", "", "", "")


def test_add_is_idempotent_and_refuses_another_buyer_without_writing(db):
    at = datetime(2026, 3, 1, tzinfo=UTC)
    added, _ = add_tenant(db, "acme", "Acme", now=at, **BUYER)
    assert add_tenant(db, "acme", "Acme", now=at + timedelta(days=1), **BUYER) == (added, False)
    # the buyer not stated: the same add (provisioning re-run by name only)
    assert add_tenant(db, "acme", "Acme", now=at + timedelta(days=1)) == (added, False)
    with pytest.raises(TenantExists, match="acme is already registered with another tax id, e-mail; it was not "
                                           r"changed \(change it with `gpubill tenant update acme`\)"):
        add_tenant(db, "acme", "Acme", tax_id="DE123456789", email="other@example.com")
    with pytest.raises(InvalidTenant, match="fails its check character"):
        add_tenant(db, "beta", "Beta", tax_id="91350100M000100Y44")
    assert rows(db) == [("acme", "Acme", ACTIVE, at, at, "", *BUYER.values())]


def test_update_rewrites_the_row_later_keeping_status_creation_and_what_is_not_given(db):
    at = datetime(2026, 3, 1, tzinfo=UTC)
    added, _ = add_tenant(db, "acme", "Acme", note="signed", now=at)
    set_status(db, "acme", SUSPENDED, now=at)
    suspended = find_tenant(db, "acme")

    # at the same instant as the suspension
    updated, changed = update_tenant(db, "acme", legal_name=" 福州示例科技有限公司 ", tax_id=USCC, now=at)
    assert changed and (updated.legal_name, updated.tax_id, updated.address, updated.email) == (
        "福州示例科技有限公司", USCC, "", "")
    assert (updated.display_name, updated.status, updated.created_at, updated.note) == ("Acme", SUSPENDED, at, "signed")
    assert updated.updated_at == suspended.updated_at + timedelta(milliseconds=1)  # strictly later: it wins
    assert find_tenant(db, "acme") == updated

    renamed, changed = update_tenant(db, "acme", display_name="Acme Fuzhou", email="ap@example.cn", tax_id="",
                                     note="ticket 9", now=at + timedelta(days=1))
    assert changed and (renamed.display_name, renamed.email, renamed.tax_id, renamed.legal_name, renamed.note) == (
        "Acme Fuzhou", "ap@example.cn", "", "福州示例科技有限公司", "ticket 9")  # '' clears, None keeps
    resumed, _ = set_status(db, "acme", ACTIVE, now=at + timedelta(days=2))
    # a status change keeps the buyer
    assert (resumed.email, resumed.legal_name) == ("ap@example.cn", "福州示例科技有限公司")
    latest = rows(db)[-1]  # the whole row written again: the latest one is the tenant
    assert latest == tuple(getattr(resumed, column) for column in COLUMNS) and find_tenant(db, "acme") == resumed


def test_update_changes_nothing_when_nothing_differs(db):
    at = datetime(2026, 3, 1, tzinfo=UTC)
    added, _ = add_tenant(db, "acme", "Acme", now=at, **BUYER)
    assert update_tenant(db, "acme", tax_id=f" {USCC} ", display_name="Acme", note="again") == (added, False)
    assert update_tenant(db, "acme") == (added, False)
    assert rows(db) == [("acme", "Acme", ACTIVE, at, at, "", *BUYER.values())]


def test_update_of_an_unregistered_id_or_with_a_refused_value_writes_nothing(db):
    at = datetime(2026, 3, 1, tzinfo=UTC)
    add_tenant(db, "acme", "Acme", now=at, **BUYER)
    with pytest.raises(NotFound, match="tenant ghost is not registered; register it with `gpubill tenant add ghost"):
        update_tenant(db, "ghost", tax_id=USCC)
    for fields in ({"tax_id": "91350100m000100y43"}, {"legal_name": "Acme\u202eCorp"}, {"email": "a@b.cn\nBcc: c@d.cn"},
                   {"email": "a@@b.cn"}, {"address": "y" * 301}, {"display_name": ""}):
        with pytest.raises(InvalidTenant):
            update_tenant(db, "acme", **fields)
    with pytest.raises(InvalidTenant):
        update_tenant(db, "../acme", tax_id=USCC)
    assert rows(db) == [("acme", "Acme", ACTIVE, at, at, "", *BUYER.values())]


# -------------------------------------------------------------------------- the command line


@pytest.fixture
def cli_env(tmp_path, monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "300")
    return tmp_path


def one_error_line(error: str) -> str:
    lines = [line for line in error.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), error
    assert_one_printable_line(lines[0])
    return lines[0]


@pytest.mark.parametrize("args, fragment", [
    (["add", "acme", "--name", "Acme", "--tax-id", "91350100M000100Y44"], "the 18th should be '3'"),
    (["add", "acme", "--name", "Acme", "--tax-id", "91350100m000100Y43"], "lower-case letters"),
    (["add", "acme", "--name", "Acme", "--tax-id", "9" * 41], "41 characters long"),
    (["add", "acme", "--name", "Acme", "--legal-name", "Acme\u202eCorp"],
     "legal name has U+202E (RIGHT-TO-LEFT OVERRIDE)"),
    (["add", "acme", "--name", "Acme", "--legal-name", "x" * 201], "legal name is 201 characters long"),
    (["add", "acme", "--name", "Acme", "--address", "y" * 301], "address is 301 characters long"),
    (["add", "acme", "--name", "Acme", "--email", "a@b.cn\nBcc: c@d.cn"], "U+000A (a control character)"),
    (["add", "acme", "--name", "Acme", "--email", "a@b@c.cn"], "has 2 '@'"),
    (["update", "acme", "--tax-id", "91350100M000100Y44"], "fails its check character"),
    (["update", "acme", "--legal-name", "Acme\u202eCorp"], "RIGHT-TO-LEFT OVERRIDE"),
    (["update", "acme", "--email", "a@b.cn\r\nX: y"], "U+000D"),
    (["update", "acme", "--email", "a@@b.cn"], "has 2 '@'"),
    (["update", "acme", "--name", ""], "display name is empty"),
    (["update", "acme"], "nothing to update: give --name, --legal-name, --tax-id, --address or --email"),
    (["update", "a/b", "--tax-id", USCC], "tenant id 'a/b'"),
])
def test_the_command_line_refuses_a_buyer_field_in_one_line_before_opening_anything(
        args, fragment, cli_env, monkeypatch, capsys):
    monkeypatch.setenv("GPUBILL_CLICKHOUSE", f"chdb://{cli_env / 'never'}")
    code, out, error = run_cli(monkeypatch, capsys, "tenant", *args)
    assert code == 1 and fragment in one_error_line(error) and out == ""
    assert not (cli_env / "never").exists()  # refused before the database was opened


def test_the_commands_add_update_and_list_the_buyer(cli_env, monkeypatch, capsys):
    monkeypatch.setenv("GPUBILL_CLICKHOUSE", migrated_dsn(cli_env / "cli"))

    def gpubill(*args: str) -> tuple[int, str, str]:
        return run_cli(monkeypatch, capsys, "tenant", *args)

    def listed() -> list[dict]:
        code, out, _ = gpubill("list", "--format", "json")
        assert code == 0
        return json.loads(out)

    code, out, _ = gpubill("add", "acme", "--name", "Acme", "--legal-name", BUYER["legal_name"], "--tax-id", USCC,
                           "--address", BUYER["address"], "--email", BUYER["email"])
    assert code == 0 and "registered acme (Acme): active" in out
    (shown,) = listed()
    assert {field: shown[field] for field in BUYER} == BUYER and shown["status"] == ACTIVE
    code, out, _ = gpubill("add", "acme", "--name", "Acme", "--tax-id", USCC)  # provisioning re-run
    assert code == 0 and "nothing changed" in out

    code, _, error = gpubill("add", "acme", "--name", "Acme", "--tax-id", "DE123456789")
    assert code == 1 and "already registered with another tax id" in one_error_line(error)
    code, _, error = gpubill("update", "acme", "--tax-id", "91350100M000100Y44")
    assert code == 1 and "fails its check character" in one_error_line(error)
    code, _, error = gpubill("update", "ghost", "--tax-id", USCC)
    assert code == 1 and "tenant ghost is not registered" in one_error_line(error)
    assert listed() == [shown]  # none of those wrote anything

    code, out, _ = gpubill("update", "acme", "--tax-id", USCC, "--legal-name", BUYER["legal_name"])
    assert code == 0 and "acme is already so; nothing changed" in out and listed() == [shown]
    code, out, _ = gpubill("update", "acme", "--email", "ap@example.cn", "--address", "", "--note", "ticket 9")
    assert code == 0 and "updated acme (Acme): address, e-mail" in out
    (after,) = listed()
    assert (after["email"], after["address"], after["tax_id"], after["note"]) == ("ap@example.cn", "", USCC, "ticket 9")
    assert after["updated_at"] > shown["updated_at"] and after["created_at"] == shown["created_at"]

    code, out, _ = gpubill("list")
    assert code == 0
    header, row = [line for line in out.splitlines() if "acme" in line or "legal name" in line]
    assert "legal name" in header and "tax id" in header
    assert BUYER["legal_name"] in row and USCC in row
