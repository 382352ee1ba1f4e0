"""A gateway enrolled while an app runs: the hub's windows count its sensors' data exactly, from its join on.

A hub process with Spark in local mode and real Mosquitto with client certificates (the ``Fleet``
of :mod:`tests.integration.test_enrolment`). truck-7 and truck-9 are enrolled with ``spanedge site add
--stream`` and ``spanedge agent join``, and run an app with a ``@local`` operator per site and a 5 s
``@global_`` window at the hub, which writes Parquet. A sensor publisher sends each truck's readings
to the broker. Then ``spanedge site add truck-13 --stream`` mid-run: until its agent is heard it is
planned nowhere; ``spanedge agent join`` enrols it and runs its agent, whose first heartbeat re-plans
the app ("site truck-13 joined") with a join switch. From the switch on, every window holds exactly
what truck-13's sensors published (once its agent was subscribed); before it, the hub's query of the
old placement writes the windows, so truck-7's and truck-9's stay exact across the switch.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from hub.api.client import HubClient
from simulate.broker import mosquitto_path
from spanedge.errors import SpanEdgeError
from spanedge.sites import Broker
from tests.conftest import missing_part
from tests.polling import wait_for

from .dataplanekit import read_parquet
from .hubkit import ingested
from .test_broker_acl import Session
from .test_enrolment import ADMIN, Fleet, Gateway, add_site
from .test_hub_one_per_broker import SPARK_START_S, spark_parts

__all__ = ["spark_parts"]  # the fixture
pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("spark_parts"), pytest.mark.timeout(1500)]

APP = "fleet-totals"
SIZE = 5.0  # the hub window's length, seconds
TRUCKS = {"truck-7": "trucks/7/readings", "truck-9": "trucks/9/readings", "truck-13": "trucks/13/readings"}
#: Hub and agents start Spark and Python on a busy machine: the longest any one step may take.
STEP_S = 300

SOURCE = '''
from spanedge import App, agg, local, sinks


@local
def tag(raw: dict) -> dict:
    """A reading as the window reads it."""
    return {"unit": str(raw["unit"]), "ts": float(raw["ts"]), "v": int(raw["v"])}


app = App("fleet-totals")
readings = app.source("readings", time_field="ts").map(tag)
totals = readings.window(
    name="totals", key="unit", size="5s", aggs={"n": agg.count(), "total": agg.sum("v")}, scope="global"
)
totals.sink(sinks.file(OUT), name="fleet_out")
'''


class Sensors:
    """Every active truck's sensor publishes a reading (two units, alternately) every 0.2 s, as the hub would.

    It logs in as the hub site, which may write every topic; what the broker acknowledged is kept per site.
    """

    def __init__(self, broker: Broker) -> None:
        self.session = Session(broker, "sensors")
        self.published: dict[str, list[dict[str, Any]]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._failed: list[BaseException] = []
        self._thread = threading.Thread(target=self._run, name="sensors", daemon=True)
        self._thread.start()

    def add(self, site: str) -> None:
        with self._lock:
            self.published.setdefault(site, [])

    def _run(self) -> None:
        i = 0
        try:
            while not self._stop.wait(0.2):
                with self._lock:
                    sites = list(self.published)
                for site in sites:
                    reading = {"unit": f"{site}-u{i % 2}", "ts": time.time(), "v": i % 97}
                    self.session.publish(TRUCKS[site], orjson.dumps(reading))
                    with self._lock:
                        self.published[site].append(reading)
                i += 1
        except BaseException as exc:  # raised again by stop()
            self._failed.append(exc)

    def stop(self) -> dict[str, list[dict[str, Any]]]:
        self._stop.set()
        self._thread.join(timeout=30)
        self.session.close()
        if self._failed:
            raise self._failed[0]
        return self.published


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    try:
        mosquitto_path()
    except SpanEdgeError as exc:
        missing_part(str(exc))
    # no drift re-plan in the way: only the join re-plans the app
    running = Fleet(tmp_path, spark=True, options=("--min-replan-interval", "3600"))
    running.start(timeout=SPARK_START_S + 60)
    try:
        yield running
    finally:
        running.stop()


def _site(client: HubClient, name: str) -> dict[str, Any]:
    return next(r for r in client.sites() if r["site"] == name)


def _heard(client: HubClient, site: str) -> float | None:
    """When the hub's log first held a record of ``site``'s local operator (None: not yet)."""
    return time.time() if ingested(client.metrics(), APP, site, "tag") > 0 else None


def _complete_from(client: HubClient, site: str) -> float:
    """The first window from which the hub's results hold every record ``site``'s sensor publishes.

    Once the hub's log holds a record of the site, its agent was subscribed: every later reading reached it;
    once its heartbeat lists the app, the hub's windows wait for its records too.
    """
    wait_for(lambda: _heard(client, site), STEP_S, f"{site}'s records at the hub")
    wait_for(lambda: APP in _site(client, site)["apps"], STEP_S, f"{site}'s heartbeat to list the app")
    return _after(time.time())


def _windows(out: Path) -> dict[tuple[str, float], tuple[int, int]]:
    """The hub's window results: per (unit, window start), the count and the total; each written once."""
    rows = [orjson.loads(r["value"]) for r in read_parquet(out)]
    got = {(w["unit"], float(w["window_start"])): (int(w["n"]), int(w["total"])) for w in rows}
    assert len(got) == len(rows), "a window reached the sink twice"
    return got


def _expected(readings: list[dict[str, Any]]) -> dict[tuple[str, float], tuple[int, int]]:
    out: dict[tuple[str, float], tuple[int, int]] = {}
    for r in readings:
        key = (r["unit"], math.floor(r["ts"] / SIZE) * SIZE)
        n, total = out.get(key, (0, 0))
        out[key] = (n + 1, total + r["v"])
    return out


def _after(t: float) -> float:
    """The start of the first window that starts at or after ``t``."""
    return math.ceil(t / SIZE) * SIZE


def test_a_gateway_enrolled_mid_run_counts_in_the_hubs_windows_exactly_from_its_join(
    fleet: Fleet, tmp_path: Path
) -> None:
    client = HubClient(fleet.url, ADMIN, ca_file=fleet.hub_ca)
    out = tmp_path / "fleet-out"
    app_file = tmp_path / "app.py"
    app_file.write_text(SOURCE.replace("OUT", repr(str(out))))
    gateways: list[Gateway] = []
    sensors = Sensors(fleet.hub_login())
    try:
        for site in ("truck-7", "truck-9"):
            token = add_site(fleet, site, "--stream", f"readings={TRUCKS[site]}")
            gateways.append(fleet.gateway(token, tmp_path / site))
        for site in ("truck-7", "truck-9"):
            wait_for(lambda s=site: _site(client, s)["alive"], STEP_S, f"{site}'s first heartbeat")
        # placed by WAN traffic alone: each truck's local operator stays at its truck, whatever the probes measure
        client.post_app(app_file.read_text(), str(app_file), weights={"latency": 0.0})
        complete_from: dict[str, float] = {}
        for site in ("truck-7", "truck-9"):
            sensors.add(site)
            complete_from[site] = _complete_from(client, site)
        # their first checked window out before truck-13 is added: the switch comes after it, on any machine
        first = [(f"{site}-u{u}", start) for site, start in complete_from.items() for u in (0, 1)]
        wait_for(lambda: all(w in _windows(out) for w in first), STEP_S, "truck-7's and truck-9's first windows")

        # added, not joined: planned nowhere, and a sensor already publishes for it
        streams = fleet.run("site", "add", "truck-13", "--stream", f"readings={TRUCKS['truck-13']}")
        assert streams.returncode == 0, streams.stderr
        assert f"it sources readings ({TRUCKS['truck-13']})" in streams.stderr
        assert _site(client, "truck-13")["joining"] is True
        placement = client.placement(APP)
        assert all(r["site"] != "truck-13" and r["group"] != "truck-13" for r in placement["replicas"])
        sensors.add("truck-13")
        gateways.append(fleet.gateway(streams.stdout.strip(), tmp_path / "truck-13"))

        placement = wait_for(
            lambda: (p := client.placement(APP))["joins"] and p, STEP_S, "the re-plan that takes truck-13 in"
        )
        assert placement["history"][-1]["reason"] == "site truck-13 joined"
        assert placement["history"][-1]["moved"] == []  # nothing truck-7 and truck-9 ran moved
        (join,) = placement["joins"]
        switch = join["switch_at"]
        assert join["site"] == "truck-13"
        assert switch % SIZE == 0
        assert _site(client, "truck-13")["joining"] is False
        complete_from["truck-13"] = max(switch, _complete_from(client, "truck-13"))
        last = complete_from["truck-13"] + 3 * SIZE  # the last window checked: three more after truck-13's first
        units = [f"{site}-u{u}" for site in TRUCKS for u in (0, 1)]
        wait_for(
            lambda: all((unit, last) in _windows(out) for unit in units), STEP_S, f"every truck's window at {last}"
        )
    finally:
        published = sensors.stop()
        logs = {f"gateway {i}": g.stop()[-4000:] for i, g in enumerate(gateways)}
    got = _windows(out)
    for site, first in complete_from.items():
        want = {k: v for k, v in _expected(published[site]).items() if first <= k[1] <= last}
        mine = {k: v for k, v in got.items() if k[0].startswith(f"{site}-") and first <= k[1] <= last}
        assert len(want) >= 2 * 4, (site, first, last)  # two units, four windows at least
        assert mine == want, (site, logs)
    # truck-7's and truck-9's windows are exact across the switch, from both of the hub's queries
    assert complete_from["truck-7"] <= switch - SIZE
    # nothing of truck-13's came out for the windows before its switch
    assert not [k for k in got if k[0].startswith("truck-13-") and k[1] < switch]
    output = fleet.stop()
    assert "site truck-13 joined: its agent's first heartbeat" in output
    assert "writes the results of origin [" in output  # the two queries around the switch
