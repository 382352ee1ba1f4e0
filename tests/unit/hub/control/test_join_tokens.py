"""The hub's join tokens: single use, expiring, bound to a site, kept only as hashes, bounded attempts."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hub.control.join_tokens import FAILURE_WINDOW_S, MAX_FAILURES, JoinRefused, JoinTokens
from spanedge.errors import SpanEdgeError

FINGERPRINT = "cd" * 32


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def tokens(tmp_path: Path, clock: Clock) -> JoinTokens:
    return JoinTokens(tmp_path / "join-tokens.json", ttl_s=3600, clock=clock)


def test_a_token_is_redeemed_once_then_refused_as_used(tokens: JoinTokens) -> None:
    token, _ = tokens.issue("truck-12", FINGERPRINT)
    assert tokens.redeem(token.text, "truck-12").site == "truck-12"
    with pytest.raises(JoinRefused, match="already used at .*single use") as caught:
        tokens.redeem(token.text, "truck-12")
    assert caught.value.status == 403


def test_a_token_expires_after_its_lifetime(tokens: JoinTokens, clock: Clock) -> None:
    token, expires = tokens.issue("truck-12", FINGERPRINT)
    assert expires == clock.now + 3600
    clock.now = expires
    with pytest.raises(JoinRefused, match="expired at .*spanedge site add truck-12"):
        tokens.redeem(token.text)


def test_a_shorter_lifetime_can_be_asked_for(tokens: JoinTokens, clock: Clock) -> None:
    _, expires = tokens.issue("truck-12", FINGERPRINT, ttl_s=60)
    assert expires == clock.now + 60


def test_a_token_for_another_site_is_refused(tokens: JoinTokens) -> None:
    token, _ = tokens.issue("truck-12", FINGERPRINT)
    with pytest.raises(JoinRefused, match="enrols site 'truck-12', not 'truck-13'"):
        tokens.redeem(token.text, "truck-13")
    assert tokens.redeem(token.text, "truck-12").site == "truck-12"  # the refusal did not use it up


def test_a_malformed_token_is_a_400(tokens: JoinTokens) -> None:
    with pytest.raises(JoinRefused, match="malformed join token") as caught:
        tokens.redeem("not-a-token")
    assert caught.value.status == 400


def test_only_a_hash_is_stored_and_it_survives_a_restart(tmp_path: Path, tokens: JoinTokens, clock: Clock) -> None:
    token, _ = tokens.issue("truck-12", FINGERPRINT)
    path = tmp_path / "join-tokens.json"
    text = path.read_text()
    assert token.secret not in text
    assert token.text not in text
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert set(json.loads(text)[token.token_id]) == {"site", "sha256", "issued_at", "expires_at"}
    again = JoinTokens(path, clock=clock)
    assert again.redeem(token.text).site == "truck-12"
    with pytest.raises(JoinRefused, match="already used"):
        JoinTokens(path, clock=clock).redeem(token.text)


def test_withdrawn_tokens_of_a_revoked_site_are_refused(tokens: JoinTokens) -> None:
    token, _ = tokens.issue("truck-12", FINGERPRINT)
    assert tokens.withdraw("truck-12") == 1
    with pytest.raises(JoinRefused, match="was revoked"):
        tokens.redeem(token.text)


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(position=st.integers(min_value=0), replacement=st.sampled_from("0123456789abcdefABCXYZ-_."))
def test_any_tampering_is_refused(tmp_path: Path, position: int, replacement: str) -> None:
    tokens = JoinTokens(tmp_path / f"tokens-{position}-{ord(replacement)}.json")
    token, _ = tokens.issue("truck-12", FINGERPRINT)
    i = position % len(token.text)
    altered = token.text[:i] + replacement + token.text[i + 1 :]
    if altered == token.text:
        return
    with pytest.raises(JoinRefused) as caught:
        tokens.redeem(altered)
    assert caught.value.status in (400, 403)
    assert tokens.redeem(token.text).site == "truck-12"  # the real one still works once


def test_a_burst_of_bad_tokens_is_cut_off_then_the_window_passes(tokens: JoinTokens, clock: Clock) -> None:
    token, _ = tokens.issue("truck-12", FINGERPRINT)
    guess = token.text[:-5] + "00000"
    for _ in range(MAX_FAILURES):
        with pytest.raises(JoinRefused, match="not issued by this hub, or was altered"):
            tokens.redeem(guess, client="203.0.113.9")
    with pytest.raises(JoinRefused, match="too many refused joins from this address") as caught:
        tokens.redeem(token.text, client="203.0.113.9")  # even the right token waits, from that address
    assert caught.value.status == 429
    other, _ = tokens.issue("truck-13", FINGERPRINT)
    assert tokens.redeem(other.text, client="198.51.100.7").site == "truck-13"  # a gateway elsewhere is not held up
    clock.now += FAILURE_WINDOW_S + 1
    assert tokens.redeem(token.text, client="203.0.113.9").site == "truck-12"


def test_an_unreadable_token_file_says_what_to_do(tmp_path: Path) -> None:
    path = tmp_path / "join-tokens.json"
    path.write_text("[1, 2")
    with pytest.raises(SpanEdgeError, match="delete the file"):
        JoinTokens(path)
