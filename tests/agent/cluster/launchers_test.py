"""ctrun under real cluster launchers, one agent per "node" on this machine:

- mpirun (Debian's openmpi-bin) starting 2 agents; MASTER_ADDR/PORT exported with -x;
- Kubeflow's training-operator variables as the only input (static PyTorchJob, and an elastic one: c10d);
- Slurm for real: munged, slurmctld and two slurmd (nodes ctn1, ctn2 on 127.0.0.1) started from a temporary
  directory with their own config, then `srun -N2 --ntasks-per-node=1 ctrun ...`.

Workers are real torch 1.13 gloo jobs (tests/agent/multihost/workers/mh_job.py). Every process started here is killed by
PID at the end. Run one case: launchers_test.py CASE. Exit 77 = skipped, with the reason.
"""
import glob
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

CTRUN = os.environ.get("CTRUN_BIN", "ctrun")
TORCH_PYTHON = os.environ.get("CTRUN_TORCH_PYTHON", "/usr/bin/python3")
JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "multihost", "workers", "mh_job.py")
SKIP = 77


class Skip(Exception):
    pass


# tests/common/ports.py: ports reserved, never picked and released (found from here wherever this file lives).
_up = os.path.dirname(os.path.abspath(__file__))
while not os.path.isfile(os.path.join(_up, "tests", "common", "ports.py")) and _up != os.path.dirname(_up):
    _up = os.path.dirname(_up)
sys.path.insert(0, os.path.join(_up, "tests", "common"))
from ports import reserve_port  # noqa: E402
from processes import alive, die_with_parent, have_torch  # noqa: E402


def results(out):
    res = {}
    for path in glob.glob(os.path.join(out, "result.*.json")):
        with open(path) as f:
            r = json.load(f)
        res[int(r["RANK"])] = r
    return res


class Slurm:
    """munged + slurmctld + 2 slurmd, all in a temporary directory, all killed by PID in close()."""

    def __init__(self, d):
        self.dir = d
        self.procs = []
        try:
            self.build(d)
        except BaseException:
            self.close()
            raise

    def build(self, d):
        for tool in ("munged", "slurmctld", "slurmd", "srun", "sinfo"):
            if not shutil.which(tool) and not os.path.exists(f"/usr/sbin/{tool}"):
                raise Skip(f"{tool} is not installed (slurm-wlm, munge)")
        if os.geteuid() != 0:
            raise Skip("slurmd must run as root to start jobs as root here")
        mdir = os.path.join(d, "munge")
        os.makedirs(mdir, mode=0o700)
        key = os.path.join(mdir, "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o400)
        self.sock = os.path.join(mdir, "munge.sock")
        self.start(["munged", "-F", "-f", f"--key-file={key}", f"--socket={self.sock}",
                    f"--pid-file={mdir}/munged.pid", f"--seed-file={mdir}/seed", f"--log-file={mdir}/munged.log"],
                   "munged")
        self.wait_for(lambda: os.path.exists(self.sock), "munged's socket", 10)
        ports = [reserve_port() for _ in range(3)]
        host = socket.gethostname()
        self.conf = os.path.join(d, "slurm.conf")
        with open(self.conf, "w") as f:
            f.write(f"""ClusterName=ctrun
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ports[0]}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={self.sock}
CredType=cred/munge
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool-%n
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd-%n.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
NodeName=ctn1 NodeHostname={host} NodeAddr=127.0.0.1 Port={ports[1]} CPUs=1 State=UNKNOWN
NodeName=ctn2 NodeHostname={host} NodeAddr=127.0.0.1 Port={ports[2]} CPUs=1 State=UNKNOWN
PartitionName=ctp Nodes=ctn[1-2] Default=YES MaxTime=INFINITE State=UP
""")
        os.makedirs(os.path.join(d, "state"))
        self.env = dict(os.environ, SLURM_CONF=self.conf)
        self.start(["slurmctld", "-D", "-f", self.conf], "slurmctld")
        self.wait_for(lambda: self.run(["sinfo", "-h"]).returncode == 0, "slurmctld to answer", 20)
        for node in ("ctn1", "ctn2"):
            self.start(["slurmd", "-D", "-N", node, "-f", self.conf], f"slurmd-{node}")
        self.wait_for(lambda: self.run(["sinfo", "-h", "-o", "%T %D", "-t", "idle"]).stdout.split() == ["idle", "2"],
                      "two idle nodes", 30)

    def run(self, cmd, timeout=20):
        return subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=timeout)

    def start(self, cmd, name):
        log = open(os.path.join(self.dir, f"{name}.out"), "w")
        p = subprocess.Popen(cmd, env=getattr(self, "env", os.environ), stdout=log, stderr=subprocess.STDOUT,
                             preexec_fn=die_with_parent)
        self.procs.append((name, p))
        time.sleep(0.2)
        if p.poll() is not None:
            raise Skip(f"{name} could not start here: " + open(log.name).read()[-500:])

    def wait_for(self, predicate, what, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if predicate():
                    return
            except (OSError, subprocess.TimeoutExpired):
                pass
            time.sleep(0.3)
        logs = ""
        for path in glob.glob(os.path.join(self.dir, "*.out")) + glob.glob(os.path.join(self.dir, "*.log")):
            logs += f"--- {path}\n" + open(path).read()[-800:]
        raise Skip(f"the Slurm daemons did not come up here ({what}):\n{logs}")

    def close(self):
        for _, p in reversed(self.procs):  # slurmd's job steps (slurmstepd) end with their slurmd
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for _, p in reversed(self.procs):
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)


class Launchers(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="ctrun-launchers-")
        self.out = os.path.join(self.dir, "out")
        os.mkdir(self.out)
        self.procs = []

    def tearDown(self):
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except OSError:
                    pass
                p.wait(timeout=10)
        for path in glob.glob(os.path.join(self.out, "pid.*")):
            pid = int(path.rsplit(".", 1)[1])
            if alive(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        if not os.environ.get("KEEP_DIR"):
            shutil.rmtree(self.dir, ignore_errors=True)

    def base_env(self, **extra):
        e = {k: v for k, v in os.environ.items() if not k.startswith(("PET_", "SLURM_", "OMPI_", "PMI_"))}
        e.update(OUT_DIR=self.out, PYTHON_EXEC=TORCH_PYTHON, GLOO_SOCKET_IFNAME="lo")
        e.update(extra)
        return e

    def start(self, cmd, env, name):
        log = open(os.path.join(self.dir, f"{name}.log"), "w")
        p = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=self.dir, start_new_session=True)
        self.procs.append(p)
        return p

    def log(self, name):
        with open(os.path.join(self.dir, f"{name}.log")) as f:
            return f.read()

    def logs(self):
        return "\n".join(f"--- {os.path.basename(p)}\n{open(p).read()[-3000:]}"
                         for p in glob.glob(os.path.join(self.dir, "*.log")))

    def check(self, world, nproc):
        res = results(self.out)
        self.assertEqual(sorted(res), list(range(world)), self.logs())
        for rank, r in res.items():
            self.assertEqual(int(r["WORLD_SIZE"]), world)
            self.assertEqual(r["torch_rank"], rank)
            self.assertEqual(r["sum"], world * (world + 1) / 2)
            self.assertEqual(rank, nproc * int(r["GROUP_RANK"]) + int(r["LOCAL_RANK"]))
        return res

    def test_mpirun_two_agents(self):
        mpirun = shutil.which("mpirun")
        if not mpirun:
            raise Skip("mpirun (openmpi-bin) is not installed")
        port = reserve_port()
        cmd = [mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2", "-x", "OUT_DIR", "-x", "PYTHON_EXEC",
               "-x", "GLOO_SOCKET_IFNAME", "-x", "MASTER_ADDR=127.0.0.2", "-x", f"MASTER_PORT={port}",
               CTRUN, "--nproc-per-node", "2", JOB]
        p = self.start(cmd, self.base_env(), "mpirun")
        self.assertEqual(p.wait(timeout=120), 0, self.logs())
        res = self.check(4, 2)
        self.assertEqual({r["OMPI_COMM_WORLD_RANK"] for r in res.values()}, {"0", "1"})
        for r in res.values():  # MPI's rank is the node rank
            self.assertEqual(r["OMPI_COMM_WORLD_RANK"], str(int(r["RANK"]) // 2))
            self.assertEqual((r["MASTER_ADDR"], r["MASTER_PORT"]), ("127.0.0.2", str(port)))
        log = self.log("mpirun")
        self.assertIn("--nnodes 2 (OMPI_COMM_WORLD_SIZE)", log)
        self.assertIn("--node-rank 1 (OMPI_COMM_WORLD_RANK)", log)

    def test_kubeflow_static_env_only(self):
        port = reserve_port()
        for pod in (1, 0):  # the worker pod may start before the master pod
            env = self.base_env(PET_NNODES="2", PET_NPROC_PER_NODE="2", PET_MASTER_ADDR="127.0.0.1",
                                PET_MASTER_PORT=str(port), PET_MAX_RESTARTS="0", MASTER_ADDR="127.0.0.1",
                                MASTER_PORT=str(port), RANK=str(pod), WORLD_SIZE="2")
            self.start([CTRUN, JOB], env, f"pod{pod}")  # no flag at all: the operator's variables only
        for p in self.procs:
            self.assertEqual(p.wait(timeout=120), 0, self.logs())
        res = self.check(4, 2)
        self.assertEqual({r["GROUP_RANK"] for r in res.values()}, {"0", "1"})
        self.assertIn("--node-rank 1 (RANK, the pod's node rank)", self.log("pod1"))

    def test_kubeflow_elastic_env_only(self):
        port = reserve_port()
        for pod, addr in ((0, "127.0.0.2"), (1, "127.0.0.3")):
            env = self.base_env(PET_NNODES="1:2", PET_NPROC_PER_NODE="1", PET_RDZV_ENDPOINT=f"127.0.0.2:{port}",
                                PET_RDZV_ID="kf-job", PET_MAX_RESTARTS="1", PET_LOCAL_ADDR=addr,
                                PET_RDZV_CONF="join_timeout=60,last_call_timeout=10", RANK=str(pod),
                                WORLD_SIZE="2")
            self.start([CTRUN, JOB], env, f"pod{pod}")
        for p in self.procs:
            self.assertEqual(p.wait(timeout=120), 0, self.logs())
        res = self.check(2, 1)
        self.assertEqual({r["TORCHELASTIC_RUN_ID"] for r in res.values()}, {"kf-job"})
        self.assertIn("--rdzv-backend c10d (PET_NNODES=1:2 is elastic)", self.log("pod0"))

    def test_slurm_restart_count_and_no_slurm(self):
        """A requeued job's SLURM_RESTART_COUNT is the first attempt's restart count (and log folder); --no-slurm
        and PET_NO_SLURM=1 ignore the step. Slurm's variables as srun sets them for a one-node step."""
        step = dict(SLURM_JOB_ID="77", SLURM_STEP_ID="0", SLURM_NODEID="0", SLURM_STEP_NUM_NODES="1",
                    SLURM_STEP_NODELIST="localhost", SLURM_CPUS_ON_NODE="2", SLURM_STEP_TASKS_PER_NODE="1",
                    SLURM_RESTART_COUNT="3")
        logs = os.path.join(self.dir, "logs")
        p = self.start([CTRUN, "--log-dir", logs, "--tee", "3", JOB, "--no-torch"], self.base_env(**step), "requeued")
        self.assertEqual(p.wait(timeout=60), 0, self.logs())
        res = results(self.out)
        self.assertEqual(sorted(res), [0, 1])  # --nproc-per-node 2 from SLURM_CPUS_ON_NODE
        self.assertEqual({r["TORCHELASTIC_RESTART_COUNT"] for r in res.values()}, {"3"})
        self.assertEqual({r["TORCHELASTIC_RUN_ID"] for r in res.values()}, {"77.0"})
        self.assertTrue(glob.glob(os.path.join(logs, "77.0_*", "attempt_3", "0", "stdout.log")), self.logs())
        self.assertIn("TORCHELASTIC_RESTART_COUNT starts at 3 (SLURM_RESTART_COUNT)", self.log("requeued"))
        for name, flags, extra in (("flag", ["--no-slurm"], {}), ("env", [], {"PET_NO_SLURM": "1"})):
            shutil.rmtree(self.out)
            os.mkdir(self.out)
            p = self.start([CTRUN, *flags, JOB, "--no-torch"], self.base_env(**step, **extra), name)
            self.assertEqual(p.wait(timeout=60), 0, self.logs())
            res = results(self.out)
            self.assertEqual(sorted(res), [0], name)
            self.assertEqual((res[0]["TORCHELASTIC_RESTART_COUNT"], res[0]["TORCHELASTIC_RUN_ID"]), ("0", "none"))
            self.assertNotIn("from Slurm", self.log(name))

    def test_slurm_srun_two_nodes(self):
        slurm = Slurm(os.path.join(self.dir, "slurm"))
        try:
            port = reserve_port()
            # ctn1/ctn2 are Slurm names without DNS entries here: --master-addr given, and it wins.
            cmd = ["srun", "-N2", "--ntasks-per-node=1", "--kill-on-bad-exit=1", CTRUN, "--master-addr", "127.0.0.1",
                   "--master-port", str(port), JOB]
            p = self.start(cmd, dict(self.base_env(), SLURM_CONF=slurm.conf), "srun")
            self.assertEqual(p.wait(timeout=150), 0, self.logs())
        finally:
            slurm.close()
        res = self.check(2, 1)
        job = {r["SLURM_JOB_ID"] for r in res.values()}
        self.assertEqual(len(job), 1)
        job = job.pop()
        self.assertEqual({r["TORCHELASTIC_RUN_ID"] for r in res.values()}, {f"{job}.0"})
        self.assertEqual({r["MASTER_ADDR"] for r in res.values()}, {"127.0.0.1"})
        log = self.log("srun")
        for text in ("--nnodes 2 (SLURM_STEP_NUM_NODES)", "--node-rank 0 (SLURM_NODEID)",
                     "--node-rank 1 (SLURM_NODEID)", "--nproc-per-node 1 (SLURM_CPUS_ON_NODE)",
                     f"--rdzv-id {job}.0 (SLURM_JOB_ID.SLURM_STEP_ID)"):
            self.assertIn(text, log)
        self.assertNotIn("--master-addr ctn1", log)  # explicit flags win
        self.assertTrue(re.search(rf"from Slurm job {job} step 0", log))


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    if not have_torch(TORCH_PYTHON):
        print(f"SKIP: PyTorch with torch.distributed is not installed for {TORCH_PYTHON}")
        return SKIP
    suite = unittest.defaultTestLoader.loadTestsFromName(f"Launchers.{sys.argv[1]}", sys.modules[__name__])
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    for _, exc in result.errors:
        if "Skip:" in exc:
            print("SKIP: " + exc.split("Skip:", 1)[1].strip())
            return SKIP
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
