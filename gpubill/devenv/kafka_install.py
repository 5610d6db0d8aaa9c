"""What the local broker needs on the machine: its jars (from Maven Central) and a Java 17+.

The jars of `org.apache.kafka:kafka_2.13` and their dependencies are resolved once with
`mvn` into a cache shared by every broker home:

    <cache>/libs/             the jars, present only once complete
    <cache>/libs/.complete    the fingerprint of the POM they were resolved from
    <cache>/.lock             serialises concurrent resolutions

Errors (both `gpubill.errors.GpubillError`s, one line for users):

    JavaMissing     `java` is absent or older than 17
    MavenMissing    `mvn` is absent, or it could not resolve the broker's jars
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from gpubill.errors import GpubillError

KAFKA_VERSION = "4.1.1"
SCALA_VERSION = "2.13"
# The binding that routes the broker's SLF4J 1.7 logging to the log4j-core it ships with;
# the Kafka tarball bundles it, the Maven artifact does not (without it the broker logs
# nothing at all, not even why it failed to start).
LOG4J_VERSION = "2.24.3"
MIN_JAVA_MAJOR = 17
MAVEN_TIMEOUT_S = 900.0

_HOW_TO_AVOID = "or set GPUBILL_KAFKA to an existing broker"


class JavaMissing(GpubillError):
    """Raised by `LocalBroker.up` when `java` is not on PATH or is older than Java 17."""

    def __init__(self, found: str | None = None) -> None:
        seen = f" (found {found})" if found else ""
        super().__init__(
            f"Java {MIN_JAVA_MAJOR} or newer is needed to run the local Kafka broker{seen}: "
            f"install a JDK {MIN_JAVA_MAJOR}+ (e.g. apt-get install openjdk-17-jre-headless) {_HOW_TO_AVOID}"
        )


class MavenMissing(GpubillError):
    """Raised by `LocalBroker.ensure_jars` (and `resolve_maven_jars`) when `mvn` is absent or
    fails to fetch the jars; `detail` is what went wrong, None when mvn is absent."""

    def __init__(self, detail: str | None = None) -> None:
        self.detail = detail
        if detail:
            super().__init__(
                f"Maven could not fetch the Kafka {KAFKA_VERSION} jars ({detail}): check access to "
                f"Maven Central (repo.maven.apache.org) {_HOW_TO_AVOID}"
            )
        else:
            super().__init__(
                f"Maven is needed once to fetch the Kafka {KAFKA_VERSION} jars for the local broker: "
                f"install Maven 3 (e.g. apt-get install maven) {_HOW_TO_AVOID}"
            )


# --------------------------------------------------------------------------- java


def parse_java_major(version_output: str) -> int | None:
    """The major version from `java -version` output, or None when it cannot be read.

    Handles both schemes: `1.8.0_392` is Java 8, `17.0.15` / `21` / `25-ea` are themselves.
    """
    match = re.search(r'version "([^"]+)"', version_output)
    if match is None:
        # Some builds print `openjdk 21.0.2 2024-01-16` on the first line instead.
        match = re.search(r"^\S+ (\d+[\w.+-]*)", version_output.strip(), re.MULTILINE)
        if match is None:
            return None
    head = re.match(r"(\d+)(?:\.(\d+))?", match.group(1))
    if head is None:
        return None
    major = int(head.group(1))
    if major == 1 and head.group(2) is not None:
        return int(head.group(2))
    return major


def find_java(java: str = "java") -> str:
    """The path of the Java 17+ `java` named by `java` (a name on PATH or a path), or raise JavaMissing."""
    found = shutil.which(java)
    if found is None:
        raise JavaMissing()
    try:
        result = subprocess.run(
            [found, "-version"], capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise JavaMissing() from exc
    output = result.stderr + result.stdout
    major = parse_java_major(output)
    if major is None or major < MIN_JAVA_MAJOR:
        first = output.strip().splitlines()[0] if output.strip() else None
        raise JavaMissing(first)
    return found


# --------------------------------------------------------------------------- jars


def render_pom(kafka_version: str = KAFKA_VERSION) -> str:
    """A throw-away POM whose only purpose is to let `mvn dependency:copy-dependencies` run."""
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.gpubill</groupId>
  <artifactId>kafka-broker-jars</artifactId>
  <version>{kafka_version}</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_{SCALA_VERSION}</artifactId>
      <version>{kafka_version}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId>
      <version>{LOG4J_VERSION}</version>
    </dependency>
  </dependencies>
</project>
"""


def jars_fingerprint() -> str:
    """What `libs/.complete` holds once the jars of the current POM are all there."""
    return hashlib.sha256(render_pom().encode()).hexdigest()


def default_cache_dir() -> Path:
    """Where the jars are kept: $GPUBILL_KAFKA_CACHE, else ~/.cache/gpubill/kafka-<version>."""
    override = os.environ.get("GPUBILL_KAFKA_CACHE")
    if override:
        return Path(override).expanduser().resolve()
    return Path.home() / ".cache" / "gpubill" / f"kafka-{KAFKA_VERSION}"


def jars_dir(cache_dir: Path) -> Path:
    """The directory of broker jars inside `cache_dir` (it may not exist yet)."""
    return cache_dir / "libs"


def resolve_jars(cache_dir: Path, mvn: str = "mvn", progress: Callable[[str], None] | None = None) -> Path:
    """The directory of broker jars, resolving them with Maven the first time (~40 MB).

    Idempotent and safe against concurrent callers (`resolve_maven_jars`). Raises MavenMissing
    when they are not cached and `mvn` is absent, fails, or runs past MAVEN_TIMEOUT_S.
    """
    return resolve_maven_jars(cache_dir, render_pom(), "kafka_*.jar", mvn=mvn, progress=progress,
                              what=f"Kafka {KAFKA_VERSION} jars")


def resolve_maven_jars(cache_dir: Path, pom: str, expect: str, *, mvn: str = "mvn",
                       progress: Callable[[str], None] | None = None, what: str = "jars") -> Path:
    """`cache_dir/libs`: the runtime jars of the throw-away `pom`, copied there by `mvn
    dependency:copy-dependencies` the first time (a jar matching the glob `expect` among them).

    Idempotent and safe against concurrent callers: a lock file serialises them, and the jars
    appear under `libs/` only once the download is complete (`libs/.complete` holds the POM's
    fingerprint, so a changed POM resolves again). Raises MavenMissing when they are not cached
    and `mvn` is absent, fails, or runs past MAVEN_TIMEOUT_S.
    """
    libs = jars_dir(cache_dir)
    complete = libs / ".complete"
    fingerprint = hashlib.sha256(pom.encode()).hexdigest()
    if _read(complete) == fingerprint:
        return libs
    cache_dir.mkdir(parents=True, exist_ok=True)
    with _locked(cache_dir / ".lock"):
        if _read(complete) == fingerprint:
            return libs
        found = shutil.which(mvn)
        if found is None:
            raise MavenMissing()
        if progress:
            progress(f"fetching {what} from Maven Central into {libs} (once)")
        with tempfile.TemporaryDirectory(dir=cache_dir, prefix=".resolve-") as work:
            work_dir = Path(work)
            (work_dir / "pom.xml").write_text(pom, encoding="utf-8")
            staged = work_dir / "libs"
            command = [
                found, "-q", "-B", "-f", str(work_dir / "pom.xml"),
                "dependency:copy-dependencies", "-DincludeScope=runtime",
                f"-DoutputDirectory={staged}",
            ]  # fmt: skip
            try:
                result = subprocess.run(
                    command, capture_output=True, text=True, timeout=MAVEN_TIMEOUT_S,
                    stdin=subprocess.DEVNULL, check=False,
                )  # fmt: skip
            except subprocess.TimeoutExpired as exc:
                raise MavenMissing(f"mvn did not finish within {MAVEN_TIMEOUT_S:.0f} s") from exc
            if result.returncode != 0 or not any(staged.glob(expect)):
                last = (result.stdout + result.stderr).strip().splitlines()[-1:] or ["no output"]
                raise MavenMissing(f"mvn exited {result.returncode}: {last[0][:200]}")
            (staged / ".complete").write_text(fingerprint)
            if libs.exists():
                shutil.rmtree(libs)  # a partial copy from an interrupted run
            staged.rename(libs)
    if progress:
        progress(f"{what} ready in {libs}")
    return libs


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError:
        return None


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
