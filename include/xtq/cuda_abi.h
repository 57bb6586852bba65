/*
 * CUDA agent: the memory layout shared by libxtq's host side
 * (hsa-glue/cuda_agent.c) and the persistent command processor, which is
 * compiled into each task module (<xtq/cuda_processor.cuh>). Not for
 * application use: the processor and libxtq check XTQ_CUDA_ABI_VERSION
 * against each other, so a module built against other headers fails at
 * attach instead of misreading this state. Plain C, no CUDA headers.
 *
 * Where things live (push, never pull, across PCIe):
 *  - queue ring, indices, cookies: pinned mapped host memory. The engine
 *    writes packets with plain stores; the GPU polls slot headers.
 *  - completion ring: pinned mapped host memory. The GPU writes one entry
 *    per finished packet; a host thread turns entries into retire calls.
 *  - queue table, kernel table, stop flag, current dispatch: device memory,
 *    written by the host with copies on a control stream.
 */
#ifndef XTQ_CUDA_ABI_H
#define XTQ_CUDA_ABI_H

#include <stdint.h>

#include <xtq/aql.h>
#include <xtq/cuda.h>

/* Bumped whenever a structure below changes. */
#define XTQ_CUDA_ABI_VERSION 4u

#define XTQ__CUDA_MAX_QUEUES 64
#define XTQ__CUDA_MAX_KERNELS 1024
#define XTQ__CUDA_THREADS XTQ_CUDA_MAX_WORKGROUP
#define XTQ__CUDA_PROF_STAGES 8

/* Device-memory kernel descriptor; kernel_object holds its address.
 * `module` names the task module whose processor may call `fn`: a device
 * function pointer is only valid inside its own module. */
struct xtq__cuda_kdesc {
    uint64_t fn;
    uint32_t kernarg_size;
    uint16_t live;
    uint16_t module;
};

/* One completion-ring entry (host memory, written by the GPU). seq is
 * written last: entry j is valid when seq == j + 1. `signal`: the
 * completion signal the host decrements for the GPU (0: none, or the GPU
 * did it itself with a native host atomic). */
struct xtq__cuda_done {
    uint64_t cookie;
    int32_t status;
    uint32_t pad_;
    uint64_t seq;
    uint64_t signal;
};

/* Per-queue words in host memory that the host writes for the GPU. */
struct xtq__cuda_qhost {
    volatile uint64_t retired; /* completion entries consumed by the host */
    uint8_t pad_[56];
};

/* Device-memory queue descriptor. rd is the processor's private read
 * index (the published read_index lives with the queue's indices). */
struct xtq__cuda_qdesc {
    uint64_t ring;    /* xtq_aql_packet_t * (mapped host) */
    uint64_t idx;     /* struct xtq__queue_indices * */
    uint64_t cookies; /* void ** */
    uint64_t done;    /* struct xtq__cuda_done * */
    uint64_t qhost;   /* struct xtq__cuda_qhost * */
    uint64_t rd;
    uint64_t retired_cache;
    uint32_t mask;
    uint32_t active;
};

/* Host memory the GPU writes for the host (mapped). */
struct xtq__cuda_ctl {
    volatile uint32_t version_seen; /* queue-table version the processor uses */
    volatile int32_t error;         /* first processor-side error (negative XTQ code) */
    volatile uint64_t packets_;     /* unused (the count lives in device memory) */
    volatile uint32_t running;      /* module tag of the processor that started last */
    volatile uint32_t abi_seen;     /* XTQ_CUDA_ABI_VERSION it was built with */
    uint8_t pad_[40];
};

/* Device memory: the processor's whole state. */
struct xtq__cuda_dev {
    /* written by the host */
    uint32_t abi;       /* XTQ_CUDA_ABI_VERSION of libxtq */
    uint32_t pad0_;
    volatile uint32_t stop;
    volatile uint32_t version;
    struct xtq__cuda_qdesc q[XTQ__CUDA_MAX_QUEUES];
    volatile uint32_t nq; /* queue slots in use: 0 .. nq-1 */
    uint32_t poll_ns_max; /* longest nap of an idle poller */
    uint32_t host_atomics; /* cudaDevAttrHostNativeAtomicSupported */
    uint64_t ctl;         /* struct xtq__cuda_ctl * (mapped host) */
    uint64_t kdesc;       /* struct xtq__cuda_kdesc[XTQ__CUDA_MAX_KERNELS] (device) */
    /* Payload placement: a kernel dispatch whose reserved2 (set by the
     * engine: the payload's length) is at least copy_min bytes has its
     * payload (argument 1) copied into `stage` (device memory, stage_len
     * bytes) before the task runs, and argument 1 pointed there. */
    uint64_t stage;
    uint64_t stage_len;
    uint64_t copy_min; /* 0: never copy, read in place */
    /* processor-private: the dispatch in flight */
    xtq_kernel_dispatch_packet_t cur;
    uint64_t cur_cookie;
    uint64_t cur_index;
    uint64_t cur_fn;
    uint32_t cur_kernarg_size;
    uint32_t cur_queue;
    uint32_t cur_total;   /* work-groups in cur */
    volatile uint64_t gen;       /* bumped by block 0 when cur is published */
    /* (tag << 32) | work-groups of the dispatch `tag`, published with gen:
     * a block that wakes late reads the tag and the count together, so it
     * can never claim a group of one dispatch with another's count. */
    volatile uint64_t dispatch;
    unsigned long long claim;    /* (gen << 32) | next group to claim */
    unsigned int groups_done;
    volatile uint64_t completed; /* gen of the last finished dispatch */
    uint64_t packets;            /* packets completed */
    /* GPU clock (ns) at the stages of the last kernel dispatch: header
     * seen, body read, arguments read, dispatch published, first group
     * started, last group finished, completion fenced. Profiling only. */
    uint64_t prof[XTQ__CUDA_PROF_STAGES];
    uint32_t error_seen;         /* an error was reported in ctl->error */
    uint32_t pad1_;
    uint8_t kernarg[XTQ_CUDA_MAX_KERNARG] __attribute__((aligned(16)));
};


#endif /* XTQ_CUDA_ABI_H */
