"""The REST API fuzzed from its own OpenAPI schema with schemathesis, in process, over a started hub.

The hub runs its control plane against a real Mosquitto (no Spark) with the cold-chain example deployed,
and its API object (``Hub.api()``) answers in process (ASGI). Every operation of ``/openapi.json`` gets
examples that fit its schema and examples that do not; every answer must have a status the operation
documents and match the schema documented for it, no answer may be a 500, and every error is the
documented ``{"error", "detail"}``. The run is bounded and the same each time: :data:`EXAMPLES` per
operation and kind, drawn from a fixed seed.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable

from hub.server import Hub, HubConfig
from spanedge.sites import parse_sites
from spanedge.tokens import Tokens, TokenScope
from tests.conftest import missing_part
from tests.keys import KEY

ROOT = Path(__file__).resolve().parents[2]
COLD_CHAIN = ROOT / "examples" / "cold_chain"
TOKEN = "fuzz-admin-token-0123456789abcdef0123456"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
DEPLOYED = "cold-chain"
#: Examples per operation and per kind (fitting the schema, or not).
EXAMPLES = 25

pytestmark = pytest.mark.timeout(600)


@pytest.fixture
def api(mosquitto: Any, tmp_path: Path) -> Iterator[Any]:
    """The API object of a started hub, with the cold-chain app deployed."""
    sites = parse_sites((COLD_CHAIN / "sites.yaml").read_text().replace("mqtt://localhost:1883", mosquitto.url))
    tokens = Tokens([(TokenScope.ADMIN, TOKEN, "SPANEDGE_TOKEN")])
    hub = Hub(sites, HubConfig(tokens=tokens, plan_key=KEY, state_dir=tmp_path / "hub", spark=False, plain_http=True))
    hub.start()
    try:
        hub.coordinator.deploy((COLD_CHAIN / "app.py").read_text(), "app.py")
        yield hub.api(dashboard_stream_s=0.0)  # a stream of one snapshot: each example reads a whole stream
    finally:
        hub.stop()


def error_form(ctx: Any, response: Any, case: Any) -> bool | None:
    """An error is exactly ``{"error", "detail"}``, both strings."""
    if response.status_code < 400:
        return None
    body = response.json()
    assert isinstance(body, dict), body
    assert set(body) == {"error", "detail"}, body
    assert all(isinstance(v, str) and v for v in body.values()), body
    return True


def no_server_error(ctx: Any, response: Any, case: Any) -> bool | None:
    assert response.status_code < 500, response.text
    return True


def test_every_operation_answers_as_its_schema_says(api: Any) -> None:
    try:
        import schemathesis
        from schemathesis import GenerationMode
        from schemathesis.specs.openapi.checks import positive_data_acceptance
    except ImportError:
        missing_part("schemathesis is not installed: pip install 'spanedge[dev]'")

    schema = schemathesis.openapi.from_asgi("/openapi.json", api)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 12
    operations.sort(key=lambda op: op.method == "delete")  # deleting the deployed app comes last
    for operation in operations:
        fixed = {"name": DEPLOYED} if "{name}" in operation.path else None
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            cases = operation.as_strategy(generation_mode=mode)
            if fixed and mode is GenerationMode.POSITIVE:  # the deployed app, as well as names that are not
                cases = st.one_of(cases, operation.as_strategy(generation_mode=mode, path_parameters=fixed))

            @settings(
                max_examples=EXAMPLES,
                derandomize=True,  # the same examples on every run: a failure is a change, not a draw
                database=None,
                deadline=None,
                suppress_health_check=list(HealthCheck),
            )
            @given(case=cases)
            def answers(case: Any) -> None:
                case.call_and_validate(
                    headers=AUTH,
                    # a request the schema allows may still be refused: an app's source that does not load,
                    # a join token that is not one; those are documented 4xx answers
                    excluded_checks=[positive_data_acceptance],
                    additional_checks=[no_server_error, error_form],
                )

            try:
                answers()
            except Unsatisfiable:
                assert mode is GenerationMode.NEGATIVE, operation.label  # nothing to get wrong: no input
            except BaseException as exc:
                exc.add_note(f"operation {operation.label}, {mode.value} examples")
                raise
