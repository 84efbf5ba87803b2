# ctrun's sitecustomize: what ctrun needs from every Python worker, with no code in the worker. Two parts:
#   1. stack dumps (issue 22, agent/hang/stacks.hpp): ctrun can dump the worker's Python stacks;
#   2. the end of the program (issue 42, agent/teardown/exit_record.hpp): the worker records that its program ended,
#      and with which exit status, so that a crash in native teardown after a clean end does not fail the job.
#
# 1. ctrun puts the directory holding this file first on its workers' PYTHONPATH and names, per rank, a file
# (CTRUN_STACK_FILE, in the job's log dir) and a real-time signal (CTRUN_STACK_SIGNAL; not SIGUSR1/2, which
# ctrun forwards for preemption). faulthandler then writes every thread's Python stack into that file when the
# signal arrives, from a C-level handler: it works while the main thread is blocked inside a collective, holding
# the GIL or not. chain=False: the only handler before this one is the default action, which would end the
# process (a handler the worker installs later replaces this one). ctrun sends the signal only to the thread
# this file starts (its id is the file's first line) and only after /proc/<pid>/status (SigCgt) shows the
# handler, so a worker without it (python -S, -I, a PYTHONPATH of its own) is never killed by the signal.
#
# 2. See _ctrun_exit_note below.
#
# 3. With several nodes it also points torch's agent-store rendezvous at this node's store relay
#    (CTRUN_STORE_RELAY; ctrun_store_relay.py, beside this file, does it: agent/launch/store_relay.hpp).
#
# Then the sitecustomize this file shadows (Debian ships one in /usr/lib/python3.X) runs as it would have.

import os
import sys


def _ctrun_register_stack_dumps():
    path = os.environ.get("CTRUN_STACK_FILE")
    signum = os.environ.get("CTRUN_STACK_SIGNAL")
    if not path or not signum:
        return
    try:
        import faulthandler
        import threading
        import time

        # Line-buffered, kept open for the life of the process (faulthandler writes to its file descriptor).
        f = open(path, "a", buffering=1)
        faulthandler.register(int(signum), file=f, all_threads=True, chain=False)
        sys._ctrun_stack_file = f

        # ctrun sends the signal to this thread only (tgkill): a signal that lands on a thread inside poll(),
        # epoll_wait() or connect() makes the call fail with EINTR (SA_RESTART does not restart those), and
        # torch's TCPStore client gives up on EINTR. Here it only interrupts a sleep, which Python resumes.
        def idle():
            f.write("# ctrun: stack dumps of pid %d: signal %s, thread %d, ident 0x%x\n"
                    % (os.getpid(), signum, threading.get_native_id(), threading.get_ident()))
            while True:
                time.sleep(3600)

        threading.Thread(target=idle, name="ctrun-stack-dumps", daemon=True).start()
    except Exception as e:  # never break the worker over a diagnostic
        sys.stderr.write("ctrun: stack dumps are off in this worker: %s\n" % e)


# ---- 2. the end of the program ------------------------------------------------------------------------------------
# ctrun names, per rank, the attempt's exit-record file and this worker's slot in it (CTRUN_EXIT_RECORD,
# CTRUN_EXIT_SLOT; the slot's layout is agent/teardown/exit_record.hpp's). This file registers an atexit handler
# before the program runs, so it runs last of the program's atexit handlers (they run in the reverse order of their
# registration): the latest point at which Python still runs and the program has ended. There it flushes the files
# the program left open (regular files; not closed: a finalizer may still write to them), so that a finished
# program's files are complete; writes the slot: the program ended, with the exit status Python will exit with; and
# arms libctrun_exit_note.so (beside this file), whose on_exit handler, the first to run when exit() is called,
# adds the status exit() gets. A native crash after that (threads taking the GIL while the interpreter finalizes,
# C++ static destructors) no longer fails a finished job: the agent reads the slot (agent/teardown/verdict.hpp).
#
# The atexit handler cannot see the status Python exits with, so it is noted on the way: an uncaught exception
# leaves sys.last_value (set before the handlers run); a SystemExit's code is noted when it is made, however it is
# made (sys.exit, exit(), argparse, `raise SystemExit(main())`): builtins.SystemExit is a subclass of Python's
# that notes its code when made in the main thread, sys.exit raises it, and the thread's excepthook, which ignores
# SystemExit by identity, ignores it as well. Only when exit() is not reached (a crash before it) is the noted
# status what counts; when it is, exit()'s status is the truth.
#
# CTRUN_EXIT_RECORD set, even empty (the warm process of --preload, whose forked workers each get their own), is what
# turns this on; both variables are then taken out of the environment, so that the program's own Python children
# (their PYTHONPATH holds this file too) do not record into the worker's slot.

_CTRUN_SLOT_BYTES = 64
_CTRUN_NOT_NOTED = object()
_ctrun_exit = None  # the armed worker's slot: {"path", "offset", "pid", "main", "code"}
_ctrun_exit_note_registered = False


def _ctrun_install_system_exit():
    """builtins.SystemExit becomes a subclass that notes its code (in the armed worker's main thread), once."""
    import builtins
    import _thread

    real = builtins.SystemExit
    if getattr(real, "_ctrun_notes_code", False):
        return

    class SystemExit(real):
        _ctrun_notes_code = True

        def __init__(self, *args):
            real.__init__(self, *args)
            noted = _ctrun_exit
            if noted is not None and _thread.get_ident() == noted["main"]:
                noted["code"] = self.code

    SystemExit.__module__ = "builtins"
    SystemExit.__qualname__ = "SystemExit"
    SystemExit.__doc__ = real.__doc__
    real_sys_exit = sys.exit

    def exit(*args):
        if len(args) > 1:
            return real_sys_exit(*args)  # its TypeError
        # As sys.exit builds it (PyErr_SetObject): no argument or None, a tuple as the arguments, else the one.
        status = args[0] if args else None
        if status is None:
            raise SystemExit()
        if isinstance(status, tuple):
            raise SystemExit(*status)
        raise SystemExit(status)

    exit.__doc__ = real_sys_exit.__doc__
    real_thread_hook = _thread._excepthook

    def _excepthook(args, /):
        if args.exc_type is SystemExit:
            return None  # silently, as the original does for its SystemExit
        return real_thread_hook(args)

    builtins.SystemExit = SystemExit
    sys.exit = exit
    _thread._excepthook = _excepthook
    threading = sys.modules.get("threading")  # imported already (the stack dumps' thread): its copy too
    if threading is not None and threading.excepthook is real_thread_hook:
        threading.excepthook = threading.__excepthook__ = _excepthook


def _ctrun_arm_exit_record():
    global _ctrun_exit, _ctrun_exit_note_registered
    if "CTRUN_EXIT_RECORD" not in os.environ:
        return
    path = os.environ.pop("CTRUN_EXIT_RECORD")
    slot = os.environ.pop("CTRUN_EXIT_SLOT", "")
    try:
        if not _ctrun_exit_note_registered:
            import atexit

            atexit.register(_ctrun_exit_note)  # before the program's own handlers: it runs after them
            _ctrun_exit_note_registered = True
        _ctrun_install_system_exit()
        if path and slot:
            import _thread

            _ctrun_exit = {"path": path, "offset": int(slot) * _CTRUN_SLOT_BYTES, "pid": os.getpid(),
                           "main": _thread.get_ident(), "code": _CTRUN_NOT_NOTED}
    except Exception as e:  # never break the worker over it
        sys.stderr.write("ctrun: the end of this worker's program is not recorded: %s\n" % e)


def _ctrun_status_of(code):
    """The exit status Python exits with for a SystemExit's code (as _Py_HandleSystemExit)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF if -(1 << 63) <= code < (1 << 63) else 0xFF
    return 1  # printed, then exit 1


def _ctrun_flush_open_files():
    """Flushes every writable file object the program left open on a regular file; False when one fails."""
    import gc
    import stat
    import _io

    ok = True
    for f in gc.get_objects():
        if not issubclass(type(f), _io._IOBase):  # type(): never an object's own __class__ (a lazy module's warning)
            continue
        try:
            if f.closed or not f.writable() or not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                continue
        except Exception:
            continue  # detached, not backed by a descriptor, ...: nothing of the program's to save here
        try:
            f.flush()
        except Exception as e:
            ok = False
            sys.stderr.write("ctrun: cannot flush %r at the end of the program: %s\n" % (getattr(f, "name", f), e))
    return ok


def _ctrun_exit_note():
    noted = _ctrun_exit
    if noted is None or os.getpid() != noted["pid"]:  # not armed, or a forked child of the worker
        return
    try:
        _ctrun_write_exit_record(noted)
    except Exception as e:  # never in the way of the exit
        sys.stderr.write("ctrun: cannot record the end of this worker's program: %s\n" % e)


def _ctrun_write_exit_record(noted):
    import struct
    import time

    flags = 0
    if getattr(sys, "last_value", None) is not None or getattr(sys, "last_exc", None) is not None:
        flags, status = 1, 1  # kUncaught
    elif noted["code"] is not _CTRUN_NOT_NOTED:
        flags, status = 2, _ctrun_status_of(noted["code"])  # kSystemExit
    else:
        status = 0
    if not _ctrun_flush_open_files():
        flags |= 4  # kFlushFailed
    try:
        fd = os.open(noted["path"], os.O_WRONLY | os.O_CLOEXEC)
    except OSError:
        return  # the attempt is over (ctrun removed the file)
    offset = noted["offset"]
    # pid, status, flags, ended_ns at 4..23; then ended at 0, which the agent reads first.
    os.pwrite(fd, struct.pack("=iiIq", os.getpid(), status, flags, time.monotonic_ns()), offset + 4)
    os.pwrite(fd, struct.pack("=I", 1), offset)
    try:
        _ctrun_arm_exit_note(fd, offset)  # fd stays open for it
    except Exception:
        os.close(fd)  # no exit note (a copy of this file without the library): the slot as written counts


def _ctrun_arm_exit_note(fd, offset):
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "libctrun_exit_note.so")
    ctypes = sys.modules.get("ctypes")  # torch imports it
    if ctypes is not None:
        ctypes.CDLL(path).ctrun_exit_note_arm(ctypes.c_int(fd), ctypes.c_int(offset))
        return
    # Not imported by the program: its C core does the one call (about 2 ms where `import ctypes` takes 10-25).
    import _ctypes

    handle = _ctypes.dlopen(path, os.RTLD_NOW | os.RTLD_LOCAL)
    _ctypes.call_function(_ctypes.dlsym(handle, "ctrun_exit_note_arm"), (fd, offset))  # two C ints


def _ctrun_use_store_relay():
    if not os.environ.get("CTRUN_STORE_RELAY"):
        return
    try:
        import ctrun_store_relay

        ctrun_store_relay.install()
    except Exception as e:  # the workers then connect to MASTER_ADDR:MASTER_PORT themselves
        sys.stderr.write("ctrun: the store relay is not used by this worker: %s\n" % e)


def ctrun_worker_started():
    """--preload: the warm process imported this file with the job's environment (no stack file: nothing set up
    there, no thread started; SystemExit replaced, no slot); each worker forked from it calls this with its own
    environment (agent/preload/ctrun_warm.py), so it gets its stack dumps and its exit record as a fresh interpreter
    would."""
    _ctrun_register_stack_dumps()
    _ctrun_arm_exit_record()
    _ctrun_use_store_relay()


def _is_ctrun_copy(path):
    """Another copy of this file (a second build's python dir on PYTHONPATH, e.g. build/ and build-torch2/): not
    the one this file shadows; running it would run this search again, without end."""
    try:
        with open(path) as f:
            return f.readline().startswith("# ctrun's sitecustomize")
    except OSError:
        return False


def _ctrun_run_shadowed_sitecustomize():
    here = os.path.dirname(os.path.abspath(__file__))
    for d in sys.path:
        if not d or os.path.abspath(d) == here:
            continue
        candidate = os.path.join(d, "sitecustomize.py")
        if os.path.isfile(candidate) and not _is_ctrun_copy(candidate):
            import importlib.util

            spec = importlib.util.spec_from_file_location("_ctrun_shadowed_sitecustomize", candidate)
            module = importlib.util.module_from_spec(spec)
            try:
                spec.loader.exec_module(module)
            except Exception as e:
                sys.stderr.write("ctrun: %s failed: %s\n" % (candidate, e))
            return


_ctrun_register_stack_dumps()
_ctrun_arm_exit_record()
_ctrun_use_store_relay()
_ctrun_run_shadowed_sitecustomize()
