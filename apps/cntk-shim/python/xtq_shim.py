"""PyTorch on libxtq_shim: a DDP communication hook that sends each
gradient bucket through the shim (back-end mpi or xtq, chosen with
XTQ_SHIM_BACKEND), plus a small ctypes binding of the shim itself.

An existing DDP script trains over the shim by adding two lines::

    import xtq_shim
    xtq_shim.register(ddp_model)          # after DistributedDataParallel(...)

Launch the script under mpirun (the shim's workers are the MPI ranks, in
the same order as the process group's ranks). The hook averages as DDP's
default allreduce does (sum over ranks, divided by the world size). CPU and
CUDA tensors are accepted; CUDA buckets are staged through pinned host
memory by the mpi back-end, reduced in device memory by the xtq back-end.

The shim call runs on one helper thread so the backward pass goes on while
a bucket is reduced (ctypes releases the GIL during the call), as gloo and
NCCL overlap theirs.
"""

import concurrent.futures
import ctypes
import os

import torch

__all__ = ["Communicator", "ShimError", "ddp_comm_hook", "register"]

# enum xtq_datatype (include/xtq/reduce.h)
_DTYPES = {
    torch.int8: 0,
    torch.uint8: 1,
    torch.int16: 2,
    torch.int32: 4,
    torch.int64: 6,
    torch.float16: 8,
    torch.bfloat16: 9,
    torch.float32: 10,
    torch.float64: 11,
    torch.bool: 16,
}
# enum xtq_op
_OPS = {"sum": 0, "prod": 1, "max": 2, "min": 3}
_MEM_HOST, _MEM_CUDA = 0, 1


class ShimError(RuntimeError):
    """A shim call failed; the message is the shim's own."""


class _Buf(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("count", ctypes.c_size_t),
        ("type", ctypes.c_int),
        ("mem", ctypes.c_int),
    ]


class _Worker(ctypes.Structure):
    _fields_ = [("global_rank", ctypes.c_size_t), ("host_id", ctypes.c_char * 64)]


class _Stats(ctypes.Structure):
    _fields_ = [
        (n, ctypes.c_uint64)
        for n in ("aggregates", "collectives", "packed", "bytes", "staged", "wait_ns")
    ]


class _Attr(ctypes.Structure):
    _fields_ = [
        ("field_mask", ctypes.c_uint64),
        ("backend", ctypes.c_char_p),
        ("pack_bytes", ctypes.c_size_t),
        ("check", ctypes.c_int),
        ("mpi_comm", ctypes.c_void_p),
        ("xtq_ctx", ctypes.c_void_p),
    ]


_lib = None


def _load():
    """libxtq_shim.so beside this file (the build tree), else the loader's
    search path (an installed library). RTLD_GLOBAL: Open MPI's plugins
    resolve symbols of libmpi, which the shim loads."""
    global _lib
    if _lib is not None:
        return _lib
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "libxtq_shim.so")
    lib = ctypes.CDLL(here if os.path.exists(here) else "libxtq_shim.so", mode=ctypes.RTLD_GLOBAL)
    vp, sz = ctypes.c_void_p, ctypes.c_size_t
    sigs = {
        "xtq_shim_init": (ctypes.c_int, [ctypes.POINTER(_Attr), ctypes.POINTER(vp)]),
        "xtq_shim_finalize": (ctypes.c_int, [vp]),
        "xtq_shim_backend": (ctypes.c_char_p, [vp]),
        "xtq_shim_size": (sz, [vp]),
        "xtq_shim_rank": (sz, [vp]),
        "xtq_shim_workers": (ctypes.POINTER(_Worker), [vp, ctypes.POINTER(sz)]),
        "xtq_shim_aggregate_in_place": (ctypes.c_int, [vp, ctypes.POINTER(_Buf), sz]),
        "xtq_shim_aggregate": (
            ctypes.c_int,
            [vp, ctypes.POINTER(_Buf), ctypes.POINTER(_Buf), sz],
        ),
        "xtq_shim_allreduce": (
            ctypes.c_int,
            [vp, vp, vp, sz, ctypes.c_int, ctypes.c_int, ctypes.c_int],
        ),
        "xtq_shim_barrier": (ctypes.c_int, [vp]),
        "xtq_shim_get_stats": (ctypes.c_int, [vp, ctypes.POINTER(_Stats)]),
        "xtq_shim_last_error": (ctypes.c_char_p, [vp]),
        "xtq_strerror": (ctypes.c_char_p, [ctypes.c_int]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    _lib = lib
    return lib


def _buf(t):
    if not t.is_contiguous():
        raise ValueError("the shim reduces contiguous tensors only")
    if t.dtype not in _DTYPES:
        raise TypeError(f"the shim has no type for {t.dtype}")
    mem = _MEM_CUDA if t.is_cuda else _MEM_HOST
    return _Buf(t.data_ptr(), t.numel(), _DTYPES[t.dtype], mem)


class Communicator:
    """CNTK's DistributedCommunicator over the job's MPI ranks."""

    def __init__(self, backend=None, pack_bytes=None, check=None):
        lib = _load()
        attr = _Attr()
        if backend is not None:
            attr.field_mask |= 1
            attr.backend = backend.encode()
        if pack_bytes is not None:
            attr.field_mask |= 2
            attr.pack_bytes = pack_bytes
        if check is not None:
            attr.field_mask |= 4
            attr.check = int(bool(check))
        self._c = ctypes.c_void_p()
        rc = lib.xtq_shim_init(ctypes.byref(attr), ctypes.byref(self._c))
        if rc != 0:
            raise ShimError(f"xtq_shim_init: {lib.xtq_strerror(rc).decode()}")
        self._lib = lib
        self.rank = lib.xtq_shim_rank(self._c)
        self.size = lib.xtq_shim_size(self._c)
        self.backend = lib.xtq_shim_backend(self._c).decode()
        self._pool = None

    def _check(self, rc, what):
        if rc != 0:
            msg = self._lib.xtq_shim_last_error(self._c).decode()
            raise ShimError(f"{what}: {msg} ({self._lib.xtq_strerror(rc).decode()})")

    def workers(self):
        n = ctypes.c_size_t()
        w = self._lib.xtq_shim_workers(self._c, ctypes.byref(n))
        return [(w[i].global_rank, w[i].host_id.decode()) for i in range(n.value)]

    def current_worker(self):
        return self.workers()[self.rank]

    def aggregate_in_place(self, tensors):
        """Sum each tensor over all workers, in place (small ones packed)."""
        bufs = (_Buf * len(tensors))(*[_buf(t) for t in tensors])
        self._check(
            self._lib.xtq_shim_aggregate_in_place(self._c, bufs, len(tensors)), "aggregate"
        )

    def aggregate(self, inputs, outputs):
        """outputs[i] = sum over workers of inputs[i]."""
        ins = (_Buf * len(inputs))(*[_buf(t) for t in inputs])
        outs = (_Buf * len(outputs))(*[_buf(t) for t in outputs])
        self._check(self._lib.xtq_shim_aggregate(self._c, ins, outs, len(inputs)), "aggregate")

    def allreduce_(self, tensor, op="sum"):
        b = _buf(tensor)
        self._check(
            self._lib.xtq_shim_allreduce(self._c, None, b.data, b.count, b.type, _OPS[op], b.mem),
            "allreduce",
        )
        return tensor

    def barrier(self):
        self._check(self._lib.xtq_shim_barrier(self._c), "barrier")

    def stats(self):
        s = _Stats()
        self._check(self._lib.xtq_shim_get_stats(self._c, ctypes.byref(s)), "stats")
        return {n: getattr(s, n) for n, _ in _Stats._fields_}

    def submit(self, fn):
        """Run fn() on the communicator's one helper thread (calls stay in
        order, one at a time, as the shim requires)."""
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(1, "xtq_shim")
        return self._pool.submit(fn)

    def close(self):
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        if self._c:
            self._check(self._lib.xtq_shim_finalize(self._c), "finalize")
            self._c = ctypes.c_void_p()


def ddp_comm_hook(state, bucket):
    """DDP communication hook: average the bucket over all workers through
    the shim. `state` is a Communicator."""
    t = bucket.buffer()
    if t.is_cuda:
        # The shim copies on the legacy default stream: the gradients
        # written on the current stream must be complete first.
        torch.cuda.current_stream(t.device).synchronize()
    fut = torch.futures.Future()

    def work():
        try:
            if t.is_cuda:
                with torch.cuda.device(t.device):
                    state.allreduce_(t)
            else:
                state.allreduce_(t)
            t.div_(state.size)
            fut.set_result(t)
        except Exception as e:  # reported through the future
            fut.set_exception(e)

    state.submit(work)
    return fut


def register(model, backend=None, pack_bytes=None):
    """Route `model`'s (a DistributedDataParallel) gradient buckets through
    the shim; returns the Communicator (close() it at the end, or let the
    process exit)."""
    comm = Communicator(backend=backend, pack_bytes=pack_bytes)
    import torch.distributed as dist

    if dist.is_initialized() and (dist.get_world_size(), dist.get_rank()) != (comm.size, comm.rank):
        raise ShimError(
            f"process group rank {dist.get_rank()} of {dist.get_world_size()} is shim worker "
            f"{comm.rank} of {comm.size}: launch under mpirun and take RANK/WORLD_SIZE from it"
        )
    model.register_comm_hook(comm, ddp_comm_hook)
    return comm
