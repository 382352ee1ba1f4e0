"""The device rule: a sink that writes to ``"device:NAME"`` runs only at a spoke that declares ``NAME``.

The app names a device and each spoke's ``devices:`` in ``sites.yaml`` says where it is, so the
sink must run where the binding is: :mod:`placement.problem` keeps only those spokes among
its candidates (reaching past its source site's own spoke if that one lacks the device), and
:func:`placement.constraints.violations` reports a placement that breaks the rule.
"""

from __future__ import annotations

from spanedge.errors import InfeasiblePlacement
from spanedge.operators import Operator
from spanedge.sinks import ConnectorSinkSpec
from spanedge.sites import Sites


def device_sites(op: Operator, sites: Sites) -> tuple[str, ...] | None:
    """The spokes a sink writing to ``"device:NAME"`` may run at: those declaring ``NAME`` (``None``: no such rule).

    Raises:
        InfeasiblePlacement: no spoke declares the device (with the sink's scheme).
    """
    spec = op.sink
    if not isinstance(spec, ConnectorSinkSpec) or spec.device is None:
        return None
    name = spec.device
    found = tuple(
        s.name for s in sites.with_device(name) if not spec.connector or s.devices[name].connector == spec.connector
    )
    if not found:
        kind = f"a {spec.connector}:// " if spec.connector else "a "
        msg = (
            f"sink {op.describe()} writes to device {name!r}, but no spoke in sites.yaml declares {kind}device "
            f"by that name; add devices: {{{name}: {{url: ...}}}} under the spokes on that device's network"
        )
        raise InfeasiblePlacement(msg)
    return found
