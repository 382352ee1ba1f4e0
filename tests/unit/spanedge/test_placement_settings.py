"""The placement's numbers from a user, checked by one rule: finite, in range, and weights by known names."""

from __future__ import annotations

import math

import pytest

from spanedge.errors import InvalidSettings
from spanedge.placement_settings import MAX_SLO_MS, MAX_WEIGHT, check_slo_ms, check_weight, check_weights

NOT_NUMBERS = [math.nan, math.inf, -math.inf, True, "5", [1]]


@pytest.mark.parametrize("value", [0.5, 150, MAX_SLO_MS])
def test_an_slo_in_range_is_taken(value: float) -> None:
    assert check_slo_ms(value) == float(value)
    assert check_slo_ms(None) is None


@pytest.mark.parametrize("value", [*NOT_NUMBERS, 0, -5, MAX_SLO_MS * 2, 1e300])
def test_an_slo_out_of_range_is_refused_naming_the_option(value: object) -> None:
    rule = r"--slo-ms must be a finite number > 0 and <= 3600000, got "
    with pytest.raises(InvalidSettings, match=f"^{rule}.*; leave it out for no SLO$"):
        check_slo_ms(value, "--slo-ms")


@pytest.mark.parametrize("value", [0, 0.25, 1, MAX_WEIGHT])
def test_a_weight_in_range_is_taken(value: float) -> None:
    assert check_weight(value, "traffic") == float(value)


@pytest.mark.parametrize("value", [*NOT_NUMBERS, -5, -1e-9, MAX_WEIGHT * 1.5, 1e309])
def test_a_weight_out_of_range_is_refused(value: object) -> None:
    with pytest.raises(InvalidSettings, match=r"^weights\.traffic must be a finite number >= 0 and <= 1000000, got "):
        check_weights({"traffic": value})


def test_weights_keep_the_names_given_and_list_every_problem_with_the_known_names() -> None:
    assert check_weights(None) is None
    assert check_weights({"latency": 2, "migration": 0}) == {"latency": 2.0, "migration": 0.0}
    with pytest.raises(InvalidSettings) as caught:
        check_weights({"evil": 1, "traffic": -5})
    assert str(caught.value) == (
        "weights: unknown weight 'evil'; the weights are traffic, latency, migration; "
        "weights.traffic must be a finite number >= 0 and <= 1000000, got -5; weights are relative, 1 by default"
    )
    with pytest.raises(InvalidSettings, match=r"^weights: unknown weights 'a', 'b'; the weights are traffic, latency"):
        check_weights({"a": 1, "b": 2})
    with pytest.raises(InvalidSettings, match=r"^weights must map weight names \(traffic, latency, migration\)"):
        check_weights([1.0, 2.0])
