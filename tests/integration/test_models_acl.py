"""The brokers' ACL on a real Mosquitto: a spoke reads its own model versions only, and cannot publish one."""

from __future__ import annotations

import pytest

from spanedge.models.envelope import model_filter, model_topic
from tests.polling import wait_for

from .test_broker_acl import Secured, Session, secured  # noqa: F401 - the fixture

pytestmark = pytest.mark.timeout(120)


def test_a_spoke_reads_its_own_model_versions_only_and_cannot_send_one(
    secured: Secured,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hub = Session(secured.login("cloud", monkeypatch), "hub-models")
    truck7 = Session(secured.login("truck-7", monkeypatch), "truck-7-models")
    try:
        hub.publish(model_topic("truck-9", "cold-chain", "wear"), b"version for truck-9", retain=True)
        hub.publish(model_topic("truck-7", "cold-chain", "wear"), b"version for truck-7", retain=True)
        # truck-7 subscribes to truck-9's versions first: were they delivered, they would arrive first
        truck7.client.subscribe([(model_filter("truck-9"), 1), (model_filter("truck-7"), 1)])
        wait_for(lambda: truck7.messages, what="truck-7's own retained version")
        # a spoke cannot send a version, to itself or another site
        for site in ("truck-7", "truck-9"):  # the broker acknowledges them, and drops them
            truck7.client.publish(
                model_topic(site, "cold-chain", "wear"), b"forged", qos=1, retain=True
            ).wait_for_publish(20)
        hub.client.subscribe(model_filter("+"), 1)
        wait_for(lambda: len(hub.messages) == 2, what="both retained versions at the hub")
    finally:
        truck7.close()
        hub.close()
    assert truck7.messages == [(model_topic("truck-7", "cold-chain", "wear"), b"version for truck-7")]
    assert sorted(payload for _, payload in hub.messages) == [b"version for truck-7", b"version for truck-9"]
