"""A command that plans money refuses in one line when the log of corrections cannot be read
(issue 36, item 3): never a plausible number without them. No broker answers on the port here
(a real refused connection, no mock: refused at once, not after the Kafka clients' 10–15 s of
retries); the planning commands and the invoice run take the log to its end first
(`--offline`, which plans with the stored corrections and says so: tests/unit/test_rerate_preview.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.ports import free_port


def test_rerate_and_invoice_run_refuse_in_one_line_when_the_topic_cannot_be_read(tmp_path: Path) -> None:
    from tests.chdb_template import migrated_dsn

    env = {**os.environ, "GPUBILL_CLICKHOUSE": migrated_dsn(tmp_path / "ch"), "GPUBILL_KAFKA": f"localhost:{free_port()}",
           "GPUBILL_RULES": str(Path(__file__).parents[1] / "e2e" / "rules"), "NO_COLOR": "1",
           "GPUBILL_HOME": str(tmp_path / "var"), "COLUMNS": "2000"}

    def gpubill(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "gpubill.cli", *args], env=env, capture_output=True, text=True,
                              timeout=180)

    # before: the dry run printed the period's figures without whatever the log holds (exit 0)
    refused = gpubill("rerate", "--period", "2026-03", "--dry-run", "--json")
    assert (refused.returncode, refused.stdout) == (1, "")
    assert refused.stderr.count("\n") == 1, refused.stderr
    assert refused.stderr.startswith(
        "error: rerate 2026-03 refused: the log of corrections (gpu.corrections.v1) cannot be read, so what it holds "
        f"cannot be taken into account: no Kafka broker answers at {env['GPUBILL_KAFKA']}"), refused.stderr
    assert refused.stderr.endswith("(--offline plans with the corrections already stored)\n")

    # before: the invoice run invoiced the period without whatever the log holds
    invoiced = gpubill("invoice", "run", "--period", "2026-03")
    assert (invoiced.returncode, invoiced.stdout, invoiced.stderr.count("\n")) == (1, "", 1), invoiced.stderr
    assert invoiced.stderr.startswith("error: invoice run 2026-03 refused: the log of corrections (gpu.corrections.v1) "
                                      "cannot be read"), invoiced.stderr
