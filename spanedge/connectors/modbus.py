"""Modbus points: where a value sits on a device (table, address, type) and how it is scaled.

A point's raw value is ``registers`` (16-bit words, big-endian words first unless
``word_order: little``) or a bit (coils, discrete inputs); the stream's value is
``raw * scale + offset``. A sink writes the inverse, rounded to the register's integer type, and
refuses a value that does not fit.
"""

from __future__ import annotations

import enum
import math
import struct
from typing import Annotated, Any

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


class Point(FileModel, frozen=True):
    """One value on a Modbus device.

    Attributes:
        table: ``holding`` or ``input`` registers, ``coil`` or ``discrete`` input.
        address: the 0-based address in the table.
        type: the register type (``bool`` for coils and discrete inputs, the default there).
        scale: the factor from the raw value to the stream's value.
        offset: added after scaling.
        word_order: ``big`` (most significant word first, the default) or ``little``, for 32-bit types.
    """

    table: Table = Table.HOLDING
    address: Address = 0
    type: Type | None = None
    scale: float = 1.0
    offset: float = 0.0
    word_order: Annotated[str, msgspec.Meta(pattern="^(big|little)$")] = "big"

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
