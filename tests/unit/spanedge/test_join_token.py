"""Join tokens: their text round-trips, and any altered one is refused by its shape or its hash."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spanedge.errors import InvalidJoinToken
from spanedge.join_token import PREFIX, digest_matches, new_join_token, parse_join_token, token_digest

FINGERPRINT = "ab" * 32
TOKEN = new_join_token("truck-12", FINGERPRINT)


def test_a_token_carries_its_site_and_the_pinned_ca_and_round_trips() -> None:
    assert TOKEN.text.startswith(f"{PREFIX}.truck-12.")
    assert TOKEN.ca_sha256 == FINGERPRINT
    assert parse_join_token(TOKEN.text) == TOKEN
    assert TOKEN.secret not in repr(TOKEN)


def test_two_tokens_of_one_site_differ() -> None:
    assert new_join_token("truck-12", FINGERPRINT).text != new_join_token("truck-12", FINGERPRINT).text


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "expected sej1.<site>"),
        ("sej1.truck-12.0123", "got 3 parts"),
        (TOKEN.text.replace(PREFIX, "sej2", 1), "expected sej1"),
        (TOKEN.text.replace("truck-12", "Truck-12"), "uppercase"),
        (TOKEN.text.replace(TOKEN.token_id, "xyz"), "its id"),
        (TOKEN.text.replace(TOKEN.secret, TOKEN.secret[:-1]), "its secret"),
        (TOKEN.text[:-1], "its CA fingerprint"),
    ],
)
def test_a_malformed_token_says_which_part_is_wrong(text: str, says: str) -> None:
    with pytest.raises(InvalidJoinToken, match="malformed join token") as caught:
        parse_join_token(text)
    assert says in str(caught.value)
    assert TOKEN.secret not in str(caught.value)


def test_a_token_that_is_not_text_is_refused() -> None:
    with pytest.raises(InvalidJoinToken, match="a join token is text"):
        parse_join_token(None)


@given(position=st.integers(min_value=0), replacement=st.characters(codec="ascii"))
def test_any_altered_character_fails_the_hash(position: int, replacement: str) -> None:
    """Whatever single character changes (site, id, secret or pinned CA), the stored hash no longer matches."""
    text = TOKEN.text
    i = position % len(text)
    altered = text[:i] + replacement + text[i + 1 :]
    assert digest_matches(altered, token_digest(text)) is (altered == text)


@given(extra=st.text(min_size=1, max_size=5))
def test_a_longer_or_shorter_token_fails_the_hash(extra: str) -> None:
    stored = token_digest(TOKEN.text)
    assert not digest_matches(TOKEN.text + extra, stored)
    assert not digest_matches(TOKEN.text[: -len(extra)], stored)


@given(site=st.from_regex(r"[a-z0-9][a-z0-9_-]{0,62}", fullmatch=True))
def test_every_site_name_makes_a_token_that_parses_back(site: str) -> None:
    if site in ("plan", "heartbeat", "probe"):
        with pytest.raises(InvalidJoinToken, match="reserved"):
            new_join_token(site, FINGERPRINT)
        return
    token = new_join_token(site, FINGERPRINT)
    assert parse_join_token(token.text).site == site
