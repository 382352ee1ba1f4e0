"""A site's stream on the command line: ``NAME=TOPIC``, or its ``streams:`` entry as sites.yaml writes it."""

from __future__ import annotations

import json

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spanedge.errors import InvalidSites
from spanedge.sites import DEFAULT_STREAM_RATE, StreamBinding, parse_sites, parse_stream

LEVEL = st.text(alphabet="abcxyz019-_", min_size=1, max_size=8)
NAME = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=12)


@st.composite
def topic_filters(draw: st.DrawFn) -> str:
    """A topic filter SpanEdge accepts: a fixed first level (never ``spanedge/``), then levels or ``+``, ``#`` last."""
    levels = [draw(LEVEL), *draw(st.lists(st.one_of(LEVEL, st.just("+")), max_size=4))]
    if draw(st.booleans()):
        levels.append("#")
    return "/".join(levels)


@settings(max_examples=200, deadline=None)
@given(name=NAME, topic=topic_filters())
def test_name_equals_topic_is_the_entry_sites_yaml_would_hold(name: str, topic: str) -> None:
    got, binding = parse_stream(f"{name}={topic}")
    assert got == name
    assert binding == StreamBinding(topic=topic, rate=DEFAULT_STREAM_RATE)
    # the entry it sends reads back the same from a sites.yaml
    entry = json.dumps({name: msgspec.to_builtins(binding)})
    spoke = f"{{tier: spoke, broker: 'mqtt://h:1883', streams: {entry}}}"
    sites = parse_sites(f"sites:\n  cloud: {{tier: hub, broker: 'mqtt://h:1883'}}\n  s: {spoke}\n")
    assert sites.sites["s"].streams == {name: binding}


@settings(max_examples=100, deadline=None)
@given(
    name=NAME,
    topic=topic_filters(),
    rate=st.floats(min_value=0.001, max_value=1e6),
    size=st.floats(min_value=1, max_value=1e6),
    qos=st.sampled_from([0, 1]),
)
def test_the_mapping_form_takes_every_field(name: str, topic: str, rate: float, size: float, qos: int) -> None:
    text = f"{name}={{topic: '{topic}', rate: {rate!r}, record_bytes: {size!r}, qos: {qos}}}"
    assert parse_stream(text) == (name, StreamBinding(topic=topic, rate=rate, record_bytes=size, qos=qos))


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=40))
def test_any_text_is_a_stream_or_an_invalid_sites_error_naming_the_option(text: str) -> None:
    try:
        name, binding = parse_stream(text)
    except InvalidSites as exc:
        problem = str(exc)
    else:
        assert name
        assert binding.topic
        return
    assert "--stream" in problem


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("readings", "'readings' is not NAME=TOPIC"),
        ("=trucks/13/#", "is not NAME=TOPIC"),
        ("readings=", "is not NAME=TOPIC"),
        ("readings=trucks/#/temp", "topic filter 'trucks/#/temp' is invalid: it has '#' at level 2 of 3"),
        ("readings={topic: trucks/13/#, rate: 0}", "streams.readings.rate: Expected `float` > 0.0"),
        ("readings={topic: trucks/13/#, rat: 5}", "unknown field"),
        ("readings={topic: trucks/13/#", "is not a YAML mapping"),
        ("read/ings=trucks/13/#", "stream name 'read/ings' contains '/'"),
    ],
)
def test_a_bad_stream_says_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(InvalidSites) as caught:
        parse_stream(text)
    assert says in str(caught.value)
