/*
 * CUDA agent: the memory layout shared by libxtq's host side
 * (hsa-glue/cuda_agent.c) and the persistent command processor, which is
 * compiled into each task module (<xtq/cuda_processor.cuh>). Not for
 * application use: the processor and libxtq check XTQ_CUDA_ABI_VERSION
 * against each other, so a module built against other headers fails at
 * attach instead of misreading this state. Plain C, no CUDA headers.
 *
 * Where things live (the host CPU cannot map device memory here, so the
 * GPU pulls, once per task):
 *  - queue ring, inline areas, completion words: pinned mapped host
 *    memory. The engine writes a packet and its inline copy with plain
 *    stores; the GPU reads the inline area in one load per thread and
 *    writes one completion word; a host thread turns completion words
 *    into retire calls and frees the slots.
 *  - queue table, kernel table, stop flag, current dispatch: device memory,
 *    written by the host with copies on a control stream.
 */
#ifndef XTQ_CUDA_ABI_H
#define XTQ_CUDA_ABI_H

#include <stdint.h>

#include <xtq/aql.h>
#include <xtq/cuda.h>

/* Bumped whenever a structure below changes. */
#define XTQ_CUDA_ABI_VERSION 9u

#define XTQ__CUDA_MAX_QUEUES 64
#define XTQ__CUDA_MAX_KERNELS 1024
#define XTQ__CUDA_THREADS XTQ_CUDA_MAX_WORKGROUP
#define XTQ__CUDA_PROF_STAGES 8

/*
 * Inline area: one per ring slot, beside the ring (the AQL packet in the
 * ring stays as every producer writes it). The CUDA agent's enqueue fills
 * it with a copy of the packet, the kernel arguments and a small payload,
 * so that the processor's poll of the slot is also its only read of the
 * task. The area is a run of 16-byte lines in NCCL's LL format: two 8-byte
 * words, each 4 bytes of data and a 4-byte flag. A word is valid when its
 * flag is the slot's packet index + 1 (low 32 bits): 8-byte stores and
 * loads are single-copy atomic on both sides of PCIe, so a word with a
 * current flag carries current data, whichever order the reads of the
 * other words were served in. No header poll, no fence, no second read.
 *
 * The data (8 bytes per line) is an xtq__cuda_inline header (48 bytes), the 64-byte
 * packet, the kernel arguments (kernarg_len bytes, rounded up to 16), and,
 * with XTQ__CUDA_INLINE_PAYLOAD, the payload (payload_len bytes): argument
 * 1 then points at the processor's copy of it. Thread t of the polling
 * block reads line t; lines from XTQ__CUDA_INLINE_LINES_MAX on are not
 * read (those threads read the ring header and device words meanwhile).
 */
#define XTQ__CUDA_LINE_BYTES 16u
#define XTQ__CUDA_LINE_DATA 8u
#define XTQ__CUDA_INLINE_LINES_MAX 248u
#define XTQ__CUDA_INLINE_PACKET 48u   /* offset of the packet in the data */
#define XTQ__CUDA_INLINE_KERNARG 112u /* offset of the kernel arguments */
#define XTQ__CUDA_INLINE_DATA_MAX (XTQ__CUDA_INLINE_LINES_MAX * XTQ__CUDA_LINE_DATA)

enum {
    XTQ__CUDA_INLINE_PAYLOAD = 1u << 0, /* the payload follows the arguments */
};

struct xtq__cuda_inline {
    uint16_t nlines;      /* lines of this packet, this header's included */
    uint16_t kernarg_len; /* bytes of inline arguments (0: read at kernarg_address) */
    uint32_t flags;       /* XTQ__CUDA_INLINE_* */
    uint64_t payload_len; /* bytes at argument 1 (placement: XTQ_CUDA_COPY_MIN) */
    uint64_t result;      /* a fetching put's result buffer (GPU-visible), 0: none */
    uint32_t result_len;
    /* Arguments not inline: their length at kernarg_address (0: unknown),
     * fetched while the kernel is checked, then checked against it. */
    uint32_t kernarg_ext;
    /* On one host, the initiator's completion word (GPU-visible host
     * memory; 0: none): the processor stores
     * ((uint64_t)(uint32_t)status << 32) | notify_tag there, ordered after
     * the task's writes, before the queue's completion word (struct
     * xtq__enqueue.notify; xtq/nic-emul/notify.c). */
    uint64_t notify;
    uint32_t notify_tag;
    uint32_t pad_;
};

/* Device-memory kernel descriptor; kernel_object holds its address.
 * `module` names the task module whose processor may call `fn`: a device
 * function pointer is only valid inside its own module. */
struct xtq__cuda_kdesc {
    uint64_t fn;
    uint32_t kernarg_size;
    uint16_t live;
    uint16_t module;
};

/*
 * Completion: one 64-bit word per ring slot in mapped host memory, the
 * processor's only write per packet: ((uint64_t)(uint32_t)status << 32) |
 * (uint32_t)(index + 1), stored with release semantics after the task's
 * writes. The host's retire thread reads the cookie and the completion
 * signal from its own memory (the ring slot, which stays the producer's
 * until then), decrements the signal where the GPU has no native host
 * atomics, frees the slot (header INVALID, read_index) and calls retire.
 */
#define XTQ__CUDA_DONE_WORD(index, status)                                                  \
    (((uint64_t)(uint32_t)(int32_t)(status) << 32) | (uint32_t)((index) + 1))

/* Device-memory queue descriptor. */
struct xtq__cuda_qdesc {
    uint64_t ring;       /* xtq_aql_packet_t[mask + 1] (mapped host) */
    uint64_t read_index; /* the queue's published read index (mapped host) */
    uint64_t inl;        /* inline areas, inl_lines lines per slot (mapped host) */
    uint64_t done;       /* uint64_t[mask + 1] completion words (mapped host) */
    uint64_t rd;         /* processor: next packet index */
    uint64_t last_kobj;  /* processor: kernel object of the last dispatch */
    uint32_t mask;
    uint32_t inl_lines;  /* lines per slot: a power of two <= 256 */
    uint32_t poll_lines; /* processor: lines its next poll reads */
    uint32_t active;
};

/* Host memory the GPU writes for the host (mapped). */
struct xtq__cuda_ctl {
    volatile uint32_t version_seen; /* queue-table version the processor uses */
    volatile int32_t error;         /* first processor-side error (negative XTQ code) */
    volatile uint32_t caps;         /* XTQ__CUDA_CAP_* of the running processor */
    volatile uint32_t state;        /* XTQ__CUDA_PROC_*: the idle exit's handshake */
    volatile uint32_t running;      /* module tag of the processor that started last */
    volatile uint32_t abi_seen;     /* XTQ_CUDA_ABI_VERSION it was built with */
    uint8_t pad_[40];
};

/*
 * ctl->state, for the processor that exits when idle (dev->idle_exit_us;
 * hsa-glue/cuda_idle.h has the protocol and its ordering argument). The
 * host writes RUNNING before each launch; only the processor writes it
 * afterwards: EXITING before its last look at every queue, then STOPPED
 * (gone: the host relaunches it for the next packet) or RUNNING again (it
 * found one and goes on).
 */
enum {
    XTQ__CUDA_PROC_STOPPED = 0,
    XTQ__CUDA_PROC_RUNNING = 1,
    XTQ__CUDA_PROC_EXITING = 2,
};

enum {
    /* The module was built with relocatable device code (-rdc): its
     * processor can launch large dispatches on the whole GPU. */
    XTQ__CUDA_CAP_GRID = 1u << 0,
};

/* How the processor orders a task's writes before its completion word. */
enum {
    XTQ__CUDA_COMPLETE_RELEASE = 0, /* st.release.sys */
    XTQ__CUDA_COMPLETE_FENCE = 1,   /* fence.sc.sys (__threadfence_system), then a store */
};

/* Device memory: the processor's whole state. */
struct xtq__cuda_dev {
    /* written by the host */
    uint32_t abi;       /* XTQ_CUDA_ABI_VERSION of libxtq */
    uint32_t idle_exit_us; /* exit after this long without a packet; 0: never */
    volatile uint32_t stop; /* block 0 sets it too, for the others, when it exits idle */
    volatile uint32_t version;
    struct xtq__cuda_qdesc q[XTQ__CUDA_MAX_QUEUES];
    volatile uint32_t nq; /* queue slots in use: 0 .. nq-1 */
    uint32_t poll_ns_max; /* longest nap of an idle poller */
    uint32_t host_atomics; /* cudaDevAttrHostNativeAtomicSupported */
    volatile uint32_t complete_mode; /* XTQ__CUDA_COMPLETE_* */
    uint64_t ctl;         /* struct xtq__cuda_ctl * (mapped host) */
    uint64_t kdesc;       /* struct xtq__cuda_kdesc[XTQ__CUDA_MAX_KERNELS] (device) */
    /* Payload placement: a kernel dispatch whose payload (argument 1) is
     * at least copy_min bytes long is copied into `stage` (device memory,
     * stage_len bytes) before the task runs, and argument 1 pointed there. */
    uint64_t stage;
    uint64_t stage_len;
    uint64_t copy_min; /* 0: never copy, read in place */
    /* Dispatches of at least grid_min work-groups run on a grid of their
     * own that the processor launches (modules built with -rdc); 0: never. */
    volatile uint32_t grid_min;
    uint32_t grid_blocks_max; /* largest grid launched (more groups loop) */
    /* processor-private: the dispatch in flight */
    xtq_kernel_dispatch_packet_t cur;
    uint64_t cur_index;
    uint64_t cur_fn;
    uint64_t cur_result;
    uint64_t cur_payload_len;
    uint64_t cur_notify; /* the inline header's notify, notify_tag */
    uint32_t cur_result_len;
    volatile int32_t cur_status;  /* first failure of a task of the dispatch */
    uint32_t cur_kernarg_size;
    uint32_t cur_queue;
    uint32_t cur_total;   /* work-groups in cur */
    uint32_t cur_notify_tag;
    volatile uint64_t gen;       /* bumped by block 0 when cur is published */
    /* (tag << 32) | work-groups of the dispatch `tag`, published with gen:
     * a block that wakes late reads the tag and the count together, so it
     * can never claim a group of one dispatch with another's count. */
    volatile uint64_t dispatch;
    unsigned long long claim;    /* (gen << 32) | next group to claim */
    unsigned int groups_done;
    unsigned int grid_done;      /* blocks of a launched grid that finished */
    volatile uint64_t completed; /* gen of the last finished dispatch */
    uint64_t grid_launches;      /* dispatches run on a launched grid */
    uint64_t grid_failures;      /* launches refused (run by the processor instead) */
    /* GPU clock (ns) at the stages of the last kernel dispatch: packet
     * seen, arguments ready, dispatch published, first group started,
     * last group finished, completion stored. Profiling only. */
    uint64_t prof[XTQ__CUDA_PROF_STAGES];
    uint32_t error_seen;         /* an error was reported in ctl->error */
    uint32_t pad2_;
    /* A multi-group dispatch's inline payload, for every block. */
    uint8_t inl_payload[XTQ__CUDA_INLINE_DATA_MAX] __attribute__((aligned(16)));
    uint8_t kernarg[XTQ_CUDA_MAX_KERNARG] __attribute__((aligned(16)));
};

#endif /* XTQ_CUDA_ABI_H */
