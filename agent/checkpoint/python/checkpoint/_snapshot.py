"""One snapshot file: a header, the object pickled the way torch.save pickles it except that each tensor storage
is a reference, and each storage's bytes once, 64-byte aligned:

    b"CTRUNCK1" | u64 header length | header (JSON) | pickle | storage 0 | storage 1 | ...

The header says where the pickle and every storage are (offsets from the start of the file). A snapshot is planned
first (pickling only: nothing is allocated, an unpicklable object fails here), then written straight into the
mapped file: the storages' bytes are copied once, from the tensors (a CUDA tensor's from the device) into the
shared memory the agent owns.

A snapshot of a multi-node job (the agent may copy it to another node) ends with a 64-byte digest trailer, which
agents check before they keep or load a copy that crossed from another node (agent/checkpoint/snapshot_digest.hpp
says why CRC-32 per chunk and lays the trailer out):

    ... | b"CTRUNDG1" | u32 1 | u32 root | u64 chunk bytes | u64 payload bytes | 32 zero bytes

root: the CRC-32 of every chunk's CRC-32 (u32 little-endian each), the chunks cutting the payload (every byte before
the trailer) every `chunk bytes`; the chunks' CRCs are computed on a few threads (zlib releases the GIL)."""

import concurrent.futures
import io
import json
import mmap
import os
import pickle
import struct
import threading
import zlib

import torch

MAGIC = b"CTRUNCK1"
ALIGN = 64
_LENGTH = struct.Struct("<Q")
TRAILER_MAGIC = b"CTRUNDG1"
TRAILER_BYTES = 64
DIGEST_CHUNK = 16 << 20
_TRAILER = struct.Struct("<8sIIQQ32x")
_digest_pool = None
_digest_pool_lock = threading.Lock()


def _pool():
    """A few threads for the chunks' CRCs, made once per process."""
    global _digest_pool
    with _digest_pool_lock:
        if _digest_pool is None:
            _digest_pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=max(1, min(4, os.cpu_count() or 1)), thread_name_prefix="ctrun-ck-digest")
        return _digest_pool


def digest_trailer(view, payload):
    """The trailer of a snapshot whose first `payload` bytes are `view` (a memoryview)."""
    chunks = list(_pool().map(lambda at: zlib.crc32(view[at:min(at + DIGEST_CHUNK, payload)]),
                              range(0, payload, DIGEST_CHUNK)))
    root = zlib.crc32(struct.pack(f"<{len(chunks)}I", *chunks))
    return _TRAILER.pack(TRAILER_MAGIC, 1, root, DIGEST_CHUNK, payload)


def _aligned(n):
    return (n + ALIGN - 1) // ALIGN * ALIGN


def _untyped(storage):
    """The untyped storage under a TypedStorage (torch 2.x: _untyped_storage; 1.13: _storage)."""
    inner = getattr(storage, "_untyped_storage", None)
    return inner if inner is not None else storage._storage


def _bytes_of(untyped):
    """A uint8 tensor over every byte of an untyped storage, on its device (no copy)."""
    n = untyped.nbytes()
    return torch.empty(0, dtype=torch.uint8, device=untyped.device).set_(untyped, 0, (n,), (1,))


def _typed(untyped, dtype):
    try:
        return torch.storage.TypedStorage(wrap_storage=untyped, dtype=dtype, _internal=True)  # torch 2.x
    except TypeError:
        return torch.storage.TypedStorage(wrap_storage=untyped, dtype=dtype)  # 1.13


def _untyped_of_tensor(t):
    return t.untyped_storage() if hasattr(t, "untyped_storage") else _untyped(t.storage())


class _Pickler(pickle.Pickler):
    """torch.save's pickling, with each storage replaced by ("ctrun", key, dtype name) and kept aside."""

    def __init__(self, buffer):
        super().__init__(buffer, protocol=2)
        self.keys = {}
        self.storages = []  # untyped storages, in key order
        self.dtypes = []  # the dtype each storage was first pickled as, in key order

    def persistent_id(self, obj):
        if isinstance(obj, torch.storage.TypedStorage):
            untyped, dtype = _untyped(obj), obj.dtype
        elif torch.is_storage(obj):
            untyped, dtype = obj, torch.uint8
        else:
            return None
        key = self.keys.get(untyped._cdata)
        if key is None:
            key = self.keys[untyped._cdata] = len(self.storages)
            self.storages.append(untyped)
            self.dtypes.append(str(dtype).replace("torch.", ""))
        return ("ctrun", key, str(dtype).replace("torch.", ""))


class Plan:
    """A snapshot laid out but not written: its size is known before anything is allocated."""

    def __init__(self, obj, step, rank, world_size, digest=False):
        buffer = io.BytesIO()
        pickler = _Pickler(buffer)
        pickler.dump(obj)  # raises for what cannot be pickled, before any memory is taken
        self.pickle = buffer.getvalue()
        self.storages = pickler.storages
        header = {"step": step, "rank": rank, "world_size": world_size, "torch": torch.__version__}
        # Offsets depend on the header's length, which depends on the offsets' digits: lay out from a bound.
        sizes = [s.nbytes() for s in self.storages]
        bound = len(json.dumps(dict(header, pickle=[0, 0], storages=[[0, 0]] * len(sizes), dtypes=pickler.dtypes)))
        bound += 48 * (len(sizes) + 1)
        at = _aligned(len(MAGIC) + _LENGTH.size + bound)
        header["pickle"] = [at, len(self.pickle)]
        at = _aligned(at + len(self.pickle))
        header["dtypes"] = pickler.dtypes  # what read(into=) checks the caller's tensors against
        header["storages"] = []
        for n in sizes:
            header["storages"].append([at, n])
            at = _aligned(at + n)
        self.header = json.dumps(header).encode()
        assert len(MAGIC) + _LENGTH.size + len(self.header) <= header["pickle"][0]
        self.payload = max(at, ALIGN)
        self.digest = digest
        self.size = self.payload + (TRAILER_BYTES if digest else 0)
        self.layout = header

    def by_pwrite(self):
        """Whether this snapshot can be written through a FileWriter: every storage on the CPU and no digest (which
        reads the written bytes back through a mapping)."""
        return not self.digest and all(s.device.type == "cpu" for s in self.storages)

    def write(self, mapped):
        """Writes the snapshot into `mapped`: a writable mmap of at least self.size bytes, or a FileWriter (when
        by_pwrite())."""
        mapped[0:len(MAGIC)] = MAGIC
        mapped[len(MAGIC):len(MAGIC) + _LENGTH.size] = _LENGTH.pack(len(self.header))
        start = len(MAGIC) + _LENGTH.size
        mapped[start:start + len(self.header)] = self.header
        at, n = self.layout["pickle"]
        mapped[at:at + n] = self.pickle
        for storage, (at, n) in zip(self.storages, self.layout["storages"]):
            if n == 0:
                continue
            if isinstance(mapped, FileWriter):
                mapped[at:at + n] = memoryview(_bytes_of(storage).numpy())
                continue
            view = torch.frombuffer(mapped, dtype=torch.uint8, count=n, offset=at)
            view.copy_(_bytes_of(storage))
            del view  # the mmap cannot close while a tensor still exports it
        if self.digest:
            with memoryview(mapped) as whole:
                mapped[self.payload:self.size] = digest_trailer(whole, self.payload)


class FileWriter:
    """An open snapshot file written as a mapping would be (`writer[at:at + n] = bytes`), by pwrite: the kernel copies
    from the tensors into the file's pages through its own mapping of them. Through an mmap instead, each save's new
    mapping of the file costs the first touch of every page again, 5x the copy itself on the dev VM
    (docs/benchmarks.md)."""

    def __init__(self, fd):
        self.fd = fd

    def __setitem__(self, where, data):
        _pwrite_all(self.fd, data, where.start or 0)


def read(path, copy=True, into=None, check=None, pages=None):
    """The object of a snapshot file, its tensors CPU tensors in memory of their own. Returns (header, object).
    into: an object laid out as the one saved (the same tensors in the same order, each storage of the same size and
    dtype, on the CPU), whose tensors receive the saved bytes in place: nothing is allocated, and the pages written
    are already the caller's (a new tensor's first touch of every page costs more than the copy). The returned
    object's tensors are views of into's storages. ValueError, before anything is written, when into differs.
    copy=False: the tensors are views of a private (copy-on-write) mapping of the file instead, nothing copied
    until they are read; for readers that copy what they need elsewhere at once (MemoryReader, the spill process):
    a page not yet written through such a mapping still shows the file, whose pages the rank's next save but one
    overwrites (the spare), so it is no way to hand tensors to a caller who keeps them.
    check: called with the header before anything is read (it raises to refuse the snapshot).
    pages: a callable given the file's size that returns an open file of that size (or None) whose pages are in
    memory already and are the caller's alone (RankDir.take_pages): without into, the snapshot is copied into it
    whole and the tensors are views of its shared mapping, so no page of theirs is allocated anew (the first touch
    of each page through the new mapping is still paid, by the caller's first use)."""
    if not copy:
        return _view(path)
    # pread into each tensor: one copy by the kernel, and no page faults on the source (a mapping of the file
    # faulted in every page of it as well as every page of the copy; twice the time).
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        start = len(MAGIC) + _LENGTH.size
        head = _pread(fd, start, 0)
        if head[:len(MAGIC)] != MAGIC:
            raise RuntimeError(f"{path} is not a ctrun checkpoint snapshot")
        (length,) = _LENGTH.unpack(head[len(MAGIC):])
        header = json.loads(_pread(fd, length, start))
        if check is not None:
            check(header)
        if into is None and pages is not None:
            taken = pages(os.fstat(fd).st_size)
            if taken is not None:
                with taken:
                    storages = _copied_into(fd, taken, header)
                at, n = header["pickle"]
                return header, _unpickle(_pread(fd, n, at), storages)
        storages = _targets(header, into)
        for storage, (at, n) in zip(storages, header["storages"]):
            if n:
                _pread_into(fd, memoryview(_bytes_of(storage).numpy()), at)
        at, n = header["pickle"]
        return header, _unpickle(_pread(fd, n, at), storages)
    finally:
        os.close(fd)


def _copied_into(fd, taken, header):
    """The snapshot's bytes copied into `taken` (an open file of the snapshot's size), and a storage per saved one
    viewing its shared mapping (which lives as long as a tensor does; the file is unlinked, so nothing else sees
    it). The copy is the kernel's, file to file (copy_file_range): a copy through the new mapping costs every
    page's first touch in it, and the caller's first use of the tensors pays that again. MAP_POPULATE: the pages
    are mapped in one call, not faulted one by one."""
    size = os.fstat(taken.fileno()).st_size
    try:  # file to file in the kernel; the pages are then mapped, and first touched by whoever uses them
        done = 0
        while done < size:
            got = os.copy_file_range(fd, taken.fileno(), size - done, done, done)
            if got == 0:
                raise RuntimeError(f"a snapshot file ended {size - done} bytes early")
            done += got
        mapped = mmap.mmap(taken.fileno(), size, flags=mmap.MAP_SHARED | mmap.MAP_POPULATE)
    except OSError:  # no copy_file_range between these files: through the mapping
        mapped = mmap.mmap(taken.fileno(), size, flags=mmap.MAP_SHARED | mmap.MAP_POPULATE)
        with memoryview(mapped) as whole:
            _pread_into(fd, whole, 0)
    return _storages_over(mapped, header)


def _storages_over(mapped, header):
    """A storage per saved one, viewing its bytes in `mapped` (which lives as long as a tensor viewing it)."""
    storages = []
    for at, n in header["storages"]:
        view = torch.frombuffer(mapped, dtype=torch.uint8, count=n, offset=at) if n else torch.empty(0, dtype=torch.uint8)
        storages.append(_untyped_of_tensor(view))
    return storages


def _targets(header, into):
    """The untyped storages a snapshot's bytes go to: new ones, or into's after checking they match the saved."""
    sizes = [n for _, n in header["storages"]]
    if into is None:
        return [_untyped_of_tensor(torch.empty(n, dtype=torch.uint8)) for n in sizes]
    pickler = _Pickler(io.BytesIO())
    try:
        pickler.dump(into)
    except Exception as e:
        raise ValueError(f"into= cannot be pickled as torch.save would ({type(e).__name__}: {e}); pass the object "
                         "laid out as the one saved (e.g. a state dict), or none") from e
    mine = [(s.nbytes(), dtype) for s, dtype in zip(pickler.storages, pickler.dtypes)]
    saved = list(zip(sizes, header.get("dtypes", [None] * len(sizes))))
    if len(mine) != len(saved):
        raise ValueError(f"into= holds {len(mine)} tensor storages, the snapshot of step {header['step']} "
                         f"{len(saved)}: pass an object laid out as the one saved (the same state dict), or none")
    for key, ((n, dtype), (saved_n, saved_dtype), storage) in enumerate(zip(mine, saved, pickler.storages)):
        if n != saved_n or (saved_dtype is not None and dtype != saved_dtype):
            raise ValueError(f"into=: storage {key} (in pickling order) is {n} bytes of {dtype}, the snapshot of step "
                             f"{header['step']} saved {saved_n} bytes of {saved_dtype} there: pass an object laid "
                             "out as the one saved (the same state dict), or none. Nothing was written.")
        if storage.device.type != "cpu":
            raise ValueError(f"into=: storage {key} is on {storage.device}; into= takes CPU tensors (load without "
                             "it and copy to the device)")
    return pickler.storages


def _pwrite_all(fd, data, offset):
    view = memoryview(data)
    done = 0
    while done < len(view):
        done += os.pwritev(fd, [view[done:]], offset + done)


def _pread(fd, n, offset):
    buffer = bytearray(n)
    _pread_into(fd, memoryview(buffer), offset)
    return bytes(buffer)


def _pread_into(fd, view, offset):
    done = 0
    while done < len(view):
        got = os.preadv(fd, [view[done:]], offset + done)
        if got == 0:
            raise RuntimeError(f"a snapshot file ended {len(view) - done} bytes early")
        done += got


def _view(path):
    with open(path, "rb") as f:
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)  # lives as long as a tensor viewing it
    if mapped[:len(MAGIC)] != MAGIC:
        raise RuntimeError(f"{path} is not a ctrun checkpoint snapshot")
    (length,) = _LENGTH.unpack(mapped[len(MAGIC):len(MAGIC) + _LENGTH.size])
    start = len(MAGIC) + _LENGTH.size
    header = json.loads(mapped[start:start + length])
    at, n = header["pickle"]
    return header, _unpickle(mapped[at:at + n], _storages_over(mapped, header))


def _unpickle(data, storages):
    unpickler = pickle.Unpickler(io.BytesIO(data))
    typed = {}

    def persistent_load(saved_id):
        _, key, dtype = saved_id
        if (key, dtype) not in typed:
            typed[(key, dtype)] = _typed(storages[key], getattr(torch, dtype))
        return typed[(key, dtype)]

    unpickler.persistent_load = persistent_load
    return unpickler.load()
