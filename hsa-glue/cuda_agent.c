/*
 * CUDA agent, host side: probe, open, queues, kernel objects, signals,
 * memory registration, task modules, the retire thread and shutdown. The
 * packet processor itself runs on the GPU (<xtq/cuda_processor.cuh>); no
 * host thread sits between a doorbell and a task starting.
 *
 * The processor is compiled into the module that holds the tasks (device
 * function pointers are only callable inside their module). libxtq's own
 * instance (cuda_builtin.cu) starts with the first queue and serves
 * barrier packets; xtq_cuda_attach() stops it between packets and starts
 * the task module's instead, on the same state. Until a queue exists no
 * processor runs, so a process that only sends takes no SMs.
 *
 * The CUDA runtime is linked statically (cudart_static), which loads
 * libcuda.so.1 itself: a machine without the driver marks the agent
 * unavailable with the reason instead of failing to load libxtq.
 *
 * With XTQ_CUDA_IDLE_EXIT_US set, the processor exits after that long
 * without a packet, so the device can idle (calls that wait for an idle
 * device return), and the retire thread launches it again for the next
 * packet: cuda_idle.h has the handshake and its ordering argument.
 */
#include "internal.h"

#ifdef XTQ_HAVE_CUDA_AGENT

#include <dlfcn.h>
#include <errno.h>
#include <sys/prctl.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include <xtq/cuda_abi.h>

#include "cuda_builtin.h"
#include "cuda_idle.h"
#include "queue_int.h"

#define CUDA_SIGNALS 4096
#define CUDA_MAX_QUEUE_SIZE (1u << 20)
/* While packets are pending, the retire thread polls for RETIRE_SPIN_NS
 * after the last completion, then naps, at most RETIRE_NAP_MAX_NS at a
 * time. Idle, it polls for XTQ_AGENT_SPIN_US (resolved: idle_spin_ns)
 * before it sleeps until a doorbell: a packet that follows closely then
 * finds it awake (a futex wake-up costs more than a small GPU task). */
#define RETIRE_SPIN_NS 20000
#define RETIRE_POLL_PENDING_NS 2000000
#define RETIRE_NAP_MAX_NS 100000
/* Bound on the idle sleep: a producer that never calls the doorbell op. */
#define RETIRE_IDLE_NS 100000000
/* XTQ_AGENT_RETIRE=engine: how long an engine thread's last poll with
 * packets pending keeps the retire thread off the completion words. The
 * progress thread releases its claim before it sleeps; this bounds the
 * wait after a thread that took turns and left (a waiting application). */
#define RETIRE_CLAIM_NS 50000
/* Module tags: libxtq's own processor, then one per module attached. */
#define CUDA_TAG_BUILTIN 1u
#define CUDA_BUILTIN_NAME "libxtq (no task module)"
#define CUDA_MAX_MODULES 64
/* How long a starting processor may take to report in. */
#define CUDA_START_TIMEOUT_NS 10000000000ull

/*
 * An agent's CUDA calls run with its device current, and the calling
 * thread's own device is put back afterwards: an application thread that
 * chose its GPU keeps it (with two GPUs, opening the second agent left
 * every rank on device 1, and rank 0's kernels read device 1's memory).
 * The *_on_device functions run only inside such a scope: their wrappers
 * make the device current.
 */
static int dev_enter(int device)
{
    int prev = -1;
    if (cudaGetDevice(&prev) != cudaSuccess) {
        cudaGetLastError();
        prev = -1;
    }
    if (prev != device)
        cudaSetDevice(device);
    return prev;
}

static void dev_leave(int device, int prev)
{
    if (prev >= 0 && prev != device)
        cudaSetDevice(prev);
}

struct cuda_kernel {
    struct xtq_kernel base;
    uint32_t slot;
};

struct cuda_queue {
    struct xtq_queue base;
    uint32_t slot;
    void *mem;
    _Atomic uint64_t *done; /* completion words (cuda_abi.h) */
    _Atomic uint64_t *inl;  /* inline areas: inl_lines lines (two words each) per slot */
    uint32_t inl_lines;
    uint32_t inl_data; /* data bytes an inline copy may hold */
    uint32_t inline_max; /* payload bytes inlined at most */
    bool notify;         /* the processor stores initiators' completion words (XTQ_CUDA_NOTIFY) */
    uint64_t retired; /* retire thread only */
    struct cuda_queue *next_dead;
};

struct cuda_agent {
    struct xtq_agent base;
    int device;
    unsigned blocks;
    bool host_atomics; /* the GPU decrements completion signals itself */
    uint32_t caps;     /* XTQ__CUDA_CAP_* of the running processor */
    uint32_t grid_min;
    uint32_t inline_max;
    bool notify; /* XTQ_CUDA_NOTIFY */
    cudaStream_t run;
    cudaStream_t ctl_stream;
    struct xtq__cuda_dev *dev; /* device memory */
    struct xtq__cuda_ctl *ctl; /* mapped host */
    struct xtq__cuda_kdesc *kdesc;
    void *stage; /* device memory: payloads copied before their task */
    /* Host memory registered through mem_register, unregistered at close
     * if its owner did not (the engine's receive regions outlive agents). */
    void **mapped;
    uint32_t nmapped, mapped_cap;
    struct xtq_signal *sigs; /* mapped host pool */
    uint32_t sig_free[CUDA_SIGNALS];
    uint32_t nsig_free;
    bool kernel_used[XTQ__CUDA_MAX_KERNELS];
    struct cuda_queue *queues[XTQ__CUDA_MAX_QUEUES];
    uint32_t nq;
    uint32_t version;
    struct cuda_queue *dead; /* destroyed queues: freed at close */
    pthread_mutex_t lock;
    pthread_t retire_thread;
    bool retire_started;
    bool running;
    /* The processor that runs (or will): libxtq's own, or an attached
     * task module's (attach_refs > 0). Under lock. */
    xtq_cuda_launch_fn launch;
    uint32_t tag;
    unsigned attach_refs;
    /* Tags stay with their module across detach and attach, so its kernel
     * objects work again when it comes back. */
    xtq_cuda_launch_fn tagged[CUDA_MAX_MODULES];
    uint32_t ntagged;
    char module_name[48];
    _Atomic uint32_t bell;
    _Atomic uint32_t sleeping;
    /* Idle exit (cuda_idle.h): 0 never; `wake` is a doorbell's request
     * for a relaunch; relaunches counted under the lock. */
    uint32_t idle_exit_us;
    _Atomic uint32_t wake;
    uint64_t relaunches;
    uint64_t idle_spin_ns;
    _Atomic int stop;
    /* XTQ_AGENT_RETIRE=engine (claim_ns != 0): when an engine thread last
     * polled the completion words with packets pending (0: released); the
     * retire thread, meanwhile, sleeps with `deferring` set, which the
     * doorbell does not wake. A line of its own: the poller stores it. */
    uint64_t claim_ns;
    _Atomic uint32_t deferring;
    _Atomic uint32_t any_queue; /* a queue was ever made: worth polling */
    uint8_t claimed_pad0[64]; /* padded, the agent being calloc'ed */
    _Atomic uint64_t claimed_at;
    uint8_t claimed_pad1[64];
    /* Packets retired by engine turns and by the retire thread (under lock). */
    uint64_t retired_polled, retired_thread;
};

static struct cuda_agent *to_cuda(xtq_agent_t *agent)
{
    return container_of(agent, struct cuda_agent, base);
}

static int cuda_rc(cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return 0;
    xtq_err(CUDA, "%s: %s (%s)", what, cudaGetErrorName(e), cudaGetErrorString(e));
    return e == cudaErrorMemoryAllocation ? -XTQ_ENOMEM : -XTQ_EIO;
}

/* Control-path copy into device memory while the processor runs: a
 * non-blocking stream, so it never waits for the persistent kernel. */
static int cuda_put(struct cuda_agent *a, void *dst, const void *src, size_t len)
{
    cudaError_t e = cudaMemcpyAsync(dst, src, len, cudaMemcpyHostToDevice, a->ctl_stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(a->ctl_stream);
    return cuda_rc(e, "cudaMemcpyAsync (control)");
}

/* The GPU's address of mapped pinned host memory. */
static int cuda_devptr(void *host, uint64_t *dev)
{
    void *d = NULL;
    int rc = cuda_rc(cudaHostGetDevicePointer(&d, host, 0), "cudaHostGetDevicePointer");
    *dev = (uint64_t)(uintptr_t)d;
    return rc;
}

/* Packets carry host addresses (signals, kernel arguments, payloads) that
 * tasks and the processor dereference as they are: pinned memory must be
 * mapped at its host address (UVA on x86-64). Checked on one allocation. */
static int cuda_check_identity(void *host)
{
    struct cudaPointerAttributes at;
    int rc = cuda_rc(cudaPointerGetAttributes(&at, host), "cudaPointerGetAttributes");
    if (rc)
        return rc;
    if (at.type != cudaMemoryTypeHost || at.devicePointer != host || at.hostPointer != host) {
        xtq_err(CUDA, "pinned host memory %p is mapped at %p on the GPU (type %d): packets carry "
                      "host addresses, which needs the two to be equal",
                host, at.devicePointer, (int)at.type);
        return -XTQ_ENOAGENT;
    }
    return 0;
}

static bool processor_alive(struct cuda_agent *a)
{
    return a->running && cudaStreamQuery(a->run) == cudaErrorNotReady;
}

static void nap_ns(long ns)
{
    struct timespec ts = {0, ns};
    nanosleep(&ts, NULL);
}

/* Bump the queue-table version: the processor reloads its copy of the
 * table and settings at its next poll. `wait`: until it has, after which
 * it no longer touches a queue removed before the bump. (A new queue
 * needs no wait: its packets wait for the reload.) */
static int cuda_publish_table(struct cuda_agent *a, bool wait)
{
    uint32_t v = ++a->version;
    int rc = cuda_put(a, (void *)&a->dev->version, &v, sizeof(v));
    if (rc || !a->running || !wait)
        return rc; /* a processor that starts later reads it first */
    for (long ns = 1000; a->ctl->version_seen != v; ns = ns < 1000000 ? ns * 2 : ns) {
        if (!processor_alive(a)) {
            /* Exited idle: the next launch reads the table first. */
            if (a->idle_exit_us && a->ctl->state == XTQ__CUDA_PROC_STOPPED)
                return 0;
            xtq_err(CUDA, "packet processor is not running");
            return -XTQ_EIO;
        }
        nap_ns(ns);
    }
    return 0;
}

/* Stop the running processor between packets: it exits at its next
 * poll (a dispatch in flight finishes first). Caller holds the lock. */
static int processor_stop(struct cuda_agent *a)
{
    uint32_t one = 1;
    if (!a->running)
        return 0;
    int rc = cuda_put(a, (void *)&a->dev->stop, &one, sizeof(one));
    if (rc == 0)
        rc = cuda_rc(cudaStreamSynchronize(a->run), "packet processor exit");
    a->running = false;
    return rc;
}

/* Start `launch`'s processor on the agent's state and wait until it has
 * reported in (or refused a state of another ABI). Caller holds the lock. */
static int processor_start(struct cuda_agent *a, xtq_cuda_launch_fn launch, uint32_t tag,
                           const char *name)
{
    uint32_t zero = 0;
    int rc = cuda_put(a, (void *)&a->dev->stop, &zero, sizeof(zero));
    if (rc)
        return rc;
    a->ctl->running = 0;
    a->ctl->error = 0;
    /* Before the launch: only the processor writes it afterwards. */
    __atomic_store_n(&a->ctl->state, XTQ__CUDA_PROC_RUNNING, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    rc = cuda_rc((cudaError_t)launch(a->dev, tag, a->blocks, a->run), "packet processor launch");
    if (rc) {
        __atomic_store_n(&a->ctl->state, XTQ__CUDA_PROC_STOPPED, __ATOMIC_RELAXED);
        return rc;
    }
    uint64_t deadline = xtq__now_ns() + CUDA_START_TIMEOUT_NS;
    for (long ns = 1000; a->ctl->running != tag; ns = ns < 1000000 ? ns * 2 : ns) {
        if (a->ctl->error == -XTQ_EVERSION) {
            xtq_err(CUDA, "task module %s was built against libxtq CUDA ABI %u, this is %u", name,
                    a->ctl->abi_seen, XTQ_CUDA_ABI_VERSION);
            (void)cudaStreamSynchronize(a->run);
            return -XTQ_EVERSION;
        }
        if (cudaStreamQuery(a->run) != cudaErrorNotReady || xtq__now_ns() > deadline) {
            if (a->ctl->error == -XTQ_EVERSION)
                continue; /* reported, then exited: the branch above says so */
            xtq_err(CUDA, "packet processor of %s did not start: %s", name,
                    cudaGetErrorString(cudaStreamQuery(a->run)));
            return -XTQ_EIO;
        }
        nap_ns(ns);
    }
    a->running = true;
    a->launch = launch;
    a->tag = tag;
    a->caps = a->ctl->caps;
    if (name != a->module_name) /* a restart passes a->module_name itself */
        snprintf(a->module_name, sizeof(a->module_name), "%s", name);
    xtq_dbg(CUDA, "packet processor of %s running (tag %u)", name, tag);
    if (a->grid_min && tag != CUDA_TAG_BUILTIN && !(a->caps & XTQ__CUDA_CAP_GRID))
        xtq_info(CUDA, "task module %s was built without -rdc: dispatches of %u work-groups "
                       "and more run in the processor's %u blocks, not on a grid of their own",
                 name, a->grid_min, a->blocks);
    return cuda_publish_table(a, true);
}

/* Make `launch` the agent's processor: now if one runs (stopped between
 * packets, started on the same state), else with the first queue. Caller
 * holds the lock. */
static int processor_switch(struct cuda_agent *a, xtq_cuda_launch_fn launch, uint32_t tag,
                            const char *name)
{
    bool has_queues = false;
    for (uint32_t i = 0; i < a->nq && !has_queues; i++)
        has_queues = a->queues[i] != NULL;
    int rc = processor_stop(a);
    if (rc)
        return rc;
    if (has_queues)
        return processor_start(a, launch, tag, name);
    a->launch = launch;
    a->tag = tag;
    snprintf(a->module_name, sizeof(a->module_name), "%s", name);
    return 0;
}

/* A processor that exited idle and has gone: nothing to stop, and the
 * next packet relaunches it (it stays `running` for the host: see
 * xtq__cuda_wake_action). Caller holds the lock. */
static bool processor_gone_idle(struct cuda_agent *a)
{
    return a->running && a->idle_exit_us && a->ctl->state == XTQ__CUDA_PROC_STOPPED &&
           cudaStreamQuery(a->run) == cudaSuccess;
}

/*
 * Relaunch a processor that exited idle (cuda_idle.h), once it has gone.
 * Retire thread only: it takes the lock, and no enqueuing thread (which
 * may hold engine locks) ever launches. A processor still deciding is
 * waited for here: its last look is a few PCIe reads.
 */
static void processor_wake(struct cuda_agent *a)
{
    pthread_mutex_lock(&a->lock);
    for (long ns = 1000;; ns = ns < 100000 ? ns * 2 : ns) {
        const bool busy = a->running && cudaStreamQuery(a->run) == cudaErrorNotReady;
        enum xtq__cuda_wake w = xtq__cuda_wake_action(a->running, a->ctl->state, busy);
        if (w == XTQ__CUDA_WAKE_WAIT) {
            nap_ns(ns);
            continue;
        }
        if (w == XTQ__CUDA_WAKE_RELAUNCH) {
            cudaSetDevice(a->device);
            int rc = cuda_rc(cudaStreamSynchronize(a->run), "packet processor (idle exit)");
            a->running = false;
            if (rc == 0)
                rc = processor_start(a, a->launch, a->tag, a->module_name);
            if (rc)
                xtq_err(CUDA, "cannot relaunch the packet processor of %s after its idle exit: %s",
                        a->module_name, xtq_errname(rc));
            else
                a->relaunches++;
        }
        /* DEAD: the pending-packet check below logs it. */
        break;
    }
    pthread_mutex_unlock(&a->lock);
}

/* ---- retire thread ----------------------------------------------------- */

/*
 * Consume one queue's completion words. The host, not the GPU, frees
 * slots: the GPU writes one word per packet, this thread reads the cookie
 * and the completion signal from the ring slot (still the producer's),
 * clears the slot and publishes read_index (the consumer half of
 * queue_int.h's protocol), then decrements the signal and calls retire.
 * Caller holds the lock.
 */
static uint32_t cuda_drain_queue(struct cuda_agent *a, struct cuda_queue *q)
{
    uint64_t r = q->retired, start = r;
    for (;;) {
        uint64_t w = atomic_load_explicit(&q->done[r & q->base.mask], memory_order_acquire);
        if ((uint32_t)w != (uint32_t)(r + 1))
            break;
        xtq_aql_packet_t *slot = &q->base.ring[r & q->base.mask];
        /* The GPU can finish a packet from its inline copy before the
         * producer's header store reaches this core: the header (and
         * with it the cookie) is then not ours to read yet. */
        if (xtq_aql_header_type(__atomic_load_n(&slot->header, __ATOMIC_ACQUIRE)) ==
            XTQ_PACKET_TYPE_INVALID)
            break;
        /* Stage profile: the host saw the GPU's completion (matched
         * to its task by time: one in flight in the benchmarks). */
        XTQ_TRACE_POINT(XTQ_TRACE_TASK_END, 0);
        int status = (int32_t)(w >> 32);
        void *cookie = q->base.cookies[r & q->base.mask];
        xtq_signal_t *sig = (xtq_signal_t *)(uintptr_t)slot->kernel.completion_signal.handle;
        q->base.cookies[r & q->base.mask] = NULL;
        __atomic_store_n(&slot->header, (uint16_t)XTQ_PACKET_TYPE_INVALID, __ATOMIC_RELEASE);
        r++;
        atomic_store_explicit(q->base.read_index, r, memory_order_release);
        /* The GPU could not decrement it without native host atomics. */
        if (sig != NULL && !a->host_atomics)
            xtq_signal_add(sig, -1);
        if (cookie != NULL && q->base.retire != NULL)
            q->base.retire(cookie, status);
    }
    if (r == start)
        return 0;
    q->retired = r;
    xtq__queue_notify_space(&q->base);
    return (uint32_t)(r - start);
}

/* Packets enqueued on `q` and not yet retired. Caller holds the lock. */
static bool queue_pending(struct cuda_queue *q)
{
    return q->retired < atomic_load_explicit(q->base.write_index, memory_order_acquire);
}

/* Consume completion words; returns whether packets are still pending. */
static bool cuda_drain(struct cuda_agent *a, bool *progressed)
{
    bool pending = false;
    pthread_mutex_lock(&a->lock);
    for (uint32_t i = 0; i < a->nq; i++) {
        struct cuda_queue *q = a->queues[i];
        if (q == NULL)
            continue;
        uint32_t n = cuda_drain_queue(a, q);
        if (n != 0) {
            a->retired_thread += n;
            *progressed = true;
        }
        if (queue_pending(q))
            pending = true;
    }
    pthread_mutex_unlock(&a->lock);
    return pending;
}

/*
 * A queue the processor no longer serves (destroyed, or the agent
 * closing): retire what it completed, then every packet it never took
 * with -XTQ_ECANCELED, as ROCr does, so the engine's initiators hear of
 * them. Completion signals are left alone (a failed task does not signal).
 * The processor takes packets in order and finishes one before it looks
 * at the queue table again, so every packet it took has its completion
 * word, which the drain turns into read_index. Caller holds the lock.
 */
static void cuda_queue_cancel(struct cuda_agent *a, struct cuda_queue *q)
{
    xtq_queue_t *b = &q->base;
    (void)cuda_drain_queue(a, q);
    uint64_t r = atomic_load_explicit(b->read_index, memory_order_acquire);
    uint64_t w = atomic_load_explicit(b->write_index, memory_order_acquire);
    for (; r < w; r++) {
        _Atomic uint32_t *hw = (_Atomic uint32_t *)(void *)&b->ring[r & b->mask];
        if ((atomic_load_explicit(hw, memory_order_acquire) & 0xffu) == XTQ_PACKET_TYPE_INVALID)
            continue; /* reserved, never published */
        void *cookie = b->cookies[r & b->mask];
        b->cookies[r & b->mask] = NULL;
        atomic_store_explicit(hw, XTQ_PACKET_TYPE_INVALID, memory_order_relaxed);
        if (cookie != NULL && b->retire != NULL)
            b->retire(cookie, -XTQ_ECANCELED);
    }
}

/* ---- retiring from engine turns (XTQ_AGENT_RETIRE=engine) --------------- */

/* Whether any queue has packets not yet retired. */
static bool cuda_pending(struct cuda_agent *a)
{
    bool pending = false;
    pthread_mutex_lock(&a->lock);
    for (uint32_t i = 0; i < a->nq && !pending; i++)
        pending = a->queues[i] != NULL && queue_pending(a->queues[i]);
    pthread_mutex_unlock(&a->lock);
    return pending;
}

/* An engine thread has polled with packets pending within claim_ns. */
static bool engine_claims(struct cuda_agent *a, uint64_t now, uint64_t *left)
{
    uint64_t t = atomic_load_explicit(&a->claimed_at, memory_order_acquire);
    if (a->claim_ns == 0 || t == 0 || now - t >= a->claim_ns)
        return false;
    if (left != NULL)
        *left = a->claim_ns - (now - t);
    return true;
}

/* Stored a few times per claim, not at every poll. */
static void engine_claim(struct cuda_agent *a)
{
    uint64_t now = xtq__now_ns();
    if (now - atomic_load_explicit(&a->claimed_at, memory_order_relaxed) > a->claim_ns / 8)
        atomic_store_explicit(&a->claimed_at, now, memory_order_release);
}

/*
 * The engine's turn (ops->retire_poll): the completion words, read on the
 * thread that received the tasks, so that their retire (the engine's task
 * list, registry references, ack table and endpoint) stays on its core.
 * The retire thread holds the lock only when no engine thread claims the
 * retiring; if it does now, this turn leaves it to it.
 */
static int cuda_retire_poll(xtq_agent_t *agent)
{
    struct cuda_agent *a = to_cuda(agent);
    uint32_t n = 0;
    bool pending = false;
    /* An agent without queues (an initiator's) costs a turn one load. */
    if (a->claim_ns == 0 || !atomic_load_explicit(&a->any_queue, memory_order_relaxed) ||
        pthread_mutex_trylock(&a->lock) != 0)
        return 0;
    for (uint32_t i = 0; i < a->nq; i++) {
        struct cuda_queue *q = a->queues[i];
        if (q == NULL)
            continue;
        n += cuda_drain_queue(a, q);
        if (queue_pending(q))
            pending = true;
    }
    a->retired_polled += n;
    pthread_mutex_unlock(&a->lock);
    if (pending)
        engine_claim(a);
    return (int)n;
}

/* The polling thread is about to sleep: the retire thread takes over now. */
static void cuda_retire_release(xtq_agent_t *agent)
{
    struct cuda_agent *a = to_cuda(agent);
    if (atomic_load_explicit(&a->claimed_at, memory_order_relaxed) == 0)
        return;
    atomic_store_explicit(&a->claimed_at, 0, memory_order_seq_cst);
    atomic_fetch_add_explicit(&a->bell, 1, memory_order_seq_cst);
    if (atomic_load_explicit(&a->sleeping, memory_order_seq_cst))
        xtq__futex_wake(&a->bell, 1);
}

/* Off the critical path: the GPU cannot call q->retire, so this thread
 * turns completion entries into retire calls. It polls only while packets
 * are pending (short naps), and otherwise sleeps until a doorbell. */
static void *cuda_retire_main(void *arg)
{
    struct cuda_agent *a = arg;
    uint64_t last = xtq__now_ns();
    long nap = 1000;
    uint32_t deferred = 0;

    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
    while (!atomic_load_explicit(&a->stop, memory_order_acquire)) {
        uint32_t bell = atomic_load_explicit(&a->bell, memory_order_acquire);
        /* A doorbell found the processor exiting or gone (idle exit). */
        if (a->idle_exit_us && atomic_exchange_explicit(&a->wake, 0, memory_order_acq_rel))
            processor_wake(a);
        uint64_t left;
        if (engine_claims(a, xtq__now_ns(), &left)) {
            /* An engine thread retires: sleep until its claim runs out or
             * it releases it (doorbells leave a deferring thread asleep).
             * Now and then, what the pending path below checks: a
             * processor that exited idle with packets queued, or died. */
            if ((++deferred & 255u) == 0 && a->running && cuda_pending(a)) {
                if (a->idle_exit_us && a->ctl->state != XTQ__CUDA_PROC_RUNNING)
                    processor_wake(a);
                else if (!processor_alive(a))
                    XTQ_LOG_ONCE(CUDA, ERROR, "packet processor stopped with packets pending: %s",
                                 cudaGetErrorString(cudaStreamQuery(a->run)));
            }
            atomic_store_explicit(&a->deferring, 1, memory_order_relaxed);
            atomic_store_explicit(&a->sleeping, 1, memory_order_seq_cst);
            if (atomic_load_explicit(&a->bell, memory_order_seq_cst) == bell &&
                !atomic_load_explicit(&a->stop, memory_order_seq_cst) &&
                engine_claims(a, xtq__now_ns(), &left))
                (void)xtq__futex_wait(&a->bell, bell, (int64_t)left);
            atomic_store_explicit(&a->sleeping, 0, memory_order_relaxed);
            atomic_store_explicit(&a->deferring, 0, memory_order_relaxed);
            last = xtq__now_ns();
            nap = 1000;
            continue;
        }
        bool progressed = false;
        bool pending = cuda_drain(a, &progressed);
        uint64_t now = xtq__now_ns();
        if (progressed) {
            last = now;
            nap = 1000;
            continue;
        }
        if (pending) {
            /* Where the spin policy allows it, poll through a long task too:
             * a nap that outlasts it delays the completion by the nap. */
            if (now - last < (a->idle_spin_ns ? RETIRE_POLL_PENDING_NS : RETIRE_SPIN_NS)) {
                xtq__cpu_relax();
                continue;
            }
            /* Packets of a producer that rang no doorbell, after an idle
             * exit: the same relaunch (then the nap, as for any wait). */
            if (a->idle_exit_us && a->running && a->ctl->state != XTQ__CUDA_PROC_RUNNING)
                processor_wake(a);
            /* Not running at all is a module switch in progress. */
            if (nap >= RETIRE_NAP_MAX_NS && a->running && !processor_alive(a)) {
                XTQ_LOG_ONCE(CUDA, ERROR, "packet processor stopped with packets pending: %s",
                             cudaGetErrorString(cudaStreamQuery(a->run)));
                nap_ns(RETIRE_NAP_MAX_NS * 10);
                continue;
            }
            nap_ns(nap);
            nap = nap * 2 > RETIRE_NAP_MAX_NS ? RETIRE_NAP_MAX_NS : nap * 2;
            continue;
        }
        if (now - last < a->idle_spin_ns) {
            if (atomic_load_explicit(&a->bell, memory_order_acquire) == bell)
                xtq__cpu_relax();
            continue;
        }
        atomic_store_explicit(&a->sleeping, 1, memory_order_seq_cst);
        if (atomic_load_explicit(&a->bell, memory_order_seq_cst) == bell &&
            !atomic_load_explicit(&a->stop, memory_order_seq_cst))
            (void)xtq__futex_wait(&a->bell, bell, RETIRE_IDLE_NS);
        atomic_store_explicit(&a->sleeping, 0, memory_order_relaxed);
        last = xtq__now_ns();
        nap = 1000;
    }
    return NULL;
}

/* ---- operations -------------------------------------------------------- */

static void cuda_doorbell(xtq_queue_t *queue, uint64_t index)
{
    /* The GPU polls the ring itself; this only wakes the retire thread,
     * which relaunches a processor that exited idle (never this thread:
     * it may hold engine locks). The packet is stored: fence, then the
     * state (cuda_idle.h). One fence and one load of a line the GPU
     * writes only when it exits, and only with the idle exit on. */
    struct cuda_agent *a = to_cuda(queue->agent);
    bool relaunch = false;
    if (a->idle_exit_us && xtq__cuda_idle_after_publish(&a->ctl->state)) {
        atomic_store_explicit(&a->wake, 1, memory_order_release);
        relaunch = true;
    }
    atomic_fetch_add_explicit(&a->bell, 1, memory_order_seq_cst);
    /* A thread deferring to an engine thread that polls (the producer, in
     * its turn) is left asleep: that thread retires the packet. */
    if (atomic_load_explicit(&a->sleeping, memory_order_seq_cst) &&
        (relaunch || !atomic_load_explicit(&a->deferring, memory_order_relaxed)))
        xtq__futex_wake(&a->bell, 1);
}

/*
 * Fill slot `index`'s inline area (cuda_abi.h): the packet, the kernel
 * arguments and, when it fits, the payload, each 4 bytes in an 8-byte
 * word with the slot's flag, so the processor's poll is its only read of
 * the task. Arguments too long for the area stay where they landed: the
 * header says how long they are, so the processor fetches them while it
 * checks the kernel. Line 0 (the header, with the line count) goes last,
 * with release semantics; the processor checks every flag anyway.
 */
static void inline_fill(struct cuda_queue *q, uint64_t index, const struct xtq__enqueue *d)
{
    uint8_t data[XTQ__CUDA_INLINE_DATA_MAX] __attribute__((aligned(16)));
    struct xtq__cuda_inline h;
    size_t len = XTQ__CUDA_INLINE_KERNARG;
    const uint32_t k16 = XTQ_ALIGN_UP(d->kernarg_len, 16u);

    memset(&h, 0, sizeof(h));
    memcpy(data + XTQ__CUDA_INLINE_PACKET, d->packet, sizeof(*d->packet));
    if (d->kernarg != NULL && d->kernarg_len && d->kernarg_len <= XTQ_CUDA_MAX_KERNARG &&
        len + k16 <= q->inl_data) {
        memcpy(data + len, d->kernarg, d->kernarg_len);
        memset(data + len + d->kernarg_len, 0, k16 - d->kernarg_len);
        h.kernarg_len = (uint16_t)d->kernarg_len;
        len += k16;
        /* The payload travels with the packet when argument 1 can be
         * pointed at the processor's copy of it. */
        if (d->payload != NULL && d->payload_len && d->payload_len <= q->inline_max &&
            d->kernarg_len >= 16 && len + d->payload_len <= q->inl_data) {
            memcpy(data + len, d->payload, d->payload_len);
            h.flags |= XTQ__CUDA_INLINE_PAYLOAD;
            len += d->payload_len;
        }
    } else if (d->kernarg != NULL && d->kernarg_len <= XTQ_CUDA_MAX_KERNARG) {
        h.kernarg_ext = d->kernarg_len;
    }
    h.payload_len = d->payload_len;
    h.result = (uint64_t)(uintptr_t)d->result;
    h.result_len = (uint32_t)d->result_len;
    if (q->notify && d->notify) {
        h.notify = (uint64_t)(uintptr_t)d->notify;
        h.notify_tag = d->notify_tag;
    }
    const uint32_t nlines = (uint32_t)((len + XTQ__CUDA_LINE_DATA - 1) / XTQ__CUDA_LINE_DATA);
    memset(data + len, 0, (size_t)nlines * XTQ__CUDA_LINE_DATA - len);
    h.nlines = (uint16_t)nlines;
    memcpy(data, &h, sizeof(h));

    _Atomic uint64_t *area = q->inl + (index & q->base.mask) * q->inl_lines * 2;
    const uint64_t flag = (uint64_t)(uint32_t)(index + 1) << 32;
    uint32_t w32[2];
    for (uint32_t i = 2; i < 2 * nlines; i++) {
        memcpy(&w32[0], data + 4 * i, 4);
        atomic_store_explicit(&area[i], flag | w32[0], memory_order_relaxed);
    }
    memcpy(w32, data, 8);
    atomic_store_explicit(&area[1], flag | w32[1], memory_order_relaxed);
    /* Release: the processor acquires line 0, and then reads what was
     * written before it (a payload read in place, too). */
    atomic_store_explicit(&area[0], flag | w32[0], memory_order_release);
}

const _Atomic uint64_t *xtq__cuda_done_word(xtq_queue_t *queue, uint64_t index)
{
    struct cuda_queue *q = container_of(queue, struct cuda_queue, base);
    return &q->done[index & queue->mask];
}

/*
 * The producer protocol (queue_int.h) with the inline copy at step 4:
 * ring body, cookie and retire, inline area, then the ring header. The
 * ring slot stays a plain AQL packet: the retire thread reads the cookie
 * and the completion signal there, and a processor that finds no current
 * inline copy runs it as written. The result buffer reaches the GPU in
 * the inline header (q->results stays empty: no host thread takes it).
 */
int xtq__cuda_enqueue(xtq_queue_t *queue, const struct xtq__enqueue *d, uint64_t *index)
{
    struct cuda_queue *q = container_of(queue, struct cuda_queue, base);
    const xtq_aql_packet_t *pkt = d->packet;
    uint64_t i;
    uint32_t first;

    if (d->result_len > UINT32_MAX || (d->result == NULL && d->result_len))
        return -XTQ_EINVAL;
    int rc = xtq_queue_reserve(queue, 1, &i);
    if (rc)
        return rc;
    /* Enqueued in an engine turn: that thread polls for the completion
     * (cuda_retire_poll), so the doorbell need not wake the retire thread. */
    struct cuda_agent *a = to_cuda(queue->agent);
    if (a->claim_ns && xtq__ctx_in_turn(a->base.ctx))
        engine_claim(a);
    xtq_aql_packet_t *slot = xtq_queue_slot(queue, i);
    memcpy(slot->bytes + 4, pkt->bytes + 4, XTQ_AQL_PACKET_SIZE - 4);
    if (d->cookie != NULL)
        xtq__queue_set_retire(queue, d->retire);
    queue->cookies[i & queue->mask] = d->cookie;
    inline_fill(q, i, d);
    memcpy(&first, pkt->bytes, sizeof(first));
    xtq_queue_publish(queue, i, (uint16_t)(first & 0xffffu), (uint16_t)(first >> 16));
    XTQ_TRACE_POINT(XTQ_TRACE_ENQUEUED, d->trace_key);
    xtq_queue_ring_doorbell(queue, i);
    XTQ_TRACE_POINT(XTQ_TRACE_DOORBELL, d->trace_key);
    if (index != NULL)
        *index = i;
    return 0;
}

/* The agent's enqueue operation (xtq__agent_ops). */
static int cuda_enqueue(xtq_queue_t *queue, const struct xtq__enqueue *desc)
{
    return xtq__cuda_enqueue(queue, desc, NULL);
}

/* Lines per slot for inline payloads of up to `inline_max` bytes beside
 * the header, the packet and typical arguments: a power of two, one warp
 * at least (the first poll reads 32 lines), 256 at most. */
static uint32_t inline_lines(uint32_t inline_max)
{
    uint32_t want = (XTQ__CUDA_INLINE_KERNARG + 64u + inline_max + XTQ__CUDA_LINE_DATA - 1) /
                    XTQ__CUDA_LINE_DATA;
    uint32_t lines = 32;
    while (lines < want && lines < 256)
        lines *= 2;
    return lines;
}

static int queue_create_on_device(xtq_agent_t *agent, uint32_t size, xtq_queue_t **queue)
{
    struct cuda_agent *a = to_cuda(agent);
    struct cuda_queue *q;
    size_t off_idx, off_db, off_done, off_inl, total;
    struct xtq__cuda_qdesc qd;
    uint32_t slot, one = 1;
    int rc;

    if (!xtq__queue_size_ok(size) || size > CUDA_MAX_QUEUE_SIZE)
        return -XTQ_EINVAL;
    q = calloc(1, sizeof(*q));
    if (q == NULL)
        return -XTQ_ENOMEM;
    q->inl_lines = inline_lines(a->inline_max);
    q->inl_data = (q->inl_lines < XTQ__CUDA_INLINE_LINES_MAX ? q->inl_lines
                                                              : XTQ__CUDA_INLINE_LINES_MAX) *
                  XTQ__CUDA_LINE_DATA;
    q->inline_max = a->inline_max;
    q->notify = a->notify;
    /* One pinned, mapped block: ring, indices, doorbell, completion
     * words, inline areas. */
    off_idx = (size_t)size * XTQ_AQL_PACKET_SIZE;
    off_db = off_idx + sizeof(struct xtq__queue_indices);
    off_done = XTQ_ALIGN_UP(off_db + sizeof(struct xtq_signal), (size_t)XTQ_CACHELINE);
    off_inl = XTQ_ALIGN_UP(off_done + (size_t)size * sizeof(uint64_t), (size_t)XTQ_CACHELINE);
    total = off_inl + (size_t)size * q->inl_lines * XTQ__CUDA_LINE_BYTES;

    rc = cuda_rc(cudaHostAlloc(&q->mem, total, cudaHostAllocMapped | cudaHostAllocPortable),
                 "cudaHostAlloc (queue)");
    if (rc)
        goto err_free;
    memset(q->mem, 0, total);
    xtq_signal_t *db = (xtq_signal_t *)((char *)q->mem + off_db);
    xtq__signal_init_at(db, 0, XTQ__SIGNAL_DEVICE);
    rc = xtq__queue_init(&q->base, agent, size, q->mem,
                         (struct xtq__queue_indices *)((char *)q->mem + off_idx), db);
    if (rc)
        goto err_host;
    q->done = (_Atomic uint64_t *)((char *)q->mem + off_done);
    q->inl = (_Atomic uint64_t *)((char *)q->mem + off_inl);

    pthread_mutex_lock(&a->lock);
    for (slot = 0; slot < XTQ__CUDA_MAX_QUEUES && a->queues[slot] != NULL; slot++)
        ;
    if (slot == XTQ__CUDA_MAX_QUEUES) {
        pthread_mutex_unlock(&a->lock);
        xtq_err(CUDA, "more than %d queues on one CUDA agent", XTQ__CUDA_MAX_QUEUES);
        rc = -XTQ_ENOSPC;
        goto err_init;
    }
    /* The processor reads the block through the GPU's mapping of it. */
    uint64_t dbase;
    rc = cuda_devptr(q->mem, &dbase);
    if (rc) {
        pthread_mutex_unlock(&a->lock);
        goto err_init;
    }
    memset(&qd, 0, sizeof(qd));
    qd.ring = dbase;
    qd.read_index = dbase + off_idx + offsetof(struct xtq__queue_indices, read_index);
    qd.inl = dbase + off_inl;
    qd.done = dbase + off_done;
    qd.mask = size - 1;
    qd.inl_lines = q->inl_lines;
    q->slot = slot;
    /* Descriptor, active, slot count, then a new table version: the
     * processor reloads its copy of the table and polls the queue. */
    rc = cuda_put(a, &a->dev->q[slot], &qd, sizeof(qd));
    if (rc == 0)
        rc = cuda_put(a, &a->dev->q[slot].active, &one, sizeof(one));
    if (rc == 0 && slot >= a->nq) {
        uint32_t nq = slot + 1;
        rc = cuda_put(a, (void *)&a->dev->nq, &nq, sizeof(nq));
        if (rc == 0)
            a->nq = nq;
    }
    if (rc == 0) {
        a->queues[slot] = q;
        atomic_store_explicit(&a->any_queue, 1, memory_order_relaxed);
    }
    /* The first queue needs a processor: libxtq's own until a module
     * attaches. */
    if (rc == 0 && !a->running)
        rc = processor_start(a, a->launch, a->tag, a->module_name);
    else if (rc == 0)
        rc = cuda_publish_table(a, false);
    if (rc)
        a->queues[slot] = NULL;
    pthread_mutex_unlock(&a->lock);
    if (rc)
        goto err_init;
    *queue = &q->base;
    return 0;

err_init:
    xtq__queue_fini(&q->base);
err_host:
    cudaFreeHost(q->mem);
err_free:
    free(q);
    return rc;
}

static int cuda_queue_create(xtq_agent_t *agent, uint32_t size, xtq_queue_t **queue)
{
    struct cuda_agent *a = to_cuda(agent); /* the ops table's, and checked callers' */
    int prev = dev_enter(a->device);
    int rc = queue_create_on_device(agent, size, queue);
    dev_leave(a->device, prev);
    return rc;
}

static int cuda_queue_destroy(xtq_queue_t *queue)
{
    struct cuda_queue *q = container_of(queue, struct cuda_queue, base);
    struct cuda_agent *a = to_cuda(queue->agent);
    uint32_t zero = 0;
    int rc;

    pthread_mutex_lock(&a->lock);
    rc = cuda_put(a, &a->dev->q[q->slot].active, &zero, sizeof(zero));
    if (rc == 0)
        rc = cuda_publish_table(a, true);
    a->queues[q->slot] = NULL;
    /* The processor has left the queue (or none runs): nothing of it
     * will complete any more. */
    if (rc == 0 || !processor_alive(a))
        cuda_queue_cancel(a, q);
    /* Freeing pinned memory may synchronise the device, which never idles
     * while the processor runs: keep it until close. */
    q->next_dead = a->dead;
    a->dead = q;
    pthread_mutex_unlock(&a->lock);
    return rc;
}

static int cuda_kernel_destroy(xtq_kernel_t *kernel)
{
    struct cuda_kernel *k = container_of(kernel, struct cuda_kernel, base);
    struct cuda_agent *a = to_cuda(kernel->agent);
    struct xtq__cuda_kdesc d = {0, 0, 0, 0};
    int rc;

    pthread_mutex_lock(&a->lock);
    rc = cuda_put(a, &a->kdesc[k->slot], &d, sizeof(d));
    a->kernel_used[k->slot] = false;
    pthread_mutex_unlock(&a->lock);
    free(k);
    return rc;
}

static int cuda_function_destroy(xtq_function_t *function)
{
    /* GPU agents run no agent-dispatch functions, so none can exist. */
    return -XTQ_ENOSYS;
}

static int mem_register_on_device(xtq_agent_t *agent, void *addr, size_t len)
{
    struct cuda_agent *a = to_cuda(agent);
    cudaError_t e;

    if (addr == NULL || len == 0)
        return -XTQ_EINVAL;
    e = cudaHostRegister(addr, len, cudaHostRegisterMapped | cudaHostRegisterPortable);
    if (e == cudaErrorHostMemoryAlreadyRegistered) {
        /* Already pinned (cudaHostAlloc, or another agent): usable as is. */
        cudaGetLastError();
        return 0;
    }
    int rc = cuda_rc(e, "cudaHostRegister");
    if (rc)
        return rc;
    pthread_mutex_lock(&a->lock);
    if (a->nmapped == a->mapped_cap) {
        uint32_t cap = a->mapped_cap ? a->mapped_cap * 2 : 16;
        void **m = realloc(a->mapped, cap * sizeof(*m));
        if (m) {
            a->mapped = m;
            a->mapped_cap = cap;
        }
    }
    if (a->nmapped < a->mapped_cap)
        a->mapped[a->nmapped++] = addr;
    pthread_mutex_unlock(&a->lock);
    return 0;
}

static int cuda_mem_register(xtq_agent_t *agent, void *addr, size_t len)
{
    struct cuda_agent *a = to_cuda(agent); /* the ops table's, and checked callers' */
    int prev = dev_enter(a->device);
    int rc = mem_register_on_device(agent, addr, len);
    dev_leave(a->device, prev);
    return rc;
}

/* Forget `addr` in the list of mapped memory. Caller holds the lock. */
static void mapped_forget(struct cuda_agent *a, void *addr)
{
    for (uint32_t i = 0; i < a->nmapped; i++)
        if (a->mapped[i] == addr) {
            a->mapped[i] = a->mapped[--a->nmapped];
            return;
        }
}

static int mem_deregister_on_device(xtq_agent_t *agent, void *addr, size_t len)
{
    struct cuda_agent *a = to_cuda(agent);
    int rc, rc2 = 0;

    /* Unregistering waits for the device to idle, which it never does
     * while a processor runs (a test hung here): pause it around the call.
     * Packets wait meanwhile; none is lost. */
    pthread_mutex_lock(&a->lock);
    const bool gone = processor_gone_idle(a);
    bool had = a->running && !gone;
    rc = gone ? 0 : processor_stop(a);
    cudaError_t e = cudaHostUnregister(addr);
    if (e == cudaErrorHostMemoryNotRegistered) {
        cudaGetLastError();
        e = cudaSuccess;
    }
    mapped_forget(a, addr);
    if (rc == 0)
        rc = cuda_rc(e, "cudaHostUnregister");
    if (had)
        rc2 = processor_start(a, a->launch, a->tag, a->module_name);
    pthread_mutex_unlock(&a->lock);
    return rc ? rc : rc2;
}

static int cuda_mem_deregister(xtq_agent_t *agent, void *addr, size_t len)
{
    struct cuda_agent *a = to_cuda(agent); /* the ops table's, and checked callers' */
    int prev = dev_enter(a->device);
    int rc = mem_deregister_on_device(agent, addr, len);
    dev_leave(a->device, prev);
    return rc;
}

static void close_on_device(xtq_agent_t *agent)
{
    struct cuda_agent *a = to_cuda(agent);

    /* With the idle exit on, the retire thread goes first: it relaunches a
     * processor that exited idle, and must not after the stop below.
     * Without it, the order that ran on the H100 (processor, then retire
     * thread) is kept until a GPU run has checked the other. */
    bool retire_first = a->idle_exit_us != 0;
    if (!retire_first && a->dev != NULL)
        (void)processor_stop(a); /* exits at its next poll; tasks in flight finish */
    if (a->retire_started) {
        atomic_store_explicit(&a->stop, 1, memory_order_seq_cst);
        atomic_fetch_add_explicit(&a->bell, 1, memory_order_seq_cst);
        xtq__futex_wake(&a->bell, 1);
        pthread_join(a->retire_thread, NULL);
    }
    if (retire_first && a->dev != NULL)
        (void)processor_stop(a);
    for (uint32_t i = 0; i < XTQ__CUDA_MAX_QUEUES; i++) {
        if (a->queues[i] != NULL) {
            /* The processor and the retire thread are gone. */
            cuda_queue_cancel(a, a->queues[i]);
            a->queues[i]->next_dead = a->dead;
            a->dead = a->queues[i];
        }
    }
    while (a->dead != NULL) {
        struct cuda_queue *q = a->dead;
        a->dead = q->next_dead;
        xtq__queue_fini(&q->base);
        cudaFreeHost(q->mem);
        free(q);
    }
    for (uint32_t i = 0; i < a->nmapped; i++)
        cudaHostUnregister(a->mapped[i]);
    free(a->mapped);
    if (a->sigs)
        cudaFreeHost(a->sigs);
    if (a->ctl)
        cudaFreeHost(a->ctl);
    if (a->kdesc)
        cudaFree(a->kdesc);
    if (a->stage)
        cudaFree(a->stage);
    if (a->dev)
        cudaFree(a->dev);
    if (a->ctl_stream)
        cudaStreamDestroy(a->ctl_stream);
    if (a->run)
        cudaStreamDestroy(a->run);
    pthread_mutex_destroy(&a->lock);
    free(a);
}

static void cuda_close(xtq_agent_t *agent)
{
    const int dev = to_cuda(agent)->device; /* the agent is freed inside */
    int prev = dev_enter(dev);
    close_on_device(agent);
    dev_leave(dev, prev);
}

static const struct xtq__agent_ops cuda_ops = {
    .name = "cuda",
    .queue_create = cuda_queue_create,
    .queue_destroy = cuda_queue_destroy,
    .enqueue = cuda_enqueue,
    .doorbell = cuda_doorbell,
    .kernel_destroy = cuda_kernel_destroy,
    .function_destroy = cuda_function_destroy,
    .mem_register = cuda_mem_register,
    .mem_deregister = cuda_mem_deregister,
    .close = cuda_close,
    .retire_poll = cuda_retire_poll,
    .retire_release = cuda_retire_release,
};

/* ---- provider ---------------------------------------------------------- */

static int cuda_probe(char *reason, size_t reason_len, unsigned *device_count)
{
    void *h;
    int n = 0;
    cudaError_t e;

    /* The persistent processor never lets the context idle, and loading
     * a module lazily needs the context idle: a task module loaded on
     * first use would wait forever. Load every module at initialisation
     * (effective when this is the process's first CUDA call). */
    const char *ml = getenv("CUDA_MODULE_LOADING");
    if (ml == NULL)
        setenv("CUDA_MODULE_LOADING", "EAGER", 0);
    else if (strcmp(ml, "EAGER") != 0)
        xtq_warn(CUDA, "CUDA_MODULE_LOADING=%s: modules loaded after the CUDA agent starts "
                       "can deadlock against its persistent processor; use EAGER", ml);
    /* Look for the driver first: keeps the runtime untouched where it
     * cannot work. */
    h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (h == NULL) {
        snprintf(reason, reason_len, "no CUDA driver: libcuda.so.1 not found (%s)", dlerror());
        return -XTQ_ENOAGENT;
    }
    dlclose(h);
    e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n <= 0) {
        snprintf(reason, reason_len, "no CUDA device: cudaGetDeviceCount returned %d (%s)", (int)e,
                 e == cudaSuccess ? "0 devices" : cudaGetErrorName(e));
        cudaGetLastError();
        return -XTQ_ENOAGENT;
    }
    *device_count = (unsigned)n;
    return 0;
}

static int open_on_device(xtq_ctx_t *ctx, unsigned device_index, xtq_agent_t **agent)
{
    struct cuda_agent *a;
    struct cudaDeviceProp prop;
    struct xtq__cuda_dev *init = NULL;
    int rc;

    a = calloc(1, sizeof(*a));
    if (a == NULL)
        return -XTQ_ENOMEM;
    pthread_mutex_init(&a->lock, NULL);
    a->base.ops = &cuda_ops;
    a->base.kind = XTQ_AGENT_CUDA;
    a->base.ctx = ctx;
    a->device = (int)device_index;

    /* Ranks sharing a GPU each run a processor in a context of their own,
     * and the GPU time-slices contexts: on the H100 every cross-process
     * step then waited for a slice (2.25 ms per step of a collective
     * between 2 ranks on 1 GPU, 61 us on 2 GPUs; docs/cuda.md). MPS runs
     * them side by side, but only for processes with no module that uses
     * dynamic parallelism (-rdc task modules: XTQ_CUDA_DEVICE_LAUNCH). */
    int ndev = 0;
    if (ctx && cudaGetDeviceCount(&ndev) == cudaSuccess && ndev > 0 &&
        ctx->local_ranks > (unsigned)ndev)
        XTQ_LOG_ONCE(CUDA, WARN,
                     "%u ranks on this host share %d GPU(s): each rank's packet processor is a "
                     "CUDA context of its own, and the GPU time-slices contexts (milliseconds per "
                     "switch); run one rank per GPU, or MPS with task modules built without -rdc "
                     "(XTQ_CUDA_DEVICE_LAUNCH=OFF: MPS refuses dynamic parallelism)",
                     ctx->local_ranks, ndev);
    cudaError_t se = cudaSetDevice(a->device);
    if (se == cudaErrorCdpNotSupported)
        xtq_err(CUDA, "this process carries a task module built with -rdc (dynamic parallelism: "
                      "grids launched from the GPU), which MPS refuses; build libxtq with "
                      "-DXTQ_CUDA_DEVICE_LAUNCH=OFF, and your own modules without -rdc, to run "
                      "under MPS");
    rc = cuda_rc(se, "cudaSetDevice");
    if (rc)
        goto err;
    rc = cuda_rc(cudaGetDeviceProperties(&prop, a->device), "cudaGetDeviceProperties");
    if (rc)
        goto err;
    /* Packets carry host addresses (signals, kernel arguments, payloads)
     * that the GPU dereferences as they are. */
    if (prop.major < 7 || !prop.canMapHostMemory || !prop.unifiedAddressing ||
        !prop.canUseHostPointerForRegisteredMem) {
        xtq_err(CUDA, "%s (sm_%d%d) lacks mapped host memory at host addresses or __nanosleep",
                prop.name, prop.major, prop.minor);
        rc = -XTQ_ENOAGENT;
        goto err;
    }
    a->blocks = (unsigned)xtq__param_int(XTQ__PARAM_XTQ_CUDA_BLOCKS);
    if (a->blocks < 1)
        a->blocks = 1;
    if (a->blocks > (unsigned)prop.multiProcessorCount)
        a->blocks = (unsigned)prop.multiProcessorCount;

    rc = cuda_rc(cudaStreamCreateWithFlags(&a->run, cudaStreamNonBlocking), "cudaStreamCreate");
    if (rc == 0)
        rc = cuda_rc(cudaStreamCreateWithFlags(&a->ctl_stream, cudaStreamNonBlocking),
                     "cudaStreamCreate");
    if (rc == 0)
        rc = cuda_rc(cudaMalloc((void **)&a->dev, sizeof(*a->dev)), "cudaMalloc (state)");
    if (rc == 0)
        rc = cuda_rc(cudaMalloc((void **)&a->kdesc, sizeof(*a->kdesc) * XTQ__CUDA_MAX_KERNELS),
                     "cudaMalloc (kernel table)");
    if (rc == 0)
        rc = cuda_rc(cudaMemsetAsync(a->kdesc, 0, sizeof(*a->kdesc) * XTQ__CUDA_MAX_KERNELS,
                                     a->ctl_stream),
                     "cudaMemsetAsync");
    if (rc == 0)
        rc = cuda_rc(cudaStreamSynchronize(a->ctl_stream), "cudaStreamSynchronize");
    if (rc == 0)
        rc = cuda_rc(cudaHostAlloc((void **)&a->ctl, sizeof(*a->ctl),
                                   cudaHostAllocMapped | cudaHostAllocPortable),
                     "cudaHostAlloc (control)");
    if (rc == 0)
        rc = cuda_rc(cudaHostAlloc((void **)&a->sigs, sizeof(*a->sigs) * CUDA_SIGNALS,
                                   cudaHostAllocMapped | cudaHostAllocPortable),
                     "cudaHostAlloc (signals)");
    if (rc)
        goto err;
    memset(a->ctl, 0, sizeof(*a->ctl));
    a->ctl->version_seen = ~0u;
    for (uint32_t i = 0; i < CUDA_SIGNALS; i++)
        a->sig_free[i] = CUDA_SIGNALS - 1 - i;
    a->nsig_free = CUDA_SIGNALS;

    init = calloc(1, sizeof(*init));
    if (init == NULL) {
        rc = -XTQ_ENOMEM;
        goto err;
    }
    init->abi = XTQ_CUDA_ABI_VERSION;
    /* Payload placement: in place (pinned host) below copy_min, copied
     * into device memory from there (docs/cuda.md has the measurements). */
    init->copy_min = xtq__param_size(XTQ__PARAM_XTQ_CUDA_COPY_MIN);
    if (init->copy_min) {
        init->stage_len = xtq__param_size(XTQ__PARAM_XTQ_MAX_MSG_SIZE);
        rc = cuda_rc(cudaMalloc(&a->stage, init->stage_len), "cudaMalloc (payload stage)");
        if (rc) {
            free(init);
            goto err;
        }
        init->stage = (uint64_t)(uintptr_t)a->stage;
    }
    init->poll_ns_max = (uint32_t)xtq__param_int(XTQ__PARAM_XTQ_CUDA_POLL_NS);
    /* On by default (1000 us) since the H100 run of session 6: the DDP hook
     * no longer hangs, the steady round trip is unchanged (docs/cuda.md). */
    int64_t idle_us = xtq__param_int(XTQ__PARAM_XTQ_CUDA_IDLE_EXIT_US);
    a->idle_exit_us = idle_us > 0 ? (uint32_t)(idle_us < 1000000000 ? idle_us : 1000000000) : 0;
    init->idle_exit_us = a->idle_exit_us;
    /* Small payloads travel inline with the packet (one read); large
     * dispatches run on a grid of their own (modules built with -rdc). */
    uint64_t inl = xtq__param_size(XTQ__PARAM_XTQ_CUDA_INLINE_MAX);
    a->inline_max = (uint32_t)(inl < XTQ__CUDA_INLINE_DATA_MAX ? inl : XTQ__CUDA_INLINE_DATA_MAX);
    a->notify = xtq__param_int(XTQ__PARAM_XTQ_CUDA_NOTIFY) != 0;
    int64_t gmin = xtq__param_int(XTQ__PARAM_XTQ_CUDA_GRID_MIN);
    a->grid_min = gmin > 0 ? (uint32_t)(gmin < 0x7fffffff ? gmin : 0x7fffffff) : 0;
    init->grid_min = a->grid_min;
    /* Eight blocks of 256 threads fill an SM; more groups loop. */
    init->grid_blocks_max = (uint32_t)prop.multiProcessorCount * 8u;
    init->complete_mode = XTQ__CUDA_COMPLETE_RELEASE;
    /* Without native host atomics (PCIe), a GPU atomic on host memory
     * loses the update: completion signals are then decremented with a
     * load and a store by the processor, their only device-side writer. */
    int native = 0;
    (void)cudaDeviceGetAttribute(&native, cudaDevAttrHostNativeAtomicSupported, a->device);
    init->host_atomics = native != 0;
    a->host_atomics = native != 0;
    rc = cuda_check_identity(a->sigs);
    if (rc == 0)
        rc = cuda_devptr(a->ctl, &init->ctl);
    if (rc) {
        free(init);
        goto err;
    }
    init->kdesc = (uint64_t)(uintptr_t)a->kdesc;
    /* Every control copy goes through cuda_put (its stream, waited for):
     * a cudaMemcpy from pageable memory may return before its DMA lands,
     * and this one then overwrote the queue table written after it (a
     * processor read a NULL ring with other processes on the GPU). */
    rc = cuda_put(a, a->dev, init, sizeof(*init));
    free(init);
    if (rc)
        goto err;
    /* Tasks are called through pointers, so the processor's stack cannot
     * be sized statically: give every thread room for a task's frame. */
    rc = cuda_rc(cudaDeviceSetLimit(cudaLimitStackSize, 8192), "cudaDeviceSetLimit (stack)");
    if (rc)
        goto err;
    /* Started with the first queue (processor_start). */
    a->launch = xtq__builtin_xtq_launch;
    a->tag = CUDA_TAG_BUILTIN;
    snprintf(a->module_name, sizeof(a->module_name), CUDA_BUILTIN_NAME);
    a->idle_spin_ns =
        xtq__spin_ns(XTQ__PARAM_XTQ_AGENT_SPIN_US, ctx ? ctx->local_ranks : 1, 50, 0);
    a->claim_ns =
        strcmp(xtq__param_string(XTQ__PARAM_XTQ_AGENT_RETIRE), "thread") != 0 ? RETIRE_CLAIM_NS : 0;
    /* Waits on this agent's completion signals poll through a small task
     * (XTQ_AGENT_SPIN_US; auto: 100 us where each rank has cores to spare). */
    xtq__device_signal_spin_raise(
        xtq__spin_ns(XTQ__PARAM_XTQ_AGENT_SPIN_US, ctx ? ctx->local_ranks : 1, 100, 0));
    if (pthread_create(&a->retire_thread, NULL, cuda_retire_main, a) != 0) {
        rc = -XTQ_ENOMEM;
        goto err;
    }
    a->retire_started = true;

    a->base.info.kind = XTQ_AGENT_CUDA;
    snprintf(a->base.info.name, sizeof(a->base.info.name), "%.63s", prop.name);
    a->base.info.device_index = device_index;
    a->base.info.workers = a->blocks; /* SMs the processor keeps */
    a->base.info.max_queue_size = CUDA_MAX_QUEUE_SIZE;
    xtq_info(CUDA, "%s: packet processor on %u of %d SMs (%u threads each) once a queue exists",
             prop.name, a->blocks, prop.multiProcessorCount, XTQ__CUDA_THREADS);
    *agent = &a->base;
    return 0;

err:
    cuda_close(&a->base);
    return rc;
}

static int cuda_open(xtq_ctx_t *ctx, unsigned device_index, xtq_agent_t **agent)
{
    int prev = dev_enter((int)device_index);
    int rc = open_on_device(ctx, device_index, agent);
    dev_leave((int)device_index, prev);
    return rc;
}

const struct xtq__agent_provider xtq__cuda_agent_provider = {
    .kind = XTQ_AGENT_CUDA,
    .name = "cuda",
    .probe = cuda_probe,
    .open = cuda_open,
};

/* ---- public ------------------------------------------------------------ */

int xtq_kernel_create_cuda(xtq_agent_t *agent, uint64_t device_fn, uint32_t kernarg_size,
                           xtq_kernel_t **kernel)
{
    struct cuda_agent *a;
    struct cuda_kernel *k;
    struct xtq__cuda_kdesc d;
    uint32_t slot;
    int rc;

    if (agent == NULL || kernel == NULL || device_fn == 0 || kernarg_size > XTQ_CUDA_MAX_KERNARG)
        return -XTQ_EINVAL;
    if (agent->kind != XTQ_AGENT_CUDA)
        return -XTQ_EAGENTKIND;
    a = to_cuda(agent);
    k = calloc(1, sizeof(*k));
    if (k == NULL)
        return -XTQ_ENOMEM;
    pthread_mutex_lock(&a->lock);
    if (a->attach_refs == 0) {
        xtq_err(CUDA, "no task module attached: attach the module that holds the task first "
                      "(xtq_cuda_module_attach)");
        rc = -XTQ_EINVAL;
        goto err_unlock;
    }
    for (slot = 0; slot < XTQ__CUDA_MAX_KERNELS && a->kernel_used[slot]; slot++)
        ;
    if (slot == XTQ__CUDA_MAX_KERNELS) {
        rc = -XTQ_ENOSPC;
        goto err_unlock;
    }
    d.fn = device_fn;
    d.kernarg_size = kernarg_size;
    d.live = 1;
    d.module = (uint16_t)a->tag;
    rc = cuda_put(a, &a->kdesc[slot], &d, sizeof(d));
    if (rc)
        goto err_unlock;
    a->kernel_used[slot] = true;
    pthread_mutex_unlock(&a->lock);
    k->slot = slot;
    k->base.agent = agent;
    k->base.object = (uint64_t)(uintptr_t)&a->kdesc[slot];
    k->base.kernarg_size = kernarg_size;
    *kernel = &k->base;
    return 0;

err_unlock:
    pthread_mutex_unlock(&a->lock);
    free(k);
    return rc;
}

static int attach_on_device(xtq_agent_t *agent, xtq_cuda_launch_fn launch, const char *name)
{
    struct cuda_agent *a;
    int rc = 0;

    if (agent == NULL || launch == NULL)
        return -XTQ_EINVAL;
    if (agent->kind != XTQ_AGENT_CUDA)
        return -XTQ_EAGENTKIND;
    a = to_cuda(agent);
    if (name == NULL)
        name = "(unnamed)";
    pthread_mutex_lock(&a->lock);
    if (a->attach_refs > 0) {
        if (a->launch == launch) {
            a->attach_refs++;
        } else {
            rc = -XTQ_EBUSY;
            xtq_err(CUDA, "cannot attach %s: %s is attached (one task module per agent)", name,
                    a->module_name);
        }
        pthread_mutex_unlock(&a->lock);
        return rc;
    }
    uint32_t tag = 0;
    for (uint32_t i = 0; i < a->ntagged && !tag; i++)
        if (a->tagged[i] == launch)
            tag = CUDA_TAG_BUILTIN + 1 + i;
    if (!tag) {
        if (a->ntagged == CUDA_MAX_MODULES) {
            pthread_mutex_unlock(&a->lock);
            xtq_err(CUDA, "cannot attach %s: %d modules attached over this agent's life", name,
                    CUDA_MAX_MODULES);
            return -XTQ_ENOSPC;
        }
        a->tagged[a->ntagged] = launch;
        tag = CUDA_TAG_BUILTIN + 1 + a->ntagged++;
    }
    rc = processor_switch(a, launch, tag, name);
    if (rc) {
        /* Back to libxtq's own: queues still need a processor. */
        int rc2 = processor_switch(a, xtq__builtin_xtq_launch, CUDA_TAG_BUILTIN,
                                   CUDA_BUILTIN_NAME);
        if (rc2)
            xtq_err(CUDA, "cannot restart libxtq's processor: %s", xtq_errname(rc2));
    }
    if (rc == 0)
        a->attach_refs = 1;
    pthread_mutex_unlock(&a->lock);
    if (rc == 0)
        xtq_info(CUDA, "task module %s attached (tag %u)", name, tag);
    return rc;
}

int xtq_cuda_attach(xtq_agent_t *agent, xtq_cuda_launch_fn launch, const char *name)
{
    if (agent == NULL || agent->kind != XTQ_AGENT_CUDA)
        return attach_on_device(agent, launch, name);
    struct cuda_agent *a = to_cuda(agent);
    int prev = dev_enter(a->device);
    int rc = attach_on_device(agent, launch, name);
    dev_leave(a->device, prev);
    return rc;
}

static int detach_on_device(xtq_agent_t *agent, xtq_cuda_launch_fn launch)
{
    struct cuda_agent *a;
    int rc = 0;

    if (agent == NULL || launch == NULL)
        return -XTQ_EINVAL;
    if (agent->kind != XTQ_AGENT_CUDA)
        return -XTQ_EAGENTKIND;
    a = to_cuda(agent);
    pthread_mutex_lock(&a->lock);
    if (a->attach_refs == 0 || a->launch != launch) {
        pthread_mutex_unlock(&a->lock);
        return -XTQ_EINVAL;
    }
    if (--a->attach_refs == 0)
        rc = processor_switch(a, xtq__builtin_xtq_launch, CUDA_TAG_BUILTIN, CUDA_BUILTIN_NAME);
    pthread_mutex_unlock(&a->lock);
    return rc;
}

int xtq_cuda_detach(xtq_agent_t *agent, xtq_cuda_launch_fn launch)
{
    if (agent == NULL || agent->kind != XTQ_AGENT_CUDA)
        return detach_on_device(agent, launch);
    struct cuda_agent *a = to_cuda(agent);
    int prev = dev_enter(a->device);
    int rc = detach_on_device(agent, launch);
    dev_leave(a->device, prev);
    return rc;
}

int xtq_cuda_signal_create(xtq_agent_t *agent, int64_t initial_value, xtq_signal_t **signal)
{
    struct cuda_agent *a;
    uint32_t i;

    if (agent == NULL || signal == NULL)
        return -XTQ_EINVAL;
    if (agent->kind != XTQ_AGENT_CUDA)
        return -XTQ_EAGENTKIND;
    a = to_cuda(agent);
    pthread_mutex_lock(&a->lock);
    if (a->nsig_free == 0) {
        pthread_mutex_unlock(&a->lock);
        return -XTQ_ENOMEM;
    }
    i = a->sig_free[--a->nsig_free];
    pthread_mutex_unlock(&a->lock);
    xtq__signal_init_at(&a->sigs[i], initial_value, XTQ__SIGNAL_DEVICE);
    *signal = &a->sigs[i];
    return 0;
}

int xtq_cuda_signal_destroy(xtq_agent_t *agent, xtq_signal_t *signal)
{
    struct cuda_agent *a;

    if (agent == NULL || signal == NULL)
        return -XTQ_EINVAL;
    if (agent->kind != XTQ_AGENT_CUDA)
        return -XTQ_EAGENTKIND;
    a = to_cuda(agent);
    if (signal < a->sigs || signal >= a->sigs + CUDA_SIGNALS)
        return -XTQ_EINVAL;
    /* Registered, or named by a queued task: the slot must not be reused. */
    if (xtq__refs_kill(&signal->refs))
        return -XTQ_EBUSY;
    signal->magic = 0;
    pthread_mutex_lock(&a->lock);
    a->sig_free[a->nsig_free++] = (uint32_t)(signal - a->sigs);
    pthread_mutex_unlock(&a->lock);
    return 0;
}

int xtq_cuda_mem_register(xtq_agent_t *agent, void *addr, size_t len)
{
    if (agent == NULL)
        return -XTQ_EINVAL;
    if (agent->kind != XTQ_AGENT_CUDA)
        return -XTQ_EAGENTKIND;
    return cuda_mem_register(agent, addr, len);
}

int xtq_cuda_mem_deregister(xtq_agent_t *agent, void *addr, size_t len)
{
    if (agent == NULL)
        return -XTQ_EINVAL;
    if (agent->kind != XTQ_AGENT_CUDA)
        return -XTQ_EAGENTKIND;
    return cuda_mem_deregister(agent, addr, len);
}

static int quiesce_on_device(xtq_agent_t *agent, void (*fn)(void *arg), void *arg)
{
    struct cuda_agent *a;
    int rc, rc2 = 0;

    if (agent == NULL || fn == NULL)
        return -XTQ_EINVAL;
    if (agent->kind != XTQ_AGENT_CUDA)
        return -XTQ_EAGENTKIND;
    a = to_cuda(agent);
    /* As around cudaHostUnregister (cuda_mem_deregister): the processor
     * exits between packets, the device idles, fn's call returns, and the
     * same module's processor starts again on the same state. */
    pthread_mutex_lock(&a->lock);
    /* Exited idle: the device idles already, and stays so until the next
     * packet relaunches the processor (after this, under the lock). */
    const bool gone = processor_gone_idle(a);
    bool had = a->running && !gone;
    rc = gone ? 0 : processor_stop(a);
    if (rc == 0)
        fn(arg);
    if (had)
        rc2 = processor_start(a, a->launch, a->tag, a->module_name);
    pthread_mutex_unlock(&a->lock);
    return rc ? rc : rc2;
}

int xtq_cuda_quiesce(xtq_agent_t *agent, void (*fn)(void *arg), void *arg)
{
    if (agent == NULL || agent->kind != XTQ_AGENT_CUDA)
        return quiesce_on_device(agent, fn, arg);
    struct cuda_agent *a = to_cuda(agent);
    int prev = dev_enter(a->device);
    int rc = quiesce_on_device(agent, fn, arg);
    dev_leave(a->device, prev);
    return rc;
}

int xtq__cuda_profile(xtq_agent_t *agent, uint64_t out[8])
{
    XTQ_STATIC_ASSERT(XTQ__CUDA_PROF_STAGES == 8, "prototype in internal.h");
    if (agent == NULL || agent->kind != XTQ_AGENT_CUDA)
        return -XTQ_EINVAL;
    struct cuda_agent *a = to_cuda(agent);
    cudaError_t e = cudaMemcpyAsync(out, a->dev->prof, sizeof(a->dev->prof),
                                    cudaMemcpyDeviceToHost, a->ctl_stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(a->ctl_stream);
    return cuda_rc(e, "cudaMemcpyAsync (profile)");
}

static int tune_on_device(xtq_agent_t *agent, enum xtq__cuda_knob knob, uint32_t value)
{
    if (agent == NULL || agent->kind != XTQ_AGENT_CUDA)
        return -XTQ_EINVAL;
    struct cuda_agent *a = to_cuda(agent);
    void *dst;
    switch (knob) {
    case XTQ__CUDA_KNOB_COMPLETE:
        if (value != XTQ__CUDA_COMPLETE_RELEASE && value != XTQ__CUDA_COMPLETE_FENCE)
            return -XTQ_EINVAL;
        dst = (void *)&a->dev->complete_mode;
        break;
    case XTQ__CUDA_KNOB_GRID_MIN:
        dst = (void *)&a->dev->grid_min;
        break;
    default:
        return -XTQ_EINVAL;
    }
    pthread_mutex_lock(&a->lock);
    /* The processor reads its settings with the queue table. */
    int rc = cuda_put(a, dst, &value, sizeof(value));
    if (rc == 0 && knob == XTQ__CUDA_KNOB_GRID_MIN)
        a->grid_min = value;
    if (rc == 0)
        rc = cuda_publish_table(a, true);
    pthread_mutex_unlock(&a->lock);
    return rc;
}

int xtq__cuda_tune(xtq_agent_t *agent, enum xtq__cuda_knob knob, uint32_t value)
{
    if (agent == NULL || agent->kind != XTQ_AGENT_CUDA)
        return tune_on_device(agent, knob, value);
    struct cuda_agent *a = to_cuda(agent);
    int prev = dev_enter(a->device);
    int rc = tune_on_device(agent, knob, value);
    dev_leave(a->device, prev);
    return rc;
}

uint32_t xtq__cuda_caps(xtq_agent_t *agent)
{
    if (agent == NULL || agent->kind != XTQ_AGENT_CUDA)
        return 0;
    struct cuda_agent *a = to_cuda(agent);
    pthread_mutex_lock(&a->lock);
    uint32_t caps = a->caps;
    pthread_mutex_unlock(&a->lock);
    return caps;
}

int xtq__cuda_grid_stats(xtq_agent_t *agent, uint64_t out[2])
{
    if (agent == NULL || agent->kind != XTQ_AGENT_CUDA)
        return -XTQ_EINVAL;
    struct cuda_agent *a = to_cuda(agent);
    XTQ_STATIC_ASSERT(offsetof(struct xtq__cuda_dev, grid_failures) ==
                          offsetof(struct xtq__cuda_dev, grid_launches) + 8,
                      "one copy reads both counters");
    cudaError_t e = cudaMemcpyAsync(out, &a->dev->grid_launches, 2 * sizeof(uint64_t),
                                    cudaMemcpyDeviceToHost, a->ctl_stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(a->ctl_stream);
    return cuda_rc(e, "cudaMemcpyAsync (grid counters)");
}

int xtq__cuda_idle_stats(xtq_agent_t *agent, uint32_t *state, uint64_t *relaunches)
{
    if (agent == NULL || agent->kind != XTQ_AGENT_CUDA || state == NULL || relaunches == NULL)
        return -XTQ_EINVAL;
    struct cuda_agent *a = to_cuda(agent);
    pthread_mutex_lock(&a->lock);
    int rc = a->running ? 0 : -XTQ_ENOSYS;
    *state = a->ctl->state;
    *relaunches = a->relaunches;
    pthread_mutex_unlock(&a->lock);
    return rc;
}

int xtq__cuda_retire_stats(xtq_agent_t *agent, uint64_t *by_engine, uint64_t *by_thread)
{
    if (agent == NULL || agent->kind != XTQ_AGENT_CUDA || by_engine == NULL || by_thread == NULL)
        return -XTQ_EINVAL;
    struct cuda_agent *a = to_cuda(agent);
    pthread_mutex_lock(&a->lock);
    *by_engine = a->retired_polled;
    *by_thread = a->retired_thread;
    pthread_mutex_unlock(&a->lock);
    return 0;
}

#else /* !XTQ_HAVE_CUDA_AGENT: the API exists, the agent does not. */

int xtq__cuda_retire_stats(xtq_agent_t *agent, uint64_t *by_engine, uint64_t *by_thread)
{
    return -XTQ_ENOAGENT;
}

int xtq__cuda_idle_stats(xtq_agent_t *agent, uint32_t *state, uint64_t *relaunches)
{
    return -XTQ_ENOAGENT;
}

int xtq__cuda_profile(xtq_agent_t *agent, uint64_t out[8])
{
    return -XTQ_ENOAGENT;
}

int xtq__cuda_tune(xtq_agent_t *agent, enum xtq__cuda_knob knob, uint32_t value)
{
    return -XTQ_ENOAGENT;
}

uint32_t xtq__cuda_caps(xtq_agent_t *agent)
{
    return 0;
}

int xtq__cuda_grid_stats(xtq_agent_t *agent, uint64_t out[2])
{
    return -XTQ_ENOAGENT;
}

int xtq__cuda_enqueue(xtq_queue_t *queue, const struct xtq__enqueue *d, uint64_t *index)
{
    return -XTQ_ENOAGENT;
}

const _Atomic uint64_t *xtq__cuda_done_word(xtq_queue_t *queue, uint64_t index)
{
    return NULL;
}

int xtq_cuda_attach(xtq_agent_t *agent, xtq_cuda_launch_fn launch, const char *name)
{
    return -XTQ_ENOAGENT;
}

int xtq_cuda_detach(xtq_agent_t *agent, xtq_cuda_launch_fn launch)
{
    return -XTQ_ENOAGENT;
}

int xtq_kernel_create_cuda(xtq_agent_t *agent, uint64_t device_fn, uint32_t kernarg_size,
                           xtq_kernel_t **kernel)
{
    return -XTQ_ENOAGENT;
}

int xtq_cuda_signal_create(xtq_agent_t *agent, int64_t initial_value, xtq_signal_t **signal)
{
    return -XTQ_ENOAGENT;
}

int xtq_cuda_signal_destroy(xtq_agent_t *agent, xtq_signal_t *signal)
{
    return -XTQ_ENOAGENT;
}

int xtq_cuda_mem_register(xtq_agent_t *agent, void *addr, size_t len)
{
    return -XTQ_ENOAGENT;
}

int xtq_cuda_mem_deregister(xtq_agent_t *agent, void *addr, size_t len)
{
    return -XTQ_ENOAGENT;
}

int xtq_cuda_quiesce(xtq_agent_t *agent, void (*fn)(void *arg), void *arg)
{
    return -XTQ_ENOAGENT;
}

#endif /* XTQ_HAVE_CUDA_AGENT */
