"""Edge dead letters carry a bounded excerpt of a large payload, with its size and SHA-256."""

from __future__ import annotations

import hashlib

import orjson

from spanedge import App, sinks
from spanedge.runtime import Pipeline, edge_part
from spanedge.runtime.outputs import EXCERPT_BYTES, DeadLetter


def _pipeline_and_source() -> tuple[Pipeline, str]:
    app = App("dead")
    app.source("readings", time_field="ts").sink(sinks.memory("kept"), name="kept_out")
    pipeline = edge_part(app, "truck-7", clock=lambda: 2000.0)
    return pipeline, next(iter(pipeline.sources))


def test_a_2_mb_input_that_is_not_json_gives_a_bounded_dead_letter() -> None:
    pipeline, source = _pipeline_and_source()
    huge = b"{" + b"x" * (2 * 1024 * 1024)
    pipeline.process(source, huge)
    (dead,) = pipeline.take().dlq
    assert dead.reason.startswith("not valid JSON")
    assert len(dead.payload.encode()) <= EXCERPT_BYTES
    assert dead.payload == huge[:EXCERPT_BYTES].decode()
    assert dead.size == len(huge)
    assert dead.sha256 == hashlib.sha256(huge).hexdigest()
    assert dead.truncated
    body = orjson.loads(dead.to_json())
    assert len(dead.to_json()) < 2 * EXCERPT_BYTES
    assert body["size"] == len(huge)
    assert body["sha256"] == dead.sha256
    assert body["truncated"] is True
    assert body["site"] == "truck-7"


def test_a_2_mb_json_object_without_its_time_field_gives_a_bounded_dead_letter() -> None:
    pipeline, source = _pipeline_and_source()
    huge = orjson.dumps({"unit": "u1", "blob": "é" * (1024 * 1024)})  # 2-byte characters: the cut is on a boundary
    pipeline.process(source, huge)
    (dead,) = pipeline.take().dlq
    assert "event-time field 'ts'" in dead.reason
    assert len(dead.payload.encode()) <= EXCERPT_BYTES
    assert huge.decode().startswith(dead.payload)
    assert (dead.size, dead.sha256, dead.truncated) == (len(huge), hashlib.sha256(huge).hexdigest(), True)


def test_a_small_bad_input_is_repeated_whole() -> None:
    pipeline, source = _pipeline_and_source()
    pipeline.process(source, b"not json")
    (dead,) = pipeline.take().dlq
    assert dead.payload == "not json"
    assert (dead.size, dead.truncated) == (8, False)
    assert dead.sha256 == hashlib.sha256(b"not json").hexdigest()


def test_dead_letter_of_bounds_text_and_bytes_alike() -> None:
    text = DeadLetter.of("r", "op", "a" * 5000, "s", 1.0, limit=10)
    raw = DeadLetter.of("r", "op", b"a" * 5000, "s", 1.0, limit=10)
    assert text == raw
    assert (text.payload, text.size, text.truncated) == ("a" * 10, 5000, True)


def test_only_a_user_function_that_raised_marks_its_dead_letter_an_error() -> None:
    app = App("dead")

    def strict(r: dict) -> dict:
        return {**r, "temp_c": (float(r["temp_f"]) - 32) / 1.8}

    app.source("readings", time_field="ts").map(strict, name="strict").sink(sinks.memory("kept"), name="kept_out")
    pipeline = edge_part(app, "truck-7", clock=lambda: 2000.0)
    source = next(iter(pipeline.sources))
    pipeline.process(source, b"not json")
    pipeline.process(source, orjson.dumps({"ts": 1999.0, "temp_f": "hot"}))
    pipeline.process(source, orjson.dumps({"ts": 1999.0, "temp_f": 50}))
    bad_json, raised = pipeline.take().dlq
    assert (bad_json.error, raised.error) == (False, True)
    assert raised.reason.startswith("strict (")
    assert "raised ValueError" in raised.reason
    assert "error" not in orjson.loads(raised.to_json())  # the DLQ message stays as it was
