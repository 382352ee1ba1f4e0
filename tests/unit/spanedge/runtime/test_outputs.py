"""A bounded excerpt of a payload for dead letters: its start, its size and its hash."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spanedge.runtime.outputs import excerpt

PROPERTIES = settings(database=None, max_examples=300, deadline=None)


def test_a_small_payload_is_shown_whole() -> None:
    assert excerpt(b'{"t": 1}') == {
        "excerpt": '{"t": 1}',
        "size": 8,
        "sha256": hashlib.sha256(b'{"t": 1}').hexdigest(),
        "truncated": False,
    }
    assert excerpt('{"t": 1}') == excerpt(b'{"t": 1}')


def test_a_large_payload_is_cut_at_the_limit() -> None:
    payload = b"x" * 5000
    view = excerpt(payload, limit=1024)
    assert view["excerpt"] == "x" * 1024
    assert view["size"] == 5000
    assert view["sha256"] == hashlib.sha256(payload).hexdigest()
    assert view["truncated"] is True
    assert excerpt(payload, limit=0)["excerpt"] == ""


def test_a_character_cut_by_the_limit_is_left_out() -> None:
    payload = "aé€😀".encode()  # 1, 2, 3 and 4 bytes
    assert [excerpt(payload, limit=n)["excerpt"] for n in range(11)] == [
        "",
        "a",
        "a",
        "aé",
        "aé",
        "aé",
        "aé€",
        "aé€",
        "aé€",
        "aé€",
        "aé€😀",
    ]


def test_bytes_that_are_not_utf8_are_replaced() -> None:
    assert excerpt(b"ok\xff\xfe")["excerpt"] == "ok\ufffd\ufffd"
    assert excerpt("\ud800")["size"] == 3


def test_a_negative_limit_is_an_error() -> None:
    with pytest.raises(ValueError, match="excerpt limit must be >= 0"):
        excerpt(b"x", limit=-1)


@PROPERTIES
@given(st.binary(max_size=300) | st.text(max_size=300), st.integers(0, 400))
def test_the_excerpt_is_bounded_and_the_start_of_the_payload(payload: bytes | str, limit: int) -> None:
    raw = payload.encode("utf-8", "surrogatepass") if isinstance(payload, str) else payload
    view = excerpt(payload, limit)
    assert len(view["excerpt"]) <= limit
    assert view["size"] == len(raw)
    assert view["sha256"] == hashlib.sha256(raw).hexdigest()
    assert view["truncated"] is (len(raw) > limit)
    if isinstance(payload, str):
        assert payload.startswith(view["excerpt"])
        assert len(view["excerpt"].encode()) > limit - 4 or not view["truncated"]
    else:
        assert raw.decode("utf-8", "replace").startswith(view["excerpt"].rstrip("\ufffd"))
