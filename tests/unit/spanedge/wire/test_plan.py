"""The plan message: the hub's signed payload is what the agent reads, and a malformed one is refused."""

from __future__ import annotations

import orjson
import pytest

from spanedge.errors import InvalidPlan
from spanedge.signing import PlanSigningKey, TrustedKeys, sign_plan, verify_plan
from spanedge.wire.plan import VERSION, PlanApp, PlanPayload, parse_payload

KEY = PlanSigningKey.generate()


def test_a_signed_payload_round_trips_with_the_format_version() -> None:
    payload = PlanPayload(
        site="barn",
        version=7,
        issued_at=1.7e9,
        apps=[PlanApp(app="farm", plan={"app": "farm"}, source="x = 1\n", source_sha256="ab")],
    )
    message = sign_plan(payload, KEY)
    assert orjson.loads(message)["v"] == VERSION
    verified = verify_plan(message, TrustedKeys([KEY.public_key]))
    assert parse_payload(verified.payload) == payload
    assert sign_plan(orjson.loads(orjson.loads(message)["payload"]), KEY) == message  # the same bytes from a dict


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        ({"site": "barn", "apps": []}, "plan version must be an integer, got None"),
        ({"site": "barn", "version": 1, "issued_at": "now", "apps": []}, "issued_at must be a number of seconds"),
        ({"site": "barn", "version": 1}, "plan 'apps' must be a list, got NoneType"),
        ({"site": "barn", "version": 1, "apps": [{"app": "farm", "plan": {}}]}, r"apps\[0\] \('farm'\) needs 'source'"),
        ({"site": 3, "version": 1, "apps": []}, "plan site must be a site name, got 3"),
    ],
)
def test_malformed_payloads_are_refused_with_the_field(payload: dict[str, object], reason: str) -> None:
    with pytest.raises(InvalidPlan, match=reason):
        parse_payload(payload)
