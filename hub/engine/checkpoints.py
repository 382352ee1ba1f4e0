"""Checkpoints of hub queries and the log readers that go with them.

Each query has a checkpoint directory ``checkpoints/<app>/<sink>-<fingerprint>/``
whose name is also the query's reader (inbox) name in the ingest log. When
a query is replaced, the segments in its inbox that its committed batches
did not read move to its successor's inbox, so the successor resumes there:
no record is processed twice and none is skipped.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import unquote, urlparse

from hub.ingest import log as ingest_log
from spanedge.errors import InvalidDataflow


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.@-]", "_", name)


def checkpoint_name(replica: str, fingerprint: str) -> str:
    """The checkpoint directory (and log reader) name of the query of sink ``replica``."""
    return f"{_safe(replica)}-{fingerprint}"


def check_distinct(replicas: Iterable[str], app: str) -> None:
    """Refuse sink replicas whose checkpoint directories would be one (names differing only in, say, ``' '`` and ``'_'``).

    Characters outside ``[A-Za-z0-9_.@-]`` become ``_`` in a checkpoint name,
    so such a pair is refused rather than renamed.

    Raises:
        InvalidDataflow: two replicas share a checkpoint name; the message names both.
    """
    seen: dict[str, str] = {}
    for replica in replicas:
        other = seen.setdefault(_safe(replica), replica)
        if other != replica:
            msg = (
                f"app '{app}': hub sinks '{other}' and '{replica}' would share the checkpoint directory "
                f"'{_safe(replica)}'; rename one of them so their names differ in letters, digits, '_', '.' or '-'"
            )
            raise InvalidDataflow(msg)


def is_checkpoint_of(name: str, replica: str) -> bool:
    """True if the checkpoint directory ``name`` belongs to a query of sink ``replica``."""
    return name.rpartition("-")[0] == _safe(replica)


def spark_query_id(checkpoint: Path) -> str:
    """The id Spark gave the query of ``checkpoint`` when it first started (its ``metadata`` file); kept across restarts.

    A checkpoint started afresh under the same directory name gets a new id.

    Raises:
        FileNotFoundError, ValueError, KeyError: the query has not started yet.
    """
    return str(json.loads((checkpoint / "metadata").read_text().splitlines()[0])["id"])


def committed_batch(checkpoint: Path) -> int | None:
    """The id of the last micro-batch the checkpoint says was committed (None: none yet)."""
    try:
        done = [int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit()]
    except FileNotFoundError:
        return None
    return max(done) if done else None


def processed_files(checkpoint: Path) -> set[str]:
    """The names of the log segments the query's committed micro-batches read.

    Spark's file source lists the files of each batch in the checkpoint
    (``sources/0/<batch>``, compacted every few batches into
    ``<batch>.compact``): a ``v1`` line, then one JSON entry per file with
    its ``path`` and ``batchId``. It deletes a file's link only when it
    plans the batch after, so an inbox can still hold the files of the last
    committed batch.
    """
    last = committed_batch(checkpoint)
    if last is None:
        return set()
    names: set[str] = set()
    try:
        logs = list((checkpoint / "sources" / "0").iterdir())
    except FileNotFoundError:
        return names
    for path in logs:
        if path.name.startswith(".") or not path.name.split(".")[0].isdigit():
            continue
        try:
            lines = path.read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            try:
                entry = json.loads(line)
                if int(entry["batchId"]) <= last:
                    names.add(unquote(urlparse(str(entry["path"])).path).rsplit("/", 1)[-1])
            except (ValueError, KeyError, TypeError):
                continue
    return names


def settled(checkpoint: Path) -> bool:
    """True unless the last committed micro-batch moved the watermark, so Spark will run a batch without data.

    That batch emits the windows the new watermark closes. The checkpoint
    holds the watermark each batch ran with (``offsets/<n>``) and the one the
    next batch will use (``commits/<n>``).
    """
    last = committed_batch(checkpoint)
    if last is None:
        return True
    try:
        used = json.loads((checkpoint / "offsets" / str(last)).read_text().splitlines()[1])["batchWatermarkMs"]
        following = json.loads((checkpoint / "commits" / str(last)).read_text().splitlines()[1])["nextBatchWatermarkMs"]
    except (OSError, IndexError, ValueError, KeyError, TypeError):
        return True
    return int(following) <= int(used)


def unprocessed(log_dir: Path, reader: str, checkpoint: Path) -> list[str]:
    """The segments in ``reader``'s inbox that its query has not committed yet (file names, oldest first)."""
    done = processed_files(checkpoint)
    return [p.name for p in ingest_log.inbox_files(ingest_log.inbox(log_dir, reader)) if p.name not in done]


def retire(log_dir: Path, reader: str, checkpoint: Path, successor: str | None) -> None:
    """Drop a replaced query's inbox and checkpoint; the reader ``successor`` gets what it had not processed."""
    if successor is not None:
        ingest_log.hand_over(log_dir, reader, successor, processed_files(checkpoint))
    ingest_log.unsubscribe(log_dir, reader)
    shutil.rmtree(checkpoint, ignore_errors=True)
