"""What the agent tells the hub: heartbeats with counters and rates, and the latencies it measures."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from edge_agent.heartbeat import CpuBudget, KeySpread, ProcessStats, Rates, heartbeat
from edge_agent.mqtt.transport import Inbox, Transport
from edge_agent.outbox import Outbox
from edge_agent.probes import ClockOffset, PublishProbe, RttStats, mqtt_roundtrip_ms
from spanedge import topics
from spanedge.errors import InvalidSites
from spanedge.logsafe import escaped
from spanedge.runtime import Pipeline
from spanedge.sites import Broker, Sites, Tier
from spanedge.wire.heartbeat import Heartbeat
from spanedge.wire.heartbeat import encode as encode_heartbeat

if TYPE_CHECKING:
    from spanedge.metrics import Exposition

log = logging.getLogger(__name__)

IDLE_AFTER_S = 10.0
"""An app whose input has been silent this long, with nothing of it in the outbox, holds no hub window back."""


def frontiers(
    pipelines: Mapping[str, Pipeline],
    committed: Mapping[str, float],
    outbox: Outbox,
    inputs_live_for: float = math.inf,
) -> dict[str, float | None]:
    """Per app sending to the hub: the event time below which this site sends it nothing more (see :mod:`hub.handover.frontiers`).

    ``committed`` holds each app's frontier at the last commit; a record of
    the app still in the outbox lowers it to that record's event time. An app
    whose input has been idle for :data:`IDLE_AFTER_S`, with nothing in the
    outbox, is ``None``: the hub's windows do not wait for it. Silence counts
    only while the inputs could deliver: ``inputs_live_for`` is how long
    every input connection has been up with nothing waiting in the inbox
    (:meth:`edge_agent.intake.Intake.live_for`), so a site cut off from its
    sensors' broker, or too busy to read what arrived, still holds back.
    """
    out: dict[str, float | None] = {}
    for app, frontier in committed.items():
        pipeline = pipelines.get(app)
        if pipeline is None:
            continue
        pending = outbox.oldest(app)
        if pending is None:
            out[app] = None if min(pipeline.idle_for(), inputs_live_for) >= IDLE_AFTER_S else frontier
        else:
            out[app] = min(frontier, pending)
    return out


def delivered(
    committed: Mapping[str, float],
    sinks_committed: Mapping[str, float],
    outbox: Outbox,
    unacknowledged: Mapping[str, float] | None = None,
) -> dict[str, float]:
    """Per app: the event time below which this site has delivered every result, to the hub and to its local sinks.

    The lower of the app's frontiers at the last commit (``committed`` for the
    hub, ``sinks_committed`` for the local sinks, whose values are published
    as the commit is done), lowered to its oldest record still in the outbox
    and to the lowest bound of its MQTT sink values the broker has not yet
    acknowledged (``unacknowledged``, :class:`edge_agent.connectors.mqtt.Unacknowledged`).
    An app with neither frontier known is left out. A site that dies for good
    loses the results from here on (:func:`hub.control.plan_history.at_risk`).
    """
    unacked = unacknowledged or {}
    out: dict[str, float] = {}
    for app in committed.keys() | sinks_committed.keys():
        bounds = (committed.get(app), sinks_committed.get(app), outbox.oldest(app), unacked.get(app))
        out[app] = min(f for f in bounds if f is not None)
    return out


async def peer_roundtrip_ms(broker: Broker) -> float | None:
    """The round trip to a peer's ``broker``, logged in as the sites file says (so the probe can ping).

    Without the password (its environment variable unset) the probe goes anonymously: the broker's refusal
    is still one round trip.
    """
    try:
        password = broker.password()
    except InvalidSites:
        password = None
    return await mqtt_roundtrip_ms(
        broker.host,
        broker.port,
        tls=broker.tls.context() if broker.tls is not None else None,
        username=broker.username if password is not None else None,
        password=password,
    )


class Telemetry:
    """The heartbeat and probe loop of one agent.

    Every ``interval`` seconds it probes the hub (a publish acknowledged by the hub broker) and
    every other spoke's broker (an MQTT CONNECT round trip, or a TCP connect over TLS), then
    publishes a heartbeat. Echoes of the hub's probe replies keep a clock offset. When the link
    to the hub comes back, a heartbeat goes at once, without the peer probes, so the hub hears
    that the site is back (and where its records stand) without waiting for the next interval.
    """

    def __init__(
        self,
        site: str,
        sites: Sites,
        hub_site: str,
        hub: Transport,
        interval: float,
        peer_interval: float = 30.0,
        budget_file: Path | None = None,
    ) -> None:
        """Measure nothing yet; probe the hub every ``interval`` seconds and peer brokers every ``peer_interval``.

        ``budget_file`` holds the CPU cores SpanEdge may use at the site now, if a
        gateway gives it less than ``sites.yaml`` declares (see :class:`~edge_agent.heartbeat.CpuBudget`).
        """
        self.site = site
        self.hub_site = hub_site
        self.hub = hub
        self.interval = interval
        self.peer_interval = peer_interval
        self._peers_probed = -math.inf  # monotonic time of the last peer probe
        self.peers = [s for s in sites.sites.values() if s.name != site and s.tier is Tier.SPOKE]
        self.hub_probe = PublishProbe()
        self.peer_rtt: dict[str, RttStats] = {}
        self.clock = ClockOffset()
        self._rates = Rates()
        self._key_spread = KeySpread()
        self._proc = ProcessStats()
        self.budget = CpuBudget(budget_file)
        self.last = Heartbeat(site=site)  # the last heartbeat sent, for the metrics endpoint
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop :meth:`run` runs on
        self._beat_now = asyncio.Event()  # the hub link came back: send a heartbeat now

    def published(self, mid: int) -> bool:
        """A publish of ours was acknowledged; True if it was a probe (else it is the outbox's)."""
        return self.hub_probe.acked(mid)

    def reconnected(self) -> None:
        """The hub link is back: probes in flight across it are not measured, and a heartbeat goes now.

        Safe from the transport's network thread.
        """
        self.hub_probe.forget()
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._beat_now.set)

    def echo(self, payload: bytes, arrival: float) -> None:
        """The hub's reply to a probe: ``{"hub_ts", "echo_ts"}``.

        The agent's own probe (``{"site", "ts"}``) comes back on the same topic and is skipped;
        anything else is rejected and logged at WARNING with the reason.
        """
        try:
            echo = orjson.loads(payload)
        except orjson.JSONDecodeError as exc:
            log.warning("rejected probe message (%d bytes): not JSON: %s", len(payload), exc)
            return
        if not isinstance(echo, dict):
            log.warning("rejected probe message: expected a JSON object, got %s", type(echo).__name__)
            return
        if "hub_ts" not in echo:
            return  # this agent's own probe
        try:
            sent, hub_ts = float(echo["echo_ts"]), float(echo["hub_ts"])
        except (KeyError, TypeError, ValueError) as exc:
            log.warning(
                "rejected probe echo: needs numbers hub_ts and echo_ts (%s: %s)", type(exc).__name__, escaped(exc)
            )
            return
        if not (math.isfinite(sent) and math.isfinite(hub_ts)):
            log.warning("rejected probe echo: hub_ts and echo_ts must be finite, got %r and %r", hub_ts, sent)
            return
        self.clock.observe(sent, hub_ts, arrival)

    async def run(self, stop: asyncio.Event, report: Callable[[], Heartbeat]) -> None:
        """Probe and publish ``report()`` every interval, and whenever the hub link comes back, until ``stop``."""
        self._loop = asyncio.get_running_loop()
        reconnected = False
        while not stop.is_set():
            await self.probe(peers=not reconnected)
            self.last = report()
            if self.hub.connected:
                self.hub.publish(topics.control(self.site, "heartbeat"), encode_heartbeat(self.last), 1)
            reconnected = await self._sleep(stop)

    async def _sleep(self, stop: asyncio.Event) -> bool:
        """Wait an interval, or less if ``stop`` is set or the hub link comes back; True in the last case."""
        waits = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(self._beat_now.wait())]
        try:
            await asyncio.wait(waits, timeout=self.interval, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()
        woken = self._beat_now.is_set() and not stop.is_set()
        self._beat_now.clear()
        return woken

    async def probe(self, peers: bool = True) -> None:
        """Send a hub probe; every ``peer_interval`` (if ``peers``), time a round trip to every peer spoke's broker."""
        if self.hub.connected:
            body = orjson.dumps({"site": self.site, "ts": time.time()})
            self.hub_probe.send(lambda: self.hub.publish(topics.control(self.site, "probe"), body, 1))
        if not peers or time.monotonic() - self._peers_probed < self.peer_interval:
            return
        self._peers_probed = time.monotonic()
        times = await asyncio.gather(*(peer_roundtrip_ms(peer.mqtt()) for peer in self.peers))
        for peer, ms in zip(self.peers, times, strict=True):
            if ms is not None:
                self.peer_rtt.setdefault(peer.name, RttStats()).add(ms)

    def exposition(self) -> Exposition:
        """The last heartbeat as Prometheus metric families (``spanedge agent --metrics-port``)."""
        from spanedge.metrics import Exposition  # prometheus_client loads only with --metrics-port

        beat, out = self.last, Exposition()
        site = {"site": self.site}
        out.add("spanedge_agent_watermark_lag_seconds", beat.watermark_lag_s, site)
        out.add("spanedge_agent_dead_letters_total", beat.dlq, site, help="records sent to the dead-letter topic")
        out.add("spanedge_agent_late_records_total", beat.late, site, help="records behind the watermark")
        out.add("spanedge_agent_overload_dropped_records_total", beat.overload_dropped, site)
        outbox = beat.outbox
        out.add("spanedge_agent_outbox_records", outbox.get("records"), site, help="records waiting for the hub")
        out.add("spanedge_agent_outbox_bytes", outbox.get("bytes"), site)
        out.add("spanedge_agent_outbox_sent_records_total", outbox.get("sent"), site)
        out.add("spanedge_agent_outbox_dropped_records_total", outbox.get("dropped"), site)
        for replica, stats in beat.operators.items():
            labels = {"site": self.site, "replica": replica}
            out.add("spanedge_operator_input_records_total", stats.get("in"), labels)
            out.add("spanedge_operator_output_records_total", stats.get("out"), labels)
            out.add("spanedge_operator_input_records_per_second", stats.get("rate_in"), labels)
            out.add("spanedge_operator_output_records_per_second", stats.get("rate_out"), labels)
        for peer, link in beat.latency.items():
            labels = {"site": self.site, "peer": peer}
            out.add(
                "spanedge_agent_link_rtt_seconds", link.get("rtt_ms"), labels, help="the latest round trip", scale=1e-3
            )
        return out

    def heartbeat(
        self,
        pipelines: Mapping[str, Pipeline],
        outbox: Outbox,
        inbox: Inbox,
        dlq: int,
        late: int,
        handed_over: list[dict[str, Any]] | None = None,
        committed: Mapping[str, float] | None = None,
        sinks_committed: Mapping[str, float] | None = None,
        unacknowledged: Mapping[str, float] | None = None,
        result_latency: dict[str, dict[str, dict[str, float]]] | None = None,
        inputs_live_for: float = math.inf,
        counters: Mapping[str, Mapping[str, int]] | None = None,
    ) -> Heartbeat:
        """The heartbeat message for the agent's current state.

        ``handed_over``: see :func:`heartbeat`; ``committed`` and
        ``sinks_committed``: each app's frontier and sink frontier at the
        last commit, ``unacknowledged`` the bounds of the sink values not yet
        acknowledged (see :func:`frontiers` and :func:`delivered`); ``result_latency`` the local
        sinks' (:meth:`edge_agent.sinks.LocalSinks.result_latency`);
        ``inputs_live_for`` as :func:`frontiers` reads it; ``counters`` each app's dead letters, late records
        and operator errors (:attr:`edge_agent.sinks.LocalSinks.counters`).
        """
        counts: dict[str, dict[str, int]] = {}
        lags = []
        for name, pipeline in pipelines.items():
            prefix = f"{name}/" if len(pipelines) > 1 else ""
            for replica, c in pipeline.metrics().items():
                counts[prefix + replica] = c
            lag = pipeline.watermark_lag()
            if lag is not None:
                lags.append(lag)
        cpu, rss = self._proc.sample()
        latency = {self.hub_site: self.hub_probe.stats.to_dict()}
        latency.update({name: stats.to_dict() for name, stats in self.peer_rtt.items()})
        return heartbeat(
            site=self.site,
            apps=sorted(pipelines),
            operators=self._rates.update(counts),
            watermark_lag_s=max(lags) if lags else None,
            outbox=outbox.stats(),
            dlq=dlq,
            late=late,
            overload_dropped=inbox.dropped,
            cpu_percent=cpu,
            rss_bytes=rss,
            latency=latency,
            clock_offset_ms=self.clock.offset_ms,
            cpu_budget=self.budget.read(),
            handed_over=handed_over,
            state_bytes={name: sizes for name, p in pipelines.items() if (sizes := p.state_bytes())},
            complete=frontiers(pipelines, committed or {}, outbox, inputs_live_for),
            delivered=delivered(committed or {}, sinks_committed or {}, outbox, unacknowledged),
            key_spread=self._key_spread.update({name: p.key_records() for name, p in pipelines.items()}),
            result_latency=result_latency,
            counters=counters,
        )
