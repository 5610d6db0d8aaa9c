"""`gpubill correct reattribute|void`, `gpubill corrections list` and `gpubill corrections sync`:
compensating events on gpu.corrections.v1 (schemas/corrections.py; streams/kafka/corrections.py).
The readings are never changed: a correction is an event of its own, checked here before it is
produced; `sync` takes the log into the database as the worker does (streams/corrections_sync.py)."""

from __future__ import annotations

import sys
import time
from typing import Optional

import typer

from gpubill.cli.common import check_period, connect, out, read_rules, terminal_text
from gpubill.config import load_settings
from gpubill.errors import GpubillError

app = typer.Typer(help="Correct readings with compensating events (the readings themselves never change).",
                  no_args_is_help=True)
list_app = typer.Typer(help="The corrections on gpu.corrections.v1.", no_args_is_help=True)

_FROM = typer.Option(..., "--from", help="Start, RFC 3339 with an offset (inclusive), e.g. 2026-03-10T08:00:00Z.")
_TO = typer.Option(..., "--to", help="End, RFC 3339 with an offset (exclusive); at most 31 days after --from.")
_REASON = typer.Option(..., "--reason", help="Why (kept with the correction, one line, at most 500 characters).")


def _send(document: dict) -> None:
    """Check `document` as the pipeline will, check its card is known, then produce it."""
    from schemas.corrections import InvalidCorrection, correction_event_id, parse_correction
    from streams.kafka.corrections import produce_correction

    import orjson

    from billing.journal import actor_here

    document = {**document, "author": actor_here()}
    document["event_id"] = correction_event_id(document)
    try:
        correction = parse_correction(orjson.dumps(document), int(time.time()))
    except InvalidCorrection as exc:
        raise GpubillError(f"correction refused: {exc}") from None
    settings = load_settings()
    with connect(settings) as database:
        known = database.query(
            "SELECT (SELECT count() FROM readings_usage WHERE gpu_uuid = {g:String}) + "
            "(SELECT count() FROM readings_power WHERE gpu_uuid = {g:String})", {"g": correction.gpu_uuid})[0][0]
    if not int(known):
        raise GpubillError(f"correction refused: no readings of card {correction.gpu_uuid!r} are stored; "
                           "check the --gpu (a card's gpu_uuid, as its readings name it)")
    produce_correction(settings, document)
    out.print(f"produced {correction.kind} {terminal_text(correction.event_id)} for {terminal_text(correction.gpu_uuid)} "
              f"{correction.from_} – {correction.to}", highlight=False)


@app.command("reattribute")
def correct_reattribute(
    gpu: str = typer.Option(..., "--gpu", help="The card's gpu_uuid."),
    start: str = _FROM,
    end: str = _TO,
    tenant: str = typer.Option(..., "--tenant", help="The tenant the usage belongs to; '' for nobody (not rented)."),
    instance: Optional[str] = typer.Option(None, "--instance", help="The instance, if it changes too."),
    reason: str = _REASON,
) -> None:
    """The card's usage in [--from, --to) belongs to --tenant (and --instance); its energy follows."""
    _send({"kind": "reattribute", "gpu_uuid": gpu, "from": start, "to": end, "tenant": tenant or None,
           "instance": instance or None, "reason": reason})


@app.command("void")
def correct_void(
    gpu: str = typer.Option(..., "--gpu", help="The card's gpu_uuid."),
    start: str = _FROM,
    end: str = _TO,
    stream: str = typer.Option("both", "--stream", help="usage, power or both."),
    reason: str = _REASON,
) -> None:
    """The card's readings of --stream in [--from, --to) do not count."""
    _send({"kind": "void_readings", "gpu_uuid": gpu, "from": start, "to": end, "stream": stream, "reason": reason})


@list_app.command("list")
def corrections_list(
    period: Optional[str] = typer.Option(None, help="Only corrections touching this billing period YYYY-MM."),
    as_json: bool = typer.Option(False, "--json", help="One JSON array."),
) -> None:
    """Every correction on the topic, oldest first: what it corrects, who asked and why; refused ones with the reason."""
    import orjson

    from streams.kafka.corrections import read_corrections

    settings = load_settings()
    rules = read_rules(settings)
    wanted = check_period(period) if period else None
    logged = read_corrections(settings, int(time.time()))
    rows = []
    for item in logged:
        c = item.correction
        periods = sorted({rules.period_of(c.from_s), rules.period_of(c.to_s - 1)}) if c else []
        if wanted and wanted not in periods:
            continue
        rows.append({
            "status": item.status, "reason_refused": item.reason, "partition": item.partition, "offset": item.offset,
            **({} if c is None else {
                "event_id": c.event_id, "kind": c.kind, "gpu_uuid": c.gpu_uuid, "from": c.from_, "to": c.to,
                "tenant": getattr(c, "tenant", None), "instance": getattr(c, "instance", None),
                "stream": getattr(c, "stream", None), "reason": c.reason, "author": c.author, "periods": periods}),
        })
    if as_json:
        sys.stdout.write(orjson.dumps(rows).decode() + "\n")
        return
    if not rows:
        out.print("no corrections" + (f" touching {wanted}" if wanted else ""))
    for row in rows:
        if "event_id" not in row:
            out.print(f"  {terminal_text('[' + row['status'] + ']')} partition {row['partition']} offset {row['offset']}: "
                      f"{terminal_text(row['reason_refused'])}", highlight=False)
            continue
        target = (f"→ {row['tenant'] or 'nobody'}" if row["kind"] == "reattribute" else f"void {row['stream']}")
        flag = "" if row["status"] == "ok" else f" [{row['status']}]"
        out.print(f"  {terminal_text(row['event_id'] + flag)}  {terminal_text(row['gpu_uuid'])}  {row['from']} – "
                  f"{row['to']}  {terminal_text(target)}  by {terminal_text(row['author'])}: "
                  f"{terminal_text(row['reason'])}", highlight=False)


@list_app.command("sync")
def corrections_sync(
    as_json: bool = typer.Option(False, "--json", help="One JSON object."),
) -> None:
    """Take the topic into the database now, as the worker does every few seconds; prints what this sync wrote.

    Corrections are stored, event ids reused with other content recorded as conflicts, malformed
    ones and those of cards without readings dead-lettered with the reason; each message once."""
    import orjson

    from streams.corrections_sync import sync_corrections

    settings = load_settings()
    with connect(settings) as database:
        report = sync_corrections(database, settings, int(time.time()))
    if as_json:
        def positions(entries) -> list[dict]:
            return [{"partition": e.partition, "offset": e.offset, "reason": e.reason,
                     **({"event_id": e.correction.event_id} if e.correction is not None else {})} for e in entries]

        sys.stdout.write(orjson.dumps({
            "read": report.read, "stored": positions(report.stored), "conflicts": positions(report.conflicts),
            "deadlettered": positions(report.dead), "duplicates": report.duplicates, "earlier": report.earlier,
        }).decode() + "\n")
        return
    out.print(f"synced {report.read:,} corrections from the log: {len(report.stored):,} stored, "
              f"{len(report.conflicts):,} conflicts, {len(report.dead):,} dead-lettered now; "
              f"{report.duplicates:,} duplicates, {report.earlier:,} taken before", highlight=False)
    for entry in report.stored:
        c = entry.correction
        target = f"→ {getattr(c, 'tenant', None) or 'nobody'}" if c.kind == "reattribute" else f"void {c.stream}"
        out.print(f"  STORED {terminal_text(c.event_id)}  {terminal_text(c.gpu_uuid)}  {c.from_} – {c.to}  "
                  f"{terminal_text(target)}", highlight=False)
    for label, entries in (("CONFLICT", report.conflicts), ("DEAD", report.dead)):
        for entry in entries:
            out.print(f"  {label} partition {entry.partition} offset {entry.offset}: {terminal_text(entry.reason)}",
                      highlight=False)
