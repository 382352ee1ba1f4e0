"""Connector streams in sites.yaml and connector sinks: URLs, node ids, Modbus points and their scaling."""

from __future__ import annotations

import math
import struct

import msgspec
import pytest

from spanedge import sinks
from spanedge.connectors import scheme_of
from spanedge.connectors.modbus import Point, SampleTime, Table, TimeUnit, Type
from spanedge.connectors.opcua import Security, endpoint, node_problem, url_nodes
from spanedge.errors import InvalidDataflow, InvalidSites
from spanedge.sites import parse_sites

HEAD = "sites:\n  cloud: {tier: hub, broker: 'mqtt://h'}\n  a:\n    tier: spoke\n    broker: 'mqtt://a'\n    streams:\n"


def words(fmt: str, value: float) -> list[int]:
    data = struct.pack(">" + fmt, value)
    return list(struct.unpack(f">{len(data) // 2}H", data))


def test_scheme_of_a_connector_url_and_what_it_refuses() -> None:
    assert scheme_of("opcua://plc-1:4840/path") == "opcua"
    assert scheme_of("modbus://10.0.0.7:502?unit=3") == "modbus"
    assert scheme_of("my-proto+tls://host") == "my-proto+tls"
    with pytest.raises(ValueError, match="is not a connector URL"):
        scheme_of("plc-1:4840")
    with pytest.raises(ValueError, match="give its topic filter with topic:"):
        scheme_of("mqtt://broker:1883")
    with pytest.raises(ValueError, match="password_env"):
        scheme_of("opcua://user:secret@plc:4840")


def test_http_and_file_streams_in_sites_yaml() -> None:
    sites = parse_sites(
        HEAD
        + "      w: {url: 'http://0.0.0.0:8480/ingest/w', rate: 5, options: {token_env: PUSH, max_body_bytes: 4096}}\n"
        + "      f: {url: 'file:///var/log/scale.jsonl', rate: 1, options: {poll_s: 0.5, start: end}}\n"
    )
    streams = sites.site("a").streams
    assert (streams["w"].connector, streams["f"].connector) == ("http", "file")
    assert streams["w"].options == {"token_env": "PUSH", "max_body_bytes": 4096}
    assert scheme_of("file:///x") == "file"
    assert scheme_of("https://hooks.example/x") == "https"


def test_opcua_nodes_from_the_url_and_node_ids() -> None:
    url = "opcua://plc:4840/freeopcua/server/?nodes=ns=2;i=2,ns=3;s=Boiler.Temp"
    assert url_nodes(url) == {"ns=2;i=2": "ns=2;i=2", "ns=3;s=Boiler.Temp": "ns=3;s=Boiler.Temp"}
    assert endpoint(url) == "opc.tcp://plc:4840/freeopcua/server/"
    assert node_problem("i=85") is None
    assert node_problem("ns=1;g=09087e75-8e5e-499b-954f-f2a9603db28a") is None
    assert node_problem("ns=2") == "'ns=2' is not a node id such as ns=2;i=7 or ns=3;s=Boiler.Temp"


def test_opcua_security_string() -> None:
    fields = {"policy": "Basic256Sha256", "mode": "SignAndEncrypt", "cert_file": "c.der", "key_file": "k.pem"}
    assert msgspec.convert(fields, Security).asyncua_string() == "Basic256Sha256,SignAndEncrypt,c.der,k.pem"
    spec = sinks.opcua("opcua://plc:4840", nodes={"sp": "ns=2;i=5"}, security={**fields, "server_cert_file": "s.der"})
    assert spec.options["security"].asyncua_string().endswith(",k.pem,s.der")
    with pytest.raises(InvalidDataflow, match=r"security: .*leave security: out for no security"):
        sinks.opcua("opcua://plc:4840", nodes={"sp": "ns=2;i=5"}, security={**fields, "mode": "None"})
    with pytest.raises(InvalidDataflow, match=r"unknown option\(s\) pasword_env"):
        sinks.opcua("opcua://plc:4840", nodes={"sp": "ns=2;i=5"}, pasword_env="X")


def test_connector_streams_in_sites_yaml() -> None:
    sites = parse_sites(
        HEAD
        + "      boiler: {url: 'opcua://plc:4840/s?nodes=ns=2;i=9', rate: 2, nodes: {temp: 'ns=2;i=2'}}\n"
        + "      tank:\n        url: 'modbus://10.0.0.7:502'\n        rate: 1\n        interval: 0.5\n"
        + "        points:\n          level: {address: 4, type: int16, scale: 0.1}\n"
        + "      readings: {topic: 'x/+', rate: 5}\n"
    )
    streams = sites.site("a").streams
    assert streams["boiler"].connector == "opcua"
    assert streams["boiler"].opcua_nodes == {"ns=2;i=9": "ns=2;i=9", "temp": "ns=2;i=2"}
    assert streams["tank"].connector == "modbus"
    assert streams["tank"].interval == 0.5
    assert streams["tank"].points["level"] == Point(table=Table.HOLDING, address=4, type=Type.INT16, scale=0.1)
    assert streams["readings"].connector is None


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            "      s: {url: 'opcua://plc:4840', rate: 1}",
            "s.yaml:7: sites.a.streams.s.nodes: an opcua:// stream needs nodes:",
        ),
        (
            "      s: {url: 'opcua://plc:4840', rate: 1, nodes: {t: 'ns=2;x=1'}}",
            "s.yaml:7: sites.a.streams.s.nodes.t: 'ns=2;x=1' is not a node id",
        ),
        (
            "      s: {url: 'modbus://plc', rate: 1}",
            "s.yaml:7: sites.a.streams.s.points: a modbus:// stream needs points:",
        ),
        (
            "      s:\n        url: 'modbus://plc'\n        rate: 1\n        points:\n          l: {address: 70000}",
            "s.yaml:11: sites.a.streams.s.points.l.address: Expected `int` <= 65535 (got 70000)",
        ),
        (
            "      s: {url: 'modbus://plc', rate: 1, points: {l: {table: coil, type: float32}}}",
            "s.yaml:7: sites.a.streams.s.points.l.type: a coil holds one bit",
        ),
        (
            "      s: {url: 'modbus://plc', rate: 1, points: {l: {scale: 0}}}",
            "s.yaml:7: sites.a.streams.s.points.l.scale: must be a finite number other than 0",
        ),
        (
            "      s: {url: 'modbus://plc', rate: 1, points: {l: {time: {address: 1, unit: ms}}}}",
            "s.yaml:7: sites.a.streams.s.points.l.time.count: 32 bits count milliseconds since the epoch only up to",
        ),
        (
            "      s: {url: 'modbus://plc', rate: 1, points: {l: {time: {address: 1, table: coil}}}}",
            "s.yaml:7: sites.a.streams.s.points.l.time.table: a sample time sits in holding or input registers",
        ),
        (
            "      s: {url: 'modbus://plc', rate: 1, points: {l: {type: float32, time: {address: 1}}}}",
            "s.yaml:7: sites.a.streams.s.points.l.time: holding registers 1-2 overlap the point's own holding register 0",
        ),
        (
            "      s: {url: 'modbus://plc', rate: 1, points: {l: {time: {address: 1, count: 3}}}}",
            "s.yaml:7: sites.a.streams.s.points.l.time.count: Invalid enum value 3",
        ),
        (
            "      s: {url: 'modbus://plc', topic: 'a/b', rate: 1, points: {l: {}}}",
            "s.yaml:7: sites.a.streams.s.topic: a stream has either a topic filter or a connector url:, not both",
        ),
        (
            "      s: {url: 'mqtt://plc', rate: 1}",
            "s.yaml:7: sites.a.streams.s.url: an MQTT stream is read from its site's broker",
        ),
        (
            "      s: {url: 'http://0.0.0.0:8480/in', rate: 1}",
            "s.yaml:7: sites.a.streams.s.options: Object missing required field `token_env`",
        ),
        (
            "      s: {url: 'http://0.0.0.0:8480/in', rate: 1, options: {token_env: 'a b'}}",
            "s.yaml:7: sites.a.streams.s.options: token_env: 'a b' is not the name of an environment variable",
        ),
        (
            "      s: {url: 'https://0.0.0.0:8480/in', rate: 1, options: {token_env: T}}",
            "s.yaml:7: sites.a.streams.s.options: an https:// endpoint needs cert_file and key_file",
        ),
        (
            "      s: {url: 'file:///var/log/x.jsonl', rate: 1, options: {start: middle}}",
            "s.yaml:7: sites.a.streams.s.options: Expected `str` matching regex",
        ),
        (
            "      s: {url: 'file://relative/x.jsonl', rate: 1}",
            "s.yaml:7: sites.a.streams.s.url: 'file://relative/x.jsonl' is not a file URL: give the file's absolute path",
        ),
    ],
)
def test_bad_connector_streams_say_where_and_how_to_fix(entry: str, message: str) -> None:
    with pytest.raises(InvalidSites) as info:
        parse_sites(HEAD + entry + "\n", "s.yaml")
    assert message in str(info.value)


def test_points_scale_raw_values_both_ways() -> None:
    level = Point(address=0, scale=0.1)
    assert level.decode([215]) == 21.5
    assert level.encode(21.5) == [215]
    signed = Point(type=Type.INT16, offset=100)
    assert signed.decode([0xFFFE]) == 98
    assert signed.encode(98) == [0xFFFE]
    big = Point(type=Type.UINT32)
    assert big.count == 2
    assert big.decode([1, 2]) == 65538
    little = Point(type=Type.INT32, word_order="little")
    assert little.decode([2, 1]) == 65538
    assert little.encode(65538) == [2, 1]
    flow = Point(type=Type.FLOAT32, scale=2.0)
    assert flow.decode(words("f", 1.25)) == 2.5
    assert flow.encode(2.5) == words("f", 1.25)
    coil = Point(table=Table.COIL, address=3)
    assert coil.kind is Type.BOOL
    assert coil.decode([True]) is True
    assert coil.encode(1) is True
    assert coil.where() == "coil 3"


def test_sample_times_are_unsigned_counts_since_the_epoch() -> None:
    seconds = SampleTime(address=100)
    assert seconds.encode(1_765_120_000.4) == words("I", 1_765_120_000)
    assert seconds.decode(words("I", 1_765_120_000)) == 1_765_120_000.0
    millis = SampleTime(table=Table.INPUT, address=8, count=4, unit=TimeUnit.MS, word_order="little")
    assert millis.encode(1_765_120_000.123) == list(reversed(words("Q", 1_765_120_000_123)))
    assert millis.decode(millis.encode(1_765_120_000.123)) == 1_765_120_000.123
    assert millis.where() == "input registers 8-11"
    with pytest.raises(ValueError, match=r"input registers 8-11: got 3 register\(s\), not 4"):
        millis.decode([0, 1, 2])


def test_values_that_do_not_fit_a_point_say_which_register() -> None:
    with pytest.raises(ValueError, match=r"holding register 6 holds nan, not a finite number"):
        Point(address=6, type=Type.FLOAT32).decode(words("f", math.nan))
    with pytest.raises(ValueError, match=r"holding register 0 \(uint16\) cannot hold 7000 \(raw 70000"):
        Point(scale=0.1).encode(7000)
    with pytest.raises(ValueError, match=r"holding register 1 \(int16\) cannot hold -40000"):
        Point(address=1, type=Type.INT16).encode(-40000)
    with pytest.raises(ValueError, match="takes a finite number, got 'hot'"):
        Point().encode("hot")
    with pytest.raises(ValueError, match="takes a finite number, got True"):
        Point().encode(True)
    with pytest.raises(ValueError, match=r"coil 2 takes true/false \(or 0/1\), got 5"):
        Point(table=Table.COIL, address=2).encode(5)


def test_connector_sinks_check_their_settings() -> None:
    spec = sinks.modbus("modbus://plc:502?unit=2", points={"valve": {"table": "coil", "address": 4}})
    assert spec.scheme == "modbus"
    assert spec.points["valve"].table is Table.COIL
    assert spec.last_value_wins
    assert sinks.opcua("opcua://plc:4840", nodes={"sp": "ns=2;i=5"}, last_value_wins=False).nodes == {"sp": "ns=2;i=5"}
    assert sinks.connector("webhook://host/x", token_env="T").options == {"token_env": "T"}
    with pytest.raises(InvalidDataflow, match=r"only coils and holding registers are written"):
        sinks.modbus("modbus://plc", points={"t": {"table": "input", "address": 1}})
    with pytest.raises(InvalidDataflow, match=r"point 't': .*65535"):
        sinks.modbus("modbus://plc", points={"t": {"address": 70000}})
    with pytest.raises(InvalidDataflow, match=r"point 't' has a time:, which only a stream's points read"):
        sinks.modbus("modbus://plc", points={"t": {"address": 0, "time": {"address": 1}}})
    with pytest.raises(InvalidDataflow, match=r"the URL must start with modbus://"):
        sinks.modbus("opcua://plc", points={"t": {}})
    with pytest.raises(InvalidDataflow, match=r"give nodes="):
        sinks.opcua("opcua://plc", nodes={})
    with pytest.raises(InvalidDataflow, match=r"node 'x': 'nope' is not a node id"):
        sinks.opcua("opcua://plc", nodes={"x": "nope"})
