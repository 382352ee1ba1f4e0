"""Validation errors say what, where and how to fix it."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from spanedge import App, SpanEdgeError, agg, global_, local, sinks
from spanedge.errors import InvalidDataflow, InvalidSites
from spanedge.loader import load_app_source
from spanedge.sites import parse_sites


def test_errors_share_a_root_and_are_value_errors() -> None:
    assert issubclass(InvalidDataflow, SpanEdgeError)
    assert issubclass(InvalidDataflow, ValueError)


def test_duplicate_names_name_both_places() -> None:
    app = App("t")
    s = app.source("raw")

    def parse(r: dict) -> dict:
        return r

    s.map(parse)
    with pytest.raises(
        InvalidDataflow,
        match=r"'parse' \(test_validation.py:\d+\) is already used by 'parse' \(test_validation.py:\d+\)",
    ):
        s.map(parse)


def test_local_downstream_of_global_is_rejected_with_locations() -> None:
    @global_
    def fleet(r: dict) -> dict:
        return r

    @local
    def convert(r: dict) -> dict:
        return r

    app = App("t")
    app.source("raw").map(fleet).map(convert)
    with pytest.raises(InvalidDataflow) as info:
        app.graph()
    text = str(info.value)
    assert "'convert' (test_validation.py:" in text
    assert "hub-only operator 'fleet' (test_validation.py:" in text
    assert "local operators must come before global ones" in text


def test_local_transform_is_rejected() -> None:
    @local
    def enrich(df: object) -> object:
        return df

    app = App("t")
    with pytest.raises(InvalidDataflow, match="transform 'enrich' .* is marked @local.*hub only"):
        app.source("raw").transform(enrich)


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"key": None, "size": "10s"}, "windows are keyed; got key=None"),
        ({"key": "k", "size": "ten seconds"}, "bad size: expected a duration such as '10s'"),
        ({"key": "k", "size": "-5s"}, "bad size"),
        ({"key": "k"}, r"give size='10s' \(tumbling\)"),
        ({"key": "k", "size": "10s", "slide": "20s"}, "slide .* must not exceed size"),
        ({"key": "k", "size": "10s", "gap": "5s"}, "give gap= alone"),
    ],
)
def test_window_errors(kwargs: dict, pattern: str) -> None:
    app = App("t")
    with pytest.raises(InvalidDataflow, match=pattern) as info:
        app.source("raw").window(aggs={"n": agg.count()}, name="w", **kwargs)
    assert "window 'w' (test_validation.py:" in str(info.value)


def test_aggregation_over_missing_field_uses_the_declared_schema() -> None:
    @dataclass
    class Reading:
        unit: str
        temp_c: float

    app = App("t")
    app.source("raw").map(lambda r: r, name="parse").schema(Reading).window(
        key="unit", size="10s", aggs={"avg": agg.mean("temp_f")}, name="stats"
    )
    with pytest.raises(InvalidDataflow) as info:
        app.graph()
    text = str(info.value)
    assert "window 'stats' (test_validation.py:" in text
    assert "aggregation 'avg' (mean(temp_f)) uses field 'temp_f'" in text
    assert "they have: temp_c, unit" in text


def test_bad_app_name_and_bad_sink() -> None:
    with pytest.raises(InvalidDataflow, match="app name"):
        App("a/b")
    app = App("t")
    with pytest.raises(InvalidDataflow, match=r"expected spanedge.sinks.mqtt"):
        app.source("raw").sink("console")  # type: ignore[arg-type]
    assert sinks.console().kind == "console"


def test_unknown_stream_in_sites_names_the_site_and_the_fix() -> None:
    sites = parse_sites(
        """
sites:
  hub: {tier: hub, broker: "mqtt://h:1883"}
  a: {tier: spoke, broker: "mqtt://a:1883", streams: {readngs: {topic: "s/#", rate: 5}}}
"""
    )
    with pytest.raises(
        InvalidSites, match="site 'a' binds stream 'readngs', but app 'cold' has no source by that name"
    ):
        sites.check_app_streams({"readings"}, "cold")


def test_loader_reports_syntax_errors_and_missing_apps() -> None:
    with pytest.raises(InvalidDataflow, match="app.py:2: syntax error"):
        load_app_source("x = 1\ndef (:\n", "app.py")
    with pytest.raises(InvalidDataflow, match="must define exactly one App"):
        load_app_source("x = 1\n", "app.py")
