"""Batched input on real parts: a message carrying a node's readings as a JSON array."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.e2e


def reading(kind: str, gpu: str, watts=None) -> dict:
    base = {"kind": kind, "event_id": f"{gpu}-{kind}-0", "ts": "2026-03-10T00:00:00Z", "site": "gz-guian",
            "node": "gz-n7", "gpu_uuid": gpu}
    if kind == "usage":
        return base | {"gpu_model": "A800-80G", "tenant": "acme", "instance": "i-1", "util_pct": 50, "mem_used_mib": 1}
    return base | {"power_w": watts}


def test_a_bad_element_is_dead_lettered_alone(gpubill):
    usage = [reading("usage", g) for g in ("B1", "B2", "B3")]
    power = [reading("power", "B1", 1000), reading("power", "B2", 9000), reading("power", "B3", 1000)]
    ndjson = gpubill.cwd / "batched.ndjson"
    ndjson.write_text(json.dumps(usage) + "\n" + json.dumps(power) + "\n")
    gpubill.run("replay", str(ndjson))
    gpubill.run("worker", "--drain")

    [dead] = gpubill.json("dlq", "list", "--format", "json")
    assert dead["reason"].startswith("element 2: power_w:"), dead
    assert json.loads(dead["original"]) == power[1]
    assert dead["source_index"] == 2

    # the other five readings went through: acme rents 3 s (3 × ¥1 in the test rules),
    # and the energy of B1 and B3: 2 × 1000 W × 1 s = 2,000,000 mJ
    invoice = gpubill.run("invoice", "run", "--period", "2026-03")
    assert "1 invoice created" in invoice.stdout
    shown = gpubill.json("invoice", "show", "--period", "2026-03", "--tenant", "acme", "--format", "json")
    [rent] = [line for line in shown["lines"] if line["kind"] == "rent"]
    assert rent["amount"] == "3.00"
    assert "clean" in gpubill.run("audit", "--period", "2026-03").stdout
