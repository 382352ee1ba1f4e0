"""The drift fault: a site's sensors read a field shifted from a time on; the values sent carry the shift."""

from __future__ import annotations

import pytest

from simulate.config import FieldSpec, SensorSpec
from simulate.drift import Drift, drifts_by_site, shifted
from simulate.faults import FaultKind, InvalidFault, drifts, parse_fault, parse_faults
from simulate.sensor_fleet import SensorFleet
from simulate.sensors import Device, SiteSensors, schedule
from spanedge.sites import Sites

SITES = Sites.of(
    {
        "sites": {
            "cloud": {"tier": "hub", "broker": "mqtt://localhost:1883"},
            "gw-1": {"tier": "spoke", "broker": "mqtt://localhost:1883"},
        }
    }
)


def test_a_drift_fault_parses_with_its_field_and_shift() -> None:
    fault = parse_fault("drift:gw-1:rms:2.5@40s", SITES)
    assert (fault.kind, fault.site, fault.field, fault.shift, fault.at) == (FaultKind.DRIFT, "gw-1", "rms", 2.5, 40.0)
    assert drifts(parse_faults(["drift:gw-1:rms:-1@10s", "latency:gw-1:50@5s"], SITES)) == [
        Drift("gw-1", "rms", -1.0, 10.0)
    ]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("drift:gw-1:rms@40s", "drift takes the form drift:<spoke>:<field>:<shift>@<t>"),
        ("drift:gw-1:rms:much@40s", "the shift must be a number such as 2.5"),
        ("drift:gw-1:rms:0@40s", "other than 0"),
        ("drift:gw-1:1x:2@40s", "the field must be a record field name"),
        ("drift:cloud:rms:2@40s", "is a hub and runs no agent"),
        ("drift:gw-9:rms:2@40s", "unknown site 'gw-9'"),
        ("drift:gw-1:rms:2@replan+3s", "a drift happens at a time after the sensors start"),
    ],
)
def test_a_bad_drift_fault_says_what_is_wrong(spec: str, message: str) -> None:
    with pytest.raises(InvalidFault, match=message):
        parse_fault(spec, SITES)


def test_shifted_adds_each_begun_drift_to_numbers_only() -> None:
    ds = drifts_by_site([Drift("a", "rms", 1.0, 20.0), Drift("a", "rms", 2.0, 10.0), Drift("a", "ok", 5.0, 0.0)])["a"]
    assert [d.at for d in ds] == [0.0, 10.0, 20.0]
    assert shifted({"rms": 1.0, "ok": True}, ds, 5.0) == {"rms": 1.0, "ok": True}
    assert shifted({"rms": 1.0}, ds, 15.0) == {"rms": 3.0}
    assert shifted({"rms": 1.0}, ds, 25.0) == {"rms": 4.0}


def test_a_drifting_sites_devices_send_the_shifted_values_from_the_time_on() -> None:
    spec = SensorSpec(count=2, rate=4.0, value={"t": "$event_time", "rms": FieldSpec(uniform=(0.0, 1.0))})
    calm = schedule([Device("gw-1", "r", i, spec, "r/+", 1, 1000.0) for i in range(2)], until=20.0)
    devices = [Device("gw-1", "r", i, spec, "r/+", 1, 1000.0) for i in range(2)]
    fleet = SensorFleet({"gw-1": SiteSensors("gw-1", "127.0.0.1", 1883, devices, {"r": 1})})
    fleet.drift([Drift("gw-1", "rms", 10.0, 8.0), Drift("other", "rms", 1.0, 0.0)])
    drifted = schedule(devices, until=20.0)
    assert len(drifted) == len(calm) > 100
    for before, after in zip(calm, drifted, strict=True):
        assert before.value is not None
        assert after.value is not None
        shift = 10.0 if after.offset >= 8.0 else 0.0
        assert after.value["rms"] == pytest.approx(before.value["rms"] + shift)
        assert after.payload != before.payload or shift == 0.0


def test_the_predictive_maintenance_example_scores_at_its_gateways_and_takes_a_drift() -> None:
    from placement import solve
    from simulate.config import parse_simulation
    from spanedge.loader import load_app
    from spanedge.sites import load_sites
    from tests.conftest import EXAMPLES

    folder = EXAMPLES / "predictive_maintenance"
    sites = load_sites(folder / "sites.yaml")
    app = load_app(folder / "app.py")
    plan = solve(app, sites)
    placed = {(a.operator, a.site) for a in plan.assignments}
    assert {("score", "plant-a"), ("score", "plant-b"), ("reports", "cloud")} <= placed
    assert app.models["wear"].size_bytes <= (sites.sites["plant-a"].model_budget_bytes or 0)
    assert set(parse_simulation(sites).sensors) == {"plant-a", "plant-b"}
    assert parse_fault("drift:plant-b:rms:2.5@40s", sites).shift == 2.5
