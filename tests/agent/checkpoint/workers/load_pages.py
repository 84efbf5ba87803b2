"""ck.load() into new tensors over the pages of a file the rank no longer needs (RankDir.take_pages): the older step
held, then the spare, then new memory; each load bit for bit, the tensors the caller's own (a later save or load
never changes them, mutating them changes no later load), what the rank holds as it should be. One rank under
ctrun; prints "ok: ..." lines, any failure raises."""

import os

import torch

import ctrun_torch.checkpoint as ck

torch.manual_seed(7)
state = {"a": torch.randn(300_000), "b": torch.arange(1000, dtype=torch.int64)}


def expect(step):
    return {"a": state["a"] + step, "b": state["b"] * step}


for step in (1, 2, 3):  # held: 2 and 3, and step 1's file as the spare
    ck.save(expect(step), step)
assert sorted(ck.status()["held"]) == [2, 3], ck.status()
rank_dir = ck._state().dir.path
assert os.path.exists(os.path.join(rank_dir, ".spare")), os.listdir(rank_dir)

loaded = []
for n, (held_after, spare_after) in enumerate([([3], True), ([3], False), ([3], False)]):
    step, obj = ck.load()
    assert step == 3, step
    for k, v in expect(3).items():
        assert torch.equal(obj[k], v), f"load {n}: {k} differs"
    assert sorted(ck.status()["held"]) == held_after, (n, ck.status())
    assert os.path.exists(os.path.join(rank_dir, ".spare")) == spare_after, (n, os.listdir(rank_dir))
    loaded.append(obj)
print("ok: three loads: the older step's file, the spare, then new memory; each bit for bit", flush=True)

loaded[0]["a"].mul_(-1)  # the caller's own: no later load sees it
loaded[1]["b"].zero_()
step, again = ck.load()
assert torch.equal(again["a"], expect(3)["a"]) and torch.equal(again["b"], expect(3)["b"])
for step in (4, 5, 6):  # saves after the loads allocate their own files; the loaded tensors keep their values
    ck.save(expect(step), step)
assert torch.equal(loaded[0]["a"], -expect(3)["a"]) and torch.equal(loaded[0]["b"], expect(3)["b"])
assert torch.equal(loaded[1]["a"], expect(3)["a"]) and not loaded[1]["b"].any()
assert torch.equal(loaded[2]["a"], expect(3)["a"])
assert sorted(ck.status()["held"]) == [5, 6], ck.status()
step, last = ck.load()
assert step == 6 and torch.equal(last["a"], expect(6)["a"]), step
print("ok: the loaded tensors are the caller's alone; saves after them and later loads are as before", flush=True)
