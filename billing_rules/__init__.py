"""What things cost: the rule files, their loader, pure pricing, money and invoice assembly.

Pure: no Kafka, no ClickHouse, no asyncio, no clock. Times are UTC epoch seconds and
rule snapshots are passed in, so pricing is deterministic and replays agree to the fen.
"""

from billing_rules.aggregate import (
    AggregateColumns,
    AggregateStraddlesPrice,
    EnergyTotal,
    InvalidAggregate,
    PricedAggregates,
    RentTotal,
    aggregation_buckets,
    price_aggregates,
    segment_edges,
)
from billing_rules.errors import (
    BillingRulesError,
    InvalidPeriod,
    NoRuleInForce,
    RuleSetInvalid,
    UnknownModel,
    UnknownSite,
)
from billing_rules.invoice import (
    Adjustment,
    CreditBalance,
    EnergyUsage,
    InvoiceDraft,
    InvoiceLine,
    RentUsage,
    build_invoice,
    credit_available,
    credit_balances,
)
from billing_rules.loader import DEFAULT_RULES_DIR, RULE_FILES, load_rules
from billing_rules.money import MJ_PER_KWH, format_money, format_quantity, round_fen, round_quantity
from billing_rules.ruleset import CreditGrant, EnergyRate, RentRate, RuleSet, SiteInfo, energy_amount, rent_amount

__all__ = [
    "AggregateColumns",
    "AggregateStraddlesPrice",
    "EnergyTotal",
    "InvalidAggregate",
    "PricedAggregates",
    "RentTotal",
    "aggregation_buckets",
    "price_aggregates",
    "segment_edges",
    "DEFAULT_RULES_DIR",
    "MJ_PER_KWH",
    "RULE_FILES",
    "Adjustment",
    "CreditBalance",
    "BillingRulesError",
    "CreditGrant",
    "EnergyRate",
    "EnergyUsage",
    "InvalidPeriod",
    "InvoiceDraft",
    "InvoiceLine",
    "NoRuleInForce",
    "RentRate",
    "RentUsage",
    "RuleSet",
    "RuleSetInvalid",
    "SiteInfo",
    "UnknownModel",
    "UnknownSite",
    "build_invoice",
    "credit_available",
    "credit_balances",
    "energy_amount",
    "rent_amount",
    "format_money",
    "format_quantity",
    "load_rules",
    "round_fen",
    "round_quantity",
]
