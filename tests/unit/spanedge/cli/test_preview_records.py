"""Reading the records of ``spanedge preview --input``: the line format, and a clear error for each bad line."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spanedge.cli.preview.records import Limits, Line, by_site, read_lines
from spanedge.errors import InvalidRecords

LIMITS = Limits(max_bytes=1_000_000, max_lines=1000)


def lines_of(tmp: Path, text: str, stream: str | None = None, limits: Limits = LIMITS) -> list[Line]:
    path = tmp / "records.jsonl"
    path.write_text(text)
    return read_lines(path, limits, stream)


def test_plain_and_wrapped_lines(tmp_path: Path) -> None:
    text = (
        '{"unit": "u1", "ts": 1}\n'
        "\n"
        '{"stream": "readings", "site": "truck-7", "value": {"unit": "u2"}}\n'
        '{"site": "truck-9", "value": {"unit": "u3"}}\n'
        '{"value": 3.5, "sensor": "s1"}\r\n'
    )
    assert lines_of(tmp_path, text) == [
        Line(1, None, None, {"unit": "u1", "ts": 1}),
        Line(3, "readings", "truck-7", {"unit": "u2"}),
        Line(4, None, "truck-9", {"unit": "u3"}),
        Line(5, None, None, {"value": 3.5, "sensor": "s1"}),  # a plain record with a field named value
    ]


def test_stream_reads_every_line_as_a_plain_record(tmp_path: Path) -> None:
    text = '{"stream": "x", "value": {"a": 1}}\n'
    assert lines_of(tmp_path, text, stream="readings") == [
        Line(1, "readings", None, {"stream": "x", "value": {"a": 1}})
    ]


def test_by_site_keeps_the_file_order_per_site(tmp_path: Path) -> None:
    lines = lines_of(
        tmp_path,
        '{"a": 1}\n{"site": "s2", "value": {"a": 2}}\n{"a": 3}\n{"stream": "r", "site": "s2", "value": {"a": 4}}\n',
    )
    assert by_site(lines, tmp_path / "records.jsonl", "app", {"r"}, "s1") == {
        "s1": [("r", {"a": 1}), ("r", {"a": 3})],
        "s2": [("r", {"a": 2}), ("r", {"a": 4})],
    }


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ('{"a": 1}\n{"a": \n', r"records\.jsonl:2: not valid JSON \(.* at column \d+\)"),
        ('"text"\n', r"records\.jsonl:1: the line holds a string, not a JSON object"),
        ("null\n", r"records\.jsonl:1: the line holds null, not a JSON object"),
        (
            '{"stream": 5, "value": {}}\n',
            r'records\.jsonl:1: "stream" must be a stream name \(a string\), got a number',
        ),
        ('{"stream": "r", "value": [1]}\n', r'records\.jsonl:1: "value" holds a list, not a JSON object'),
        ('{"site": "a/b", "value": {}}\n', r"records\.jsonl:1: site name 'a/b' contains '/'"),
    ],
)
def test_a_bad_line_is_named_with_the_fix(tmp_path: Path, text: str, error: str) -> None:
    with pytest.raises(InvalidRecords, match=error):
        lines_of(tmp_path, text)


def test_bytes_that_are_not_utf8_are_a_bad_line(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    path.write_bytes(b'{"a": 1}\n{"a": "\xff"}\n')
    with pytest.raises(InvalidRecords, match=r"records\.jsonl:2: not valid JSON \(.*UTF-8"):
        read_lines(path, LIMITS)


def test_a_byte_order_mark_is_no_error(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"a": 1}\n')
    assert read_lines(path, LIMITS) == [Line(1, None, None, {"a": 1})]


def test_limits(tmp_path: Path) -> None:
    text = '{"a": 1}\n\n{"a": 2}\n{"a": 3}\n'
    assert len(lines_of(tmp_path, text, limits=Limits(1000, 3))) == 3
    with pytest.raises(InvalidRecords, match=r"records\.jsonl:4: more than 2 records \(--max-lines\)"):
        lines_of(tmp_path, text, limits=Limits(1000, 2))
    assert len(lines_of(tmp_path, text, limits=Limits(len(text), 10))) == 3
    with pytest.raises(
        InvalidRecords, match=r"records\.jsonl holds more than .* MB \(--max-mb\); pass a larger --max-mb"
    ):
        lines_of(tmp_path, text, limits=Limits(len(text) - 1, 10))


def test_unknown_and_missing_streams(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    lines = lines_of(tmp_path, '{"stream": "doors", "value": {}}\n')
    with pytest.raises(
        InvalidRecords, match=r"records\.jsonl:1: stream 'doors' is not a source stream of app x; .*: a, b"
    ):
        by_site(lines, path, "x", {"a", "b"}, "edge")
    lines = lines_of(tmp_path, '{"a": 1}\n')
    with pytest.raises(InvalidRecords, match=r'records\.jsonl:1: the line names no stream, .*\{"stream": "<name>"'):
        by_site(lines, path, "x", {"a", "b"}, "edge")


RECORDS = st.lists(
    st.dictionaries(
        st.text(min_size=1, max_size=8),
        st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=10),
    ),
    min_size=1,
    max_size=20,
)


def wrap(record: dict[str, Any], i: int) -> dict[str, Any]:
    return {"stream": "r", "site": f"s{i % 3}", "value": record}


@given(records=RECORDS, wrapped=st.booleans())
def test_every_record_comes_back_with_its_line(records: list[dict[str, Any]], wrapped: bool) -> None:
    lines = [wrap(r, i) if wrapped else r for i, r in enumerate(records)]
    with tempfile.TemporaryDirectory() as tmp:
        got = lines_of(Path(tmp), "".join(json.dumps(line) + "\n" for line in lines), stream=None if wrapped else "r")
    assert [(g.number, g.value) for g in got] == [(i, r) for i, r in enumerate(records, start=1)]
    assert {g.site for g in got} == ({f"s{i % 3}" for i in range(len(records))} if wrapped else {None})


@given(records=RECORDS, data=st.data())
def test_a_broken_line_anywhere_is_the_one_named(records: list[dict[str, Any]], data: st.DataObject) -> None:
    bad = data.draw(st.integers(min_value=0, max_value=len(records) - 1))
    garbage = data.draw(st.sampled_from(["{", "[1]", "1", '"x"', "{'a': 1}", "nul", '{"site": 1, "value": {}}']))
    text = "".join((garbage if i == bad else json.dumps(r)) + "\n" for i, r in enumerate(records))
    with tempfile.TemporaryDirectory() as tmp, pytest.raises(InvalidRecords) as caught:
        lines_of(Path(tmp), text)
    assert str(caught.value).startswith(f"{Path(tmp) / 'records.jsonl'}:{bad + 1}: ")
