"""The ``spanedge keys`` commands: make, show and rotate the hub's plan-signing key.

Files in the key directory (see :mod:`spanedge.signing` for the formats):

* ``plan-key.pem``: the hub's private key (PEM, mode 0600); only the hub reads it
  (``SPANEDGE_PLAN_KEY_FILE``);
* ``plan-key.pub``: its public key, one line; agents trust it
  (``SPANEDGE_PLAN_PUBLIC_KEYS`` or ``SPANEDGE_PLAN_PUBLIC_KEY_FILE``);
* during a rotation, ``plan-key.next.pem`` and ``plan-key.next.pub`` (the new
  pair) and ``trusted.pub`` (old and new public keys, for the agents).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import click

from spanedge.cli.errors import fail
from spanedge.cli.params import PATH, Group, option
from spanedge.errors import InvalidKey

if TYPE_CHECKING:
    from spanedge.signing import PlanSigningKey

# spanedge.signing (and cryptography, ~17 MB) is imported by the commands that use it,
# so that every other command, an agent's above all, does not pay for it at start.

PRIVATE = "plan-key.pem"
PUBLIC = "plan-key.pub"
NEXT_PRIVATE = "plan-key.next.pem"
NEXT_PUBLIC = "plan-key.next.pub"
TRUSTED = "trusted.pub"

keys = Group(
    "keys",
    help="Make, show and rotate the hub's plan-signing key (Ed25519): the hub signs plans, agents verify them.",
    no_args_is_help=True,
)


def _write(path: Path, data: bytes, mode: int, *, force: bool) -> None:
    """Write ``path`` with ``mode``: atomically over an old file with ``force``, never over one without."""
    try:
        if not force:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                os.fsync(handle.fileno())
            return
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as handle:
                os.fchmod(handle.fileno(), mode)
                handle.write(data)
                os.fsync(handle.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        msg = f"cannot write {path}: {exc.strerror}; pass --out with a writable directory"
        raise fail(msg) from None


def _write_pair(directory: Path, key: PlanSigningKey, private: str, public: str, *, force: bool) -> None:
    """Write the private and public key files, refusing before writing either if one exists."""
    from spanedge.signing import TrustedKeys

    existing = [directory / name for name in (private, public) if (directory / name).exists()]
    if existing and not force:
        names = " and ".join(str(p) for p in existing)
        verb = "exists" if len(existing) == 1 else "exist"
        msg = f"{names} already {verb}; pass --force to replace, or --out another directory"
        raise fail(msg)
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        msg = f"cannot create {directory}: {exc.strerror}; pass --out with a writable directory"
        raise fail(msg) from None
    _write(directory / private, key.to_pem(), 0o600, force=force)
    _write(directory / public, TrustedKeys([key.public_key]).to_text().encode(), 0o644, force=force)


@keys.command()
@option("--out", type=PATH, required=True, help="directory for plan-key.pem (private, mode 0600) and plan-key.pub")
@option("--force", is_flag=True, help="replace existing key files")
def generate(out: Path, force: bool) -> None:
    """Make the hub's plan-signing key pair."""
    from spanedge.signing import ENV_KEY_FILE, ENV_PUBLIC_KEYS, PlanSigningKey

    key = PlanSigningKey.generate()
    _write_pair(out, key, PRIVATE, PUBLIC, force=force)
    click.echo(f"wrote {out / PRIVATE} (private key {key.key_id}, mode 0600): keep it on the hub only")
    click.echo(f"wrote {out / PUBLIC} (its public key)")
    click.echo(f"hub:    export {ENV_KEY_FILE}={out / PRIVATE}")
    click.echo(f"agents: export {ENV_PUBLIC_KEYS}={key.public_key.to_text()}")


@keys.command()
@click.argument("keyfile", type=PATH, help="a private key (PEM), a public key (PEM) or a file of public keys")
def public(keyfile: Path) -> None:
    """Print the public key(s) and key id(s) of KEYFILE, one per line, as agents trust them."""
    from spanedge.signing import PlanPublicKey, PlanSigningKey, TrustedKeys, parse_trusted_keys

    try:
        data = keyfile.read_bytes()
    except OSError as exc:
        msg = f"cannot read {keyfile}: {exc.strerror}"
        raise fail(msg) from None
    try:
        if b"PRIVATE KEY-----" in data:
            trusted = TrustedKeys([PlanSigningKey.from_pem(data, str(keyfile)).public_key])
        elif b"-----BEGIN PUBLIC KEY-----" in data:
            trusted = TrustedKeys([PlanPublicKey.from_pem(data, str(keyfile))])
        else:
            trusted = parse_trusted_keys(data.decode("utf-8", "replace"), str(keyfile))
    except InvalidKey as exc:
        raise fail(exc) from None
    if not len(trusted):
        msg = f"{keyfile} holds no key; pass the hub's plan-key.pem or a file of public keys"
        raise fail(msg)
    click.echo(trusted.to_text(), nl=False)


@keys.command()
@option("--out", type=PATH, required=True, help="the key directory: the new pair goes to plan-key.next.pem/.pub")
@option("--current", type=PATH, help="the hub's current private key (default: OUT/plan-key.pem)")
@option("--force", is_flag=True, help="replace an earlier, unfinished rotation")
def rotate(out: Path, current: Path | None, force: bool) -> None:
    """Make a new key pair and print the trust list agents need meanwhile: old and new public keys.

    The trust list goes to stdout (and OUT/trusted.pub); the steps to finish the rotation go to stderr.
    """
    from spanedge.signing import (
        ENV_KEY_FILE,
        ENV_PUBLIC_KEY_FILE,
        ENV_PUBLIC_KEYS,
        PlanSigningKey,
        TrustedKeys,
        load_signing_key,
    )

    old_file = current if current is not None else out / PRIVATE
    if not old_file.exists():
        msg = f"no current key at {old_file}; run 'spanedge keys generate --out {out}' first, or pass --current FILE"
        raise fail(msg)
    try:
        old = load_signing_key(old_file)
    except InvalidKey as exc:
        raise fail(exc) from None
    new = PlanSigningKey.generate()
    trusted = TrustedKeys([old.public_key, new.public_key])
    trusted_file = out / TRUSTED
    if trusted_file.exists() and not force:
        msg = f"{trusted_file} already exists (an unfinished rotation?); pass --force to replace it"
        raise fail(msg)
    _write_pair(out, new, NEXT_PRIVATE, NEXT_PUBLIC, force=force)
    _write(trusted_file, trusted.to_text().encode(), 0o644, force=force)
    click.echo(trusted.to_text(), nl=False)
    both = ",".join(k.to_text() for k in (old.public_key, new.public_key))
    steps = [
        f"rotation from key {old.key_id} to key {new.key_id}; the trust list above is also in {trusted_file}",
        f"  1. agents: trust both keys, export {ENV_PUBLIC_KEYS}={both}",
        f"     (or {ENV_PUBLIC_KEY_FILE}={trusted_file}), and restart them",
        f"  2. hub: export {ENV_KEY_FILE}={out / NEXT_PRIVATE} (or move it over {old_file}) and restart it;",
        f"     it signs with key {new.key_id} from then on",
        f"  3. once every agent has applied a plan signed with key {new.key_id}: "
        f"export {ENV_PUBLIC_KEYS}={new.public_key.to_text()} on the agents",
    ]
    click.echo("\n".join(steps), err=True)
