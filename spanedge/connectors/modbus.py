"""Modbus points: where a value sits on a device (table, address, type) and how it is scaled.

A point's raw value is ``registers`` (16-bit words, big-endian words first unless
``word_order: little``) or a bit (coils, discrete inputs); the stream's value is
``raw * scale + offset``. A sink writes the inverse, rounded to the register's integer type, and
refuses a value that does not fit. A point read by a stream may name its :class:`SampleTime`: the
registers where the device keeps the time of the point's sample.
"""

from __future__ import annotations

import enum
import math
import struct
from typing import Annotated, Any, Literal

import msgspec

from spanedge.file_models import FileModel

Address = Annotated[int, msgspec.Meta(ge=0, le=65535)]


class Table(enum.StrEnum):
    """The four Modbus tables."""

    HOLDING = "holding"
    INPUT = "input"
    COIL = "coil"
    DISCRETE = "discrete"


class Type(enum.StrEnum):
    """How a register value is stored."""

    UINT16 = "uint16"
    INT16 = "int16"
    UINT32 = "uint32"
    INT32 = "int32"
    FLOAT32 = "float32"
    BOOL = "bool"


_FORMAT = {Type.UINT16: "H", Type.INT16: "h", Type.UINT32: "I", Type.INT32: "i", Type.FLOAT32: "f"}
_RANGE = {
    Type.UINT16: (0, 2**16 - 1),
    Type.INT16: (-(2**15), 2**15 - 1),
    Type.UINT32: (0, 2**32 - 1),
    Type.INT32: (-(2**31), 2**31 - 1),
}


#: The earliest plausible sample time (2000-01-01T00:00:00Z), in seconds since the epoch.
EARLIEST_TIME = 946_684_800.0


class TimeUnit(enum.StrEnum):
    """What a sample time register counts since the epoch."""

    S = "s"
    MS = "ms"


class SampleTime(FileModel, frozen=True):
    """Where a device keeps the time of a point's sample: an unsigned count since the epoch.

    Attributes:
        table: ``holding`` or ``input`` registers.
        address: the 0-based address of the first register.
        count: 2 registers (32 bits) or 4 (64 bits).
        unit: ``s`` (seconds) or ``ms`` (milliseconds) since 1970-01-01 UTC.
        word_order: ``big`` (most significant word first, the default) or ``little``.
    """

    address: Address
    table: Table = Table.HOLDING
    count: Literal[2, 4] = 2
    unit: TimeUnit = TimeUnit.S
    word_order: Annotated[str, msgspec.Meta(pattern="^(big|little)$")] = "big"

    def __post_init__(self) -> None:
        """Check the table, the registers' end and that a millisecond count has 64 bits."""
        if self.table not in (Table.HOLDING, Table.INPUT):
            msg = f"table: a sample time sits in holding or input registers, not in {self.table.value}s"
            raise ValueError(msg)
        if self.address + self.count > 65536:
            msg = f"address: registers {self.address}..{self.address + self.count - 1} end past 65535"
            raise ValueError(msg)
        if self.unit is TimeUnit.MS and self.count == 2:
            msg = (
                "count: 32 bits count milliseconds since the epoch only up to February 1970; use count: 4 with unit: ms"
            )
            raise ValueError(msg)

    def where(self) -> str:
        """The registers for messages, e.g. ``holding registers 100-101``."""
        return f"{self.table.value} registers {self.address}-{self.address + self.count - 1}"

    def decode(self, raw: list[int]) -> float:
        """The sample time of ``raw`` (``count`` registers), in seconds since the epoch."""
        words = [int(w) & 0xFFFF for w in raw[: self.count]]
        if len(words) != self.count:
            msg = f"{self.where()}: got {len(words)} register(s), not {self.count}"
            raise ValueError(msg)
        if self.word_order == "little":
            words.reverse()
        number = 0
        for word in words:
            number = number << 16 | word
        return number / 1000 if self.unit is TimeUnit.MS else float(number)

    def encode(self, seconds: float) -> list[int]:
        """The registers holding ``seconds`` since the epoch (rounded to the unit)."""
        number = round(seconds * 1000) if self.unit is TimeUnit.MS else round(seconds)
        words = [(number >> (16 * i)) & 0xFFFF for i in reversed(range(self.count))]
        if self.word_order == "little":
            words.reverse()
        return words


class Point(FileModel, frozen=True):
    """One value on a Modbus device.

    Attributes:
        table: ``holding`` or ``input`` registers, ``coil`` or ``discrete`` input.
        address: the 0-based address in the table.
        type: the register type (``bool`` for coils and discrete inputs, the default there).
        scale: the factor from the raw value to the stream's value.
        offset: added after scaling.
        word_order: ``big`` (most significant word first, the default) or ``little``, for 32-bit types.
        time: where the device keeps the time of the point's sample (a stream's points only): its
            records take that event time, and a sample is read once.
    """

    table: Table = Table.HOLDING
    address: Address = 0
    type: Type | None = None
    scale: float = 1.0
    offset: float = 0.0
    word_order: Annotated[str, msgspec.Meta(pattern="^(big|little)$")] = "big"
    time: SampleTime | None = None

    def __post_init__(self) -> None:
        """Check that the type fits the table and that scaling is finite and invertible."""
        bits = self.table in (Table.COIL, Table.DISCRETE)
        if bits and self.type not in (None, Type.BOOL):
            msg = f"type: a {self.table.value} holds one bit; leave type out or write type: bool"
            raise ValueError(msg)
        if not bits and self.type is Type.BOOL:
            msg = f"type: {self.table.value} registers hold numbers; use uint16, int16, uint32, int32 or float32"
            raise ValueError(msg)
        if not math.isfinite(self.scale) or self.scale == 0 or not math.isfinite(self.offset):
            msg = "scale: must be a finite number other than 0 (and offset finite)"
            raise ValueError(msg)
        t = self.time
        overlap = (t.address < self.address + self.count and self.address < t.address + t.count) if t else False
        if t is not None and t.table is self.table and overlap:
            msg = f"time: {t.where()} overlap the point's own {self.where()}; give the time registers of their own"
            raise ValueError(msg)

    @property
    def kind(self) -> Type:
        """The point's type, with the table's default."""
        if self.type is not None:
            return self.type
        return Type.BOOL if self.table in (Table.COIL, Table.DISCRETE) else Type.UINT16

    @property
    def count(self) -> int:
        """How many registers (or bits) the point takes."""
        return 2 if self.kind in (Type.UINT32, Type.INT32, Type.FLOAT32) else 1

    @property
    def writable(self) -> bool:
        """True for holding registers and coils, the tables a client may write."""
        return self.table in (Table.HOLDING, Table.COIL)

    def where(self) -> str:
        """The point's place for messages, e.g. ``holding register 40``."""
        unit = {Table.COIL: "coil", Table.DISCRETE: "discrete input"}.get(self.table, f"{self.table.value} register")
        return f"{unit} {self.address}"

    def decode(self, raw: list[int] | list[bool]) -> float | bool:
        """The stream's value of ``raw`` (``count`` registers, or one bit).

        Raises:
            ValueError: the raw value is no finite number (a float32 NaN or infinity).
        """
        kind = self.kind
        if kind is Type.BOOL:
            return bool(raw[0])
        words = [int(w) & 0xFFFF for w in raw[: self.count]]
        if self.word_order == "little":
            words.reverse()
        data = struct.pack(f">{len(words)}H", *words)
        (number,) = struct.unpack(">" + _FORMAT[kind], data)
        if not math.isfinite(number):
            msg = f"{self.where()} holds {number}, not a finite number"
            raise ValueError(msg)
        value = number * self.scale + self.offset
        return int(value) if kind is not Type.FLOAT32 and float(value).is_integer() else float(value)

    def encode(self, value: Any) -> list[int] | bool:
        """The registers (or bit) to write for the stream's ``value``, unscaled and rounded.

        Raises:
            ValueError: ``value`` is not a number (a boolean for bits), or does not fit the register type.
        """
        kind = self.kind
        if kind is Type.BOOL:
            if isinstance(value, bool) or value in (0, 1):
                return bool(value)
            msg = f"{self.where()} takes true/false (or 0/1), got {value!r}"
            raise ValueError(msg)
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            msg = f"{self.where()} takes a finite number, got {value!r}"
            raise ValueError(msg)
        raw = (value - self.offset) / self.scale
        if kind is Type.FLOAT32:
            data = struct.pack(">f", raw)
        else:
            number = round(raw)
            low, high = _RANGE[kind]
            if not low <= number <= high:
                msg = f"{self.where()} ({kind.value}) cannot hold {value!r} (raw {number}, range {low}..{high})"
                raise ValueError(msg)
            data = struct.pack(">" + _FORMAT[kind], number)
        words = list(struct.unpack(f">{len(data) // 2}H", data))
        if self.word_order == "little":
            words.reverse()
        return words
