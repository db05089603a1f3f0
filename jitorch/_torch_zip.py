"""PyTorch's checkpoint container: a zip archive of uncompressed records laid out the way ``torch.save`` writes them.

Every record lives under one top folder (the archive name). Each record's data starts on a 64-byte boundary: the
local header carries an ``FB`` extra field of ``Z`` padding, as PyTorch's miniz writer does, so readers that map the
file can view storages in place. Sizes and CRCs follow the data in a data descriptor; the central directory and a
zip64 end record close the file. Reading goes through :mod:`zipfile`, which also reads archives other tools wrote.

>>> import io
>>> buf = io.BytesIO()
>>> w = ZipWriter(buf, "archive")
>>> w.write_record("data.pkl", b"abc")
>>> w.finish()
>>> archive = TorchArchive(buf)
>>> archive.prefix, archive.read_record("data.pkl")
('archive', b'abc')
"""
from __future__ import annotations

import mmap as _mmap
import os
import struct
import zipfile
import zlib

import numpy as np

__all__ = ["ZipWriter", "TorchArchive", "archive_name_for", "STORAGE_ALIGNMENT"]

STORAGE_ALIGNMENT = 64
_U32_MAX = 0xFFFFFFFF
_UTF8_NAMES = 0x0800  # general purpose flag bit 11: names are UTF-8
_DATA_DESCRIPTOR = 0x0008  # flag bit 3: CRC and sizes follow the data
_CHUNK = 1 << 24  # bytes per CRC/write step, so huge storages are never copied whole


def archive_name_for(path) -> str:
    """The top folder name ``torch.save`` uses for a path: its base name without the last extension."""
    base = os.path.basename(os.fspath(path))
    stem = base[: base.rfind(".")] if "." in base else base
    return stem or "archive"


class ZipWriter:
    """Writes records to a binary stream in PyTorch's zip layout; only ``write`` is needed (streams may be pipes)."""

    def __init__(self, stream, archive_name: str, alignment: int = STORAGE_ALIGNMENT):
        self._stream = stream
        self._prefix = archive_name
        self._alignment = alignment
        self._offset = 0
        self._entries = []  # (name bytes, crc, size, local header offset)

    def _write(self, data) -> None:
        self._stream.write(data)
        self._offset += len(data) if not isinstance(data, memoryview) else data.nbytes

    def write_record(self, name: str, data) -> None:
        """Add ``<archive>/<name>`` holding ``data`` (bytes, a str, or a C-contiguous array written as raw bytes)."""
        if isinstance(data, str):
            data = data.encode()
        if isinstance(data, np.ndarray):
            data = memoryview(data.reshape(-1).view(np.uint8)) if data.size else b""
        view = memoryview(data).cast("B")
        size = view.nbytes
        full_name = f"{self._prefix}/{name}".encode()
        header_offset = self._offset
        zip64 = size >= _U32_MAX or header_offset >= _U32_MAX
        zip64_extra = b""
        if zip64:
            fields = (struct.pack("<QQ", 0, 0) if size >= _U32_MAX else b"") + (
                struct.pack("<Q", header_offset) if header_offset >= _U32_MAX else b"")
            zip64_extra = struct.pack("<HH", 1, len(fields)) + fields
        # The padding record ("FB", length, b"Z" * length) moves the data start onto the alignment boundary.
        start = header_offset + 30 + len(full_name) + len(zip64_extra) + 4
        pad = -start % self._alignment
        extra = zip64_extra + b"FB" + struct.pack("<H", pad) + b"Z" * pad
        flags = _UTF8_NAMES | (_DATA_DESCRIPTOR if size else 0)
        sizes = _U32_MAX if size >= _U32_MAX else 0
        self._write(struct.pack("<4sHHHHHIIIHH", b"PK\x03\x04", 0, flags, 0, 0, 0, 0, sizes, sizes,
                                len(full_name), len(extra)))
        self._write(full_name)
        self._write(extra)
        crc = 0
        for lo in range(0, size, _CHUNK):
            chunk = view[lo:lo + _CHUNK]
            crc = zlib.crc32(chunk, crc)
            self._write(chunk)
        if size:
            if zip64:
                self._write(struct.pack("<4sIQQ", b"PK\x07\x08", crc, size, size))
            else:
                self._write(struct.pack("<4sIII", b"PK\x07\x08", crc, size, size))
        self._entries.append((full_name, crc, size, header_offset, flags))

    def finish(self) -> None:
        """Write the central directory and the (zip64) end records; the stream stays open."""
        cd_offset = self._offset
        for name, crc, size, header_offset, flags in self._entries:
            fields = b""
            if size >= _U32_MAX:
                fields += struct.pack("<QQ", size, size)
            if header_offset >= _U32_MAX:
                fields += struct.pack("<Q", header_offset)
            extra = struct.pack("<HH", 1, len(fields)) + fields if fields else b""
            small_size = min(size, _U32_MAX)
            self._write(struct.pack("<4sHHHHHHIIIHHHHHII", b"PK\x01\x02", 0, 0, flags, 0, 0, 0, crc, small_size,
                                    small_size, len(name), len(extra), 0, 0, 0, 0, min(header_offset, _U32_MAX)))
            self._write(name)
            self._write(extra)
        cd_size = self._offset - cd_offset
        count = len(self._entries)
        eocd64_offset = self._offset
        self._write(struct.pack("<4sQHHIIQQQQ", b"PK\x06\x06", 44, 0x031E, 45, 0, 0, count, count, cd_size,
                                cd_offset))
        self._write(struct.pack("<4sIQI", b"PK\x06\x07", 0, eocd64_offset, 1))
        self._write(struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, min(count, 0xFFFF), min(count, 0xFFFF),
                                min(cd_size, _U32_MAX), min(cd_offset, _U32_MAX), 0))


class TorchArchive:
    """Reads the records of a checkpoint archive from a seekable binary stream.

    ``prefix`` is the archive's top folder (the first record's, as PyTorch's reader takes it).
    """

    def __init__(self, stream, path=None):
        self._stream = stream
        self._path = path
        self._zip = zipfile.ZipFile(stream)
        names = self._zip.namelist()
        if not names:
            raise RuntimeError("PytorchStreamReader failed reading zip archive: archive is empty")
        first = names[0]
        if "/" not in first:
            raise RuntimeError(f"PytorchStreamReader failed reading zip archive: file in archive is not in a "
                               f"subdirectory: {first}")
        self.prefix = first.split("/", 1)[0]
        self._infos = {info.filename: info for info in self._zip.infolist()}
        self._mapped = None

    def close(self) -> None:
        self._zip.close()

    def _info(self, name: str):
        info = self._infos.get(f"{self.prefix}/{name}")
        if info is None:
            raise RuntimeError(f"PytorchStreamReader failed locating file {name}: file not found")
        return info

    def has_record(self, name: str) -> bool:
        return f"{self.prefix}/{name}" in self._infos

    def record_size(self, name: str) -> int:
        return self._info(name).file_size

    def read_record(self, name: str) -> bytes:
        return self._zip.read(self._info(name))

    def _data_offset(self, info) -> int:
        # The local header's extra field (alignment padding) differs from the central directory's: read it.
        self._stream.seek(info.header_offset)
        header = self._stream.read(30)
        if len(header) != 30 or header[:4] != b"PK\x03\x04":
            raise RuntimeError(f"PytorchStreamReader failed reading file {info.filename}: bad local header")
        name_len, extra_len = struct.unpack("<HH", header[26:30])
        return info.header_offset + 30 + name_len + extra_len

    def read_into(self, name: str, out: np.ndarray) -> None:
        """Fill the 1-D uint8 array ``out`` with the record's bytes (``out.size`` must equal the record size)."""
        info = self._info(name)
        if info.file_size != out.size:
            raise RuntimeError(f"PytorchStreamReader failed reading file {name}: the record holds {info.file_size} "
                               f"bytes but the checkpoint describes {out.size}")
        if info.compress_type != zipfile.ZIP_STORED or not hasattr(self._stream, "readinto"):
            out[:] = np.frombuffer(self._zip.read(info), dtype=np.uint8)
            return
        self._stream.seek(self._data_offset(info))
        view, done = memoryview(out), 0
        while done < out.size:
            n = self._stream.readinto(view[done:])
            if not n:
                raise RuntimeError(f"PytorchStreamReader failed reading file {name}: file read failed")
            done += n

    def map_record(self, name: str, nbytes: int) -> np.ndarray:
        """A copy-on-write memory map of the record (writes stay private, as with PyTorch's ``mmap=True``)."""
        info = self._info(name)
        if info.file_size != nbytes:
            raise RuntimeError(f"PytorchStreamReader failed reading file {name}: the record holds {info.file_size} "
                               f"bytes but the checkpoint describes {nbytes}")
        if info.compress_type != zipfile.ZIP_STORED:
            raise RuntimeError(f"mmap=True needs uncompressed records, but {name} is compressed")
        if nbytes == 0:
            return np.empty(0, dtype=np.uint8)
        if self._mapped is None:
            with open(self._path, "rb") as fh:
                self._mapped = _mmap.mmap(fh.fileno(), 0, access=_mmap.ACCESS_COPY)
        return np.frombuffer(self._mapped, dtype=np.uint8, count=nbytes, offset=self._data_offset(info))
