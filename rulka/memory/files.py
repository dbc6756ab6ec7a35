"""A replay memory's files, read back without unpickling anything.

Two layouts, both described by ``replay.json`` (the memory's plain data):

- **chunked** (what checkpoints write): every array is cut along its first axis into chunks of
  about ``ChunkStore.chunk_bytes``; each chunk is a raw file named by the SHA-256 of its bytes in
  a ``ChunkStore`` folder that checkpoints share. ``replay.json`` names the chunks of each array
  (key ``"chunks"``). A chunk whose bytes did not change since an earlier checkpoint already has
  its file, so a checkpoint writes only what changed; reading checks every chunk against its name.
- **whole** (``replay.npz`` beside ``replay.json``): every array in one npz; what checkpoints held
  before the chunked layout, and what ``save(directory)`` writes without a chunk store.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rulka.errors import BadInput

CHUNK_BYTES = 8 << 20
"""Default chunk size: large enough that a 10 GB memory is about a thousand files, small enough
that a checkpoint after a few seconds of data rewrites little beyond the new frames."""

_DIGEST = re.compile(r"[0-9a-f]{64}")
_DTYPE_KINDS = "biuf"  # plain numbers only: no object, void or string dtype from a file


class ChunkStore:
    """Content-addressed chunk files (``<sha256>.bin``) in one folder.

    ``put_array`` writes the chunks of an array that are not there yet and returns the entry
    ``replay.json`` keeps; ``commit`` makes the new chunks durable and gives them their names
    (``write_replay`` calls it before writing the ``replay.json`` that names them);
    ``read_array`` rebuilds the array and checks every chunk's SHA-256.
    ``used`` maps every chunk this object put or reused to its size (what a checkpoint needs);
    ``bytes_written``/``chunks_written``/``chunks_reused`` count the work done.
    """

    def __init__(self, folder: Path, chunk_bytes: int = CHUNK_BYTES) -> None:
        self.folder = Path(folder)
        self.chunk_bytes = max(1, int(chunk_bytes))
        self.used: dict[str, int] = {}
        self.bytes_written = 0
        self.chunks_written = 0
        self.chunks_reused = 0
        self._pending: dict[str, Path] = {}  # digest -> temporary file, written but not committed

    def path(self, digest: str) -> Path:
        if not isinstance(digest, str) or not _DIGEST.fullmatch(digest):
            raise BadInput("replay", f"{digest!r} is not a chunk name (64 hex digits)")
        return self.folder / f"{digest}.bin"

    def has(self, digest: str, size: int) -> bool:
        """Whether chunk ``digest`` is stored with ``size`` bytes."""
        try:
            return self.path(digest).stat().st_size == size
        except OSError:
            return False

    def put(self, data: np.ndarray) -> str:
        """Store the bytes of the C-contiguous array ``data`` unless a chunk with the same
        SHA-256 exists; return the digest. A new chunk goes to a temporary file until
        ``commit``, so a file with a chunk's name is always complete."""
        view = memoryview(data.reshape(-1).view(np.uint8))
        digest = hashlib.sha256(view).hexdigest()
        self._use(digest, view.nbytes)
        if digest in self._pending or self.has(digest, view.nbytes):
            self.chunks_reused += 1
            return digest
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.folder / f".{digest}.tmp"
        with open(tmp, "wb") as f:
            f.write(view)
        self._pending[digest] = tmp
        self.bytes_written += view.nbytes
        self.chunks_written += 1
        return digest

    def commit(self) -> None:
        """fsync every chunk written since the last commit, then rename it to its name: once
        named, a chunk survives a power loss, so a later checkpoint may name it again. (Syncing
        after all writes lets the disk work while the next chunks are hashed.)"""
        for digest, tmp in self._pending.items():
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
            os.replace(tmp, self.path(digest))
        self._pending.clear()

    def folder_from(self, directory: Path) -> str:
        """This store's folder as a file in ``directory`` names it: relative (checkpoint folders
        can move together), absolute where there is no relative path (another Windows drive)."""
        try:
            return Path(os.path.relpath(self.folder, directory)).as_posix()
        except ValueError:
            return str(self.folder.resolve())

    def _use(self, digest: str, size: int) -> None:
        self.used[digest] = size

    def rows_per_chunk(self, array: np.ndarray) -> int:
        row = array.itemsize * int(np.prod(array.shape[1:], dtype=np.int64))
        return max(1, self.chunk_bytes // max(1, row))

    def put_array(self, array: np.ndarray, previous: Mapping[str, Any] | None = None,
                  changed: Sequence[tuple[int, int]] | None = None) -> dict[str, Any]:
        """Put ``array`` (at least one dimension) as chunks; return its entry for ``replay.json``.

        ``previous`` (the entry of an earlier ``put_array`` of the same array into this folder)
        and ``changed`` (the row ranges ``[start, stop)`` written since) let chunks outside
        ``changed`` keep their digest without being read again; without them every chunk is
        hashed (and only new contents are written)."""
        array = np.ascontiguousarray(array)
        if array.ndim == 0:
            raise ValueError("put_array needs an array of at least one dimension")
        rows = self.rows_per_chunk(array)
        entry: dict[str, Any] = {"dtype": array.dtype.str, "shape": list(array.shape), "rows_per_chunk": rows}
        known: list[str] | None = None
        if (previous is not None and changed is not None and previous.get("dtype") == entry["dtype"]
                and previous.get("shape") == entry["shape"] and previous.get("rows_per_chunk") == rows):
            known = list(previous["chunks"])
        digests = []
        for i, start in enumerate(range(0, len(array), rows)):
            stop = min(start + rows, len(array))
            size = (stop - start) * (array.nbytes // max(1, len(array)))
            if (known is not None and i < len(known) and not any(a < stop and start < b for a, b in changed or ())
                    and self.has(known[i], size)):
                self._use(known[i], size)
                self.chunks_reused += 1
                digests.append(known[i])
            else:
                digests.append(self.put(array[start:stop]))
        entry["chunks"] = digests
        return entry

    def read_array(self, name: str, entry: Mapping[str, Any]) -> np.ndarray:
        """The array ``entry`` describes, every chunk checked against its SHA-256 (``BadInput``
        when a chunk is missing, short or damaged, or the entry is malformed)."""
        try:
            dtype = np.dtype(str(entry["dtype"]))
            shape = tuple(int(s) for s in entry["shape"])
            rows = int(entry["rows_per_chunk"])
            digests = list(entry["chunks"])
        except (KeyError, TypeError, ValueError) as exc:
            raise BadInput("replay", f"array {name!r}: malformed chunk entry ({exc})") from None
        if dtype.kind not in _DTYPE_KINDS or dtype.hasobject or not shape or min(shape) < 0 or rows < 1:
            raise BadInput("replay", f"array {name!r}: unsupported dtype {dtype} or shape {list(shape)}")
        if len(digests) != -(-shape[0] // rows):
            raise BadInput("replay", f"array {name!r}: {len(digests)} chunks for {shape[0]} rows of {rows}")
        row_bytes = dtype.itemsize * int(np.prod(shape[1:], dtype=np.int64))
        sizes = [(min(shape[0], (i + 1) * rows) - i * rows) * row_bytes for i in range(len(digests))]
        for digest, size in zip(digests, sizes):  # before allocating: the files bound the size
            if not self.has(digest, size):
                raise BadInput("replay", f"chunk {self.path(digest)} of {name!r} is missing or not {size} bytes")
        out = np.empty(shape, dtype)
        flat = out.reshape(-1).view(np.uint8)
        offset = 0
        for digest, size in zip(digests, sizes):
            self._read_into(digest, flat[offset:offset + size], name)
            offset += size
        return out

    def read_bytes(self, digest: str, size: int, what: str) -> bytes:
        """The ``size`` bytes of chunk ``digest``, checked against it (``BadInput`` otherwise)."""
        if not isinstance(size, int) or not self.has(digest, size):
            raise BadInput("replay", f"chunk {self.path(digest)} of {what} is missing or not {size} bytes")
        out = np.empty(size, np.uint8)
        self._read_into(digest, out, what)
        return out.tobytes()

    def _read_into(self, digest: str, part: np.ndarray, what: str) -> None:
        with open(self.path(digest), "rb") as f:
            got = f.readinto(memoryview(part))
        if got != part.nbytes or hashlib.sha256(memoryview(part)).hexdigest() != digest:
            raise BadInput("replay", f"chunk {self.path(digest)} of {what!r} is damaged (checksum mismatch)")

    def prune(self, keep: set[str]) -> int:
        """Delete chunk files (and leftover temporary files) whose digest is not in ``keep``;
        return how many went."""
        removed = 0
        if not self.folder.is_dir():
            return 0
        for p in self.folder.iterdir():
            stale_tmp = p.name.startswith(".") and p.name.endswith(".tmp")
            if stale_tmp or (p.suffix == ".bin" and p.stem not in keep):
                p.unlink(missing_ok=True)
                removed += 1
        return removed


def write_replay(directory: Path, arrays: Mapping[str, np.ndarray], meta: dict[str, Any],
                 chunks: ChunkStore | None = None, stored: Mapping[str, dict[str, Any]] | None = None) -> None:
    """Write ``arrays`` and ``meta`` into ``directory`` (created if needed).

    With ``chunks``: the arrays go into that store (``stored``: entries of arrays the caller
    already put there, e.g. by ``FrameStore.put_chunks``) and ``replay.json`` names them and
    the store's folder (relative, so the checkpoint folders can move together). Without:
    the whole layout (``replay.npz``)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    meta = dict(meta)
    if chunks is not None:
        entries = dict(stored or {})
        entries.update({k: chunks.put_array(v) for k, v in arrays.items() if k not in entries})
        chunks.commit()
        meta["chunks"] = {"folder": chunks.folder_from(directory), "arrays": entries}
        (directory / "replay.npz").unlink(missing_ok=True)
    else:
        tmp = directory / "replay.npz.tmp"
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)
        tmp.replace(directory / "replay.npz")
    (directory / "replay.json.tmp").write_text(json.dumps(meta))
    (directory / "replay.json.tmp").replace(directory / "replay.json")


def read_replay(directory: Path, chunks: ChunkStore | None = None) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """(meta, arrays) as ``write_replay`` wrote them, in either layout; ``BadInput`` when they
    cannot be read or a chunk does not match its SHA-256. A chunked ``meta`` keeps its
    ``"chunks"`` entry, with the folder made absolute (``FrameStore.restore`` remembers it).
    ``chunks``: the store to read from (default: the folder ``replay.json`` names, relative to
    ``directory``)."""
    directory = Path(directory)
    try:
        meta = json.loads((directory / "replay.json").read_text())
        if not isinstance(meta, dict):
            raise ValueError("replay.json is not an object")
        if "chunks" not in meta:
            with np.load(directory / "replay.npz", allow_pickle=False) as data:
                return meta, {k: data[k] for k in data.files}
        entries = meta["chunks"]["arrays"]
        if not isinstance(entries, dict):
            raise ValueError("chunk entries are not a map")
        store = chunks if chunks is not None else ChunkStore(directory / str(meta["chunks"]["folder"]))
        meta["chunks"]["folder"] = str(store.folder.resolve())
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise BadInput("replay", f"cannot read saved memory in {directory}: {exc}") from None
    return meta, {str(k): store.read_array(str(k), v) for k, v in entries.items()}
