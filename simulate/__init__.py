"""Simulated multi-site topologies on one machine.

``spanedge simulate sites.yaml app.py`` starts a broker per site, a WAN
emulator per link (:mod:`simulate.wan`), the hub and one agent per spoke
(:mod:`simulate.processes`, :mod:`simulate.topology`), sends seeded sensor
data (:mod:`simulate.sensors`), injects faults (:mod:`simulate.faults`) and
checks every sink against a plain-Python reference (:mod:`simulate.reference`,
:mod:`simulate.report`). :func:`simulate.runner.run` does the same from code.
"""
