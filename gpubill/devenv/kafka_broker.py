"""A real single-node Apache Kafka broker (KRaft mode) that gpubill brings up by itself.

There is no embedded Kafka, so where no broker is configured the project runs the real
one: the jars of `org.apache.kafka:kafka_2.13` and their dependencies are resolved from
Maven Central once (with `mvn`) into a cache, and the broker runs on the machine's Java 17+
as a detached process whose pid, configuration, data and log live under one home
directory (e.g. `./var/kafka`):

    <home>/server.properties   rendered on every start (ports may change)
    <home>/log4j2.properties   broker logging at WARN
    <home>/data/               the log directory (formatted once, see `.formatted`)
    <home>/broker.log          the broker's stdout and stderr
    <home>/broker.pid          pid of the running broker

Errors, all one line for users (see `gpubill.errors`):

    GpubillError
    ├── JavaMissing          `java` is absent or older than 17
    ├── MavenMissing         `mvn` is absent, or it could not resolve the broker's jars
    ├── BrokerStartFailed    the broker exited or did not answer in time (last log lines attached)
    ├── TopicsNotCreated     the broker refused to create a topic, or it did not appear in time
    └── KafkaUnreachable     no broker answers on the bootstrap servers

Every wait here is bounded: nothing hangs on a broker that never comes.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
import uuid
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
BROKER_HEAP = "-Xmx512m"
MAVEN_TIMEOUT_S = 900.0
DEFAULT_BOOTSTRAP = "localhost:9092"

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
    """Raised by `LocalBroker.ensure_jars` when `mvn` is absent or fails to fetch the jars."""

    def __init__(self, detail: str | None = None) -> None:
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


class BrokerStartFailed(GpubillError):
    """Raised by `LocalBroker.up` when the broker exits early or does not answer in time."""


# --------------------------------------------------------------------------- pure helpers


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


def new_cluster_id() -> str:
    """A KRaft cluster id: the url-safe base64 of 16 random bytes, without padding (22 chars).

    Never one that starts with "-": the storage tool's argument parser would read it as an
    option ("argument --cluster-id/-t: expected one argument"), one start in 64.
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


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


def render_server_properties(
    *, log_dir: Path, port: int, controller_port: int, host: str = "localhost", num_partitions: int = 8
) -> str:
    """server.properties of a combined broker+controller node, replication 1 everywhere."""
    lines = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@{host}:{controller_port}",
        "listeners": f"PLAINTEXT://{host}:{port},CONTROLLER://{host}:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://{host}:{port}",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": str(log_dir),
        "num.partitions": str(num_partitions),
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
    }
    body = "\n".join(f"{key}={value}" for key, value in lines.items())
    return f"# Written by gpubill on every `gpubill kafka up`; edits are overwritten.\n{body}\n"


def jars_fingerprint() -> str:
    """What `libs/.complete` holds once the jars of the current POM are all there."""
    return hashlib.sha256(render_pom().encode()).hexdigest()


LOG4J2_PROPERTIES = """\
# Broker logging for gpubill's local broker: warnings and errors only.
status = error
shutdownHook = disable
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.stdout.ref = STDOUT
# ... except the few lines that say the broker started and stopped.
logger.server.name = kafka.server.KafkaRaftServer
logger.server.level = INFO
"""


def split_bootstrap(bootstrap: str) -> list[tuple[str, int]]:
    """`host:port,host2:port2` as (host, port) pairs; a missing port means 9092."""
    servers = []
    for item in bootstrap.split(","):
        item = item.strip()
        if not item:
            continue
        if "://" in item:
            item = item.split("://", 1)[1]
        host, sep, port = item.rpartition(":")
        if not sep:
            host, port = item, "9092"
        servers.append((host.strip("[]") or "localhost", int(port)))
    return servers


def _metadata_request(correlation_id: int) -> bytes:
    """A Metadata v4 request asking for no topics: the answer lists the brokers only.

    v4 is old enough for every broker since Kafka 1.0 and new enough for Kafka 4, which
    dropped the pre-v4 versions (KIP-896).
    """
    client_id = b"gpubill-probe"
    header = struct.pack(">hhih", 3, 4, correlation_id, len(client_id)) + client_id
    body = struct.pack(">i?", 0, False)  # topics: empty array; allow_auto_topic_creation: false
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = sock.recv(size - len(chunks))
        if not chunk:
            raise ConnectionError("connection closed")
        chunks.extend(chunk)
    return bytes(chunks)


def probe_kafka(host: str, port: int, timeout_s: float) -> bool:
    """True when a Kafka broker at host:port answers a metadata request naming ≥ 1 broker."""
    deadline = time.monotonic() + timeout_s
    try:
        with socket.create_connection((host, port), timeout=max(0.05, timeout_s)) as sock:
            sock.settimeout(max(0.05, deadline - time.monotonic()))
            sock.sendall(_metadata_request(correlation_id=7))
            (size,) = struct.unpack(">i", _recv_exactly(sock, 4))
            if size < 12 or size > 10_000_000:
                return False
            sock.settimeout(max(0.05, deadline - time.monotonic()))
            response = _recv_exactly(sock, min(size, 4096))
    except (OSError, ConnectionError, struct.error):
        return False
    # correlation_id int32, throttle_time_ms int32, brokers array int32 length
    correlation_id, _throttle, broker_count = struct.unpack(">iii", response[:12])
    return correlation_id == 7 and broker_count > 0


def _port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _pid_alive(pid: int) -> bool:
    """True while `pid` runs; reaps it first when it is our own exited child."""
    with contextlib.suppress(ChildProcessError, OSError):
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] not in ("Z", "X")


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError:
        return None


def _log_since(path: Path, offset: int) -> list[str]:
    """The broker log's non-blank lines written after byte `offset`, SLF4J chatter left out."""
    try:
        with open(path, "rb") as log:
            log.seek(offset)
            text = log.read().decode("utf-8", errors="replace")
    except OSError:
        return []
    return [line for line in text.splitlines() if line.strip() and not line.startswith("SLF4J")]


def _failure_report(lines: list[str], keep: int = 12) -> str:
    """The most telling line (the last ERROR or exception) first, then the log's last lines."""
    causes = [line for line in lines if " ERROR " in line or "Exception:" in line or "Error:" in line]
    head = causes[-1].strip() if causes else "no error was logged"
    tail = "\n".join(lines[-keep:]) if lines else "(the broker wrote nothing to its log)"
    return f"{head}\n--- last lines of the broker log ---\n{tail}"


# --------------------------------------------------------------------------- the broker


def default_cache_dir() -> Path:
    """Where the jars are kept: $GPUBILL_KAFKA_CACHE, else ~/.cache/gpubill/kafka-<version>."""
    override = os.environ.get("GPUBILL_KAFKA_CACHE")
    if override:
        return Path(override).expanduser().resolve()
    return Path.home() / ".cache" / "gpubill" / f"kafka-{KAFKA_VERSION}"


class LocalBroker:
    """One single-node KRaft broker rooted at `home`, listening on localhost only.

    `port` defaults to the port named in `bootstrap` (9092 when `bootstrap` names none);
    `controller_port` defaults to `port + 1`. `bootstrap` defaults to `localhost:<port>`.
    """

    def __init__(
        self,
        home: Path,
        bootstrap: str | None = DEFAULT_BOOTSTRAP,
        port: int | None = None,
        controller_port: int | None = None,
        *,
        cache_dir: Path | None = None,
        java: str = "java",
        mvn: str = "mvn",
    ) -> None:
        self.home = Path(home).resolve()
        if bootstrap is None or (port is not None and bootstrap == DEFAULT_BOOTSTRAP):
            bootstrap = f"localhost:{port or 9092}"
        self.bootstrap = bootstrap
        if port is None:
            servers = split_bootstrap(bootstrap)
            port = servers[0][1] if servers else 9092
        self.port = port
        self.controller_port = controller_port if controller_port is not None else port + 1
        self.cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        self.java = java
        self.mvn = mvn

    # paths -----------------------------------------------------------------
    @property
    def libs_dir(self) -> Path:
        return self.cache_dir / "libs"

    @property
    def data_dir(self) -> Path:
        return self.home / "data"

    @property
    def pid_file(self) -> Path:
        return self.home / "broker.pid"

    @property
    def log_file(self) -> Path:
        return self.home / "broker.log"

    @property
    def properties_file(self) -> Path:
        return self.home / "server.properties"

    @property
    def format_marker(self) -> Path:
        return self.home / ".formatted"

    # jars ------------------------------------------------------------------
    def ensure_jars(self, progress: Callable[[str], None] | None = None) -> Path:
        """The directory of broker jars, resolving them with Maven the first time (~40 MB).

        Idempotent and safe against concurrent callers: a lock file serialises them, and
        the jars appear under `libs/` only once the download is complete.
        """
        complete = self.libs_dir / ".complete"
        fingerprint = jars_fingerprint()
        if _read(complete) == fingerprint:
            return self.libs_dir
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        with _locked(self.cache_dir / ".lock"):
            if _read(complete) == fingerprint:
                return self.libs_dir
            mvn = shutil.which(self.mvn)
            if mvn is None:
                raise MavenMissing()
            if progress:
                progress(f"fetching Kafka {KAFKA_VERSION} jars from Maven Central into {self.libs_dir} (once)")
            with tempfile.TemporaryDirectory(dir=self.cache_dir, prefix=".resolve-") as work:
                work_dir = Path(work)
                (work_dir / "pom.xml").write_text(render_pom(), encoding="utf-8")
                staged = work_dir / "libs"
                command = [
                    mvn, "-q", "-B", "-f", str(work_dir / "pom.xml"),
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
                if result.returncode != 0 or not any(staged.glob("kafka_*.jar")):
                    last = (result.stdout + result.stderr).strip().splitlines()[-1:] or ["no output"]
                    raise MavenMissing(f"mvn exited {result.returncode}: {last[0][:200]}")
                (staged / ".complete").write_text(fingerprint)
                if self.libs_dir.exists():
                    shutil.rmtree(self.libs_dir)  # a partial copy from an interrupted run
                staged.rename(self.libs_dir)
        if progress:
            progress(f"Kafka jars ready in {self.libs_dir}")
        return self.libs_dir

    # state -----------------------------------------------------------------
    def is_up(self, timeout_s: float = 2.0) -> bool:
        """True when some server in `bootstrap` answers a Kafka metadata request in time."""
        deadline = time.monotonic() + timeout_s
        for host, port in split_bootstrap(self.bootstrap):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if probe_kafka(host, port, left):
                return True
        return False

    def running_pid(self) -> int | None:
        """The pid of the broker this home started, when that process still runs."""
        try:
            pid = int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None
        if not _pid_alive(pid):
            return None
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            return pid  # no /proc: trust the pid file
        # A recycled pid belongs to someone else: never signal it.
        return pid if "kafka.Kafka" in cmdline and str(self.properties_file) in cmdline else None

    def check_java(self) -> str:
        """The path of a Java 17+ `java`, or raise JavaMissing."""
        java = shutil.which(self.java)
        if java is None:
            raise JavaMissing()
        try:
            result = subprocess.run(
                [java, "-version"], capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise JavaMissing() from exc
        output = result.stderr + result.stdout
        major = parse_java_major(output)
        if major is None or major < MIN_JAVA_MAJOR:
            first = output.strip().splitlines()[0] if output.strip() else None
            raise JavaMissing(first)
        return java

    # lifecycle -------------------------------------------------------------
    def up(self, wait_s: float = 90.0, progress: Callable[[str], None] | None = None) -> bool:
        """Start the broker and wait until it answers; False (and nothing done) if one already does.

        Raises JavaMissing / MavenMissing before starting anything, and BrokerStartFailed
        (with the last broker log lines) when the broker exits or is not ready within
        `wait_s`; a broker that did not come up in time is stopped again.
        """
        if self.is_up():
            return False
        deadline = time.monotonic() + wait_s
        log_offset = self.log_file.stat().st_size if self.log_file.exists() else 0
        pid = self.running_pid()
        if pid is None:
            pid = self._start(progress)
        elif progress:
            progress(f"Kafka broker (pid {pid}) is still starting; waiting")
        while time.monotonic() < deadline:
            if not _pid_alive(pid):
                self.pid_file.unlink(missing_ok=True)
                report = _failure_report(_log_since(self.log_file, log_offset))
                raise BrokerStartFailed(f"the Kafka broker exited during start-up (log: {self.log_file}): {report}")
            if self.is_up(timeout_s=min(2.0, max(0.1, deadline - time.monotonic()))):
                return True
            time.sleep(0.25)
        report = _failure_report(_log_since(self.log_file, log_offset))
        self.down(wait_s=15.0)
        raise BrokerStartFailed(
            f"the Kafka broker did not answer at {self.bootstrap} within {wait_s:.0f} s "
            f"(log: {self.log_file}): {report}"
        )

    def _start(self, progress: Callable[[str], None] | None) -> int:
        java = self.check_java()
        libs = self.ensure_jars(progress)
        for port in (self.port, self.controller_port):
            if not _port_free("127.0.0.1", port):
                raise BrokerStartFailed(
                    f"port {port} is taken by another program (not a Kafka broker at {self.bootstrap}): "
                    f"stop it, or set GPUBILL_KAFKA to a broker or a free localhost port"
                )
        self.home.mkdir(parents=True, exist_ok=True)
        self.properties_file.write_text(
            render_server_properties(log_dir=self.data_dir, port=self.port, controller_port=self.controller_port),
            encoding="utf-8",
        )
        log4j = self.home / "log4j2.properties"
        log4j.write_text(LOG4J2_PROPERTIES, encoding="utf-8")
        classpath = f"{libs}/*"
        if not self.format_marker.is_file():
            self._format(java, classpath)
        if progress:
            progress(f"starting Kafka {KAFKA_VERSION} on {self.bootstrap} (home {self.home})")
        with open(self.log_file, "ab") as log:
            process = subprocess.Popen(
                [
                    java, BROKER_HEAP, "-XX:+UseSerialGC", "-Djava.awt.headless=true",
                    f"-Dlog4j2.configurationFile={log4j}", f"-Dkafka.logs.dir={self.home}",
                    "-cp", classpath, "kafka.Kafka", str(self.properties_file),
                ],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True, cwd=self.home,
            )  # fmt: skip
        self.pid_file.write_text(f"{process.pid}\n")
        return process.pid

    def _format(self, java: str, classpath: str) -> None:
        cluster_id = new_cluster_id()
        try:
            result = subprocess.run(
                [java, BROKER_HEAP, "-cp", classpath, "kafka.tools.StorageTool", "format",
                 "-t", cluster_id, "-c", str(self.properties_file), "--ignore-formatted"],
                capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL, check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired as exc:
            raise BrokerStartFailed(f"formatting the Kafka log directory {self.data_dir} took over 120 s") from exc
        if result.returncode != 0:
            lines = [l for l in (result.stdout + result.stderr).splitlines() if l.strip() and "SLF4J" not in l]
            raise BrokerStartFailed(
                f"formatting the Kafka log directory {self.data_dir} failed: {' | '.join(lines[-3:])}"
            )
        self.format_marker.write_text(f"{cluster_id}\n")

    def down(self, wait_s: float = 30.0) -> bool:
        """Stop the broker this home started: SIGTERM, then SIGKILL after `wait_s`.

        Returns False when none was running. A broker not started from this home (for
        instance one already on the port) is never touched.
        """
        pid = self.running_pid()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            return False
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        if not _wait_gone(pid, wait_s):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            _wait_gone(pid, 10.0)
        self.pid_file.unlink(missing_ok=True)
        return True


def _wait_gone(pid: int, wait_s: float) -> bool:
    deadline = time.monotonic() + wait_s
    while _pid_alive(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
