"""Worker of the cluster tests. Records its pid under $OUT_DIR (so a test can prove none outlives the job), prints
one line (the launcher prefixes it with the host), and unless --sleep runs a real torch gloo all_reduce and writes
result.<RANK>.json with its env, the sum and the network namespace it ran in.

--sleep: wait to be stopped. --exit-code G:C: the workers of group rank G exit with code C.
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "common"))
from gloo_job import gloo_all_reduce, write_atomic  # noqa: E402

KEYS = ["RANK", "LOCAL_RANK", "GROUP_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_WORLD_SIZE", "MASTER_ADDR",
        "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_RUN_ID", "CUDA_VISIBLE_DEVICES", "EXPORTED",
        "FROM_ENV_FILE", "SLURM_JOB_ID", "OMPI_COMM_WORLD_RANK"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sleep", action="store_true")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--exit-code", default="")
    a = ap.parse_args()
    out, env = os.environ["OUT_DIR"], os.environ
    open(f"{out}/pid.{os.getpid()}", "w").close()
    sys.stdout.write(f"hello from rank {env['RANK']} of {env['WORLD_SIZE']}\n")  # one write: whole lines
    sys.stdout.flush()
    if a.sleep:
        time.sleep(300)
        sys.exit(3)
    if a.exit_code:
        group, code = a.exit_code.split(":")
        if env["GROUP_RANK"] == group:
            sys.exit(int(code))
    result = {k: env.get(k) for k in KEYS}
    result["netns"] = os.readlink("/proc/self/ns/net")
    if not a.no_torch:
        gloo_all_reduce(result)
    write_atomic(f"{out}/result.{env['RANK']}.json", json.dumps(result))


if __name__ == "__main__":
    main()
