/*
 * The CPU agent: a software packet processor.
 *
 * XTQ_CPU_WORKERS threads serve every queue of the agent. A worker scans
 * the queues round-robin and takes the head packet of one: it copies the
 * packet, its cookie and the queue's retire function, marks the slot
 * INVALID and advances read_index, so producers reuse the slot while the
 * task runs. Packets of one queue are taken in order; several may run at
 * once on different workers unless the barrier bit asks for the earlier
 * ones to finish first. Barrier-AND/OR packets stay at the head of their
 * queue until their dependencies hold, and the packet after one starts
 * only when it has completed: a barrier blocks its queue (HSA).
 *
 * An idle worker watches the doorbell word for XTQ_AGENT_SPIN_US, then
 * sleeps on its futex: a
 * task that follows closely starts without a wake-up (a few microseconds
 * of scheduler latency), an idle agent costs nothing. Only while a barrier
 * packet waits on signals that something outside this agent may change do
 * workers sleep in bounded naps (20 us growing to 1 ms).
 *
 * Kernel and function objects live in an agent-owned pool, so a kernel
 * object taken from a packet is validated (range, alignment, magic) before
 * anything is called through it.
 *
 * While a kernel or function runs, its worker publishes the task's state
 * thread-locally: the result buffer and payload its producer put beside
 * the cookie (q->results, taken with it) for xtq_task_result() and
 * xtq_task_payload(), and the first xtq_task_fail()
 * status, which retire reports as the task's status. A task that failed
 * itself still decrements its completion signal; only packets the agent
 * could not run count as bad packets.
 *
 * Short tasks (XTQ_REGISTER_SHORT) may skip the queue: the enqueue
 * operation runs one on the calling thread, the engine's progress turn,
 * when that is what a worker would have done next anyway: the queue is
 * empty (no slot reserved either) and none of its packets is running. It
 * takes the task as a worker takes a packet (under the take lock, counted
 * in the queue's state word), so a packet enqueued meanwhile keeps its
 * barrier bit and destroy still drains it; then runs it through cpu_run,
 * which decrements the signal and retires it: the ack leaves from the
 * same thread, with no doorbell and no worker wake-up (XTQ_CPU_INLINE_TASKS).
 */
#include "internal.h"

#include <errno.h>
#include <sched.h>
#include <sys/mman.h>

#include "cpu_agent.h"
#include "queue_int.h"
#include "trace.h"

#define CPU_MAX_WORKERS 256
#define CPU_MAX_QUEUE_SIZE (1u << 20)
#define CPU_OBJ_MAX 65536u
#define CPU_KERNEL_MAGIC 0x4b555043u   /* "CPUK" */
#define CPU_FUNCTION_MAGIC 0x46555043u /* "CPUF" */
#define CPU_NAP_MIN_NS 20000
#define CPU_NAP_MAX_NS 1000000

/* Packet fences: the header's acquire and release scopes, as written. The
 * same build runs under TSan (it must see the code that ships): TSan does
 * not model a stand-alone fence, which costs it nothing here, because the
 * orderings it needs are also carried by operations it does model, the
 * acquire load of the header (the producer's publish) and the completion
 * signal's acq_rel add (whoever waits on the task). */
#if defined(__SANITIZE_THREAD__) && !defined(__clang__)
/* GCC says so (-Wtsan); the fence stays, the warning is silenced here. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wtsan"
#endif
static inline void cpu_fence(memory_order order)
{
    atomic_thread_fence(order);
}
#if defined(__SANITIZE_THREAD__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

/* A kernel or function object; its address is the kernel_object /
 * function object value. The base is first so container_of is a cast. */
struct cpu_object {
    union {
        struct xtq_kernel kernel;
        struct xtq_function function;
    } base;
    _Atomic uint32_t magic; /* 0 while free */
    uint32_t next_free;     /* free list: index + 1, 0 ends */
    union {
        xtq_cpu_kernel_fn kernel;
        xtq_cpu_function_fn function;
    } fn;
    void *user_data;
};

struct cpu_queue {
    struct xtq_queue base;
    struct cpu_agent *agent;
    pthread_mutex_t take_lock; /* one taker at a time keeps packets in order */
    /* Packets taken and not finished (low bits) plus the flags below, in
     * one word: the finishing worker's single fetch_sub is its last touch
     * of the queue, so destroy can free it as soon as the count is 0. */
    _Atomic uint32_t state;
    bool after_barrier;         /* last taken was barrier-AND/OR (under take_lock) */
    _Alignas(XTQ_CACHELINE) struct xtq_signal doorbell;
    _Alignas(XTQ_CACHELINE) struct xtq__queue_indices idx;
};

#define CQ_BLOCKED (1u << 31)    /* the head waits for the count to drain */
#define CQ_DESTROYING (1u << 30) /* destroy waits on the word */
#define CQ_COUNT (CQ_DESTROYING - 1)

struct cpu_agent {
    struct xtq_agent base;
    unsigned nworkers;
    unsigned nstarted;
    uint64_t spin_ns; /* XTQ_AGENT_SPIN_US */
    bool run_here;    /* XTQ_CPU_INLINE_TASKS */
    bool run_beside;  /* XTQ_CPU_INLINE_TASKS=2: also beside running packets */
    pthread_t *workers;

    pthread_rwlock_t qlock; /* workers scan under the read lock */
    struct cpu_queue **queues;
    unsigned nqueues;
    unsigned qcap;
    uint32_t next_qid;

    _Atomic uint32_t work_seq; /* futex: bumped by doorbells and completions */
    _Atomic uint32_t sleepers;
    _Atomic uint32_t dep_nappers; /* sleepers waiting on barrier dependencies */
    _Atomic uint32_t stop;

    _Atomic uint64_t bad_packets;
    _Atomic uint64_t done;

    pthread_mutex_t obj_lock;
    struct cpu_object *objs; /* CPU_OBJ_MAX entries, reserved, touched as used */
    _Atomic uint32_t obj_high;
    uint32_t obj_free;
};

struct cpu_task {
    xtq_aql_packet_t pkt;
    void *cookie;
    xtq__retire_fn retire;
    struct xtq__result_buf result; /* result buffer and payload, or {NULL, 0, NULL, 0} */
    struct cpu_queue *q;
    int status; /* an error found when taking (bad dependency handle) */
};

enum { TAKE_OK, TAKE_EMPTY, TAKE_BUSY, TAKE_BLOCKED, TAKE_DEPS };

static const struct xtq__agent_ops cpu_ops;

static struct cpu_agent *cpu_agent_of(xtq_agent_t *agent)
{
    return container_of(agent, struct cpu_agent, base);
}

/* ---- objects ------------------------------------------------------------ */

static struct cpu_object *cpu_object_alloc(struct cpu_agent *a)
{
    struct cpu_object *o = NULL;
    uint32_t i;

    pthread_mutex_lock(&a->obj_lock);
    if (a->obj_free != 0) {
        i = a->obj_free - 1;
        a->obj_free = a->objs[i].next_free;
        o = &a->objs[i];
    } else {
        i = atomic_load_explicit(&a->obj_high, memory_order_relaxed);
        if (i < CPU_OBJ_MAX) {
            o = &a->objs[i];
            atomic_store_explicit(&a->obj_high, i + 1, memory_order_release);
        }
    }
    pthread_mutex_unlock(&a->obj_lock);
    return o;
}

static void cpu_object_free(struct cpu_agent *a, struct cpu_object *o)
{
    atomic_store_explicit(&o->magic, 0, memory_order_release);
    pthread_mutex_lock(&a->obj_lock);
    o->next_free = a->obj_free;
    a->obj_free = (uint32_t)(o - a->objs) + 1;
    pthread_mutex_unlock(&a->obj_lock);
}

/* The live object behind a packet's value, or NULL: never dereferences a
 * value outside the pool. */
static struct cpu_object *cpu_object_lookup(struct cpu_agent *a, uint64_t value, uint32_t magic)
{
    uintptr_t base = (uintptr_t)a->objs;
    uint64_t off;

    if (value < base)
        return NULL;
    off = value - base;
    if (off % sizeof(struct cpu_object) != 0 ||
        off / sizeof(struct cpu_object) >= atomic_load_explicit(&a->obj_high, memory_order_acquire))
        return NULL;
    struct cpu_object *o = &a->objs[off / sizeof(struct cpu_object)];
    if (atomic_load_explicit(&o->magic, memory_order_acquire) != magic)
        return NULL;
    return o;
}

int xtq_kernel_create_cpu(xtq_agent_t *agent, xtq_cpu_kernel_fn fn, uint32_t kernarg_size,
                          void *user_data, xtq_kernel_t **kernel)
{
    struct cpu_object *o;

    if (agent == NULL || fn == NULL || kernel == NULL)
        return -XTQ_EINVAL;
    if (agent->ops != &cpu_ops)
        return -XTQ_EAGENTKIND;
    o = cpu_object_alloc(cpu_agent_of(agent));
    if (o == NULL) {
        xtq_err(CPU, "kernel pool full (%u objects)", CPU_OBJ_MAX);
        return -XTQ_ENOMEM;
    }
    o->base.kernel.agent = agent;
    o->base.kernel.object = (uint64_t)(uintptr_t)o;
    o->base.kernel.kernarg_size = kernarg_size;
    o->base.kernel.flags = 0;
    atomic_init(&o->base.kernel.refs, 0); /* the pool reuses destroyed objects */
    o->fn.kernel = fn;
    o->user_data = user_data;
    atomic_store_explicit(&o->magic, CPU_KERNEL_MAGIC, memory_order_release);
    *kernel = &o->base.kernel;
    return 0;
}

int xtq_function_create_cpu(xtq_agent_t *agent, xtq_cpu_function_fn fn, void *user_data,
                            xtq_function_t **function)
{
    struct cpu_object *o;

    if (agent == NULL || fn == NULL || function == NULL)
        return -XTQ_EINVAL;
    if (agent->ops != &cpu_ops)
        return -XTQ_EAGENTKIND;
    o = cpu_object_alloc(cpu_agent_of(agent));
    if (o == NULL) {
        xtq_err(CPU, "function pool full (%u objects)", CPU_OBJ_MAX);
        return -XTQ_ENOMEM;
    }
    o->base.function.agent = agent;
    o->base.function.object = (uint64_t)(uintptr_t)o;
    atomic_init(&o->base.function.refs, 0);
    o->fn.function = fn;
    o->user_data = user_data;
    atomic_store_explicit(&o->magic, CPU_FUNCTION_MAGIC, memory_order_release);
    *function = &o->base.function;
    return 0;
}

static int cpu_kernel_destroy(xtq_kernel_t *kernel)
{
    struct cpu_agent *a = cpu_agent_of(kernel->agent);
    struct cpu_object *o = cpu_object_lookup(a, kernel->object, CPU_KERNEL_MAGIC);

    if (o == NULL || &o->base.kernel != kernel)
        return -XTQ_EINVAL;
    cpu_object_free(a, o);
    return 0;
}

static int cpu_function_destroy(xtq_function_t *function)
{
    struct cpu_agent *a = cpu_agent_of(function->agent);
    struct cpu_object *o = cpu_object_lookup(a, function->object, CPU_FUNCTION_MAGIC);

    if (o == NULL || &o->base.function != function)
        return -XTQ_EINVAL;
    cpu_object_free(a, o);
    return 0;
}

/* ---- waking workers ------------------------------------------------------ */

static void cpu_wake(struct cpu_agent *a, int count)
{
    atomic_fetch_add_explicit(&a->work_seq, 1, memory_order_seq_cst);
    if (atomic_load_explicit(&a->sleepers, memory_order_seq_cst) != 0)
        xtq__futex_wake(&a->work_seq, count);
}

static void cpu_doorbell(xtq_queue_t *queue, uint64_t index)
{
    cpu_wake(cpu_agent_of(queue->agent), 1);
}

/* ---- taking packets ------------------------------------------------------ */

static inline _Atomic uint32_t *slot_word(xtq_aql_packet_t *slot)
{
    return (_Atomic uint32_t *)(void *)slot;
}

/* 1: dependencies hold; 0: not yet; -XTQ_EPACKET: a handle is not a signal. */
static int cpu_barrier_ready(const xtq_barrier_packet_t *b, unsigned type)
{
    bool any = false;

    for (unsigned i = 0; i < ARRAY_SIZE(b->dep_signal); i++) {
        xtq_signal_t *sig;
        int64_t v;

        if (b->dep_signal[i].handle == 0)
            continue;
        sig = xtq_signal_from_handle(b->dep_signal[i]);
        if (sig == NULL)
            return -XTQ_EPACKET;
        v = xtq_signal_load(sig);
        if (type == XTQ_PACKET_TYPE_BARRIER_AND && v != 0)
            return 0;
        if (type == XTQ_PACKET_TYPE_BARRIER_OR && v == 0)
            return 1;
        any = true;
    }
    /* AND: all held. OR: none held, unless there was nothing to wait on. */
    return type == XTQ_PACKET_TYPE_BARRIER_AND || !any ? 1 : 0;
}

static _Atomic uint64_t take_busy; /* test hook */

uint64_t xtq__cpu_take_busy(void)
{
    return atomic_load_explicit(&take_busy, memory_order_relaxed);
}

static int cpu_try_take(struct cpu_queue *cq, struct cpu_task *t, bool *more)
{
    xtq_queue_t *q = &cq->base;
    xtq_aql_packet_t *slot;
    uint64_t r;
    uint32_t word;
    unsigned type;
    int rc = TAKE_OK;

    if (pthread_mutex_trylock(&cq->take_lock) != 0) {
        atomic_fetch_add_explicit(&take_busy, 1, memory_order_relaxed);
        return TAKE_BUSY;
    }
    r = atomic_load_explicit(q->read_index, memory_order_relaxed);
    slot = &q->ring[r & q->mask];
    word = atomic_load_explicit(slot_word(slot), memory_order_acquire);
    type = word & 0xffu;
    if (type == XTQ_PACKET_TYPE_INVALID) {
        rc = TAKE_EMPTY;
        goto out;
    }
    /* The barrier bit, and any packet after a barrier-AND/OR (which holds
     * its queue until it has completed), wait for earlier packets. */
    if ((xtq_aql_header_barrier((uint16_t)word) || cq->after_barrier) &&
        (atomic_load_explicit(&cq->state, memory_order_acquire) & CQ_COUNT) != 0) {
        /* Announce the wait in the same word: either the last completion
         * comes after this and sees the flag (and wakes a worker), or we
         * see its count of 0 here. */
        if (atomic_fetch_or_explicit(&cq->state, CQ_BLOCKED, memory_order_acq_rel) & CQ_COUNT) {
            rc = TAKE_BLOCKED;
            goto out;
        }
    }
    t->status = 0;
    if (type == XTQ_PACKET_TYPE_BARRIER_AND || type == XTQ_PACKET_TYPE_BARRIER_OR) {
        int ready = cpu_barrier_ready(&slot->barrier, type);
        if (ready == 0) {
            rc = TAKE_DEPS;
            goto out;
        }
        if (ready < 0)
            t->status = ready;
    }
    atomic_fetch_and_explicit(&cq->state, ~CQ_BLOCKED, memory_order_relaxed);
    cq->after_barrier = type == XTQ_PACKET_TYPE_BARRIER_AND || type == XTQ_PACKET_TYPE_BARRIER_OR;

    memcpy(&t->pkt, slot, sizeof(t->pkt));
    memcpy(&t->pkt, &word, sizeof(word));
    t->cookie = q->cookies[r & q->mask];
    q->cookies[r & q->mask] = NULL;
    t->result = q->results[r & q->mask];
    q->results[r & q->mask] = (struct xtq__result_buf){NULL, 0, NULL, 0};
    t->retire = q->retire;
    t->q = cq;
    atomic_fetch_add_explicit(&cq->state, 1, memory_order_relaxed);
    /* Free the slot, then publish the new read index: a producer that sees
     * it finds the slot INVALID and its cookie cleared. */
    atomic_store_explicit(slot_word(slot), XTQ_PACKET_TYPE_INVALID, memory_order_release);
    atomic_store_explicit(q->read_index, r + 1, memory_order_release);
    *more = (atomic_load_explicit(slot_word(&q->ring[(r + 1) & q->mask]), memory_order_acquire) &
             0xffu) != XTQ_PACKET_TYPE_INVALID;
out:
    pthread_mutex_unlock(&cq->take_lock);
    if (rc == TAKE_OK)
        xtq__queue_notify_space(q);
    return rc;
}

/* ---- running packets ----------------------------------------------------- */

static int cpu_run_kernel(struct cpu_agent *a, const xtq_kernel_dispatch_packet_t *p)
{
    struct cpu_object *o = cpu_object_lookup(a, p->kernel_object, CPU_KERNEL_MAGIC);
    uint32_t grid[3] = {p->grid_size_x, p->grid_size_y, p->grid_size_z};
    uint32_t wg[3] = {p->workgroup_size_x, p->workgroup_size_y, p->workgroup_size_z};
    unsigned dims = (p->setup >> XTQ_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS) &
                    ((1u << XTQ_KERNEL_DISPATCH_PACKET_SETUP_WIDTH_DIMENSIONS) - 1);
    xtq_dispatch_t d;

    if (o == NULL) {
        XTQ_LOG_ONCE(CPU, WARN, "kernel_object 0x%llx is not a CPU kernel of this agent",
                     (unsigned long long)p->kernel_object);
        return -XTQ_EPACKET;
    }
    if (dims < 1 || dims > 3) {
        XTQ_LOG_ONCE(CPU, WARN, "kernel dispatch with %u dimensions", dims);
        return -XTQ_EPACKET;
    }
    memset(&d, 0, sizeof(d));
    d.packet = p;
    d.dimensions = dims;
    d.user_data = o->user_data;
    for (unsigned i = 0; i < 3; i++) {
        /* Unused dimensions count as 1 (HSA requires 1 there anyway). */
        if (i >= dims) {
            grid[i] = 1;
            wg[i] = 1;
        }
        if (grid[i] == 0 || wg[i] == 0) {
            XTQ_LOG_ONCE(CPU, WARN, "kernel dispatch with an empty grid or work-group");
            return -XTQ_EPACKET;
        }
        d.grid_size[i] = grid[i];
        d.workgroup_size[i] = wg[i];
        d.workgroup_count[i] = (uint32_t)(((uint64_t)grid[i] + wg[i] - 1) / wg[i]);
    }
    for (uint32_t z = 0; z < d.workgroup_count[2]; z++)
        for (uint32_t y = 0; y < d.workgroup_count[1]; y++)
            for (uint32_t x = 0; x < d.workgroup_count[0]; x++) {
                d.workgroup_id[0] = x;
                d.workgroup_id[1] = y;
                d.workgroup_id[2] = z;
                o->fn.kernel(&d, p->kernarg_address);
            }
    return 0;
}

static int cpu_run_function(struct cpu_agent *a, const xtq_agent_dispatch_packet_t *p)
{
    struct cpu_object *o = cpu_object_lookup(a, p->reserved2, CPU_FUNCTION_MAGIC);

    if (o == NULL) {
        XTQ_LOG_ONCE(CPU, WARN, "function object 0x%llx is not a CPU function of this agent",
                     (unsigned long long)p->reserved2);
        return -XTQ_EPACKET;
    }
    o->fn.function(p->arg, p->return_address, o->user_data);
    return 0;
}

static void cpu_run(struct cpu_agent *a, struct cpu_task *t)
{
    uint16_t header = t->pkt.header;
    unsigned type = xtq_aql_header_type(header);
    unsigned acq = (header >> XTQ_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE) & 3u;
    unsigned rel = (header >> XTQ_PACKET_HEADER_SCRELEASE_FENCE_SCOPE) & 3u;
    /* completion_signal sits at byte 56 in every packet type. */
    xtq_signal_handle_t h = t->pkt.kernel.completion_signal;
    struct cpu_queue *cq = t->q;
    xtq_signal_t *sig = NULL;
    int status = t->status; /* the agent's: the packet could not run */
    struct xtq__task_state task = {NULL, 0, NULL, 0, 0}, *outer;

    if (acq != XTQ_FENCE_SCOPE_NONE)
        cpu_fence(memory_order_acquire);
    if (status == 0) {
        /* The task's result buffer (a fetching put) and payload, from its
         * producer (a payload also from xtq_queue_submit_args, which
         * leaves no cookie). Taking the slot cleared them for the next. */
        if (t->cookie != NULL && t->result.buf != NULL) {
            task.result = t->result.buf;
            task.result_len = (size_t)t->result.len;
        }
        if (t->result.payload != NULL) {
            task.payload = t->result.payload;
            task.payload_len = (size_t)t->result.payload_len;
        }
        outer = xtq__task_enter(&task);
        switch (type) {
        case XTQ_PACKET_TYPE_KERNEL_DISPATCH:
            status = cpu_run_kernel(a, &t->pkt.kernel);
            break;
        case XTQ_PACKET_TYPE_AGENT_DISPATCH:
            status = cpu_run_function(a, &t->pkt.agent);
            break;
        case XTQ_PACKET_TYPE_BARRIER_AND:
        case XTQ_PACKET_TYPE_BARRIER_OR:
            break; /* dependencies held when it was taken */
        default:
            XTQ_LOG_ONCE(CPU, WARN, "packet type %u is not supported by the CPU agent", type);
            status = -XTQ_EPACKET;
            break;
        }
        xtq__task_leave(outer);
    }
    if (rel != XTQ_FENCE_SCOPE_NONE)
        cpu_fence(memory_order_release);

    if (status == 0 && h.handle != 0) {
        sig = xtq_signal_from_handle(h);
        if (sig != NULL)
            xtq_signal_add(sig, -1);
        else
            status = -XTQ_EPACKET;
    }
    if (status != 0)
        atomic_fetch_add_explicit(&a->bad_packets, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&a->done, 1, memory_order_relaxed);
    /* A task that ran and failed itself still completed (its signal was
     * decremented above); its status is what its initiator hears. */
    if (status == 0)
        status = task.status;

    if (t->cookie != NULL) {
        if (likely(t->retire != NULL))
            t->retire(t->cookie, status);
        else
            XTQ_LOG_ONCE(CPU, WARN, "packet carried a cookie but its queue has no retire function");
    }

    /* Last: the barrier bit of the next packet waits for this. */
    _Atomic uint32_t *state = &cq->state;
    uint32_t prev = atomic_fetch_sub_explicit(state, 1, memory_order_acq_rel);
    if ((prev & CQ_COUNT) == 1) {
        if (prev & CQ_BLOCKED)
            cpu_wake(a, 1);
        /* The queue may be freed by now: FUTEX_WAKE uses only the address
         * and a stray wake is harmless to any later user of it. */
        if (prev & CQ_DESTROYING)
            xtq__futex_wake(state, -1);
    }
    /* A barrier packet elsewhere may wait on the signal we just changed. */
    if (sig != NULL && atomic_load_explicit(&a->dep_nappers, memory_order_relaxed) != 0)
        cpu_wake(a, -1);
}

/*
 * A short task on the calling thread, when the queue lets a worker take it
 * next and nothing else: empty (write_index == read_index, so no producer
 * holds a reserved slot either), and no packet of it running (state count
 * 0, which also satisfies the task's barrier bit and ends any barrier-AND/
 * OR's hold). Taken as cpu_try_take takes a packet; false: enqueue it.
 *
 * XTQ_CPU_INLINE_TASKS=2 (run_beside) applies the workers' own rule
 * instead: packets of the queue may be running, as a second worker would
 * start this one beside them, unless its barrier bit is set or a
 * barrier-AND/OR holds the queue. Several receiving threads (engine
 * planes) then run their short tasks at once rather than hand all but
 * one to the workers; they wait for the take lock rather than give up.
 */
static bool cpu_run_here(struct cpu_queue *cq, const struct xtq__enqueue *d)
{
    xtq_queue_t *q = &cq->base;
    unsigned type = xtq_aql_header_type(d->packet->header);
    bool beside = cq->agent->run_beside;
    struct cpu_task t;

    if (type != XTQ_PACKET_TYPE_KERNEL_DISPATCH && type != XTQ_PACKET_TYPE_AGENT_DISPATCH)
        return false;
    if (beside)
        pthread_mutex_lock(&cq->take_lock);
    else if (pthread_mutex_trylock(&cq->take_lock) != 0)
        return false; /* a worker is taking from it */
    bool running = (atomic_load_explicit(&cq->state, memory_order_acquire) & CQ_COUNT) != 0;
    bool held = xtq_aql_header_barrier(d->packet->header) || cq->after_barrier;
    if (atomic_load_explicit(q->write_index, memory_order_acquire) !=
            atomic_load_explicit(q->read_index, memory_order_relaxed) ||
        (running && (!beside || held))) {
        pthread_mutex_unlock(&cq->take_lock);
        return false;
    }
    cq->after_barrier = false;
    atomic_fetch_add_explicit(&cq->state, 1, memory_order_relaxed);
    pthread_mutex_unlock(&cq->take_lock);

    memcpy(&t.pkt, d->packet, sizeof(t.pkt));
    t.cookie = d->cookie;
    t.retire = d->retire;
    t.result = (struct xtq__result_buf){d->result, d->result_len, d->payload, d->payload_len};
    t.q = cq;
    t.status = 0;
    XTQ_TRACE_POINT(XTQ_TRACE_ENQUEUED, d->trace_key);
    cpu_run(cq->agent, &t);
    return true;
}

void xtq__cpu_queue_hold_take(xtq_queue_t *queue, bool lock)
{
    struct cpu_queue *cq = container_of(queue, struct cpu_queue, base);
    if (lock)
        pthread_mutex_lock(&cq->take_lock);
    else
        pthread_mutex_unlock(&cq->take_lock);
}

/* The enqueue operation: a short task may run here (cpu_run_here), any
 * other goes into the ring for the workers. */
static int cpu_enqueue(xtq_queue_t *queue, const struct xtq__enqueue *d)
{
    struct cpu_queue *cq = container_of(queue, struct cpu_queue, base);

    if (d->run_here && cq->agent->run_here && cpu_run_here(cq, d))
        return 0;
    return xtq__queue_enqueue(queue, d);
}

/* Work may have come: the doorbell word moved since the scan, or stop. */
struct cpu_idle {
    struct cpu_agent *a;
    uint32_t seq; /* work_seq read before the scan */
};

static bool cpu_work_may_wait(void *arg)
{
    struct cpu_idle *idle = arg;
    return atomic_load_explicit(&idle->a->work_seq, memory_order_acquire) != idle->seq ||
           atomic_load_explicit(&idle->a->stop, memory_order_relaxed);
}

static void *cpu_worker(void *arg)
{
    struct cpu_agent *a = arg;
    int64_t nap = CPU_NAP_MIN_NS;
    unsigned start = 0;
    bool spun = false; /* spun since the last task: sleep next time */
    struct cpu_task t;

    while (!atomic_load_explicit(&a->stop, memory_order_acquire)) {
        /* Read before scanning: a doorbell after this read changes it and
         * the futex wait below returns at once. */
        uint32_t seq = atomic_load_explicit(&a->work_seq, memory_order_seq_cst);
        bool got = false, deps = false, more = false, busy = false;

        pthread_rwlock_rdlock(&a->qlock);
        for (unsigned i = 0, n = a->nqueues; i < n; i++) {
            unsigned k = (start + i) % n;
            int rc = cpu_try_take(a->queues[k], &t, &more);
            if (rc == TAKE_OK) {
                got = true;
                start = k + 1; /* round-robin fairness between queues */
                break;
            }
            if (rc == TAKE_DEPS)
                deps = true;
            if (rc == TAKE_BUSY)
                busy = true;
        }
        pthread_rwlock_unlock(&a->qlock);

        /* A queue another thread was looking at (a worker taking, or a
         * receiving thread checking whether a short task may run where it
         * arrived) may hold packets that rang their doorbell before this
         * scan: look again rather than sleep, or a full queue whose
         * producers wait for room would wait for ever. The lock is held
         * for a few loads. */
        if (!got && busy) {
            xtq__cpu_relax();
            continue;
        }

        if (got) {
            if (more)
                cpu_wake(a, 1);
            cpu_run(a, &t);
            nap = CPU_NAP_MIN_NS;
            spun = false;
            continue;
        }
        /* Idle: watch the doorbell word, then sleep on it. One spin per
         * idle spell: a worker whose spin saw a doorbell but found the
         * packet taken by another sleeps next time. While a barrier waits
         * on signals changed outside this agent, naps instead (its
         * completions wake dep_nappers, others do not). */
        struct cpu_idle idle = {a, seq};
        struct xtq__spin_wait w = {
            .ready = cpu_work_may_wait,
            .arg = &idle,
            .word = &a->work_seq,
            .waiters = &a->sleepers,
            .spin_ns = !deps && !spun ? a->spin_ns : 0,
            .nap_ns = XTQ_TIMEOUT_INFINITE,
        };
        if (deps) {
            atomic_fetch_add_explicit(&a->dep_nappers, 1, memory_order_seq_cst);
            (void)xtq__spin_wait(&w, xtq__now_ns() + (uint64_t)nap);
            atomic_fetch_sub_explicit(&a->dep_nappers, 1, memory_order_relaxed);
            nap = nap * 2 > CPU_NAP_MAX_NS ? CPU_NAP_MAX_NS : nap * 2;
            spun = false;
        } else {
            int rc = xtq__spin_wait(&w, UINT64_MAX);
            spun = rc == 0 && w.spin_ns != 0;
            nap = CPU_NAP_MIN_NS;
        }
    }
    return NULL;
}

/* ---- queues --------------------------------------------------------------- */

static int cpu_queue_create(xtq_agent_t *agent, uint32_t size, xtq_queue_t **queue)
{
    struct cpu_agent *a = cpu_agent_of(agent);
    struct cpu_queue *cq;
    void *ring = NULL;
    int rc;

    cq = aligned_alloc(XTQ_CACHELINE, XTQ_ALIGN_UP(sizeof(*cq), (size_t)XTQ_CACHELINE));
    if (cq == NULL)
        return -XTQ_ENOMEM;
    memset(cq, 0, sizeof(*cq));
    ring = aligned_alloc(XTQ_CACHELINE, (size_t)size * XTQ_AQL_PACKET_SIZE);
    if (ring == NULL) {
        rc = -XTQ_ENOMEM;
        goto err_free;
    }
    xtq__signal_init_at(&cq->doorbell, 0, 0);
    rc = xtq__queue_init(&cq->base, agent, size, ring, &cq->idx, &cq->doorbell);
    if (rc != 0)
        goto err_free;
    cq->agent = a;
    pthread_mutex_init(&cq->take_lock, NULL);

    pthread_rwlock_wrlock(&a->qlock);
    if (a->nqueues == a->qcap) {
        unsigned cap = a->qcap ? a->qcap * 2 : 8;
        struct cpu_queue **qs = realloc(a->queues, cap * sizeof(*qs));
        if (qs == NULL) {
            pthread_rwlock_unlock(&a->qlock);
            rc = -XTQ_ENOMEM;
            goto err_fini;
        }
        a->queues = qs;
        a->qcap = cap;
    }
    cq->base.id = a->next_qid++;
    a->queues[a->nqueues++] = cq;
    pthread_rwlock_unlock(&a->qlock);
    *queue = &cq->base;
    return 0;

err_fini:
    pthread_mutex_destroy(&cq->take_lock);
    xtq__queue_fini(&cq->base);
err_free:
    free(ring);
    free(cq);
    return rc;
}

/*
 * Retire the packets still in the ring with -XTQ_ECANCELED, as ROCr does
 * when its queue goes: the engine's cookies among them tell initiators
 * their tasks will not run (else their puts wait for ever). Completion
 * signals are left alone: a failed task does not signal (HSA). No worker
 * takes from the queue any more (it is out of the list), and the engine
 * only enqueues into registered queues, which cannot be destroyed.
 */
static void cpu_queue_cancel(struct cpu_queue *cq)
{
    xtq_queue_t *q = &cq->base;
    uint64_t r = atomic_load_explicit(q->read_index, memory_order_acquire);
    uint64_t w = atomic_load_explicit(q->write_index, memory_order_acquire);

    for (; r < w; r++) {
        xtq_aql_packet_t *slot = &q->ring[r & q->mask];
        uint32_t word = atomic_load_explicit(slot_word(slot), memory_order_acquire);
        if ((word & 0xffu) == XTQ_PACKET_TYPE_INVALID)
            continue; /* reserved, never published */
        void *cookie = q->cookies[r & q->mask];
        q->cookies[r & q->mask] = NULL;
        atomic_store_explicit(slot_word(slot), XTQ_PACKET_TYPE_INVALID, memory_order_relaxed);
        if (cookie != NULL && q->retire != NULL)
            q->retire(cookie, -XTQ_ECANCELED);
    }
    atomic_store_explicit(q->read_index, w, memory_order_release);
}

static void cpu_queue_free(struct cpu_queue *cq)
{
    cpu_queue_cancel(cq);
    pthread_mutex_destroy(&cq->take_lock);
    xtq__queue_fini(&cq->base);
    (void)xtq_signal_destroy(&cq->doorbell);
    free(cq->base.ring);
    free(cq);
}

static int cpu_queue_destroy(xtq_queue_t *queue)
{
    struct cpu_queue *cq = container_of(queue, struct cpu_queue, base);
    struct cpu_agent *a = cq->agent;
    uint32_t v;

    /* Once out of the list no worker takes from it; those already
     * running one of its packets are drained below. */
    pthread_rwlock_wrlock(&a->qlock);
    for (unsigned i = 0; i < a->nqueues; i++)
        if (a->queues[i] == cq) {
            a->queues[i] = a->queues[--a->nqueues];
            break;
        }
    pthread_rwlock_unlock(&a->qlock);

    atomic_fetch_or_explicit(&cq->state, CQ_DESTROYING, memory_order_acq_rel);
    while (((v = atomic_load_explicit(&cq->state, memory_order_acquire)) & CQ_COUNT) != 0)
        (void)xtq__futex_wait(&cq->state, v, 1000000); /* bounded for safety */
    cpu_queue_free(cq);
    return 0;
}

/* ---- agent ----------------------------------------------------------------- */

static int cpu_mem_register(xtq_agent_t *agent, void *addr, size_t len)
{
    return 0; /* host memory is already the CPU's */
}

static int cpu_mem_deregister(xtq_agent_t *agent, void *addr, size_t len)
{
    return 0;
}

static void cpu_close(xtq_agent_t *agent)
{
    struct cpu_agent *a = cpu_agent_of(agent);

    atomic_store_explicit(&a->stop, 1, memory_order_release);
    cpu_wake(a, -1);
    for (unsigned i = 0; i < a->nstarted; i++)
        pthread_join(a->workers[i], NULL);
    /* Queues the user did not destroy: nobody runs their packets now. */
    for (unsigned i = 0; i < a->nqueues; i++)
        cpu_queue_free(a->queues[i]);
    free(a->queues);
    free(a->workers);
    if (a->objs != NULL)
        munmap(a->objs, (size_t)CPU_OBJ_MAX * sizeof(struct cpu_object));
    pthread_rwlock_destroy(&a->qlock);
    pthread_mutex_destroy(&a->obj_lock);
    free(a);
}

static const struct xtq__agent_ops cpu_ops = {
    .name = "cpu",
    .queue_create = cpu_queue_create,
    .queue_destroy = cpu_queue_destroy,
    .enqueue = cpu_enqueue,
    .doorbell = cpu_doorbell,
    .kernel_destroy = cpu_kernel_destroy,
    .function_destroy = cpu_function_destroy,
    .mem_register = cpu_mem_register,
    .mem_deregister = cpu_mem_deregister,
    .close = cpu_close,
    /* Workers (or the receiving thread, for a short task) retire. */
    .retire_poll = xtq__agent_retire_poll_none,
    .retire_release = xtq__agent_retire_release_none,
};

static int cpu_agent_create(xtq_ctx_t *ctx, unsigned device_index, unsigned workers,
                            xtq_agent_t **agent)
{
    struct cpu_agent *a;
    int rc;

    if (workers == 0) {
        int64_t w = xtq__param_int(XTQ__PARAM_XTQ_CPU_WORKERS);
        workers = w < 1 ? 1 : w > CPU_MAX_WORKERS ? CPU_MAX_WORKERS : (unsigned)w;
    }
    if (workers > CPU_MAX_WORKERS)
        return -XTQ_EINVAL;
    a = calloc(1, sizeof(*a));
    if (a == NULL)
        return -XTQ_ENOMEM;
    a->base.ops = &cpu_ops;
    a->base.kind = XTQ_AGENT_CPU;
    a->base.ctx = ctx;
    a->base.info.kind = XTQ_AGENT_CPU;
    snprintf(a->base.info.name, sizeof(a->base.info.name), "cpu%u", device_index);
    a->base.info.device_index = device_index;
    a->base.info.workers = workers;
    a->base.info.max_queue_size = CPU_MAX_QUEUE_SIZE;
    a->nworkers = workers;
    a->spin_ns = xtq__spin_ns(XTQ__PARAM_XTQ_AGENT_SPIN_US, ctx ? ctx->local_ranks : 1, 50, 0);
    int64_t inl = xtq__param_int(XTQ__PARAM_XTQ_CPU_INLINE_TASKS);
    if (inl < 0) /* auto: several planes' threads receive into one queue */
        inl = xtq__param_int(XTQ__PARAM_XTQ_PROGRESS_THREADS) > 1 ? 2 : 1;
    a->run_here = inl != 0;
    a->run_beside = inl >= 2;
    pthread_rwlock_init(&a->qlock, NULL);
    pthread_mutex_init(&a->obj_lock, NULL);

    /* Reserved, not committed: pages appear as objects are created. */
    a->objs = mmap(NULL, (size_t)CPU_OBJ_MAX * sizeof(struct cpu_object), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (a->objs == MAP_FAILED) {
        a->objs = NULL;
        rc = -XTQ_ENOMEM;
        goto err;
    }
    a->workers = calloc(workers, sizeof(*a->workers));
    if (a->workers == NULL) {
        rc = -XTQ_ENOMEM;
        goto err;
    }
    for (; a->nstarted < workers; a->nstarted++) {
        char name[16];
        int err = pthread_create(&a->workers[a->nstarted], NULL, cpu_worker, a);
        if (err != 0) {
            xtq_err(CPU, "cannot start CPU worker %u: %s", a->nstarted, strerror(err));
            rc = err == EAGAIN ? -XTQ_EAGAIN : -XTQ_ENOMEM;
            goto err;
        }
        snprintf(name, sizeof(name), "xtq-cpu%u.%u", device_index % 100, a->nstarted % 100);
        pthread_setname_np(a->workers[a->nstarted], name);
    }
    xtq_info(CPU, "CPU agent %s: %u workers", a->base.info.name, workers);
    *agent = &a->base;
    return 0;

err:
    cpu_close(&a->base); /* joins the workers started so far */
    return rc;
}

int xtq__cpu_agent_open_standalone(unsigned workers, xtq_agent_t **agent)
{
    if (agent == NULL)
        return -XTQ_EINVAL;
    return cpu_agent_create(NULL, 0, workers, agent);
}

uint64_t xtq__cpu_agent_bad_packets(const xtq_agent_t *agent)
{
    return atomic_load_explicit(&cpu_agent_of((xtq_agent_t *)agent)->bad_packets,
                                memory_order_relaxed);
}

uint64_t xtq__cpu_agent_packets_done(const xtq_agent_t *agent)
{
    return atomic_load_explicit(&cpu_agent_of((xtq_agent_t *)agent)->done, memory_order_relaxed);
}

static int cpu_probe(char *reason, size_t reason_len, unsigned *device_count)
{
    *device_count = 1;
    return 0;
}

static int cpu_open(xtq_ctx_t *ctx, unsigned device_index, xtq_agent_t **agent)
{
    return cpu_agent_create(ctx, device_index, 0, agent);
}

const struct xtq__agent_provider xtq__cpu_agent_provider = {
    .kind = XTQ_AGENT_CPU,
    .name = "cpu",
    .probe = cpu_probe,
    .open = cpu_open,
};
