"""One rule for a number in outside data: int or finite float, never a bool."""

from __future__ import annotations

import math

import msgspec
import pytest

from spanedge.errors import InvalidDataflow
from spanedge.numbers import Finite, count, is_number, number, require_number


@pytest.mark.parametrize("value", [0, -3, 2.5, 10**20])
def test_numbers(value: float) -> None:
    assert is_number(value)
    assert number(value) == float(value)
    assert msgspec.convert(value, Finite) == float(value)


@pytest.mark.parametrize("value", [True, False, math.nan, math.inf, -math.inf, "1", None, [1]])
def test_not_numbers(value: object) -> None:
    assert not is_number(value)
    assert number(value) is None
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert(value, Finite)


def test_counts_are_whole_and_not_negative() -> None:
    assert [count(v) for v in (3, 3.0, 3.5, -1, True)] == [3, 3, None, None, None]


def test_a_required_number_says_what_where_and_how_to_fix() -> None:
    assert require_number(2, "cost", minimum=0) == 2.0
    with pytest.raises(InvalidDataflow, match=r"^app.py:3: cost must be a finite number >= 0, got nan; use 0.5$"):
        require_number(math.nan, "app.py:3: cost", minimum=0, hint="use 0.5", error=InvalidDataflow)


def test_a_required_number_may_have_an_open_lower_bound_and_a_maximum() -> None:
    assert require_number(5, "slo", above=0, maximum=10) == 5.0
    for value in (0, -1, 1e6 + 1, math.inf):
        with pytest.raises(ValueError, match=f"^slo must be a finite number > 0 and <= 1000000, got {value!r}$"):
            require_number(value, "slo", above=0, maximum=1e6)
