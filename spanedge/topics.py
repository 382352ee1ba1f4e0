"""MQTT topic names shared by agents, the hub and the simulator."""

from __future__ import annotations

PREFIX = "spanedge/v1"


def data(app: str, stream: str, site: str) -> str:
    """Edge-to-hub data: batches of records of ``stream`` produced at ``site``."""
    return f"{PREFIX}/{app}/{stream}/{site}"


def dlq(app: str, site: str) -> str:
    """Records of ``app`` at ``site`` that could not be processed, with the reason."""
    return f"{PREFIX}/{app}/dlq/{site}"


def control(site: str, kind: str) -> str:
    """Control topics of a site: ``plan``, ``heartbeat`` or ``probe``."""
    if kind not in ("plan", "heartbeat", "probe"):
        msg = f"control topic kind must be plan, heartbeat or probe, got {kind!r}"
        raise ValueError(msg)
    return f"{PREFIX}/control/{site}/{kind}"


def parse_data(topic: str) -> tuple[str, str, str] | None:
    """Split a data topic into ``(app, stream, site)``; ``None`` if it is not one."""
    parts = topic.split("/")
    if len(parts) != 5 or "/".join(parts[:2]) != PREFIX or parts[2] == "control" or parts[3] == "dlq":
        return None
    return parts[2], parts[3], parts[4]
