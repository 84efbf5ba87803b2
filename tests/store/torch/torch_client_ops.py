#!/usr/bin/python3
"""Every Python-visible TCPStore op of torch 1.13, as a real torch client, against the server at HOST:PORT.

Used by tcp_store_torch_test against a fresh ctstore. Exits 0 and prints "ALL OK" only if every check passed;
prints the failed check otherwise. Leaves known keys behind for the C++ side to verify with our client:
  /nul\\x00key = b"v\\x00al\\x00", /big = 1 MiB pattern, /cnt = b"3"."""
import datetime
import sys
import threading
import time

import torch.distributed as dist

host, port = sys.argv[1], int(sys.argv[2])
T = datetime.timedelta


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", flush=True)
        sys.exit(1)


# world_size=1 makes the client send ADD "init/" 1 on connect, like every torch worker.
s = dist.TCPStore(host, port, 1, False, T(seconds=30))
check(s.port == port, "port property")

# set/get, binary keys and values, empty value, overwrite
s.set("k1", b"v1")
check(s.get("k1") == b"v1", "get k1")
s.set("k1", b"v1b")
check(s.get("k1") == b"v1b", "overwrite k1")
s.set("nul\x00key", b"v\x00al\x00")
check(s.get("nul\x00key") == b"v\x00al\x00", "NUL bytes in key and value")
s.set("empty", b"")
check(s.get("empty") == b"", "empty value")
s.set("text", "unicode \u00e9")
check(s.get("text") == "unicode \u00e9".encode(), "str value stored as UTF-8")

# 1 MiB value (sent in one field; the reply arrives while... we are done writing)
big = bytes((i * 7 + 3) % 251 for i in range(1 << 20))
s.set("big", big)
check(s.get("big") == big, "1 MiB value")

# add: decimal ASCII, negative deltas, add on a SET decimal value
check(s.add("cnt", 5) == 5, "add 5")
check(s.add("cnt", -2) == 3, "add -2")
check(s.get("cnt") == b"3", "add stores decimal")
s.set("forty", b"40")
check(s.add("forty", 2) == 42, "add onto set decimal")
check(s.add("zero", 0) == 0 and s.get("zero") == b"0", "add 0 creates '0'")

# compare_set: the three cases
check(s.compare_set("k1", b"v1b", b"v2") == b"v2", "compare_set swap")
check(s.compare_set("k1", b"wrong", b"v3") == b"v2", "compare_set mismatch returns current")
check(s.compare_set("nokey", b"x", b"y") == b"x", "compare_set missing + expected returns expected")
check(s.compare_set("newk", b"", b"y") == b"y", "compare_set missing + empty expected creates")
check(s.get("newk") == b"y", "compare_set created key")
check(s.compare_set("nul\x00key", b"v\x00al\x00", b"v\x00al\x00") == b"v\x00al\x00", "compare_set NUL")

# num_keys counts everything, init/ included: init/, k1, nul, empty, text, big, cnt, forty, zero, newk
check(s.num_keys() == 10, f"num_keys == 10 (got {s.num_keys()})")

# delete_key
s.set("gone", b"x")
check(s.delete_key("gone") is True, "delete existing")
check(s.delete_key("gone") is False, "delete missing")
check(s.delete_key("nokey") is False, "compare_set case 3 created nothing")

# wait: present keys, multi-key deferred wait woken by another client, timed-out wait
s.wait(["k1", "cnt"])
s.wait(["k1"], T(seconds=5))
other = dist.TCPStore(host, port, None, False, T(seconds=30))


def later():
    time.sleep(0.2)
    other.set("late1", b"a")
    time.sleep(0.1)
    other.add("late2", 1)


th = threading.Thread(target=later)
th.start()
t0 = time.time()
s.wait(["late1", "late2"], T(seconds=10))
th.join()
check(time.time() - t0 >= 0.25, "multi-key wait returned only after both keys")
check(s.get("late2") == b"1", "late2 value")

t0 = time.time()
try:
    s.wait(["never"], T(milliseconds=500))
    check(False, "wait on a missing key must time out")
except RuntimeError as e:
    check("timeout" in str(e).lower(), f"timeout error text: {e}")
check(0.4 <= time.time() - t0 < 5, "timed-out wait took about its timeout")

# get of a missing key times out (get = wait + get) with the store timeout
s.set_timeout(T(milliseconds=300))
try:
    s.get("never2")
    check(False, "get on a missing key must time out")
except RuntimeError:
    pass

# A fresh client still works (a 1.13 client whose wait timed out has a stale registration on its socket).
s2 = dist.TCPStore(host, port, None, False, T(seconds=30))
check(s2.get("cnt") == b"3", "fresh client after timeouts")
check(s2.add("cnt", 0) == 3, "add 0 reads")
print("ALL OK", flush=True)
