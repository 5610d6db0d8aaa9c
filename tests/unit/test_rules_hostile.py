"""Hostile rule files (issue 36, item 4): whatever an edit plants, loading it is a refusal in
one line naming the file with its folder, the place and the reason — `gpubill rules check`
exits 1 with that line alone, and a running worker keeps its last good set.

Before: an overflowing duration (OverflowError) and a deep nesting (RecursionError) escaped
the loader as tracebacks, 1e308 and 22 decimals loaded (and failed at the first insert).
"""

from __future__ import annotations

import logging
import shutil
from decimal import Decimal
from pathlib import Path

import pytest

from billing_rules import DEFAULT_RULES_DIR, load_rules
from streams.pipeline import Pipeline
from streams.rating.reference_batch import PythonRater
from streams.rules_watcher import RulesWatcher
from tests.unit.cli_run import run_cli

DEEP = "x = " + "[" * 5000 + "]" * 5000  # tomllib parses nesting by recursion: past Python's limit

HOSTILE = [
    # (file, old, new, "place: reason" the line ends with — whole or its start)
    pytest.param("billing.toml", 'grace_period = "P3D"', 'grace_period = "P99999999999D"',
                 "grace_period: must be at most P366D (a period's invoices wait that long after it ends), "
                 "got 'P99999999999D'", id="duration-overflow"),
    pytest.param("billing.toml", 'grace_period = "P3D"', 'grace_period = "P400D"',
                 "grace_period: must be at most P366D", id="duration-too-long"),
    pytest.param("billing.toml", 'grace_period = "P3D"', f'grace_period = "P3D"\n{DEEP}',
                 "file: cannot be read: values nested too deeply (arrays or tables inside one another)",
                 id="deep-nesting"),
    pytest.param("catalog.toml", "hourly = 1.25", "hourly = " + "[" * 5000 + "]" * 5000,
                 "file: cannot be read: values nested too deeply", id="deep-nesting-in-a-price"),
    pytest.param("catalog.toml", "hourly = 1.25", "hourly = 1e308",
                 "model[RTX4090].price[0].hourly: is too large for the database: at most 12 digits before the point "
                 "(rated_seconds.rent_price is Decimal(18, 6)), got '1E+308'", id="price-1e308"),
    pytest.param("catalog.toml", "hourly = 1.25", "hourly = 1000000000000",  # 13 digits; Decimal(18, 6) holds 12
                 "model[RTX4090].price[0].hourly: is too large for the database: at most 12 digits", id="price-13-digits"),
    pytest.param("catalog.toml", "hourly = 1.25", "hourly = 1.2500000000000000000001",
                 "model[RTX4090].price[0].hourly: has 22 decimals, more than the database stores "
                 "(rated_seconds.rent_price is Decimal(18, 6)), got '1.2500000000000000000001'", id="price-22-decimals"),
    pytest.param("sites.toml", "price_per_kwh = 0.33 }", "price_per_kwh = 0.3300001 }",
                 "site[gz-guian].tariff[0].bands[0].price_per_kwh: has 7 decimals, more than the database stores "
                 "(rated_seconds.tariff_per_kwh is Decimal(18, 6))", id="tariff-7-decimals"),
    pytest.param("sites.toml", "pue = 1.12", "pue = 123456.5",  # Decimal(9, 4): 5 digits before the point
                 "site[gz-guian].pue[0].pue: is too large for the database: at most 5 digits before the point "
                 "(rated_seconds.pue is Decimal(9, 4))", id="pue-too-large"),
    pytest.param("contracts.toml", "discount_pct = 0", "discount_pct = 12.34567",
                 "tenant[acme].rent[0].discount_pct: has 5 decimals, more than the database stores "
                 "(rated_seconds.discount_pct is Decimal(9, 4))", id="discount-5-decimals"),
    pytest.param("billing.toml", "rate = 0.06", "rate = 0.060001",
                 "vat[0].rate: has 6 decimals, more than the database stores (invoices.vat_rate is Decimal(9, 4))",
                 id="vat-6-decimals"),
    pytest.param("billing.toml", "amount = 10.00", "amount = 12345678901234567.00",
                 "new_tenant_credit[0].amount: is too large for the database: at most 16 digits before the point "
                 "(invoice_lines.amount is Decimal(18, 2))", id="credit-too-large"),
    pytest.param("catalog.toml", "hourly = 1.25", "hourly = nan",
                 "model[RTX4090].price[0].hourly: input should be a finite number, got 'NaN'", id="price-nan"),
    pytest.param("sites.toml", "pue = 1.12", "pue = inf",
                 "site[gz-guian].pue[0].pue: input should be a finite number, got 'Infinity'", id="pue-inf"),
    pytest.param("catalog.toml", "hourly = 1.25", "hourly = -1.25",
                 "model[RTX4090].price[0].hourly: input should be greater than or equal to 0, got '-1.25'",
                 id="price-negative"),
    pytest.param("billing.toml", 'billing_timezone = "Asia/Shanghai"', 'billing_timezone = "' + "A" * 100_000 + '"',
                 "billing_timezone: unknown time zone 'AAAA", id="huge-string"),  # OSError (file name too long) before
    pytest.param("billing.toml", "payment_terms_days = 15", "payment_terms_days = " + "9" * 5000,
                 "file: cannot be read: ValueError: Exceeds the limit (4300 digits)", id="huge-integer"),
]


def planted(tmp_path: Path, file: str, old: str, new: str) -> Path:
    rules = tmp_path / "rules"
    shutil.copytree(DEFAULT_RULES_DIR, rules)
    text = (rules / file).read_text(encoding="utf-8")
    assert old in text, f"fixture drift: {old!r} not in {file}"
    (rules / file).write_text(text.replace(old, new, 1), encoding="utf-8")
    return rules


@pytest.mark.parametrize(("file", "old", "new", "expected"), HOSTILE)
def test_rules_check_refuses_a_hostile_file_in_one_line(tmp_path, monkeypatch, capsys, file, old, new, expected):
    rules = planted(tmp_path, file, old, new)
    code, stdout, stderr = run_cli(monkeypatch, capsys, "rules", "check", str(rules))
    assert code == 1
    assert stdout == ""
    assert stderr.count("\n") == 1 and len(stderr) < 600, stderr[:2000]
    assert stderr.startswith(f"error: {rules}/{file}: {expected}"), stderr


def test_non_utf8_bytes_are_refused_in_one_line(tmp_path, monkeypatch, capsys):
    rules = planted(tmp_path, "catalog.toml", "", "")
    (rules / "catalog.toml").write_bytes((rules / "catalog.toml").read_bytes().replace(b"1.25", b"1.2\xff5"))
    code, stdout, stderr = run_cli(monkeypatch, capsys, "rules", "check", str(rules))
    assert (code, stdout) == (1, "")
    assert stderr.count("\n") == 1
    assert stderr.startswith(f"error: {rules}/catalog.toml: file: is not UTF-8 (byte "), stderr


def test_a_relative_directory_is_named_as_given(tmp_path, monkeypatch, capsys):
    # the friction: "catalog.toml: …" did not say which of several rule directories
    planted(tmp_path, "catalog.toml", "hourly = 1.25", "hourly = 1.2500000000000000000001")
    monkeypatch.chdir(tmp_path)
    code, _, stderr = run_cli(monkeypatch, capsys, "rules", "check", "rules")
    assert code == 1
    assert stderr.startswith("error: rules/catalog.toml: model[RTX4090].price[0].hourly: has 22 decimals"), stderr


def test_trailing_zeros_are_not_decimals(tmp_path):
    # 1.250000000000000000000 is 1.25: the column holds it exactly
    rules = load_rules(planted(tmp_path, "catalog.toml", "hourly = 1.25", "hourly = 1.250000000000000000000"))
    assert rules.rent_rate("acme", "RTX4090", 1772323200).list_price == Decimal("1.25")


@pytest.mark.parametrize("hostile", [
    pytest.param(("billing.toml", 'grace_period = "P3D"', 'grace_period = "P99999999999D"'), id="duration-overflow"),
    pytest.param(("billing.toml", 'grace_period = "P3D"', f'grace_period = "P3D"\n{DEEP}'), id="deep-nesting"),
    pytest.param(("catalog.toml", "hourly = 1.25", "hourly = 1e308"), id="price-1e308"),
])
def test_a_running_worker_keeps_its_last_good_set(tmp_path, caplog, hostile):
    file, old, new = hostile
    rules_dir = planted(tmp_path, file, old, old)  # the shipped set, as the worker loaded it
    good = load_rules(rules_dir)
    pipeline = Pipeline(rules=good, sink=None, rater=PythonRater(good))
    watcher = RulesWatcher(rules_dir, pipeline)
    edited = rules_dir / file
    edited.write_text(edited.read_text(encoding="utf-8").replace(old, new, 1), encoding="utf-8")
    with caplog.at_level(logging.ERROR, logger="gpubill.rules"):
        assert watcher.poll() is False  # before: OverflowError / RecursionError out of the batch (exit 3)
    assert pipeline.rules is good and pipeline.rater.rules is good
    assert watcher.files.invalid
    (record,) = [r for r in caplog.records if r.name == "gpubill.rules"]
    message = record.getMessage()
    assert "\n" not in message and len(message) < 600
    assert f"{rules_dir}/{file}: " in message, message


def test_a_set_the_rater_refuses_leaves_the_last_good_one_in_use(tmp_path, caplog):
    # a belt behind the loader: a valid set that the rater cannot take (here a rater that refuses
    # every new set) is logged in one line and the worker goes on with the set it had
    class Refusing(PythonRater):
        def use_rules(self, rules):
            if getattr(self, "rules", None) is not None:  # the first set, at construction, is taken
                raise OverflowError("a price too large for the core")
            super().use_rules(rules)

    rules_dir = planted(tmp_path, "sites.toml", "price_per_kwh = 0.33 }", "price_per_kwh = 0.33 }")
    good = load_rules(rules_dir)
    pipeline = Pipeline(rules=good, sink=None, rater=Refusing(good))
    watcher = RulesWatcher(rules_dir, pipeline)
    sites = rules_dir / "sites.toml"
    sites.write_text(sites.read_text().replace("price_per_kwh = 0.33 }", "price_per_kwh = 0.34 }"))
    with caplog.at_level(logging.ERROR, logger="gpubill.rules"):
        assert watcher.poll() is False
    assert pipeline.rules is good and pipeline.rater.rules is good and watcher.files.invalid
    (record,) = [r for r in caplog.records if r.name == "gpubill.rules"]
    assert record.getMessage().endswith("OverflowError: a price too large for the core")
