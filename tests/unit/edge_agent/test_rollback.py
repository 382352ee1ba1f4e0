"""Rollbacks at the agent: the previous version's window state kept, the spool bounded, the windows resumed once."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

import orjson
import pytest

from edge_agent.apps import Apps
from edge_agent.config import AgentConfig
from edge_agent.intake import Intake
from edge_agent.mqtt.transport import Inbox, Message
from edge_agent.outbox import Outbox
from edge_agent.processing import Processor
from edge_agent.rollback import Kept, chunk_key, head_key
from edge_agent.sinks import LocalSinks
from spanedge.loader import load_app_source
from spanedge.plan import Plan
from spanedge.sites import parse_sites
from spanedge.testing import local_plan
from tests.unit.edge_agent.test_agent import APP_FILE, SITES
from tests.unit.fakes import FakeTransport

V1 = APP_FILE.read_text()
WITH_MIN = '"max_c": agg.max("temp_c"), "min_c": agg.min("temp_c")}'
V2 = V1.replace('"max_c": agg.max("temp_c")}', WITH_MIN).replace(
    '    """Parse a raw reading and convert Fahrenheit to Celsius."""\n',
    '    """Parse a raw reading and convert Fahrenheit to Celsius."""\n    raise ValueError("v2 cannot read it")\n',
)
V3 = V1.replace('size="10s"', 'size="20s"')
WINDOW = "unit_stats@truck-7"
T0 = 1_700_000_000.0


def plan_of(source: str, version: int, trial: bool = False) -> Plan:
    app = load_app_source(source, "app.py")
    plan = local_plan(app, parse_sites(SITES))
    return dataclasses.replace(plan, version=version, app_source=source, trial=trial)


@dataclasses.dataclass
class Site:
    apps: Apps
    processor: Processor
    broker: FakeTransport
    outbox: Outbox
    mid: int = 0

    def apply(self, source: str, version: int, trial: bool = False) -> None:
        """What the agent does with a plan: commit, rebuild, then step (which commits what a rollback resumed)."""
        self.processor.flush()
        self.apps.apply([plan_of(source, version, trial)])
        self.processor.intake.rewire(self.apps.pipelines)
        self.processor.step()

    def send(self, seconds: range, units: tuple[str, ...] = ("u1", "u2")) -> None:
        """One reading per unit at each of ``seconds`` past T0 (two per second), committed."""
        for i in seconds:
            for unit in units:
                self.mid += 1
                body = orjson.dumps({"unit": unit, "ts": T0 + i / 2, "temp_f": 35.0 + i % 7})
                self.processor.handle([Message(f"trucks/7/{unit}/temp", body, 1, self.mid, self.broker, 0.0)])
            self.processor.flush()

    def results(self) -> list[dict[str, Any]]:
        """The window results the site's local sink published."""
        return [orjson.loads(p) for t, p in self.broker.published if t == "cold-chain/unit-stats"]


def make_site(state: Path, limit: int = 2**20, source: str = V1, version: int = 1, trial: bool = False) -> Site:
    sites = parse_sites(SITES)
    outbox = Outbox(state / "agent.db")
    apps = Apps(AgentConfig("truck-7", sites, state, out_of_orderness=0.0, rollback_spool_bytes=limit), outbox)
    apps.apply([plan_of(source, version, trial)])
    intake = Intake("truck-7", sites, Inbox(), FakeTransport)
    intake.rewire(apps.pipelines)
    broker = intake.transports["truck-7"]
    sinks = LocalSinks("truck-7", state, 2**20, FakeTransport(None, "hub", "hub"), lambda: broker)  # type: ignore[arg-type]
    processor = Processor(apps.pipelines, outbox, intake, sinks, rollbacks=apps.rollbacks)
    return Site(apps, processor, broker, outbox)  # type: ignore[arg-type]


def by_window(results: list[dict[str, Any]]) -> dict[tuple[str, float], dict[str, Any]]:
    out: dict[tuple[str, float], dict[str, Any]] = {}
    for r in results:
        ident = (r["unit"], r["window_start"])
        assert ident not in out, f"window {ident} emitted twice"
        out[ident] = r
    return out


def reference(tmp_path: Path, seconds: range) -> dict[tuple[str, float], dict[str, Any]]:
    """What v1 alone emits for the readings at ``seconds``."""
    site = make_site(tmp_path / "reference")
    site.send(seconds)
    site.outbox.close()
    return by_window(site.results())


def kept(site: Site) -> Kept | None:
    blob = site.outbox.load_state(head_key("cold-chain"))
    return None if blob is None else Kept.from_blob("cold-chain", blob)


def test_an_upgrade_keeps_the_changed_windows_state_with_the_checkpoint(tmp_path: Path) -> None:
    site = make_site(tmp_path)
    site.send(range(0, 15))
    before = site.apps.pipelines["cold-chain"].snapshot_operator(WINDOW).to_data()
    site.apply(V2, 2, trial=True)
    head = kept(site)
    assert head is not None
    assert (head.windows, head.sources, head.target_plan) == ({WINDOW: before}, ["readings@truck-7"], 2)
    assert head.progress == {"readings@truck-7": T0 + 7.0}
    assert site.apps.rollbacks.spooling == {"cold-chain": frozenset({"readings@truck-7"})}
    site.send(range(15, 18))
    chunk = orjson.loads(site.outbox.load_state(chunk_key("cold-chain", 1)) or b"")
    assert [r[0] for r in chunk["r"]] == ["readings@truck-7"] * 2  # the two readings of the first commit
    assert site.outbox.load_state(chunk_key("cold-chain", 3)) is not None
    site.outbox.close()


def test_a_rollback_resumes_the_windows_and_every_window_comes_out_once(tmp_path: Path) -> None:
    site = make_site(tmp_path / "site")
    site.send(range(0, 15))  # the upgrade at 7.5 s, mid-window
    site.apply(V2, 2, trial=True)
    site.send(range(15, 45))  # v2 dead-letters every reading; its windows emit nothing
    site.apply(V1, 1)  # the rollback at 22.5 s
    assert kept(site) is None
    assert site.outbox.load_state(chunk_key("cold-chain", 1)) is None
    site.send(range(45, 70))
    got = by_window(site.results())
    assert got == reference(tmp_path, range(0, 70))
    assert {start for _, start in got} == {T0, T0 + 10, T0 + 20}  # [30, 40) is still open
    site.outbox.close()


def test_a_rollback_after_a_restart_resumes_from_the_outbox(tmp_path: Path) -> None:
    site = make_site(tmp_path / "site")
    site.send(range(0, 15))
    site.apply(V2, 2, trial=True)
    site.send(range(15, 45))
    first = site.results()
    site.outbox.close()
    # restarted on the saved v2 plan: it goes on keeping
    again = make_site(tmp_path / "site", source=V2, version=2, trial=True)
    assert kept(again) is not None
    assert again.apps.rollbacks.spooling == {"cold-chain": frozenset({"readings@truck-7"})}
    again.send(range(45, 50))
    again.apply(V1, 1)
    again.send(range(50, 70))
    assert by_window(first + again.results()) == reference(tmp_path, range(0, 70))
    again.outbox.close()


def test_the_results_v2_emitted_are_not_emitted_again(tmp_path: Path) -> None:
    healthy = V1.replace('"max_c": agg.max("temp_c")}', WITH_MIN)  # a changed window that runs
    site = make_site(tmp_path / "site")
    site.send(range(0, 15))
    site.apply(healthy, 2, trial=True)
    site.send(range(15, 45))  # v2 emits [0, 10) (from the upgrade on only) and [10, 20), with its min_c
    v2_windows = {(r["unit"], r["window_start"]) for r in site.results() if "min_c" in r}
    assert v2_windows == {(u, T0 + s) for u in ("u1", "u2") for s in (0, 10)}
    site.apply(V1, 1)
    site.send(range(45, 70))
    v1_windows = [(r["unit"], r["window_start"]) for r in site.results() if "min_c" not in r]
    assert sorted(v1_windows) == sorted(k for k in reference(tmp_path, range(0, 70)) if k not in v2_windows)
    site.outbox.close()


def test_a_spool_over_its_limit_is_dropped_and_the_rollback_says_its_windows_start_empty(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    site = make_site(tmp_path, limit=2000)
    site.send(range(0, 15))
    site.apply(V2, 2, trial=True)
    with caplog.at_level(logging.WARNING, "edge_agent.rollback"):
        site.send(range(15, 45))
    assert "pass the rollback spool's limit (--rollback-spool-bytes 2000)" in caplog.text
    head = kept(site)
    assert head is not None
    assert head.overflow
    assert head.windows == {WINDOW: None}  # the names only, for the rollback's log line
    assert site.outbox.load_state(chunk_key("cold-chain", 1)) is None
    assert site.apps.rollbacks.spooling == {}
    caplog.clear()
    with caplog.at_level(logging.WARNING, "edge_agent.rollback"):
        site.apply(V1, 1)
    assert "outgrew the rollback spool (--rollback-spool-bytes 2000): windows unit_stats@truck-7 start empty" in (
        caplog.text
    )
    assert kept(site) is None
    site.outbox.close()


def test_a_later_plan_of_the_new_version_or_another_version_drops_the_kept_state(tmp_path: Path) -> None:
    site = make_site(tmp_path)
    site.send(range(0, 15))
    site.apply(V2, 2, trial=True)
    site.send(range(15, 20))
    site.apply(V2, 2, trial=True)  # the same plan again (a hub restart): it goes on keeping
    assert kept(site) is not None
    assert site.apps.rollbacks.spooling
    site.apply(V2, 2)  # the same plan, no longer on trial: the rollout passed
    assert kept(site) is None
    assert site.apps.rollbacks.spooling == {}
    assert site.outbox.load_state(chunk_key("cold-chain", 1)) is None
    site.apply(V3, 4, trial=True)  # another version on trial: v2's state is kept for a return to it
    head = kept(site)
    assert head is not None
    assert head.target_plan == 4
    site.apply(V3, 5, trial=True)  # a later plan of it (a re-plan): it stays
    assert kept(site) is None
    site.outbox.close()


def test_a_deploy_not_on_trial_keeps_nothing(tmp_path: Path) -> None:
    site = make_site(tmp_path)
    site.send(range(0, 15))
    site.apply(V2, 2)  # deployed to every site at once: there is no rollout to go back from
    assert kept(site) is None
    assert site.apps.rollbacks.spooling == {}
    site.outbox.close()


def test_an_unaffected_change_keeps_nothing(tmp_path: Path) -> None:
    site = make_site(tmp_path)
    site.apply(V1.replace("cold-chain/alerts", "cold-chain/alarms"), 2, trial=True)  # a sink after the window
    assert kept(site) is None
    assert site.apps.rollbacks.spooling == {}
    site.outbox.close()
