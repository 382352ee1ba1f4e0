"""The labelled records of an app's ingest log copied into its models' histories (:mod:`hub.models.history`).

The model service reads each app's log as one more inbox reader
(:data:`READER`, :func:`hub.ingest.log.subscribe`): every sealed segment is
linked into its inbox, :func:`drain` copies the records of the models'
``train_on`` streams into their histories, then drops the link. The log
keeps a segment until every reader is past it, so no labelled record is
deleted before its history has it, however far the Spark queries have read.
A link dropped after a crash is read again, which the histories' dedupe
turns into nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from pathlib import Path

from hub.ingest import log as ingest_log
from hub.models.history import History
from spanedge.wire.log_line import decode_lines

#: The models' reader name in the ingest logs (an inbox folder ``inbox/_models``).
READER = "_models"


def follow(log_dir: Path) -> None:
    """Make the models a reader of the log in ``log_dir`` (from its oldest segment), unless they are one."""
    ingest_log.subscribe(log_dir, READER)


def unfollow(log_dir: Path) -> None:
    """Stop reading the log in ``log_dir``: it no longer keeps segments for the models."""
    ingest_log.unsubscribe(log_dir, READER)


def following(log_dir: Path) -> bool:
    """Whether the models read the log in ``log_dir``."""
    return ingest_log.inbox_position(log_dir, READER) is not None


def drain(log_dir: Path, histories: Mapping[str, Sequence[History]]) -> int:
    """Copy the records of each stream of ``histories`` from the log's unread sealed segments; return how many kept."""
    kept = 0
    for path in ingest_log.inbox_files(ingest_log.inbox(log_dir, READER)):
        lines = list(decode_lines(path.read_bytes()))
        for stream, targets in histories.items():
            mine = [line for line in lines if line.stream == stream]
            for history in targets:
                kept += history.add(mine)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    return kept
