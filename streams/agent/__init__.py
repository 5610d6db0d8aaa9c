"""`gpubill agent`: the program on every GPU node (issue 39, SPEC §3 and §8).

It samples every card once a second, turns each card-second into a usage and a power
reading (SPEC §3) with deterministic event ids, appends them to a local spool that
never loses one, and sends the spool to Kafka (acks=all); a record leaves the spool
only once Kafka acknowledged it.

    sources.py      the seam: `Source` (NVML through one adapter, or a recorded trace)
    nvml.py         the adapter to nvidia-ml-py, checked at start-up
    trace.py        the trace contract: one JSON sample per line
    models.py       card names → catalog ids
    readings.py     a card-second → the JSON bytes of its readings (ids, power_w from mW)
    assignments.py  who rents which card: the control plane's file, re-read when it changes
    spool.py        fsync'd append-only segments, an "acked up to" cursor
    sender.py       the spool → Kafka, in spool order, retrying for ever
    metrics.py      Prometheus metrics and rate-limited fault lines
    settings.py     GPUBILL_KAFKA* without the shell's settings stack
    agent.py        the loop that ties them together

The package is light on purpose: it runs beside the customers' jobs on every node. It
imports kafka-python, prometheus_client and (for `--source nvml`) pynvml, never Faust,
ClickHouse's client, pydantic models or the worker (an import-linter contract holds it).
"""
