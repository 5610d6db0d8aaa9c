"""`gpubill bench pipeline --json` runs end to end and prints exactly its fields (tiny sizes:
this checks the command, it measures nothing)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.ports import free_port_pair

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("where", ["embedded", "gateway"])
def test_bench_pipeline_prints_its_fields(tmp_path, where):
    port = free_port_pair()
    done = subprocess.run(
        [sys.executable, "-m", "gpubill.cli", "bench", "pipeline", "--gpus", "8", "--seconds", "5",
         "--freshness-rate", "400", "--freshness-s", "2", "--port", str(port), "--json"]
        + (["--gateway"] if where == "gateway" else []),
        capture_output=True, text=True, timeout=300, cwd=tmp_path, env={**os.environ, "NO_COLOR": "1"},
    )
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout)
    assert list(figures) == ["raw_consume_per_s", "pipeline_per_s", "ratio", "freshness_p50_s", "freshness_p99_s",
                             "worker_rss_mb"]
    assert figures["raw_consume_per_s"] > 0 and figures["pipeline_per_s"] > 0 and figures["worker_rss_mb"] > 0
    # the rates are rounded to whole readings/s, the ratio is not: compare loosely (at these tiny
    # sizes a drain takes seconds for 80 readings, so half a reading/s of rounding is several %)
    rounding = 0.5 / figures["pipeline_per_s"] + 0.5 / figures["raw_consume_per_s"]
    assert 0 < figures["ratio"] == pytest.approx(figures["pipeline_per_s"] / figures["raw_consume_per_s"],
                                                 rel=0.02 + rounding)
    assert figures["freshness_p50_s"] is not None and figures["freshness_p50_s"] <= figures["freshness_p99_s"]
