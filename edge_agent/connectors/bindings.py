"""Connector sinks given ``"device:NAME"``: resolved from the device bindings of the site where they run.

The app names a device (``sinks.modbus("device:valves", points=...)``) and each spoke's
``devices:`` in ``sites.yaml`` says where that device is on its LAN, so one app drives the
equipment of every site. A site that runs such a sink without the binding cannot write its
values: they go to the dead letters with the site, the binding and the fix.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from spanedge.errors import SpanEdgeError
from spanedge.sinks import ConnectorSinkSpec
from spanedge.sites import DeviceBinding


class UnboundDevice(SpanEdgeError):
    """A sink names a device the site where it runs does not declare, or declares with another scheme."""


def bind(spec: ConnectorSinkSpec, site: str, devices: Mapping[str, DeviceBinding]) -> ConnectorSinkSpec:
    """``spec`` with its ``device:NAME`` target replaced by the URL and settings of ``site``'s binding ``NAME``.

    A sink given a URL is returned as it is. The binding's settings (a Modbus unit, OPC UA
    security) come before the sink's own options, which win.

    Raises:
        UnboundDevice: ``site`` declares no device ``NAME``, or one of another scheme than the sink's.
    """
    name = spec.device
    if name is None:
        return spec
    binding = devices.get(name)
    if binding is None:
        declared = ", ".join(sorted(devices)) or "none"
        msg = (
            f"site {site!r} runs a sink that writes to device {name!r}, but its sites.yaml entry declares no such "
            f"device (its devices: {declared}); add devices: {{{name}: {{url: ...}}}} under site {site!r}"
        )
        raise UnboundDevice(msg)
    if spec.connector and binding.connector != spec.connector:
        msg = (
            f"site {site!r}: device {name!r} is {binding.url}, but the sink writes with the {spec.connector}:// "
            f"connector; point devices: {{{name}: {{url: {spec.connector}://...}}}} at a {spec.connector} device"
        )
        raise UnboundDevice(msg)
    options = {**binding.sink_options(), **spec.options}
    return dataclasses.replace(spec, target=binding.url, options=options)
