"""The seam between the agent and what it samples: a `Source` hands out ticks.

A tick is one second's samples of the cards that reported, in the order the source read
them. Two sources stand behind the seam:

    NvmlSource  (nvml.py)   the node's cards through nvidia-ml-py, on the wall-clock second
    TraceSource (trace.py)  a recorded trace, at its own `ts`, for tests, demos and a customer's case

`make_source` builds one from `--source`. A source never raises for one card's fault (an
NVML error, a card lost, a bad trace line): it reports the fault (metrics.Faults) and hands
out the other cards. It raises SourceUnavailable only when it cannot start at all.

Why not a dcgm-exporter scrape as a third source: dcgm-exporter publishes a Prometheus
page that the scraper samples whenever it asks; its values (power, DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION)
carry no sample time of their own, are refreshed on DCGM's own period (30 s by default)
and pass through text floats. The agent would bill a second from a value of an unknown
second. NVML gives the counter itself, on the agent's own second; a node that runs DCGM
still has NVML (DCGM is built on it). docs/agent.md says more.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from streams.agent.errors import AgentError
from streams.agent.readings import CardSample


@dataclass(frozen=True, slots=True)
class Tick:
    """One second's samples: `second` (Unix time), the cards that reported, and notes
    (card, what) of things a card half-reported, for the agent to count."""

    second: int
    samples: tuple[CardSample, ...]
    notes: tuple[tuple[str, str], ...] = ()


class Source(Protocol):
    """What the agent samples. `start(state)` gets back what `state()` returned in the last
    run (kept in the spool with the readings); `next_tick(after)` blocks until the next
    tick is due and returns it (None: no more ticks, a trace at its end) — NVML never one
    of a second ≤ `after`, the agent's last; a trace at its own seconds, and the agent
    drops any card-second not after that card's last; `due()` says whether a tick is
    ready without waiting."""

    name: str

    def start(self, state: dict[str, Any]) -> None: ...

    def state(self) -> dict[str, Any]: ...

    def next_tick(self, after: int | None) -> Tick | None: ...

    def due(self) -> bool: ...

    def close(self) -> None: ...


def make_source(spec: str, **options: Any) -> Source:
    """The source named by `--source`: "nvml" or "trace:FILE". `options`: models, faults,
    sleep (an interruptible wait, so that a stop is not held up), and for a trace its speed."""
    common = {"models": options["models"], "faults": options["faults"]}
    if "sleep" in options:
        common["sleep"] = options["sleep"]
    if spec == "nvml":
        from streams.agent.nvml import NvmlSource

        return NvmlSource(**common)
    if spec.startswith("trace:") and len(spec) > len("trace:"):
        from streams.agent.trace import TraceSource

        return TraceSource(Path(spec[len("trace:"):]), speed=options.get("speed", 1.0), **common)
    raise AgentError(f"--source {spec!r}: give nvml, or trace:FILE for a recorded trace")
