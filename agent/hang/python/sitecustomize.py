# ctrun's sitecustomize (issue 22): lets ctrun dump this Python worker's stacks, with no code in the worker.
#
# ctrun puts the directory holding this file first on its workers' PYTHONPATH and names, per rank, a file
# (CTRUN_STACK_FILE, in the job's log dir) and a real-time signal (CTRUN_STACK_SIGNAL; not SIGUSR1/2, which
# ctrun forwards for preemption). faulthandler then writes every thread's Python stack into that file when the
# signal arrives, from a C-level handler: it works while the main thread is blocked inside a collective, holding
# the GIL or not. chain=False: the only handler before this one is the default action, which would end the
# process (a handler the worker installs later replaces this one). ctrun sends the signal only to the thread
# this file starts (its id is the file's first line) and only after /proc/<pid>/status (SigCgt) shows the
# handler, so a worker without it (python -S, -I, a PYTHONPATH of its own) is never killed by the signal.
#
# With several nodes it also points torch's agent-store rendezvous at this node's store relay (CTRUN_STORE_RELAY;
# ctrun_store_relay.py, beside this file, does it: agent/launch/store_relay.hpp).
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
    there, no thread started); each worker forked from it calls this with its own environment
    (agent/preload/ctrun_warm.py), so it gets its stack dumps as a fresh interpreter would."""
    _ctrun_register_stack_dumps()
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
_ctrun_use_store_relay()
_ctrun_run_shadowed_sitecustomize()
