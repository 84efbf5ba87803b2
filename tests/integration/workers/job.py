"""Worker of the multi-node tests (run by ctrun on every node).

Always records its pid (and its grandchild's, with --grandchild) under $OUT_DIR so the test can prove that none
outlives the job. With --target-world N a worker whose WORLD_SIZE is not N only marks the round it is in and
waits (to be stopped by a membership change); otherwise it runs a real torch gloo all_reduce and writes its env and
the sum to $OUT_DIR/result.<NODE_TAG>.<LOCAL_RANK>.json. --no-torch writes the env only (no PyTorch needed).
--fail-group-rank G makes the workers of group rank G exit 1 on restart count 0 (once every worker of the attempt
marked its round); --fail-node TAG makes the workers of
node TAG exit 1 on every attempt. --hold-until NAME: the workers wait
until $OUT_DIR/NAME exists before finishing (the test decides when a round may end).
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "common"))
from gloo_job import gloo_all_reduce, write_atomic  # noqa: E402

ENV_KEYS = ["RANK", "LOCAL_RANK", "GROUP_RANK", "ROLE_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_WORLD_SIZE",
            "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_RUN_ID",
            "TORCHELASTIC_USE_AGENT_STORE", "NODE_TAG"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target-world", type=int, default=0)
    ap.add_argument("--fail-group-rank", type=int, default=-1)
    ap.add_argument("--fail-node", default="")
    ap.add_argument("--grandchild", action="store_true")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--hold-until", default="")
    a = ap.parse_args()
    out, node, env = os.environ["OUT_DIR"], os.environ["NODE_TAG"], os.environ
    open(f"{out}/pid.{node}.{env['LOCAL_RANK']}.{os.getpid()}", "w").close()
    if a.grandchild:  # same process group (and session) as this worker, not a direct child of ctrun
        child = subprocess.Popen(["sleep", "300"])
        open(f"{out}/pid.{node}.{env['LOCAL_RANK']}.{child.pid}", "w").close()
    ws = int(env["WORLD_SIZE"])
    write_atomic(f"{out}/round.{node}.{env['LOCAL_RANK']}.ws{ws}.rc{env['TORCHELASTIC_RESTART_COUNT']}", "")
    if a.fail_node == node:
        time.sleep(0.2)
        sys.exit(1)
    if a.target_world and ws != a.target_world:
        time.sleep(120)  # stopped by ctrun when the membership changes
        sys.exit(3)
    if a.hold_until:
        deadline = time.monotonic() + 120
        while not os.path.exists(f"{out}/{a.hold_until}") and time.monotonic() < deadline:
            time.sleep(0.05)
    if int(env["GROUP_RANK"]) == a.fail_group_rank and env["TORCHELASTIC_RESTART_COUNT"] == "0":
        # Fail only once every worker of the attempt has marked it: the tests check that each node's first attempt
        # started, and under load another node's worker may still be importing when this one would fail.
        deadline = time.monotonic() + 30
        while len(glob.glob(f"{out}/round.*.ws{ws}.rc0")) < ws and time.monotonic() < deadline:
            time.sleep(0.05)
        sys.exit(1)
    result = {k: env.get(k) for k in ENV_KEYS}
    if not a.no_torch:
        gloo_all_reduce(result)
    write_atomic(f"{out}/result.{node}.{env['LOCAL_RANK']}.json", json.dumps(result))


if __name__ == "__main__":
    main()
