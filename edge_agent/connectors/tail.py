"""The file tail connector (``file:///path`` streams): each line a file gains is one JSON record.

The source follows the file as ``tail -F`` does. When the file is renamed away (log rotation)
it reads the old one to its end, its last line too, then opens the new file from its start; a
file truncated in place is read again from its start. How far the file is committed (device,
inode and byte offset) is kept in the offset file, so a restarted agent reads on from there,
also from a file rotated while it was down (found by its inode beside the path). Lines not yet
committed when the agent stops are read again: at least once into the pipeline. A line over the
stream's ``max_message_bytes`` is dead-lettered with its byte offset, unread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import IO, Any
from urllib.parse import unquote, urlsplit

import orjson

from edge_agent.connectors.api import Reading, register_source
from spanedge.connectors.streams import TailOptions, stream_options
from spanedge.sites import StreamBinding

log = logging.getLogger(__name__)

#: Lines in one batch.
MAX_BATCH = 1000
#: Seconds between saves of the offset while lines are being committed.
SAVE_EVERY_S = 0.5
#: Directory entries looked at for a file rotated while the agent was down.
MAX_SCAN = 1000

Position = tuple[int, int, int]
"""A place in a file: its device, its inode and a byte offset."""


class TailSource:
    """The lines appended to a file (see the module)."""

    def __init__(self, binding: StreamBinding, stream: str) -> None:
        assert binding.url is not None
        options = stream_options("file", binding.options)
        assert isinstance(options, TailOptions)
        self.options = options
        self.path = Path(unquote(urlsplit(binding.url).path))
        self.name = f"file://{self.path}"
        self.stream = stream
        self.offset_file = Path(options.offset_file or f"{self.path}.offset")
        self.max_line = binding.max_message_bytes
        self._chunk = max(self.max_line + 1, 64 * 1024)
        self._acked: Position | None = None
        self._saved: Position | None = None
        self._last_read: Position | None = None
        self._last_save = 0.0

    async def session(self) -> AsyncIterator[list[Reading]]:
        """Open the file where the last commit left it and yield its new lines, following rotation."""
        saved = self._acked or self._load()
        file = self.path.open("rb")  # a missing file raises: the agent tries again with backoff
        try:
            ident, pos = _ident(file), 0
            if saved is not None and saved[:2] == ident:
                pos = saved[2] if saved[2] <= os.fstat(file.fileno()).st_size else 0
            elif saved is not None and (old := self._rotated(saved)) is not None:
                with old:
                    yield []
                    async for batch in self._to_end(old, saved[2]):
                        yield batch
            elif saved is None and self.options.start == "end":
                pos = os.fstat(file.fileno()).st_size
            yield []
            while True:
                batch, pos = self._lines(file, ident, pos, final=False)
                if batch:
                    yield batch
                    continue
                self._save()
                current = _stat(self.path)
                if current is not None and (current.st_dev, current.st_ino) != ident:
                    async for batch in self._to_end(file, pos):  # rotated: the old file's rest, then the new one
                        yield batch
                    file.close()
                    file = self.path.open("rb")
                    ident, pos = _ident(file), 0
                    log.info("%s: the file was rotated; reading the new one", self.name)
                    continue
                if current is not None and current.st_size < pos:
                    log.warning(
                        "%s: the file shrank to %d bytes; reading it from its start", self.name, current.st_size
                    )
                    pos = 0
                    continue
                await asyncio.sleep(self.options.poll_s)
        finally:
            file.close()
            self._save()

    async def _to_end(self, file: IO[bytes], pos: int) -> AsyncIterator[list[Reading]]:
        ident = _ident(file)
        while True:
            batch, pos = self._lines(file, ident, pos, final=True)
            if not batch:
                return
            yield batch

    def _lines(self, file: IO[bytes], ident: tuple[int, int], pos: int, *, final: bool) -> tuple[list[Reading], int]:
        """The whole lines from ``pos`` on (with ``final``, an unfinished last line too) and the offset after them."""
        file.seek(pos)
        data = file.read(self._chunk)
        out: list[Reading] = []
        start = 0
        now = time.time()
        while len(out) < MAX_BATCH and start < len(data):
            end = data.find(b"\n", start)
            if end < 0:
                if start == 0 and len(data) == self._chunk:  # no newline in a whole chunk: a line over the limit
                    return [self._too_long(file, pos, ident, now)], file.tell()
                if not final or len(data) == self._chunk:  # the line goes on past this chunk: read it next time
                    break
                end = len(data)
            line = data[start:end].rstrip(b"\r")
            at, start = pos + start, end + 1
            token = (*ident, pos + min(start, len(data)))
            if len(line) > self.max_line:
                out.append(Reading("", None, now, self.name, self._over(at), token=token))
            elif line.strip():
                out.append(Reading("", None, now, self.name, token=token, payload=line))
        if out:
            self._last_read = out[-1].token
        return out, pos + min(start, len(data))

    def _too_long(self, file: IO[bytes], pos: int, ident: tuple[int, int], now: float) -> Reading:
        """Skip the line at ``pos`` (over ``max_message_bytes``) and say so; the file is left after its newline."""
        file.seek(pos)
        while chunk := file.read(self._chunk):
            cut = chunk.find(b"\n")
            if cut >= 0:
                file.seek(file.tell() - len(chunk) + cut + 1)
                break
        token = (*ident, file.tell())
        self._last_read = token
        return Reading("", None, now, self.name, self._over(pos), token=token)

    def _over(self, at: int) -> str:
        return f"{self.name} byte {at}: the line is over the stream's max_message_bytes of {self.max_line}"

    def acknowledge(self, tokens: list[Any]) -> None:
        """Lines are committed up to the last token: save it now and then, and whenever all read lines are."""
        self._acked = tokens[-1]
        if self._acked == self._last_read or time.monotonic() - self._last_save >= SAVE_EVERY_S:
            self._save()

    def _save(self) -> None:
        if self._acked is None or self._acked == self._saved:
            return
        dev, ino, offset = self._acked
        partial = self.offset_file.with_name(self.offset_file.name + ".partial")
        try:
            partial.write_bytes(orjson.dumps({"file": str(self.path), "dev": dev, "ino": ino, "offset": offset}))
            partial.replace(self.offset_file)
        except OSError as exc:
            log.warning("%s: cannot save the offset in %s: %s", self.name, self.offset_file, exc)
            return
        self._saved, self._last_save = self._acked, time.monotonic()

    def _load(self) -> Position | None:
        try:
            data = orjson.loads(self.offset_file.read_bytes())
            saved = (int(data["dev"]), int(data["ino"]), int(data["offset"]))
        except FileNotFoundError:
            return None
        except (OSError, orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            log.warning(
                "%s: offset file %s is unreadable (%s); reading from the start", self.name, self.offset_file, exc
            )
            return None
        self._saved = self._acked = saved
        return saved

    def _rotated(self, saved: Position) -> IO[bytes] | None:
        """The file ``saved`` was in, if it still sits beside the path under another name (``app.log.1``)."""
        with contextlib.suppress(OSError):
            for i, entry in enumerate(os.scandir(self.path.parent)):
                if i >= MAX_SCAN:
                    break
                info = entry.stat(follow_symlinks=False)
                if (info.st_dev, info.st_ino) == saved[:2]:
                    log.info("%s: reading on in %s, rotated while the agent was away", self.name, entry.path)
                    return open(entry.path, "rb")
        log.warning("%s: the file of the saved offset is gone; reading the current file from its start", self.name)
        return None


def _ident(file: IO[bytes]) -> tuple[int, int]:
    info = os.fstat(file.fileno())
    return info.st_dev, info.st_ino


def _stat(path: Path) -> os.stat_result | None:
    try:
        return path.stat()
    except FileNotFoundError:
        return None


register_source("file", TailSource)
