"""A line of the ingest log: written and read with one definition, from which Spark's schema comes."""

from __future__ import annotations

import pytest

from spanedge.wire.log_line import COLUMNS, LogLine, decode_line, decode_lines, encode_lines, value_text


def test_lines_round_trip_and_leave_epoch_0_out() -> None:
    lines = [
        LogLine(site="barn", stream="dry", seq=1, event_time=1.5, key=None, value=value_text(4.5)),
        LogLine(site="barn", stream="dry", seq=2, event_time=2.0, key="u1", value=value_text({"t": 1}), epoch=3),
    ]
    data = encode_lines(lines)
    assert data.splitlines()[0] == b'{"site":"barn","stream":"dry","seq":1,"event_time":1.5,"key":null,"value":"4.5"}'
    assert b'"value":{"t":1},"epoch":3}' in data
    assert list(decode_lines(data)) == lines


def test_the_columns_are_the_fields_spark_reads() -> None:
    assert COLUMNS == (
        ("site", "string"),
        ("stream", "string"),
        ("seq", "int64"),
        ("event_time", "float64"),
        ("key", "string"),
        ("value", "string"),
    )


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (b"{", "malformed log line"),
        (b'{"site": "a", "stream": "x", "seq": 1, "event_time": 1.0, "key": null}', "missing required field `value`"),
        (b'{"site": "a", "stream": "x", "seq": 1.5, "event_time": 1.0, "key": null, "value": "1"}', r"\$\.seq"),
    ],
)
def test_malformed_lines_are_refused(line: bytes, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        decode_line(line)
