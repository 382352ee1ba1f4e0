"""The hub faults of a simulated topology: ``kill-hub`` and ``pause-hub``, on the hub or the leader of two.

:class:`HubFaults` is the part of :class:`simulate.cluster.Cluster` that
finds the leading hub (with ``--ha``, the one whose ``/healthz`` says
``"role": "leader"``) and kills, pauses and resumes its process group.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess

from hub.api.client import HubClient
from simulate.processes import Child
from spanedge.errors import SpanEdgeError

#: Seconds a resumed hub with ``--ha`` takes at most to see it lost its lease and exit (the hub's default lease).
HA_LEASE_S = 10.0


class HubFaults:
    """Kills, pauses, resumes and measures the hub processes in ``hubs`` (their REST clients in ``_clients``)."""

    hubs: dict[str, Child]
    _clients: dict[str, HubClient]

    async def sample_cpu(self, interval: float = 1.0) -> None:
        """Sample the hubs' CPU time every ``interval`` seconds, until cancelled."""
        while True:
            for hub in self.hubs.values():
                hub.sample_cpu()
            await asyncio.sleep(interval)

    def hub_cpu(self) -> float | None:
        """CPU seconds the hubs and their children used (None without a hub)."""
        return sum(hub.sample_cpu() for hub in self.hubs.values()) if self.hubs else None

    def leader(self) -> str | None:
        """The name of the hub that leads (its ``/healthz`` says ``"role": "leader"``), or None."""
        for name, client in self._clients.items():
            try:
                if self.hubs[name].alive and client.health(timeout=5).get("role", "leader") == "leader":
                    return name
            except (SpanEdgeError, ValueError):
                continue
        return None

    def _leading(self) -> str:
        return (self.leader() or "hub") if len(self.hubs) > 1 else "hub"

    def kill_hub(self) -> str:
        """SIGKILL the (leading) hub's whole process group, Spark's JVM included (blocks until reaped)."""
        name = self._leading()
        self.hubs[name].kill()
        return name

    def start_hub_again(self, name: str) -> None:
        """Start hub ``name`` again with its command (with ``--ha``: as a standby, if another took over)."""
        self.hubs[name].start()

    def pause_hub(self) -> str:
        """SIGSTOP the (leading) hub's process group."""
        name = self._leading()
        self.hubs[name].signal(signal.SIGSTOP)
        return name

    def resume_hub(self, name: str, lease_s: float = HA_LEASE_S) -> str:
        """SIGCONT hub ``name``; with ``--ha``, a hub that lost its lease meanwhile exits and is started again."""
        hub = self.hubs[name]
        hub.signal(signal.SIGCONT)
        if len(self.hubs) == 1 or hub.proc is None:
            return "it goes on"
        try:
            code = hub.proc.wait(timeout=lease_s)
        except subprocess.TimeoutExpired:
            return "it kept its lease and goes on leading"
        hub.start()
        return f"it had lost its lease, exited with status {code} and was started again as a standby"
