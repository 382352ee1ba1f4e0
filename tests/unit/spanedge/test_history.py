"""Plan histories: runs of re-plans that left the placement unchanged fold into one counted entry."""

from __future__ import annotations

from spanedge.history import fold, summary


def _entry(version: int, at: float, reason: str, changed: bool = True) -> dict[str, object]:
    return {
        "version": version,
        "at": at,
        "reason": reason + ("" if changed else "; placement unchanged"),
        "changed": changed,
    }


def test_runs_of_unchanged_replans_of_one_version_fold_and_say_their_count() -> None:
    history = [
        _entry(1, 0.0, "deployed"),
        _entry(1, 60.0, "latency a–b 4.1→8.3 ms (+102%)", changed=False),
        _entry(1, 120.0, "latency a–b 8.3→4.0 ms (-52%)", changed=False),
        _entry(1, 180.0, "rate of r@a 100.0→14.0 rec/s (-86%)", changed=False),
        _entry(2, 200.0, "site a down"),
        _entry(2, 260.0, "latency a–b 4.0→9.0 ms (+125%)", changed=False),
    ]
    groups = fold(history)
    assert [[e["at"] for e in g] for g in groups] == [[0.0], [60.0, 120.0, 180.0], [200.0], [260.0]]
    assert [summary(g) for g in groups] == [
        "deployed",
        "re-planned 3 times, placement unchanged (the last for: rate of r@a 100.0→14.0 rec/s (-86%))",
        "site a down",
        "latency a–b 4.0→9.0 ms (+125%); placement unchanged",
    ]
    assert fold([]) == []


def test_entries_without_changed_count_as_changes() -> None:
    old = [{"version": 1, "at": 0.0, "reason": "deployed"}, {"version": 1, "at": 9.0, "reason": "redeployed"}]
    assert [len(g) for g in fold(old)] == [1, 1]
