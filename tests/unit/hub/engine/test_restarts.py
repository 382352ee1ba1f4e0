"""The waits before a failed hub query restarts."""

from __future__ import annotations

from hub.engine.restarts import RESTART_DELAYS_S, STABLE_AFTER_S, RestartBook, Restarts


def test_waits_grow_with_consecutive_failures_and_stay_at_the_last() -> None:
    waits = []
    for consecutive in range(len(RESTART_DELAYS_S) + 2):
        r = Restarts(consecutive=consecutive, failed_at=100.0)
        wait = next(d for d in (0.5 * i for i in range(400)) if r.due(100.0 + d))
        waits.append(wait)
    assert waits == [*RESTART_DELAYS_S, RESTART_DELAYS_S[-1], RESTART_DELAYS_S[-1]]


def test_a_running_query_is_never_due() -> None:
    assert not Restarts(total=3, consecutive=2).due(1e9)


def test_the_book_restarts_after_the_wait_and_resets_once_a_query_ran_long_enough() -> None:
    book = RestartBook()
    error = RuntimeError("poison batch")
    assert not book.failed("app", "sink", error, now=0.0)
    assert book.failed("app", "sink", error, now=RESTART_DELAYS_S[0])
    book.restarted("app", "sink", now=1.0)
    assert book.total("app", "sink") == 1
    assert not book.failed("app", "sink", error, now=2.0)  # the second failure waits longer
    assert book.failed("app", "sink", error, now=2.0 + RESTART_DELAYS_S[1])
    book.restarted("app", "sink", now=10.0)
    ran_long = 10.0 + STABLE_AFTER_S
    assert not book.failed("app", "sink", error, now=ran_long)
    assert book.failed("app", "sink", error, now=ran_long + RESTART_DELAYS_S[0])  # the shortest wait again
    book.forget("app", "sink")
    assert book.total("app", "sink") == 0


def test_a_failed_restart_waits_again() -> None:
    book = RestartBook()
    error = RuntimeError("boom")
    book.failed("app", "sink", error, now=0.0)
    book.retry_later("app", "sink", now=5.0)
    assert not book.failed("app", "sink", error, now=5.5)
    assert book.failed("app", "sink", error, now=5.0 + RESTART_DELAYS_S[0])


def test_local_spark_retries_a_failed_task_before_failing_the_query() -> None:
    from hub.engine.session import LOCAL_TASK_ATTEMPTS, with_task_retries

    assert with_task_retries("local[2]") == f"local[2,{LOCAL_TASK_ATTEMPTS}]"
    assert with_task_retries("local") == f"local[1,{LOCAL_TASK_ATTEMPTS}]"
    assert with_task_retries("local[2,3]") == "local[2,3]"  # the caller's own choice
    assert with_task_retries("spark://127.0.0.1:7077") == "spark://127.0.0.1:7077"
