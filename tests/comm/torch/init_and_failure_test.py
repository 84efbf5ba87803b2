"""init_process_group("ctrun") with every init method and no launcher; a rank killed mid-all_reduce.

  python3 init_and_failure_test.py init      env://, tcp://, file://, store=   (2 ranks each); a reserved p2p
                                             tag is refused, monitored_barrier passes
  python3 init_and_failure_test.py torchrun  examples/torch_ctrun_backend.py under torch's own launcher
                                             ($TORCHRUN_PY, 2 ranks, PYTHONPATH set)
  python3 init_and_failure_test.py kill      4 ranks; rank 3 SIGKILLs itself inside a stream of all_reduces; the
                                             other three must raise RuntimeError within the group timeout
  python3 init_and_failure_test.py destroy   2 ranks; rank 0 destroys the group while its all_reduce, with a
                                             Python callback on its future, is still pending (rank 1 joins 1 s
                                             late): the callback runs on the backend's completion thread, which
                                             needs the GIL that destroy_process_group holds. Both must exit 0.
  python3 init_and_failure_test.py peer_exit [RUNS]  2 ranks (shm); rank 1 exits while rank 0 waits in a barrier,
                                             rank 0 does not catch: its traceback ends in the RuntimeError; then
                                             the same with a SIGINT to rank 0 first: KeyboardInterrupt from the
                                             call. Neither prints "lost sys.stderr" or "Exception ignored"

Ranks are plain subprocesses of this driver (no ctrun, no torchrun), every one killed by PID at the end.
Exit 0 pass, 1 fail, 77 skip (no torch or no ctrun_torch module).
"""
import datetime
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
GROUP_TIMEOUT_S = 10


# tests/common/ports.py: ports reserved, never picked and released (found from here wherever this file lives).
_up = os.path.dirname(os.path.abspath(__file__))
while not os.path.isfile(os.path.join(_up, "tests", "common", "ports.py")) and _up != os.path.dirname(_up):
    _up = os.path.dirname(_up)
sys.path.insert(0, os.path.join(_up, "tests", "common"))
from ports import reserve_port  # noqa: E402


def worker(mode, rank, size, method, arg):
    import torch
    import torch.distributed as dist

    import ctrun_torch  # noqa: F401

    timeout = datetime.timedelta(seconds=GROUP_TIMEOUT_S)
    if method == "env":
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=arg, RANK=str(rank), WORLD_SIZE=str(size))
        dist.init_process_group("ctrun", init_method="env://", timeout=timeout)
    elif method == "tcp":
        dist.init_process_group("ctrun", init_method=f"tcp://127.0.0.1:{arg}", rank=rank, world_size=size,
                                timeout=timeout)
    elif method == "file":
        dist.init_process_group("ctrun", init_method=f"file://{arg}", rank=rank, world_size=size, timeout=timeout)
    elif method == "store":
        store = dist.TCPStore("127.0.0.1", int(arg), size, rank == 0, timeout=timeout)
        dist.init_process_group("ctrun", store=store, rank=rank, world_size=size, timeout=timeout)
    assert dist.get_backend() == "ctrun"
    if mode == "init":
        t = torch.full((5,), float(rank + 1))
        dist.all_reduce(t)
        assert torch.equal(t, torch.full((5,), float(size * (size + 1) // 2))), t
        dist.barrier()
        # A tag comm keeps for its own messages is refused on the caller, naming the tags users have.
        try:
            dist.send(torch.ones(1), dst=1 - rank, tag=0x7FFFFFF0)
            return 5
        except RuntimeError as e:
            if "use a tag in 0..2147483631" not in str(e):
                raise
        # monitored_barrier runs over those tags (torch 1.13's dist.monitored_barrier takes gloo only: the group's).
        dist.distributed_c10d._get_default_group().monitored_barrier(timeout=timeout)
        print(f"rank {rank}: {method}:// ok", flush=True)
        dist.destroy_process_group()
        return 0
    if mode == "destroy":
        t = torch.ones(4)
        if rank == 1:
            time.sleep(1.0)  # rank 0's op is pending when it destroys the group
            dist.all_reduce(t)
        else:
            seen = []
            work = dist.all_reduce(t, async_op=True)
            work.get_future().then(lambda fut: seen.append(fut.value()[0].sum().item()))
            dist.destroy_process_group()  # the group's last reference: its destructor runs here, GIL held
            print(f"rank {rank}: destroyed with an op pending; its callback saw {seen}", flush=True)
            return 0 if seen == [8.0] else 4
        dist.destroy_process_group()
        return 0
    if mode in ("peer_exit", "peer_exit_sigint"):
        arg = os.environ["CTRUN_FLAG"]
        dist.barrier()
        if rank == 1:
            while not os.path.exists(arg + ".exit"):
                time.sleep(0.01)
            os._exit(0)
        open(arg + ".waiting", "w").close()
        dist.barrier()  # uncaught: how the interpreter reports it is what is tested
        return 2
    # kill
    t = torch.ones(1 << 18)
    for i in range(1000):
        if rank == size - 1 and i == 3:
            os.kill(os.getpid(), signal.SIGKILL)
        start = time.monotonic()
        try:
            dist.all_reduce(t)
        except RuntimeError as e:
            took = time.monotonic() - start
            print(f"rank {rank}: all_reduce {i} raised RuntimeError after {took:.1f}s: {str(e)[:160]}", flush=True)
            return 0 if took <= GROUP_TIMEOUT_S + 5 else 3
    print(f"rank {rank}: no error although a peer died", flush=True)
    return 2


def peer_exit_once(sigint):
    """One 2-rank run: rank 1 exits (on a file's word) while rank 0 waits in a barrier. Returns a failure or ""."""
    with tempfile.TemporaryDirectory() as tmp:
        flag = os.path.join(tmp, "flag")
        mode = "peer_exit_sigint" if sigint else "peer_exit"
        port = str(reserve_port())
        procs = [subprocess.Popen([sys.executable, __file__, "worker", mode, str(r), "2", "tcp", port], stderr=subprocess.PIPE, text=True,
                                  env=dict(os.environ, CTRUN_FLAG=flag)) for r in range(2)]
        try:
            deadline = time.monotonic() + 60
            while not os.path.exists(flag + ".waiting") and time.monotonic() < deadline and procs[0].poll() is None:
                time.sleep(0.01)
            time.sleep(0.3)  # rank 0 is inside the barrier's wait
            if sigint:
                procs[0].send_signal(signal.SIGINT)
                time.sleep(0.5)
            open(flag + ".exit", "w").close()
            err = procs[0].communicate(timeout=GROUP_TIMEOUT_S + 20)[1]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                p.wait()
    want = "KeyboardInterrupt" if sigint else "exited while this rank was waiting for it"
    last = err.strip().splitlines()[-1] if err.strip() else ""
    if "lost sys.stderr" in err or "Exception ignored" in err:
        return f"an error surfaced at interpreter exit:\n{err[-1500:]}"
    if "Traceback" not in err or want not in last:
        return f"rank 0's traceback does not end in {want!r}:\n{err[-1500:]}"
    return ""


def run_ranks(mode, size, method, arg, deadline_s):
    procs = [subprocess.Popen([sys.executable, __file__, "worker", mode, str(r), str(size), method, arg])
             for r in range(size)]
    codes = []
    end = time.monotonic() + deadline_s
    try:
        for p in procs:
            try:
                codes.append(p.wait(timeout=max(0.1, end - time.monotonic())))
            except subprocess.TimeoutExpired:
                codes.append("hung")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return codes


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        mode, rank, size, method, arg = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6]
        sys.exit(worker(mode, rank, size, method, arg))
    try:
        import torch  # noqa: F401
        import ctrun_torch  # noqa: F401
    except ImportError as e:
        print(f"SKIP: {e} (python3-torch and a build with comm/torch needed)")
        sys.exit(77)
    mode = sys.argv[1]
    failed = False
    if mode == "init":
        with tempfile.TemporaryDirectory() as tmp:
            for method, arg in [("env", str(reserve_port())), ("tcp", str(reserve_port())),
                                ("file", os.path.join(tmp, "rdzv")), ("store", str(reserve_port()))]:
                codes = run_ranks("init", 2, method, arg, 90)
                print(f"{method}: exit codes {codes}", flush=True)
                failed |= codes != [0, 0]
    elif mode == "torchrun":
        example = os.path.join(_up, "examples", "torch_ctrun_backend.py")
        # Debian's torch 1.13 `python3 -m torch.distributed.run` fails on python 3.11 (a dataclass default);
        # TORCHRUN_PY is the same torchrun with that fixed (../shared/interop/torchrun_py311.py).
        torchrun = os.environ.get("TORCHRUN_PY", "")
        if not os.path.isfile(torchrun):
            print(f"SKIP: no usable torchrun (TORCHRUN_PY={torchrun!r} missing)")
            sys.exit(77)
        proc = subprocess.Popen([sys.executable, torchrun, "--nnodes=1", "--node_rank=0", "--nproc_per_node=2",
                                 "--master_addr=127.0.0.1", f"--master_port={reserve_port()}", example], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            out, _ = proc.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        print(out[-2000:])
        failed = proc.returncode != 0 or "backend ctrun" not in out
    elif mode == "destroy":
        start = time.monotonic()
        codes = run_ranks("destroy", 2, "tcp", str(reserve_port()), 60)
        print(f"destroy: exit codes {codes} in {time.monotonic() - start:.1f}s", flush=True)
        failed = codes != [0, 0]
    elif mode == "kill":
        start = time.monotonic()
        codes = run_ranks("kill", 4, "tcp", str(reserve_port()), 90)
        print(f"kill: exit codes {codes} in {time.monotonic() - start:.1f}s (rank 3 killed itself)", flush=True)
        failed = codes[:3] != [0, 0, 0] or codes[3] != -signal.SIGKILL
    elif mode == "peer_exit":
        runs = int(sys.argv[2]) if len(sys.argv) > 2 else 2
        for sigint in (False, True):
            bad = [why for why in (peer_exit_once(sigint) for _ in range(runs)) if why]
            print(f"peer_exit{' after SIGINT' if sigint else ''}: {runs - len(bad)}/{runs} clean", flush=True)
            if bad:
                print(bad[0])
            failed |= bool(bad)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
