"""``spanedge keys``: generate, show and rotate the hub's plan-signing key."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner
from cryptography.hazmat.primitives import serialization

from spanedge.cli.keys import keys
from spanedge.signing import (
    PlanSigningKey,
    TrustedKeys,
    load_signing_key,
    load_trusted_keys,
    parse_trusted_keys,
    sign_plan,
    verify_plan,
)


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(keys, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_generate_writes_a_private_key_only_its_owner_reads(tmp_path: Path) -> None:
    out = tmp_path / "keys"
    code, stdout, _ = run("generate", "--out", str(out))
    assert code == 0
    key = load_signing_key(out / "plan-key.pem")
    trusted = load_trusted_keys(keys="", key_file=out / "plan-key.pub")
    assert trusted.ids == [key.key_id]
    assert verify_plan(sign_plan({"site": "a"}, key), trusted).payload == {"site": "a"}
    assert f"export SPANEDGE_PLAN_KEY_FILE={out / 'plan-key.pem'}" in stdout
    assert f"export SPANEDGE_PLAN_PUBLIC_KEYS={key.public_key.to_text()}" in stdout
    assert key.key_id in stdout
    if os.name == "posix":
        assert stat.S_IMODE((out / "plan-key.pem").stat().st_mode) == 0o600


def test_generate_refuses_to_overwrite_without_force(tmp_path: Path) -> None:
    assert run("generate", "--out", str(tmp_path))[0] == 0
    first = load_signing_key(tmp_path / "plan-key.pem")
    code, _, stderr = run("generate", "--out", str(tmp_path))
    assert code == 2
    assert "already exist" in stderr
    assert "--force" in stderr
    assert load_signing_key(tmp_path / "plan-key.pem").key_id == first.key_id
    (tmp_path / "plan-key.pem").chmod(0o644)
    assert run("generate", "--out", str(tmp_path), "--force")[0] == 0
    second = load_signing_key(tmp_path / "plan-key.pem")
    assert second.key_id != first.key_id
    assert parse_trusted_keys((tmp_path / "plan-key.pub").read_text(), "pub").ids == [second.key_id]
    if os.name == "posix":
        assert stat.S_IMODE((tmp_path / "plan-key.pem").stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_generate_refuses_when_only_the_public_file_exists(tmp_path: Path) -> None:
    (tmp_path / "plan-key.pub").write_text("keep me\n")
    code, _, stderr = run("generate", "--out", str(tmp_path))
    assert code == 2
    assert "plan-key.pub already exists;" in stderr
    assert not (tmp_path / "plan-key.pem").exists()


def test_public_prints_the_line_agents_trust(tmp_path: Path) -> None:
    key = PlanSigningKey.generate()
    (tmp_path / "k.pem").write_bytes(key.to_pem())
    code, stdout, _ = run("public", str(tmp_path / "k.pem"))
    assert code == 0
    assert stdout == f"{key.public_key.to_text()}  # key id {key.key_id}\n"
    assert parse_trusted_keys(stdout, "stdout").ids == [key.key_id]
    other = PlanSigningKey.generate()
    (tmp_path / "trusted.pub").write_text(TrustedKeys([key.public_key, other.public_key]).to_text())
    code, stdout, _ = run("public", str(tmp_path / "trusted.pub"))
    assert code == 0
    assert parse_trusted_keys(stdout, "stdout").ids == sorted([key.key_id, other.key_id])


def test_public_reads_a_pem_public_key(tmp_path: Path) -> None:
    key = PlanSigningKey.generate()
    pem = key._key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    (tmp_path / "k.pub.pem").write_bytes(pem)
    code, stdout, _ = run("public", str(tmp_path / "k.pub.pem"))
    assert code == 0
    assert stdout == f"{key.public_key.to_text()}  # key id {key.key_id}\n"


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (None, "cannot read"),
        ("", "holds no key"),
        ("garbage\n", "is not a public key"),
        ("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n", "not a PEM public key"),
        ("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n", "not a PEM private key"),
    ],
)
def test_public_of_something_else_fails_with_one_line(tmp_path: Path, content: str | None, reason: str) -> None:
    path = tmp_path / "k"
    if content is not None:
        path.write_text(content)
    code, stdout, stderr = run("public", str(path))
    assert code == 2
    assert stdout == ""
    assert reason in stderr
    assert "Traceback" not in stderr


def test_rotate_prints_the_old_and_new_keys_and_the_steps(tmp_path: Path) -> None:
    assert run("generate", "--out", str(tmp_path))[0] == 0
    old = load_signing_key(tmp_path / "plan-key.pem")
    code, stdout, stderr = run("rotate", "--out", str(tmp_path))
    assert code == 0
    new = load_signing_key(tmp_path / "plan-key.next.pem")
    trusted = parse_trusted_keys(stdout, "stdout")
    assert trusted.ids == sorted([old.key_id, new.key_id])
    assert parse_trusted_keys((tmp_path / "trusted.pub").read_text(), "file").ids == trusted.ids
    assert parse_trusted_keys((tmp_path / "plan-key.next.pub").read_text(), "file").ids == [new.key_id]
    for message in (sign_plan({"v": 1}, old), sign_plan({"v": 2}, new)):
        verify_plan(message, trusted)
    assert f"rotation from key {old.key_id} to key {new.key_id}" in stderr
    assert f"SPANEDGE_PLAN_PUBLIC_KEYS={old.public_key.to_text()},{new.public_key.to_text()}" in stderr
    assert f"SPANEDGE_PLAN_KEY_FILE={tmp_path / 'plan-key.next.pem'}" in stderr
    assert load_signing_key(tmp_path / "plan-key.pem").key_id == old.key_id
    if os.name == "posix":
        assert stat.S_IMODE((tmp_path / "plan-key.next.pem").stat().st_mode) == 0o600
    code, _, stderr = run("rotate", "--out", str(tmp_path))
    assert code == 2
    assert "unfinished rotation" in stderr
    assert run("rotate", "--out", str(tmp_path), "--force")[0] == 0


def test_rotate_needs_a_current_key(tmp_path: Path) -> None:
    code, _, stderr = run("rotate", "--out", str(tmp_path))
    assert code == 2
    assert f"no current key at {tmp_path / 'plan-key.pem'}; run 'spanedge keys generate --out {tmp_path}'" in stderr
    elsewhere = tmp_path / "hub.pem"
    elsewhere.write_bytes(PlanSigningKey.generate().to_pem())
    assert run("rotate", "--out", str(tmp_path / "new"), "--current", str(elsewhere))[0] == 0
    assert (tmp_path / "new" / "trusted.pub").is_file()


def test_without_arguments_it_shows_help() -> None:
    result = CliRunner().invoke(keys, [])
    assert "generate" in result.output
    assert "rotate" in result.output
