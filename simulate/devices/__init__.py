"""Simulated field devices: an OPC UA server and a Modbus TCP server on a free port, as a site's equipment.

Each needs its connector's extra (``spanedge[opcua]``, ``spanedge[modbus]``); they are imported
only where a run or a benchmark declares such a device.
"""
