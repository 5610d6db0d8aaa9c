"""What things cost: the rule files, their loader, pure pricing, money and invoice assembly.

Pure: no Kafka, no ClickHouse, no asyncio, no clock. Times are UTC epoch seconds and
rule snapshots are passed in, so pricing is deterministic and replays agree to the fen.

One home each: the money formulas in `pricing`, the one rounding in `money`, the rates a
rule set answers with in `rates`, the rule set in `ruleset`, invoice lines in `invoice`.
"""

from billing_rules.concessions import Concession, UnknownCreditReason, fate_of
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
    IssuedInvoice,
    RentUsage,
    build_invoice,
    credit_available,
    credit_balances,
)
from billing_rules.loader import DEFAULT_RULES_DIR, RULE_FILES, load_rules
from billing_rules.money import format_money, format_quantity, round_fen, round_quantity
from billing_rules.parties import Seller, uscc_problem
from billing_rules.pricing import (
    MJ_PER_KWH,
    S_PER_HOUR,
    billed_kwh,
    discount_amount,
    energy_amount,
    gpu_hours,
    rent_amount,
    unit_price_per_hour,
)
from billing_rules.rates import CreditGrant, EnergyRate, RentRate, SiteInfo
from billing_rules.ruleset import RuleSet

__all__ = [
    "DEFAULT_RULES_DIR",
    "MJ_PER_KWH",
    "RULE_FILES",
    "S_PER_HOUR",
    "Adjustment",
    "CreditBalance",
    "BillingRulesError",
    "Concession",
    "CreditGrant",
    "EnergyRate",
    "EnergyUsage",
    "InvalidPeriod",
    "InvoiceDraft",
    "InvoiceLine",
    "IssuedInvoice",
    "NoRuleInForce",
    "RentRate",
    "RentUsage",
    "RuleSet",
    "RuleSetInvalid",
    "Seller",
    "SiteInfo",
    "UnknownCreditReason",
    "UnknownModel",
    "UnknownSite",
    "billed_kwh",
    "build_invoice",
    "credit_available",
    "credit_balances",
    "discount_amount",
    "energy_amount",
    "fate_of",
    "gpu_hours",
    "rent_amount",
    "unit_price_per_hour",
    "uscc_problem",
    "format_money",
    "format_quantity",
    "load_rules",
    "round_fen",
    "round_quantity",
]
