"""Weights on disk: reading a checkpoint directory's weights into a state dict (safetensors, sharded or not; or
PyTorch `.bin`), and writing a safetensors file one tensor at a time (`SafetensorsWriter`)."""

from __future__ import annotations

import json
import shutil
import struct
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType

import torch
from safetensors.torch import load_file

SAFETENSORS_DTYPES = {
    torch.float64: "F64",
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.int16: "I16",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.bool: "BOOL",
}
"""The safetensors format's name of each dtype a model or optimizer state holds."""

COPY_CHUNK_BYTES = 16 * 2**20


def load_state_dict(path: Path) -> dict[str, torch.Tensor]:
    """Every tensor saved under `path` (``*.safetensors``, else ``pytorch_model*.bin``), on CPU.

    Raises:
        FileNotFoundError: `path` is not a directory, or holds no weight files.
    """
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: not a checkpoint directory")
    files = sorted(path.glob("*.safetensors"))
    state_dict: dict[str, torch.Tensor] = {}
    if files:
        for file in files:
            state_dict.update(load_file(str(file), device="cpu"))
        return state_dict
    files = sorted(path.glob("pytorch_model*.bin"))
    if not files:
        raise FileNotFoundError(f"{path}: no *.safetensors or pytorch_model*.bin weight files")
    for file in files:
        state_dict.update(torch.load(file, map_location="cpu", weights_only=True))
    return state_dict


class SafetensorsWriter:
    """A safetensors file written one tensor at a time: `add` writes each tensor's bytes as it comes (moved to the
    CPU and cast to `dtype` one at a time), so no whole state dict is ever held; `close` puts the header in front.

    The header (names, shapes, offsets) must precede the data and is known only at the end, so the data
    goes to a side file first and is then copied behind the header in chunks. The file appears whole
    (renamed into place) or not at all.

    Args:
        path: the file to write.
        dtype: cast floating-point tensors to this dtype (the serving dtype); None keeps each tensor's own.
    """

    def __init__(self, path: Path, dtype: torch.dtype | None = None) -> None:
        self.path = path
        self.dtype = dtype
        self.header: dict[str, dict[str, object]] = {}
        self.offset = 0
        path.parent.mkdir(parents=True, exist_ok=True)
        self.data_path = path.with_name(path.name + ".data")
        self.data = self.data_path.open("wb")

    def add(self, name: str, tensor: torch.Tensor) -> None:
        """Write `tensor` under `name` (each name once)."""
        if name in self.header:
            raise ValueError(f"{name}: written twice")
        with torch.no_grad():
            value = tensor.detach()
            if self.dtype is not None and value.is_floating_point():
                value = value.to(self.dtype)
            value = value.to("cpu").contiguous()
        if value.dtype not in SAFETENSORS_DTYPES:
            raise ValueError(f"{name}: dtype {value.dtype} has no safetensors name")
        size = value.numel() * value.element_size()
        if size:
            self.data.write(value.reshape(-1).view(torch.uint8).numpy().data)
        self.header[name] = {
            "dtype": SAFETENSORS_DTYPES[value.dtype],
            "shape": list(value.shape),
            "data_offsets": [self.offset, self.offset + size],
        }
        self.offset += size

    def close(self) -> Path:
        """Put the header in front of the data and the file in place."""
        self.data.close()
        header = {"__metadata__": {"format": "pt"}, **self.header}  # transformers reads only files that say "pt"
        encoded = json.dumps(header, separators=(",", ":")).encode()
        encoded += b" " * (-len(encoded) % 8)  # the format pads its header to 8 bytes with spaces
        partial = self.path.with_name(self.path.name + ".tmp")
        with partial.open("wb") as out, self.data_path.open("rb") as data:
            out.write(struct.pack("<Q", len(encoded)))
            out.write(encoded)
            shutil.copyfileobj(data, out, COPY_CHUNK_BYTES)
        self.data_path.unlink()
        partial.replace(self.path)
        return self.path

    def abort(self) -> None:
        """Drop what was written (the file in place, if any, stays as it was)."""
        self.data.close()
        self.data_path.unlink(missing_ok=True)

    def __enter__(self) -> SafetensorsWriter:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None) -> None:
        if kind is None:
            self.close()
        else:
            self.abort()


def write_safetensors(path: Path, tensors: Iterable[tuple[str, torch.Tensor]], dtype: torch.dtype | None = None) -> Path:
    """`tensors` (name, tensor pairs, consumed one at a time) as the safetensors file `path` (`SafetensorsWriter`)."""
    with SafetensorsWriter(path, dtype) as writer:
        for name, tensor in tensors:
            writer.add(name, tensor)
    return path


__all__ = ["SAFETENSORS_DTYPES", "SafetensorsWriter", "load_state_dict", "write_safetensors"]
