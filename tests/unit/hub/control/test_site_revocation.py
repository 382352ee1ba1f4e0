"""A revoked site counts as gone for good at once: the apps it runs replicas of are re-planned without it."""

from __future__ import annotations

import orjson

from spanedge.sites import Sites

from .test_site_health import Clock, _beat, _farm, _site_of, beat, sites

__all__ = ["sites"]  # the fixture


def test_a_revoked_spoke_is_replanned_around_with_a_handover_and_never_rejoins(sites: Sites) -> None:
    clock = Clock()
    coordinator, registry = _farm(sites, clock)
    for site in ("barn", "shed", "field-east", "field-west"):
        _beat(coordinator, site)
    assert _site_of(coordinator, "probe_means@field-east") == "barn"
    version = coordinator.records()[0].plan.version
    registry.revoked.add("barn")
    coordinator.analysis.revoke("barn")
    assert coordinator.gone("barn")
    assert coordinator.check_sites() == [coordinator.records()[0].name]
    record = coordinator.records()[0]
    assert record.plan.version > version
    assert record.history[-1].reason == "site barn revoked: re-planned without it"
    assert _site_of(coordinator, "probe_means@field-east") not in ("barn", "cloud")
    assert any(h.source == "barn" for h in record.plan.handovers)  # its state moves with the replicas
    assert not coordinator.heartbeat("barn", orjson.dumps(beat("barn", 5.0)))  # refused: it never rejoins
    clock.now += 5
    assert coordinator.check_sites() == []
    assert coordinator.gone("barn")
