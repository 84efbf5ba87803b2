"""This rank's snapshots in the job's directory (names: _contract.py): which complete steps it holds, room for a
new one taken under the directory's lock and within the node's limit, and the atomic publication (a rename) that
makes a step complete, after which only the newest KEPT_STEPS are kept. The step that falls out becomes the rank's
spare file (unless the spill process holds another link to it), which the next save writes into: its pages are already allocated and in memory, so a save in steady
state costs a copy, not a copy plus a fresh allocation of every page."""

import contextlib
import errno
import fcntl
import os

from . import _contract

MiB = 1 << 20


def _size(n):
    return f"{n / MiB:.1f} MiB ({n} bytes)"


def _allocated(path):
    try:
        return os.stat(path).st_blocks * 512
    except FileNotFoundError:
        return 0


def used_bytes(directory):
    """Memory every file of the job's directory takes (partial snapshots included): what the limit bounds. A file
    with several links (a step the spill process is copying to --checkpoint-dir) counts once."""
    total = 0
    seen = set()
    for root, _, files in os.walk(directory):
        for name in files:
            with contextlib.suppress(FileNotFoundError):
                st = os.stat(os.path.join(root, name))
                if st.st_nlink > 1:
                    if st.st_ino in seen:
                        continue
                    seen.add(st.st_ino)
                total += st.st_blocks * 512
    return total


@contextlib.contextmanager
def _locked(directory):
    fd = os.open(os.path.join(directory, _contract.LOCK_FILE), os.O_RDWR | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock, as a crash would


class RankDir:
    def __init__(self, setting):
        self.setting = setting
        self.path = setting.rank_dir()
        os.makedirs(self.path, mode=0o700, exist_ok=True)

    def held(self, sizes=False):
        """The complete steps this rank holds, oldest first (with sizes: {step: bytes})."""
        steps = {}
        with os.scandir(self.path) as entries:
            for e in entries:
                step = _contract.step_of(e.name)
                if step is not None:
                    with contextlib.suppress(FileNotFoundError):
                        steps[step] = e.stat().st_blocks * 512
        return dict(sorted(steps.items())) if sizes else sorted(steps)

    def file_of(self, step):
        return os.path.join(self.path, _contract.step_file(step))

    def reserve(self, step, nbytes):
        """A new partial file of nbytes, its memory allocated, or an error naming the sizes when the node's limit
        would be passed (then nothing was allocated). Returns (path, open file)."""
        directory = self.setting.directory
        spare = os.path.join(self.path, _contract.SPARE_FILE)
        with _locked(directory):
            used = used_bytes(directory)
            more = max(0, nbytes - _allocated(spare))  # the spare is counted in `used` already
            if used + more > self.setting.limit:
                raise MemoryError(
                    f"ck.save(step {step}) on rank {self.setting.rank}: a snapshot of {_size(nbytes)} would pass "
                    f"this node's checkpoint memory limit of {_size(self.setting.limit)}: {_size(used)} are held "
                    f"already (each rank keeps its {_contract.KEPT_STEPS} newest steps and writes a third). Nothing "
                    "held was lost. Raise the limit with ctrun --checkpoint-memory, or save less.")
            path = os.path.join(self.path, f"{_contract.PARTIAL_PREFIX}{step}-{os.getpid()}")
            if more < nbytes:
                os.rename(spare, path)
                f = open(path, "r+b")
                os.ftruncate(f.fileno(), nbytes)  # a larger spare gives back what this snapshot does not need
            else:
                f = open(path, "w+b")
            try:
                os.posix_fallocate(f.fileno(), 0, nbytes)  # all of it now: a full tmpfs is an error, not SIGBUS
            except OSError as e:
                f.close()
                os.unlink(path)
                if e.errno != errno.ENOSPC:
                    raise
                raise MemoryError(
                    f"ck.save(step {step}) on rank {self.setting.rank}: {os.path.dirname(directory)} has no room "
                    f"for {_size(nbytes)} (within the limit of {_size(self.setting.limit)}, but the file system is "
                    "full). Nothing held was lost; lower ctrun --checkpoint-memory or free shared memory.") from None
            return path, f

    def take_pages(self, step, nbytes):
        """Memory for a load of `step` into new tensors: a file of this rank whose pages are allocated and in memory
        already, taken out of the directory (unlinked; the caller's open file keeps it, and its mapping then): the
        oldest step held below `step`, which no rank resumes from once every rank holds `step` (the next save
        would drop it), or else the spare. Neither when another process holds a link to it (the spill's copy).
        Returns (open file of nbytes, the step taken or None), or (None, None) when there is neither: then the
        caller allocates. This file's pages were allocated by an earlier save, so a load allocates none and the
        node's memory does not grow. Leaves the spare for the next save when it took a step."""
        with _locked(self.setting.directory):
            candidates = [(old, self.file_of(old)) for old in self.held() if old < step]
            candidates = candidates[:1] + [(None, os.path.join(self.path, _contract.SPARE_FILE))]
            for old, path in candidates:
                try:
                    f = open(path, "r+b")
                except FileNotFoundError:
                    continue
                if os.fstat(f.fileno()).st_nlink > 1:
                    f.close()
                    continue
                os.unlink(path)
                break
            else:
                return None, None
        try:
            allocated = os.fstat(f.fileno()).st_blocks * 512
            os.ftruncate(f.fileno(), nbytes)
            if allocated < nbytes:
                os.posix_fallocate(f.fileno(), 0, nbytes)  # a smaller file grows here; no SIGBUS in the copy
        except OSError:
            f.close()
            return None, None
        return f, old

    def publish(self, partial, step):
        """Makes `partial` the complete snapshot of `step`. Steps after it (from a timeline the job left when it
        resumed from an older step) go first; then the rename, atomic: a reader sees the old file or the new one,
        never a torn one. Then only the newest KEPT_STEPS remain."""
        with _locked(self.setting.directory):
            for old in self.held():
                if old > step:
                    os.unlink(self.file_of(old))
            os.rename(partial, self.file_of(step))
            spare = os.path.join(self.path, _contract.SPARE_FILE)
            for old in self.held()[:-_contract.KEPT_STEPS]:
                # A step with another link is being copied by the spill process (--checkpoint-dir): its pages are
                # not for reuse, so it goes (the spill's link keeps them) instead of becoming the spare.
                if os.path.exists(spare) or os.stat(self.file_of(old)).st_nlink > 1:
                    os.unlink(self.file_of(old))
                else:
                    os.rename(self.file_of(old), spare)
        return self.held()
