"""Exact integers of any size in numpy arrays: a sign and 64-bit limbs per entry.

Python ints cost more to create than a whole exact draw at σ² = 10**100 on the
vectorised path (about 0.1 µs each in bulk, :meth:`BigIntArray.to_object`, against
about 0.05 µs per draw); :class:`BigIntArray` keeps such draws as fixed-width binary
numbers in two numpy arrays until (and unless) Python ints are wanted.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gaussdp.errors import invalid

__all__ = ["BigIntArray"]

# Values converted to Python ints per pickle stream (the stream is at most ~35 bytes each).
_PICKLE_BLOCK = 1 << 14
# Pickle opcodes (protocol 2, Lib/pickletools.py): PROTO 2, EMPTY_LIST, MARK; per value
# LONG1 and a one-byte length (LONG4 and four bytes past 255 bytes); APPENDS, STOP.
_PICKLE_HEAD = b"\x80\x02]("
_PICKLE_LONG1 = b"\x8a"
_PICKLE_LONG4 = b"\x8b"
_PICKLE_TAIL = b"e."


@dataclass(frozen=True, slots=True, eq=False)
class BigIntArray:
    r"""An array of exact integers too wide for int64: a sign bit and 64-bit limbs each.

    Entry ``i`` is ``(-1)**negative[i] * sum(magnitude[i, j] * 2**(64 j))``: limbs
    are little-endian (``magnitude[..., 0]`` is the least significant). Zero is
    never negative. The constructor keeps read-only copies of the arrays, so an
    instance cannot change after it is built.

    :func:`~gaussdp.sampling.discrete_gaussian` returns one with
    ``big_ints="limbs"`` when σ² > 2**80; building it is about 3× faster than
    building the Python ints of the default object array.

    Parameters
    ----------
    negative : numpy.ndarray of bool
        The signs, of the array's shape.
    magnitude : numpy.ndarray of uint64
        The absolute values, shape ``negative.shape + (limbs,)`` with ``limbs >= 1``.

    Raises
    ------
    TypeError
        If the dtypes are not bool and uint64.
    ValueError
        If the shapes do not match, or an entry is a negative zero.

    Examples
    --------
    >>> import numpy as np
    >>> big = BigIntArray(np.array([False, True]), np.array([[5, 0], [0, 1]], dtype=np.uint64))
    >>> big.shape, big.limbs
    ((2,), 2)
    >>> big.tolist()
    [5, -18446744073709551616]
    """

    negative: npt.NDArray[np.bool_]
    magnitude: npt.NDArray[np.uint64]

    def __post_init__(self) -> None:
        negative, magnitude = self.negative, self.magnitude
        if not isinstance(negative, np.ndarray) or negative.dtype != np.bool_:
            raise TypeError(invalid("negative", "a numpy array of bool", negative))
        if not isinstance(magnitude, np.ndarray) or magnitude.dtype != np.uint64:
            raise TypeError(invalid("magnitude", "a numpy array of uint64", magnitude))
        if magnitude.ndim != negative.ndim + 1 or magnitude.shape[:-1] != negative.shape:
            raise ValueError(
                invalid("magnitude", f"of shape {negative.shape} + (limbs,)", magnitude.shape)
            )
        if magnitude.shape[-1] < 1:
            raise ValueError(invalid("magnitude", "at least one limb per entry", magnitude.shape))
        if bool(np.any(negative & ~magnitude.any(axis=-1))):
            raise ValueError(invalid("negative", "False where the magnitude is 0", negative))
        _freeze(self, negative.copy(), magnitude.copy())

    @classmethod
    def _owned(
        cls, negative: npt.NDArray[np.bool_], magnitude: npt.NDArray[np.uint64]
    ) -> BigIntArray:
        """Wrap arrays that nobody else references (the sampler's), without copying."""
        self = object.__new__(cls)
        _freeze(self, negative, magnitude)
        return self

    @property
    def shape(self) -> tuple[int, ...]:
        """The array's shape (that of :attr:`negative`)."""
        return self.negative.shape

    @property
    def size(self) -> int:
        """The number of entries."""
        return self.negative.size

    @property
    def ndim(self) -> int:
        """The number of dimensions."""
        return self.negative.ndim

    @property
    def limbs(self) -> int:
        """The number of 64-bit limbs per entry."""
        return int(self.magnitude.shape[-1])

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d BigIntArray")
        return self.shape[0]

    @classmethod
    def _from_ints(cls, values: npt.NDArray[np.generic], limbs: int) -> BigIntArray:
        """Python ints (each below 2**(64 limbs) in magnitude) as a BigIntArray; for a few."""
        flat = values.ravel().tolist()
        negative = np.array([v < 0 for v in flat], dtype=np.bool_).reshape(values.shape)
        raw = b"".join([abs(v).to_bytes(8 * limbs, "little") for v in flat])
        magnitude = np.frombuffer(raw, dtype="<u8").astype(np.uint64)
        return cls._owned(negative, magnitude.reshape((*values.shape, limbs)))

    def to_object(self) -> npt.NDArray[np.object_]:
        """The entries as a numpy object array of Python ints, of the same shape.

        The ints are built in C, a block at a time, by :func:`pickle.loads` of a stream
        that this method writes itself: a list of ``LONG1`` records, each the value's
        two's complement in little-endian bytes, as wide as the block's largest value
        needs (pickle protocol 2; no other opcode, and nothing from outside is read).
        About twice as fast as one :meth:`int.from_bytes` call per value, which cost
        more than drawing the value.

        Examples
        --------
        >>> import numpy as np
        >>> BigIntArray(np.array(True), np.array([7], dtype=np.uint64)).to_object()
        array(-7, dtype=object)
        """
        limbs = self.limbs
        magnitude = self.magnitude.reshape(-1, limbs)
        negative = self.negative.ravel()
        out = np.empty(len(negative), dtype=object)
        for start in range(0, len(out), _PICKLE_BLOCK):
            stop = min(start + _PICKLE_BLOCK, len(out))
            out[start:stop] = _ints(negative[start:stop], magnitude[start:stop])
        return out.reshape(self.shape)

    def tolist(self) -> object:
        """The entries as (nested) lists of Python ints, like :meth:`numpy.ndarray.tolist`."""
        return self.to_object().tolist()

    def __array__(self, dtype: object = None, copy: object = None) -> npt.NDArray[np.generic]:
        """``numpy.asarray(big)``: the object array of :meth:`to_object` (cast to ``dtype``).

        A cast to float64 rounds each Python int correctly (``float(int)``).
        """
        values = self.to_object()
        return values if dtype is None else values.astype(dtype)  # type: ignore[call-overload]

    def __repr__(self) -> str:
        return f"BigIntArray({self.tolist()!r})"


def _freeze(
    big: BigIntArray, negative: npt.NDArray[np.bool_], magnitude: npt.NDArray[np.uint64]
) -> None:
    """Make the arrays read-only and set them as ``big``'s fields."""
    negative.flags.writeable = False
    magnitude.flags.writeable = False
    object.__setattr__(big, "negative", negative)
    object.__setattr__(big, "magnitude", magnitude)


def _ints(negative: npt.NDArray[np.bool_], magnitude: npt.NDArray[np.uint64]) -> list[int]:
    """The values ``(-1)**negative * magnitude`` (limbs little-endian) as Python ints.

    Each value is written as a pickle ``LONG1`` (``LONG4`` past 255 bytes) record: its
    two's complement in ``8 limbs + 1`` bytes, little-endian (a width set by the number
    of limbs, not by the values). The two's complement of ``x`` with sign word ``s``
    (0, or all ones when negative) is ``(x XOR s) + (s AND 1)`` over the limbs and ``s``
    above them: the carry of the ``+ 1`` goes past limb ``j`` only where limbs ``0..j``
    of ``x`` are all 0.
    """
    count, limbs = magnitude.shape
    width = 8 * limbs + 1  # the limbs and a sign byte
    head = (
        _PICKLE_LONG1 + bytes([width])
        if width < 256
        else _PICKLE_LONG4 + width.to_bytes(4, "little")
    )
    words = np.empty((count, limbs + 1), dtype="<u8")
    sign = words[:, limbs]
    np.negative(negative, out=sign, dtype=np.uint64, casting="unsafe")  # 0 or all ones
    for j in range(limbs):  # limb by limb: faster than one broadcast over the rows
        np.bitwise_xor(magnitude[:, j], sign, out=words[:, j])
    words[:, 0] += negative
    carried = np.flatnonzero(negative & (magnitude[:, 0] == 0))  # rarely any
    for j in range(1, limbs + 1):  # into the sign word too: a negative zero is 0
        words[carried, j] += np.uint64(1)
        carried = carried[words[carried, j] == 0]
    record = len(head) + width
    stream = np.empty(len(_PICKLE_HEAD) + count * record + len(_PICKLE_TAIL), dtype=np.uint8)
    stream[: len(_PICKLE_HEAD)] = np.frombuffer(_PICKLE_HEAD, dtype=np.uint8)
    stream[len(stream) - len(_PICKLE_TAIL) :] = np.frombuffer(_PICKLE_TAIL, dtype=np.uint8)
    records = stream[len(_PICKLE_HEAD) : len(stream) - len(_PICKLE_TAIL)].reshape(count, record)
    records[:, : len(head)] = np.frombuffer(head, dtype=np.uint8)
    records[:, len(head) :] = words.view(np.uint8).reshape(count, -1)[:, :width]
    values: list[int] = pickle.loads(stream.data)
    return values
