"""What the ingest logs of a message it refuses: the topic and the reason, escaped."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from hub.ingest.consumer import Ingest
from spanedge.sites import Broker
from tests.logtext import raw_controls
from tests.unit.fakes import FakeIngestClient, message


def test_the_topics_and_reasons_of_refused_messages_are_escaped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="hub")
    ingest = Ingest(Broker(scheme="mqtt", host="127.0.0.1", port=9), tmp_path, revoked={"gone"}.__contains__)
    ingest._client = FakeIngestClient()  # type: ignore[assignment]
    ingest._write_group(
        [
            message(1, "spanedge/v1/farm\u202e/probes/barn", b"{}"),
            message(2, "spanedge/v1/farm/probes/gone", b"{}"),
            message(3, "spanedge/v1/farm/probes/barn", b"\x1b[2J not a batch"),
        ]
    )
    ingest.stop()
    logged = [r.getMessage() for r in caplog.records]
    assert any(
        line.startswith("ingest: dropping a message on spanedge/v1/farm\\u202e/probes/barn: ") for line in logged
    )
    assert [line for line in logged if raw_controls(line)] == []
    assert ingest.stats()["malformed"] == 2
