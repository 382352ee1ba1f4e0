"""Fixtures for the integration tests: the one SparkSession of the test session."""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import missing_part


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The one SparkSession of the test session (skipped, with the reason, if Spark cannot start)."""
    for module in ("pyspark", "pyarrow"):
        if importlib.util.find_spec(module) is None:
            missing_part(f"{module} is not installed: pip install 'spanedge[hub]'")
    if shutil.which("java") is None:
        missing_part("java is not installed; Spark needs a JDK 17+ (apt-get install openjdk-17-jre-headless)")
    from hub.engine.session import build_session

    session = build_session("local[2]", app_name="spanedge-tests")
    yield session
    session.stop()
