"""The join fault: its grammar, what the schedule does with it, and the certificate identities it needs."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from simulate.checking import Reference
from simulate.config import SensorSpec, parse_simulation
from simulate.errors import InvalidOption, SimulationError
from simulate.fault_schedule import FaultSchedule
from simulate.faults import FaultKind, InvalidFault, joining, parse_fault, parse_faults
from simulate.joins import counted, first_offset, join_switch, site_request
from simulate.scenario import Options, Scenario
from simulate.sensors import Device, Message, Sent
from simulate.topology import OBSERVER, Topology, hub_ca_dir
from simulate.wan import LinkProxy
from spanedge.errors import SpanEdgeError
from spanedge.loader import load_app
from spanedge.sites import load_sites
from tests.conftest import EXAMPLES, missing_part

pytestmark = pytest.mark.timeout(30)

FARM = EXAMPLES / "smart_farm"


def test_a_join_names_a_spoke_and_a_time() -> None:
    join = parse_fault("join:barn@30s", load_sites(FARM / "sites.yaml"))
    assert (join.kind, join.site, join.at, join.anchor) == (FaultKind.JOIN, "barn", 30.0, None)
    faults = parse_faults(["join:barn@30s", "partition:barn:5s@40s", "kill-agent:shed@10s"])
    assert joining(faults) == {"barn": 30.0}


@pytest.mark.parametrize(
    ("specs", "why"),
    [
        (["join:cloud@2s"], "is a hub and runs no agent"),
        (["join:barn:3@2s"], "join takes the form join:<spoke>@<t>"),
        (["join:nowhere@2s"], "unknown site 'nowhere'"),
        (["join:barn@replan+3s"], "a join happens at a time after the sensors start"),
        (["join:barn@20s", "join:barn@30s"], "barn already joins with 'join:barn@20s'"),
        (
            ["join:barn@20s", "kill-agent:barn@10s"],
            r"barn joins only at 20s \('join:barn@20s'\); time this fault after",
        ),
        (["join:barn@20s", "partition:barn:5s@20s"], "barn joins only at 20s"),
        (["join:barn@20s", "latency:barn:300@switch+2s"], "barn joins only at 20s"),
    ],
)
def test_bad_joins_say_why(specs: list[str], why: str) -> None:
    with pytest.raises(InvalidFault, match=why):
        parse_faults(specs, load_sites(FARM / "sites.yaml"))


def test_a_join_needs_the_managed_hub_and_secured_brokers(tmp_path: Path) -> None:
    with pytest.raises(SimulationError, match="join:barn@5s enrols a site at the hub's REST API: it needs --mode"):
        Scenario.load(
            Options(FARM / "sites.yaml", FARM / "app.py", faults=["join:barn@5s"], mode="standalone", run_dir=tmp_path)
        )
    from simulate.runner import Run

    with pytest.raises(InvalidOption, match=r"join:barn@5s enrols a site .* drop --insecure-brokers"):
        Run(
            Options(FARM / "sites.yaml", FARM / "app.py", faults=["join:barn@5s"], run_dir=tmp_path),
            insecure_brokers=True,
        )
    scenario = Scenario.load(Options(FARM / "sites.yaml", FARM / "app.py", faults=["join:barn@5s"], run_dir=tmp_path))
    assert scenario.joining == {"barn": 5.0}
    assert scenario.starting == ["shed", "field-east", "field-west"]


def test_the_site_add_request_carries_the_streams_labels_and_cpu() -> None:
    sites = load_sites(FARM / "sites.yaml")
    site = sites.site("field-east").replace(labels={"zone": "east"})
    request = site_request(site)
    assert request == {
        "labels": {"zone": "east"},
        "cpu": 0.02,
        "streams": {"probes": {"topic": "probes/east/+", "rate": 80.0, "record_bytes": 120}},
    }


def test_the_sensors_of_a_joined_site_start_late_enough_that_every_event_time_counts() -> None:
    specs = [SensorSpec(count=1, rate=2.0, disorder=0.2), SensorSpec(count=1, rate=2.0, clock_skew=-0.5)]
    assert first_offset(1030.0, 1000.0, specs) == pytest.approx(30.5)
    assert first_offset(1030.0, 1000.0, [SensorSpec(count=1, rate=2.0, clock_skew=3.0)]) == 30.0
    device = Device("north", "probes", 0, SensorSpec(count=1, rate=4.0, disorder=0.2), "probes/+", 1, 1000.0)
    device.skip_to(30.5)
    first = device.next()
    assert first.offset >= 30.5 > device.offset(first.seq - 1)
    assert first.event_time is not None
    assert first.event_time >= 1030.0
    assert counted("north", 1029.9, {"north": 1030.0}) is False
    assert counted("north", 1030.0, {"north": 1030.0})
    assert counted("east", 1.0, {"north": 1030.0})


def test_the_switch_of_a_join_is_read_from_the_placement() -> None:
    placement = {"joins": [{"site": "shed", "switch_at": 40.0}, {"site": "barn", "switch_at": 50}]}
    assert join_switch(placement, "barn") == 50.0
    assert join_switch(placement, "field-east") is None
    assert join_switch(None, "barn") is None


def _sent(site: str, t: float, probe: str) -> Sent:
    value = {"probe": probe, "zone": probe.split("/")[0], "ts": t, "moisture": 10.0, "temp_c": 12.0}
    return Sent(Message(site, "probes", 0, 0, probe, f"probes/{probe}", t, t, value, b""), t)


def test_the_reference_counts_a_joined_site_from_its_switch() -> None:
    app = load_app(FARM / "app.py")
    sent = [_sent("field-east", t, "east/e00") for t in (1001.0, 1012.0)]
    sent += [_sent("field-north", t, "north/n00") for t in (1005.0, 1011.0, 1013.0)]
    reference = Reference.of(app, sent, 0.0, 1000.0, joined={"field-north": 1010.0})
    north = [i for i in reference.items["probes"] if i.site == "field-north"]
    assert [i.event_time for i in north] == [1011.0, 1013.0]
    assert reference.streams[("probes", "field-north")].sent == 3  # every message is still counted as sent


class Target:
    def __init__(self) -> None:
        self.calls: list[str] = []

    async def join_site(self, site: str) -> list[str]:
        self.calls.append(site)
        return ["site add: a join token for barn", "spanedge agent join at https://h:1: enrolled"]


async def test_a_join_enrols_waits_for_the_switch_then_starts_the_sensors() -> None:
    target, notes, started = Target(), list[str](), list[tuple[str, float]]()
    answers: list[Any] = [None, {"joins": []}, {"joins": [{"site": "barn", "switch_at": 60.0}]}]

    async def placement() -> Any:
        return answers.pop(0) if len(answers) > 1 else answers[0]

    async def start(site: str, switch: float) -> None:
        started.append((site, switch))

    schedule = FaultSchedule(
        parse_faults(["join:barn@0s"]),
        target,  # type: ignore[arg-type]
        "cloud",
        notes.append,
        placement=placement,
        poll_s=0.01,
        start_sensors=start,
        clock=lambda: 50.0,
    )
    await schedule.run(asyncio.get_running_loop().time())
    assert target.calls == ["barn"]
    assert schedule.joined == {"barn": 60.0}
    assert started == [("barn", 60.0)]
    assert schedule.applied[0].ended == 50.0
    assert any(n.startswith("site barn added at the hub and joined with its one-time token: site add") for n in notes)
    assert "the hub planned barn in: it counts its data from the join switch, 10.0 s on" in notes
    assert schedule.killed == {}
    assert schedule.stopped == set()


async def test_a_join_never_planned_in_is_a_problem_of_the_run() -> None:
    async def placement() -> Any:
        return {"joins": []}

    loop = asyncio.get_running_loop()
    schedule = FaultSchedule(
        parse_faults(["join:barn@0s"]),
        Target(),  # type: ignore[arg-type]
        "cloud",
        lambda _: None,
        placement=placement,
        poll_s=0.01,
    )
    await schedule.run(loop.time(), until=loop.time() + 0.05)
    assert schedule.joined == {}
    assert schedule.skipped == ["fault join:barn@0s: the hub planned barn in no app before the sensors stopped"]


def test_a_run_with_a_joining_spoke_logs_in_with_certificates_of_the_hubs_ca(tmp_path: Path) -> None:
    sites = load_sites(FARM / "sites.yaml")
    try:
        topology = Topology(sites, parse_simulation(sites), tmp_path, joining={"shed"})
    except SpanEdgeError as exc:
        missing_part(f"needs a broker: {exc}")
    assert topology.certificates
    assert (hub_ca_dir(tmp_path) / "ca-key.pem").exists()  # the hub finds its CA made and keeps it
    assert set(topology.identities) == {*sites.sites, OBSERVER}
    assert topology.passwords == {}
    assert topology.env("barn") == {}
    login = topology.login("barn")
    assert login is not None
    assert login.password is None
    assert login.cert_file is not None
    assert "username" not in login.aiomqtt_options()
    conf = topology.brokers["barn"].config.read_text()  # type: ignore[attr-defined]
    assert "require_certificate true\nuse_identity_as_username true\n" in conf
    assert f"crlfile {topology.acl_dir / 'crl.pem'}\n" in conf
    assert "password_file" not in conf
    assert (topology.acl_dir / "crl.pem").read_bytes().startswith(b"-----BEGIN X509 CRL-----")
    for i, broker in enumerate(topology.brokers.values()):
        broker.port = 20000 + i  # nothing is started: only the files are written
    for src in sites.sites:
        for dst in sites.sites:
            if src != dst:
                topology.proxies[(src, dst)] = LinkProxy(topology.link(src, dst), src, dst, topology.brokers[dst].port)
    seen = load_sites(topology.write_sites_file("barn"))
    assert "shed" not in seen.sites  # a spoke that joins is in no sites file until the hub gives it one
    assert all(lk.between != ("barn", "shed") and "shed" not in lk.between for lk in seen.links)
    broker = seen.site("cloud").mqtt()
    assert broker.username is None
    assert broker.tls is not None
    assert broker.tls.cert_file == topology.identities["barn"].cert_file
    key = Path(str(topology.identities["barn"].key_file))
    assert oct(key.stat().st_mode & 0o777) == "0o600"
