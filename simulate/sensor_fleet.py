"""Driving the sensors of every site: one publisher per site broker, the devices the simulation section asks for."""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Iterable, Mapping

from simulate.broker import Login
from simulate.config import Simulation
from simulate.devices.sensing import NodeSensors
from simulate.drift import Drift, drifts_by_site
from simulate.sensors import Device, Sent, SiteSensors
from spanedge.sites import Sites


class SensorFleet:
    """The sensors of every site of a run and what they sent."""

    def __init__(self, sensors: Mapping[str, SiteSensors] | None = None, nodes: NodeSensors | None = None) -> None:
        """Hold ``sensors`` per site (none until :meth:`build`) and the sensors that are OPC UA ``nodes``."""
        self.sensors: dict[str, SiteSensors] = dict(sensors or {})
        self.nodes = nodes or NodeSensors()

    @classmethod
    def build(
        cls,
        sites: Sites,
        sim: Simulation,
        ports: Mapping[str, int],
        start: float,
        host: str | Mapping[str, str] = "127.0.0.1",
        logins: Mapping[str, Login | None] | None = None,
        held: Collection[str] = (),
        nodes: NodeSensors | None = None,
    ) -> SensorFleet:
        """The devices of every sensor spec, publishing to the broker of their site at ``host:ports[site]``.

        ``host`` is one address for every site, or one per site.

        ``logins`` gives, per site, the credentials and CA its sensors use on a secured broker.

        ``start`` is the wall-clock time event times count from; the QoS of a
        stream is the sensor spec's, else the stream binding's. The sensors of
        the ``held`` sites send nothing until :meth:`release`. The ``device: opcua`` sensors write to
        the servers of ``nodes`` instead (:mod:`simulate.devices.sensing`).
        """
        sensors = {}
        for site, streams in sim.sensors.items():
            devices: list[Device] = []
            qos: dict[str, int] = {}
            for stream, spec in streams.items():
                if spec.device is not None:
                    continue
                binding = sites.sites[site].streams[stream]
                qos[stream] = spec.qos if spec.qos is not None else binding.qos
                devices += [Device(site, stream, i, spec, binding.topic, sim.seed, start) for i in range(spec.count)]
            login = (logins or {}).get(site)
            address = host if isinstance(host, str) else host[site]
            sensors[site] = SiteSensors(site, address, ports[site], devices, qos, login=login, held=site in held)
        if nodes is not None:
            nodes.build(sim.seed, start)
        return cls(sensors, nodes)

    def drift(self, drifts: Iterable[Drift]) -> None:
        """Shift fields of the values some sites' devices make, from a time on (``drift`` faults, :mod:`simulate.drift`)."""
        for site, mine in drifts_by_site(drifts).items():
            sensors = self.sensors.get(site)
            for device in sensors.devices if sensors is not None else ():
                device.drifts = mine

    @property
    def devices(self) -> int:
        """Number of devices over every site."""
        return sum(len(s.devices) for s in self.sensors.values()) + sum(len(s.devices) for s in self.nodes.streams)

    def sent(self) -> list[Sent]:
        """Every message a site broker accepted, site by site."""
        return [s for sensors in self.sensors.values() for s in sensors.sent] + self.nodes.sent()

    def sent_at(self, site: str) -> int:
        """Messages sent at ``site`` so far."""
        sensors = self.sensors.get(site)
        return len(sensors.sent) if sensors else 0

    def pending_at(self, site: str) -> int:
        """Messages due at ``site`` but not yet accepted by its broker."""
        sensors = self.sensors.get(site)
        return sensors.pending if sensors else 0

    def failures_at(self, site: str) -> int:
        """Times the sensors of ``site`` lost their broker."""
        sensors = self.sensors.get(site)
        return sensors.failures if sensors else 0

    def recent(self, since: float) -> int:
        """Messages sent after wall-clock time ``since`` (among the last 2000 of each site)."""
        return sum(1 for s in self.sensors.values() for x in s.sent[-2000:] if x.sent_at > since)

    def release(self, site: str, begin: float) -> None:
        """Let the held sensors of ``site`` send what falls due from ``begin`` seconds after the start on."""
        sensors = self.sensors.get(site)
        if sensors is not None:
            sensors.release(begin)

    def stop(self, site: str) -> None:
        """Stop the sensors of ``site`` for good (a site killed with them)."""
        sensors = self.sensors.get(site)
        if sensors is not None:
            sensors.stop()
        self.nodes.stop(site)

    async def run(self, start_monotonic: float, duration: float) -> None:
        """Send every message due in the first ``duration`` seconds after ``start_monotonic`` (event-loop time)."""
        await asyncio.gather(
            *(s.run(start_monotonic, duration) for s in self.sensors.values()),
            self.nodes.run(start_monotonic, duration),
        )
