"""A plan carries the entries of the sites whose replicas it runs, for a gateway whose sites.yaml predates them."""

from __future__ import annotations

import pytest

from edge_agent.plans import peer_learner
from hub.control.distribution import PlanDistributor
from hub.control.registry import shared_entry
from spanedge.errors import InvalidPlan
from spanedge.plan_checks import _peers
from spanedge.signing import verify_plan
from spanedge.sites import parse_sites
from spanedge.wire.plan import PlanApp
from tests.keys import KEY, TRUSTED
from tests.unit.hub.control.test_distribution import Publisher

HUB_FLEET = """
sites:
  cloud: {tier: hub, broker: "mqtt://hub.example:1883", username: cloud, password_env: HUB_PASSWORD}
  truck-7: {tier: spoke, broker: "mqtt://hub.example:1883", username: hub-side, password_env: HUB_PASSWORD,
            streams: {readings: {topic: trucks/7/readings, rate: 5}}}
  truck-13: {tier: spoke, broker: "mqtt://hub.example:1883", username: hub-side, password_env: HUB_PASSWORD,
             labels: {fleet: north}, streams: {readings: {topic: trucks/13/readings, rate: 5}}}
"""
#: what truck-7 was given when it enrolled, before truck-13 joined
GATEWAY_FILE = """
sites:
  cloud: {tier: hub, broker: "mqtt://hub.example:1883", username: truck-7, password_env: MY_PASSWORD}
  truck-7: {tier: spoke, broker: "mqtt://hub.example:1883", username: truck-7, password_env: MY_PASSWORD,
            streams: {readings: {topic: trucks/7/readings, rate: 5}}}
"""


def _entry(*assignments: tuple[str, str]) -> PlanApp:
    plan = {"assignments": [{"replica": r, "site": s} for r, s in assignments]}
    return PlanApp(app="fleet", plan=plan, source="", source_sha256="")


def test_a_gateway_learns_a_later_sites_entry_from_the_plan_and_reaches_it_as_itself() -> None:
    fleet = parse_sites(HUB_FLEET)
    distributor = PlanDistributor(Publisher(), KEY)
    distributor.site_entry = lambda name: shared_entry(fleet, name)
    entry = _entry(("tag@truck-13", "truck-7"), ("tag@truck-7", "truck-7"), ("totals", "cloud"))
    payload = verify_plan(distributor._signed("truck-7", [entry], 1, 0.0), TRUSTED).payload
    assert list(payload["peers"]) == ["truck-13"]  # the site whose replica truck-7 runs, not itself or the hub
    assert "username" not in payload["peers"]["truck-13"]  # the hub's credentials stay at the hub
    mine = parse_sites(GATEWAY_FILE)
    learn = peer_learner(mine, "truck-7")
    assert learn(_peers(payload["peers"])) == ["truck-13"]
    learned = mine.site("truck-13")
    assert learned.streams["readings"].topic == "trucks/13/readings"
    assert (learned.username, learned.password_env, learned.labels) == ("truck-7", "MY_PASSWORD", {"fleet": "north"})
    assert learn(_peers(payload["peers"])) == []  # known now; a site of the file itself is never replaced
    assert distributor._peers("truck-7", [_entry(("tag@truck-7", "truck-7"))]) == {}


def test_a_bad_peer_name_refuses_the_plan_and_a_bad_entry_is_left_out(caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(InvalidPlan, match=r"plan peers\['Truck-9'\]"):
        _peers({"Truck-9": {"tier": "spoke", "broker": "mqtt://x:1883"}})
    with pytest.raises(InvalidPlan, match=r"plan peers\['truck-9'\]: a site entry must be a mapping"):
        _peers({"truck-9": ["spoke"]})
    mine = parse_sites(GATEWAY_FILE)
    assert peer_learner(mine, "truck-7")(_peers({"truck-9": {"tier": "spoke"}})) == []
    assert "plan peer site truck-9 is not an entry sites.yaml would accept" in caplog.text
    assert "truck-9" not in mine.sites


def test_a_peer_behind_tls_is_reached_with_the_gateways_own_certificate() -> None:
    hub_side = parse_sites(
        """
sites:
  cloud: {tier: hub, broker: "mqtts://h:8883", tls: {ca_file: /hub/ca.pem}}
  barn: {tier: spoke, broker: "mqtts://h:8883", tls: {ca_file: /hub/ca.pem}}
  field-east: {tier: spoke, broker: "mqtts://h:8883", tls: {ca_file: /hub/ca.pem},
               streams: {probes: {topic: probes/east/+, rate: 5}}}
"""
    )
    mine = parse_sites(
        """
sites:
  cloud: {tier: hub, broker: "mqtts://h:8883", tls: {ca_file: /gw/ca.pem, cert_file: /gw/c.pem, key_file: /gw/k.pem}}
  barn: {tier: spoke, broker: "mqtts://h:8883", tls: {ca_file: /gw/ca.pem, cert_file: /gw/c.pem, key_file: /gw/k.pem}}
"""
    )
    entry = shared_entry(hub_side, "field-east")
    assert entry is not None
    assert "tls" not in entry  # the hub's CA path means nothing at the gateway
    assert peer_learner(mine, "barn")(_peers({"field-east": entry})) == ["field-east"]
    assert mine.site("field-east").tls == mine.site("barn").tls
