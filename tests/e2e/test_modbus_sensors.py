"""Sensors that are Modbus points, in the simulator: each sample read once, at the device's time.

A field station polls four probes of a simulated Modbus device every 0.25 s; each probe is a
float32 holding register with its sample time (milliseconds since the epoch, 64 bits) next to
it, set by the simulator once a second. Its per-probe windows run at the station and are checked
against the reference, which counts one record per sample written, a value equal to the previous
one included.
"""

from __future__ import annotations

import asyncio
import importlib.util
import itertools
from typing import Any

import pytest
import yaml

from tests.conftest import missing_part
from tests.e2e.conftest import MODE, _require_parts

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

PROBES = [f"p{i}" for i in range(4)]

APP = """
from spanedge import App, agg, sinks

app = App("polled")
means = app.source("probes", time_field="ts").window(
    name="means", key="name", size="5s", aggs={"n": agg.count(), "value": agg.mean("value")}, scope="local"
)
means.sink(sinks.mqtt("field/means"), name="means_bus")
"""

TIME = {"count": 4, "unit": "ms"}
SITES: dict[str, Any] = {
    "sites": {
        "cloud": {"tier": "hub", "broker": "mqtt://localhost:1883", "cpu": 4},
        "field": {
            "tier": "spoke",
            "broker": "mqtt://localhost:1883",
            "cpu": 1,
            "streams": {
                "probes": {
                    "url": "modbus://localhost:1502",
                    "interval": 0.25,
                    "points": {
                        p: {"address": 6 * i, "type": "float32", "time": {**TIME, "address": 6 * i + 2}}
                        for i, p in enumerate(PROBES)
                    },
                    "rate": 4,
                }
            },
        },
    },
    "simulation": {
        "seed": 5,
        "duration": "30s",
        "settle": "8s",
        "sensors": {
            "field": {
                "probes": {
                    "count": 4,
                    "rate": 1,
                    "key": "p{i}",
                    "device": "modbus",
                    "value": {"moisture": {"normal": [25, 0.3], "round": 0}},  # mostly the same value again
                }
            }
        },
    },
}


@pytest.fixture(scope="module")
def polled_run(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """30 s of samples from the Modbus probes into the field station's windows."""
    _require_parts()
    if importlib.util.find_spec("pymodbus") is None:
        missing_part("needs pymodbus: pip install 'spanedge[modbus]'")
    from simulate.runner import Options, run

    directory = tmp_path_factory.mktemp("polled")
    (directory / "app.py").write_text(APP)
    (directory / "sites.yaml").write_text(yaml.safe_dump(SITES, sort_keys=False))
    opts = Options(
        sites=directory / "sites.yaml", app=directory / "app.py", duration=30, mode=MODE, run_dir=directory / "run"
    )
    return asyncio.run(run(opts))


def test_every_sample_of_the_modbus_probes_is_counted_once(polled_run: Any) -> None:
    report = polled_run.report
    check = next(c for c in report.sinks if c.sink == "means_bus")
    assert check.unchecked is None, check
    assert check.checked > 0, polled_run.run_dir
    exact = (check.missing, check.duplicates, check.wrong, check.unexpected, check.lost_records, check.extra_records)
    assert exact == (0, 0, 0, 0, 0, 0), (check.examples, polled_run.run_dir)
    assert (report.lost, report.duplicates) == (0, 0), polled_run.run_dir
    assert not report.problems, report.problems
    sent = [s.message for s in polled_run.sent]
    assert {m.key for m in sent} == set(PROBES)
    by_key = {p: [m.value["value"] for m in sent if m.key == p] for p in PROBES}
    assert all(len(v) >= 20 for v in by_key.values()), {p: len(v) for p, v in by_key.items()}
    repeats = sum(a == b for v in by_key.values() for a, b in itertools.pairwise(v[1:]))  # after the first, 0
    assert repeats > 0  # samples equal to the previous one are records too
    counts = [w.value["n"] for w in polled_run.collector.results if w.sink == "means_bus"]
    assert max(counts) >= 4  # a 5 s window of one probe holds about five samples
    assert any("Modbus sensors of probes at field: 4 points at modbus://127.0.0.1:" in e for e in polled_run.events)
