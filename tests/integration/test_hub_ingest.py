"""MQTT ingest into the durable log with a real Mosquitto (no Spark)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hub.ingest import log as ingest_log
from hub.ingest.consumer import Ingest
from spanedge import topics
from spanedge.wire.batch import Record
from tests.integration.hubkit import Collector, Publisher, broker_of, mqtt_client
from tests.polling import wait_for


def records(site: str, stream: str, seqs: range) -> list[Record]:
    return [Record(site, stream, s, 1000.0 + s, None, {"i": s}) for s in seqs]


def logged(log_dir: Path) -> list[tuple[str, str, int]]:
    rows = ingest_log.iter_lines(log_dir, ingest_log.head(log_dir), ingest_log.tail(log_dir))
    return [(r["site"], r["stream"], r["seq"]) for r in rows]


def test_ingest_appends_each_record_once_and_survives_a_restart(mosquitto: Any, tmp_path: Path) -> None:
    ingest = Ingest(broker_of(mosquitto.url), tmp_path, client_id="ingest-test-1")
    publisher = Publisher(mosquitto.url, "app1")
    try:
        ingest.start()
        assert ingest.wait_connected()
        publisher.send(records("s1", "x", range(100)), batch=10)
        publisher.send(records("s1", "x", range(50, 120)), batch=7)  # overlapping resend
        publisher.send(records("s2", "x", range(30)), batch=10)
        wait_for(lambda: ingest.stats()["records"] + ingest.stats()["duplicates"] == 200, 60, "every record")
        stats = ingest.stats()
        assert stats["records"] == 150
        assert stats["duplicates"] == 50
        per = stats["apps"]["app1"]["s1"]["x"]
        assert per["last_seq"] == 119
        assert per["duplicates"] == 50
        assert per["last_event_time"] == 1119.0
        ingest.stop()
        publisher.send(records("s1", "x", range(110, 140)), batch=10)  # queued for the persistent session
        again = Ingest(broker_of(mosquitto.url), tmp_path, client_id="ingest-test-1")
        again.start()
        try:
            wait_for(lambda: again.stats()["records"] == 20, 60, "the messages queued while down")
            assert again.stats()["duplicates"] == 10
        finally:
            again.stop()
    finally:
        publisher.close()
    got = logged(tmp_path / "app1")
    assert len(got) == len(set(got)) == 170
    assert [seq for site, _, seq in got if site == "s1"] == list(range(140))


def test_malformed_messages_go_to_the_dead_letter_topic(mosquitto: Any, tmp_path: Path) -> None:
    ingest = Ingest(broker_of(mosquitto.url), tmp_path, client_id="ingest-test-2")
    dlq = Collector(mosquitto.url, topics.dlq("app2", "#").replace("/#", "") + "/#")
    raw = mqtt_client(mosquitto.url)
    publisher = Publisher(mosquitto.url, "app2")
    try:
        ingest.start()
        assert ingest.wait_connected()
        raw.publish(topics.data("app2", "x", "s1"), b"{not json", qos=1).wait_for_publish(10)
        raw.publish(topics.control("s1", "heartbeat"), b"{}", qos=1).wait_for_publish(10)  # not data: ignored
        publisher.send(records("s1", "x", range(5)))
        wait_for(lambda: ingest.stats()["records"] == 5, 60, "the good records")
        wait_for(lambda: bool(dlq.get(topics.dlq("app2", "s1"))), 60, "the dead letter")
        letter = dlq.get(topics.dlq("app2", "s1"))[0]
        assert letter["payload"] == "{not json"
        assert "malformed batch" in letter["reason"]
        assert ingest.stats()["malformed"] == 1
    finally:
        publisher.close()
        dlq.close()
        raw.disconnect()
        ingest.stop()
    assert logged(tmp_path / "app2") == [("s1", "x", i) for i in range(5)]


def test_a_site_cannot_publish_another_sites_records_or_escape_the_log(mosquitto: Any, tmp_path: Path) -> None:
    from spanedge.wire.batch import encode_batch

    ingest = Ingest(broker_of(mosquitto.url), tmp_path / "ingest", client_id="ingest-test-3")
    dlq = Collector(mosquitto.url, "spanedge/v1/app3/dlq/#")
    raw = mqtt_client(mosquitto.url)
    publisher = Publisher(mosquitto.url, "app3")
    try:
        ingest.start()
        assert ingest.wait_connected()
        # s2 publishes records that claim to be s1's, on its own topic: refused, and s1's seqs stay free
        forged = encode_batch("app3", records("s1", "x", range(100, 110)))
        raw.publish(topics.data("app3", "x", "s2"), forged, qos=1).wait_for_publish(10)
        # an app name that would be a path outside the log directory
        escape = encode_batch("..", records("s1", "x", range(3)))
        raw.publish("spanedge/v1/../x/s1", escape, qos=1).wait_for_publish(10)
        publisher.send(records("s1", "x", range(5)))
        wait_for(lambda: ingest.stats()["records"] == 5, 60, "the good records")
        wait_for(lambda: bool(dlq.get(topics.dlq("app3", "s2"))), 60, "the dead letter")
        letter = dlq.get(topics.dlq("app3", "s2"))[0]
        assert "carries records of site 's1'" in letter["reason"]
        assert letter["size"] == len(forged)
        wait_for(lambda: ingest.stats()["malformed"] == 2, 30, "both refusals counted")
        assert ingest.stats()["site_mismatch"] == 1
    finally:
        publisher.close()
        dlq.close()
        raw.disconnect()
        ingest.stop()
    assert logged(tmp_path / "ingest" / "app3") == [("s1", "x", i) for i in range(5)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ingest"]


def test_a_moved_stream_keeps_a_sequence_the_hub_accepts(mosquitto: Any, tmp_path: Path) -> None:
    """Tiny's window replica moves from big1 (epoch 0) to big2 (epoch 4): both outboxes number 'avg' from 1."""
    import orjson

    from edge_agent.outbox import Outbox
    from spanedge.runtime import HubRecord

    def hub_record(i: int, epoch: int) -> HubRecord:
        value = {"window_start": float(i), "n": i}
        return HubRecord("avg", "tiny", float(i), "tiny", value, orjson.dumps(value), epoch)

    old_owner = Outbox(tmp_path / "big1" / "agent.db")
    new_owner = Outbox(tmp_path / "big2" / "agent.db")
    old_owner.commit({"farm": [hub_record(i, 0) for i in range(40)]})
    new_owner.commit({"farm": [hub_record(i, 4) for i in range(45, 55)]})
    old_owner.commit({"farm": [hub_record(i, 0) for i in range(40, 45)]})  # windows open before the switch
    new_owner.commit({"farm": [hub_record(i, 4) for i in range(55, 65)]})
    raw = mqtt_client(mosquitto.url)
    ingest = Ingest(broker_of(mosquitto.url), tmp_path / "log", client_id="ingest-test-epochs")

    def publish(outbox: Outbox) -> None:
        for batch in outbox.batches(0, 1000, batch_size=10):
            info = raw.publish(topics.data("farm", batch.stream, batch.site), batch.payload, qos=1)
            info.wait_for_publish(timeout=60)

    try:
        ingest.start()
        assert ingest.wait_connected()
        publish(new_owner)
        publish(old_owner)
        wait_for(lambda: ingest.stats()["records"] == 65, 60, "both owners' records")
        publish(old_owner)  # redelivered after a lost acknowledgement
        publish(new_owner)
        wait_for(lambda: ingest.stats()["duplicates"] == 65, 60, "the redeliveries")
        ingest.stop()
        publish(new_owner)  # the hub restarts: its marks per epoch were persisted
        again = Ingest(broker_of(mosquitto.url), tmp_path / "log", client_id="ingest-test-epochs")
        again.start()
        try:
            # at least the 20 sent while it was down (and any whose acknowledgement the stop cut off)
            wait_for(lambda: again.stats()["duplicates"] >= 20, 60, "the redelivery after the restart")
            assert again.stats()["records"] == 0
        finally:
            again.stop()
    finally:
        raw.disconnect()
        old_owner.close()
        new_owner.close()
    rows = list(ingest_log.iter_lines(tmp_path / "log" / "farm", 0, ingest_log.tail(tmp_path / "log" / "farm")))
    assert sorted(orjson.loads(r["value"])["n"] for r in rows) == list(range(65))
    assert sorted((r.get("epoch", 0), r["seq"]) for r in rows) == [(0, s) for s in range(1, 46)] + [
        (4, s) for s in range(1, 21)
    ]


def test_a_record_that_can_close_a_hub_window_is_readable_at_once(mosquitto: Any, tmp_path: Path) -> None:
    from hub.ingest.seal_points import Closings

    ingest = Ingest(broker_of(mosquitto.url), tmp_path, client_id="ingest-test-closing", seal_interval=3600)
    ingest.close_at("app1", Closings(((10_000, 0),)))  # 10 s windows at the hub
    publisher = Publisher(mosquitto.url, "app1")
    log_dir = tmp_path / "app1"

    def times(seqs: range, t0: float) -> list[Record]:
        return [Record("s1", "x", s, t0 + (s - seqs.start) * 0.5, None, {"i": s}) for s in seqs]

    try:
        ingest.start()
        assert ingest.wait_connected()
        publisher.send(times(range(0, 4), 1001.0), batch=4)  # 1001-1002.5: within the hour's first interval
        wait_for(lambda: ingest.stats()["records"] == 4, 60, "the first records")
        publisher.send(times(range(4, 8), 1003.0), batch=4)  # 1003-1004.5: inside the window
        wait_for(lambda: ingest.stats()["records"] == 8, 60, "records inside the window")
        assert ingest_log.sealed_tail(log_dir) < ingest_log.tail(log_dir)  # waiting for the hour's seal
        publisher.send(times(range(8, 10), 1009.5), batch=2)  # 1010.0 ends the window
        wait_for(lambda: ingest_log.sealed_tail(log_dir) == ingest_log.tail(log_dir), 60, "the window's end sealed")
        assert [seq for _, _, seq in logged(log_dir)] == list(range(10))
    finally:
        publisher.close()
        ingest.stop()
