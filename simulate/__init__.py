"""Simulated multi-site topologies on one machine.

``spanedge simulate sites.yaml app.py`` reads its inputs
(:mod:`simulate.scenario`), starts a broker per site and a WAN emulator per
link (:mod:`simulate.topology`, :mod:`simulate.wan`), the hub and one agent
per spoke (:mod:`simulate.cluster`, :mod:`simulate.processes`), waits until
they are ready (:mod:`simulate.readiness`), sends seeded sensor data
(:mod:`simulate.sensor_fleet`, :mod:`simulate.sensors`), injects faults
(:mod:`simulate.fault_schedule`, :mod:`simulate.faults`), waits for the
results to drain (:mod:`simulate.drain`) and checks every sink against a
plain-Python reference (:mod:`simulate.reference`, :mod:`simulate.checking`)
in a report (:mod:`simulate.report`), also written as ``report.html`` with
charts of what was measured over time (:mod:`simulate.timeline`,
:mod:`simulate.charts`, :mod:`simulate.report_html`).
:func:`simulate.runner.run` does the same from code.
"""
