"""The `gpubill` command line (SPEC §8). Thin: parse options, call the packages, print.

This module only assembles the commands; each group lives in its own module:

    gpubill simulate | replay                 producers.py
    gpubill agent                             agent.py (the node agent, streams/agent/)
    gpubill worker | spend-tracker | up | scheduler   processes.py
    gpubill status                            running.py (and up's banner, its one-instance check)
    gpubill serve                             serve.py
    gpubill kafka up | down                   kafka.py
    gpubill invoice run | show | write-off    invoice.py
    gpubill payment record | import | list | show | reverse | apply   payment.py
    gpubill credit-note create | list | show  credit_note.py
    gpubill report cost-share | usage, audit  report.py
    gpubill rollup                            rollup.py
    gpubill dlq list                          dlq.py
    gpubill rules check                       rules.py
    gpubill verify-log                        verify_log.py
    gpubill bench pipeline | spend | rating | month | api | rerate | books | receivables | agent   bench.py
    gpubill db migrate, clickhouse serve      db.py
    gpubill demo                              demo.py
    gpubill archive [verify], retention apply archive.py
    gpubill tenant add | list | suspend | resume | unknown   tenant.py
    gpubill key create | list | revoke | audit   key.py
    gpubill balance topup | show, budget set, spend   balance.py
    gpubill events deliver | deliveries       events.py
    gpubill dunning run                       dunning.py
    gpubill receivables, statement            receivables.py

common.py holds the consoles and helpers they share; gpubill/logs.py the JSON log lines of
the long-running commands. Every error a user can cause derives from one of the bases in
`gpubill.errors.USER_ERRORS` and is printed as one line on stderr with exit status 1, and so
is a usage error (a missing or unknown option, a bad value): the command, what is wrong and
where its --help is, exit 1. `gpubill` alone prints the help.
"""

from __future__ import annotations

import os
import sys

import typer

from gpubill.cli import (
    agent, archive, balance, bench, correct, credit_note, db, demo, dlq, dunning, events, invoice, kafka, key, payment,
    processes, producers, rebuild, receivables, report, rerate, rollup, rules, running, serve, tenant, verify_log,
)
from gpubill.cli.common import err, terminal_text
from gpubill.errors import USER_ERRORS
from gpubill.logs import quiet_libraries

# numpy comes in with chDB's client (through pyarrow), and its OpenBLAS starts a thread per
# core that spins beside the worker's (1 % of a drain's CPU). gpubill does no linear algebra.
# Set before any command runs: the commands import the client, and so numpy, only when called.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

app = typer.Typer(
    help="gpubill: meter and bill GPU usage — Kafka readings, Faust pricing, ClickHouse invoices and reports.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
# In this order in `gpubill --help`: the commands, then the groups.
app.command()(producers.simulate)
app.command()(producers.replay)
app.command()(agent.agent)
app.command()(processes.worker)
app.command()(processes.up)
app.command()(running.status)
app.command("spend-tracker")(processes.spend_tracker)
app.command()(processes.scheduler)
app.command()(serve.serve)
app.command()(report.audit)
app.command()(rollup.rollup)
app.command()(demo.demo)
app.command()(rerate.rerate)
app.command("verify-log")(verify_log.verify_log)
app.command()(rebuild.rebuild)
app.add_typer(kafka.app, name="kafka")
app.add_typer(invoice.app, name="invoice")
app.add_typer(credit_note.app, name="credit-note")
app.add_typer(payment.app, name="payment")
app.add_typer(correct.app, name="correct")
app.add_typer(correct.list_app, name="corrections")
app.add_typer(tenant.app, name="tenant")
app.add_typer(key.app, name="key")
app.command()(balance.spend)
app.command()(receivables.receivables)
app.command()(receivables.statement)
app.add_typer(balance.app, name="balance")
app.add_typer(balance.budget_app, name="budget")
app.add_typer(events.app, name="events")
app.add_typer(dunning.app, name="dunning")
app.add_typer(report.app, name="report")
app.add_typer(dlq.app, name="dlq")
app.add_typer(rules.app, name="rules")
app.add_typer(bench.app, name="bench")
app.add_typer(db.clickhouse_app, name="clickhouse")
app.add_typer(db.app, name="db")
app.add_typer(archive.app, name="archive")
app.add_typer(archive.retention_app, name="retention")


# The one adapter to the parser's exceptions: typer 0.2x vendors click (typer._click), older ones
# use click itself; both keep UsageError and NoArgsIsHelpError beside BadParameter. Checked here,
# at import: without them usage errors keep the parser's own boxed form (exit 2).
_PARSER_ERRORS = sys.modules[typer.BadParameter.__module__]
_USAGE_ERROR = getattr(_PARSER_ERRORS, "UsageError", None)
_NO_ARGS = getattr(_PARSER_ERRORS, "NoArgsIsHelpError", None)
ONE_LINE_USAGE = isinstance(_USAGE_ERROR, type) and isinstance(_NO_ARGS, type) and issubclass(_NO_ARGS, _USAGE_ERROR)


def usage_line(exc: BaseException) -> str:
    """A usage error as one line: "gpubill invoice show: Missing option '--period' (see gpubill invoice show --help)"."""
    path = exc.ctx.command_path if exc.ctx is not None else "gpubill"
    message = " ".join(exc.format_message().split()).rstrip(".")
    return f"{path}: {message} (see {path} --help)"


def main() -> None:
    """The `gpubill` entry point: run the command; a user's error is one line and exit 1."""
    quiet_libraries()
    try:
        code = app(prog_name="gpubill", standalone_mode=not ONE_LINE_USAGE)
    except typer.Abort:
        sys.exit(130)
    except USER_ERRORS as exc:
        # One line: details (a broker's log tail, say) are in the files the message names.
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        err.print(f"[red]error:[/red] {terminal_text(first)}", highlight=False, soft_wrap=True)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:
        if ONE_LINE_USAGE and isinstance(exc, _NO_ARGS):  # `gpubill` or a group alone: its help
            sys.stdout.write((exc.ctx.get_help() if exc.ctx is not None else "") + "\n")
            sys.exit(0)
        if ONE_LINE_USAGE and isinstance(exc, _USAGE_ERROR):
            err.print(f"[red]error:[/red] {terminal_text(usage_line(exc))}", highlight=False, soft_wrap=True)
            sys.exit(1)
        raise
    if isinstance(code, int) and code:
        sys.exit(code)
