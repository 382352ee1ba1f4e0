"""Simulated sites on their own Linux network namespaces (``spanedge simulate --hosts netns``).

Every site is a namespace with its own addresses, broker and processes; each
site's WAN link is a veth pair to one router namespace, shaped there with
``tc`` and cut by taking it down. :mod:`simulate.netns.layout` names and
addresses everything and builds the commands, :mod:`simulate.netns.host`
runs them and sweeps what dead runs left behind, :mod:`simulate.netns.enter`
makes sockets inside a namespace, and :mod:`simulate.netns.topology` is the
:class:`~simulate.topology.Topology` of such a run.
"""
