"""Arbitrary input never crashes a parser: it is refused with a reason, and the good records around it flow on."""

from __future__ import annotations

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spanedge import App, agg, sinks
from spanedge.errors import InvalidSites
from spanedge.runtime import edge_part
from spanedge.sites import parse_sites
from spanedge.wire.batch import Record, decode_batch, encode_batch

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


def _app() -> App:
    app = App("fuzz")
    readings = app.source("readings", time_field="ts")
    kept = readings.filter(lambda r: r["temp"] < 100, name="sane")
    windows = kept.window(key="unit", size="10s", aggs={"n": agg.count(), "mean": agg.mean("temp")}, name="w")
    windows.sink(sinks.memory("windows"), name="windows_out")
    kept.sink(sinks.memory("kept"), name="kept_out")
    return app


GOOD = [{"unit": "u1", "ts": 1000.0 + i, "temp": 20.0 + i} for i in range(5)]


@FUZZ
@given(junk=st.lists(st.binary(max_size=200) | json_values.map(orjson.dumps), min_size=1, max_size=6))
def test_the_edge_runtime_dead_letters_junk_and_keeps_every_good_record(junk: list[bytes]) -> None:
    app = _app()
    pipeline = edge_part(app, "s1", out_of_orderness=0.0, max_future_skew=float("inf"), clock=lambda: 2000.0)
    source = next(iter(pipeline.sources))
    messages = [orjson.dumps(GOOD[0]), *junk, *(orjson.dumps(g) for g in GOOD[1:])]
    for m in messages:
        pipeline.process(source, m)  # never raises
    pipeline.flush()
    out = pipeline.take()
    kept = [item.value for item in out.sinks if item.operator == "kept_out"]
    good_seen = [v for v in kept if v in GOOD]
    assert good_seen == GOOD  # every good record, once, in order
    assert all(isinstance(d.reason, str) and d.reason for d in out.dlq)
    # every message is accounted for: it reached the sink, or was filtered, dead-lettered or came late
    assert pipeline.metrics()[source]["in"] == len(messages)
    windows = [item.value for item in out.sinks if item.operator == "windows_out"]
    assert sum(w["n"] for w in windows if w["unit"] == "u1") >= len(GOOD)


@FUZZ
@given(payload=st.binary(max_size=300) | json_values.map(orjson.dumps))
def test_the_hub_envelope_parser_refuses_junk_with_a_reason(payload: bytes) -> None:
    try:
        app, records, _ = decode_batch(payload)
    except ValueError as exc:
        refused: ValueError | None = exc
    else:
        refused = None
        assert isinstance(app, str)
        assert all(isinstance(r, Record) for r in records)
    assert refused is None or str(refused).startswith(("malformed batch", "unsupported envelope"))


@FUZZ
@given(
    seqs=st.lists(st.integers(min_value=0, max_value=2**62), min_size=1, max_size=5),
    value=json_values,
)
def test_an_envelope_round_trips(seqs: list[int], value: object) -> None:
    records = [Record("s1", "x", seq, 1.5, "k", value) for seq in seqs]
    try:
        payload = encode_batch("app", records)
    except TypeError:  # a value JSON cannot hold (NaN is written as null) is the sender's error
        return
    app, back, _ = decode_batch(payload)
    assert app == "app"
    assert [r.seq for r in back] == seqs


def _refusal(text: str) -> bool | None:
    """None if ``text`` is valid sites; True if it is refused with InvalidSites naming the file."""
    try:
        parse_sites(text, "fuzz.yaml")
    except InvalidSites as exc:
        return "fuzz.yaml" in str(exc)
    return None


@FUZZ
@given(text=st.text(max_size=300))
def test_the_sites_loader_refuses_any_text_with_invalid_sites(text: str) -> None:
    assert _refusal(text) in (None, True)


@FUZZ
@given(data=json_values)
def test_the_sites_loader_refuses_any_yaml_structure_with_invalid_sites(data: object) -> None:
    import yaml

    try:
        text = yaml.safe_dump({"sites": data})
    except yaml.YAMLError:
        return  # not representable as YAML: nothing to load
    assert _refusal(text) in (None, True)
