"""Realistic fleet readings for demos and tests: a pure generator, no Kafka, no clock.

`simulate_fleet` yields, for every second and every GPU, one usage reading and one power
reading as plain dicts shaped exactly like SPEC §3 (version 1 events). What it models:

- **Leases.** A card is rented by one tenant for a stretch (20 min to 8 h), then released
  for a while (5 min to 3 h); about one card in eight is never rented. A free card reports
  `tenant` and `instance` as null.
- **Workloads.** Each lease runs one pattern: *training* (90-100 % with checkpoint dips),
  *inference* (bursts of load on a low floor) or *idle* (a notebook left open, 0-5 %).
- **Power.** `idle_w + util × (max_w − idle_w)` plus a little noise, in watts, IT power of
  the card including its share of the host. The profiles are chosen so that at typical
  load (`TYPICAL_UTIL`, the mean of the lease mix) a rented card draws the operator's averages of SPEC §1: about 203 W for an
  RTX 4090, 857 W for an A800 and 947 W for an H800.

- **Counters** (`counters=True`; off by default). Each power reading also carries the
  card's cumulative energy counter (`energy_mj`, as NVML's total energy: an integer of mJ
  since the driver loaded, starting from a per-card value) and the counting run
  (`energy_epoch`, one per node: `<node>-boot-1`). The counter rises by the second's draw,
  read up to 50 ms into the second (so a second's rise differs from its power_w a little
  and never falls). Everything else is the same reading for reading as without counters.

Determinism: every card has its own random stream seeded from (seed, site, model, card
index), so a run is reproducible and a longer run or a larger fleet extends a shorter
one: the readings of card g at second s depend only on seed, site, model, g, start and s.
"""

from __future__ import annotations

import hashlib
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal

CARDS_PER_NODE = 8
# The mean load of a rented card under the lease mix below (about 70 % training at ~96 %,
# 25 % bursty inference at ~33 %, 5 % idle): where the operator's averages are met.
TYPICAL_UTIL = Decimal("0.75")
# One card in eight is never rented during a run (spares, cards being serviced).
NEVER_RENTED_SHARE = 0.125


@dataclass(frozen=True)
class ModelProfile:
    """Power envelope of one GPU model: IT watts of a card including its host share."""

    gpu_model: str
    idle_w: Decimal
    max_w: Decimal
    memory_mib: int = 81920

    def power_w(self, util: Decimal) -> Decimal:
        """Expected draw at utilisation `util` (0..1), without noise."""
        return self.idle_w + util * (self.max_w - self.idle_w)


# idle + 0.75 × (max − idle): 50 + 0.75 × 204 = 203 W; 250 + 0.75 × 810 = 857.5 W;
# 270 + 0.75 × 903 = 947.25 W — the averages behind the operator's electricity column.
PROFILES: dict[str, ModelProfile] = {
    "RTX4090": ModelProfile("RTX4090", idle_w=Decimal("50"), max_w=Decimal("254"), memory_mib=24564),
    "A800-80G": ModelProfile("A800-80G", idle_w=Decimal("250"), max_w=Decimal("1060"), memory_mib=81920),
    "H800-80G": ModelProfile("H800-80G", idle_w=Decimal("270"), max_w=Decimal("1173"), memory_mib=81920),
}

# Lease lengths and gaps, in seconds.
_LEASE_S = (20 * 60, 8 * 3600)
_GAP_S = (5 * 60, 3 * 3600)
# Share of leases per workload pattern.
_PATTERNS = (("training", 0.7), ("inference", 0.25), ("idle", 0.05))

_TRAINING, _INFERENCE, _IDLE, _FREE = 0, 1, 2, 3


def _card_seed(seed: int, site: str, gpu_model: str, index: int) -> int:
    digest = hashlib.sha256(f"{seed}|{site}|{gpu_model}|{index}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def gpu_uuid_for(seed: int, site: str, gpu_model: str, index: int) -> str:
    """A stable `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` identity for card `index`."""
    h = hashlib.sha256(f"uuid|{seed}|{site}|{gpu_model}|{index}".encode()).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def node_name(site: str, gpu_model: str, node_index: int) -> str:
    """Host names like `gz-a800-n03`: site prefix, model family, 1-based node number."""
    site_prefix = site.split("-", 1)[0]
    family = gpu_model.split("-", 1)[0].lower()
    return f"{site_prefix}-{family}-n{node_index + 1:02d}"


def _log_uniform(rng: random.Random, low: int, high: int) -> int:
    """Many short stretches, a few long ones."""
    return int(low * (high / low) ** rng.random())


class _Card:
    """One card's lease schedule and workload state; advanced one second at a time."""

    __slots__ = (
        "rng", "profile", "tenants", "never_rented", "state", "until", "tenant", "instance",
        "base", "mem_mib", "burst", "dip_until", "noise_w",
    )  # fmt: skip

    def __init__(self, rng: random.Random, profile: ModelProfile, tenants: list[str], start: int) -> None:
        self.rng = rng
        self.profile = profile
        self.tenants = tenants
        self.never_rented = not tenants or rng.random() < NEVER_RENTED_SHARE
        self.noise_w = float(profile.max_w - profile.idle_w) * 0.01
        self.burst = False
        self.dip_until = 0
        # Start somewhere inside a lease or a gap, so a short run already sees a mix.
        if not self.never_rented and rng.random() < 0.7:
            self._rent(start, remaining_share=rng.random())
        else:
            self._free(start, remaining_share=rng.random())

    def _rent(self, now: int, remaining_share: float = 1.0) -> None:
        rng = self.rng
        self.until = now + max(60, int(_log_uniform(rng, *_LEASE_S) * remaining_share))
        # Bigger tenants rent more: tenant k is chosen with weight 1/k.
        self.tenant = rng.choices(self.tenants, weights=[1 / (k + 1) for k in range(len(self.tenants))])[0]
        self.instance = f"ins-{rng.getrandbits(32):08x}"
        pick, acc = rng.random(), 0.0
        for name, share in _PATTERNS:
            acc += share
            if pick < acc:
                break
        memory = self.profile.memory_mib
        if name == "training":
            self.state, self.base = _TRAINING, rng.uniform(93.0, 99.0)
            self.mem_mib = int(memory * rng.uniform(0.75, 0.97))
        elif name == "inference":
            self.state, self.base = _INFERENCE, rng.uniform(55.0, 90.0)
            self.mem_mib = int(memory * rng.uniform(0.30, 0.85))
        else:
            self.state, self.base = _IDLE, rng.uniform(0.0, 3.0)
            self.mem_mib = int(memory * rng.uniform(0.0, 0.10))

    def _free(self, now: int, remaining_share: float = 1.0) -> None:
        self.state = _FREE
        self.tenant = self.instance = None
        self.base, self.mem_mib = 0.0, 0
        if self.never_rented:
            self.until = 1 << 62
        else:
            self.until = now + max(60, int(_log_uniform(self.rng, *_GAP_S) * remaining_share))

    def step(self, now: int) -> float:
        """Move to second `now` and return the utilisation in percent (unrounded)."""
        if now >= self.until:
            if self.state == _FREE:
                self._rent(now)
            else:
                self._free(now)
        rng = self.rng
        state = self.state
        if state == _TRAINING:
            if now < self.dip_until:
                return rng.uniform(5.0, 30.0)  # checkpoint write: the GPU waits on storage
            if rng.random() < 1 / 1800:
                self.dip_until = now + rng.randint(15, 60)
            return min(100.0, self.base + rng.gauss(0.0, 1.5))
        if state == _INFERENCE:
            if rng.random() < (0.08 if self.burst else 0.05):
                self.burst = not self.burst
            if self.burst:
                return min(100.0, self.base + rng.gauss(0.0, 6.0))
            return rng.uniform(2.0, 15.0)
        if state == _IDLE:
            return self.base + rng.uniform(0.0, 2.0)
        return rng.uniform(0.0, 0.5) if rng.random() < 0.1 else 0.0


def _rfc3339(second: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(second))


def simulate_fleet(
    *,
    gpus: int,
    gpu_model: str,
    minutes: int,
    start: int,
    tenants: int,
    site: str = "gz-guian",
    seed: int = 7,
    models: list[str] | None = None,
    counters: bool = False,
) -> Iterator[dict]:
    """Readings of `gpus` cards for `minutes` minutes from `start` (UTC epoch seconds).

    Yields `gpus × minutes × 60 × 2` dicts in time order: for each second, for each card,
    its usage reading then its power reading. Cards fill nodes of eight; with `models`
    the nodes take those models in turn (node 1 the first, node 2 the second, ...),
    otherwise every card is a `gpu_model`. Tenants are `tenant-01` .. `tenant-NN`;
    `tenants=0` leaves every card unrented. With `counters` every power reading carries the
    card's energy counter (module docstring). Raises ValueError for an unknown model or a
    negative count.
    """
    fleet_models = list(models) if models else [gpu_model]
    unknown = [m for m in fleet_models if m not in PROFILES]
    if unknown:
        raise ValueError(f"unknown GPU model {unknown[0]!r}: choose one of {', '.join(PROFILES)}")
    if gpus < 0 or minutes < 0 or tenants < 0:
        raise ValueError("gpus, minutes and tenants must not be negative")

    tenant_names = [f"tenant-{k + 1:02d}" for k in range(tenants)]
    cards: list[_Card] = []
    identities: list[tuple[str, str, str, str, float, float]] = []
    per_model_index: dict[str, int] = {}
    per_model_node: dict[str, int] = {}
    for index in range(gpus):
        node_index, slot = divmod(index, CARDS_PER_NODE)
        model = fleet_models[node_index % len(fleet_models)]
        if slot == 0:
            per_model_node[model] = per_model_node.get(model, -1) + 1
        card_no = per_model_index[model] = per_model_index.get(model, -1) + 1
        profile = PROFILES[model]
        rng = random.Random(_card_seed(seed, site, model, card_no))
        cards.append(_Card(rng, profile, tenant_names, start))
        uuid = gpu_uuid_for(seed, site, model, card_no)
        identities.append(
            (
                uuid,
                node_name(site, model, per_model_node[model]),
                model,
                site,
                float(profile.idle_w),
                float(profile.max_w - profile.idle_w) / 100.0,
            )
        )

    fleet = list(zip(cards, identities))
    # Counters: the energy drawn before `start` (up to ≈ 11.6 days at 1 kW), the lag of each
    # reading into its second from a stream of its own (so the cards' readings stay as
    # without counters), and the counting run of each card's node.
    drawn_mj = [int.from_bytes(hashlib.sha256(uuid.encode()).digest()[:8], "big") % 10**12
                for uuid, *_ in identities] if counters else []
    lags = [random.Random(_card_seed(seed, site, "counter", index)) for index in range(gpus)] if counters else []
    epochs = [f"{node}-boot-1" for _, node, *_ in identities]
    for second in range(start, start + minutes * 60):
        ts = _rfc3339(second)
        suffix_u, suffix_p = f"-{second}-u", f"-{second}-p"
        for index, (card, (uuid, node, model, card_site, idle_w, w_per_pct)) in enumerate(fleet):
            util = card.step(second)
            if util < 0.0:
                util = 0.0
            power = idle_w + util * w_per_pct + card.rng.gauss(0.0, card.noise_w)
            power_w = round(min(5000.0, max(0.0, power)), 1)
            yield {
                "kind": "usage",
                "event_id": uuid + suffix_u,
                "ts": ts,
                "site": card_site,
                "node": node,
                "gpu_uuid": uuid,
                "gpu_model": model,
                "tenant": card.tenant,
                "instance": card.instance,
                "util_pct": round(util, 1),
                "mem_used_mib": card.mem_mib,
            }
            reading = {
                "kind": "power",
                "event_id": uuid + suffix_p,
                "ts": ts,
                "site": card_site,
                "node": node,
                "gpu_uuid": uuid,
                "power_w": power_w,
            }
            if counters:
                # The second's draw in mJ, of which the last ≤ 5 % is read with the next second.
                power_mj = round(power_w * 1000)
                drawn_mj[index] += power_mj
                reading["energy_mj"] = drawn_mj[index] - int(power_mj * 0.05 * lags[index].random())
                reading["energy_epoch"] = epochs[index]
            yield reading
