# syntax=docker/dockerfile:1
# The SpanEdge hub: REST API, coordinator, MQTT ingest and Spark in local mode
# (`spanedge[hub,postgres]`: the placement solver and the PostgreSQL sink too), with the Java runtime Spark needs.
#
# Build from the repository root:
#   docker build -f deploy/hub.Dockerfile -t spanedge-hub .
# Run (the API token from the environment; the plan-signing key from `spanedge keys generate`,
# owned by the image's user 10001):
#   docker run -d -p 8000:8000 -e SPANEDGE_TOKEN -e SPANEDGE_PLAN_KEY_FILE=/run/secrets/plan-key.pem \
#     -v $PWD/keys/plan-key.pem:/run/secrets/plan-key.pem:ro \
#     -v $PWD/sites.yaml:/etc/spanedge/sites.yaml:ro -v spanedge-hub-state:/var/lib/spanedge spanedge-hub
# The REST API is HTTPS: the hub's CA (in the state volume) issues its certificate for localhost,
# 127.0.0.1 and the container's host name, plus each --tls-name (SPANEDGE_HUB_TLS_NAMES) clients use.
# Clients trust that CA:
#   docker cp <container>:/var/lib/spanedge/hub/ca/ca.pem hub-ca.pem
#   spanedge status --hub-url https://127.0.0.1:8000 --hub-ca hub-ca.pem

FROM python:3.11-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY spanedge ./spanedge
COPY edge_agent ./edge_agent
COPY hub ./hub
COPY placement ./placement
COPY simulate ./simulate
RUN python -m venv /opt/spanedge \
    && /opt/spanedge/bin/pip install --no-cache-dir --disable-pip-version-check "/src[hub,postgres]" \
    && /opt/spanedge/bin/pip uninstall --yes --quiet pip setuptools

FROM python:3.11-slim-bookworm
# Spark 4 runs on Java 17 or 21; Debian bookworm packages 17. The man directory works
# around the JRE's post-install step on slim images, which have no man pages.
RUN mkdir -p /usr/share/man/man1 \
    && apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /opt/spanedge /opt/spanedge
RUN groupadd --system --gid 10001 spanedge \
    && useradd --system --uid 10001 --gid spanedge --home-dir /var/lib/spanedge --shell /usr/sbin/nologin spanedge \
    && mkdir -p /var/lib/spanedge /etc/spanedge \
    && chown spanedge:spanedge /var/lib/spanedge \
    && chmod 0700 /var/lib/spanedge
ENV PATH=/opt/spanedge/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYSPARK_PYTHON=/opt/spanedge/bin/python
# Deployed apps, the durable ingest log and Spark's checkpoints.
VOLUME ["/var/lib/spanedge"]
WORKDIR /var/lib/spanedge
USER 10001:10001
EXPOSE 8000
# The API is HTTPS, verified against the CA the hub makes in its state directory at the first start
# (or against SPANEDGE_HUB_CA, the CA of a certificate given with SPANEDGE_HUB_TLS_CERT/_KEY).
HEALTHCHECK --interval=30s --timeout=5s --start-period=90s \
    CMD ["python", "-c", "import os, ssl, urllib.request; ca = os.environ.get('SPANEDGE_HUB_CA', '/var/lib/spanedge/hub/ca/ca.pem'); urllib.request.urlopen('https://127.0.0.1:8000/healthz', timeout=4, context=ssl.create_default_context(cafile=ca))"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["spanedge", "hub"]
CMD ["--sites", "/etc/spanedge/sites.yaml", "--host", "0.0.0.0", "--port", "8000", "--state-dir", "/var/lib/spanedge/hub"]
