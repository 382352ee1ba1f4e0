"""Fixtures shared by all test layers."""

from __future__ import annotations

import contextlib
import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest
from hypothesis import HealthCheck, settings

from tests.postgres import Server
from tests.postgres import postgres_server as tests_server

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"

# No per-example deadline and no check of how fast examples are generated: on a machine whose cores are busy,
# one example can take seconds; a timing is no property, and a slow example is not a failure. No example
# database in the tree either.
settings.register_profile("spanedge", deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("spanedge")


def missing_part(reason: str) -> NoReturn:
    """Skip a test (or, called at import, its whole module) that needs a part this machine lacks; in CI fail instead.

    CI (``CI`` set) has Mosquitto, Java and the hub and connector extras, so a skip there would hide a broken setup.
    """
    if os.environ.get("CI"):
        pytest.fail(f"CI must have every part: {reason}")
    pytest.skip(reason, allow_module_level=True)


@pytest.fixture
def mosquitto() -> Iterator[object]:
    """A fresh Mosquitto broker on a free port (skipped, with the install hint, if missing)."""
    from simulate.broker import Mosquitto, mosquitto_path
    from spanedge.errors import SpanEdgeError

    try:
        mosquitto_path()
    except SpanEdgeError as exc:
        missing_part(str(exc))
    with Mosquitto() as broker:
        yield broker


@pytest.fixture
def mosquitto_factory() -> Iterator[object]:
    """Start as many brokers as a test needs: ``mosquitto_factory(name)``."""
    from simulate.broker import Mosquitto

    started: list[Mosquitto] = []

    def make(name: str = "broker") -> Mosquitto:
        broker = Mosquitto(name=name).start()
        started.append(broker)
        return broker

    yield make
    for broker in started:
        broker.close()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[Server]:
    """The tests' PostgreSQL server: the machine's, or one started for the session (see :mod:`tests.postgres`)."""
    if importlib.util.find_spec("psycopg") is None:
        missing_part("psycopg is not installed: pip install 'spanedge[postgres]'")
    with contextlib.ExitStack() as stack:
        try:
            server = stack.enter_context(tests_server())
        except LookupError as exc:
            missing_part(str(exc))
        yield server


@pytest.fixture
def postgres_dsn(postgres_server: Server) -> Iterator[str]:
    """The connection string of a database of the test's own, created empty and dropped after the test."""
    with postgres_server.database() as dsn:
        yield dsn
