"""recv from any source and all_reduce of sparse tensors on backend "ctrun", against gloo in the same job.

Run as a worker of `ctrun --standalone --nproc-per-node=4` (argv[1]: the backend, "ctrun" by default, "cpu:ctrun"
on torch 2.x). Checks, on every rank:
- any source: a parameter-server round (rank 0 takes 3 messages from each other rank through dist.recv without
  src, which returns the sender, and irecv + work._source_rank()); every message once, each sender's in order;
  a tag matches only itself; on a subgroup the sender comes back as a global rank; a peer's messages wait
  behind a collective.
- sparse all_reduce: coalesced and uncoalesced COO tensors, hybrid (sparse + dense dims), a rank with no
  entries, float64 / int64 values, a subgroup: equal to gloo's result and to the dense sum; the result is a
  coalesced sparse tensor in the caller's tensor; ReduceOp.MAX is refused as gloo refuses it.
Exits 1 naming the first check that fails.
"""
import sys

import torch
import torch.distributed as dist

import ctrun_torch  # noqa: F401  registers backend "ctrun"

sys.stdout.reconfigure(line_buffering=True, write_through=False)  # one write(2) per line (see tutorial_worker.py)

BACKEND = sys.argv[1] if len(sys.argv) > 1 else "ctrun"
PER_SENDER = 3


def fail(rank, what):
    print(f"rank {rank}: FAIL: {what}", flush=True)
    sys.exit(1)


def parameter_server(rank, size):
    if rank != 0:
        for i in range(PER_SENDER):
            dist.send(torch.tensor([rank, i, rank * 100 + i], dtype=torch.int64), dst=0)
        return
    seen = {}
    for k in range((size - 1) * PER_SENDER):
        t = torch.full((3,), -1, dtype=torch.int64)
        if k % 2 == 0:
            sender = dist.recv(t)
        else:
            work = dist.irecv(t)
            work.wait()
            sender = work._source_rank()
        if int(t[0]) != sender or int(t[2]) != sender * 100 + int(t[1]):
            fail(rank, f"any-source recv returned sender {sender} for message {t.tolist()}")
        if int(t[1]) != seen.get(sender, 0):
            fail(rank, f"rank {sender}'s messages out of order: got #{int(t[1])}, expected #{seen.get(sender, 0)}")
        seen[sender] = int(t[1]) + 1
    if seen != {r: PER_SENDER for r in range(1, size)}:
        fail(rank, f"messages per sender {seen}")


def tags(rank):
    if rank == 1:
        dist.send(torch.tensor([5.0]), dst=0, tag=5)
        dist.send(torch.tensor([6.0]), dst=0, tag=6)
    if rank == 0:
        t = torch.zeros(1)
        if dist.recv(t, tag=6) != 1 or t.item() != 6.0:
            fail(rank, f"recv(tag=6) got {t.item()}")
        if dist.recv(t, tag=5) != 1 or t.item() != 5.0:
            fail(rank, f"recv(tag=5) got {t.item()}")


def subgroup(rank, size):
    g = dist.new_group([1, 2, 3], backend=BACKEND.split(":")[-1])
    if rank == 3:
        dist.send(torch.tensor([33.0]), dst=1, group=g)  # dst is a global rank, as in torch
    if rank == 1:
        t = torch.zeros(1)
        sender = dist.recv(t, group=g)
        if sender != 3 or t.item() != 33.0:
            fail(rank, f"recv on new_group([1, 2, 3]) returned sender {sender} (expected global rank 3), {t.item()}")
    return g


def behind_a_collective(rank, size):
    # Rank 0's receive is posted before an all_reduce, rank 2 sends only after it.
    work = dist.irecv(torch.zeros(2), tag=9) if rank == 0 else None
    t = torch.ones(4)
    dist.all_reduce(t)
    if rank == 2:
        dist.send(torch.tensor([2.0, 2.0]), dst=0, tag=9)
    if work is not None:
        work.wait()
        if work._source_rank() != 2:
            fail(rank, f"the receive posted before all_reduce got its message from {work._source_rank()}")


def sparse_inputs(rank):
    """(name, tensor) pairs every rank builds, differently per rank, with overlapping indices."""
    g = torch.Generator().manual_seed(1234 + rank)
    out = []
    # 1-D sparse, coalesced.
    idx = torch.tensor([[0, 3, 7 + rank]])
    out.append(("1d", torch.sparse_coo_tensor(idx, torch.tensor([1.0, 2.0, 3.0]) * (rank + 1), (12,)).coalesce()))
    # 2-D, uncoalesced (repeated indices), float64.
    idx = torch.randint(0, 5, (2, 6), generator=g)
    out.append(("2d_uncoalesced_f64", torch.sparse_coo_tensor(idx, torch.rand(6, generator=g, dtype=torch.float64),
                                                              (5, 5))))
    # Hybrid: 1 sparse dim, 1 dense dim.
    idx = torch.tensor([[rank % 3, 4]])
    out.append(("hybrid", torch.sparse_coo_tensor(idx, torch.rand(2, 3, generator=g), (6, 3)).coalesce()))
    # No entries on rank 2.
    n = 0 if rank == 2 else 2
    out.append(("empty_on_rank2", torch.sparse_coo_tensor(torch.tensor([[1, 2][:n]], dtype=torch.int64), torch.ones(n), (4,))))
    # int64 values.
    out.append(("int64", torch.sparse_coo_tensor(torch.tensor([[0, rank]]), torch.tensor([rank, 10], dtype=torch.int64),
                                                 (4,)).coalesce()))
    return out


def sparse(rank, size, gloo, sub, sub_gloo):
    for name, t in sparse_inputs(rank):
        ours, theirs = t.clone(), t.clone()
        dense = t.to_dense()
        dist.all_reduce(ours)
        dist.all_reduce(theirs, group=gloo)
        dist.all_reduce(dense, group=gloo)
        if not ours.is_sparse or not ours.is_coalesced():
            fail(rank, f"sparse all_reduce {name}: the result is not a coalesced sparse tensor")
        if not torch.equal(ours.to_dense(), dense) and not torch.allclose(ours.to_dense(), dense):
            fail(rank, f"sparse all_reduce {name}: {ours.to_dense()} != the dense sum {dense}")
        theirs = theirs.coalesce()
        if not torch.equal(ours.indices(), theirs.indices()) or not torch.allclose(ours.values(), theirs.values()):
            fail(rank, f"sparse all_reduce {name}: {ours} != gloo's {theirs}")
    if sub is not None:
        t = sparse_inputs(rank)[0][1]
        ours, theirs = t.clone(), t.clone()
        dist.all_reduce(ours, group=sub)
        dist.all_reduce(theirs, group=sub_gloo)
        if not torch.equal(ours.to_dense(), theirs.to_dense()):
            fail(rank, f"sparse all_reduce on a subgroup: {ours} != gloo's {theirs}")
    try:
        dist.all_reduce(sparse_inputs(rank)[0][1], op=dist.ReduceOp.MAX)
        fail(rank, "sparse all_reduce with MAX was not refused")
    except RuntimeError as e:
        if "SUM" not in str(e):
            fail(rank, f"sparse all_reduce with MAX: unexpected error {e}")


def main():
    dist.init_process_group(BACKEND)
    rank, size = dist.get_rank(), dist.get_world_size()
    assert size == 4, "run with --nproc-per-node=4"
    gloo = dist.new_group(list(range(size)), backend="gloo")
    parameter_server(rank, size)
    tags(rank)
    g = subgroup(rank, size)
    sub_gloo = dist.new_group([1, 2, 3], backend="gloo")
    behind_a_collective(rank, size)
    sparse(rank, size, gloo, g if rank in (1, 2, 3) else None, sub_gloo if rank in (1, 2, 3) else None)
    dist.barrier()
    print(f"rank {rank}: any-source recv and sparse all_reduce ok", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
