"""MQTT ingest into the durable log with a real Mosquitto (no Spark)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hub import log as ingest_log
from hub.ingest import Ingest
from spanedge import topics
from spanedge.envelope import Record
from tests.integration.hubkit import Collector, Publisher, broker_of, mqtt_client, wait_for


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
