# syntax=docker/dockerfile:1
# The SpanEdge edge agent for a gateway: the light core only (`pip install spanedge`,
# no placement solver, Spark or web framework), run as an unprivileged user.
#
# Build from the repository root:
#   docker build -f deploy/agent.Dockerfile -t spanedge-agent .
# Run (options come from SPANEDGE_AGENT_<OPTION> variables or as arguments):
#   docker run -d --name spanedge-agent --restart on-failure --stop-timeout 30 \
#     -e SPANEDGE_AGENT_SITE=truck-7 --env-file /etc/spanedge/agent.env \
#     -v /etc/spanedge/sites.yaml:/etc/spanedge/sites.yaml:ro \
#     -v /etc/spanedge/mqtt:/etc/spanedge/mqtt:ro \
#     -v spanedge-agent-state:/var/lib/spanedge spanedge-agent
# /etc/spanedge/mqtt holds the site's MQTT certificate (`spanedge broker-config --identity certificate`
# writes certs/<site>/ on the hub), owned by uid 10001 and named in sites.yaml's tls: entries.

FROM python:3.11-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY spanedge ./spanedge
COPY edge_agent ./edge_agent
COPY hub ./hub
COPY placement ./placement
COPY simulate ./simulate
# The light core, in a venv copied whole into the final image; pip itself is not needed there.
RUN python -m venv /opt/spanedge \
    && /opt/spanedge/bin/pip install --no-cache-dir --disable-pip-version-check /src \
    && /opt/spanedge/bin/pip uninstall --yes --quiet pip setuptools

FROM python:3.11-slim-bookworm
COPY --from=build /opt/spanedge /opt/spanedge
RUN groupadd --system --gid 10001 spanedge \
    && useradd --system --uid 10001 --gid spanedge --home-dir /var/lib/spanedge --shell /usr/sbin/nologin spanedge \
    && mkdir -p /var/lib/spanedge /etc/spanedge \
    && chown spanedge:spanedge /var/lib/spanedge \
    && chmod 0700 /var/lib/spanedge
ENV PATH=/opt/spanedge/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    SPANEDGE_AGENT_SITES=/etc/spanedge/sites.yaml \
    SPANEDGE_AGENT_STATE_DIR=/var/lib/spanedge
# Outbox and checkpoints: keep them across container replacements, or records are resent or lost.
VOLUME ["/var/lib/spanedge"]
WORKDIR /var/lib/spanedge
USER 10001:10001
# On SIGTERM the agent drains its outbox briefly, checkpoints and exits 0; give it time (--stop-timeout 30).
STOPSIGNAL SIGTERM
ENTRYPOINT ["spanedge", "agent"]
