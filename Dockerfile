# gpubill: worker, scheduler and the rest of the CLI in one image (see docs/deployment.md).
#
#   docker build -t gpubill .
#   docker run --rm gpubill --help
#
# compose.yaml runs it as `worker` and `scheduler` against the Kafka and ClickHouse
# services, after a one-shot `db migrate` has brought the schema up to date.

# Stage 1: the worker's hot path (native/, Rust) as an abi3 wheel. Debian bookworm, as
# the python:3.11-slim image below, whose Python 3.11 it also carries.
FROM rust:1.85-slim-bookworm AS native
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-pip \
    && rm -rf /var/lib/apt/lists/* \
    && pip3 install --break-system-packages --no-cache-dir "maturin>=1.7,<2"
COPY native /native
RUN maturin build --release --manifest-path /native/Cargo.toml --interpreter python3 --out /wheels

# Stage 2: the image.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Install the project and its dependencies (all of them ship manylinux wheels for
# CPython 3.11, so no compiler is needed here), and the native wheel built above. The
# source tree is only needed to build. The agent extra (nvidia-ml-py, pure Python) lets the
# same image run `gpubill agent` (deploy/agent/daemonset.yaml).
COPY . /src
COPY --from=native /wheels /wheels
RUN pip install "/src[agent]" /wheels/*.whl \
    && rm -rf /src /wheels \
    && python -c "import gpubill_native"

# Run as an unprivileged user. Its home is the working directory: GPUBILL_HOME, the
# Faust data directory (<group>.agents-data) and GPUBILL_OUT (invoices, reports) live here.
RUN groupadd --system --gid 10001 gpubill \
    && useradd --system --uid 10001 --gid gpubill --home-dir /var/lib/gpubill --create-home \
       --shell /usr/sbin/nologin gpubill \
    && mkdir -p /var/lib/gpubill/out \
    && chown -R gpubill:gpubill /var/lib/gpubill

USER gpubill:gpubill
WORKDIR /var/lib/gpubill

ENV GPUBILL_HOME=/var/lib/gpubill \
    GPUBILL_OUT=/var/lib/gpubill/out

# 9464: the worker's Prometheus metrics (GPUBILL_METRICS_PORT).
EXPOSE 9464

ENTRYPOINT ["gpubill"]
CMD ["--help"]
