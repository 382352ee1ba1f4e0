"""``spanedge preview --site --for``: the options it refuses, the streams it reads, the bounds of a read, the hub's version."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner

from spanedge.cli import cli
from spanedge.cli.preview.live import MAX_SECONDS, Captured, Tap, _Reader, check_duration, save, summary, taps
from spanedge.cli.preview.records import Limits, read_lines
from spanedge.errors import InvalidRecords, InvalidSites
from spanedge.sites import parse_sites
from tests.conftest import EXAMPLES

COLD_CHAIN = EXAMPLES / "cold_chain" / "app.py"
SITES = """
sites:
  cloud: {tier: hub, broker: "mqtt://127.0.0.1:1"}
  truck-7:
    tier: spoke
    broker: "mqtt://127.0.0.1:1"
    streams:
      readings: {topic: "trucks/7/+/temp", rate: 10, max_message_bytes: 100}
  plc-1:
    tier: spoke
    broker: "mqtt://127.0.0.1:1"
    streams:
      readings: {url: "modbus://127.0.0.1:1502", rate: 1, points: {temp_f: {table: holding, address: 0}}}
"""


def run(*args: str | Path) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["preview", *map(str, args)])
    return result.exit_code, result.output


@pytest.fixture
def sites_file(tmp_path: Path) -> Path:
    path = tmp_path / "sites.yaml"
    path.write_text(SITES)
    return path


def refusals(sites: Path, records: Path) -> list[tuple[list[str | Path], str]]:
    live = ["--site", "truck-7", "--for", "5s", "--sites", sites]
    return [
        ([COLD_CHAIN, "--site", "truck-99", "--for", "5s", "--sites", sites], "--site 'truck-99' is not a site of"),
        (
            [COLD_CHAIN, "--site", "truck-7", "--for", "11m", "--sites", sites],
            "--for 11m is over the limit of 10 minutes",
        ),
        ([COLD_CHAIN, "--site", "truck-7", "--for", "soon", "--sites", sites], "--for: expected a duration"),
        ([COLD_CHAIN, "--input", records, *live], "--input reads records from a file, --for and --sites read"),
        ([COLD_CHAIN, "--input", records, "--save", records], "--input reads records from a file, --save read"),
        ([COLD_CHAIN], "no input: pass --input FILE of records, or --site SITE --for DURATION"),
        ([COLD_CHAIN, "--site", "truck-7", "--for", "5s"], "a live preview needs --sites sites.yaml; pass it"),
        ([COLD_CHAIN, "--for", "5s"], "a live preview needs --site SITE, --sites sites.yaml; pass them"),
        ([COLD_CHAIN, *live, "--stream", "readings"], "--stream applies to --input only"),
        ([COLD_CHAIN, "--site", "plc-1", "--for", "5s", "--sites", sites], "site plc-1 in"),
        ([COLD_CHAIN, "--site", "Truck", "--for", "5s", "--sites", sites], "--site: site name 'Truck' has uppercase"),
    ]


def test_each_refused_option_is_one_line_saying_what_to_pass(sites_file: Path, tmp_path: Path) -> None:
    records = tmp_path / "records.jsonl"
    records.write_text('{"unit": "u1", "ts": 1.0, "temp_f": 40.0}\n')
    for args, expected in refusals(sites_file, records):
        code, out = run(*args)
        assert code == 2, (args, out)
        assert out.count("\n") == 1, out
        assert out.startswith("error: " + expected), (expected, out)


def test_a_tls_file_that_cannot_be_read_names_the_site_and_the_setting(tmp_path: Path) -> None:
    sites = tmp_path / "sites.yaml"
    missing = tmp_path / "missing-ca.pem"
    sites.write_text(
        SITES.replace(
            'broker: "mqtt://127.0.0.1:1"\n    streams',
            f'broker: "mqtts://127.0.0.1:1"\n    tls: {{ca_file: "{missing}"}}\n    streams',
            1,
        )
    )
    code, out = run(COLD_CHAIN, "--site", "truck-7", "--for", "5s", "--sites", sites)
    assert code == 2, out
    assert out.startswith("error: cannot use the TLS files of site truck-7 for broker mqtts://127.0.0.1:1: "), out
    assert out.rstrip().endswith("check ca_file, cert_file and key_file under the site's tls: in sites.yaml"), out


def test_the_site_given_offline_still_names_the_records_site(tmp_path: Path) -> None:
    records = tmp_path / "records.jsonl"
    records.write_text('{"unit": "u1", "ts": 1.0, "temp_f": 40.0}\n')
    code, out = run(COLD_CHAIN, "--input", records, "--site", "truck-7", "--json")
    assert code == 0, out
    assert json.loads(out)["sites"] == ["truck-7"]


def test_the_bound_on_for_is_ten_minutes() -> None:
    assert MAX_SECONDS == 600
    check_duration(600, "10m")
    with pytest.raises(InvalidRecords, match=r"--for 601s is over the limit of 10 minutes; pass --for 10m or less"):
        check_duration(601, "601s")


def test_only_the_sites_mqtt_streams_the_app_reads_are_tapped() -> None:
    sites = parse_sites(SITES)
    found, notes = taps(sites, "sites.yaml", "truck-7", {"readings", "doors"}, "cold-chain")
    assert found == [Tap("readings", "trucks/7/+/temp", 1, 100)]
    assert notes == []
    with pytest.raises(InvalidSites, match=r"\(readings\) to an MQTT topic \(its readings come from connectors"):
        taps(sites, "sites.yaml", "plc-1", {"readings"}, "cold-chain")
    with pytest.raises(InvalidSites, match=r"--site 'cloud-2' is not a site of sites.yaml \(its sites: cloud, truck-7"):
        taps(sites, "sites.yaml", "cloud-2", {"readings"}, "cold-chain")


def test_a_connector_stream_is_named_as_not_read_live() -> None:
    text = SITES.replace("      readings: {url:", "      readings: {topic: t, rate: 1}\n      doors: {url:")
    found, notes = taps(parse_sites(text), "sites.yaml", "plc-1", {"readings", "doors"}, "cold-chain")
    assert [t.stream for t in found] == ["readings"]
    (note,) = notes
    assert note.startswith("stream doors of site plc-1 is read by its modbus:// connector, not over MQTT")
    assert "reads MQTT streams only" in note


def reader(limits: Limits) -> _Reader:
    r = _Reader("truck-7", [Tap("readings", "trucks/7/+/temp", 1, 100)], limits)
    r.reading = True
    return r


def send(r: _Reader, *payloads: bytes) -> None:
    for payload in payloads:
        r._message("trucks/7/+/temp", SimpleNamespace(payload=payload))  # type: ignore[arg-type]


def test_a_read_stops_at_the_record_bound_and_keeps_no_more() -> None:
    r = reader(Limits(10_000, 2))
    send(r, b'{"a": 1}', b'{"a": 2}', b'{"a": 3}')
    assert r.done.is_set()
    assert [line.value for line in r.captured.lines] == [{"a": 1}, {"a": 2}]
    assert r.captured.stopped == "2 records were read (--max-lines)"


def test_a_read_stops_before_the_record_that_would_pass_the_byte_bound() -> None:
    one = len(b'{"stream":"readings","site":"truck-7","value":{"a":1}}\n')
    r = reader(Limits(2 * one + 1, 100))
    send(r, b'{"a": 1}', b'{"a": 2}', b'{"a": 3}')
    assert r.done.is_set()
    assert len(r.captured.lines) == 2
    assert r.captured.size == 2 * one
    assert r.captured.stopped == f"the records reached --max-mb ({(2 * one + 1) / 1e6:g} MB)"


def test_messages_an_agent_would_dead_letter_are_counted_not_kept(tmp_path: Path) -> None:
    r = reader(Limits(10_000, 100))
    send(r, b"not json", b"[1, 2]", b'{"big": "' + b"x" * 200 + b'"}', b'{"a": 1}')
    assert r.captured.skipped == {"not a JSON object": 2, "over the stream's max_message_bytes (100)": 1}
    assert not r.done.is_set()
    notes = summary(r.captured, "truck-7", 5.0)
    assert "skipped 2 messages of site truck-7: not a JSON object (an agent dead-letters them)" in notes
    path = tmp_path / "saved.jsonl"
    save(path, r.captured)
    (line,) = read_lines(path, Limits(10_000, 100))
    assert (line.stream, line.site, line.value) == ("readings", "truck-7", {"a": 1})


def test_messages_before_the_read_starts_or_after_it_ends_are_not_kept() -> None:
    r = reader(Limits(10_000, 100))
    r.reading = False
    send(r, b'{"a": 1}')
    r.reading = True
    r.done.set()
    send(r, b'{"a": 2}')
    assert r.captured.lines == []


def test_save_to_an_unwritable_place_says_where_to_write(tmp_path: Path) -> None:
    with pytest.raises(InvalidRecords, match=r"cannot write --save .*: Is a directory; pass a path in a writable"):
        save(tmp_path, Captured())


class _Hub(BaseHTTPRequestHandler):
    """A stub hub answering ``GET /apps/cold-chain`` with the cold chain as version 3, 404 for any other app."""

    def do_GET(self) -> None:
        if self.path != "/apps/cold-chain":
            self._answer(404, {"detail": "no app"})
            return
        plan = {"app_source": COLD_CHAIN.read_text(), "app_file": "/srv/apps/app.py"}
        self._answer(200, {"app": "cold-chain", "version": 3, "filename": "app.py", "plan": plan})

    def _answer(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def hub() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


def test_without_compare_the_candidate_runs_beside_the_version_the_hub_runs(hub: str) -> None:
    v2 = EXAMPLES / "cold_chain" / "app_v2.py"
    records = EXAMPLES / "cold_chain" / "records.jsonl"
    code, out = run(v2, "--input", records, "--hub-url", hub, "--token", "t", "--json")
    assert code == 0, out
    doc = json.loads(out)
    assert doc["baseline"]["app_file"] == "hub v3"
    assert doc["candidate"]["app_file"] == "app_v2.py"
    (difference,) = doc["differences"]
    assert difference["sink"] == "fleet_alerts"
    assert len(difference["only_in_baseline"]) == 1


def test_an_app_the_hub_does_not_run_is_previewed_alone_with_a_note(hub: str, tmp_path: Path) -> None:
    app = tmp_path / "other.py"
    app.write_text(COLD_CHAIN.read_text().replace('App("cold-chain")', 'App("other")'))
    records = EXAMPLES / "cold_chain" / "records.jsonl"
    result = CliRunner().invoke(cli, ["preview", str(app), "--input", str(records), "--hub", hub, "--token", "t"])
    assert result.exit_code == 0, result.output
    assert f"note: app other is not deployed at the hub {hub}; previewing it without a comparison" in result.output
    assert result.output.count("app other (") == 1
