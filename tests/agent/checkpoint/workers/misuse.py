"""Bad input for ctrun_torch.checkpoint, one rank, run with --checkpoint-memory 2.5M: every misuse must fail with a
clear error and leave what is held intact. Prints one "ok: ..." line per check; any failure raises."""

import torch

import ctrun_torch.checkpoint as ck

MiB = 1 << 20
state = {"w": torch.ones(MiB // 4)}  # 1 MiB of float32


def fails(kind, words, call):
    try:
        call()
    except kind as e:
        text = str(e)
        missing = [w for w in words if w not in text]
        assert not missing, f"{kind.__name__} without {missing}: {text}"
        print(f"ok: {kind.__name__}: {text}", flush=True)
        return
    raise AssertionError(f"no {kind.__name__} from {call}")


assert ck.load() is None
ck.save(state, 0)
ck.save(state, 1)
held = ck.status()["held"]
assert list(held) == [0, 1], held
# A third snapshot of 1 MiB would pass 2.5 MiB: refused before anything is allocated, both steps still held.
fails(MemoryError, ["step 2", "MiB", "limit of 2.5 MiB", "held already", "--checkpoint-memory"],
      lambda: ck.save(state, 2))
fails(MemoryError, ["step 2", "64.0 MiB"], lambda: ck.save({"big": torch.zeros(16 * MiB)}, 2))
fails(TypeError, ["step 2", "cannot be pickled", "[0, 1]"], lambda: ck.save({"f": lambda: 0, "w": state["w"]}, 2))
fails(ValueError, ["step 1", "go forward", "step 1"], lambda: ck.save(state, 1))
fails(ValueError, ["int >= 0"], lambda: ck.save(state, -3))
assert ck.status()["held"] == held, ck.status()
assert ck.status()["node_bytes"] <= 2.5 * MiB, ck.status()
ck.wait()
step, back = ck.load()
assert step == 1 and torch.equal(back["w"], state["w"]), step
print("ok: held intact", ck.status(), flush=True)
