"""Names and MQTT topics are checked where they enter: sites.yaml, the app, the agent's --site.

Whatever passes these checks survives what runs later: the hub ingest's topic
parsing, the broker ACLs, replica ids, and the broker's own topic rules.
"""

from __future__ import annotations

import re
from pathlib import Path

import paho.mqtt.client as paho
import pytest
from click.testing import CliRunner
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from edge_agent.config import AgentLaunch
from spanedge import App, sinks, topics
from spanedge.broker_acl import acl_text, identities, spoke_patterns
from spanedge.cli import cli
from spanedge.errors import InvalidDataflow, InvalidName, InvalidSites
from spanedge.names import check_app_name, check_site_name, check_stream_name, name_problem, stream_name_problem
from spanedge.plan import replica_id, split_replica
from spanedge.sites import Sites, load_sites, parse_sites
from tests.conftest import EXAMPLES

PROPERTIES = settings(database=None, max_examples=300, deadline=None)

SITES = """\
sites:
  cloud: {tier: hub, broker: "mqtt://localhost:1883"}
  truck-7:
    tier: spoke
    broker: "mqtt://localhost:1883"
    streams:
      temps: {topic: "trucks/7/+/temp", rate: 5}
"""

names = st.from_regex(r"[a-z0-9][a-z0-9_-]{0,62}", fullmatch=True)
#: Characters that matter to MQTT and to SpanEdge, and some that do not.
_CHARS = st.sampled_from(list("/+#@$ a-_.\x00\n\x7f\u0085\ufdd0\uffff\U0001ffffé\ud800")) | st.characters()
texts = st.text(_CHARS, max_size=30)


def _error(text: str) -> str:
    with pytest.raises(InvalidSites) as info:
        parse_sites(text, "sites.yaml")
    return str(info.value)


# -- sites.yaml: the file, the line and the rule ------------------------------


def test_an_invalid_site_name_is_refused_at_its_line() -> None:
    message = _error(SITES + '  Truck-9: {tier: spoke, broker: "mqtt://localhost:1883"}\n')
    assert "sites.yaml:8: sites.Truck-9: site name 'Truck-9' has uppercase letters" in message
    assert "starting with a letter or digit" in message
    assert message.endswith("did you mean 'truck-9'?")


def test_an_invalid_topic_filter_is_refused_at_its_line() -> None:
    message = _error(SITES.replace("trucks/7/+/temp", "trucks/7/#/temp"))
    assert message.endswith(
        "sites.yaml:7: sites.truck-7.streams.temps.topic: topic filter 'trucks/7/#/temp' is invalid: it has '#' "
        "at level 3 of 4; '#' must be a whole level and the last one, e.g. 'trucks/7/#'"
    )


@pytest.mark.parametrize(
    ("stream", "reason"),
    [
        ("a/b", "contains '/' at position 1, which separates MQTT topic levels"),
        ("a+", r"contains '\+' at position 1, which is an MQTT wildcard"),
        ("a@b", "contains '@' at position 1, which separates the operator from the site in a replica id"),
        ("dlq", r"is reserved \(spanedge/v1/<app>/dlq/<site> is the app's dead-letter topic\)"),
        ("x" * 101, "has 101 bytes of UTF-8, more than 100"),
    ],
)
def test_an_invalid_stream_name_is_refused_at_its_line(stream: str, reason: str) -> None:
    message = _error(SITES.replace("temps:", f"'{stream}':"))
    assert f"sites.yaml:7: sites.truck-7.streams.{stream}: stream name " in message
    assert re.search(reason, message)


def test_a_site_named_after_a_control_topic_is_refused() -> None:
    message = _error(SITES.replace("truck-7", "heartbeat"))
    assert "sites.yaml:3: sites.heartbeat: site name 'heartbeat' is reserved" in message


def test_sites_built_from_data_are_checked_too() -> None:
    data = parse_sites(SITES).to_data()
    data["sites"]["truck-7"]["streams"]["temps"]["topic"] = "spanedge/v1/#"
    with pytest.raises(InvalidSites, match=r"fleet:.*matches topics under 'spanedge/'"):
        Sites.of(data, "fleet")


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.iterdir() if (p / "sites.yaml").exists()))
def test_the_examples_still_load(example: str) -> None:
    sites = load_sites(EXAMPLES / example / "sites.yaml")
    for site in sites.sites.values():
        assert all(topics.filter_problem(b.topic) is None for b in site.streams.values())


# -- topic filters and sink topics -------------------------------------------


@pytest.mark.parametrize("good", ["sensors/+/temp", "trucks/7/#", "a", "a/b/c", "sensors/+", "a//b", "a/", "é/+"])
def test_valid_filters_pass(good: str) -> None:
    assert topics.filter_problem(good) is None


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        ("trucks/7/#/temp", "'#' must be a whole level and the last one"),
        ("trucks/7#", "has '#' inside level 2"),
        ("trucks/+7", r"has '\+' inside level 2"),
        ("", "is empty"),
        ("a\x00b", r"U\+0000"),
        ("a\nb", r"U\+000A"),
        ("a\ud800", r"U\+D800"),
        ("a\ufffe", r"U\+FFFE"),
        ("x" * 65536, "is 65536 bytes in UTF-8, more than the 65535"),
        ("é" * 32768, "is 65536 bytes in UTF-8"),
        ("$SYS/#", "starts with '\\$'"),
        ("spanedge/v1/#", "matches topics under 'spanedge/'"),
        ("#", "matches topics under 'spanedge/'"),
        ("+/v1/+/+/+", "matches topics under 'spanedge/'"),
    ],
)
def test_invalid_filters_are_refused_with_the_reason(bad: str, reason: str) -> None:
    problem = topics.filter_problem(bad)
    assert problem is not None
    assert re.search(reason, problem)


def test_a_sink_topic_has_no_wildcard_and_the_app_says_where() -> None:
    app = App("demo")
    stream = app.source("readings")
    with pytest.raises(InvalidDataflow, match=r"sink at test_load_checks\.py:\d+: MQTT topic 'alerts/\+' is invalid"):
        stream.sink(sinks.mqtt("alerts/+"))
    with pytest.raises(InvalidDataflow, match="matches topics under 'spanedge/'"):
        stream.sink(sinks.mqtt("spanedge/v1/demo/x/truck-7"))
    stream.sink(sinks.mqtt("cold-chain/alerts"))


def test_operator_and_stream_names_are_checked_where_the_app_is_built() -> None:
    app = App("demo")
    with pytest.raises(InvalidName, match=r"source at test_load_checks\.py:\d+: stream name 'dlq' is reserved"):
        app.source("dlq")
    stream = app.source("readings")
    with pytest.raises(InvalidName, match=r"map at test_load_checks\.py:\d+: operator name 'to@hub' contains '@'"):
        stream.map(lambda r: r, name="to@hub")
    assert "to_celsius" in stream.map(lambda r: r, name="to_celsius").app.operators


# -- the agent ---------------------------------------------------------------


def test_the_agent_refuses_an_invalid_site_name(tmp_path: Path) -> None:
    with pytest.raises(InvalidName, match="--site: site name 'Truck-9' has uppercase letters"):
        AgentLaunch(site="Truck-9", sites=tmp_path / "sites.yaml")
    result = CliRunner().invoke(cli, ["agent", "--site", "../x", "--sites", str(tmp_path / "sites.yaml")])
    assert result.exit_code == 2
    assert "site name '../x' contains '.'" in result.output
    assert "Traceback" not in result.output


def test_the_agent_refuses_a_site_its_sites_file_does_not_define(tmp_path: Path) -> None:
    path = tmp_path / "sites.yaml"
    path.write_text(SITES)
    with pytest.raises(InvalidSites, match="unknown site 'truck-9'; sites.yaml defines: cloud, truck-7"):
        AgentLaunch(site="truck-9", sites=path, plan=tmp_path / "plan.json").load()


# -- properties: accepted now means accepted later ---------------------------


@PROPERTIES
@given(names, texts, names)
def test_accepted_names_survive_the_ingest_the_acl_and_replica_ids(app: str, stream: str, site: str) -> None:
    assume(name_problem(app, "app") is None and name_problem(site, "site") is None)
    assume(stream_name_problem(stream) is None)
    topic = topics.data(app, stream, site)
    assert topics.parse_data(topic) == (app, stream, site)  # the ingest's parse
    assert check_app_name(app, topic) == app
    assert check_site_name(site, topic) == site
    assert topics.text_problem(topic) is None
    paho.Client._raise_for_invalid_topic(topic.encode())  # what paho lets a client publish
    own = spoke_patterns()[0].split()[-1].replace("%u", site)
    assert paho.topic_matches_sub(own, topic)
    kinds = ("plan", "heartbeat", "probe")
    assert not any(paho.topic_matches_sub(own, topics.control(other, k)) for other in (site, "x") for k in kinds)
    assert split_replica(replica_id(stream, site)) == (stream, site)
    assert check_stream_name(stream, "test", "operator") == stream


@PROPERTIES
@given(texts)
def test_an_accepted_filter_is_valid_mqtt_and_matches_no_spanedge_topic(topic_filter: str) -> None:
    if topics.filter_problem(topic_filter) is not None:
        return
    assert paho.Client._filter_wildcard_len_check(topic_filter.encode()) == paho.MQTT_ERR_SUCCESS
    levels = topic_filter.split("/")
    assert all(level == "#" or "#" not in level for level in levels)
    assert "#" not in levels[:-1]
    assert all(level == "+" or "+" not in level for level in levels)
    assert "\x00" not in topic_filter
    assert len(topic_filter.encode()) <= topics.MAX_TOPIC_BYTES
    for topic in (topics.data("a", "s", "b"), topics.control("b", "plan"), f"{topics.RESERVED_ROOT}/x"):
        assert not paho.topic_matches_sub(topic_filter, topic)


@PROPERTIES
@given(texts)
def test_an_accepted_sink_topic_can_be_published(topic: str) -> None:
    if topics.topic_problem(topic) is not None:
        return
    assert topics.filter_problem(topic) is None
    paho.Client._raise_for_invalid_topic(topic.encode())
    assert paho.topic_matches_sub(topic, topic)


@PROPERTIES
@given(names, texts)
def test_an_accepted_site_and_filter_give_an_acl(site: str, topic_filter: str) -> None:
    assume(name_problem(site, "site") is None and site != "cloud")
    assume(topics.filter_problem(topic_filter) is None)
    data = {
        "sites": {
            "cloud": {"tier": "hub", "broker": "mqtt://hub:1883"},
            site: {"tier": "spoke", "broker": "mqtt://hub:1883", "streams": {"s": {"topic": topic_filter, "rate": 1}}},
        }
    }
    sites = Sites.of(data)
    text = acl_text(sites, ["cloud", site])
    assert f"user {site}\ntopic readwrite {topic_filter}\n" in text
    assert identities(sites) == ["cloud", site]
