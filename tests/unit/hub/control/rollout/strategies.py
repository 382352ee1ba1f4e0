"""Hypothesis strategies shared by the rollout tests: fleets with labels, stage specs."""

from __future__ import annotations

from fractions import Fraction

from hypothesis import strategies as st

from hub.control.rollout.stages import Stage

KEYS = ("kind", "fleet", "tier")
VALUES = ("a", "b", "c")

site_names = st.from_regex(r"[a-z][a-z0-9-]{0,8}", fullmatch=True).filter(
    lambda n: n not in ("plan", "heartbeat", "probe", "presence")
)
labels = st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=3)
fleets = st.dictionaries(site_names, labels, min_size=1, max_size=25)
selectors = st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=2).map(
    lambda d: tuple(sorted(d.items()))
)
percents = st.integers(1, 1000).map(lambda tenths: Fraction(tenths, 10))
amounts = st.one_of(
    st.builds(lambda n: Stage(count=n), st.integers(1, 30)),
    st.builds(lambda p: Stage(percent=p), percents),
    st.just(Stage()),
)


@st.composite
def stage_lists(draw: st.DrawFn) -> tuple[Stage, ...]:
    """Stages the grammar can write: a selector, an amount or both, then ``*``."""
    stages = []
    for _ in range(draw(st.integers(0, 5))):
        selector, amount = draw(selectors), draw(amounts)
        if not selector and amount.count is None and amount.percent is None:
            amount = Stage(count=1)
        stages.append(Stage(selector=selector, count=amount.count, percent=amount.percent))
    return (*stages, Stage(rest=True))
