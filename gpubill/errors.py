"""Errors of the shell (command line, settings, development environment), and the map of
every package's error base that the command line reports as one line with exit status 1.

    GpubillError              base of the shell's own errors
    ├── ConfigError           a setting is malformed (GPUBILL_* variables, settings file, options)
    └── (gpubill.devenv)      JavaMissing, MavenMissing, BrokerStartFailed, GatewayStartError

Each lower package has its own base, translated here at the boundary:

    schemas.errors.SchemaError          bad input (readings are dead-lettered, never raised to users)
    billing_rules.errors.BillingRulesError
    warehouse.errors.WarehouseError     ClickHouse: DSN, unreachable, refused, busy
    usage has none of its own: reading rated usage fails as the warehouse's errors
    billing.errors.BillingError         the state of money: not found, lease, tenants, balances
    reports.errors.ReportsError         what people read: archives, retention, fonts
    tenant_api.errors.ApiError          the tenant API: keys, the access log, listening
    streams.errors.StreamsError         Kafka: unreachable, topics; files to replay; metrics port
"""

from __future__ import annotations

from billing.errors import BillingError
from billing_rules.errors import BillingRulesError
from reports.errors import ReportsError
from schemas.errors import SchemaError
from streams.errors import StreamsError
from tenant_api.errors import ApiError
from warehouse.errors import WarehouseError


class GpubillError(Exception):
    """Base of every error the shell itself raises."""


class ConfigError(GpubillError):
    """A setting is malformed: raised while reading GPUBILL_* variables or the settings file."""


# What the command line prints as one line (str(exc)) with exit status 1.
USER_ERRORS: tuple[type[Exception], ...] = (
    GpubillError, BillingRulesError, WarehouseError, StreamsError, BillingError, ReportsError, ApiError, SchemaError,
)
