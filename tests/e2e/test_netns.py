"""The smart farm with every site in its own network namespace: a link down, an agent killed, a site revoked, one joined.

One run (``--hosts netns``) shares its outcome with every test here: field-west's
WAN link is taken down from 4 s to 15 s, the barn's agent is SIGKILLed in its
namespace at 12 s and started there again, and at 25 s the barn, which runs
field-east's windows, is revoked at the hub (``spanedge site revoke``): its
agent and sensors run on, every broker refuses it, and its windows move to
the shed, field-east recomputing what the barn held. A third field station,
field-north, is in the topology but not in the hub's sites: at 22 s it is added
at the hub (``spanedge site add``) and enrolls with its one-time token
(``spanedge agent join``, in its namespace, over its WAN link); every broker
takes the client certificate the hub issues it, and from the switch of its
join its probes count in the valves and the farm-wide windows. Mosquitto,
the agents, the hub and its Spark run inside the namespaces; the simulator
reaches them over each site's lab link.
"""

from __future__ import annotations

import json
import re
import subprocess
from typing import Any

import pytest

from simulate.report import epoch
from tests.conftest import missing_part
from tests.e2e.conftest import CUT_WEST, CUT_WEST_HEALS, _require_parts, short_farm_window, simulate_smart_farm
from tests.e2e.test_cold_chain import _assert_exact

#: The valve coils' Modbus device is simulated on this machine's loopback, which the namespaces do not reach.
NO_DEVICE = frozenset({"valve_coils"})

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

KILL_BARN = "kill-agent:barn@12s"
REVOKE_BARN = "revoke:barn@25s"
JOIN_NORTH = "join:field-north@22s"
#: The station that joins: room for its own windows, half field-east's probes, drier soil (more dry spots).
FIELD_NORTH = {
    "tier": "spoke",
    "broker": "mqtt://localhost:1883",
    "cpu": 0.5,
    "labels": {"zone": "north", "kind": "field"},
    "streams": {"probes": {"topic": "probes/north/+", "rate": 40, "record_bytes": 120}},
    "sensors": {
        "probes": {
            "count": 20,
            "rate": [1, 3],
            "keys": 20,
            "key": "n{i:02d}",
            "value": {
                "probe": {"format": "north/{key}"},
                "zone": {"const": "north"},
                "ts": "$event_time",
                "moisture": {"normal": [22, 8], "round": 1},
                "temp_c": {"normal": [13, 3], "round": 1},
            },
            "disorder": "200ms",
            "qos": 1,
        }
    },
}
DURATION = 90
SETTLE = 15


@pytest.fixture(scope="module")
def netns_run(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """90 s of probe data on namespaces, with the four faults above."""
    from simulate.netns.host import unavailable

    reason = unavailable()
    if reason is not None:
        missing_part(reason)
    _require_parts()
    directory = tmp_path_factory.mktemp("netns")
    return simulate_smart_farm(
        directory,
        duration=DURATION,
        faults=[CUT_WEST, KILL_BARN, REVOKE_BARN, JOIN_NORTH],
        tweak={"settle": f"{SETTLE}s"},
        app=short_farm_window(directory),
        hosts="netns",
        spokes={"field-north": FIELD_NORTH},
    )


def _record(run: Any) -> dict[str, Any]:
    record: dict[str, Any] = json.loads((run.run_dir / "netns.json").read_text())
    return record


def reasons(entry: dict[str, Any]) -> list[str]:
    """The reasons of a placement history entry: changes planned together are joined by ``"; "``."""
    return str(entry.get("reason", "")).split("; ")


def test_each_site_runs_in_its_own_namespace_and_all_are_removed(netns_run: Any) -> None:
    record = _record(netns_run)
    assert netns_run.report.hosts == "netns"
    assert netns_run.report.shaping == record["shaping"]
    assert any(line.startswith("partitions: the site's WAN link taken down") for line in record["shaping"])
    shaper = "netem" if record["netem"] else "the relays in the router namespace"
    assert any(line.startswith("delay and jitter: ") and shaper in line for line in record["shaping"])
    # htb shaped what each spoke sent the hub, on the router's end of the hub's link
    for spoke in ("barn", "field-east", "field-west", "field-north"):
        assert record["htb_bytes"][f"{spoke}>cloud"] > 0, record["htb_bytes"]
    logs = netns_run.run_dir / "logs"
    for name in ("hub", "agent-barn", "agent-field-east", "agent-field-west", "agent-shed", "agent-field-north"):
        assert f"ip netns exec {record['run']}-s" in (logs / f"{name}.log").read_text(), name
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert record["run"] not in left
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True).stdout
    assert f"se{record['run'].rsplit('-', 1)[1]}m" not in links


def test_a_link_taken_down_holds_the_hub_windows_back_and_loses_nothing(netns_run: Any) -> None:
    assert any(f"fault {CUT_WEST}" in e for e in netns_run.events)
    assert any("healed field-west" in e for e in netns_run.events)
    _assert_exact(netns_run, NO_DEVICE)
    healed = netns_run.started_at + CUT_WEST_HEALS
    cut = [
        r
        for r in netns_run.collector.results
        if r.sink == "farm_dashboard" and netns_run.started_at + 4 < (epoch(r.value["window_end"]) or 0) < healed
    ]
    assert cut, "no farm-wide window ended within field-west's cut"
    assert all(r.received_at > healed for r in cut), [(r.value, r.received_at - healed) for r in cut]


def test_an_agent_killed_in_its_namespace_restarts_there_and_loses_nothing(netns_run: Any) -> None:
    assert any("killed agent barn" in e for e in netns_run.events)
    assert any("restarted agent barn" in e for e in netns_run.events)
    record = _record(netns_run)
    barn_log = (netns_run.run_dir / "logs" / "agent-barn.log").read_text()
    starts = [line for line in barn_log.splitlines() if line.startswith("=== start ")]
    assert len(starts) == 2, starts
    assert all(f"ip netns exec {record['run']}-s" in line for line in starts), starts
    _assert_exact(netns_run, NO_DEVICE)


def test_a_site_revoked_mid_run_is_refused_by_every_broker_and_its_windows_move_on(netns_run: Any) -> None:
    assert any("revoked site barn; its agent and sensors keep running" in e for e in netns_run.events)
    answer = json.loads((netns_run.run_dir / "revocations" / "barn.json").read_text())
    assert answer["replanned"] == ["smart-farm"], answer
    assert len(answer["brokers_reloaded"]) == 6, answer  # one Mosquitto per site, each in its namespace
    assert all(line.endswith("reloaded (SIGHUP)") for line in answer["brokers_reloaded"]), answer
    acls = sorted((netns_run.run_dir / "brokers" / "acl").rglob("acl"))
    assert len(acls) == 6
    assert all("user barn\n" not in path.read_text() for path in acls)
    # its certificates are on the revocation list every broker checks
    assert answer["serials"], answer
    # its windows moved to the shed, where field-east recomputed what the barn held, and nothing was lost or wrong
    placement = json.loads((netns_run.run_dir / "placement.json").read_text())
    # a revocation and a join that arrive together are planned in one re-plan, their reasons joined by "; "
    changed = sorted(part for h in placement["history"][1:] if h.get("changed") for part in reasons(h))
    assert changed == ["site barn revoked: re-planned without it", "site field-north joined"], changed
    (entry,) = [h for h in placement["history"] if "site barn revoked: re-planned without it" in reasons(h)]
    (move,) = [m for m in entry["moved"] if m["replica"] == "probe_means@field-east"]
    assert (move["from"], move["to"], move.get("recovered_by")) == ("barn", "shed", "field-east"), move
    switch = next(h["switch_at"] for h in placement["handovers"] if h["replica"] == "probe_means@field-east")
    after = [r for r in netns_run.collector.results if r.sink == "valve_bus" and r.value["at"] > switch]
    assert after, "no valve command of a window after the switch"
    assert netns_run.report.destroyed == 0, netns_run.report.sinks
    _assert_exact(netns_run, NO_DEVICE)
    # its agent ran to the end, but the brokers refused its heartbeats from their reload on: the hub,
    # which ignores a revoked site's heartbeats, saw at most one sent before the reload
    hub_log = (netns_run.run_dir / "logs" / "hub.log").read_text()
    assert "site barn revoked:" in hub_log
    assert hub_log.count("ignoring a heartbeat of revoked site 'barn'") <= 1


def test_a_gateway_enrolled_mid_run_in_its_namespace_counts_exactly_from_its_join(netns_run: Any) -> None:
    record = _record(netns_run)
    assert JOIN_NORTH in netns_run.report.faults
    assert any("site field-north added at the hub and joined with its one-time token" in e for e in netns_run.events)
    # added with its streams and labels, then enrolled in its namespace, over its WAN link
    added = json.loads((netns_run.run_dir / "joins" / "field-north.json").read_text())
    assert added["labels"] == FIELD_NORTH["labels"], added
    assert added["streams"]["probes"]["topic"] == "probes/north/+", added
    log = (netns_run.run_dir / "logs" / "agent-field-north.log").read_text()
    starts = [line for line in log.splitlines() if line.startswith("=== start ")]
    assert len(starts) == 2, starts  # the join, then the agent
    assert all(f"ip netns exec {record['run']}-s" in line for line in starts), starts
    assert " agent join https://10.77." in starts[0], starts[0]
    assert "site field-north enrolled" in log
    state = netns_run.run_dir / "agents" / "field-north"
    assert oct((state / "identity" / "key.pem").stat().st_mode & 0o777) == "0o600"
    # the hub planned it in at its first heartbeat, with a join switch; nothing it ran before moved
    hub_log = (netns_run.run_dir / "logs" / "hub.log").read_text()
    assert "site field-north joined: its agent's first heartbeat" in hub_log
    placement = json.loads((netns_run.run_dir / "placement.json").read_text())
    (join,) = [j for j in placement["joins"] if j["site"] == "field-north"]
    switch = join["switch_at"]
    (entry,) = [h for h in placement["history"] if "site field-north joined" in reasons(h)]
    # nothing moved for the join (planned with barn's revocation, only barn's replicas move)
    assert [m for m in entry["moved"] if m["from"] != "barn"] == [], entry
    # its windows came out from the switch on, none before it, and were checked: exact like every other
    north = [r for r in netns_run.collector.results if r.value.get("zone") == "north"]
    valves = [r for r in north if r.sink == "valve_bus"]
    dry = [r for r in north if r.sink == "farm_dashboard"]
    assert valves, "no valve command of field-north's probes"
    assert dry, "no farm-wide window of field-north's zone"
    assert all((epoch(r.value["at"]) or 0) > switch for r in valves), [r.value for r in valves[:3]]
    assert all((epoch(r.value["window_start"]) or 0) >= switch for r in dry), [r.value for r in dry[:3]]
    checked_until = netns_run.started_at + DURATION - SETTLE - 1
    assert any((epoch(r.value["window_end"]) or 0) <= checked_until for r in dry), [r.value for r in dry]
    assert sum((epoch(r.value["at"]) or 0) <= checked_until for r in valves) >= 20, len(valves)
    sent = [s.message for s in netns_run.sent if s.message.site == "field-north"]
    assert sent, "field-north's sensors sent nothing"
    assert all(m.event_time is None or m.event_time >= switch for m in sent)  # they start at the switch
    assert any("client certificates of the hub's CA" in e for e in netns_run.events)
    _assert_exact(netns_run, NO_DEVICE)


#: What Spark logs when a query is stopped during a micro-batch: the hub stops the query that wrote the windows
#: before a join's switch once it wrote them, whether or not a batch is running.
STOPPED_MID_BATCH = re.compile(
    r" ERROR (TorrentBroadcast: Store broadcast broadcast_\d+ fail, remove all pieces of the broadcast"
    r"|ShuffleBlockFetcherIterator: Error occurred while fetching local blocks, null)$"
)
SHARE_WRITTEN = "(before handover) wrote its share of the handover"


def test_the_hub_stops_without_a_traceback(netns_run: Any) -> None:
    """SIGTERM reaches the hub, not its Spark JVM: the hub stops its queries, then Spark, and logs no error.

    The one error line allowed is Spark's for the pre-join query the hub stops mid-run, right before it says so.
    """
    lines = (netns_run.run_dir / "logs" / "hub.log").read_text().splitlines()
    assert "hub stopping" in "\n".join(lines)
    bad = [
        line
        for i, line in enumerate(lines)
        if (line.startswith(("Traceback", "Exception in thread")) or " ERROR " in line)
        and not (STOPPED_MID_BATCH.search(line) and any(SHARE_WRITTEN in later for later in lines[i + 1 : i + 3]))
    ]
    assert not bad, bad[:5]
