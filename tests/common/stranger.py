"""A process that is no part of a ctrun job, for the closed-doors tests (docs/security.md): it dials a job's ports
and reports, as one JSON line on stdout, what it got. Run it where the stranger lives (`ip netns exec NS python3
stranger.py ...`). Speaks the job's wire formats itself, from their descriptions (common/auth/handshake.hpp,
agent/checkpoint/replica_wire.hpp), not through ctrun's code.

  stranger.py frames HOST:PORT RANK STEP       the replication endpoint: GET (RANK, STEP), then a PUT of a forged
                                               snapshot of RANK at step 10**9 with a commit
  stranger.py torch HOST PORT                  a torch TCPStore client (torch's own): set, get, num_keys
  stranger.py probe HOST PORT                  torch's first bytes (VALIDATE + PING); the answer's first bytes
  stranger.py http HOST PORT PATH...          a GET of each path: {path: HTTP status, or an error}
  stranger.py replay HOST PORT SECRET_FILE     a genuine handshake with the job's secret (the test holds it),
                                               recorded, then its hello and proof replayed on a new connection
"""
import hashlib
import hmac
import json
import os
import socket
import struct
import sys

MAGIC = b"CTRA"
FRAME = struct.Struct("<IIi4xqQ")  # magic, kind, rank, step, size: 32 bytes
FRAME_MAGIC = 0x434B5231
PUT, GET, COMMIT, OK, REFUSED, DATA = 1, 2, 3, 5, 6, 7
STORE = 1


def dial(host, port, timeout=10):
    s = socket.create_connection((host, int(port)), timeout=timeout)
    s.settimeout(timeout)
    return s


def recv_exact(s, n):
    """n bytes, or fewer if the peer closes first."""
    got = b""
    while len(got) < n:
        chunk = s.recv(n - len(got))
        if not chunk:
            break
        got += chunk
    return got


def read_all(s, limit=1 << 20):
    """Everything the peer sends until it closes (at most `limit` bytes or the socket's timeout)."""
    got = b""
    try:
        while len(got) < limit:
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
    except (socket.timeout, ConnectionResetError):
        pass
    return got


def frames(endpoint, rank, step):
    host, _, port = endpoint.rpartition(":")
    out = {}
    with dial(host, port) as s:
        s.sendall(FRAME.pack(FRAME_MAGIC, GET, int(rank), int(step), 0))
        got = read_all(s)
    out["get_bytes"] = len(got)
    out["get_data"] = len(got) >= 32 and struct.unpack_from("<I", got, 4)[0] == DATA
    out["get_answer"] = got[:8].hex()
    forged = b"CTRUNCK1" + b"\0" * 4088
    with dial(host, port) as s:
        try:
            s.sendall(FRAME.pack(FRAME_MAGIC, PUT, int(rank), 10 ** 9, len(forged)))
            s.sendall(forged)
            s.sendall(FRAME.pack(FRAME_MAGIC, COMMIT, int(rank), 10 ** 9, 0))
        except (BrokenPipeError, ConnectionResetError) as e:
            out["put_error"] = str(e)
        got = read_all(s)
    out["put_bytes"] = len(got)
    out["put_ok"] = len(got) >= 32 and struct.unpack_from("<I", got, 4)[0] == OK
    out["put_answer"] = got[:8].hex()
    return out


def torch_store(host, port):
    from datetime import timedelta

    import torch.distributed as dist
    out = {}
    try:
        store = dist.TCPStore(host, int(port), is_master=False, timeout=timedelta(seconds=5))
        out["connected"] = True
        try:
            store.set("stranger", "was here")
            out["set"] = True
        except Exception as e:  # noqa: BLE001
            out["set_error"] = str(e)[:200]
        try:
            out["num_keys"] = store.num_keys()
        except Exception as e:  # noqa: BLE001
            out["num_keys_error"] = str(e)[:200]
    except Exception as e:  # noqa: BLE001
        out["connected"] = False
        out["error"] = str(e)[:300]
    return out


def probe(host, port):
    with dial(host, port) as s:
        s.sendall(b"\x0d" + struct.pack("<I", 0x3C85F7CE) + b"\x10" + struct.pack("<I", 0x00800001))
        got = read_all(s)
    return {"bytes": len(got), "answer": got[:8].hex(), "secret_required": got[:4] == MAGIC and len(got) >= 7
            and got[6] == 1}


def http(host, port, *paths):
    import urllib.error
    import urllib.request
    out = {}
    for path in paths:
        try:
            with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=10) as r:
                out[path] = r.status
        except urllib.error.HTTPError as e:
            out[path] = e.code
        except OSError as e:
            out[path] = str(e)
    return out


def _mac(key, side, nonce_c, nonce_s):
    return hmac.new(key, side + bytes([STORE, 1]) + nonce_c + nonce_s, hashlib.sha256).digest()


def replay(host, port, secret_file):
    with open(secret_file, "rb") as f:
        key = f.read().rstrip(b" \t\r\n")
    nonce_c = os.urandom(32)
    hello = MAGIC + bytes([1, 1, STORE, 0]) + nonce_c
    out = {}
    with dial(host, port) as s:
        s.sendall(hello)
        challenge = recv_exact(s, 72)
        nonce_s = challenge[8:40]
        out["server_proved"] = len(challenge) == 72 and hmac.compare_digest(
            challenge[40:72], _mac(key, b"ctrun server", nonce_c, nonce_s))
        proof = MAGIC + bytes([1, 3, STORE, 0]) + _mac(key, b"ctrun client", nonce_c, nonce_s)
        s.sendall(proof)
        verdict = recv_exact(s, 8)
        out["genuine_accepted"] = verdict[:4] == MAGIC and len(verdict) == 8 and verdict[6] == 0
    # The recording played back: the server's nonce is new, so the old proof proves nothing.
    with dial(host, port) as s:
        s.sendall(hello)
        fresh = recv_exact(s, 72)
        out["new_server_nonce"] = fresh[8:40] != nonce_s
        try:
            s.sendall(proof)
            # A PING: only a client the server admitted would ever get its echo.
            s.sendall(b"\x10" + struct.pack("<I", 0x00800001))
        except (BrokenPipeError, ConnectionResetError):
            pass
        rest = read_all(s)
    out["replay_verdict"] = rest[:8].hex()
    out["replay_accepted"] = rest[:4] == MAGIC and len(rest) >= 7 and rest[6] == 0
    out["replay_bytes_after_verdict"] = max(0, len(rest) - 8)
    return out


def main():
    verb, args = sys.argv[1], sys.argv[2:]
    result = {"frames": frames, "torch": torch_store, "probe": probe, "http": http, "replay": replay}[verb](*args)
    sys.stdout.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
