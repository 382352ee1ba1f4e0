"""The simulator's calls to a managed hub's REST API: readiness, deploys, placement and rollout answers.

:class:`HubCalls` is the part of :class:`simulate.cluster.Cluster` that
talks to the hub (with ``--ha``, to whichever hub leads) and keeps its
answers in the run folder.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hub.api.client import HubClient
from simulate.errors import SimulationError
from simulate.processes import Child
from simulate.readiness import wait_healthy
from simulate.rollout_fault import DeploySpec
from spanedge.errors import SpanEdgeError


class HubCalls:
    """Deploys to, and reads from, the hubs in ``hubs`` through their REST clients (``client`` follows the leader)."""

    hub: Child | None
    hubs: dict[str, Child]
    client: HubClient | None
    _clients: dict[str, HubClient]
    run_dir: Path

    if TYPE_CHECKING:  # given by Cluster and HubFaults

        @property
        def logs(self) -> Path:
            """The folder of the processes' logs."""

        @property
        def hub_url(self) -> str:
            """The managed hub's REST API."""

        @property
        def hub_ca(self) -> Path:
            """The hub's CA certificate."""

        def leader(self) -> str | None:
            """The name of the hub that leads, or None."""

        def check_alive(self, children: Sequence[Child] | None = None) -> None:
            """Raise if a process is not running."""

    def _client(self) -> HubClient:
        if self.client is None:
            msg = "the hub has no REST API in standalone mode"
            raise SimulationError(msg)
        if len(self._clients) > 1:
            self.client = self._clients[self.leader() or "hub"]
        return self.client

    async def wait_hub(self, timeout: float) -> str:
        """Wait until the managed hub answers ``/healthz`` (see :func:`~simulate.readiness.wait_healthy`); a note saying so."""
        hub = self.hub
        assert hub is not None, "start_hub first"
        await wait_healthy(self._client(), timeout, lambda: self.check_alive([hub]), hub.log)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while len(self.hubs) > 1 and await loop.run_in_executor(None, self.leader) is None:
            if loop.time() > deadline:
                msg = f"no hub took the lease within {timeout:.0f} s; see {self.logs}/hub.log and hub-b.log"
                raise SimulationError(msg)
            await asyncio.sleep(0.5)
        # host and port, not the URL: the HTML report, which shows these notes, holds no link
        address = self.hub_url.removeprefix("https://")
        return f"hub up: REST API over HTTPS at {address} (its CA certificate: {self.hub_ca})"

    async def deploy(self, app_file: Path) -> dict[str, Any]:
        """Deploy the app to the managed hub; write its answer to ``deploy.json`` and return it.

        Raises:
            SimulationError: the hub refused the app or could not be reached.
        """
        client = self._client()
        loop = asyncio.get_running_loop()
        try:
            answer = await loop.run_in_executor(None, lambda: client.post_app(app_file.read_text(), app_file.name))
        except SpanEdgeError as exc:
            msg = f"the hub refused the app: {exc}"
            raise SimulationError(msg) from None
        (self.run_dir / "deploy.json").write_text(json.dumps(answer, indent=2))
        return answer

    async def _saved(self, file: str, ask: Callable[[HubClient], dict[str, Any]]) -> dict[str, Any] | None:
        """What ``ask`` gets from the managed hub, also written to ``file`` in the run folder; None if unavailable."""
        if self.client is None:
            return None
        loop = asyncio.get_running_loop()
        try:
            client = await loop.run_in_executor(None, self._client)
            answer = await loop.run_in_executor(None, lambda: ask(client))
        except (SpanEdgeError, ValueError):
            return None
        (self.run_dir / file).write_text(json.dumps(answer, indent=2))
        return answer

    async def placement(self, app: str) -> dict[str, Any] | None:
        """The managed hub's placement of ``app`` (also written to ``placement.json``); None if unavailable."""
        return await self._saved("placement.json", lambda client: client.placement(app, timeout=10))

    def deploy_version(self, spec: DeploySpec) -> str:
        """Deploy a new version of the app (the ``deploy`` fault, :mod:`simulate.rollout_fault`); what the hub said."""
        try:
            # named like the first version (deploy): the hub's query fingerprints read both the same way
            answer = self._client().post_app(spec.file.read_text(), spec.file.name, rollout=spec.options())
        except (SpanEdgeError, SimulationError, OSError) as exc:
            return f"the hub refused it: {exc}"
        version = answer.get("version")
        if spec.stages is None:
            return f"plan v{version} at every site at once"
        return f"a rollout in stages {spec.stages} (plan v{version} once it passes)"

    async def rollout(self, app: str) -> dict[str, Any] | None:
        """The managed hub's last rollout of ``app`` (also written to ``rollout.json``); None if it has none."""
        return await self._saved("rollout.json", lambda client: client.rollout(app))
