"""The official ClickHouse JDBC driver's jars, for tests/e2e/test_jdbc_gateway.py.

Resolved once with `mvn dependency:copy-dependencies` from Maven Central (as the local
broker's jars are: gpubill/devenv/kafka_install.py) into a cache shared by every test run:

    <cache>/libs/             the jars, present only once complete
    <cache>/libs/.complete    the fingerprint of the POM they were resolved from
    <cache>/.lock             serialises concurrent resolutions (pytest-xdist workers)
"""

from __future__ import annotations

import os
from pathlib import Path

from gpubill.devenv.kafka_install import MavenMissing, resolve_maven_jars

JDBC_VERSION = "0.10.0"
POM = f"""<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.gpubill</groupId>
  <artifactId>clickhouse-jdbc-jars</artifactId>
  <version>{JDBC_VERSION}</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>com.clickhouse</groupId>
      <artifactId>clickhouse-jdbc</artifactId>
      <version>{JDBC_VERSION}</version>
    </dependency>
  </dependencies>
</project>
"""


class DriverUnavailable(Exception):
    """`mvn` is absent or could not fetch the driver."""


def cache_dir() -> Path:
    """$GPUBILL_JDBC_CACHE, else ~/.cache/gpubill/jdbc-<version>."""
    override = os.environ.get("GPUBILL_JDBC_CACHE")
    return Path(override).expanduser() if override else Path.home() / ".cache" / "gpubill" / f"jdbc-{JDBC_VERSION}"


def driver_jars(cache: Path | None = None, mvn: str = "mvn") -> Path:
    """The directory of the driver's jars (and its dependencies), resolved the first time, as
    the broker's are (kafka_install.resolve_maven_jars)."""
    try:
        return resolve_maven_jars(cache or cache_dir(), POM, "jdbc-v2-*.jar", mvn=mvn)
    except MavenMissing as exc:
        raise DriverUnavailable(f"clickhouse-jdbc {JDBC_VERSION}: {exc.detail or 'mvn is not on PATH'}") from exc
