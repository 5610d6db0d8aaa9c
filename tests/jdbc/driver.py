"""The official ClickHouse JDBC driver's jars, for tests/e2e/test_jdbc_gateway.py.

Resolved once with `mvn dependency:copy-dependencies` from Maven Central (as the local
broker's jars are: gpubill/devenv/kafka_install.py) into a cache shared by every test run:

    <cache>/libs/             the jars, present only once complete
    <cache>/libs/.complete    the fingerprint of the POM they were resolved from
    <cache>/.lock             serialises concurrent resolutions (pytest-xdist workers)
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from gpubill.devenv.kafka_install import _locked, _read

JDBC_VERSION = "0.10.0"
MAVEN_TIMEOUT_S = 600.0
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
    """The directory of the driver's jars (and its dependencies), resolved the first time."""
    cache = cache or cache_dir()
    libs, fingerprint = cache / "libs", hashlib.sha256(POM.encode()).hexdigest()
    if _read(libs / ".complete") == fingerprint:
        return libs
    cache.mkdir(parents=True, exist_ok=True)
    with _locked(cache / ".lock"):
        if _read(libs / ".complete") == fingerprint:
            return libs
        found = shutil.which(mvn)
        if found is None:
            raise DriverUnavailable("mvn is not on PATH")
        with tempfile.TemporaryDirectory(dir=cache, prefix=".resolve-") as work:
            pom, staged = Path(work) / "pom.xml", Path(work) / "libs"
            pom.write_text(POM, encoding="utf-8")
            try:
                result = subprocess.run([found, "-q", "-B", "-f", str(pom), "dependency:copy-dependencies",
                                         "-DincludeScope=runtime", f"-DoutputDirectory={staged}"],
                                        capture_output=True, text=True, timeout=MAVEN_TIMEOUT_S,
                                        stdin=subprocess.DEVNULL, check=False)
            except subprocess.TimeoutExpired:
                raise DriverUnavailable(f"mvn did not finish within {MAVEN_TIMEOUT_S:.0f} s") from None
            if result.returncode != 0 or not any(staged.glob("jdbc-v2-*.jar")):
                last = (result.stdout + result.stderr).strip().splitlines()[-1:] or ["no output"]
                raise DriverUnavailable(f"mvn exited {result.returncode}: {last[0][:200]}")
            (staged / ".complete").write_text(fingerprint)
            if libs.exists():
                shutil.rmtree(libs)
            staged.rename(libs)
    return libs
