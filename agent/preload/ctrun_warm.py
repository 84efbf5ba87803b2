"""ctrun's warm process (`ctrun --preload MODULE[,MODULE...]`, docs/cli.md).

Run by the workers' own interpreter as `PYTHON -u ctrun_warm.py --fd N --preload MODS -- WORKER_ARGV...`, in the
job's common environment (no per-rank variable). It imports MODS once, refuses (and exits) if that started a
thread or initialised an accelerator, freezes the heap (gc.freeze) and then forks one worker per request that
ctrun sends over the socket on fd N (AF_UNIX, SOCK_SEQPACKET: one message per datagram). A forked worker runs its
program exactly as `PYTHON -u SCRIPT args` / `-m MOD args` / `-c CODE args` would, except that its imports are
done. The C++ side is agent/preload/warm_process.{hpp,cpp}; the protocol is described there once.

Who sees a worker's exit. The workers are children of this process, not of ctrun: it reports each child's pid
when forked and its wait status when it exits, and keeps the zombie until ctrun says `reap` (so the pid cannot be
recycled while ctrun may still signal it). Chosen over a double fork into ctrun's care (ctrun is a child
subreaper) because that needs ctrun to be a subreaper, races ctrun's reaping of adopted orphans against the
report of the pid, and leaves PR_SET_PDEATHSIG bound to the vanished intermediate process. Here every worker gets
PR_SET_PDEATHSIG=SIGKILL bound to this process, which gets it bound to ctrun: `kill -9 ctrun` kills this process,
which kills the workers (ctrun's guardian kills their process groups too, and this one's). Each worker leads its
own session and process group as a cold one does, so ctrun signals its group as before; this process is in none
of them, so a forwarded SIGUSR1 does not reach it. The environment block of this process (what
/proc/PID/environ shows for it and every worker forked from it) holds ctrun's CTRUN_JOB_TOKEN, so the escapee
sweep finds the workers' escaped descendants; ctrun's own sweep spares this process by its pid.

What differs from a cold worker, by construction: the hash seed (PYTHONHASHSEED unset: one random seed, that of
this process, for every worker), what /proc/PID/environ shows (this process's environment at exec; os.environ and
the C environ are the worker's), /proc/PID/cmdline padded with NUL bytes (its text is the worker's command), and
the modules this program imports itself (sys.modules holds them). State that imports seed at random is reseeded as a fresh interpreter
seeds it: `random` (by its own at-fork hook), numpy's global RandomState, torch's default CPU generator,
multiprocessing's authkey.
"""

import gc
import os
import signal
import socket
import sys

_PR_SET_PDEATHSIG = 1
_MAX_MESSAGE = 1 << 20  # a fork request is argv + environment; ctrun refuses to send more (warm_process.cpp)
_MAX_FDS = 3  # stdin, stdout, stderr of one worker


def _send(sock, *fields):
    sock.send(b"\0".join(f if isinstance(f, bytes) else str(f).encode() for f in fields))


# ---- what a worker runs: PYTHON -u (SCRIPT | -m MOD | -c CODE) ARGS ----------------------------------------------


class Program:
    """The part of a worker's argv after the interpreter, as ctrun builds it (agent/launch/worker_invocation.cpp)."""

    def __init__(self, argv):
        if len(argv) < 3 or argv[1] != b"-u":
            raise ValueError("not a `PYTHON -u ...` command: %r" % argv)
        self.argv = [os.fsdecode(a) for a in argv]  # as Python decodes its argv (surrogateescape)
        rest = self.argv[2:]
        if rest[0] in ("-m", "-c"):
            if len(rest) < 2:
                raise ValueError("%s needs an argument" % rest[0])
            self.kind, self.target, self.args = rest[0], rest[1], rest[2:]
        else:
            self.kind, self.target, self.args = "script", rest[0], rest[1:]

    def path0(self):
        """sys.path[0] as the interpreter computes it (Python 3.11: getpath / _PyPathConfig_ComputeSysPath0)."""
        if self.kind == "-c":
            return ""
        if self.kind == "-m":
            return os.getcwd()
        if os.path.isdir(self.target) or _is_zipfile(self.target):
            return os.path.abspath(self.target)
        return os.path.dirname(os.path.realpath(self.target))


def _is_zipfile(path):
    try:
        with open(path, "rb") as f:
            f.seek(-22, os.SEEK_END)  # the end-of-central-directory record of a zip without a comment
            return f.read(4) == b"PK\x05\x06"
    except OSError:
        return False


def _fresh_main():
    """A new __main__ module holding what the interpreter puts in it before running anything."""
    import builtins
    import importlib.machinery

    main = type(sys)("__main__")
    main.__dict__.update(__annotations__={}, __builtins__=builtins, __loader__=importlib.machinery.BuiltinImporter)
    sys.modules["__main__"] = main
    return main


def _run_program(program):
    """Runs the worker's program in this process as the interpreter's main would."""
    main = _fresh_main()
    if program.kind == "-c":
        sys.argv = ["-c"] + program.args
        sys.path[0] = ""
        exec(compile(program.target, "<string>", "exec", dont_inherit=True), main.__dict__)
        return
    import runpy

    if program.kind == "-m":
        sys.argv = ["-m"] + program.args  # runpy puts the module's file in argv[0], as `python -m` does
        sys.path[0] = os.getcwd()
        runpy._run_module_as_main(program.target, alter_argv=True)
        return
    sys.argv = [program.target] + program.args
    path = os.path.abspath(program.target)
    sys.path[0] = program.path0()
    if os.path.isdir(path) or _is_zipfile(path):  # a directory or zip with __main__.py
        runpy._run_module_as_main("__main__", alter_argv=False)
        return
    try:
        with open(path, "rb") as f:
            source = f.read()
    except OSError as e:
        print("%s: can't open file %r: [Errno %d] %s" % (program.argv[0], path, e.errno, e.strerror), file=sys.stderr)
        sys.exit(2)
    import importlib.machinery
    import importlib.util

    main.__file__ = path
    main.__cached__ = None
    if source[:4] == importlib.util.MAGIC_NUMBER:  # a .pyc given as the script
        import marshal

        main.__loader__ = importlib.machinery.SourcelessFileLoader("__main__", path)
        code = marshal.loads(source[16:])
    else:
        main.__loader__ = importlib.machinery.SourceFileLoader("__main__", path)
        code = compile(source, path, "exec", dont_inherit=True)
    exec(code, main.__dict__)


def _strip_own_frames(tb):
    """The traceback as the interpreter would show it: without this file's frames (they lead)."""
    own = _run_program.__code__.co_filename
    while tb is not None and tb.tb_frame.f_code.co_filename == own:
        tb = tb.tb_next
    return tb


def run_worker(task):
    """In a forked child: become the worker, run its program; an uncaught exception ends it as it ends python."""
    task.become_worker()
    try:
        _run_program(task.program)
    except SystemExit:
        raise  # the interpreter handles it at the top: exit code, or the message and 1
    except BaseException as e:
        tb = _strip_own_frames(e.__traceback__)
        e.__traceback__ = tb
        sys.last_type, sys.last_value, sys.last_traceback = type(e), e, tb
        sys.excepthook(type(e), e, tb)
        if isinstance(e, KeyboardInterrupt):  # python ends by SIGINT then (bpo-1054041)
            import atexit

            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        sys.exit(1)


# ---- the warm process --------------------------------------------------------------------------------------------


class Task:
    """One fork request, and in the child everything that turns this process into that worker."""

    def __init__(self, fields, fds, server):
        # fork \0 ID \0 CWD \0 CPUS \0 ARGC \0 ARGV... \0 ENV...   (CPUS: comma-separated, empty for none)
        self.id = fields[1]
        self.cwd = fields[2]
        self.cpus = [int(c) for c in fields[3].split(b",") if c]
        argc = int(fields[4])
        self.argv = fields[5 : 5 + argc]
        self.env = fields[5 + argc :]
        self.program = Program(self.argv)
        if len(fds) != 3:
            raise ValueError("a fork request carries 3 descriptors (stdin, stdout, stderr), not %d" % len(fds))
        self.fds = fds
        self.server = server

    def become_worker(self):
        self.server.close_in_child()
        for target, fd in enumerate(self.fds):
            os.dup2(fd, target, inheritable=True)
        for fd in set(self.fds):
            if fd > 2:
                os.close(fd)
        if self.cpus:
            os.sched_setaffinity(0, self.cpus)
        os.environb.clear()  # os.environ and os.environb share one mapping; both update the C environ
        for entry in self.env:
            key, sep, value = entry.partition(b"=")
            if sep and key:
                os.environb[key] = value
        os.chdir(self.cwd)
        sys.orig_argv = [os.fsdecode(a) for a in self.argv]
        _show_command(self.argv)
        _reseed()
        # A fresh interpreter would run sitecustomize now, with the worker's environment; the copy imported by
        # this process ran with the job's. One that sets up per-rank state (ctrun's hang detection: agent/hang/)
        # offers ctrun_worker_started() to do it again for each forked worker.
        hook = getattr(sys.modules.get("sitecustomize"), "ctrun_worker_started", None)
        if callable(hook):
            hook()


def _show_command(argv):
    """Makes /proc/self/cmdline (ps, pgrep -f, top) show the worker's command instead of this program's, as
    setproctitle does: written over the argument area the kernel set up at exec, NUL-terminated and padded with NULs
    (truncated if longer: a rank's command is rank 0's, which this process was started with, give or take the
    ${local_rank} digits)."""
    try:
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        start, end = int(fields[45]), int(fields[46])  # arg_start, arg_end: fields 48 and 49 of proc(5)
    except (OSError, IndexError, ValueError):
        return
    import ctypes

    room = end - start
    data = b"\0".join(argv)[: room - 1]
    ctypes.memmove(start, data + b"\0" * (room - len(data)), room)


def _reseed():
    """State seeded at random by an import, reseeded as a fresh interpreter would have seeded it."""
    nprandom = sys.modules.get("numpy.random")
    if nprandom is not None:
        nprandom.seed()  # the global RandomState: fresh OS entropy, as at numpy's import
    torch = sys.modules.get("torch")
    if getattr(torch, "default_generator", None) is not None:
        torch.default_generator.seed()  # the CPU generator (ATen seeds it from random_device); CUDA's are lazy
    mpprocess = sys.modules.get("multiprocessing.process")
    if mpprocess is not None:
        mpprocess.current_process().authkey = os.urandom(32)


class Server:
    def __init__(self, sock):
        self.sock = sock
        self.pid = os.getpid()
        self.children = {}  # pid -> True once its exit was reported (a zombie until ctrun says reap)
        self.wake_r = self.wake_w = -1

    def close_in_child(self):
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in (self.wake_r, self.wake_w):
            if fd >= 0:
                os.close(fd)
        self.sock.close()

    def serve(self):
        """Answers requests until ctrun closes the socket (returns None); in a forked child returns its Task."""
        import select

        self.wake_r, self.wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)
        while True:
            readable, _, _ = select.select([self.sock, self.wake_r], [], [])
            if self.wake_r in readable:
                while True:
                    try:
                        if not os.read(self.wake_r, 256):
                            break
                    except BlockingIOError:
                        break
                self.report_exits()
            if self.sock in readable:
                data, ancdata, flags, _ = self.sock.recvmsg(_MAX_MESSAGE, socket.CMSG_SPACE(_MAX_FDS * 4))
                fds = _received_fds(ancdata)
                if not data:
                    return None  # ctrun closed its end (or died): the workers die with this process
                task = self.handle(data, fds, flags)
                if task is not None:
                    return task

    def handle(self, data, fds, flags):
        fields = data.split(b"\0")
        verb = fields[0]
        if verb == b"reap":
            pid = int(fields[1])
            if self.children.get(pid):
                os.waitpid(pid, 0)
                del self.children[pid]
            return None
        if verb != b"fork":
            _close_all(fds)
            return None
        request_id = fields[1] if len(fields) > 1 else b"?"
        try:
            if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
                raise ValueError("the request was truncated")
            task = Task(fields, fds, self)
        except (ValueError, IndexError) as e:
            _close_all(fds)
            _send(self.sock, b"failed", request_id, "malformed fork request: %s" % e)
            return None
        try:
            pid = self.fork()
        except OSError as e:
            _close_all(fds)
            _send(self.sock, b"failed", request_id, "fork: %s" % e)
            return None
        if pid == 0:
            return task
        _close_all(fds)
        self.children[pid] = False
        _send(self.sock, b"started", request_id, pid)
        return None

    def fork(self):
        """Forks a child that leads its own process group (and session, when this process leads one: ctrun
        decided that for it, agent/process/worker_process.hpp) and dies with this process; returns once it does."""
        sys.stdout.flush()
        sys.stderr.flush()
        own_session = os.getsid(0) == self.pid
        ready_r, ready_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(ready_r)
                if own_session:
                    os.setsid()
                else:
                    os.setpgid(0, 0)
                _libc().prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
                if os.getppid() != self.pid:  # this process died before prctl took effect
                    os._exit(1)
                os.close(ready_w)  # EOF tells the parent: the process group exists now
            except BaseException:
                os._exit(127)
            return 0
        os.close(ready_w)
        try:
            os.read(ready_r, 1)  # ctrun signals the group by this pid as soon as it learns it
        finally:
            os.close(ready_r)
        return pid

    def report_exits(self):
        for pid, reported in list(self.children.items()):
            if reported:
                continue
            try:
                info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                del self.children[pid]
                continue
            if info is None:
                continue
            self.children[pid] = True
            _send(self.sock, b"exited", pid, _wait_status(info))


def _wait_status(info):
    """A waitid() result as the status word waitpid() gives (WIFEXITED, WTERMSIG, ... read it)."""
    if info.si_code == os.CLD_EXITED:
        return (info.si_status & 0xFF) << 8
    if info.si_code == os.CLD_DUMPED:
        return info.si_status | 0x80
    return info.si_status


def _received_fds(ancdata):
    fds = []
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            usable = len(data) - len(data) % 4
            fds.extend(int.from_bytes(data[i : i + 4], sys.byteorder) for i in range(0, usable, 4))
    return fds


def _close_all(fds):
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


_libc_handle = None


def _libc():
    global _libc_handle
    if _libc_handle is None:
        import ctypes

        _libc_handle = ctypes.CDLL(None, use_errno=True)
    return _libc_handle


# ---- the checks: what would make a forked worker differ from a cold one -----------------------------------------


def _threads():
    """What threads besides this one exist: the kernel's count (C threads too) and the names Python has for them."""
    try:
        others = len(os.listdir("/proc/self/task")) - 1
    except OSError:
        others = 0
    names = []
    threading = sys.modules.get("threading")
    if threading is not None:
        names = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
    count = max(others, len(names))
    if count == 0:
        return None
    return "%d thread(s)%s" % (count, ": " + ", ".join(names) if names else " (not Python's)")


def _accelerator_in_use():
    """Why the accelerator counts as initialised, or None: torch says so, or a device file of a driver is open."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None) if torch is not None else None
    if cuda is not None:
        try:
            if cuda.is_initialized():
                return "torch.cuda.is_initialized() is True"
        except Exception:
            pass
    try:
        fds = os.listdir("/proc/self/fd")
    except OSError:
        fds = []
    for fd in fds:
        try:
            target = os.readlink("/proc/self/fd/" + fd)
        except OSError:
            continue
        if target.startswith(("/dev/nvidia", "/dev/kfd", "/dev/dri/", "/dev/accel")):
            return "%s is open (a driver was initialised)" % target
    return None


def warm_up(modules, program):
    """Imports the modules as the worker would (its sys.path[0] and argv); None if the result can be forked, else why
    not."""
    sys.path[0] = program.path0()
    saved_argv = sys.argv
    sys.argv = [program.target if program.kind == "script" else program.kind] + program.args
    try:
        import importlib

        for name in modules:
            try:
                importlib.import_module(name)
            except BaseException as e:
                import traceback

                return "importing %s failed: %s" % (name, "".join(traceback.format_exception_only(type(e), e)).strip())
            threads = _threads()
            if threads:
                return "importing %s started %s" % (name, threads)
            accelerator = _accelerator_in_use()
            if accelerator:
                return "importing %s initialised an accelerator: %s" % (name, accelerator)
    finally:
        sys.argv = saved_argv
    return None


def main(argv):
    """Returns the Task of a forked worker, or None when the warm process is done."""
    fd = None
    modules = []
    worker_argv = []
    i = 0
    while i < len(argv):
        if argv[i] == "--fd":
            fd = int(argv[i + 1])
            i += 2
        elif argv[i] == "--preload":
            modules = [m for m in argv[i + 1].split(",") if m]
            i += 2
        elif argv[i] == "--":
            worker_argv = [os.fsencode(a) for a in argv[i + 1 :]]
            break
        else:
            raise SystemExit("ctrun_warm: unknown argument %r" % argv[i])
    if fd is None:
        raise SystemExit("ctrun_warm: --fd is required (it is started by ctrun --preload)")
    os.set_inheritable(fd, False)
    sock = socket.socket(fileno=fd)
    try:
        program = Program(worker_argv)
    except ValueError as e:
        _send(sock, b"refused", "cannot preload for this command: %s" % e)
        return None
    why = warm_up(modules, program)
    if why is not None:
        _send(sock, b"refused", why)
        return None
    gc.collect()
    gc.freeze()  # what exists now is never scanned again: the workers' collections leave the shared pages alone
    _send(sock, b"ready", os.getpid())
    return Server(sock).serve()


if __name__ == "__main__":
    _task = main(sys.argv[1:])
    if _task is not None:
        del _task.server.children  # the warm process's bookkeeping is none of the worker's business
        run_worker(_task)
