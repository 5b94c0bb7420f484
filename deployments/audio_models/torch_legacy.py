"""Read a legacy (pre-1.6, non-zip) `torch.save` file into numpy arrays, without torch.

The format is five pickles in a row: a magic number, the protocol version, system info, the
object itself, and the list of storage keys; then, for each key in that order, the storage's
element count (int64, little-endian) and its raw bytes. In the object pickle a tensor is
`torch._utils._rebuild_tensor_v2(storage, offset, size, stride, ...)`, whose storage is a
persistent id `("storage", <type>, key, location, numel)`. Tensors are therefore built only
after the bytes that follow the pickle are read.

Only the globals a state dict needs are allowed (tensors, storages, OrderedDict), so a file
cannot run code while it is read, unlike `pickle.load`.
"""

from __future__ import annotations

import collections
import pickle
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

MAGIC = 0x1950A86A20F9469CFC6C
_STORAGE_DTYPES = {
    "FloatStorage": np.float32,
    "DoubleStorage": np.float64,
    "HalfStorage": np.float16,
    "LongStorage": np.int64,
    "IntStorage": np.int32,
    "ShortStorage": np.int16,
    "CharStorage": np.int8,
    "ByteStorage": np.uint8,
    "BoolStorage": np.bool_,
}


class TorchFileError(ValueError):
    """The file is not a legacy torch pickle of plain tensors; the message says why."""


@dataclass
class _Storage:
    dtype: type
    data: np.ndarray | None = None


@dataclass
class _Tensor:
    """A tensor whose storage bytes are not read yet."""

    storage: _Storage
    offset: int
    size: tuple
    stride: tuple
    extra: Any = field(default=None, repr=False)

    def array(self) -> np.ndarray:
        item = self.storage.data.itemsize
        view = np.lib.stride_tricks.as_strided(
            self.storage.data[self.offset :], self.size, tuple(s * item for s in self.stride)
        )
        return np.array(view)  # a copy: owns its memory, contiguous


def _rebuild_tensor(storage, offset, size, stride, *extra):
    return _Tensor(storage, offset, tuple(size), tuple(stride), extra)


class _StorageType:
    def __init__(self, name: str):
        self.dtype = _STORAGE_DTYPES[name]


class _Unpickler(pickle.Unpickler):
    def __init__(self, file):
        super().__init__(file)
        self.storages: dict[str, _Storage] = {}

    def find_class(self, module: str, name: str):
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return _rebuild_tensor
        if module == "torch" and name in _STORAGE_DTYPES:
            return _StorageType(name)
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        raise TorchFileError(f"unexpected global {module}.{name} in a torch file")

    def persistent_load(self, pid):
        kind, storage_type, key, _location, _numel = pid[:5]
        if kind != "storage" or not isinstance(storage_type, _StorageType):
            raise TorchFileError(f"unexpected persistent id {pid!r}")
        return self.storages.setdefault(key, _Storage(storage_type.dtype))


def load(path: str | Path) -> Any:
    """The saved object, with every tensor as a numpy array."""
    with open(path, "rb") as f:
        if pickle.load(f) != MAGIC:
            raise TorchFileError(f"{path} is not a legacy torch file (a zip one needs torch.load)")
        pickle.load(f)  # protocol version
        pickle.load(f)  # system info (sizes, endianness)
        unpickler = _Unpickler(f)
        obj = unpickler.load()
        for key in pickle.load(f):
            storage = unpickler.storages[key]
            (numel,) = struct.unpack("<q", f.read(8))
            nbytes = numel * np.dtype(storage.dtype).itemsize
            storage.data = np.frombuffer(f.read(nbytes), dtype=storage.dtype, count=numel)
    return _resolve(obj)


def _resolve(obj: Any) -> Any:
    if isinstance(obj, _Tensor):
        return obj.array()
    if isinstance(obj, dict):
        return type(obj)((k, _resolve(v)) for k, v in obj.items())
    if isinstance(obj, (list, tuple)):
        return type(obj)(_resolve(v) for v in obj)
    return obj
