"""API tokens: strong enough, scoped (read or admin), compared in constant time, never shown."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spanedge.errors import InvalidToken, SpanEdgeError
from spanedge.tokens import (
    ENV_ADMIN,
    ENV_FILE,
    ENV_READ,
    MIN_TOKEN_BYTES,
    Grant,
    Tokens,
    TokenScope,
    check_token,
    load_tokens,
    parse_tokens_file,
)

ADMIN = secrets.token_urlsafe(32)
READ = secrets.token_urlsafe(32)
PROPERTIES = settings(database=None, max_examples=200, deadline=None)


def test_a_strong_token_passes() -> None:
    assert check_token(ADMIN, "SPANEDGE_TOKEN") == ADMIN
    assert check_token("x" * MIN_TOKEN_BYTES, "t") == "x" * MIN_TOKEN_BYTES


@pytest.mark.parametrize("token", ["", "secret", "x" * (MIN_TOKEN_BYTES - 1)])
def test_a_short_token_is_refused_with_how_to_make_one(token: str) -> None:
    with pytest.raises(InvalidToken, match=f"SPANEDGE_TOKEN: the API token has {len(token)} bytes, fewer than 32"):
        check_token(token, "SPANEDGE_TOKEN")
    with pytest.raises(InvalidToken, match=r"secrets\.token_urlsafe\(32\)"):
        check_token(token, "SPANEDGE_TOKEN")


@pytest.mark.parametrize("token", ["x" * 32 + " y", "x" * 32 + "\t", "é" * 40, "x" * 32 + "\x00"])
def test_a_token_a_header_cannot_carry_is_refused(token: str) -> None:
    with pytest.raises(InvalidToken, match="characters a bearer header cannot carry"):
        check_token(token, "t")


def test_messages_never_show_the_token() -> None:
    weak = "hunter2-is-my-password"
    with pytest.raises(InvalidToken) as info:
        check_token(weak, "t")
    assert weak not in str(info.value)
    with pytest.raises(InvalidToken) as info:
        Tokens([(TokenScope.ADMIN, ADMIN, "a"), (TokenScope.READ, ADMIN, "b")])
    assert ADMIN not in str(info.value)
    tokens = Tokens([(TokenScope.ADMIN, ADMIN, "a"), (TokenScope.READ, READ, "b")])
    assert repr(tokens) == "Tokens(admin=1, read=1)"
    assert ADMIN not in repr(tokens)


def test_scopes() -> None:
    tokens = Tokens([(TokenScope.ADMIN, ADMIN, "a"), (TokenScope.READ, READ, "b")])
    assert tokens.scope_of(ADMIN) is TokenScope.ADMIN
    assert tokens.scope_of(READ.encode()) is TokenScope.READ
    assert tokens.identify(READ) == Grant(TokenScope.READ, "b")
    assert tokens.identify("nope") is None
    assert tokens.scope_of(None) is None
    assert tokens.scope_of("") is None
    assert tokens.scope_of(ADMIN[:-1]) is None
    assert tokens.allows(ADMIN, TokenScope.ADMIN)
    assert tokens.allows(ADMIN, TokenScope.READ)
    assert tokens.allows(READ, TokenScope.READ)
    assert not tokens.allows(READ, TokenScope.ADMIN)
    assert not tokens.allows("nope", TokenScope.READ)
    assert not tokens.allows(None, TokenScope.READ)


def test_an_admin_token_is_required_and_a_token_has_one_scope() -> None:
    with pytest.raises(InvalidToken, match=f"needs an admin API token.*{ENV_ADMIN}"):
        Tokens([(TokenScope.READ, READ, "b")])
    with pytest.raises(InvalidToken, match=r"b: this read token is also configured as admin \(a\)"):
        Tokens([(TokenScope.ADMIN, ADMIN, "a"), (TokenScope.READ, ADMIN, "b")])
    same = Tokens([(TokenScope.ADMIN, ADMIN, "a"), (TokenScope.ADMIN, ADMIN, "b")])
    assert same.count(TokenScope.ADMIN) == 1


def test_load_from_the_environment() -> None:
    tokens = load_tokens(environ={ENV_ADMIN: f" {ADMIN}\n", ENV_READ: READ})
    assert tokens.identify(ADMIN) == Grant(TokenScope.ADMIN, ENV_ADMIN)
    assert tokens.scope_of(READ) is TokenScope.READ
    with pytest.raises(InvalidToken, match=f"{ENV_READ}: the API token has 5 bytes"):
        load_tokens(environ={ENV_ADMIN: ADMIN, ENV_READ: "short"})
    with pytest.raises(InvalidToken, match="needs an admin API token"):
        load_tokens(environ={})


def test_the_token_file_wins_over_the_variable(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text(ADMIN + "\n")
    tokens = load_tokens(path, environ={ENV_ADMIN: READ})
    assert tokens.scope_of(ADMIN) is TokenScope.ADMIN
    assert tokens.scope_of(READ) is None
    path.write_text("\n")
    with pytest.raises(InvalidToken, match="is empty"):
        load_tokens(path, environ={})
    with pytest.raises(InvalidToken, match="cannot read the token file"):
        load_tokens(tmp_path / "missing", environ={})


def test_a_tokens_file_with_scopes(tmp_path: Path) -> None:
    other = secrets.token_urlsafe(32)
    path = tmp_path / "tokens"
    path.write_text(f"# the hub's tokens\n\nadmin {ADMIN}\n  read {READ}\nread {other}\n")
    tokens = load_tokens(environ={ENV_FILE: str(path)})
    assert (tokens.count(TokenScope.ADMIN), tokens.count(TokenScope.READ)) == (1, 2)
    assert tokens.identify(other) == Grant(TokenScope.READ, f"{path}:5")
    assert load_tokens(tokens_file=path, environ={}).scope_of(ADMIN) is TokenScope.ADMIN
    with pytest.raises(InvalidToken, match="cannot read the tokens file"):
        load_tokens(environ={ENV_FILE: str(tmp_path / "missing")})


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("deploy {t}", r"tokens:1: unknown scope 'deploy'; write '<scope> <token>'"),
        ("{t} admin", r"tokens:1: unknown scope of 43 characters \(is the token first\?\)"),
        ("admin", r"tokens:1: expected '<scope> <token>' .*got 1 fields"),
        ("admin {t} extra", "got 3 fields"),
        ("admin short", r"tokens:1: the API token has 5 bytes"),
    ],
)
def test_malformed_tokens_files_name_the_line(line: str, reason: str) -> None:
    text = line.format(t=ADMIN) + "\n"
    with pytest.raises(InvalidToken, match=reason) as info:
        Tokens(parse_tokens_file(text, "tokens"))
    assert ADMIN not in str(info.value)


def test_token_errors_are_spanedge_value_errors() -> None:
    assert issubclass(InvalidToken, SpanEdgeError)
    assert issubclass(InvalidToken, ValueError)


@PROPERTIES
@given(st.text(max_size=80))
def test_any_text_is_accepted_exactly_when_long_and_printable(token: str) -> None:
    expected = len(token.encode()) >= MIN_TOKEN_BYTES and all("!" <= c <= "~" for c in token)
    try:
        check_token(token, "t")
    except InvalidToken:
        assert not expected
    else:
        assert expected


@PROPERTIES
@given(st.binary(max_size=64) | st.text(max_size=64))
def test_only_the_configured_tokens_are_recognised(presented: bytes | str) -> None:
    tokens = Tokens([(TokenScope.ADMIN, ADMIN, "a"), (TokenScope.READ, READ, "b")])
    known = {ADMIN: TokenScope.ADMIN, READ: TokenScope.READ}
    text = presented if isinstance(presented, str) else presented.decode("latin-1")
    assert tokens.scope_of(presented) is known.get(text)
