"""Sink constructors: where a stream's results go."""

from __future__ import annotations

from spanedge.operators import SinkSpec


def mqtt(topic: str) -> SinkSpec:
    """Publish results to an MQTT topic on the broker of the site where the sink runs."""
    return SinkSpec("mqtt", topic)


def file(path: str) -> SinkSpec:
    """Append results as JSON lines (edge) or Parquet files (hub) under ``path``."""
    return SinkSpec("file", path)


def console() -> SinkSpec:
    """Print results to standard output."""
    return SinkSpec("console")


def memory(name: str) -> SinkSpec:
    """Keep results in memory under ``name``, for tests."""
    return SinkSpec("memory", name)
