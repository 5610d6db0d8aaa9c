"""Settings from the environment (GPUBILL_*) or an optional TOML settings file.

Precedence: environment variable > settings file (GPUBILL_SETTINGS, default ./gpubill.toml
when present) > defaults. Paths are resolved against the working directory, so the
embedded database and the local broker live under ./var/ of wherever gpubill is run.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError
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
    rules: str = Field(default_factory=_default_rules, description="rules directory")
    home: str = Field("var", description="state directory: local broker, pid files")
    out: str = Field("out", description="where demo and reports write their files")
    partitions: int = Field(8, ge=1, le=1024, description="partitions of the readings topics")
    metrics_port: int = Field(9464, ge=0, le=65535, description="Prometheus port of the worker (0: off)")
    http_port: int = Field(8080, ge=0, le=65535, description="port of the download service")
    group: str = Field("gpubill-rating", description="consumer group of the workers")
    retain_periods: int | None = Field(
        None, ge=1, description="`gpubill retention apply` keeps the per-second rows of the latest N billing periods "
        "(the current one included) and drops older ones once archived; unset: keep everything")

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
