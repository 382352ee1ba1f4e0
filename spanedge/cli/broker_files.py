"""The files ``spanedge broker-config`` writes, with the owner and mode each needs.

Mosquitto 2 started as root switches to an unprivileged account (``user``, by default ``mosquitto``)
before it opens its password file, ACL, certificates, key, revocation list and persistence directory, so
a file only root may read stops the broker. The files a broker reads are therefore owned by the
account it runs as (:class:`BrokerOwner`) and readable by that account alone (0600, directories 0700);
the configuration itself (no secret) is read as root before the switch. The credentials handed to the
sites stay with whoever ran the command.
"""

from __future__ import annotations

import grp
import os
import pwd
from dataclasses import dataclass
from pathlib import Path

from spanedge.errors import SpanEdgeError
from spanedge.private_files import FILE_MODE, private_dir, write_private

DEFAULT_BROKER_USER = "mosquitto"


class BrokerFilesError(SpanEdgeError):
    """A broker file cannot be written or given to the broker's account."""


@dataclass(frozen=True)
class BrokerOwner:
    """The account a broker runs as, which owns the files it reads: a name for the config's ``user``, ids."""

    user: str | None
    uid: int
    gid: int

    @classmethod
    def parse(cls, text: str) -> BrokerOwner:
        """``USER[:GROUP]``, names or numeric ids (``mosquitto``, ``1883:1883``).

        Raises:
            BrokerFilesError: the user or group is unknown on this machine.
        """
        user, _, group = text.partition(":")
        try:
            entry = pwd.getpwuid(int(user)) if user.isdigit() else pwd.getpwnam(user)
        except KeyError:
            entry = None
        if entry is None and not user.isdigit():
            msg = f"--broker-owner: no user {user!r} on this machine; create it or give the numeric uid (1883)"
            raise BrokerFilesError(msg)
        uid = int(user) if user.isdigit() else entry.pw_uid  # type: ignore[union-attr]
        gid = entry.pw_gid if entry is not None else uid
        if group:
            try:
                gid = int(group) if group.isdigit() else grp.getgrnam(group).gr_gid
            except KeyError:
                msg = f"--broker-owner: no group {group!r} on this machine; give the numeric gid"
                raise BrokerFilesError(msg) from None
        return cls(None if user.isdigit() else user, uid, gid)

    @classmethod
    def default(cls) -> BrokerOwner | None:
        """``mosquitto`` when the command runs as root (a root-started broker switches to it), else nobody.

        Raises:
            BrokerFilesError: run as root on a machine without a ``mosquitto`` user.
        """
        if os.geteuid() != 0:
            return None
        try:
            return cls.parse(DEFAULT_BROKER_USER)
        except BrokerFilesError:
            msg = (
                "running as root, but there is no 'mosquitto' user to give the broker's files to; "
                "pass --broker-owner USER[:GROUP] (the account Mosquitto runs as)"
            )
            raise BrokerFilesError(msg) from None


class BrokerFiles:
    """Writes the files of the brokers, giving those a broker reads to its owner (if any)."""

    def __init__(self, owner: BrokerOwner | None) -> None:
        self.owner = owner

    def _give(self, path: Path) -> None:
        if self.owner is None:
            return
        try:
            os.chown(path, self.owner.uid, self.owner.gid)
        except OSError as exc:
            msg = (
                f"cannot give {path} to the broker's account (uid {self.owner.uid}): {exc.strerror}; "
                "run the command as root (sudo), or leave out --broker-owner and start Mosquitto as yourself"
            )
            raise BrokerFilesError(msg) from None

    def directory(self, path: Path) -> Path:
        """A directory the broker must traverse (0755: it holds no secret, only files that are 0600)."""
        try:
            path.mkdir(parents=True, exist_ok=True)
            path.chmod(0o755)
        except OSError as exc:
            msg = f"cannot create {path}: {exc.strerror}; pass --out in a writable directory"
            raise BrokerFilesError(msg) from None
        return path

    def secret(self, path: Path, data: bytes) -> Path:
        """A file only the broker reads (0600, the broker's account): the password file, ACL, server key."""
        try:
            write_private(path, data)
        except OSError as exc:
            msg = f"cannot write {path}: {exc.strerror}; pass --out in a writable directory"
            raise BrokerFilesError(msg) from None
        self._give(path)
        return path

    def public(self, path: Path, data: bytes) -> Path:
        """A file without secrets (0644): a config, a certificate."""
        try:
            self.secret(path, data).chmod(0o644)
        except OSError as exc:
            msg = f"cannot set the mode of {path}: {exc.strerror}"
            raise BrokerFilesError(msg) from None
        return path

    def data_dir(self, path: Path) -> Path:
        """The broker's persistence directory (0700, the broker's account, which writes it)."""
        try:
            private_dir(path)
        except OSError as exc:
            msg = f"cannot create {path}: {exc.strerror}; pass --out in a writable directory"
            raise BrokerFilesError(msg) from None
        self._give(path)
        return path

    def reach_crl(self, ca_dir: Path) -> None:
        """Let the broker's group into the CA directory (0750) to read ``crl.pem``; the CA key stays 0600.

        Nothing changes when the broker runs as the CA's owner or when no owner is given.
        """
        if self.owner is None or ca_dir.stat().st_uid == self.owner.uid:
            return
        key = ca_dir / "ca-key.pem"
        if key.exists() and key.stat().st_mode & 0o077:
            key.chmod(FILE_MODE)
        try:
            os.chown(ca_dir, -1, self.owner.gid)
            ca_dir.chmod(0o750)
        except OSError as exc:
            msg = (
                f"cannot let the broker's group (gid {self.owner.gid}) into {ca_dir} to read its crl.pem: "
                f"{exc.strerror}; run the command as root (sudo)"
            )
            raise BrokerFilesError(msg) from None
