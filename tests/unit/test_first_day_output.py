"""Issue 36's first-day frictions in what people read: `up`'s banner and log format, `invoice
run`'s sentence and table (money as ¥1,234.56, "1 invoice"), `gpubill status`'s lines."""

from __future__ import annotations

import io
import json
import logging
from decimal import Decimal

import pytest

from billing.invoicing import RunReport
from gpubill.cli.common import count, money
from gpubill.cli.invoice import invoices_table, run_summary
from gpubill.cli.running import _lines, banner, plain_url
from gpubill.config import Settings
from gpubill.logs import HumanFormatter, JsonFormatter, human_logs, setup_logging


class Stream(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


@pytest.mark.parametrize("fmt, stdout_tty, stderr_tty, human", [
    ("auto", True, True, True),
    ("auto", False, True, False),  # `gpubill up > file`: the file gets JSON
    ("auto", True, False, False),  # `gpubill up 2> file`
    ("json", True, True, False),   # asked
    ("human", False, False, True),
])
def test_the_log_format_is_human_only_on_a_terminal_or_when_asked(fmt, stdout_tty, stderr_tty, human):
    assert human_logs(fmt, Stream(stdout_tty), Stream(stderr_tty)) is human


def test_an_unknown_log_format_is_refused():
    with pytest.raises(ValueError, match="'yaml' is not one of auto, human, json"):
        human_logs("yaml")


def test_human_logs_put_warnings_on_the_terminal_and_every_line_as_json_in_the_file(tmp_path, monkeypatch):
    terminal = Stream(True)
    monkeypatch.setattr("sys.stderr", terminal)
    log_file = tmp_path / "logs" / "up.log"
    root = logging.getLogger()
    before = (root.level, list(root.handlers))
    try:
        setup_logging("INFO", json_file=log_file, file_mode=0o600)
        logging.getLogger("faust.worker").info("[^_Worker]: Starting...")
        logging.getLogger("gpubill.gateway").warning("listening on %s", "0.0.0.0")
        for handler in root.handlers:
            handler.flush()
    finally:
        for handler in root.handlers:
            handler.close()
        root.handlers[:] = before[1]
        root.setLevel(before[0])
    shown = terminal.getvalue().splitlines()
    assert len(shown) == 1 and shown[0].endswith(" warning gpubill.gateway: listening on 0.0.0.0")
    assert [json.loads(line)["msg"] for line in log_file.read_text().splitlines()] == [
        "[^_Worker]: Starting...", "listening on 0.0.0.0"]
    assert log_file.stat().st_mode & 0o777 == 0o600
    # the worker keeps the command's own handlers when one of them writes gpubill's JSON (streams/worker.py)
    assert JsonFormatter.gpubill_json


def test_a_human_log_line_is_short_and_has_no_terminal_escapes():
    record = logging.LogRecord("fontTools.subset", logging.WARNING, "", 0, "\x1b[31mred\x1b[0m", (), None)
    record.created = 1_765_000_000.5  # 2025-12-06T05:46:40.5Z
    assert HumanFormatter().format(record) == "05:46:40 warning fontTools.subset: red"


def test_fonttools_subsetting_warnings_are_silenced():
    import reports.render.fonts  # noqa: F401 - its import sets the level

    # "FFTM NOT subset; don't know how to subset; dropped" is a WARNING of this logger
    assert not logging.getLogger("fontTools.subset").isEnabledFor(logging.WARNING)
    assert logging.getLogger("fontTools.subset").isEnabledFor(logging.ERROR)


def test_the_banner_says_what_runs_where_and_never_a_password(tmp_path):
    settings = Settings(clickhouse=f"chdb://{tmp_path / 'clickhouse'}", kafka="localhost:9092", group="gpubill-rating")
    text = banner(pid=4242, parts=["worker", "scheduler", "tenant API", "database gateway"],
                  api_url="http://127.0.0.1:8080", gateway_url="http://127.0.0.1:8123/",
                  finance_dsn="http://finance:s3cret-pw@127.0.0.1:8123/", metrics_port=9464, metrics_host="127.0.0.1",
                  settings=settings, log_file=tmp_path / "var" / "logs" / "up.log")
    lines = text.splitlines()
    assert lines[0] == ("gpubill up (pid 4242): worker, scheduler, tenant API, database gateway. Ctrl-C stops it; "
                        "`gpubill status` says what runs.")
    assert len(lines) <= 8
    assert "s3cret-pw" not in text
    for fragment in ("http://127.0.0.1:8080/", "http://127.0.0.1:8123/", "http://finance:***@127.0.0.1:8123/",
                     "gpubill status --finance-url", "http://127.0.0.1:9464/metrics", str(tmp_path / "var/logs/up.log")):
        assert fragment in text, fragment


@pytest.mark.parametrize("n, noun, expected", [
    (0, "invoice", "0 invoices"), (1, "invoice", "1 invoice"), (2, "invoice", "2 invoices"),
    (1234, "reading", "1,234 readings"), (1, "draft", "1 draft"),
])
def test_counts_say_their_plurals(n, noun, expected):
    assert count(n, noun) == expected


@pytest.mark.parametrize("amount, expected", [
    (Decimal("1234.56"), "¥1,234.56"), (Decimal("0"), "¥0.00"), (Decimal("-10"), "-¥10.00"),
    (Decimal("1234567.005"), "¥1,234,567.01"),  # half up to the fen
    (Decimal("-0.004"), "¥0.00"),  # rounds to nothing: no minus
])
def test_money_for_a_terminal(amount, expected):
    assert money(amount) == expected


def test_invoice_run_says_one_invoice_in_the_singular():
    # before: "2026-03: 1 invoices created, 0 already final"
    report = RunReport(period="2026-03", created=["GB-2026-000001"])
    assert run_summary(report, False, "2026-03") == "2026-03: 1 invoice created, 0 already final"
    report = RunReport(period="2026-03", drafted=["DRAFT-1"], existing=["GB-2026-000001"])
    assert run_summary(report, True, "2026-03").startswith("2026-03: 1 draft made, 0 refreshed, 0 unchanged, "
                                                           "1 already issued")


def test_invoice_run_lists_the_invoices_with_amounts_as_money():
    # before: bare numbers, "  GB-2026-000001  acme   1234.5 CNY"
    listed = [("GB-2026-000001", "acme", Decimal("1234.50")), ("GB-2026-000002", "beta-corp", Decimal("7.25"))]
    assert invoices_table(listed).splitlines() == [
        "  invoice         tenant     total, VAT incl.",
        "  GB-2026-000001  acme              ¥1,234.50",
        "  GB-2026-000002  beta-corp             ¥7.25",
        "  2 invoices                        ¥1,241.75",  # 1,234.50 + 7.25
    ]


def test_status_lines_mask_the_finance_password():
    report = {
        "broker": {"bootstrap": "localhost:9092", "reachable": True},
        "up": {"running": True, "pid": 4242, "since": "2026-12-06T00:49:54Z"},
        "database": {"dsn": "chdb:///srv/var/clickhouse", "embedded": True, "exists": True,
                     "held_by": {"pid": 4242, "command": "gpubill up"}, "served_on": "http://127.0.0.1:8123/",
                     "finance_url": "http://finance:***@127.0.0.1:8123/"},
        "worker": {"group": "gpubill-rating", "lag": 1, "partitions": 16},
        "last_invoice_run": {"period": "2026-03", "completed_at": "2026-04-01T02:05:00Z", "invoices": 1},
        "drafts_waiting": 0,
        "books": {"projected_to": 1234, "halted": ""},
    }
    assert dict(_lines(report)) == {
        "broker": "localhost:9092 reachable",
        "gpubill up": "running, pid 4242 (since 2026-12-06T00:49:54Z)",
        "database": "chdb:///srv/var/clickhouse, served on http://127.0.0.1:8123/ by pid 4242 (gpubill up); "
                    "every gpubill command goes through it",
        "finance URL": "http://finance:***@127.0.0.1:8123/ (with its password: gpubill status --finance-url)",
        "worker lag": "1 reading behind on 16 partitions (group gpubill-rating)",
        "last invoice run": "2026-03, 2026-04-01T02:05:00Z: 1 invoice",
        "drafts waiting": "0",
        "books": "gpu.books.v1 projected to offset 1,234",
    }
    report["books"] = {"projected_to": 17, "halted": "gpu.books.v1 partition 0 offset 17: schema version 9 is newer"}
    assert dict(_lines(report))["books"] == ("gpu.books.v1 projected to offset 17; HALTED: gpu.books.v1 partition 0 "
                                             "offset 17: schema version 9 is newer")


def test_plain_url_leaves_out_who():
    assert plain_url("http://finance:p%40ss@127.0.0.1:8123/") == "http://127.0.0.1:8123/"
