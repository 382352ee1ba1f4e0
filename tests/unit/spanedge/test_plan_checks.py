"""The checks an agent makes on a verified plan message: site, version, app names, code hashes."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spanedge.errors import InvalidPlan
from spanedge.loader import load_app
from spanedge.plan_checks import SitePlan, check_plan_envelope
from spanedge.signing import PlanSigningKey, TrustedKeys, sign_plan, verify_plan
from spanedge.sites import load_sites
from spanedge.testing import local_plan

ROOT = Path(__file__).resolve().parents[3]
APP = ROOT / "examples" / "cold_chain" / "app.py"
CODE = APP.read_text()
PLAN = dataclasses.replace(
    local_plan(load_app(APP), load_sites(ROOT / "examples" / "cold_chain" / "sites.yaml")), app_source=""
).to_dict()


def _entry(**changes: Any) -> dict[str, Any]:
    entry = {
        "app": "cold-chain",
        "plan": PLAN,
        "source": CODE,
        "source_sha256": hashlib.sha256(CODE.encode()).hexdigest(),
    }
    return {**entry, **changes}


def _payload(**changes: Any) -> dict[str, Any]:
    payload = {"site": "truck-7", "version": 3, "issued_at": 1.7e9, "apps": [_entry()]}
    return {**payload, **changes}


def test_accepts_a_plan_for_this_site_and_carries_the_source() -> None:
    accepted = check_plan_envelope(_payload(), site="truck-7", applied_version=2)
    assert isinstance(accepted, SitePlan)
    assert (accepted.site, accepted.version, accepted.issued_at) == ("truck-7", 3, 1.7e9)
    assert [p.app for p in accepted.plans] == ["cold-chain"]
    assert accepted.plans[0].app_source == CODE


def test_end_to_end_with_a_signed_message() -> None:
    key = PlanSigningKey.generate()
    verified = verify_plan(sign_plan(_payload(), key), TrustedKeys([key.public_key]))
    accepted = check_plan_envelope(verified.payload, site="truck-7")
    assert accepted.version == 3


def test_an_empty_app_list_and_a_missing_issue_time_are_fine() -> None:
    payload = _payload(apps=[])
    del payload["issued_at"]
    accepted = check_plan_envelope(payload, site="truck-7")
    assert (accepted.plans, accepted.issued_at) == ((), 0.0)


def test_an_upper_case_hash_matches() -> None:
    upper = _entry(source_sha256=hashlib.sha256(CODE.encode()).hexdigest().upper())
    assert check_plan_envelope(_payload(apps=[upper]), site="truck-7").plans


@pytest.mark.parametrize("applied", [3, 4])
def test_a_replayed_or_stale_version_is_not_newer(applied: int) -> None:
    with pytest.raises(InvalidPlan, match=f"plan version 3 is not newer than the version {applied} this agent holds"):
        check_plan_envelope(_payload(), site="truck-7", applied_version=applied)


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"site": "truck-9"}, "plan is for site 'truck-9', but this agent serves 'truck-7'"),
        ({"site": None}, "plan is for site None"),
        ({"version": True}, "version must be an integer, got True"),
        ({"version": 3.0}, "version must be an integer, got 3.0"),
        ({"version": "3"}, "version must be an integer, got '3'"),
        ({"issued_at": float("nan")}, "issued_at must be a number of seconds, got nan"),
        ({"issued_at": False}, "issued_at must be a number of seconds"),
        ({"apps": {"cold-chain": {}}}, "'apps' must be a list, got dict"),
        ({"apps": ["cold-chain"]}, r"apps\[0\] must be an object, got str"),
        ({"apps": [_entry(), _entry()]}, "lists an app twice"),
    ],
)
def test_malformed_messages_say_what_is_wrong(changes: dict[str, Any], reason: str) -> None:
    with pytest.raises(InvalidPlan, match=reason):
        check_plan_envelope(_payload(**changes), site="truck-7")


@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        (_entry(app="../etc"), r"plan apps\[0\]: app name '\.\./etc' contains '\.' \(U\+002E\) at position 0"),
        (_entry(app="Cold-Chain"), "has uppercase letters"),
        (_entry(app=None), "app name must be a string, got NoneType"),
        (_entry(app="control"), "is reserved"),
        (_entry(source=None), "needs 'source' and 'source_sha256' strings"),
        (_entry(source_sha256=7), "needs 'source' and 'source_sha256' strings"),
        (_entry(source=CODE + "\nimport os\n"), "source SHA-256 is .* the code was altered in transit"),
        (_entry(plan=None), "has no 'plan' object"),
        (_entry(plan={}), "malformed plan"),
        (_entry(plan={**PLAN, "app": "other"}), "labelled 'cold-chain' but holds the plan of app 'other'"),
    ],
)
def test_bad_app_entries_say_what_is_wrong(entry: dict[str, Any], reason: str) -> None:
    with pytest.raises(InvalidPlan, match=reason):
        check_plan_envelope(_payload(apps=[entry]), site="truck-7")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=10,
)
fields = st.fixed_dictionaries(
    {},
    optional={
        "site": st.sampled_from(["truck-7", "truck-9"]) | json_values,
        "version": st.integers(-5, 5) | json_values,
        "issued_at": json_values,
        "apps": st.lists(
            st.fixed_dictionaries(
                {},
                optional={
                    "app": st.sampled_from(["cold-chain", "../x", ""]) | json_values,
                    "plan": json_values,
                    "source": st.just(CODE) | json_values,
                    "source_sha256": st.just(_entry()["source_sha256"]) | json_values,
                },
            )
            | json_values,
            max_size=3,
        )
        | json_values,
    },
)


@settings(database=None, max_examples=100, deadline=None)
@given(fields)
def test_arbitrary_payloads_raise_only_invalid_plan(payload: dict[str, Any]) -> None:
    try:
        accepted = check_plan_envelope(payload, site="truck-7", applied_version=0)
    except InvalidPlan:
        return
    assert accepted.site == "truck-7"
    assert accepted.version > 0
