#!/usr/bin/env python3
"""Fashion-MNIST MLP with PyTorch DistributedDataParallel, gradients
averaged either by DDP's own allreduce (--comm gloo, or nccl on GPUs) or
through libxtq_shim (--comm shim: the two lines marked below).

    mpirun -np 4 python3 train_ddp.py --comm gloo
    mpirun -np 4 python3 train_ddp.py --comm shim            # XTQ_SHIM_BACKEND=mpi|xtq

The same seed gives the same initial model and the same batches whatever
--comm says, so their accuracies agree up to float summation order.
"""

import argparse
import gzip
import os
import socket
import struct
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

HINT = ("install the data set with 'apt-get install dataset-fashion-mnist' or point --data at a "
        "folder holding the four Fashion-MNIST gzip IDX files")


def read_idx(path, magic, ndims):
    """One gzip (or plain) IDX file as a uint8 tensor; ValueError naming the
    file on any fault."""
    if not os.path.exists(path) and os.path.exists(path[:-3]):
        path = path[:-3]
    try:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rb") as f:
            raw = f.read()
    except (OSError, EOFError) as e:
        raise ValueError(f"{path}: cannot read ({e}); {HINT}") from None
    hdr = 4 + 4 * ndims
    if len(raw) < hdr:
        raise ValueError(f"{path}: truncated header; {HINT}")
    m = struct.unpack(">I", raw[:4])[0]
    if m != magic:
        raise ValueError(f"{path}: magic 0x{m:08x}, expected 0x{magic:08x}; {HINT}")
    dims = struct.unpack(">" + "I" * ndims, raw[4:hdr])
    n = 1
    for d in dims:
        n *= d
    if len(raw) - hdr != n:
        raise ValueError(f"{path}: {len(raw) - hdr} data bytes, header says {n}; {HINT}")
    return torch.frombuffer(bytearray(raw[hdr:]), dtype=torch.uint8).reshape(dims)


def load(folder, prefix):
    x = read_idx(f"{folder}/{prefix}-images-idx3-ubyte.gz", 0x803, 3)
    y = read_idx(f"{folder}/{prefix}-labels-idx1-ubyte.gz", 0x801, 1)
    if len(x) != len(y):
        raise ValueError(f"{folder}: {len(x)} {prefix} images but {len(y)} labels; {HINT}")
    if int(y.max()) >= 10:
        raise ValueError(f"{folder}/{prefix}-labels-idx1-ubyte.gz: label {int(y.max())} out of "
                         f"range; {HINT}")
    return x.reshape(len(x), -1), y.long()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--comm", choices=["gloo", "nccl", "shim"], default="shim",
                   help="DDP's own allreduce (gloo on CPUs, nccl on GPUs) or the shim hook")
    p.add_argument("--backend", default=None, help="shim back-end (default XTQ_SHIM_BACKEND)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch", type=int, default=64, help="global batch")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--steps", type=int, default=0, help="at most this many steps per epoch")
    p.add_argument("--train-limit", type=int, default=0)
    p.add_argument("--test-limit", type=int, default=0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--port", type=int, default=29511)
    p.add_argument("--csv", default=None)
    a = p.parse_args()

    env = os.environ
    rank = int(env.get("OMPI_COMM_WORLD_RANK", env.get("RANK", 0)))
    world = int(env.get("OMPI_COMM_WORLD_SIZE", env.get("WORLD_SIZE", 1)))
    local = int(env.get("OMPI_COMM_WORLD_LOCAL_RANK", env.get("LOCAL_RANK", 0)))
    torch.set_num_threads(1)
    if a.device == "cuda":
        if not torch.cuda.is_available():
            print(f"SKIP: rank {rank}: torch has no CUDA device here", flush=True)
            return 77
        torch.cuda.set_device(local % torch.cuda.device_count())
    dev = torch.device(a.device, torch.cuda.current_device()) if a.device == "cuda" else "cpu"
    if a.batch % world:
        print(f"--batch {a.batch} must be a multiple of the {world} ranks", file=sys.stderr)
        return 2
    # On GPUs the process group is NCCL's whatever carries the gradients
    # (DDP's start-up broadcast, the statistics); --comm picks the buckets'.
    pg = "nccl" if a.device == "cuda" else "gloo"
    if a.comm == "nccl" and a.device != "cuda":
        print("--comm nccl needs --device cuda", file=sys.stderr)
        return 2
    dist.init_process_group(pg, init_method=f"tcp://127.0.0.1:{a.port}", rank=rank,
                            world_size=world)

    # Every rank reads the data; a fault anywhere stops every rank.
    err = ""
    try:
        xtr, ytr = load(a.data, "train")
        xte, yte = load(a.data, "t10k")
    except ValueError as e:
        err = str(e)
    flags = torch.tensor([1 if err else 0], device=dev)
    dist.all_reduce(flags)
    if flags.item():
        print(f"train_ddp: rank {rank}: {err or 'another rank could not read the data set'}",
              file=sys.stderr, flush=True)
        return 2
    if a.train_limit:
        xtr, ytr = xtr[:a.train_limit], ytr[:a.train_limit]
    if a.test_limit:
        xte, yte = xte[:a.test_limit], yte[:a.test_limit]

    torch.manual_seed(a.seed)
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                          nn.Linear(128, 10)).to(dev)
    ddp = DDP(model, device_ids=[dev.index] if a.device == "cuda" else None)
    comm = None
    if a.comm == "shim":
        import xtq_shim                                     # line 1 of 2
        comm = xtq_shim.register(ddp, backend=a.backend)    # line 2 of 2
    opt = torch.optim.SGD(ddp.parameters(), lr=a.lr, momentum=a.momentum)
    lossf = nn.CrossEntropyLoss()
    xte_t = (xte.float() / 255.0).to(dev)
    yte_t = yte.to(dev)

    n = len(xtr)
    steps = (n + a.batch - 1) // a.batch
    if a.steps:
        steps = min(steps, a.steps)
    label = f"shim/{comm.backend}" if comm else pg
    csv = open(a.csv, "w") if a.csv and rank == 0 else None
    if csv:
        csv.write(f"# host: {socket.gethostname()}, {os.cpu_count()} cores, torch "
                  f"{torch.__version__}\n# command: {' '.join(sys.argv)}\n"
                  "comm,ranks,device,epoch,steps,train_loss,test_acc,epoch_s,comm_s\n")
    if rank == 0:
        print(f"train_ddp: comm {label}, {world} ranks, device {a.device}, torch "
              f"{torch.__version__}, global batch {a.batch}, {steps} steps per epoch", flush=True)
    acc = 0.0
    for epoch in range(1, a.epochs + 1):
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(a.seed * 1000003 + epoch))
        ddp.train()
        total, seen = 0.0, 0
        wait0 = comm.stats()["wait_ns"] if comm else 0
        t0 = time.perf_counter()
        for s in range(steps):
            idx = perm[s * a.batch:(s + 1) * a.batch]
            share = len(idx) // world
            mine = idx[rank * share:(rank + 1) * share]
            x = (xtr[mine].float() / 255.0).to(dev)
            y = ytr[mine].to(dev)
            opt.zero_grad(set_to_none=True)
            loss = lossf(ddp(x), y)
            loss.backward()
            opt.step()
            total += loss.item() * len(mine)
            seen += len(mine)
        if a.device == "cuda":
            torch.cuda.synchronize()
        t_epoch = time.perf_counter() - t0
        ddp.eval()
        with torch.no_grad():
            correct = (model(xte_t).argmax(1) == yte_t).sum().float()
        stats = torch.tensor([total, float(seen), t_epoch], dtype=torch.float64, device=dev)
        dist.all_reduce(stats)
        acc = 100.0 * correct.item() / len(yte)
        comm_s = (comm.stats()["wait_ns"] - wait0) * 1e-9 if comm else float("nan")
        if rank == 0:
            print(f"epoch {epoch:3d} loss {stats[0] / stats[1]:.4f} test {acc:6.2f}% "
                  f"epoch {stats[2] / world:.2f}s shim {comm_s:.3f}s", flush=True)
        if csv:
            csv.write(f"{label},{world},{a.device},{epoch},{steps},{stats[0] / stats[1]:.6f},"
                      f"{acc:.4f},{stats[2] / world:.4f},{comm_s:.4f}\n")
            csv.flush()
    if rank == 0:
        extra = ""
        if comm:
            st = comm.stats()
            extra = f" shim collectives {st['collectives']}"
        print(f"final: comm {label} ranks {world} device {a.device} epochs {a.epochs} "
              f"test accuracy {acc:.2f}%{extra}", flush=True)
    if comm:
        comm.close()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
