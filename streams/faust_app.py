"""The Faust app both of gpubill's apps are (the rating app, streams/worker.py; the spend
tracker's, streams/spend/app.py): agents fed from in-memory channels by a consumer of
gpubill's own (streams/kafka/feeder.py), never by a Kafka consumer of Faust's.

Why: Faust hands an agent one event per Kafka message through its consumer thread and its
conductor, ≈ 165 µs of CPU per message for the rating app (a cap of ≈ 6,000 readings/s), and
≈ 1 s of waiting per spend round for the tracker at 1,000 tenants, where a plain aiokafka
consumer in the same process saw the same rounds 0.02 s after they were produced
(docs/performance.md, "Live spend at 1,000 tenants"). Faust still runs the agents, timers,
tasks and the producer of dead letters and billing events, and the worker's life cycle.

With streams/worker.py and streams/spend/app.py, the only modules that import Faust.
"""

from __future__ import annotations

import inspect
from typing import Any, Awaitable, Callable

import faust

from streams.kafka.settings import KafkaSettings, kafka_security, ssl_context


def faust_self_check() -> list[str]:
    """What of Faust the apps rely on beyond its public API, missing from the installed
    version (empty when it fits): the hooks overridden below and the consumer switch."""
    problems = []
    for owner, name in ((faust.App, "_wait_for_table_recovery_completed"), (faust.App, "BootStrategy"),
                        (faust.App, "flow_control"), (faust.Worker, "_sentinel_task")):
        if not hasattr(owner, name):
            problems.append(f"faust.{owner.__name__} has no {name}")
    boot = getattr(faust.App, "BootStrategy", None)
    if boot is not None and "enable_kafka_consumer" not in inspect.signature(boot.__init__).parameters:
        problems.append("faust.App.BootStrategy takes no enable_kafka_consumer")
    return problems


class FedApp(faust.App):
    """A Faust app without a Kafka consumer of its own (see the module docstring)."""

    gpubill_on_stop: Callable[[], Awaitable[None]] | None = None  # run when the app stops

    async def _wait_for_table_recovery_completed(self) -> bool:
        """This app has no Faust tables and no consumer of Faust's own to recover them with."""
        return False

    async def on_stop(self) -> None:
        await super().on_stop()
        if self.gpubill_on_stop is not None:
            await self.gpubill_on_stop()


def fed_app(app_id: str, settings: KafkaSettings) -> FedApp:
    """The app `app_id` (it names Faust's producer), on the settings' brokers and security,
    with Faust's own consumer switched off: the agents read in-memory channels."""
    app = FedApp(
        app_id,
        broker=[f"kafka://{server.strip()}" for server in settings.kafka.split(",")],
        store="memory://",
        web_enabled=False,
        topic_partitions=settings.partitions,
        producer_acks=-1,
        broker_credentials=broker_credentials(settings),
    )
    # A Faust consumer would join a group of its own with every worker, and each worker starting
    # or stopping would pause every agent and clear its buffer (batches the feeder waits for) for
    # Faust's rebalance.
    app.boot_strategy = app.BootStrategy(app, enable_kafka_consumer=False)
    return app


def open_flow(app: faust.App) -> None:
    """Faust lets buffered events flow once its own consumer has partitions; a fed app has no
    consumer of its own, so its feeder opens the flow, once its agents listen."""
    app.flow_control.resume()


def broker_credentials(settings: KafkaSettings) -> Any:
    """Faust's `broker_credentials` for the settings' Kafka security (None: PLAINTEXT)."""
    security = kafka_security(settings)
    context = ssl_context(security.cafile) if security.tls else None
    if security.sasl:  # Faust says SASL_SSL exactly when it is given a TLS context
        return faust.SASLCredentials(username=security.username, password=security.password,
                                     mechanism=security.mechanism, ssl_context=context)
    return faust.SSLCredentials(context) if security.tls else None
