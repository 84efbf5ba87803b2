"""ck.load() and ck.load(into=obj) give back exactly what was saved, in tensors the caller owns; run under ctrun
with any number of ranks, on torch 1.13 or 2.x. Prints one "ok: ..." line per check and "load_into ok rank R" at the
end; any failure raises."""

import os

import torch

import ctrun_torch.checkpoint as ck

rank = int(os.environ["RANK"])
torch.manual_seed(1234 + rank)
model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
base = torch.randn(1000)


def state_of(m, extra):
    # Several dtypes, two tensors over one storage (a view and its base), a non-contiguous view, and plain values.
    return {"model": m.state_dict(), "extra": extra, "view": extra[10:20], "strided": extra[::3],
            "half": extra.to(torch.float16), "ints": torch.arange(7, dtype=torch.int64) * (rank + 1),
            "flags": torch.tensor([True, False, True]), "step_note": f"rank {rank}"}


saved = state_of(model, base)
ck.save(saved, 5)
expect = {k: (v.clone() if torch.is_tensor(v) else v) for k, v in saved.items() if k != "model"}
expect_model = {k: v.clone() for k, v in saved["model"].items()}


def same(obj):
    for k, v in expect_model.items():
        got = obj["model"][k]
        assert got.dtype == v.dtype and torch.equal(got, v) and got.view(torch.uint8).equal(v.view(torch.uint8)), k
    for k, v in expect.items():
        if torch.is_tensor(v):
            assert obj[k].dtype == v.dtype and obj[k].shape == v.shape and torch.equal(obj[k], v), k
        else:
            assert obj[k] == v, k
    # The view and its base still share memory, as they did when saved.
    assert obj["view"].data_ptr() == obj["extra"].data_ptr() + 10 * 4, "the view lost its base"


# Plain load: new tensors, bit for bit; mutating them changes neither the snapshot nor a later load.
step, first = ck.load()
assert step == 5, step
same(first)
first["extra"].add_(1.0)
first["model"]["0.weight"].zero_()
step, second = ck.load()
same(second)
assert first["extra"].data_ptr() != second["extra"].data_ptr()
print("ok: load: bit for bit, the caller owns the tensors", flush=True)

# load(into=): a freshly built object of the same layout receives the values in place.
torch.manual_seed(99)
fresh_model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
into = state_of(fresh_model, torch.zeros(1000))
pointers = {k: v.data_ptr() for k, v in into["model"].items()}
extra_ptr = into["extra"].data_ptr()
step, loaded = ck.load(into=into)
assert step == 5, step
same(loaded)
same(into)  # the caller's own tensors hold the values
for k, v in fresh_model.state_dict().items():
    assert v.data_ptr() == pointers[k] and torch.equal(v, expect_model[k]), f"{k}: not loaded in place"
assert into["extra"].data_ptr() == extra_ptr and loaded["extra"].data_ptr() == extra_ptr
fresh_model(torch.randn(4, 64)).sum().backward()  # the parameters are usable as they are
into["extra"].mul_(3.0)
step, again = ck.load()
same(again)
print("ok: load(into=): in place, bit for bit; mutating the caller's tensors leaves the snapshot", flush=True)

# A different layout is refused before anything is written.
short = torch.zeros(999)
for wrong, words in [({**into, "ints": torch.zeros(7, dtype=torch.int32)}, "bytes of int32"),
                     ({**into, "extra": short, "view": short[10:20], "strided": short[::3]}, "3996 bytes"),
                     ({"model": into["model"]}, "storages"), ({**into, "f": lambda: 0}, "cannot be pickled")]:
    before = {k: v.clone() for k, v in into["model"].items()}
    try:
        ck.load(into=wrong)
    except ValueError as e:
        assert words in str(e), f"{words!r} not in: {e}"
        print(f"ok: ValueError: {e}", flush=True)
    else:
        raise AssertionError(f"no ValueError for into= differing in {words}")
    assert all(torch.equal(v, before[k]) for k, v in into["model"].items()), "a refused load wrote"

# Saves go on after loads (steps forward), and load(into=) follows the newest step.
saved["extra"].add_(2.0)
ck.save(saved, 6)
step, newest = ck.load(into=into)
assert step == 6 and torch.equal(into["extra"], base), step
print(f"load_into ok rank {rank}", flush=True)
