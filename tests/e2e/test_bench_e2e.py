"""`gpubill bench pipeline --json` and `gpubill bench spend --json` run end to end and print
exactly their fields (tiny sizes: this checks the commands, it measures nothing)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.ports import free_port_run

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("where", ["embedded", "gateway"])
def test_bench_pipeline_prints_its_fields(tmp_path, where):
    port = free_port_run(3)  # the broker, its controller and the gateway (port + 2)
    done = subprocess.run(
        [sys.executable, "-m", "gpubill.cli", "bench", "pipeline", "--gpus", "8", "--seconds", "5",
         "--freshness-rate", "400", "--freshness-s", "2", "--port", str(port), "--json"]
        + (["--gateway"] if where == "gateway" else []),
        capture_output=True, text=True, timeout=300, cwd=tmp_path, env={**os.environ, "NO_COLOR": "1"},
    )
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout)
    assert list(figures) == ["raw_consume_per_s", "pipeline_per_s", "ratio", "freshness_p50_s", "freshness_p99_s",
                             "worker_rss_mb", "spend_tracker", "pipeline_s", "worker_cpu_s", "tracker_cpu_s",
                             "gateway_cpu_s", "counters", "brokers"]
    assert figures["counters"] is False and figures["brokers"] == 1  # the cards' energy counters in the readings only with --counters
    assert figures["spend_tracker"] is (where == "gateway")  # a tracker process beside the worker
    assert figures["worker_cpu_s"] > 0 and figures["pipeline_s"] > 0
    assert (figures["tracker_cpu_s"] is not None) is figures["spend_tracker"]
    assert (figures["gateway_cpu_s"] is not None) is (where == "gateway")
    assert figures["raw_consume_per_s"] > 0 and figures["pipeline_per_s"] > 0 and figures["worker_rss_mb"] > 0
    # the rates are rounded to whole readings/s, the ratio is not: compare loosely (at these tiny
    # sizes a drain takes seconds for 80 readings, so half a reading/s of rounding is several %)
    rounding = 0.5 / figures["pipeline_per_s"] + 0.5 / figures["raw_consume_per_s"]
    assert 0 < figures["ratio"] == pytest.approx(figures["pipeline_per_s"] / figures["raw_consume_per_s"],
                                                 rel=0.02 + rounding)
    assert figures["freshness_p50_s"] is not None and figures["freshness_p50_s"] <= figures["freshness_p99_s"]


def test_bench_spend_prints_its_fields(tmp_path):
    port = free_port_run(3)  # the broker, its controller and the gateway (port + 2)
    done = subprocess.run(
        [sys.executable, "-m", "gpubill.cli", "bench", "spend", "--rate", "400", "--duration-s", "5", "--tenants", "2",
         "--port", str(port), "--json"],
        capture_output=True, text=True, timeout=400, cwd=tmp_path, env={**os.environ, "NO_COLOR": "1"},
    )
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout)
    assert {"freshness_p99_s", "spend_records_per_s", "tracker_cpu_pct", "worker_cpu_pct", "producer_cpu_pct",
            "broker_cpu_pct", "gateway_cpu_pct", "exhausted_events", "exhausted_p99_s", "events_emitted",
            "transit_p99_s", "consume_p99_s"} <= set(figures)
    assert figures["consume_p50_s"] is not None and figures["consume_p50_s"] <= figures["consume_p99_s"]
    # 200 cards over 2 tenants, A800 at ¥1/360 a second, a quarter of 5 s: 100 × 1.25 / 360 = 0.347… → ¥0.34
    assert (figures["tenants"], figures["top_up"]) == (2, "0.34")
    assert figures["spend_records"] > 0 and figures["spend_records_per_s"] > 0
    assert figures["events_emitted"] == figures["events_emitted_by_tracker"] > 0



def test_bench_books_rebuilds_what_it_wrote(tmp_path):
    port = free_port_run(2)  # the broker and its controller
    done = subprocess.run(
        [sys.executable, "-m", "gpubill.cli", "bench", "books", "--tenants", "20", "--months", "2", "--port", str(port),
         "--json"],
        capture_output=True, text=True, timeout=400, cwd=tmp_path, env={**os.environ, "NO_COLOR": "1"},
    )
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout)
    assert figures["identical"] is True  # every projected table of the rebuilt database equals the written one's
    # 20 tenants × 2 months, one invoice each, plus a replacement for each void
    assert figures["invoices"] == 40 + figures["voids"] and figures["tables"]["invoices"] == figures["invoices"]
    assert figures["tables"]["tenants"] == 20 and figures["tables"]["billing_runs"] == 2
    assert figures["tables"]["invoice_lines"] == figures["invoice_lines"] > 3 * figures["invoices"]
    # the rebuild projected every fact written, and the rule set the books were opened with
    assert figures["projected"] == figures["facts"] + 1 == figures["tables"]["rule_sets"] + figures["facts"]
    # one commit marker per transaction beside the facts: more messages than facts, far fewer than twice
    assert figures["facts"] + 1 < figures["messages"] < 2 * figures["facts"]
    assert figures["topic_bytes"] > 1000 * figures["facts"] and figures["rebuild_s"] >= figures["books_s"] > 0
