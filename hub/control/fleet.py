"""The hub's fleet: the sites of its ``sites.yaml``, the sites enrolled since, and the sites revoked.

``spanedge site add`` adds a spoke without touching ``sites.yaml`` (which stays
read-only): the hub keeps the sites it added, when each was first heard from,
and the names it revoked, in ``<state-dir>/fleet.json``, and merges them over
``sites.yaml`` when it starts::

    {"added": {"truck-12": {<the site as sites.yaml writes it>}},
     "joined": {"truck-12": 1767225500.0},
     "revoked": {"truck-12": {"at": 1767225600.0, "serials": [...]}}}

An added site is planned nowhere until it *joins*: the hub's first heartbeat
from its agent (:meth:`hub.control.coordinator.Coordinator.await_join`). A file
of an older hub, without ``joined``, counts every site it added as joined (that
hub planned them from their addition on).

A revoked site stays in the fleet (the plans and their history name it) but
is refused everywhere: its certificate, its broker rules, its messages at the
ingest and any placement but its own sources.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from hub.control.state import Documents, write_json_atomic
from spanedge.errors import InvalidSites, SpanEdgeError
from spanedge.sites import Site, Sites, Tier


class Fleet:
    """The merged sites, the added ones and the revoked names, persisted in ``path``; thread-safe."""

    def __init__(self, declared: Sites, path: Path, documents: Documents | None = None) -> None:
        """Merge what ``path`` holds over the ``declared`` sites.

        With ``documents`` the fleet is kept there as ``fleet`` (``path`` is read once, when they hold none).

        Raises:
            SpanEdgeError: ``path`` cannot be read, or its sites no longer fit ``sites.yaml``.
        """
        self.declared = declared
        self.path = Path(path)
        self.documents = documents
        self._lock = threading.Lock()
        data = self._load()
        self._added: dict[str, Any] = dict(data.get("added", {}))
        self._joined: dict[str, float | None] = dict(data.get("joined", dict.fromkeys(self._added)))
        self._revoked: dict[str, Any] = dict(data.get("revoked", {}))
        try:
            self.sites = self._merged(self._added)
        except InvalidSites as exc:
            msg = f"{self.path}: the sites added with 'spanedge site add' do not fit {exc}; fix or delete the file"
            raise SpanEdgeError(msg) from None

    def _load(self) -> dict[str, Any]:
        kept = self.documents.load_document("fleet") if self.documents is not None else None
        if kept is not None:
            return dict(kept)
        if not self.path.exists():
            return {}
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError) as exc:
            msg = f"cannot read the hub's fleet file {self.path}: {exc}; fix or delete it (added sites are lost)"
            raise SpanEdgeError(msg) from None
        if not isinstance(data, dict):
            msg = f"{self.path}: expected a mapping with 'added', 'joined' and 'revoked', got {type(data).__name__}"
            raise SpanEdgeError(msg)
        return data

    def _merged(self, added: dict[str, Any]) -> Sites:
        data = self.declared.to_data()
        data["sites"] = {**data["sites"], **added}
        return Sites.of(data, f"{self.path} over sites.yaml")

    def _save(self) -> None:
        data = {"added": self._added, "joined": self._joined, "revoked": self._revoked}
        if self.documents is not None:
            self.documents.save_document("fleet", data)
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.path, data)
        self.path.chmod(0o600)

    def add(self, name: str, site: dict[str, Any]) -> Site:
        """Add spoke ``name`` (``site`` as ``sites.yaml`` writes a site); return it checked.

        Raises:
            InvalidSites: the name is taken (or was revoked), or the site is invalid.
        """
        with self._lock:
            if name in self._revoked:
                msg = f"site {name!r} was revoked; enrol the gateway under another name"
                raise InvalidSites(msg)
            if name in self.sites.sites and name not in self._added:
                msg = f"site {name!r} is already in sites.yaml; choose another name"
                raise InvalidSites(msg)
            added = {**self._added, name: {**site, "tier": str(Tier.SPOKE)}}
            merged = self._merged(added)
            self._added, self.sites = added, merged
            self._save()
            return merged.sites[name]

    def revoke(self, name: str, at: float, serials: list[int]) -> None:
        """Record spoke ``name`` revoked at ``at`` with its certificates ``serials``.

        Raises:
            InvalidSites: no spoke of that name.
        """
        with self._lock:
            site = self.sites.site(name)
            if site.tier is not Tier.SPOKE:
                msg = f"site {name!r} is a hub; only spokes can be revoked"
                raise InvalidSites(msg)
            self._revoked[name] = {"at": at, "serials": serials}
            self._save()

    def join(self, name: str, at: float) -> None:
        """Record that site ``name``, added with ``spanedge site add``, was first heard from at ``at``."""
        with self._lock:
            if name in self._added and name not in self._joined:
                self._joined[name] = at
                self._save()

    def joined(self, name: str) -> bool:
        """Whether site ``name`` was added and has been heard from since (or is declared in ``sites.yaml``)."""
        return name not in self._added or name in self._joined

    def joining(self) -> list[str]:
        """The sites added with ``spanedge site add`` and not heard from yet (a revoked one never will be)."""
        with self._lock:
            return [name for name in self._added if name not in self._joined]

    def revoked(self) -> dict[str, float]:
        """When each revoked site was revoked."""
        with self._lock:
            return {name: float(entry["at"]) for name, entry in self._revoked.items()}

    def is_revoked(self, name: str) -> bool:
        """Whether site ``name`` was revoked."""
        return name in self._revoked

    def enrolled(self, name: str) -> bool:
        """Whether site ``name`` was added with ``spanedge site add`` (not declared in ``sites.yaml``)."""
        return name in self._added


def gateway_view(sites: Sites, name: str) -> dict[str, Any]:
    """The ``sites.yaml`` data a joining gateway gets: every site without credentials, as ``name`` connects.

    The gateway logs in to every broker with its own certificate, so usernames, password
    variables and TLS files are left out (``spanedge agent join`` fills in its own files).
    """
    data = sites.to_data()
    data["sites"] = {
        site: {k: v for k, v in entry.items() if k not in ("username", "password_env", "tls", "name")}
        for site, entry in data["sites"].items()
    }
    data.pop("simulation", None)
    return data


def site_entry(broker: str, cpu: float, labels: dict[str, str], streams: dict[str, Any]) -> dict[str, Any]:
    """A spoke's entry as ``sites.yaml`` writes it (checked when it is added)."""
    entry: dict[str, Any] = {"tier": "spoke", "broker": broker, "cpu": cpu, "labels": labels, "streams": streams}
    return {k: v for k, v in entry.items() if v not in ({}, None)}
