"""Column lists of the ClickHouse tables written by the pipeline, in DDL order.

Kept next to the migrations so that a change to one is seen beside the other; the sink
inserts plain tuples in exactly this order.
"""

READINGS_USAGE = (
    "event_id", "ts", "second", "site", "node", "gpu_uuid", "gpu_model", "tenant", "instance",
    "util_pct", "mem_used_mib", "src_partition", "src_offset", "ingested_at",
)
READINGS_POWER = (
    "event_id", "ts", "second", "site", "node", "gpu_uuid", "power_mw", "src_partition", "src_offset", "ingested_at",
)
RATED_SECONDS = (
    "stream", "gpu_uuid", "second", "period", "tenant", "instance", "gpu_model", "site", "node",
    "plan", "rent_price", "rent_per_s", "discount_pct", "util_pct", "energy_mj", "band", "tariff_per_kwh", "pue",
    "version", "src_partition", "src_offset", "rated_at",
)
DEADLETTERS = (
    "source_topic", "source_partition", "source_offset", "source_line", "source_index", "reason", "original", "dead_at",
)
CONFLICTS = (
    "stream", "gpu_uuid", "second", "kept_event_id", "conflicting_event_id", "src_partition", "src_offset", "detected_at",
)
