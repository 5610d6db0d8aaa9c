"""API keys (issue 14): the token's shape, what is stored (a hash only), who may hold a key,
expiry at the end of a UTC day, revocation, the strict parse before any query, and the
`gpubill key` commands, hostile input refused in one line before the database is opened.

Expected values are written out here, not computed by the code under test: hashes with
hashlib directly, instants as literal datetimes.
"""

from __future__ import annotations

import base64
import hashlib
from datetime import UTC, date, datetime, timedelta

import orjson
import pytest

from tenant_api import keys as api_keys
from tenant_api.keys import (
    EXPIRED,
    MALFORMED,
    OPERATOR,
    REVOKED,
    UNKNOWN,
    ApiKey,
    InvalidKeyRequest,
    KeyRefused,
    check_label,
    check_request,
    create_key,
    expiry_instant,
    find_key,
    list_keys,
    parse_token,
    revoke_key,
    verify_key,
)
from billing.tenants import InvalidTenant, add_tenant
from gpubill.errors import USER_ERRORS
from tenant_api.errors import ApiError, UnknownKeyId
from tests.chdb_template import migrated_dsn
from tests.unit.cli_run import run_cli
from warehouse.connection import open_database

NOW = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
# A token in the exact shape: gpb_, an id (k_ + 16 of a-z2-7), _, 43 characters of canonical
# base64 of 32 bytes (32 zero bytes: 42 × "A" then "A", whose last 4 bits are 0).
GOOD_ID = "k_abcdefghijklmnop"
GOOD_SECRET = "A" * 43
GOOD = f"gpb_{GOOD_ID}_{GOOD_SECRET}"


def assert_one_printable_line(message: str) -> None:
    assert message and "\n" not in message and all(ch.isprintable() for ch in message), ascii(message)


# -------------------------------------------------------------------------- the token (pure)


def test_a_good_token_parses_into_its_id_and_secret():
    assert len(GOOD) == 66
    assert parse_token(GOOD) == (GOOD_ID, GOOD_SECRET)
    # a secret holding the URL-safe letters - and _ (bytes 0xfb 0xff … encode to "-_")
    secret = base64.urlsafe_b64encode(b"\xfb\xff" * 16).decode().rstrip("=")
    assert parse_token(f"gpb_{GOOD_ID}_{secret}") == (GOOD_ID, secret)


@pytest.mark.parametrize("token", [
    pytest.param("", id="empty"),
    pytest.param(GOOD[:-1], id="one-short"),
    pytest.param(GOOD + "A", id="one-long"),
    pytest.param(" " + GOOD[1:], id="leading-space"),
    pytest.param(GOOD[:-1] + "\n", id="trailing-newline"),
    pytest.param("Bearer " + GOOD, id="with-scheme"),
    pytest.param("gpc_" + GOOD[4:], id="other-prefix"),
    pytest.param("GPB_" + GOOD[4:], id="prefix-upper"),
    pytest.param(GOOD.replace("k_abcdefghijklmnop", "k_ABCDEFGHIJKLMNOP"), id="id-upper"),
    pytest.param(GOOD.replace("k_abcdefghijklmnop", "k_abcdefghijklmn18"), id="id-not-base32"),
    pytest.param(GOOD.replace("k_abcdefghijklmnop", "x_abcdefghijklmnop"), id="id-not-k"),
    pytest.param(f"gpb_{GOOD_ID}-{GOOD_SECRET}", id="separator"),
    pytest.param(f"gpb_{GOOD_ID}_{'A' * 42}=", id="padding"),
    pytest.param(f"gpb_{GOOD_ID}_{'A' * 42}+", id="standard-base64-plus"),
    pytest.param(f"gpb_{GOOD_ID}_{'A' * 42}/", id="standard-base64-slash"),
    pytest.param(f"gpb_{GOOD_ID}_{'A' * 42}B", id="non-canonical-last-letter"),
    pytest.param(f"gpb_{GOOD_ID}_{'A' * 42}\u0410", id="cyrillic-A"),
    pytest.param(f"gpb_{GOOD_ID}_{'A' * 42}\x00", id="nul"),
    pytest.param(GOOD[:30] + "\x1b" + GOOD[31:], id="escape-inside"),
    pytest.param("gpb_" + "k_" * 31, id="ids-only"),
    pytest.param("A" * 1_000_000, id="a-megabyte"),
    pytest.param(None, id="none"),
    pytest.param(GOOD.encode(), id="bytes"),
])
def test_every_other_shape_is_malformed_in_one_line(token):
    with pytest.raises(KeyRefused) as refused:
        parse_token(token)
    assert refused.value.reason == MALFORMED and refused.value.key_id == ""
    assert_one_printable_line(str(refused.value))
    assert "AAAA" not in str(refused.value)  # never quotes the token


def test_a_new_token_carries_256_random_bits_and_a_fresh_id(db):
    add_tenant(db, "acme", "Acme")
    tokens = [create_key(db, tenant="acme", now=NOW)[1] for _ in range(3)]
    for token in tokens:
        key_id, secret = parse_token(token)
        assert len(base64.urlsafe_b64decode(secret + "=")) == 32  # 32 bytes = 256 bits
        assert token == f"gpb_{key_id}_{secret}" and len(key_id) == 18
    assert len({parse_token(t)[0] for t in tokens}) == 3 and len({parse_token(t)[1] for t in tokens}) == 3


def test_malformed_tokens_are_refused_before_any_query():
    class NoDatabase:
        def query(self, *args, **kwargs):
            raise AssertionError("queried for a malformed token")

    for token in ("", "x" * 66, GOOD[:-1] + "B", "A" * 100_000):
        with pytest.raises(KeyRefused, match="not a gpubill API key"):
            verify_key(NoDatabase(), token)


# -------------------------------------------------------------------------- what may be created (pure)


@pytest.mark.parametrize("expires, until", [
    (date(2026, 12, 1), datetime(2026, 12, 2, tzinfo=UTC)),  # today: works until the coming midnight UTC
    (date(2026, 12, 31), datetime(2027, 1, 1, tzinfo=UTC)),
    (date(2028, 2, 29), datetime(2028, 3, 1, tzinfo=UTC)),
    (None, None),
])
def test_expires_means_through_the_end_of_that_day_utc(expires, until):
    assert expiry_instant(expires, NOW) == until


@pytest.mark.parametrize("expires, fragment", [
    (date(2026, 11, 30), "2026-11-30 is in the past (today is 2026-12-01 UTC)"),
    (date(1970, 1, 1), "in the past"),
    (date(9999, 12, 31), "more than 3660 days ahead"),
    (datetime(2027, 1, 1), "must be a date"),
    ("2027-01-01", "must be a date"),
])
def test_an_expiry_in_the_past_too_far_or_not_a_date_is_refused(expires, fragment):
    with pytest.raises(InvalidKeyRequest, match=fragment.replace("(", r"\(").replace(")", r"\)")) as refused:
        expiry_instant(expires, NOW)
    assert_one_printable_line(str(refused.value))


@pytest.mark.parametrize("label, stored", [("", ""), ("  CI nightly  ", "CI nightly"), ("财务部 下载", "财务部 下载"),
                                           ("x" * 100, "x" * 100)])
def test_a_label_is_free_text_in_any_script(label, stored):
    assert check_label(label) == stored


@pytest.mark.parametrize("label, fragment", [
    ("a\x1b[31mred", r"U\+001B"),
    ("two\nlines", r"U\+000A"),
    ("\u202eevil", r"U\+202E"),
    ("zero\u200bwidth", r"U\+200B"),
    ("x" * 101, "101 characters long: at most 100"),
    (42, "must be text"),
])
def test_a_hostile_label_is_refused_in_one_printable_line(label, fragment):
    with pytest.raises(InvalidKeyRequest, match=fragment) as refused:
        check_label(label)
    assert_one_printable_line(str(refused.value))


@pytest.mark.parametrize("tenant, role, error, fragment", [
    (None, "tenant", InvalidKeyRequest, "needs its tenant"),
    ("", "tenant", InvalidKeyRequest, "needs its tenant"),
    ("acme", OPERATOR, InvalidKeyRequest, "give no tenant with role operator"),
    ("acme", "admin", InvalidKeyRequest, "role 'admin' is not one of tenant, operator"),
    ("acme", "Operator", InvalidKeyRequest, "is not one of"),
    ("../etc", "tenant", InvalidTenant, "is not an id"),
    ("a\nb", "tenant", InvalidTenant, "is not an id"),
    ("\u0430cme", "tenant", InvalidTenant, "CYRILLIC SMALL LETTER A"),
    ("a" * 300, "tenant", InvalidTenant, "300 characters long"),
])
def test_who_may_hold_a_key_is_checked_before_the_database(tenant, role, error, fragment):
    with pytest.raises(error, match=fragment) as refused:
        check_request(tenant=tenant, role=role, label="", expires=None, now=NOW)
    assert_one_printable_line(str(refused.value))


def test_refusals_are_api_errors_so_the_command_line_prints_one_line():
    assert issubclass(KeyRefused, ApiError) and issubclass(InvalidKeyRequest, ApiError) and ApiError in USER_ERRORS
    assert {KeyRefused(r).reason for r in (MALFORMED, UNKNOWN, REVOKED, EXPIRED)} == {
        "malformed", "unknown", "revoked", "expired"}


# -------------------------------------------------------------------------- the registry of keys


@pytest.fixture
def db(tmp_path):
    with open_database(migrated_dsn(tmp_path / 'ch')) as database:
        yield database


def stored_rows(db) -> list[dict]:
    return db.query_dicts("SELECT * FROM api_keys ORDER BY updated_at")


def test_only_the_sha256_of_the_secret_is_stored(db):
    add_tenant(db, "acme", "Acme")
    key, token = create_key(db, tenant="acme", label="CI", now=NOW)
    secret = token[len("gpb_") + 18 + 1:]
    (row,) = stored_rows(db)
    assert row["secret_sha256"] == hashlib.sha256(secret.encode()).hexdigest()
    assert not any(secret in str(value) or token in str(value) for value in row.values())
    assert (row["id"], row["tenant"], row["role"], row["label"]) == (key.id, "acme", "tenant", "CI")
    assert row["expires_at"] is None and row["revoked_at"] is None
    assert not any(secret in repr(k) for k in list_keys(db))
    assert set(vars(ApiKey)["__dataclass_fields__"]) == {
        "id", "tenant", "role", "label", "created_at", "expires_at", "revoked_at"}  # no secret, no hash


def test_a_tenant_key_needs_a_registered_tenant_and_nothing_is_written_otherwise(db):
    with pytest.raises(InvalidKeyRequest, match="tenant ghost is not registered: register it first with "
                                                "`gpubill tenant add ghost --name NAME`"):
        create_key(db, tenant="ghost", now=NOW)
    assert stored_rows(db) == []


def test_a_suspended_tenant_may_still_hold_a_key(db):
    from billing.tenants import SUSPENDED, set_status

    add_tenant(db, "acme", "Acme")
    set_status(db, "acme", SUSPENDED)
    _key, token = create_key(db, tenant="acme", now=NOW)
    assert verify_key(db, token, now=NOW).tenant == "acme"  # it still reads its invoices


def test_verify_answers_the_key_and_refuses_wrong_unknown_revoked_and_expired(db):
    add_tenant(db, "acme", "Acme")
    key, token = create_key(db, tenant="acme", label="CI", expires=date(2026, 12, 31), now=NOW)
    assert verify_key(db, token, now=NOW) == key
    assert key.expires_at == datetime(2027, 1, 1, tzinfo=UTC)

    last_moment = datetime(2026, 12, 31, 23, 59, 59, 999_000, tzinfo=UTC)
    assert verify_key(db, token, now=last_moment) == key
    with pytest.raises(KeyRefused) as refused:
        verify_key(db, token, now=datetime(2027, 1, 1, tzinfo=UTC))
    assert (refused.value.reason, refused.value.key_id) == (EXPIRED, key.id)

    # the same id with another (well-formed) secret, and an id that does not exist: unknown alike
    other = token[:-43] + ("B" if token[-43] != "B" else "C") + token[-42:]
    unknown_id = f"gpb_k_{'z' * 16}_{token[-43:]}"
    for wrong in (other, unknown_id):
        with pytest.raises(KeyRefused) as refused:
            verify_key(db, wrong, now=NOW)
        assert refused.value.reason == UNKNOWN and str(refused.value) == (
            "the key is not known: check it was copied whole, or ask the operator for a new one")

    revoke_key(db, key.id, now=NOW + timedelta(hours=1))
    with pytest.raises(KeyRefused) as refused:
        verify_key(db, token, now=NOW + timedelta(hours=2))
    assert refused.value.reason == REVOKED
    # revoked is said only to the holder of the secret: a wrong secret stays "unknown"
    with pytest.raises(KeyRefused) as refused:
        verify_key(db, other, now=NOW + timedelta(hours=2))
    assert refused.value.reason == UNKNOWN


def test_the_secret_is_compared_in_constant_time_even_for_an_unknown_id(db, monkeypatch):
    calls = []
    real = api_keys.hmac.compare_digest
    monkeypatch.setattr(api_keys.hmac, "compare_digest", lambda a, b: calls.append((a, b)) or real(a, b))
    with pytest.raises(KeyRefused, match="not known"):
        verify_key(db, GOOD, now=NOW)
    assert calls == [(hashlib.sha256(GOOD_SECRET.encode()).hexdigest(), "0" * 64)]


def test_an_unknown_id_costs_the_database_what_a_known_one_does(db):
    # issue 21, finding 8: an unknown id was answered from the primary index alone (21 ms against
    # 62 ms for a known id with a wrong secret); now both read one row of the same query
    add_tenant(db, "acme", "Acme")
    known, _ = create_key(db, tenant="acme", label="known", now=NOW)
    create_key(db, tenant="acme", label="another", now=NOW)
    read: list[tuple[str, int]] = []

    class Recording:
        def query(self, sql, params=None):
            rows = db.query(sql, params)
            read.append((sql, len(rows)))
            return rows

    wrong_secret = f"gpb_{known.id}_{GOOD_SECRET}"
    for token in (wrong_secret, GOOD, "gpb_k_zzzzzzzzzzzzzzzz_" + GOOD_SECRET, "gpb_k_aaaaaaaaaaaaaaaa_" + GOOD_SECRET):
        with pytest.raises(KeyRefused) as refused:
            verify_key(Recording(), token, now=NOW)
        assert refused.value.reason == UNKNOWN
    assert len({sql for sql, _ in read}) == 1 and [rows for _, rows in read] == [1, 1, 1, 1]


def test_an_operator_key_reads_every_tenant_and_has_none(db):
    key, token = create_key(db, tenant=None, role=OPERATOR, label="support desk", now=NOW)
    assert (key.tenant, key.role) == ("", "operator")
    assert verify_key(db, token, now=NOW) == key


def test_revoke_is_idempotent_keeps_the_first_time_and_wins_within_a_millisecond(db):
    add_tenant(db, "acme", "Acme")
    key, token = create_key(db, tenant="acme", now=NOW)
    # a revocation stamped before the creation (a clock behind) still wins: 1 ms after the row it replaces
    revoked = revoke_key(db, key.id, now=NOW - timedelta(days=1))
    assert revoked.revoked_at == NOW + timedelta(milliseconds=1)
    again = revoke_key(db, key.id, now=NOW + timedelta(days=5))
    assert again.revoked_at == NOW + timedelta(milliseconds=1)
    assert len(stored_rows(db)) == 2  # created, revoked: the second revoke wrote nothing
    assert find_key(db, key.id).state(NOW) == REVOKED
    with pytest.raises(KeyRefused, match="revoked"):
        verify_key(db, token, now=NOW)


def test_revoking_an_unknown_or_malformed_id_says_so(db):
    with pytest.raises(UnknownKeyId, match=r"no key k_zzzzzzzzzzzzzzzz: `gpubill key list` shows the keys"):
        revoke_key(db, "k_zzzzzzzzzzzzzzzz")
    for bad in ("k_short", "K_ZZZZZZZZZZZZZZZZ", "k_zzzzzzzzzzzzzzz1", "'; DROP TABLE api_keys; --", "k_" + "z" * 17):
        with pytest.raises(InvalidKeyRequest, match="is not a key id") as refused:
            revoke_key(db, bad)
        assert_one_printable_line(str(refused.value))


def test_list_is_by_tenant_and_filters_by_tenant(db):
    add_tenant(db, "acme", "Acme"), add_tenant(db, "beta", "Beta")
    b = create_key(db, tenant="beta", now=NOW)[0]
    a1 = create_key(db, tenant="acme", now=NOW)[0]
    a2 = create_key(db, tenant="acme", now=NOW + timedelta(seconds=1))[0]
    op = create_key(db, tenant=None, role=OPERATOR, now=NOW)[0]
    assert [k.id for k in list_keys(db)] == [op.id, a1.id, a2.id, b.id]  # '' (operator) sorts first
    assert [k.id for k in list_keys(db, tenant="acme")] == [a1.id, a2.id]
    with pytest.raises(InvalidTenant):
        list_keys(db, tenant="' OR 1=1 --")


# -------------------------------------------------------------------------- the command line


def gpubill(args, monkeypatch, capsys, dsn) -> tuple[int, str, str]:
    monkeypatch.setenv("GPUBILL_CLICKHOUSE", dsn)
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "300")
    return run_cli(monkeypatch, capsys, "key", *args)


@pytest.fixture
def dsn(tmp_path):
    location = f"chdb://{tmp_path / 'cli'}"
    with open_database(location) as database:
        add_tenant(database, "acme", "Acme 株式会社")
    return location


def test_create_prints_the_key_once_and_json_prints_id_and_key_only(dsn, monkeypatch, capsys):
    code, out, err = gpubill(["create", "--tenant", "acme", "--label", "CI"], monkeypatch, capsys, dsn)
    assert code == 0, err
    (token,) = out.split()
    assert token.startswith("gpb_k_") and len(token) == 66
    assert "only time the key is shown" in err and token not in err

    code, out, err = gpubill(["create", "--tenant", "acme", "--json"], monkeypatch, capsys, dsn)
    assert code == 0, err
    shown = orjson.loads(out)
    assert set(shown) == {"id", "key"} and shown["key"].startswith(f"gpb_{shown['id']}_")

    code, out, err = gpubill(["list", "--json"], monkeypatch, capsys, dsn)
    assert code == 0, err
    listed = orjson.loads(out)
    assert len(listed) == 2 and {k["state"] for k in listed} == {"active"}
    assert token[-43:] not in out and shown["key"][-43:] not in out
    with open_database(dsn) as database:
        hashes = [h for (h,) in database.query("SELECT secret_sha256 FROM api_keys")]
        assert verify_key(database, token).label == "CI"
    assert not any(h in out for h in hashes)

    code, out, err = gpubill(["revoke", shown["id"]], monkeypatch, capsys, dsn)
    assert code == 0 and out.startswith(f"revoked {shown['id']} (key of tenant acme) at "), (out, err)
    code, out, err = gpubill(["revoke", shown["id"]], monkeypatch, capsys, dsn)
    assert code == 0 and "was already revoked" in out and "nothing changed" in out

    code, out, err = gpubill(["list"], monkeypatch, capsys, dsn)
    assert code == 0 and "revoked" in out and "active" in out and "2 keys" in err


def test_an_operator_key_from_the_command_line(dsn, monkeypatch, capsys):
    code, out, err = gpubill(["create", "--role", "operator", "--label", "support", "--expires",
                              (date.today() + timedelta(days=30)).isoformat()], monkeypatch, capsys, dsn)
    assert code == 0, err
    assert "operator key (reads every tenant)" in err and "until " in err


def test_an_unregistered_tenant_is_refused_with_the_command_that_registers_it(dsn, monkeypatch, capsys):
    code, out, err = gpubill(["create", "--tenant", "ghost"], monkeypatch, capsys, dsn)
    assert code == 1 and out == ""
    assert "`gpubill tenant add ghost --name NAME`" in err


@pytest.mark.parametrize("args, fragment", [
    (["create", "--tenant", "../x"], "tenant id '../x'"),
    (["create", "--tenant", "a\x1b[2Jb"], "tenant id 'a\\\\x1b[2Jb'"),  # ascii(), then terminal_text doubles \\
    (["create", "--tenant", "acme", "--label", "ok\x1b]0;pwned\x07"], "label has U+001B"),
    (["create", "--tenant", "acme", "--label", "\u202etxt.exe"], "U+202E"),
    (["create", "--tenant", "acme", "--expires", "2020-01-01"], "is in the past"),
    (["create", "--tenant", "acme", "--expires", "tomorrow"], "--expires: 'tomorrow' is not a date like 2027-01-31"),
    (["create", "--tenant", "acme", "--expires", "2027-02-30"], "--expires: '2027-02-30' is not a date"),
    (["create", "--tenant", "acme", "--expires", "20270101"], "--expires: '20270101' is not a date"),
    (["create", "--tenant", "acme", "--role", "root"], "role 'root' is not one of tenant, operator"),
    (["create", "--tenant", "acme", "--role", "operator"], "give no tenant with role operator"),
    (["create"], "a tenant key needs its tenant"),
    (["revoke", "k_1"], "key id 'k_1' is not a key id"),
    (["revoke", "[red]x"], "key id '[red]x' is not a key id"),
    (["list", "--tenant", "a b"], "tenant id 'a b'"),
    (["audit", "--key", "gpb_secret"], "key id 'gpb_secret' is not a key id"),
    (["audit", "--tenant", "\u0430cme"], "CYRILLIC SMALL LETTER A"),
    (["audit", "--limit", "0"], "--limit: 0 is not from 1 to 10000"),
    (["audit", "--since", "yesterday"], "--since: 'yesterday' is not a date"),
])
def test_the_command_line_refuses_hostile_input_in_one_line_before_opening_anything(
        args, fragment, tmp_path, monkeypatch, capsys):
    never = tmp_path / "never"
    code, out, err = gpubill(args, monkeypatch, capsys, f"chdb://{never}")
    assert code == 1 and out == ""
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], err
    assert_one_printable_line(lines[0])
    assert not never.exists()  # refused before the database was opened
