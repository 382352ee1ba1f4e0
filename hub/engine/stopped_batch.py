"""A micro-batch cut short because the hub stops its query: said once, at INFO, not as a py4j traceback.

Stopping a query cancels its running Spark job. If the query's
``foreachBatch`` function is waiting on that job, the job's cancellation
comes back to it as an error, and py4j logs every error a Python callback
raises as ``ERROR`` with a traceback. The batch is not committed, so Spark
runs it again when the query next starts (or the new owner's query covers
it); nothing is lost. The sink raises :class:`StoppedMidBatch` in that case,
and :class:`QuietStoppedBatches` turns py4j's record of it into one INFO line.
"""

from __future__ import annotations

import logging

PY4J_CALLBACKS = "py4j.clientserver"
"""The logger py4j reports a failed Python callback (``foreachBatch``) on."""


class StoppedMidBatch(RuntimeError):
    """A batch the query's deliberate stop interrupted; Spark has not committed it."""


class QuietStoppedBatches(logging.Filter):
    """Log py4j's report of a :class:`StoppedMidBatch` as that error's one line at INFO."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Rewrite a record that carries a :class:`StoppedMidBatch`; keep every record."""
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, StoppedMidBatch):
            record.levelno, record.levelname = logging.INFO, "INFO"
            record.msg, record.args = str(error), ()
            record.exc_info, record.exc_text = None, None
        return True


def install() -> None:
    """Add the filter to py4j's callback logger once."""
    logger = logging.getLogger(PY4J_CALLBACKS)
    if not any(isinstance(f, QuietStoppedBatches) for f in logger.filters):
        logger.addFilter(QuietStoppedBatches())
