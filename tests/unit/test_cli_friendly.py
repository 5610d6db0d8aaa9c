"""The command line does not trip people (issue 23, item 6): each case is a defect the issue found.

The database is tests/unit/test_current_usage.py's (acme and beta rated in March 2026, no one
registered); commands run as the user runs them, in a subprocess.
"""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from tests.unit.cli_run import UNLOGGED_CLI

from gpubill.cli.invoice import check_ended
from gpubill.errors import GpubillError
from tests.unit.test_current_usage import PERIOD, RULES, db_path, gpubill  # noqa: F401  (the fixture)


def one_line_error(done, *fragments: str) -> str:
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


@pytest.mark.parametrize("args, fragment", [
    (("invoice", "issue", "--tenant", "acme"), "gpubill invoice issue: Missing option '--period'"),
    (("invoice", "show", "--tenant", "acme"), "say which invoice: --number N, or --period YYYY-MM and --tenant T"),
    (("invoice", "show", "--period", PERIOD, "--tenant", "acme", "--bogus"), "No such option: --bogus"),
    (("report", "usage", "--tenant", "acme", "--period", PERIOD), "Missing option '--out'"),
    (("nosuch",), "No such command 'nosuch'"),
    (("balance", "topup", "acme"), "gpubill balance topup"),
])
def test_a_usage_error_is_one_line_and_exit_1(tmp_path, args, fragment):
    # before: click's boxed usage text over several lines, exit 2
    line = one_line_error(gpubill(tmp_path / "no-db", tmp_path, *args), fragment)
    assert line.endswith("--help)") and "╭" not in line


def test_gpubill_alone_prints_its_help(tmp_path):
    done = gpubill(tmp_path / "no-db", tmp_path)
    assert done.returncode == 0 and "Usage: gpubill" in done.stdout


def test_an_unknown_tenant_is_the_same_one_line_everywhere(db_path, tmp_path):  # noqa: F811
    # before: invoice show said "run invoice run first"; report usage wrote an empty file, exit 0
    shown = gpubill(db_path, tmp_path, "invoice", "show", "--tenant", "nobody", "--period", PERIOD)
    first = one_line_error(shown, "unknown tenant 'nobody': not registered and never invoiced")
    out = tmp_path / "nobody.csv"
    report = gpubill(db_path, tmp_path, "report", "usage", "--tenant", "nobody", "--period", PERIOD, "--out", str(out))
    assert one_line_error(report) == first and not out.exists()


def test_a_known_tenant_without_that_invoice_is_told_which_it_has(db_path, tmp_path):  # noqa: F811
    assert gpubill(db_path, tmp_path, "invoice", "run", "--period", PERIOD, "--offline").returncode == 0
    shown = gpubill(db_path, tmp_path, "invoice", "show", "--tenant", "acme", "--period", "2026-02")
    line = one_line_error(shown, "tenant acme has no invoice for 2026-02", "its invoices are for 2026-03")
    assert "invoice run" not in line
    # a rated tenant with usage but no registration still gets its report
    out = tmp_path / "acme.csv"
    assert gpubill(db_path, tmp_path, "report", "usage", "--tenant", "acme", "--period", PERIOD, "--out",
                   str(out)).returncode == 0 and out.read_text().count("\n") > 1


def test_a_period_that_has_not_ended_is_not_invoiced(tmp_path):
    # before: `invoice run --period 2027-05` said "0 invoices created", exit 0
    done = gpubill(tmp_path / "no-db", tmp_path, "invoice", "run", "--period", "2099-05")
    one_line_error(done, "--period 2099-05 has not ended", "2099-06-01 00:00 Asia/Shanghai")
    assert not (tmp_path / "no-db").exists()  # refused before the database is opened


def test_a_period_ends_at_midnight_in_the_billing_zone():
    # March 2026 ends 2026-04-01 00:00 in Shanghai = 2026-03-31T16:00:00Z
    check_ended(RULES, "2026-03", now=datetime(2026, 3, 31, 16, 0, tzinfo=timezone.utc))
    with pytest.raises(GpubillError, match="ends at 2026-04-01 00:00"):
        check_ended(RULES, "2026-03", now=datetime(2026, 3, 31, 15, 59, 59, tzinfo=timezone.utc))


def test_a_piped_table_is_never_cut(db_path, tmp_path):  # noqa: F811
    # before: piped, rich assumed 80 columns and cut figures to "-12.…" (balance show, key audit, tenant list)
    import os
    import subprocess
    import sys

    from tests.unit.test_current_usage import RULES_DIR

    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env.update({"GPUBILL_CLICKHOUSE": f"chdb://{db_path}", "GPUBILL_RULES": str(RULES_DIR), "NO_COLOR": "1"})
    for tenant in ("acme", "beta"):
        subprocess.run([sys.executable, UNLOGGED_CLI, "tenant", "add", tenant, "--name", f"{tenant} " * 12,
                        "--legal-name", "A very long legal name of a company that is registered, Ltd."], env=env,
                       cwd=tmp_path, capture_output=True, text=True, timeout=120)
    for args in (("tenant", "list"), ("balance", "show")):
        done = subprocess.run([sys.executable, UNLOGGED_CLI, *args], env=env, cwd=tmp_path, capture_output=True,
                              text=True, timeout=120)  # stdout is a pipe here
        assert done.returncode == 0, done.stderr
        assert "…" not in done.stdout and max(len(line) for line in done.stdout.splitlines()) > 80, done.stdout


def test_an_empty_dead_letter_list_is_one_line(tmp_path):
    # before: an empty table frame
    from tests.chdb_template import migrated_dsn

    dsn = migrated_dsn(tmp_path / "db")
    import os
    import subprocess
    import sys

    env = {**os.environ, "GPUBILL_CLICKHOUSE": dsn, "NO_COLOR": "1"}
    done = subprocess.run([sys.executable, UNLOGGED_CLI, "dlq", "list"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout) == (0, "no dead-lettered input\n"), done.stderr
    as_json = subprocess.run([sys.executable, UNLOGGED_CLI, "dlq", "list", "--format", "json"], env=env,
                             cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert as_json.stdout.strip() == "[]"


def test_kafka_down_says_stopped_only_once_nothing_answers(monkeypatch, capsys):
    # before: "Kafka broker stopped" while the broker still answered
    from gpubill.cli import kafka
    from tests.unit.cli_run import run_cli

    class Broker:
        log_file = "var/kafka/broker.log"

        def __init__(self, answers: bool):
            self.answers, self.pid = answers, 4242

        def running_pid(self):
            return self.pid

        def down(self):
            self.pid = None
            return True

        def is_up(self, timeout_s=1.0):
            return self.answers

    monkeypatch.setattr(kafka, "_still_answers", lambda broker, wait_s=10.0: broker.is_up())
    monkeypatch.setattr(kafka, "_local_broker", lambda settings: Broker(answers=True))
    code, stdout, stderr = run_cli(monkeypatch, capsys, "kafka", "down")
    assert code == 1 and "still answers" in stderr and "stopped" not in stdout
    monkeypatch.setattr(kafka, "_local_broker", lambda settings: Broker(answers=False))
    code, stdout, _ = run_cli(monkeypatch, capsys, "kafka", "down")
    assert code == 0 and "Kafka broker stopped (pid 4242 has exited)" in stdout


def test_spend_reads_well_without_usage_or_runway(tmp_path):
    # before: "data to no data yet" and "runway — h"
    import os
    import subprocess
    import sys

    from tests.chdb_template import migrated_dsn

    env = {**os.environ, "GPUBILL_CLICKHOUSE": migrated_dsn(tmp_path / "db"), "NO_COLOR": "1", "COLUMNS": "300"}
    run = lambda *args: subprocess.run([sys.executable, UNLOGGED_CLI, *args], env=env, cwd=tmp_path,  # noqa: E731
                                       capture_output=True, text=True, timeout=120)
    assert run("tenant", "add", "quiet", "--name", "Quiet Ltd").returncode == 0
    done = run("spend", "--tenant", "quiet")
    assert done.returncode == 0, done.stderr
    assert "no usage yet this period" in done.stdout and "no runway figure: nothing was used in the last hour" in done.stdout
    assert "data to no data" not in done.stdout and "— h" not in done.stdout
