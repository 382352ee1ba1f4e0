"""The processes of a simulated topology: the hub and one agent per spoke, on the topology's brokers and WAN.

Managed mode starts ``spanedge hub`` and deploys the app over its REST API (HTTPS, verified against the CA
the hub makes in its state directory) with :class:`hub.api.client.HubClient`; standalone mode starts ``python -m
hub.dataplane`` and the agents with a plan file. :class:`Cluster` is also
the :class:`~simulate.fault_schedule.FaultTarget` of the run.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import sys
from collections.abc import Sequence
from pathlib import Path

from edge_agent.heartbeat import CPU_BUDGET_FILE
from hub.api.client import HubClient
from simulate.broker import Mosquitto, free_port
from simulate.errors import SimulationError
from simulate.hub_calls import HubCalls
from simulate.hub_faults import HubFaults
from simulate.joins import enrol
from simulate.processes import Child, spanedge_command
from simulate.topology import OBSERVER, Topology, hub_ca_dir
from spanedge.errors import SpanEdgeError
from spanedge.signing import ENV_PUBLIC_KEY_FILE, PlanSigningKey

#: Seconds a spoke is silent before the simulated hub counts it as gone (``kill-site``).
SITE_GRACE_S = 20.0
#: Seconds a spoke stays over its CPU budget before the simulated hub re-plans it (``overload``).
OVERLOAD_FOR_S = 10.0
#: Seconds a capped spoke must be able to carry its old load before the simulated hub restores it.
OVERLOAD_RECOVER_S = 20.0


def hub_argv(
    mode: str,
    sites_file: Path,
    state_dir: Path,
    *,
    hub_site: str,
    spark_master: str,
    port: int = 0,
    app_file: Path | None = None,
    plan_file: Path | None = None,
    hub_command: Sequence[str] | None = None,
) -> list[str]:
    """The command of the hub: ``spanedge hub`` (managed) or ``python -m hub.dataplane`` with a plan (standalone).

    ``hub_command`` replaces the program and keeps the options (from ``--sites`` on).
    """
    if mode == "managed":
        argv = spanedge_command(
            "hub", "--sites", str(sites_file), "--state-dir", str(state_dir), "--port", str(port),
            "--spark-master", spark_master, "--hub-site", hub_site, "--min-replan-interval", "10",
            "--site-grace", str(SITE_GRACE_S), "--overload-for", str(OVERLOAD_FOR_S),
            "--overload-recover", str(OVERLOAD_RECOVER_S),
        )  # fmt: skip
    else:
        if app_file is None or plan_file is None:
            msg = "standalone mode starts the hub's data plane with an app and a plan file"
            raise SimulationError(msg)
        argv = [
            sys.executable, "-m", "hub.dataplane", "--sites", str(sites_file), "--state-dir", str(state_dir),
            "--app", str(app_file), "--plan", str(plan_file), "--spark-master", spark_master,
        ]  # fmt: skip
    if hub_command is not None:
        argv = [*hub_command, *argv[argv.index("--sites") :]]
    return argv


def agent_argv(
    site: str, sites_file: Path, state_dir: Path, heartbeat_interval: float, plan_file: Path | None = None
) -> list[str]:
    """The command of the agent of ``site`` (with ``--plan`` in standalone mode)."""
    args = [
        "agent", "--site", site, "--sites", str(sites_file), "--state-dir", str(state_dir),
        "--heartbeat-interval", str(heartbeat_interval),
        "--peer-probe-interval", str(5 * heartbeat_interval),
    ]  # fmt: skip
    if plan_file is not None:
        args += ["--plan", str(plan_file)]
    return spanedge_command(*args)


class Cluster(HubFaults, HubCalls):
    """The hub and agent processes of a run, their credentials, and the hub's REST client in managed mode."""

    def __init__(self, topology: Topology, run_dir: Path, hub_site: str, spokes: Sequence[str]) -> None:
        """Prepare fresh credentials; nothing starts until :meth:`start_hub` and :meth:`start_agents`."""
        self.topology = topology
        self.run_dir = run_dir
        self.hub_site = hub_site
        self.spokes = list(spokes)
        self.token = secrets.token_hex(16)
        # the hub signs plans with a key of this run; agents trust only its public key
        plan_key = PlanSigningKey.generate()
        key_file = run_dir / "plan-key.pem"
        key_file.parent.mkdir(parents=True, exist_ok=True)
        key_file.write_bytes(plan_key.to_pem())
        key_file.chmod(0o600)
        self.env = {
            "SPANEDGE_TOKEN": self.token,
            "SPANEDGE_PLAN_KEY_FILE": str(key_file),
            "SPANEDGE_PLAN_PUBLIC_KEYS": plan_key.public_key.to_text(),
            "PYTHONUNBUFFERED": "1",
        }
        self.hub: Child | None = None
        #: every hub process: the hub, and with ``--ha`` the standby started beside it (``hub-b``)
        self.hubs: dict[str, Child] = {}
        self._clients: dict[str, HubClient] = {}
        self.agents: dict[str, Child] = {}
        self.dead: set[str] = set()  # spokes killed for good
        self.client: HubClient | None = None
        self.heartbeat_interval = 2.0

    @property
    def hub_ca(self) -> Path:
        """The CA certificate of the managed hub's REST API (in its state directory, ``<run>/hub/ca``)."""
        return hub_ca_dir(self.run_dir) / "ca.pem"

    @property
    def hub_url(self) -> str:
        """The managed hub's REST API URL.

        Raises:
            SimulationError: the hub runs in standalone mode, without the API.
        """
        return self._client().url

    @property
    def logs(self) -> Path:
        """The directory of the processes' logs."""
        return self.run_dir / "logs"

    def children(self) -> list[Child]:
        """Every process started so far: the agents, then the hub."""
        return [*self.agents.values(), *self.hubs.values()]

    def start_hub(
        self,
        mode: str,
        spark_master: str,
        app_file: Path,
        plan_file: Path | None = None,
        hub_command: Sequence[str] | None = None,
        ha: str | None = None,
    ) -> Child:
        """Start the hub (managed: on a free port, with a REST client for it).

        With ``ha`` (a PostgreSQL connection string: managed mode only) two hubs start on the one state
        directory, ``hub`` and ``hub-b``, with ``--ha``; the REST client follows whichever leads.
        """
        names = ("hub", "hub-b") if ha is not None else ("hub",)
        for name in names:
            self._start_one(name, mode, spark_master, app_file, plan_file, hub_command, ha)
        self.hub = self.hubs["hub"]
        self.client = self._clients.get("hub")
        return self.hub

    def _start_one(
        self,
        name: str,
        mode: str,
        spark_master: str,
        app_file: Path,
        plan_file: Path | None,
        hub_command: Sequence[str] | None,
        ha: str | None,
    ) -> None:
        port = free_port() if mode == "managed" else 0
        argv = hub_argv(
            mode,
            self.topology.files[self.hub_site],
            self.run_dir / "hub",
            hub_site=self.hub_site,
            spark_master=spark_master,
            port=port,
            app_file=app_file,
            plan_file=plan_file,
            hub_command=hub_command,
        )
        rest = self.topology.host(self.hub_site)
        if mode == "managed":
            argv += self._broker_files() + self.topology.rest_options(self.hub_site)
            # the hub makes its CA at its first start: the client reads the CA certificate at its first request
            self._clients[name] = HubClient(f"https://{rest}:{port}", self.token, timeout=120, ca_file=self.hub_ca)
        if ha is not None:
            argv += ["--ha", ha, "--ha-name", name]
        env = {**self.env, **self.topology.env(self.hub_site)}  # the hub logs in to the brokers as its site
        argv = self.topology.wrap(self.hub_site, argv)
        self.hubs[name] = Child(name, argv, self.logs / f"{name}.log", env).start()

    def _broker_files(self) -> list[str]:
        """The hub's options that make it keep the secured brokers' ACLs and reload them (``site revoke``)."""
        if not self.topology.secure:
            return []
        argv = ["--broker-dir", str(self.topology.acl_dir), "--broker-observer", OBSERVER]
        for broker in self.topology.brokers.values():
            if isinstance(broker, Mosquitto):
                argv += ["--broker-pid-file", str(broker.pid_file)]
        return argv

    def start_agents(self, heartbeat_interval: float, plan_file: Path | None = None) -> None:
        """Start one agent per spoke."""
        self.heartbeat_interval = heartbeat_interval
        for site in self.spokes:
            argv = agent_argv(
                site, self.topology.files[site], self.run_dir / "agents" / site, heartbeat_interval, plan_file
            )
            env = {**self.env, **self.topology.env(site)}  # each agent logs in to the brokers as its own site
            argv = self.topology.wrap(site, argv)
            self.agents[site] = Child(f"agent-{site}", argv, self.logs / f"agent-{site}.log", env).start()

    def check_alive(self, children: Sequence[Child] | None = None) -> None:
        """Raise if one of ``children`` (default: all) exited, with the last lines of its log.

        Raises:
            SimulationError: a process exited.
        """
        for child in self.children() if children is None else children:
            if child.proc is not None and child.proc.poll() is not None:
                msg = (
                    f"{child.name} exited with code {child.proc.returncode}; last lines of {child.log}:\n{child.tail()}"
                )
                raise SimulationError(msg)

    def check_agents(self) -> None:
        """:meth:`check_alive` for the agents only."""
        self.check_alive(list(self.agents.values()))

    def stopped(self) -> list[str]:
        """A problem line for every process that is not running (it should be, until :meth:`stop`)."""
        named = [*self.agents.items(), *self.hubs.items()]
        return [
            f"{name} is not running at the end; see {child.log}"
            for name, child in named
            if not child.alive and name not in self.dead
        ]

    async def stop(self) -> None:
        """Stop every process, concurrently."""
        loop = asyncio.get_running_loop()
        await asyncio.gather(*(loop.run_in_executor(None, c.stop) for c in self.children()), return_exceptions=True)

    # -- the fault target ----------------------------------------------------------------------

    def partition(self, site: str) -> None:
        """Cut every WAN link of ``site``."""
        self.topology.partition(site)

    def heal(self, site: str) -> None:
        """Heal every WAN link of ``site``."""
        self.topology.heal(site)

    def set_latency(self, site: str, delay_ms: float) -> None:
        """Set the one-way delay of every WAN link of ``site``."""
        self.topology.set_latency(site, delay_ms)

    def restart_broker(self, site: str) -> None:
        """Stop and start the broker of ``site`` (blocks)."""
        self.topology.brokers[site].restart()

    def kill_agent(self, site: str) -> None:
        """SIGKILL the agent of ``site`` (blocks until reaped)."""
        self.agents[site].kill()

    def start_agent(self, site: str) -> None:
        """Start the agent of ``site`` again with the same command."""
        self.agents[site].start()

    def restart_hub(self) -> None:
        """Stop the (leading) hub gracefully and start it again (blocks)."""
        if self.hubs:
            self.hubs[self._leading()].restart()

    def kill_site(self, site: str) -> None:
        """SIGKILL the agent of ``site`` for good (blocks until reaped)."""
        self.dead.add(site)
        self.agents[site].kill()

    def revoke_site(self, site: str) -> list[str]:
        """Revoke ``site`` at the managed hub (blocks); its agent keeps running, refused by the brokers.

        Raises:
            SimulationError: standalone mode, or the hub refused.
        """
        try:
            answer = self._client().revoke_site(site)
        except SpanEdgeError as exc:
            msg = f"the hub did not revoke {site}: {exc}"
            raise SimulationError(msg) from None
        record = self.run_dir / "revocations" / f"{site}.json"
        record.parent.mkdir(exist_ok=True)
        record.write_text(json.dumps(answer, indent=2))
        return [
            *answer.get("brokers_reloaded", []),
            f"apps re-planned: {', '.join(answer.get('replanned', [])) or 'none'}",
        ]

    async def join_site(self, site: str) -> list[str]:
        """Add ``site`` at the managed hub and enrol it with ``spanedge agent join``, then run its agent.

        See :func:`simulate.joins.enrol`; what was done, one line each.

        Raises:
            SimulationError: standalone mode, the hub refused, or the join failed.
        """
        client = self._client()
        port = int(client.url.rsplit(":", 1)[1])
        joined = await enrol(self.topology, client, site, self.hub_site, port, self.run_dir, self.logs)
        argv = agent_argv(site, joined.sites_file, joined.state_dir, self.heartbeat_interval)
        env = {"PYTHONUNBUFFERED": "1", ENV_PUBLIC_KEY_FILE: str(joined.plan_key_file)}  # only what the join gave it
        agent = Child(f"agent-{site}", self.topology.wrap(site, argv), self.logs / f"agent-{site}.log", env)
        self.agents[site] = agent.start()
        self.spokes.append(site)
        return [*joined.lines, f"its agent runs with the sites.yaml and plan key the hub answered ({joined.state_dir})"]

    def agent_cpu_seconds(self, site: str) -> float:
        """CPU seconds the agent of ``site`` used so far."""
        return self.agents[site].sample_cpu()

    def set_cpu_budget(self, site: str, cores: float | None) -> None:
        """Write (or, for None, remove) the CPU budget file the agent of ``site`` reads before each heartbeat."""
        path = self.run_dir / "agents" / site / CPU_BUDGET_FILE
        if cores is None:
            path.unlink(missing_ok=True)
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(f"{cores:.6f}\n")
        tmp.replace(path)
