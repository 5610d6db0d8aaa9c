"""A real single-node Apache Kafka broker (KRaft mode) that gpubill brings up by itself.

There is no embedded Kafka, so where no broker is configured the project runs the real
one on the machine's Java 17+, from jars resolved once from Maven Central (see
`kafka_install`), as a detached process whose pid, configuration, data and log live under
one home directory (e.g. `./var/kafka`):

    <home>/server.properties   rendered on every start (ports may change; see `kafka_config`)
    <home>/log4j2.properties   broker logging at WARN
    <home>/data/               the log directory (formatted once, see `.formatted`)
    <home>/broker.log          the broker's stdout and stderr
    <home>/broker.pid          pid of the running broker

This module is the process's lifecycle (`LocalBroker.up` / `down`); whether a broker
answers is asked of `kafka_probe`. By default the broker speaks PLAINTEXT on loopback; given
a `SaslSetup` (see `kafka_config`) it authenticates clients with SASL/SCRAM, enforces ACLs,
and creates its SCRAM users when it formats its log directory (server.properties, which
then holds the broker's secrets, is written 0600).

Errors `LocalBroker` raises, all one line for users (see `gpubill.errors`), all importable
from here:

    GpubillError
    ├── JavaMissing          `java` is absent or older than 17 (defined in `kafka_install`)
    ├── MavenMissing         `mvn` is absent, or it could not resolve the broker's jars (`kafka_install`)
    └── BrokerStartFailed    the broker exited or did not answer in time (last log lines attached)

Creating topics, and saying that no broker answers, are the streams layer's job
(`streams.kafka.admin.ensure_topics`; `TopicsNotCreated` and `KafkaUnreachable` in
`streams.errors`).

Every wait here is bounded: nothing hangs on a broker that never comes.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from gpubill.devenv.kafka_config import (
    LOG4J2_PROPERTIES,
    Quorum,
    SaslSetup,
    new_cluster_id,
    render_server_properties,
    scram_arguments,
)
from gpubill.devenv.kafka_install import (
    KAFKA_VERSION,
    JavaMissing,
    MavenMissing,
    default_cache_dir,
    find_java,
    jars_dir,
    resolve_jars,
)
from gpubill.devenv.kafka_probe import probe_kafka, split_bootstrap
from gpubill.errors import GpubillError

__all__ = ["BROKER_HEAP", "DEFAULT_BOOTSTRAP", "BrokerStartFailed", "JavaMissing", "LocalBroker", "MavenMissing"]

BROKER_HEAP = "-Xmx512m"
DEFAULT_BOOTSTRAP = "localhost:9092"


class BrokerStartFailed(GpubillError):
    """Raised by `LocalBroker.up` when the broker exits early or does not answer in time."""


# --------------------------------------------------------------------------- process helpers


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
        sasl: SaslSetup | None = None,
        quorum: Quorum = Quorum(),
        cluster_id: str | None = None,
    ) -> None:
        self.home = Path(home).resolve()
        self.sasl = sasl
        self.quorum = quorum
        self.cluster_id = cluster_id  # every node of a cluster is formatted with the same one
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
        return jars_dir(self.cache_dir)

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

        Idempotent and safe against concurrent callers; raises MavenMissing (see
        `kafka_install.resolve_jars`).
        """
        return resolve_jars(self.cache_dir, self.mvn, progress)

    # state -----------------------------------------------------------------
    def is_up(self, timeout_s: float = 2.0) -> bool:
        """True when some server in `bootstrap` answers a Kafka metadata request in time."""
        deadline = time.monotonic() + timeout_s
        for host, port in split_bootstrap(self.bootstrap):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if probe_kafka(host, port, left, before_auth=self.sasl is not None):
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
        return find_java(self.java)

    # lifecycle -------------------------------------------------------------
    def up(self, wait_s: float = 90.0, progress: Callable[[str], None] | None = None) -> bool:
        """Start the broker and wait until it answers; False (and nothing done) if one already does.

        Raises JavaMissing / MavenMissing before starting anything, and BrokerStartFailed
        (with the last broker log lines) when the broker exits or is not ready within
        `wait_s`; a broker that did not come up in time is stopped again.
        """
        if self.is_up():
            return False
        launched = self.launch(progress)
        self.await_up(launched, time.monotonic() + wait_s)
        return True

    def launch(self, progress: Callable[[str], None] | None = None) -> tuple[int, int]:
        """Start the broker's process, or find it still starting, without waiting for it to
        answer (a node of a cluster answers only once a majority of its quorum runs):
        (pid, size of its log before) for `await_up`."""
        self._check_format_matches()  # before waiting on a running broker started the other way
        log_offset = self.log_file.stat().st_size if self.log_file.exists() else 0
        pid = self.running_pid()
        if pid is None:
            pid = self._start(progress)
        elif progress:
            progress(f"Kafka broker (pid {pid}) is still starting; waiting")
        return pid, log_offset

    def await_up(self, launched: tuple[int, int], deadline: float) -> None:
        """Wait until the broker `launch` started answers, until `deadline` (time.monotonic);
        BrokerStartFailed when it exits or the deadline passes (it is stopped again then)."""
        pid, log_offset = launched
        wait_s = max(0.0, deadline - time.monotonic())
        while time.monotonic() < deadline:
            if not _pid_alive(pid):
                self.pid_file.unlink(missing_ok=True)
                report = _failure_report(_log_since(self.log_file, log_offset))
                raise BrokerStartFailed(f"the Kafka broker exited during start-up (log: {self.log_file}): {report}")
            if self.is_up(timeout_s=min(2.0, max(0.1, deadline - time.monotonic()))):
                return
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
        self._check_format_matches()
        properties = render_server_properties(
            log_dir=self.data_dir, port=self.port, controller_port=self.controller_port, sasl=self.sasl,
            quorum=self.quorum,
        )
        # 0600 from the first byte: with SASL the file holds the broker's passwords.
        self.properties_file.unlink(missing_ok=True)
        descriptor = os.open(self.properties_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(properties)
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

    def _secrets(self) -> list[str]:
        """Every password of the SASL setup: never shown in a message."""
        if self.sasl is None:
            return []
        return [self.sasl.controller_password, *(u.password for u in (self.sasl.broker, *self.sasl.users))]

    def _check_format_matches(self) -> None:
        """A log directory formatted without SCRAM users cannot serve SASL (nor the reverse)."""
        if not self.format_marker.is_file():
            return
        formatted_sasl = "sasl" in self.format_marker.read_text().split()[1:]
        if formatted_sasl != (self.sasl is not None):
            raise BrokerStartFailed(
                f"the Kafka home {self.home} was formatted {'with' if formatted_sasl else 'without'} SASL users; "
                f"start it the same way, or remove {self.home} for a fresh broker"
            )

    def _format(self, java: str, classpath: str) -> None:
        cluster_id = self.cluster_id or new_cluster_id()
        # The SCRAM users go into the metadata log here: the only way to have them before
        # the broker first starts. (Their passwords are on this short-lived command line.)
        users = scram_arguments(self.sasl) if self.sasl is not None else []
        try:
            result = subprocess.run(
                [java, BROKER_HEAP, "-cp", classpath, "kafka.tools.StorageTool", "format",
                 "-t", cluster_id, "-c", str(self.properties_file), "--ignore-formatted", *users],
                capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL, check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired as exc:
            raise BrokerStartFailed(f"formatting the Kafka log directory {self.data_dir} took over 120 s") from exc
        if result.returncode != 0:
            lines = [l for l in (result.stdout + result.stderr).splitlines() if l.strip() and "SLF4J" not in l]
            for secret in self._secrets():
                lines = [l.replace(secret, "***") for l in lines]
            raise BrokerStartFailed(
                f"formatting the Kafka log directory {self.data_dir} failed: {' | '.join(lines[-3:])}"
            )
        self.format_marker.write_text(f"{cluster_id}\n" + ("sasl\n" if self.sasl is not None else ""))

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

