"""Settings from the environment (GPUBILL_*) or an optional TOML settings file.

Precedence: environment variable > settings file (GPUBILL_SETTINGS, default ./gpubill.toml
when present) > defaults. Paths are resolved against the working directory, so the
embedded database and the local broker live under ./var/ of wherever gpubill is run.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, ValidationError, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from gpubill.errors import ConfigError


def _default_clickhouse() -> str:
    return f"chdb://{Path('var/clickhouse').resolve()}"


def _default_rules() -> str:
    from billing_rules import DEFAULT_RULES_DIR

    return str(DEFAULT_RULES_DIR)


class _TomlFileSource(PydanticBaseSettingsSource):
    """Reads the optional settings file; keys are the field names (kafka, clickhouse, ...)."""

    def __call__(self) -> dict[str, Any]:
        path = Path(os.environ.get("GPUBILL_SETTINGS", "gpubill.toml"))
        if not path.is_file():
            return {}
        try:
            return tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"settings file {path}: {exc}") from exc

    def get_field_value(self, field, field_name):  # pragma: no cover - unused by __call__
        return None, field_name, False


class Settings(BaseSettings):
    """Everything gpubill reads from its environment."""

    model_config = SettingsConfigDict(env_prefix="GPUBILL_", extra="ignore", frozen=True)

    kafka: str = Field("localhost:9092", description="Kafka bootstrap servers")
    clickhouse: str = Field(default_factory=_default_clickhouse, description="clickhouse-connect DSN")
    clickhouse_cluster: str = Field("", pattern=r"^([A-Za-z_][A-Za-z0-9_]*)?$", description="the ClickHouse cluster "
                                    "(remote_servers) the server of GPUBILL_CLICKHOUSE belongs to, its schema made by "
                                    "`gpubill db migrate --cluster NAME`; empty: a single server. Set: no process "
                                    "applies migrations at its start, and deletes go to the shards' local tables")
    rules: str = Field(default_factory=_default_rules, description="rules directory")
    home: str = Field("var", description="state directory: local broker, pid files")
    out: str = Field("out", description="where demo and reports write their files")
    partitions: int = Field(8, ge=1, le=1024, description="partitions of the readings topics")
    metrics_port: int = Field(9464, ge=0, le=65535, description="Prometheus port of the worker (0: off)")
    http_port: int = Field(8080, ge=0, le=65535, description="port of the tenant API and web page "
                           "(`gpubill serve`, `gpubill up`; on 127.0.0.1 unless --listen says otherwise)")
    group: str = Field("gpubill-rating", description="consumer group of the workers")
    stall_s: float = Field(120.0, ge=0, le=86400, description="a long-running worker whose committed offsets have "
                           "not moved for this long while it has lag is stalled: logged, counted "
                           "(gpubill_worker_stalled), and stopped to be restarted — `gpubill worker` exits 75, "
                           "`gpubill up` restarts its worker in place (s; 0: no check)")
    # How gpubill's Kafka clients authenticate (streams/kafka/settings.py turns these into
    # client arguments): PLAINTEXT for the local broker, SASL_* with SCRAM for a real cluster.
    kafka_security_protocol: str = Field("PLAINTEXT", description="PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL")
    kafka_sasl_mechanism: str = Field("SCRAM-SHA-512", description="SCRAM-SHA-512, SCRAM-SHA-256 or PLAIN (TLS only)")
    kafka_username: str | None = Field(None, description="SASL user of this process")
    kafka_password: SecretStr | None = Field(None, validate_default=True, description="its password (never logged)")
    kafka_cafile: str | None = Field(None, description="CA bundle (PEM) to trust for TLS; default: the system's")
    log_format: Literal["auto", "human", "json"] = Field(
        "auto", description="`gpubill up`'s logs: `json` (every line as JSON on stderr), `human` (a banner, then "
        "warnings as short lines; every line as JSON in GPUBILL_HOME/logs/up.log) or `auto` (human on a terminal, "
        "json when piped)")
    metrics_host: str = Field("127.0.0.1", description="address the worker's metrics server binds (0.0.0.0: every "
                              "interface, for a scraper in another container)")
    retain_periods: int | None = Field(
        None, ge=1, description="`gpubill retention apply` keeps the per-second rows of the latest N billing periods "
        "(the current one included) and drops older ones once archived; unset: keep everything")
    file_mode: int = Field(0o640, description="mode of the files gpubill writes, octal like 0640 or 0600 "
                           "(directories it creates get the matching 0750/0700); never readable by others")
    # the gateway that serves the embedded database (gpubill/devenv/ch_gateway.py): `gpubill up`'s
    # own, and `gpubill clickhouse serve`; its users' passwords and limits
    gateway_port: int = Field(8123, ge=0, le=65535, description="port on 127.0.0.1 where `gpubill up` serves its "
                              "embedded database to the other gpubill commands (they find it by themselves) and to "
                              "finance tools (0: `up` keeps the database to itself)")
    gateway_password: SecretStr | None = Field(None, description="password of the gateway's read-write user "
                                               "`gpubill`; unset: generated into the state directory on first start")
    gateway_finance_password: SecretStr | None = Field(None, description="password of the gateway's read-only "
                                                       "user `finance`; unset: generated like gateway_password")
    gateway_max_body_mb: int = Field(256, ge=1, le=16384, description="largest request body the gateway accepts, "
                                     "on the wire and decompressed (MiB)")
    gateway_max_execution_s: int = Field(300, ge=1, le=86400, description="max_execution_time of every statement "
                                         "through the gateway (s)")
    gateway_max_memory_mb: int = Field(4096, ge=16, description="max_memory_usage of every statement through the "
                                       "gateway (MiB)")
    gateway_max_connections: int = Field(64, ge=1, le=4096, description="concurrent connections the gateway "
                                         "serves; a new one replaces the oldest that has not finished a "
                                         "request head, and is answered 503 only when all are busy")
    gateway_head_timeout_s: float = Field(10.0, gt=0, le=600, description="seconds a connection has to send a "
                                          "whole request head (a byte does not restart the clock)")
    gateway_body_min_rate_kb: int = Field(1024, ge=1, description="a request body must arrive at this rate "
                                          "(KiB/s) after a grace of gateway_head_timeout_s, or the connection is closed")
    gateway_body_budget_mb: int = Field(512, ge=1, le=65536, description="request bodies (MiB) the gateway holds "
                                        "at once across connections; past it: 503, retry later")
    # the tenant API (`gpubill serve`, `gpubill up`; tenant_api/, docs/api.md): its limits
    api_rate_per_s: float = Field(20.0, gt=0, le=100000, description="requests per second per API key, sustained "
                                  "(over it: 429 with Retry-After)")
    api_rate_burst: int = Field(100, ge=1, le=1000000, description="requests per API key at once after a quiet spell")
    api_downloads_per_key: int = Field(8, ge=1, le=1024, description="downloads of one API key in flight at once")
    api_auth_failures: int = Field(10, ge=1, le=100000, description="failed authentications from one address with "
                                   "one key id within api_auth_window_s before that pair is answered 429")
    api_auth_window_s: int = Field(300, ge=1, le=86400, description="the window of the api_auth_* limits (s)")
    api_auth_key_failures: int = Field(50, ge=1, le=1000000, description="failed authentications of one key id from "
                                       "any address within the window before it is answered 429 where it was not "
                                       "opened in the last day")
    api_auth_failures_ceiling: int = Field(1000, ge=1, le=10000000, description="failed authentications of all "
                                           "within the window past which a failure is answered 429, not 401 (keys "
                                           "that verify still work)")
    api_cache_s: float = Field(10.0, ge=0, le=3600, description="how long a built report or month-to-date figure "
                               "is reused for the same request (s; 0: rebuilt every time)")
    api_max_connections: int = Field(1024, ge=2, le=1000000, description="connections the API keeps open at once; "
                                     "past it the oldest one still waiting for a request head is closed (lowered to "
                                     "half the process's descriptor limit, ulimit -n)")
    api_head_timeout_s: float = Field(10.0, gt=0, le=3600, description="a connection must complete its request "
                                      "head this long after connecting or after its previous response, else it is "
                                      "closed (s)")
    api_keep_alive_s: float = Field(5.0, gt=0, le=3600, description="an idle connection is kept open this long "
                                    "after a response (s)")
    api_db_connections: int = Field(4, ge=1, le=64, description="ClickHouse clients of the API for a server DSN "
                                    "(the embedded database has one, shared)")

    # the books on the log (issue 37; docs/books.md)
    books_batch: int = Field(100, ge=1, le=10_000, description="invoices an invoice run records on the books per "
                             "Kafka transaction (each group all or none; 1: one transaction per invoice)")

    # live spend and billing events (issue 15; streams/spend/, docs/balances.md)
    spend: bool = Field(True, description="track month-to-date spend in the stream and emit billing events "
                        "(workers produce spend rounds; `gpubill spend-tracker` folds them and emits the events)")
    spend_tracker: Literal["separate", "inline"] = Field(
        "separate", description="where `gpubill worker` leaves the spend tracker: `separate` (its own process, "
        "`gpubill spend-tracker`: rating never waits for it) or `inline` (in the worker's process; `gpubill up` "
        "always runs it inline)")
    budget_alerts: str = Field("50,80,100", description="budget_threshold events at these percents of a tenant's "
                               "monthly budget, comma-separated whole percents 1-100")
    low_balance: str | None = Field(None, description="balance_low when a prepaid balance falls below this amount "
                                    "(CNY, e.g. 100.00); unset: no amount threshold")
    low_runway_h: int | None = Field(24, ge=1, le=99999, description="balance_low when a prepaid balance lasts fewer "
                                     "hours than this at the last hour's burn rate; unset: no runway threshold")
    spend_context_s: float = Field(10.0, ge=0.5, le=3600, description="how often each worker re-reads top-ups, "
                                   "invoices, credits and budgets for the tracker (s)")

    @field_validator("kafka_password")
    @classmethod
    def _kafka_security_fits(cls, value: SecretStr | None, info: ValidationInfo) -> SecretStr | None:
        """The Kafka security settings fit together (checked by streams.kafka.settings)."""
        from streams.kafka.settings import security_problem

        data = info.data
        problem = security_problem(
            str(data.get("kafka_security_protocol", "")).upper(), str(data.get("kafka_sasl_mechanism", "")).upper(),
            data.get("kafka_username"), value.get_secret_value() if value else None, data.get("kafka_cafile"))
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("file_mode", mode="before")
    @classmethod
    def _octal_file_mode(cls, value: Any) -> int:
        """GPUBILL_FILE_MODE=0640 is octal (not 640 decimal); checked by reports.outputs.check_file_mode."""
        from reports.outputs import check_file_mode

        if isinstance(value, str):
            text = value.strip().lower().removeprefix("0o")
            if not text or any(c not in "01234567" for c in text):
                raise ValueError(f"{value!r} is not an octal file mode like 0640")
            value = int(text, 8)
        return check_file_mode(value)

    @classmethod
    def settings_customise_sources(cls, settings_cls, init_settings, env_settings, dotenv_settings, file_secret_settings):
        return (init_settings, env_settings, _TomlFileSource(settings_cls))

    @property
    def home_path(self) -> Path:
        return Path(self.home).resolve()

    @property
    def out_path(self) -> Path:
        return Path(self.out).resolve()

    @property
    def embedded(self) -> bool:
        return self.clickhouse.startswith("chdb:")


def load_settings() -> Settings:
    """Read settings; a malformed value is a ConfigError naming the variable."""
    try:
        return Settings()
    except ValidationError as exc:
        first = exc.errors()[0]
        name = "GPUBILL_" + str(first["loc"][0]).upper() if first["loc"] else "settings"
        raise ConfigError(f"{name}: {first['msg']}") from exc
