"""A hub sink's MQTT client id: the same for the same query at every hub of a state directory, else another."""

from __future__ import annotations

from pathlib import Path

from hub.engine.sinks import sink_client_id


def test_the_same_checkpoint_gives_the_same_id_and_another_checkpoint_another(tmp_path: Path) -> None:
    query = tmp_path / "state" / "checkpoints" / "cold-chain" / "fleet_alerts@cloud-1a2b"
    same = tmp_path / "state" / "checkpoints" / ".." / "checkpoints" / "cold-chain" / "fleet_alerts@cloud-1a2b"
    assert sink_client_id(query, "fleet_alerts") == sink_client_id(same, "fleet_alerts")  # the takeover's fence
    assert sink_client_id(query, "fleet_alerts") != sink_client_id(query.with_name("fleet_alerts@cloud-9f9f"), "x")
    elsewhere = tmp_path / "other" / "checkpoints" / "cold-chain" / "fleet_alerts@cloud-1a2b"
    assert sink_client_id(query, "fleet_alerts") != sink_client_id(elsewhere, "fleet_alerts")
    assert len(sink_client_id(query, "s" * 200)) == 64
    assert sink_client_id(query, "fleet_alerts").startswith("spanedge-sink-")
