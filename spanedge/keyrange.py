"""Key ranges: how a keyed replica's keys are divided between the sites that run its parts.

A window's key is hashed into ``[0, KEY_SPACE)`` with a stable hash (BLAKE2b
of the key's text, the first 4 bytes big-endian): the same on every site,
Python version and run, unlike the salted built-in ``hash()``. A part of a
replica owns a half-open range ``[keys_from, keys_before)`` of that space.
The text of a key is ``str(key)``, as window results carry it, so a window
and the operators after it agree on a key's hash.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

#: The size of the key hash space: ranges are within ``[0, KEY_SPACE)``.
KEY_SPACE = 1 << 32
#: Records of a replica's part carry this plus the part's ``since`` as their epoch, so a part and
#: the replica's own site (``Assignment.since``) never number records of one stream in the same epoch.
PART_EPOCH = 1 << 31
#: Records a source site recomputes for a gone old owner carry this plus the plan version that asked for it.
RECOVERY_EPOCH = 1 << 32
#: Sites report how a window's records spread over the key hash space in this many equal buckets.
KEY_BUCKETS = 64
#: The width of one bucket of :data:`KEY_BUCKETS`.
BUCKET_WIDTH = KEY_SPACE // KEY_BUCKETS


@lru_cache(maxsize=65536)
def _hash_text(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=4).digest(), "big")


def key_hash(key: Any) -> int:
    """The stable hash of a window key in ``[0, KEY_SPACE)`` (of ``str(key)``)."""
    return _hash_text(key if type(key) is str else str(key))


def recovery_epoch(version: int) -> int:
    """The epoch of the records a source site recomputes for a gone old owner at plan version ``version``."""
    return RECOVERY_EPOCH + version


def is_recovery_epoch(epoch: int) -> bool:
    """True for the epoch of records recomputed for a gone old owner (:func:`recovery_epoch`)."""
    return epoch >= RECOVERY_EPOCH


def part_epoch(since: int) -> int:
    """The epoch of the records a replica's part taken over at plan version ``since`` sends to the hub."""
    return PART_EPOCH + since


@dataclass(frozen=True, slots=True)
class Share:
    """What one site owns of a replica, sent to the hub in ``epoch``.

    It owns the keys whose hash is in ``[keys_from, keys_before)``, for the
    windows (or records) whose origin is in ``[start_from, start_before)``.
    """

    keys_from: int
    keys_before: int
    start_from: float
    start_before: float
    epoch: int

    def holds(self, hashed: int, origin: float) -> bool:
        """Whether the key hash ``hashed`` at origin time ``origin`` is this share's."""
        return self.keys_from <= hashed < self.keys_before and self.start_from <= origin < self.start_before

    @property
    def ends(self) -> bool:
        """True if the share stops at a switch time (the site hands it over)."""
        return self.start_before < math.inf


def halves(split_at: int = KEY_SPACE // 2) -> tuple[tuple[int, int], tuple[int, int]]:
    """The two ranges a split at ``split_at`` makes."""
    return (0, split_at), (split_at, KEY_SPACE)


def complement(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """The ranges of ``[0, KEY_SPACE)`` not covered by ``ranges``, in order."""
    out: list[tuple[int, int]] = []
    at = 0
    for lo, hi in sorted(ranges):
        if lo > at:
            out.append((at, lo))
        at = max(at, hi)
    if at < KEY_SPACE:
        out.append((at, KEY_SPACE))
    return out


def spread_of(counts: Mapping[Any, float]) -> dict[int, float]:
    """Records per bucket of the key hash space (:data:`KEY_BUCKETS`) from records per window key."""
    out: dict[int, float] = {}
    for key, n in counts.items():
        bucket = key_hash(key) // BUCKET_WIDTH
        out[bucket] = out.get(bucket, 0.0) + n
    return out


def share_below(spread: Mapping[int, float], cut: int) -> float | None:
    """The share of ``spread``'s records whose key hash is below ``cut`` (a bucket boundary); None: no records."""
    total = sum(spread.values())
    if total <= 0:
        return None
    return sum(n for b, n in spread.items() if b * BUCKET_WIDTH < cut) / total


def even_cut(spread: Mapping[int, float]) -> tuple[int, float] | None:
    """The bucket boundary that divides ``spread``'s records most evenly, with the share below it.

    None if there are no records. A skewed replica (a few keys, or one hot
    key) is cut where its records, not its key space, divide in two.
    """
    total = sum(spread.values())
    if total <= 0:
        return None
    below, options = 0.0, []
    for bucket in range(1, KEY_BUCKETS):  # ties go to the boundary nearest the middle of the key space
        below += spread.get(bucket - 1, 0.0)
        options.append((abs(below / total - 0.5), abs(bucket - KEY_BUCKETS // 2), bucket, below / total))
    _, _, bucket, share = min(options)
    return bucket * BUCKET_WIDTH, share


def describe(keys_from: int, keys_before: int) -> str:
    """A range as a share of the key space, for people: ``'keys [50%, 100%)'``."""
    return f"keys [{100 * keys_from / KEY_SPACE:.0f}%, {100 * keys_before / KEY_SPACE:.0f}%)"
