"""Parsing of --fault specifications."""

from __future__ import annotations

import pytest

from simulate.faults import NEW_OWNER, OLD_OWNER, Anchor, FaultKind, InvalidFault, parse_fault, parse_faults
from spanedge.sites import parse_sites

SITES = parse_sites(
    """
sites:
  cloud: {tier: hub, broker: "mqtt://localhost:1883"}
  factory-a: {tier: spoke, broker: "mqtt://localhost:1883"}
  truck-7: {tier: spoke, broker: "mqtt://localhost:1883"}
"""
)


def test_every_form_parses() -> None:
    p = parse_fault("partition:factory-a:20s@15s", SITES)
    assert (p.kind, p.site, p.duration, p.at) == (FaultKind.PARTITION, "factory-a", 20.0, 15.0)
    k = parse_fault("kill-agent:truck-7@30s", SITES)
    assert (k.kind, k.site, k.at, k.duration) == (FaultKind.KILL_AGENT, "truck-7", 30.0, None)
    down = parse_fault("kill-agent:truck-7:45s@20s", SITES)  # dead for 45 s, then back with its state directory
    assert (down.kind, down.site, down.at, down.duration) == (FaultKind.KILL_AGENT, "truck-7", 20.0, 45.0)
    h = parse_fault("restart-hub@1m")
    assert (h.kind, h.site, h.at) == (FaultKind.RESTART_HUB, None, 60.0)
    b = parse_fault("restart-broker:cloud@500ms", SITES)
    assert (b.kind, b.site, b.at) == (FaultKind.RESTART_BROKER, "cloud", 0.5)
    lat = parse_fault("latency:truck-7:250ms@10s", SITES)
    assert (lat.kind, lat.latency_ms) == (FaultKind.LATENCY, 250.0)
    assert parse_fault("latency:truck-7:90@0s").latency_ms == 90.0


def test_faults_are_sorted_by_time() -> None:
    faults = parse_faults(["restart-hub@30s", "partition:truck-7:5s@10s"], SITES)
    assert [f.kind for f in faults] == [FaultKind.PARTITION, FaultKind.RESTART_HUB]
    assert faults[0].describe() == "partition:truck-7:5s@10s"


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("partition:truck-7:20s", "missing '@<time>'"),
        ("explode:truck-7@1s", "unknown fault 'explode'"),
        ("partition:truck-7@1s", "partition takes the form partition:<site>:<duration>@<t>"),
        ("kill-agent@1s", "kill-agent takes the form"),
        ("restart-hub:cloud@1s", "restart-hub takes the form"),
        ("partition:truck-7:soon@1s", "duration: expected a duration"),
        ("kill-agent:truck-7@later", "time: expected a duration"),
        ("kill-agent:truck-7:long@1s", "downtime: expected a duration"),
        ("kill-agent:truck-7:5s:9s@1s", "kill-agent takes the form kill-agent:<spoke>[:<downtime>]@<t>"),
        ("latency:truck-7:fast@1s", "latency must be milliseconds"),
        ("kill-agent:truck-8@1s", "unknown site 'truck-8'; sites.yaml defines: cloud, factory-a, truck-7"),
        ("kill-agent:cloud@1s", "is a hub and runs no agent"),
        ("partition::5s@1s", "empty site name"),
    ],
)
def test_errors_say_what_and_how(spec: str, fragment: str) -> None:
    with pytest.raises(InvalidFault) as info:
        parse_fault(spec, SITES)
    assert fragment in str(info.value)
    assert "the forms are" in str(info.value)
    assert isinstance(info.value, ValueError)


def test_a_time_relative_to_the_first_move() -> None:
    k = parse_fault("kill-agent:truck-7@replan+3s", SITES)
    assert (k.kind, k.site, k.anchor, k.at) == (FaultKind.KILL_AGENT, "truck-7", Anchor.REPLAN, 3.0)
    old = parse_fault("kill-agent:old-owner@switch-2s", SITES)
    assert (old.site, old.anchor, old.at) == (OLD_OWNER, Anchor.SWITCH, -2.0)
    p = parse_fault("partition:new-owner:8s@switch", SITES)
    assert (p.site, p.anchor, p.at, p.duration) == (NEW_OWNER, Anchor.SWITCH, 0.0, 8.0)
    assert parse_fault("restart-hub@switch+1500ms").at == 1.5
    faults = parse_faults(["restart-hub@switch+1s", "latency:truck-7:300@20s", "kill-agent:truck-7@replan+9s"])
    assert [f.describe() for f in faults] == [
        "latency:truck-7:300@20s",
        "kill-agent:truck-7@replan+9s",
        "restart-hub@switch+1s",
    ]


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("kill-agent:new-owner@20s", "stands for a site of the first handover: give a time like switch+2s"),
        ("kill-agent:truck-7@switch+soon", "offset: expected a duration"),
        ("kill-agent:truck-7@later+2s", "time: expected a duration"),
    ],
)
def test_relative_time_errors_say_how(spec: str, fragment: str) -> None:
    with pytest.raises(InvalidFault) as info:
        parse_fault(spec, SITES)
    assert fragment in str(info.value)
    assert "replan+3s, switch-2s, switch+2s" in str(info.value)
