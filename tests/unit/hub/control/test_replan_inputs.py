"""What a re-plan reads of the registry: the fresh measured links and the sites with their measured rates."""

from __future__ import annotations

from typing import Any

from hub.control.links import pair
from hub.control.registry import SiteRegistry
from spanedge.sites import Sites, parse_sites
from tests.unit.hub.control.test_coordinator import Clock

FLEET = """
sites:
  cloud: {tier: hub, broker: "mqtt://127.0.0.1:1883", cpu: 8}
  a: {tier: spoke, broker: "mqtt://127.0.0.1:1883", streams: {readings: {topic: "a/+", rate: 5}}}
  b: {tier: spoke, broker: "mqtt://127.0.0.1:1883", streams: {readings: {topic: "b/+", rate: 5}, other: {topic: "o", rate: 2}}}
  c: {tier: spoke, broker: "mqtt://127.0.0.1:1883", streams: {readings: {topic: "c/+", rate: 5}}}
  d: {tier: spoke, broker: "mqtt://127.0.0.1:1883"}
links:
  - {between: [a, cloud], latency_ms: 40, bandwidth_mbps: 10}
default_link: {latency_ms: 50, bandwidth_mbps: 10}
"""


def reference_rows(registry: SiteRegistry) -> list[dict[str, Any]]:
    """``latency_rows`` as it was: each fresh link's full row (:meth:`Links.row`), cut down."""
    links, order, now = registry._links, {n: i for i, n in enumerate(registry.sites.sites)}, registry._clock()
    rows = []
    for a in registry.sites.sites:
        for b in sorted(links.peers(a), key=lambda p: order.get(p, len(order))):
            m = links.measured(a, b)
            if b == a or m is None or now - m.updated_at > registry.stale_after_s:
                continue
            r = links.row(a, b, m, now)
            keep = {"latency_p50_ms": "latency_ms", "latency_p95_ms": "p95_ms", "latency_spread_ms": "spread_ms"}
            rows.append({"src": a, "dst": b, **{k: r[v] for k, v in keep.items()}, "measured_at": r["measured_at"]})
    return rows


def reference_latencies(registry: SiteRegistry) -> dict[str, float]:
    """``measured_latencies`` as it was: the peers of every known site."""
    links, known, now = registry._links, registry.sites.sites, registry._clock()
    out = {}
    for a in known:
        for b in links.peers(a):
            m = links.measured(a, b)
            if m is not None and b in known and now - m.updated_at <= registry.stale_after_s:
                out[pair(a, b)] = round(m.p50_ms, 3)
    return out


def reference_sites(registry: SiteRegistry, streams: set[str]) -> Sites:
    """``effective_sites`` as it was: every binding and site copied."""
    updated = {}
    for name, site in registry.sites.sites.items():
        bindings = {}
        for stream, binding in site.streams.items():
            rate = registry.stream_rate(stream, name) if stream in streams else None
            bindings[stream] = binding.replace(rate=max(rate, 1e-3)) if rate is not None else binding
        updated[name] = site.replace(streams=bindings)
    return registry.sites.replace(sites=updated)


def beat(site: str, latency: dict[str, float], rates: dict[str, float]) -> dict[str, Any]:
    return {
        "site": site,
        "ts": 0,
        "latency": {peer: {"rtt_ms": 2 * ms, "p95_ms": 3 * ms, "samples": 4} for peer, ms in latency.items()},
        "operators": {f"{s}@{site}": {"rate_in": r, "rate_out": r} for s, r in rates.items()},
    }


def test_the_links_and_sites_a_replan_reads_are_what_they_always_were() -> None:
    clock = Clock(1_000.0)
    registry = SiteRegistry(parse_sites(FLEET), down_after_s=30, stale_after_s=60, clock=clock)
    registry.heartbeat("c", beat("c", {"cloud": 9.0, "a": 4.0}, {"readings": 3.0}))  # stale by the end
    clock.now += 50
    registry.heartbeat("a", beat("a", {"cloud": 20.123456, "b": 7.0, "ghost": 3.0, "a": 1.0}, {"readings": 5.0}))
    registry.heartbeat("b", beat("b", {"a": 8.0, "cloud": 11.0}, {"readings": 0.0, "other": 2.5}))
    clock.now += 2
    registry.heartbeat("b", beat("b", {"a": 9.5, "d": 1.25}, {"readings": 6.0}))
    clock.now += 20  # c's links are stale now, and c is down (its rate no longer counts)
    rows = registry.latency_rows()
    assert rows == reference_rows(registry)
    assert {(r["src"], r["dst"]) for r in rows} == {
        (a, b) for a, b in [("a", "cloud"), ("a", "b"), ("b", "d"), ("b", "cloud")] for a, b in ((a, b), (b, a))
    }
    assert registry.measured_latencies() == reference_latencies(registry)
    assert set(registry.measured_latencies()) == {"a|cloud", "a|b", "b|d", "b|cloud"}
    for streams in ({"readings"}, {"readings", "other"}, set()):
        assert registry.effective_sites(streams) == reference_sites(registry, streams)
    assert registry.effective_sites({"readings"}).sites["a"] is registry.sites.sites["a"]  # its rate is unchanged
    assert registry.effective_sites({"other"}).sites["b"].streams["other"].rate != 2.0
