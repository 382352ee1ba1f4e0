"""Ed25519 plan signatures: only the hub's key makes a plan agents accept, and every refusal says why."""

from __future__ import annotations

import base64
import logging
import os
from pathlib import Path
from typing import Any

import orjson
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from hypothesis import given, settings
from hypothesis import strategies as st

from spanedge.errors import InvalidKey, InvalidPlan, SpanEdgeError
from spanedge.signing import (
    ENV_KEY_FILE,
    ENV_PUBLIC_KEY_FILE,
    ENV_PUBLIC_KEYS,
    PlanPublicKey,
    PlanSigningKey,
    TrustedKeys,
    load_signing_key,
    load_trusted_keys,
    parse_trusted_keys,
    sign_plan,
    verify_plan,
)

HUB = PlanSigningKey.generate()
OTHER = PlanSigningKey.generate()
TRUSTED = TrustedKeys([HUB.public_key])
PAYLOAD = {"site": "truck-7", "version": 3, "apps": []}
PROPERTIES = settings(database=None, max_examples=100, deadline=None)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
payloads = st.dictionaries(st.text(max_size=12), json_values, max_size=6)


def _envelope(message: bytes) -> dict[str, Any]:
    outer = orjson.loads(message)
    assert isinstance(outer, dict)
    return outer


def test_round_trip_returns_the_payload_and_the_key_id() -> None:
    verified = verify_plan(sign_plan(PAYLOAD, HUB), TRUSTED)
    assert verified.payload == PAYLOAD
    assert verified.key_id == HUB.key_id
    outer = _envelope(sign_plan(PAYLOAD, HUB))
    assert sorted(outer) == ["alg", "kid", "payload", "sig", "v"]
    assert (outer["v"], outer["alg"], outer["kid"]) == (1, "ed25519", HUB.key_id)


def test_key_ids_are_short_fingerprints_of_the_public_key() -> None:
    assert len(HUB.key_id) == 16
    assert int(HUB.key_id, 16) >= 0
    assert HUB.key_id != OTHER.key_id
    again = PlanPublicKey.from_text(HUB.public_key.to_text(), "test")
    assert again == HUB.public_key
    assert again.key_id == HUB.key_id


def test_another_key_names_the_key_it_got_and_the_ones_trusted() -> None:
    message = sign_plan(PAYLOAD, OTHER)
    with pytest.raises(InvalidPlan, match=f"signed with key '{OTHER.key_id}'.*trusts only key ids \\[{HUB.key_id}\\]"):
        verify_plan(message, TRUSTED)


def test_an_agent_key_cannot_pass_as_the_hub_by_naming_its_key_id() -> None:
    outer = _envelope(sign_plan(PAYLOAD, OTHER))
    outer["kid"] = HUB.key_id
    with pytest.raises(InvalidPlan, match=f"signature does not verify under key {HUB.key_id}"):
        verify_plan(orjson.dumps(outer), TRUSTED)


def test_altered_payload_or_signature_is_refused() -> None:
    outer = _envelope(sign_plan(PAYLOAD, HUB))
    altered = {**outer, "payload": outer["payload"].replace('"version":3', '"version":4')}
    assert altered != outer
    with pytest.raises(InvalidPlan, match="does not verify"):
        verify_plan(orjson.dumps(altered), TRUSTED)
    signature = bytearray(base64.b64decode(outer["sig"]))
    signature[0] ^= 1
    with pytest.raises(InvalidPlan, match="does not verify"):
        verify_plan(orjson.dumps({**outer, "sig": base64.b64encode(bytes(signature)).decode()}), TRUSTED)
    for sig in ("", "not base64!", base64.b64encode(bytes(signature[:32])).decode()):
        with pytest.raises(InvalidPlan, match="does not verify"):
            verify_plan(orjson.dumps({**outer, "sig": sig}), TRUSTED)


def test_a_signature_in_non_canonical_base64_is_refused() -> None:
    outer = _envelope(sign_plan(PAYLOAD, HUB))
    sig = outer["sig"]
    assert sig.endswith("==")
    # the last character before the padding carries 4 unused bits; setting one keeps the decoded bytes
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    twin = sig[:-3] + alphabet[alphabet.index(sig[-3]) | 1] + "=="
    if twin == sig:
        twin = sig[:-3] + alphabet[alphabet.index(sig[-3]) & ~1 | 2] + "=="
    assert base64.b64decode(twin) == base64.b64decode(sig)
    with pytest.raises(InvalidPlan, match="does not verify"):
        verify_plan(orjson.dumps({**outer, "sig": twin}), TRUSTED)


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (b"", r"not a signed envelope .*got not JSON"),
        (b"\xff\xfe", r"not a signed envelope .*got not JSON"),
        (b"[1, 2]", r"not a signed envelope .*got JSON list"),
        (b"{}", r"not a signed envelope .*got fields \[\]"),
        (b'{"v": 1, "alg": "ed25519", "kid": "x", "payload": "{}"}', r"got fields \['alg', 'kid', 'payload', 'v'\]"),
        (b'{"payload": "{}", "sig": "ab"}', r"got fields \['payload', 'sig'\]"),
        (b'{"v": 2, "alg": "ed25519", "kid": "x", "payload": "{}", "sig": ""}', r"envelope version 2 is not 1"),
        (b'{"v": true, "alg": "ed25519", "kid": "x", "payload": "{}", "sig": ""}', r"envelope version True"),
        (b'{"v": 1.0, "alg": "ed25519", "kid": "x", "payload": "{}", "sig": ""}', r"envelope version 1\.0"),
        (b'{"v": 1, "alg": "hmac", "kid": "x", "payload": "{}", "sig": ""}', r"unsupported signature algorithm 'hmac'"),
        (b'{"v": 1, "alg": "ed25519", "kid": 7, "payload": "{}", "sig": ""}', r"field 'kid' must be a string"),
        (b'{"v": 1, "alg": "ed25519", "kid": "x", "payload": {}, "sig": ""}', r"field 'payload' must be a string"),
    ],
)
def test_messages_that_are_not_signed_envelopes(message: bytes, reason: str) -> None:
    with pytest.raises(InvalidPlan, match=reason):
        verify_plan(message, TRUSTED)


def test_a_signed_payload_that_is_not_an_object_is_refused() -> None:
    outer = _envelope(sign_plan(PAYLOAD, HUB))
    for body in ("[1]", "not json"):
        sig = base64.b64encode(HUB.sign(b"spanedge plan v1\x00" + body.encode())).decode()
        with pytest.raises(InvalidPlan, match="not a JSON object"):
            verify_plan(orjson.dumps({**outer, "payload": body, "sig": sig}), TRUSTED)


def test_the_signature_is_bound_to_plan_messages() -> None:
    outer = _envelope(sign_plan(PAYLOAD, HUB))
    bare = base64.b64encode(HUB.sign(outer["payload"].encode())).decode()
    with pytest.raises(InvalidPlan, match="does not verify"):
        verify_plan(orjson.dumps({**outer, "sig": bare}), TRUSTED)


def test_rotation_trusts_old_and_new_keys() -> None:
    both = TrustedKeys([HUB.public_key, OTHER.public_key, HUB.public_key])
    assert len(both) == 2
    assert both.ids == sorted([HUB.key_id, OTHER.key_id])
    assert verify_plan(sign_plan(PAYLOAD, HUB), both).key_id == HUB.key_id
    assert verify_plan(sign_plan(PAYLOAD, OTHER), both).key_id == OTHER.key_id
    assert parse_trusted_keys(both.to_text(), "trusted.pub").ids == both.ids


def test_nothing_trusted_refuses_everything() -> None:
    with pytest.raises(InvalidPlan, match=r"trusts only key ids \[none\]"):
        verify_plan(sign_plan(PAYLOAD, HUB), TrustedKeys([]))


def test_private_key_is_not_in_its_repr() -> None:
    pem = HUB.to_pem().decode()
    assert HUB.key_id in repr(HUB)
    assert pem.splitlines()[1] not in repr(HUB)
    assert PlanSigningKey.from_pem(HUB.to_pem(), "test").key_id == HUB.key_id


# -- loading keys -------------------------------------------------------------


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in (ENV_KEY_FILE, ENV_PUBLIC_KEYS, ENV_PUBLIC_KEY_FILE):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_hub_key_from_the_environment(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with pytest.raises(InvalidKey, match=f"spanedge keys generate --out DIR.*{ENV_KEY_FILE}"):
        load_signing_key()
    path = tmp_path / "plan-key.pem"
    path.write_bytes(HUB.to_pem())
    path.chmod(0o600)
    clean_env.setenv(ENV_KEY_FILE, str(path))
    assert load_signing_key().key_id == HUB.key_id
    clean_env.setenv(ENV_KEY_FILE, str(tmp_path / "missing.pem"))
    with pytest.raises(InvalidKey, match=r"cannot read the plan-signing key .*missing\.pem"):
        load_signing_key()


@pytest.mark.skipif(os.name != "posix", reason="file modes are POSIX")
def test_a_key_others_can_read_is_used_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "plan-key.pem"
    path.write_bytes(HUB.to_pem())
    path.chmod(0o644)
    with caplog.at_level(logging.WARNING, logger="spanedge.signing"):
        assert load_signing_key(path).key_id == HUB.key_id
    assert "chmod 600" in caplog.text


def test_keys_that_are_not_ed25519_pem(tmp_path: Path) -> None:
    with pytest.raises(InvalidKey, match="not a PEM private key"):
        PlanSigningKey.from_pem(b"hello", "k.pem")
    ec_key = ec.generate_private_key(ec.SECP256R1())
    pem = ec_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    with pytest.raises(InvalidKey, match="the key is a .*, not Ed25519"):
        PlanSigningKey.from_pem(pem, "k.pem")
    public = ec_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    with pytest.raises(InvalidKey, match="the key is a .*, not Ed25519"):
        PlanPublicKey.from_pem(public, "k.pub")
    encrypted = HUB._key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"pw"),
    )
    with pytest.raises(InvalidKey, match="encrypted"):
        PlanSigningKey.from_pem(encrypted, "k.pem")


def test_agent_keys_from_the_environment_and_a_file(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with pytest.raises(InvalidKey, match=f"no trusted plan key: set {ENV_PUBLIC_KEYS}"):
        load_trusted_keys()
    clean_env.setenv(ENV_PUBLIC_KEYS, f" {HUB.public_key.to_text()} ,\n")
    assert load_trusted_keys().ids == [HUB.key_id]
    trust = tmp_path / "trusted.pub"
    trust.write_text(f"# rotation\n\n{OTHER.public_key.to_text()}  # key id {OTHER.key_id}\n")
    clean_env.setenv(ENV_PUBLIC_KEY_FILE, str(trust))
    assert load_trusted_keys().ids == sorted([HUB.key_id, OTHER.key_id])
    clean_env.delenv(ENV_PUBLIC_KEYS)
    assert load_trusted_keys().ids == [OTHER.key_id]
    assert load_trusted_keys(keys=HUB.public_key.to_text(), key_file=trust).ids == sorted([HUB.key_id, OTHER.key_id])
    clean_env.setenv(ENV_PUBLIC_KEY_FILE, str(tmp_path / "missing.pub"))
    with pytest.raises(InvalidKey, match=f"cannot read the trusted plan keys file .*{ENV_PUBLIC_KEY_FILE}"):
        load_trusted_keys()


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("abc", r"trusted\.pub:2: a value of 3 characters is not a public key"),
        (base64.b64encode(b"x" * 31).decode(), "is not a public key"),
        ("-----BEGIN PRIVATE KEY-----", "found a PEM block.*spanedge keys public KEYFILE"),
    ],
)
def test_malformed_trust_files_name_the_line(text: str, reason: str) -> None:
    with pytest.raises(InvalidKey, match=reason):
        parse_trusted_keys(f"# keys\n{text}\n", "trusted.pub")


def test_a_wrong_value_is_not_echoed(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv(ENV_PUBLIC_KEYS, "x" * 100)
    with pytest.raises(InvalidKey, match=f"{ENV_PUBLIC_KEYS}: a value of 100 characters is not a public key") as info:
        load_trusted_keys()
    assert "xxxx" not in str(info.value)


def test_the_private_key_in_place_of_a_public_key_is_named(clean_env: pytest.MonkeyPatch) -> None:
    body = "".join(HUB.to_pem().decode().splitlines()[1:-1])
    clean_env.setenv(ENV_PUBLIC_KEYS, body)
    with pytest.raises(InvalidKey, match="this is the hub's private key, not its public key") as info:
        load_trusted_keys()
    assert body not in str(info.value)


def test_key_errors_are_spanedge_value_errors() -> None:
    assert issubclass(InvalidKey, SpanEdgeError)
    assert issubclass(InvalidKey, ValueError)


# -- properties ---------------------------------------------------------------


@PROPERTIES
@given(st.binary(max_size=512))
def test_arbitrary_bytes_raise_only_invalid_plan(message: bytes) -> None:
    with pytest.raises(InvalidPlan):
        verify_plan(message, TRUSTED)


envelope_fields = st.fixed_dictionaries(
    {},
    optional={
        "v": json_values | st.just(1),
        "alg": json_values | st.just("ed25519"),
        "kid": json_values | st.just(HUB.key_id),
        "payload": json_values | st.text(),
        "sig": json_values | st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/="),
    },
)


@PROPERTIES
@given(envelope_fields, st.dictionaries(st.text(max_size=5), json_values, max_size=2))
def test_arbitrary_envelopes_raise_only_invalid_plan(fields: dict[str, Any], extra: dict[str, Any]) -> None:
    message = orjson.dumps({**extra, **fields})
    with pytest.raises(InvalidPlan):
        verify_plan(message, TRUSTED)


@PROPERTIES
@given(payloads)
def test_every_payload_round_trips(payload: dict[str, Any]) -> None:
    assert verify_plan(sign_plan(payload, HUB), TRUSTED).payload == orjson.loads(orjson.dumps(payload))


@PROPERTIES
@given(payloads, st.data())
def test_no_single_byte_change_yields_another_payload(payload: dict[str, Any], data: st.DataObject) -> None:
    message = bytearray(sign_plan(payload, HUB))
    position = data.draw(st.integers(0, len(message) - 1))
    message[position] = data.draw(st.integers(0, 255).filter(lambda b: b != message[position]))
    try:
        verified = verify_plan(bytes(message), TRUSTED)
    except InvalidPlan:
        return
    # only a change that leaves the signed text as it was (e.g. the case of a \u escape) may pass
    assert verified.payload == orjson.loads(orjson.dumps(payload))
