"""scale_bench at small sizes: 64 simulated nodes (round, idle, kill -9, checkpoint and status exchanges, a hang
verdict) and the init storm of 16 nodes x 8 ranks through relays and direct to ctstore. Every row parses, none
failed, and the counts are the scenario's: the master's connections (one per node; one per rank direct), the
exchanges' calls per node bounded whatever N (O(N) in all) and the master's requests in line with them, the relays'
storm costing the master fewer requests than the direct one.

usage: scale_bench_smoke.py SCALE_BENCH
"""
import re
import subprocess
import sys

NODES, STORM_NODES, RANKS = 64, 16, 8


def main():
    cmd = [sys.argv[1], "--sizes", str(NODES), "--idle-window", "1", "--storm-sizes", str(STORM_NODES),
           "--storm-ranks", str(RANKS), "--storm-modes", "relay,direct"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    print(p.stdout)
    print(p.stderr, file=sys.stderr)
    assert p.returncode == 0, f"scale_bench exited {p.returncode}"
    rows = {}
    for line in p.stdout.splitlines():
        parts = [c.strip() for c in line.split("|")]
        if len(parts) != 5 or parts[0].startswith("scenario"):
            continue
        m = re.match(r"(.*\S)\s+(\d+)$", parts[0])
        assert m, f"a row without its node count: {line}"
        cells = parts[2].split()
        assert len(cells) == 5, f"a row whose master columns do not parse: {line}"
        conns, requests = cells[0], cells[1]
        rows[m.group(1)] = {"nodes": int(m.group(2)), "time": parts[1], "conns": conns, "requests": requests,
                            "note": parts[4]}
    assert rows, "no rows printed"
    failed = [k for k in rows if k.startswith("FAILED")]
    assert not failed, f"failed rows: {[(k, rows[k]['note']) for k in failed]}"
    expected = ["round", "idle (formed round)", "kill -9 -> next round", "checkpoint exchange",
                "status records published", "status read by group rank 0", "hang verdict at group rank 0",
                "init storm: through relays", "init storm: direct to ctstore"]
    for name in expected:
        assert name in rows, f"no row '{name}' in {sorted(rows)}"

    def number(name, field):
        v = rows[name][field]
        assert re.fullmatch(r"[\d.]+", v), f"{name}: {field} is '{v}'"
        return float(v)

    assert number("round", "conns") == NODES

    def calls(name):  # what the nodes sent for the exchange itself ("nodes' calls 126" or "... 3.0/node")
        m = re.search(r"nodes' calls ([\d.]+)(/node)?", rows[name]["note"])
        assert m, f"{name}: no nodes' calls in '{rows[name]['note']}'"
        return float(m.group(1)) * (NODES if m.group(2) else 1)

    # The master's count is the exchange's calls (a WAIT may cost it one more; a SET has no reply, so the last
    # ones may land after the bench's sample) plus whatever else the live job sent meanwhile: about one
    # grid-aligned heartbeat per node at most, as the bench waits for the master to be quiet before each exchange.
    # It is not where the bound on the exchange lies (the nodes' calls are).
    def master_requests(name, exchange_calls):
        req = number(name, "requests")
        assert exchange_calls / 2 <= req <= 1.5 * exchange_calls + 2 * NODES, \
            f"{name}: the master handled {req} requests for the nodes' {exchange_calls} calls"

    # The checkpoint exchange: set + wait + get per node, group rank 0's few more: O(1) per node.
    ck = calls("checkpoint exchange")
    assert NODES * 2 <= ck <= NODES * 4, f"checkpoint exchange: the nodes made {ck} calls for {NODES} nodes"
    master_requests("checkpoint exchange", ck)
    pub = calls("status records published")
    assert (NODES - 1) * 2 <= pub <= (NODES - 1) * 3, f"status records: {pub} calls for {NODES - 1} nodes"
    master_requests("status records published", pub)
    read = calls("status read by group rank 0")
    assert 2 <= read <= 4, f"group rank 0's read of every record: {read} calls (one index, one multi-get)"
    master_requests("status read by group rank 0", read)
    verdict = number("hang verdict at group rank 0", "time")
    assert 0 <= verdict <= 30, f"hang verdict after {verdict} s"
    assert number("init storm: through relays", "conns") == STORM_NODES, "the master holds one connection per node"
    assert number("init storm: direct to ctstore", "conns") == STORM_NODES * RANKS
    relay_req = number("init storm: through relays", "requests")
    direct_req = number("init storm: direct to ctstore", "requests")
    assert relay_req < direct_req, f"relays sent the master {relay_req} requests, the ranks direct {direct_req}"
    print("scale_bench smoke: ok")


if __name__ == "__main__":
    main()
