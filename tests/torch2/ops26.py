"""Every Python-visible TCPStore op of a real torch 2.x client (v2 dialect) against a server at HOST PORT.

usage: python3 ops26.py HOST PORT        (inside the torch 2.6 chroot; see README.md)
       python3 ops26.py                  as a ctrun worker: the agent's store at MASTER_ADDR:MASTER_PORT

Runs against any TCPStore server: ours (ctstore, ctrun's agent store) or torch's own legacy server
(torch_server26.py), so the two transcripts can be diffed. Every step checks its result against the
semantics in docs/protocol.md and prints one deterministic line: `ok   STEP -> RESULT` or
`FAIL STEP -> RESULT (expected ...)`. Exits 1 if any step failed. The server must be fresh (no keys).
"""
import datetime
import sys
import threading
import time

import torch
import torch.distributed as dist

import os

if len(sys.argv) > 2:
    HOST, PORT = sys.argv[1], int(sys.argv[2])
else:
    HOST, PORT = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
T = datetime.timedelta
BIN = b"\x00\x01\x02nul\x00\xff\xfe\x00\x00"  # binary value with NULs
BIG = bytes(range(256)) * 4096  # 1 MiB
failures = []


def show(r):
    if isinstance(r, bytes) and len(r) > 40:
        return f"<{len(r)} bytes>"
    return repr(r)


def step(what, f, expect=None, raises=None):
    """Runs f; checks its result equals `expect` (or that it raises `raises`, a substring of the message)."""
    try:
        r, exc = f(), None
    except Exception as e:  # the message is checked below, the type is torch-version dependent
        r, exc = None, e
    if raises is not None:
        good = exc is not None and raises in str(exc)
        shown = f"raised {type(exc).__name__}" if exc is not None else f"returned {show(r)}"
        if exc is not None and not good:
            shown += f": {str(exc)[:120]}"
        exp = f"an exception mentioning {raises!r}"
    else:
        good = exc is None and r == expect
        shown = show(r) if exc is None else f"EXCEPTION {type(exc).__name__}: {str(exc)[:120]}"
        exp = show(expect)
    print(f"{'ok  ' if good else 'FAIL'} {what:44s} -> {shown}" + ("" if good else f"   (expected {exp})"),
          flush=True)
    if not good:
        failures.append(what)
    return r


def deferred(client, keys, what):
    """Starts client.wait(keys) in a thread; checks it is still blocked 0.3 s later (the reply is deferred)."""
    box = {}

    def run():
        try:
            client.wait(keys, T(seconds=10))
            box["r"] = "woken"
        except Exception as e:
            box["r"] = f"EXCEPTION {type(e).__name__}: {e}"

    th = threading.Thread(target=run)
    th.start()
    time.sleep(0.3)
    step(f"{what}: still blocked after 0.3 s", lambda: th.is_alive(), True)
    return th, box


def woken(th, box, what):
    th.join(12)
    step(f"{what}: woken", lambda: box.get("r"), "woken")


print(f"torch {torch.__version__}", flush=True)
# 2.6's Python TCPStore has no queue ops and no list_keys (queues arrived in 2.8, list_keys later).
for name in ("queue_push", "queue_pop", "queue_len", "list_keys"):
    print(f"info hasattr(TCPStore, {name!r}) = {hasattr(dist.TCPStore, name)}", flush=True)

# Debian's 2.6 is built without libuv: every TCPStore needs use_libuv=False (README "Tools").
A = dist.TCPStore(HOST, PORT, world_size=1, is_master=False, timeout=T(seconds=30), use_libuv=False)
B = dist.TCPStore(HOST, PORT, world_size=1, is_master=False, timeout=T(seconds=30), use_libuv=False)
step("A.libuvBackend", lambda: A.libuvBackend, False)
step("A.port", lambda: A.port, PORT)

# set / get, binary values, odd keys, 1 MiB
step("A.set k1", lambda: A.set("k1", b"v1"), None)
step("A.get k1", lambda: A.get("k1"), b"v1")
step("A.set bin (NULs)", lambda: A.set("bin", BIN), None)
step("A.get bin", lambda: A.get("bin"), BIN)
step("A.set empty", lambda: A.set("empty", b""), None)
step("A.get empty", lambda: A.get("empty"), b"")
step("A.set nul-in-key", lambda: A.set("nul\x00key", b"nk"), None)
step("A.get nul-in-key", lambda: A.get("nul\x00key"), b"nk")
step("A.check [nul] (prefix of nul-in-key)", lambda: A.check(["nul"]), False)
step("A.set utf8 key", lambda: A.set("ключ", "значение"), None)
step("A.get utf8 key", lambda: A.get("ключ"), "значение".encode())
step("B.get utf8 key (other client)", lambda: B.get("ключ"), "значение".encode())
step("A.set big (1 MiB)", lambda: A.set("big", BIG), None)
step("B.get big == BIG", lambda: B.get("big") == BIG, True)
step("A.set k1 overwrite", lambda: A.set("k1", b"v1"), None)

# add: +, -, 0, on a SET decimal number; stored as decimal text
step("A.add cnt 5", lambda: A.add("cnt", 5), 5)
step("A.add cnt -2", lambda: A.add("cnt", -2), 3)
step("A.add cnt 0", lambda: A.add("cnt", 0), 3)
step("A.get cnt", lambda: A.get("cnt"), b"3")
step("A.add neg -7", lambda: A.add("neg", -7), -7)
step("A.get neg", lambda: A.get("neg"), b"-7")
step("A.add zero 0 (creates '0')", lambda: A.add("zero", 0), 0)
step("A.get zero", lambda: A.get("zero"), b"0")
step("A.set num '40'", lambda: A.set("num", b"40"), None)
step("A.add num 2", lambda: A.add("num", 2), 42)
step("B.add num 2**40", lambda: B.add("num", 2**40), 42 + 2**40)
step("A.get num", lambda: A.get("num"), str(42 + 2**40).encode())

# compare_set: match, mismatch, missing with expected '' (creates), missing with expected != '' (nothing)
step("A.compare_set k1 v1->v2 (match)", lambda: A.compare_set("k1", b"v1", b"v2"), b"v2")
step("A.compare_set k1 nope->v3 (mismatch)", lambda: A.compare_set("k1", b"nope", b"v3"), b"v2")
step("A.get k1", lambda: A.get("k1"), b"v2")
step("A.compare_set nokey x->y (missing)", lambda: A.compare_set("nokey", b"x", b"y"), b"x")
step("A.check [nokey] (not created)", lambda: A.check(["nokey"]), False)
step("A.compare_set newk ''->y (missing)", lambda: A.compare_set("newk", b"", b"y"), b"y")
step("A.get newk", lambda: A.get("newk"), b"y")
step("A.compare_set bin BIN->NULNUL", lambda: A.compare_set("bin", BIN, b"\x00\x00"), b"\x00\x00")
step("A.compare_set bin BIN->x (now mismatch)", lambda: A.compare_set("bin", BIN, b"x"), b"\x00\x00")

# check
step("A.check [k1,zz]", lambda: A.check(["k1", "zz"]), False)
step("A.check [k1,cnt]", lambda: A.check(["k1", "cnt"]), True)
step("A.check []", lambda: A.check([]), True)

# num_keys counts every key, init/ included: init/ k1 bin empty nul\0key ключ big cnt neg zero num newk = 12
step("A.num_keys", lambda: A.num_keys(), 12)

# delete_key
step("A.delete_key newk", lambda: A.delete_key("newk"), True)
step("A.delete_key newk again", lambda: A.delete_key("newk"), False)
step("A.delete_key nokey (never created)", lambda: A.delete_key("nokey"), False)
step("A.check [newk] after delete", lambda: A.check(["newk"]), False)
step("B.num_keys", lambda: B.num_keys(), 11)

# append
step("A.append ap 'ab' (creates)", lambda: A.append("ap", b"ab"), None)
step("A.append ap '\\0cd'", lambda: A.append("ap", b"\x00cd"), None)
step("A.get ap", lambda: A.get("ap"), b"ab\x00cd")

# multi_set / multi_get
step("A.multi_set [m1,m2]", lambda: A.multi_set(["m1", "m2"], [b"x1", b"\x00x2"]), None)
step("A.multi_get [m1,m2,bin]", lambda: A.multi_get(["m1", "m2", "bin"]), [b"x1", b"\x00x2", b"\x00\x00"])
step("A.multi_get []", lambda: A.multi_get([]), [])
step("B.multi_get [big,empty,ключ]", lambda: B.multi_get(["big", "empty", "ключ"]) == [BIG, b"", "значение".encode()],
     True)

# wait: immediate, multi-key, empty
step("A.wait [k1]", lambda: A.wait(["k1"]), None)
step("A.wait [k1,cnt,bin]", lambda: A.wait(["k1", "cnt", "bin"]), None)
step("A.wait []", lambda: A.wait([]), None)
step("A.wait [k1] timeout=1s", lambda: A.wait(["k1"], T(seconds=1)), None)

# deferred waits on B, woken by another client (A); a two-key wait only after both keys exist
th, box = deferred(B, ["late1", "late2"], "B.wait [late1,late2]")
step("A.set late1", lambda: A.set("late1", b"L1"), None)
time.sleep(0.3)
step("B.wait [late1,late2]: still blocked with one key", lambda: th.is_alive(), True)
step("A.set late2", lambda: A.set("late2", b"L2"), None)
woken(th, box, "B.wait [late1,late2]")
th, box = deferred(B, ["ctr"], "B.wait [ctr]")
step("A.add ctr 7", lambda: A.add("ctr", 7), 7)
woken(th, box, "B.wait [ctr]")
th, box = deferred(B, ["ap2"], "B.wait [ap2]")
step("A.append ap2", lambda: A.append("ap2", b"z"), None)
woken(th, box, "B.wait [ap2]")
th, box = deferred(B, ["ms1", "ms2"], "B.wait [ms1,ms2]")
step("A.multi_set [ms1,ms2]", lambda: A.multi_set(["ms1", "ms2"], [b"1", b"2"]), None)
woken(th, box, "B.wait [ms1,ms2]")
th, box = deferred(A, ["viaget"], "A.get viaget (deferred)")  # get() is WAIT + GET
step("B.set viaget", lambda: B.set("viaget", b"G"), None)
woken(th, box, "A.get viaget (deferred)")
step("A.get viaget", lambda: A.get("viaget"), b"G")
step("B.get late1", lambda: B.get("late1"), b"L1")
step("B.multi_get [ctr,ap2,ms2]", lambda: B.multi_get(["ctr", "ap2", "ms2"]), [b"7", b"z", b"2"])

# timed-out wait: the client sends CANCEL_WAIT; the connection must stay in step afterwards, even when the
# awaited key appears later (no stray STOP_WAITING may arrive)
step("A.wait [never] timeout=1s", lambda: A.wait(["never"], T(seconds=1)), raises="imeout")
step("A.get k1 (after timeout)", lambda: A.get("k1"), b"v2")
step("B.set never (after A gave up)", lambda: B.set("never", b"late"), None)
time.sleep(0.1)
step("A.add cnt 1 (stream still in step)", lambda: A.add("cnt", 1), 4)
step("A.get never", lambda: A.get("never"), b"late")
step("A.wait [never2,k1] timeout=1s", lambda: A.wait(["never2", "k1"], T(seconds=1)), raises="imeout")
step("A.check [k1]", lambda: A.check(["k1"]), True)
A.set_timeout(T(seconds=1))
step("A.get missing (1 s store timeout)", lambda: A.get("missing"), raises="imeout")
step("A.multi_get [k1,missing] (1 s)", lambda: A.multi_get(["k1", "missing"]), raises="imeout")
A.set_timeout(T(seconds=30))
step("A.get bin (after timeouts)", lambda: A.get("bin"), b"\x00\x00")

# torch's PrefixStore over our server: keys become '/p/...'
P = dist.PrefixStore("p", A)
step("P.set x", lambda: P.set("x", b"px"), None)
step("B.get p/x", lambda: B.get("p/x"), b"px")
step("P.add c 3", lambda: P.add("c", 3), 3)
step("P.compare_set x px->py", lambda: P.compare_set("x", b"px", b"py"), b"py")
step("P.multi_get [x,c]", lambda: P.multi_get(["x", "c"]), [b"py", b"3"])
step("P.check [x,c]", lambda: P.check(["x", "c"]), True)
step("P.delete_key c", lambda: P.delete_key("c"), True)

# a fresh connection after all that (e.g. a late worker)
C = dist.TCPStore(HOST, PORT, world_size=1, is_master=False, timeout=T(seconds=30), use_libuv=False)
step("C.get k1 (new connection)", lambda: C.get("k1"), b"v2")
# init/ k1 bin empty nul\0key ключ big cnt neg zero num ap m1 m2 late1 late2 ctr ap2 ms1 ms2 viaget never p/x
step("C.num_keys", lambda: C.num_keys(), 23)

# Every public method of 2.6's TCPStore must have been exercised above (or be a plain attribute).
covered = {"add", "append", "check", "compare_set", "delete_key", "get", "multi_get", "multi_set", "num_keys",
           "set", "set_timeout", "wait", "host", "port", "libuvBackend", "timeout", "has_extended_api"}
extra = sorted(n for n in dir(dist.TCPStore) if not n.startswith("_") and n not in covered)
print(f"info TCPStore methods not exercised: {extra}", flush=True)
step("A.has_extended_api", lambda: A.has_extended_api(), True)

print(f"done: {len(failures)} failed" + (f": {failures}" if failures else ""), flush=True)
sys.exit(1 if failures else 0)
