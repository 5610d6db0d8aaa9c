"""Every rated generation records the revision of the rules that priced it (issue 25, item 1;
migration 0025): the worker stamps an hour with its rules' revision as it writes it, the rollup
publishes the hour's revisions with its generation, and a re-rating publishes its own.

Real chDB, the worker's Pipeline with the Python rater and the ClickHouse sink; the rule set is
the default one, edited as an operator would (the site's tariff 0.33 → 0.34 ¥/kWh)."""

from __future__ import annotations

import shutil
import time

import pytest

from billing_rules import DEFAULT_RULES_DIR, load_rules
from schemas.topics import TOPIC_POWER, TOPIC_USAGE
from streams.pipeline import Pipeline
from streams.rating.reference_batch import PythonRater
from streams.rules_watcher import RulesWatcher
from streams.sink import ClickHouseSink
from tests.chdb_template import migrated_dsn
from tests.unit.test_pipeline_batch import T, msg, power_bytes, usage_bytes
from usage.regenerate import regenerate
from usage.rollup import roll_up
from warehouse import writes
from warehouse.connection import open_database
from warehouse.writes import HourStamps

PERIOD = "2026-03"  # T is 2026-03-01 00:00Z, 08:00 in the billing time zone


@pytest.fixture(autouse=True)
def no_margin(monkeypatch):
    monkeypatch.setattr(writes, "MARGIN_S", 0)


def published(db) -> dict[int, list[str]]:
    """Each hour's published generation's revisions, as finance reads them (v_rated_generations)."""
    return {int(h): sorted(r) for h, r in db.query(
        "SELECT toUnixTimestamp(hour), rules_revisions FROM v_rated_generations WHERE period = {p:String}",
        {"p": PERIOD})}


def readings(second: int, n: int) -> list:
    return [msg(TOPIC_USAGE, 0, n, usage_bytes("G1", second, f"u-{n}")),
            msg(TOPIC_POWER, 0, n, power_bytes("G1", second, f"p-{n}"))]


def test_a_generation_names_the_rules_that_priced_its_hour(tmp_path):
    rules_dir = tmp_path / "rules"
    shutil.copytree(DEFAULT_RULES_DIR, rules_dir)
    first = load_rules(rules_dir)
    with open_database(migrated_dsn(tmp_path / "ch")) as db:
        pipeline = Pipeline(rules=first, sink=ClickHouseSink(db), rater=PythonRater(first))
        watcher = RulesWatcher(rules_dir, pipeline)
        pipeline.handle(readings(T, 0))
        time.sleep(0.01)  # a rollup starts strictly after the writes' stamps
        roll_up(db, first, period=PERIOD)
        assert published(db) == {T: [first.revision]}

        # The operator edits the tariff; the worker reloads the rules and writes more of the hour.
        sites = rules_dir / "sites.toml"
        sites.write_text(sites.read_text().replace("price_per_kwh = 0.33 }", "price_per_kwh = 0.34 }"))
        assert watcher.poll() is True
        second = pipeline.rules
        assert second.revision != first.revision
        pipeline.handle(readings(T + 1, 1))
        time.sleep(0.01)
        roll_up(db, first, period=PERIOD)
        assert published(db) == {T: sorted([first.revision, second.revision])}  # rows of both are in the hour

        # Re-rated under the edited rules (the first second's energy changes price): its own revision.
        out = regenerate(db, second, PERIOD)
        assert out.hours == [T]
        assert published(db) == {T: [second.revision]}
        assert db.query("SELECT rules_revision FROM rerate_runs WHERE period = {p:String}", {"p": PERIOD}) \
            == [(second.revision,)]


class Recorder:
    def __init__(self) -> None:
        self.revisions: list[tuple[list, str]] = []

    def command(self, sql: str, parameters: dict) -> None:
        if sql.startswith("INSERT INTO rated_revisions"):
            self.revisions.append((parameters["hours"], parameters["revision"]))


def test_an_hour_is_stamped_again_at_once_when_its_rules_change(monkeypatch):
    monkeypatch.setattr(writes, "MARGIN_S", 60)
    monkeypatch.setattr(writes.time, "monotonic", lambda: 1000.0)  # the clock stands still: no re-stamp is due
    db, stamps = Recorder(), HourStamps()
    stamps.before_write(db, [(PERIOD, T)], "aaaaaaaaaaaa")
    stamps.before_write(db, [(PERIOD, T)], "aaaaaaaaaaaa")
    stamps.before_write(db, [(PERIOD, T)], "bbbbbbbbbbbb")
    assert db.revisions == [([T], "aaaaaaaaaaaa"), ([T], "bbbbbbbbbbbb")]
