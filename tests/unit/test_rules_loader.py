"""Loading the shipped rule set, and refusing broken ones with "<file>: <place>: <reason>".

Each invalid case copies the shipped rules to a temp dir and plants exactly one defect.
"""

from __future__ import annotations

import shutil
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from billing_rules import DEFAULT_RULES_DIR, CreditGrant, RuleSetInvalid, load_rules
from billing_rules.errors import BillingRulesError


def planted(tmp_path: Path, file: str, old: str, new: str, count: int = 1) -> Path:
    """A copy of the shipped rules with `old` replaced by `new` in `file` (must occur)."""
    rules = tmp_path / "rules"
    shutil.copytree(DEFAULT_RULES_DIR, rules)
    text = (rules / file).read_text(encoding="utf-8")
    assert old in text, f"fixture drift: {old!r} not in {file}"
    (rules / file).write_text(text.replace(old, new, count), encoding="utf-8")
    return rules


def test_shipped_rules_load() -> None:
    rules = load_rules(DEFAULT_RULES_DIR)
    assert rules.billing_tz == ZoneInfo("Asia/Shanghai")
    assert rules.grace_period == timedelta(days=3)
    assert rules.site_ids == ("gz-guian", "sh-east")
    assert rules.model_ids == ("A800-80G", "H800-80G", "RTX4090")
    assert rules.has_site("gz-guian") and not rules.has_site("nowhere")
    assert rules.has_model("RTX4090") and not rules.has_model("RTX3090")
    gz = rules.site("gz-guian")
    assert (gz.id, gz.name, gz.timezone, gz.green_share) == ("gz-guian", "Gui'an, Guizhou", "Asia/Shanghai", Decimal("0.85"))
    assert rules.vat_rate("2026-03") == Decimal("0.06")
    assert rules.credit_grants("anyone", new_tenant=True) == (
        CreditGrant("trial", Decimal("10.00"), "New-user trial credit", None),)
    assert rules.credit_grants("anyone", new_tenant=False) == ()  # not registered: no trial credit
    assert len(rules.digest) == 64


def test_digest_changes_with_content(tmp_path: Path) -> None:
    changed = planted(tmp_path, "billing.toml", 'grace_period = "P3D"', 'grace_period = "PT36H"')
    rules = load_rules(changed)
    assert rules.grace_period == timedelta(hours=36)
    assert rules.digest != load_rules(DEFAULT_RULES_DIR).digest


def test_ruleset_is_immutable() -> None:
    rules = load_rules(DEFAULT_RULES_DIR)
    with pytest.raises(AttributeError):
        rules.source = Path("/elsewhere")  # type: ignore[misc]


FLAT_GZ = '{ name = "flat", start = "00:00", end = "24:00", price_per_kwh = 0.33 },'

INVALID = [
    # (file, old, new, expected message — the whole of it or its start)
    pytest.param(
        "sites.toml", FLAT_GZ,
        '{ name = "night", start = "00:00", end = "08:30", price_per_kwh = 0.25 },'
        ' { name = "day", start = "08:00", end = "24:00", price_per_kwh = 0.33 },',
        "sites.toml: site[gz-guian].tariff[0].bands: bands overlap at 08:00",
        id="bands-overlap",
    ),
    pytest.param(
        "sites.toml", FLAT_GZ,
        '{ name = "night", start = "00:00", end = "08:00", price_per_kwh = 0.25 },'
        ' { name = "day", start = "09:00", end = "24:00", price_per_kwh = 0.33 },',
        "sites.toml: site[gz-guian].tariff[0].bands: bands leave a gap from 08:00 to 09:00",
        id="bands-gap",
    ),
    pytest.param(
        "sites.toml", FLAT_GZ, '{ name = "flat", start = "00:00", end = "23:00", price_per_kwh = 0.33 },',
        "sites.toml: site[gz-guian].tariff[0].bands: bands leave a gap from 23:00 to 24:00",
        id="bands-short-day",
    ),
    pytest.param(
        "sites.toml", FLAT_GZ, '{ name = "flat", start = "08:00", end = "08:00", price_per_kwh = 0.33 },',
        "sites.toml: site[gz-guian].tariff[0].bands[0]: band 'flat' must end after it starts (08:00–08:00)",
        id="band-empty",
    ),
    pytest.param(
        "sites.toml", FLAT_GZ, '{ name = "flat", start = "00:00", end = "24:00", price_per_kwh = 0.36 },',
        "sites.toml: site[gz-guian].tariff[0].bands[0].price_per_kwh: 0.36 exceeds the site's tariff_cap_per_kwh 0.35",
        id="tariff-over-cap",
    ),
    pytest.param(
        "sites.toml", FLAT_GZ, '{ name = "flat", start = "00:00", end = "24:00", price_per_kwh = -0.33 },',
        "sites.toml: site[gz-guian].tariff[0].bands[0].price_per_kwh: input should be greater than or equal to 0, got '-0.33'",
        id="negative-tariff",
    ),
    pytest.param(
        "sites.toml", "pue = 1.12", "pue = 0.95",
        "sites.toml: site[gz-guian].pue[0].pue: PUE must be at least 1, got 0.95",
        id="pue-below-1",
    ),
    pytest.param(
        "sites.toml", 'timezone = "Asia/Shanghai"', 'timezone = "Asia/Shanghia"',
        "sites.toml: site[gz-guian].timezone: unknown time zone 'Asia/Shanghia'",
        id="site-timezone",
    ),
    pytest.param(
        "sites.toml", "green_share = 0.85", "green_share = 0.85\ncolour = \"green\"",
        "sites.toml: site[gz-guian]: unknown key 'colour'",
        id="unknown-key",
    ),
    pytest.param(
        "sites.toml", "[[site.gz-guian.tariff]]\neffective_from = 2025-01-01",
        "[[site.gz-guian.tariff]]\neffective_from = 2025-01-01\nbands = [" + FLAT_GZ + "]\n\n"
        "[[site.gz-guian.tariff]]\neffective_from = 2025-01-01",
        "sites.toml: site[gz-guian].tariff[1].effective_from: 2025-01-01 repeats site[gz-guian].tariff[0]",
        id="tariff-duplicate-effective-from",
    ),
    pytest.param(
        "billing.toml", 'billing_timezone = "Asia/Shanghai"', 'billing_timezone = "China/Beijing"',
        "billing.toml: billing_timezone: unknown time zone 'China/Beijing'",
        id="billing-timezone",
    ),
    pytest.param(
        "billing.toml", 'grace_period = "P3D"\n', "",
        "billing.toml: top level: missing key 'grace_period'",
        id="missing-key",
    ),
    pytest.param(
        "billing.toml", 'grace_period = "P3D"', 'grace_period = "3 days"',
        "billing.toml: grace_period: must be an ISO 8601 duration",
        id="grace-period",
    ),
    pytest.param(
        "billing.toml", "effective_from = 2025-01-01\nrate = 0.06", "effective_from = 2025-01-15\nrate = 0.06",
        "billing.toml: vat[0].effective_from: VAT changes on the first day of a period, got 2025-01-15",
        id="vat-mid-month",
    ),
    pytest.param(
        "billing.toml", "rate = 0.06", "rate = 6",
        "billing.toml: vat[0].rate: input should be less than 1, got '6'",
        id="vat-as-percent",
    ),
    pytest.param(
        "billing.toml", "amount = 10.00", "amount = 10.005",
        "billing.toml: new_tenant_credit[0].amount: credit must be whole fen (two decimals), got 10.005",
        id="credit-not-fen",
    ),
    pytest.param(
        "catalog.toml", "monthly = 599.00", "monthly = -599.00",
        "catalog.toml: model[RTX4090].price[0].monthly: input should be greater than or equal to 0, got '-599.00'",
        id="negative-rent",
    ),
    pytest.param(
        "catalog.toml", 'name = "NVIDIA GeForce RTX 4090 24GB"',
        'name = "NVIDIA GeForce RTX 4090 24GB"\n\n[[model.RTX4090.price]]\neffective_from = 2026-05-01\nmonthly = 650\nhourly = 1.4\n'
        '\n[[model.RTX4090.price]]\neffective_from = 2026-03-01\nmonthly = 599\nhourly = 1.25\n',
        "catalog.toml: model[RTX4090].price[1].effective_from: 2026-03-01 is earlier than model[RTX4090].price[0] (2026-05-01);"
        " list versions oldest first",
        id="versions-out-of-order",
    ),
    pytest.param(
        "catalog.toml", "[model.H800-80G]", '[model.B200]\nname = "NVIDIA B200"\n\n[model.H800-80G]',
        "catalog.toml: model[B200].price: model has no price; add a [[model.B200.price]] version",
        id="model-without-price",
    ),
    pytest.param(
        "catalog.toml", "[model.H800-80G]", '[model."H800 80G"]',
        "catalog.toml: model[H800 80G]: id must be letters, digits",
        id="bad-model-id",
    ),
    pytest.param(
        "catalog.toml", "hourly = 1.25", "hourly = 1.25.0",
        "catalog.toml: line 12, column 14: not valid TOML: Expected newline or end of document after a statement",
        id="toml-syntax",
    ),
    pytest.param(
        "contracts.toml", 'gpu_model = "A800-80G"', 'gpu_model = "A900-80G"',
        "contracts.toml: tenant[acme].rent[0].gpu_model: unknown model 'A900-80G' (catalog.toml has A800-80G, H800-80G, RTX4090)",
        id="contract-unknown-model",
    ),
    pytest.param(
        "contracts.toml", 'plan = "monthly"', 'plan = "montly"',
        "contracts.toml: tenant[acme].rent[0].plan: input should be 'monthly' or 'hourly', got 'montly'",
        id="contract-unknown-plan",
    ),
    pytest.param(
        "contracts.toml", "effective_from = 2026-01-01", "effective_from = 2024-06-01",
        "contracts.toml: tenant[acme].rent[0].effective_from: 2024-06-01 is before catalog.toml prices A800-80G (from 2025-01-01)",
        id="contract-before-price",
    ),
    pytest.param(
        "contracts.toml", "effective_from = 2026-01-01", 'effective_from = "2026-01-01"',
        "contracts.toml: tenant[acme].rent[0].effective_from: input should be a valid date or local date-time, unquoted"
        " (2026-03-15 or 2026-03-15T12:00:00), got '2026-01-01'",
        id="date-as-string",
    ),
    pytest.param(
        "contracts.toml", "discount_pct = 0\n",
        'discount_pct = 0\n\n[[tenant.acme.rent]]\ngpu_model = "A800-80G"\nplan = "hourly"\neffective_from = 2026-01-01\n',
        "contracts.toml: tenant[acme].rent[1].effective_from: 2026-01-01 repeats rent[0] (2026-01-01) for A800-80G;"
        " list terms oldest first",
        id="contract-duplicate-term",
    ),
    pytest.param(
        "contracts.toml", "discount_pct = 0\n",
        'discount_pct = 0\n\n[[tenant.acme.credit]]\nid = "trial"\namount = 5\nreason = "again"\n',
        "contracts.toml: tenant[acme].credit[0].id: credit id 'trial' is already used by billing.toml new_tenant_credit",
        id="credit-id-reused",
    ),
    pytest.param(
        "contracts.toml", "discount_pct = 0", "discount_pct = 120",
        "contracts.toml: tenant[acme].rent[0].discount_pct: input should be less than or equal to 100, got '120'",
        id="discount-over-100",
    ),
]


@pytest.mark.parametrize(("file", "old", "new", "expected"), INVALID)
def test_invalid_rule_set_names_file_place_reason(tmp_path: Path, file: str, old: str, new: str, expected: str) -> None:
    rules = planted(tmp_path, file, old, new)
    with pytest.raises(RuleSetInvalid) as caught:
        load_rules(rules)
    message = str(caught.value)
    assert message.startswith(f"{rules}/{expected}"), message  # the file named with its folder, as given
    assert "\n" not in message
    assert caught.value.file == str(rules / file)
    assert isinstance(caught.value, BillingRulesError)


def test_missing_directory(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-rules"
    with pytest.raises(RuleSetInvalid) as caught:
        load_rules(missing)
    assert str(caught.value) == f"{missing}: directory: does not exist (pass a rules directory or set GPUBILL_RULES)"


def test_missing_file(tmp_path: Path) -> None:
    rules = planted(tmp_path, "contracts.toml", "", "")
    (rules / "contracts.toml").unlink()
    with pytest.raises(RuleSetInvalid) as caught:
        load_rules(rules)
    assert str(caught.value) == f"{rules}/contracts.toml: file: is missing (a rule directory holds all four files)"


def test_unexpected_rule_file(tmp_path: Path) -> None:
    # A misspelt file would otherwise be ignored silently.
    rules = planted(tmp_path, "contracts.toml", "", "")
    (rules / "contracts.toml").rename(rules / "contract.toml")
    with pytest.raises(RuleSetInvalid) as caught:
        load_rules(rules)
    assert str(caught.value).startswith(f"{rules}/contract.toml: file: is not a rule file")


def test_not_utf8(tmp_path: Path) -> None:
    rules = planted(tmp_path, "sites.toml", "", "")
    (rules / "sites.toml").write_bytes(b'name = "\xff"\n')
    with pytest.raises(RuleSetInvalid) as caught:
        load_rules(rules)
    assert str(caught.value) == f"{rules}/sites.toml: file: is not UTF-8 (byte 8)"


def test_second_defect_is_counted(tmp_path: Path) -> None:
    rules = planted(tmp_path, "catalog.toml", "monthly = 599.00\nhourly = 1.25", "monthly = -1\nhourly = -1")
    with pytest.raises(RuleSetInvalid, match=r"monthly: .* \(and 1 more\)$"):
        load_rules(rules)
