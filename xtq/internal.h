/*
 * The internal common header: every .c file of libxtq includes it first.
 * container_of, ARRAY_SIZE, static asserts, branch hints, logging, and the
 * structures shared across files (signal, queue, agent, kernel objects).
 */
#ifndef XTQ_INTERNAL_H
#define XTQ_INTERNAL_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

#include <xtq/xtq.h>

#define container_of(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))
#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define XTQ_STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)
#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
#define XTQ_CACHELINE 64
#define XTQ_ALIGN_UP(x, a) (((x) + ((a)-1)) & ~((__typeof__(x))(a)-1))
#define XTQ_UNUSED __attribute__((unused))

/* ---- logging ---------------------------------------------------------- */

enum xtq__log_level {
    XTQ__LOG_ERROR = 0,
    XTQ__LOG_WARN = 1,
    XTQ__LOG_INFO = 2,
    XTQ__LOG_DEBUG = 3,
    XTQ__LOG_TRACE = 4,
};

/* X(id, name) */
#define XTQ__SUBSYS_LIST(X)                                                                \
    X(CORE, "core")                                                                        \
    X(REGISTRY, "registry")                                                                \
    X(ENGINE, "engine")                                                                    \
    X(OFI, "ofi")                                                                          \
    X(AGENT, "agent")                                                                      \
    X(CPU, "cpu")                                                                          \
    X(CUDA, "cuda")                                                                        \
    X(ROCR, "rocr")                                                                        \
    X(MPI, "mpi")

#define XTQ__SUBSYS_ENUM_(id, name) XTQ__SUBSYS_##id,
enum xtq__subsys { XTQ__SUBSYS_LIST(XTQ__SUBSYS_ENUM_) XTQ__SUBSYS_COUNT };
#undef XTQ__SUBSYS_ENUM_

/* Per-subsystem threshold: a message is printed when level <= threshold.
 * Filled from XTQ_LOG_LEVEL / XTQ_LOG_SUBSYS on first use. */
extern _Atomic int xtq__log_threshold[XTQ__SUBSYS_COUNT]; /* read by any thread */
void xtq__log_init(void);
void xtq__log_emit(enum xtq__subsys subsys, enum xtq__log_level level, const char *file,
                   int line, const char *fmt, ...) __attribute__((format(printf, 5, 6)));

#define XTQ_LOG(subsys, level, ...)                                                         \
    do {                                                                                    \
        if (unlikely((int)(XTQ__LOG_##level) <= xtq__log_threshold[XTQ__SUBSYS_##subsys])) \
            xtq__log_emit(XTQ__SUBSYS_##subsys, XTQ__LOG_##level, __FILE__, __LINE__,       \
                          __VA_ARGS__);                                                     \
    } while (0)

/* Data-path form: logs the first time only (per call site). */
#define XTQ_LOG_ONCE(subsys, level, ...)                                                    \
    do {                                                                                    \
        static atomic_int xtq_once_;                                                        \
        if (unlikely((int)(XTQ__LOG_##level) <= xtq__log_threshold[XTQ__SUBSYS_##subsys]) && \
            atomic_exchange_explicit(&xtq_once_, 1, memory_order_relaxed) == 0)             \
            xtq__log_emit(XTQ__SUBSYS_##subsys, XTQ__LOG_##level, __FILE__, __LINE__,       \
                          __VA_ARGS__);                                                     \
    } while (0)

#define xtq_err(subsys, ...) XTQ_LOG(subsys, ERROR, __VA_ARGS__)
#define xtq_warn(subsys, ...) XTQ_LOG(subsys, WARN, __VA_ARGS__)
#define xtq_info(subsys, ...) XTQ_LOG(subsys, INFO, __VA_ARGS__)
#define xtq_dbg(subsys, ...) XTQ_LOG(subsys, DEBUG, __VA_ARGS__)

/* ---- parameters (xtq/params.def) ------------------------------------- */

#define X(name, type, def, help) XTQ__PARAM_##name,
enum xtq__param_id {
#include "params.def"
    XTQ__PARAM_COUNT
};
#undef X

/* Typed readers; an unparsable value logs a warning and yields the default. */
int64_t xtq__param_int(enum xtq__param_id id);
uint64_t xtq__param_size(enum xtq__param_id id);
bool xtq__param_bool(enum xtq__param_id id);
const char *xtq__param_string(enum xtq__param_id id);
/* An INT parameter counted in units of `unit_ns` (1000000 for _MS), in ns:
 * negative is 0, saturated at UINT64_MAX. */
uint64_t xtq__param_ns(enum xtq__param_id id, uint64_t unit_ns);

/* ---- time ------------------------------------------------------------- */

uint64_t xtq__now_ns(void); /* CLOCK_MONOTONIC */
/* The deadline `ns` from now, saturated at UINT64_MAX (none): a large
 * timeout must not wrap into one that has already passed. */
uint64_t xtq__deadline_ns(uint64_t ns);
/* A public timeout (XTQ_TIMEOUT_INFINITE, or ns; negative: due now) for
 * xtq__deadline_ns. */
static inline uint64_t xtq__timeout_ns(int64_t timeout_ns)
{
    return timeout_ns == XTQ_TIMEOUT_INFINITE ? UINT64_MAX
           : timeout_ns < 0                   ? 0
                                              : (uint64_t)timeout_ns;
}
/* a * b, saturated at UINT64_MAX (parameters scaled to ns or bytes). */
static inline uint64_t xtq__mul_sat(uint64_t a, uint64_t b)
{
    uint64_t r;
    return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

static inline void xtq__cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield" ::: "memory");
#endif
}

/* Futex helpers on a 32-bit word (Linux). */
int xtq__futex_wait(_Atomic uint32_t *addr, uint32_t expected, int64_t timeout_ns);
void xtq__futex_wake(_Atomic uint32_t *addr, int count);
/* xtq_completion_t.state: a thread sleeps on the word (nic-emul/initiator.c). */
#define XTQ__COMPLETION_SLEEPER (1u << 31)
/* ... the put may finish through the target's completion word (notify.c). */
#define XTQ__COMPLETION_NOTIFY (1u << 30)

/*
 * Spin, then sleep (util.c): the one way libxtq waits for a condition that
 * another thread makes true. Poll `ready` for up to spin_ns (a hand-off
 * within the spin costs no wake-up), then sleep on the futex word `word`,
 * which the waker changes (or, for a bit word, sets bits in) whenever the
 * condition may have changed. The waker makes the system call only when
 * somebody sleeps, and learns it either from a count (`waiters`: the
 * sleeper increments it before its last check) or from a bit of the word
 * itself (`sleeper_bit`: set with a read-modify-write, as completion words
 * do), or from what `enlist` records. Give one of the three. `ready` may
 * do work itself (a progress turn)
 * and is called again after every wake-up.
 */
struct xtq__spin_wait {
    bool (*ready)(void *arg);
    void *arg;
    _Atomic uint32_t *word;
    _Atomic uint32_t *waiters;
    uint32_t sleeper_bit;
    /* Instead of `waiters`: how a sleeper announces itself, and leaves
     * (signals: with the condition it waits for, signal.c). */
    void (*enlist)(void *arg);
    void (*delist)(void *arg);
    uint64_t spin_ns; /* 0: sleep at once */
    /* Longest single sleep, or XTQ_TIMEOUT_INFINITE: bounded where a
     * waker cannot wake futexes (a GPU changes the condition). */
    int64_t nap_ns;
};
/* 0: ready while spinning; 1: ready after a sleep; -XTQ_ETIMEDOUT once the
 * deadline (ns, xtq__now_ns; UINT64_MAX: none) has passed. */
int xtq__spin_wait(const struct xtq__spin_wait *w, uint64_t deadline);
/* The spin alone: poll `ready` for up to spin_ns, the clock read every 64
 * polls (it costs as much as a poll). Whether it became ready. */
bool xtq__spin_until(bool (*ready)(void *arg), void *arg, uint64_t spin_ns);

/*
 * Data-path mutexes (the transport, the put window, the ack queue, the live
 * tasks): xtq__mutex_init gives them the kind XTQ_MUTEX chose (util.c),
 * xtq__mutex_lock takes one. "spin": a plain mutex that contenders poll for
 * up to xtq__lock_spin_ns before sleeping; "adaptive": glibc's adaptive
 * mutex, which spins a bounded number of times itself.
 */
extern _Atomic uint64_t xtq__lock_spin_ns;
/* Read XTQ_MUTEX and set the spin from the spin policy; before the first
 * xtq__mutex_init. */
void xtq__mutex_configure(uint64_t spin_ns);
void xtq__mutex_init(pthread_mutex_t *m);
void xtq__mutex_lock(pthread_mutex_t *m);
/* Spin policy (util.c): cores this rank can use, and a spin parameter
 * resolved ("auto" = -1) for that many cores. */
#define XTQ__SPIN_MIN_CORES 3
unsigned xtq__cores_per_rank(unsigned local_ranks);
uint64_t xtq__spin_ns(enum xtq__param_id id, unsigned local_ranks, int64_t roomy_us,
                      int64_t tight_us);

/* ---- signals ------------------------------------------------------------
 * value is first so a device can decrement it with one 64-bit atomic.
 * Waiters register, then sleep on the futex word `seq`, which every
 * host-side change bumps. A sleeper registers its condition where it can
 * (`cond_*`: one condition shared by every sleeper that waits for the
 * same), and a change wakes them only when its new value meets it: a
 * signal that counts down a batch wakes its waiter once, not at every
 * task. A sleeper with another condition counts in `waiters`, and every
 * change wakes it. A signal changed by a device that cannot wake futexes
 * has XTQ__SIGNAL_DEVICE set: its waiters sleep in short bounded naps
 * instead of indefinitely. */
enum { XTQ__SIGNAL_DEVICE = 1u << 0, XTQ__SIGNAL_EXTERNAL_MEM = 1u << 1 };
/* How long a waiter on a device-changed signal polls before its first nap:
 * a GPU agent raises it when it opens (xtq__spin_ns policy: long where each
 * rank has cores to spare), never lowers it. */
void xtq__device_signal_spin_raise(uint64_t ns);
uint64_t xtq__device_signal_spin_ns(void);

/* ---- references --------------------------------------------------------
 * Kernels, functions and signals count what names them: each registration
 * (lookup-table entry) and each task the engine enqueued until it retires.
 * Destroy refuses (-XTQ_EBUSY) while any is left, and marks the object
 * dead so that nothing registers it again (issue 10, bug 2). */
#define XTQ__REFS_DEAD (1u << 31)

/* Take a reference: 0, or -XTQ_EINVAL if the object was destroyed. */
static inline int xtq__refs_get(_Atomic uint32_t *refs)
{
    uint32_t v = atomic_load_explicit(refs, memory_order_relaxed);
    do {
        if (v & XTQ__REFS_DEAD)
            return -XTQ_EINVAL;
    } while (!atomic_compare_exchange_weak_explicit(refs, &v, v + 1, memory_order_acq_rel,
                                                    memory_order_relaxed));
    return 0;
}

static inline void xtq__refs_put(_Atomic uint32_t *refs)
{
    atomic_fetch_sub_explicit(refs, 1, memory_order_release);
}

/* Destroy's check: 0 (no reference left; now dead) or -XTQ_EBUSY. */
static inline int xtq__refs_kill(_Atomic uint32_t *refs)
{
    uint32_t zero = 0;
    return atomic_compare_exchange_strong_explicit(refs, &zero, XTQ__REFS_DEAD,
                                                   memory_order_acq_rel, memory_order_acquire)
               ? 0
               : -XTQ_EBUSY;
}

/* Undo xtq__refs_kill() when the destroy itself failed. */
static inline void xtq__refs_revive(_Atomic uint32_t *refs)
{
    atomic_store_explicit(refs, 0, memory_order_release);
}

struct xtq_signal {
    _Atomic int64_t value;
    _Atomic uint32_t seq;
    _Atomic uint32_t waiters;
    uint32_t flags;
    uint32_t magic;
    /* Host-side changes in progress: destroy waits for it to drain, so a
     * waiter may destroy the signal as soon as it sees the new value. */
    _Atomic uint32_t busy;
    _Atomic uint32_t refs;     /* registrations, queued tasks and armed puts naming it */
    _Atomic uint32_t watchers; /* armed puts: a host-side change kicks their engines */
    _Atomic uint32_t cond_waiters; /* sleepers waiting for cond_kind/cond_compare */
    _Atomic uint32_t cond_kind;    /* enum xtq_signal_condition */
    _Atomic uint32_t cond_lock;    /* joining the condition (signal.c) */
    _Atomic int64_t cond_compare;
    uint8_t pad_[8];
};
XTQ_STATIC_ASSERT(sizeof(struct xtq_signal) == 64, "signal is one cache line");
#define XTQ__SIGNAL_MAGIC 0x5851534eu

/* A signal an armed put watches changed on the host (signal.c): the
 * engines with armed puts evaluate them (nic-emul/initiator.c). */
void xtq__triggers_kick(void);

/* Initialise a signal in memory the caller owns (an agent's device-visible
 * pool, say); xtq_signal_destroy() will not free it. */
void xtq__signal_init_at(struct xtq_signal *sig, int64_t initial, uint32_t flags);
/* Wake waiters after a change made without xtq_signal_store/add. */
void xtq__signal_notify(struct xtq_signal *sig);
/* Threads asleep on the signal, whatever they wait for (tests). */
uint32_t xtq__signal_sleepers(const struct xtq_signal *sig);
/* Futex wake-ups the changes of every signal have made (tests). */
uint64_t xtq__signal_wakeups(void);

/* ---- kernel and function objects --------------------------------------
 * Back-ends embed these first and recover themselves with container_of. */
struct xtq_kernel {
    xtq_agent_t *agent;
    uint64_t object; /* what kernel_object holds after the rewrite */
    uint32_t kernarg_size;
    uint32_t flags;
    _Atomic uint32_t refs; /* registrations and queued tasks; zero at creation */
};

struct xtq_function {
    xtq_agent_t *agent;
    uint64_t object; /* what reserved2 holds after the rewrite */
    _Atomic uint32_t refs; /* registrations and queued tasks; zero at creation */
};

/* ---- completion counters (counter.c) ----------------------------------
 * The engine's side of xtq_counter_t: a put that names a counter attaches
 * when it is issued and completes into it once, when it is DONE (after the
 * completion object, if any, is final). */
void xtq__counter_attach(xtq_counter_t *counter);
void xtq__counter_complete(xtq_counter_t *counter, int status);

/* ---- the running CPU task (kernel.c) ----------------------------------
 * A CPU agent's worker enters this around each kernel (all its work-groups)
 * or function it runs, so that the task can reach its result buffer
 * (xtq_task_result) and fail itself (xtq_task_fail). Thread-local. */
struct xtq__task_state {
    void *result;
    size_t result_len;
    const void *payload;
    size_t payload_len;
    int status; /* the first xtq_task_fail(), else 0 */
};
/* Enter returns the task this thread was running (NULL if none), for
 * leave to restore: a short task may run inside a progress turn that a
 * task's own wait took (XTQ_REGISTER_SHORT). */
struct xtq__task_state *xtq__task_enter(struct xtq__task_state *st);
void xtq__task_leave(struct xtq__task_state *prev);

/* ---- queues ----------------------------------------------------------
 * Indices and the ring live where the agent's consumer can read them
 * (host memory for the CPU agent, pinned/mapped memory for a GPU). */
struct xtq__queue_indices {
    _Atomic uint64_t write_index;
    uint8_t pad0_[XTQ_CACHELINE - 8];
    _Atomic uint64_t read_index;
    uint8_t pad1_[XTQ_CACHELINE - 8];
};

/* What a queue slot holds beside its packet for the task: a fetching
 * put's result buffer, and the payload that came with the put (for
 * xtq_task_result() and xtq_task_payload(); NULL, 0: none). */
struct xtq__result_buf {
    void *buf;
    uint64_t len;
    const void *payload;
    uint64_t payload_len;
};

/* Called by the agent when a packet that carried a cookie has finished
 * (status 0, a negative XTQ error if the agent could not run it, or the
 * status the task failed itself with: xtq_task_fail()).
 * Runs on the agent's thread: must be short and thread-safe. */
typedef void (*xtq__retire_fn)(void *cookie, int status);

struct xtq_queue {
    xtq_aql_packet_t *ring;
    uint32_t size;
    uint32_t mask;
    struct xtq__queue_indices *idx;
    xtq_signal_t *doorbell;
    xtq_agent_t *agent;
    /* Producers that want to hear of completion put a cookie here before
     * publishing; the agent copies it when it takes the packet, then calls
     * retire(cookie, status) when the packet has finished. NULL: nothing. */
    void **cookies;
    xtq__retire_fn retire;
    /* Beside each cookie, the task's result buffer (struct xtq__enqueue),
     * under the same rules (queue_int.h); a consumer that gives tasks
     * their result buffer takes it with the cookie. */
    struct xtq__result_buf *results;
    _Atomic uint32_t registrations; /* lookup-table entries naming it */
    uint32_t id;
    /* Where producers and the agent find the indices. xtq_queue_create()
     * points them at &idx->write_index / &idx->read_index when the agent
     * left them NULL; a hardware queue whose runtime lays out its own
     * indices (ROCr: amd_queue_t write/read_dispatch_id) sets them itself.
     * Generic queue code goes through these, not through idx. */
    _Atomic uint64_t *write_index;
    _Atomic uint64_t *read_index;
    /* Optional (NULL: none). Called by xtq_queue_publish() on the producer's
     * thread after the slot's body is written and before its header is
     * stored: a hardware queue swaps XTQ completion signals and cookies for
     * its runtime's own signals here (ROCr agent). */
    void (*prepare)(xtq_queue_t *queue, uint64_t index, xtq_aql_packet_t *slot);
};

/* ---- agents (hsa-glue/) ---------------------------------------------
 * One const operations table per kind; every slot filled (unsupported ones
 * return -XTQ_ENOSYS). */

/* One rewritten packet on its way into a queue (the engine's step 6, Fig.
 * 4): what the agent needs to place it, and whom to tell when it finished. */
struct xtq__enqueue {
    const xtq_aql_packet_t *packet; /* rewritten; bytes 0..3 are published last */
    /* Where the kernel arguments and the payload landed (the receive
     * region, or a copy), and their lengths; NULL and 0 when absent. */
    const void *kernarg;
    uint32_t kernarg_len;
    const void *payload;
    uint64_t payload_len;
    /*
     * A fetching put (xtq_put_param_t.result): result_len bytes that the
     * producer allocated zero-filled in host memory every agent of the
     * context can reach (xtq__agents_mem_register), valid until retire
     * has returned; NULL and 0 for other tasks. The agent hands it to the
     * task (CUDA: xtq_cuda_dispatch_t.result and result_len, all work-
     * groups of the dispatch share it; CPU: xtq_task_result()). Whatever
     * the task wrote is visible to the thread that calls retire(cookie,
     * status) before the call, so retire may send it back at once. The
     * agent never reads or frees it. An agent whose tasks cannot reach a
     * result buffer refuses the enqueue with -XTQ_ENOSYS, nothing written
     * (the engine fails the put with that status). Puts bound the length
     * (xtq_put_max_size()); an agent may refuse more than it can describe
     * with -XTQ_EINVAL (CUDA: 4 GiB).
     */
    void *result;
    uint64_t result_len;
    /*
     * On one host (XTQ_DIRECT_COMPLETION, nic-emul/notify.c): the
     * initiator's completion word, in host memory every agent of the
     * context can reach, or NULL. An agent that can may store
     * ((uint64_t)(uint32_t)status << 32) | notify_tag there itself,
     * ordered after the task's writes, as soon as the task finished; retire
     * stores the same value later in any case, so an agent may ignore it
     * (CPU, ROCr). Given only for packets without a completion signal (the
     * signal's decrement must come first, and where the host decrements
     * it, after the device's completion).
     */
    _Atomic uint64_t *notify;
    uint32_t notify_tag;
    /* retire(cookie, status) runs on the agent's thread when the packet
     * has finished. The same retire for every packet of a queue. */
    xtq__retire_fn retire;
    void *cookie;
    uint64_t trace_key; /* XTQ_TRACE_KEY() of the put, for the stage trace */
    /* The registration is XTQ_REGISTER_SHORT: the agent may run the task
     * on the calling thread (the engine's progress turn) instead of
     * queueing it, where its queue's order allows; retire has then been
     * called when enqueue returns 0. Agents that cannot ignore it. */
    bool run_here;
};

struct xtq__agent_ops {
    const char *name;
    int (*queue_create)(xtq_agent_t *agent, uint32_t size, xtq_queue_t **queue);
    int (*queue_destroy)(xtq_queue_t *queue);
    /* Write one packet into `queue` and make it visible: reserve a slot,
     * write the body, attach the retire cookie, publish, ring the
     * doorbell. 0, or -XTQ_EAGAIN when the queue is full (nothing
     * written). Once it returns 0 the packet may have run and retired.
     * Most agents use xtq__queue_enqueue (queue_int.h). */
    int (*enqueue)(xtq_queue_t *queue, const struct xtq__enqueue *desc);
    /* Wake the agent's packet processor for `queue` after a doorbell store. */
    void (*doorbell)(xtq_queue_t *queue, uint64_t index);
    int (*kernel_destroy)(xtq_kernel_t *kernel);
    int (*function_destroy)(xtq_function_t *function);
    /* Make host memory (receive regions) reachable by the agent's device.
     * Callers outside hsa-glue/ use xtq__agents_mem_register. */
    int (*mem_register)(xtq_agent_t *agent, void *addr, size_t len);
    int (*mem_deregister)(xtq_agent_t *agent, void *addr, size_t len);
    /* Stop workers, free everything. */
    void (*close)(xtq_agent_t *agent);
    /* XTQ_AGENT_RETIRE=engine: called in every engine turn, retire the
     * packets the device has finished, on the calling thread, unless
     * another thread is retiring them now. While packets are pending the
     * caller thereby claims the retiring: the agent's own thread leaves it
     * alone until the caller releases the claim, or has not polled for a
     * while. Returns the number retired; -XTQ_ENOSYS where the agent's own
     * threads always retire (xtq__agent_retire_poll_none: asked once, at
     * open, and never polled). */
    int (*retire_poll)(xtq_agent_t *agent);
    /* The thread that polled is about to sleep: the agent's own thread
     * retires from now on (xtq__agent_retire_release_none: nothing). */
    void (*retire_release)(xtq_agent_t *agent);
};

struct xtq_agent {
    const struct xtq__agent_ops *ops;
    enum xtq_agent_kind kind;
    xtq_ctx_t *ctx;
    xtq_agent_info_t info;
};

/* One per kind, indexed by kind (libfabric hmem pattern). */
struct xtq__agent_provider {
    enum xtq_agent_kind kind;
    const char *name;
    /* 0 if usable here; else -XTQ_ENOAGENT and a reason. Loads runtimes
     * with dlopen; never fails the build or the process. */
    int (*probe)(char *reason, size_t reason_len, unsigned *device_count);
    int (*open)(xtq_ctx_t *ctx, unsigned device_index, xtq_agent_t **agent);
};
extern const struct xtq__agent_provider xtq__cpu_agent_provider;
extern const struct xtq__agent_provider xtq__cuda_agent_provider;
/* The GPU clock (ns) at each stage of the CUDA processor's last kernel
 * dispatch (cuda_abi.h, prof[]); for benchmarks. */
int xtq__cuda_profile(xtq_agent_t *agent, uint64_t out[8]);
/* The CUDA agent's enqueue operation, for tests and benchmarks that need
 * the packet's index (to read its completion word): 0, -XTQ_EAGAIN
 * (full), -XTQ_EINVAL (a result buffer over 4 GiB). */
int xtq__cuda_enqueue(xtq_queue_t *queue, const struct xtq__enqueue *d, uint64_t *index);
/* A CUDA queue's completion word for packet `index` (cuda_abi.h), for a
 * benchmark that reads it without the retire thread. */
const _Atomic uint64_t *xtq__cuda_done_word(xtq_queue_t *queue, uint64_t index);
/* Benchmarks and tests: change a processor setting at run time. */
enum xtq__cuda_knob { XTQ__CUDA_KNOB_COMPLETE, XTQ__CUDA_KNOB_GRID_MIN };
int xtq__cuda_tune(xtq_agent_t *agent, enum xtq__cuda_knob knob, uint32_t value);
/* XTQ__CUDA_CAP_* of the running processor (cuda_abi.h). */
uint32_t xtq__cuda_caps(xtq_agent_t *agent);
/* Dispatches run on a launched grid, and launches refused. */
int xtq__cuda_grid_stats(xtq_agent_t *agent, uint64_t out[2]);
/* Idle exit (XTQ_CUDA_IDLE_EXIT_US): the processor's state
 * (XTQ__CUDA_PROC_*, or -XTQ_ENOSYS when none was launched) and the
 * relaunches so far. */
int xtq__cuda_idle_stats(xtq_agent_t *agent, uint32_t *state, uint64_t *relaunches);
/* Packets retired so far by engine turns (XTQ_AGENT_RETIRE=engine) and by
 * the agent's retire thread. */
int xtq__cuda_retire_stats(xtq_agent_t *agent, uint64_t *by_engine, uint64_t *by_thread);
extern const struct xtq__agent_provider xtq__rocr_agent_provider;

/* hsa-glue/agent.c: open every available agent into the context. */
int xtq__agents_open(xtq_ctx_t *ctx);
void xtq__agents_close(xtq_ctx_t *ctx);
/* Make host memory readable by every agent of the context in place (the
 * engine's receive regions: tasks read their arguments and payload where
 * they landed). All or nothing: on failure, logged with the agent's name,
 * none keeps it registered. */
int xtq__agents_mem_register(xtq_ctx_t *ctx, void *addr, size_t len);
void xtq__agents_mem_deregister(xtq_ctx_t *ctx, void *addr, size_t len);
/* nic-emul/progress.c: whether this thread is taking a progress turn of
 * any plane of `ctx`: a task running in it cannot wait for the put window
 * (initiator.c), which a peer's plane may free only once this one moves
 * on; a GPU agent's enqueue in it can count on the turns to retire. */
bool xtq__ctx_in_turn(const xtq_ctx_t *ctx);
/* Engine turns: retire what the agents that let engine threads retire
 * (XTQ_AGENT_RETIRE=engine, ops->retire_poll) have finished; returns the
 * number retired. Before a progress thread sleeps: release those claims. */
int xtq__agents_retire_poll(xtq_ctx_t *ctx);
void xtq__agents_retire_release(xtq_ctx_t *ctx);
/* The retire operations of an agent whose own threads retire. */
int xtq__agent_retire_poll_none(xtq_agent_t *agent);
void xtq__agent_retire_release_none(xtq_agent_t *agent);

/* ---- the context ------------------------------------------------------ */

#define XTQ__MAX_AGENTS 64

struct xtq__registry;  /* xtq/registry/registry.h */
struct xtq__engine;    /* xtq/nic-emul/engine.h */
struct xtq__bootstrap; /* xtq/bootstrap.h */

/* Counters updated with relaxed atomics; snapshot by xtq_query_stats()
 * (xtq_get_stats() takes the first version's). Not the public layout: each
 * byte counter sits beside the counter it moves with. */
struct xtq__stats {
    _Atomic uint64_t puts_issued;
    _Atomic uint64_t payload_bytes_sent;
    _Atomic uint64_t puts_completed;
    _Atomic uint64_t puts_failed;
    _Atomic uint64_t msgs_received;
    _Atomic uint64_t tasks_enqueued;
    _Atomic uint64_t payload_bytes_received;
    _Atomic uint64_t tasks_completed;
    _Atomic uint64_t msgs_rejected;
    _Atomic uint64_t acks_sent;
    _Atomic uint64_t queue_full_events;
    _Atomic uint64_t rejected_by_reason[XTQ_STATS_REJECT_SLOTS];
    _Atomic uint64_t puts_completed_direct;
    _Atomic uint64_t puts_via_inbox;
};
#define XTQ__STAT_INC(ctx, field) atomic_fetch_add_explicit(&(ctx)->stats.field, 1, memory_order_relaxed)
#define XTQ__STAT_ADD(ctx, field, n)                                                               \
    atomic_fetch_add_explicit(&(ctx)->stats.field, (n), memory_order_relaxed)
/* A command rejected with `err`: msgs_rejected and its reason's slot
 * (context.c). The engine counts every rejection, wire-level ones too,
 * through this. */
void xtq__stats_rejected(xtq_ctx_t *ctx, int err);

#define XTQ__PLANES_MAX 16
struct xtq_ctx {
    int rank;
    int size;
    unsigned local_ranks; /* ranks on this host, for the spin policy */
    uint64_t job_key;
    enum xtq_progress_mode progress;
    xtq_agent_t *agents[XTQ__MAX_AGENTS];
    unsigned nagents;
    /* The agents whose finished packets engine turns retire (set before
     * the engines start, read by their threads). */
    xtq_agent_t *retire_agents[XTQ__MAX_AGENTS];
    unsigned nretire_agents;
    int kind_status[XTQ_AGENT_KIND_COUNT];
    char kind_reason[XTQ_AGENT_KIND_COUNT][160];
    struct xtq__registry *registry;
    /* The engine's planes (XTQ_PROGRESS_THREADS), each an endpoint and a
     * progress thread; `engine` is this rank's own, planes[rank % nplanes],
     * which carries every put this rank makes and their acks. The others
     * only receive puts (from ranks of their index mod nplanes) and ack
     * them. */
    struct xtq__engine *engine;
    struct xtq__engine *planes[XTQ__PLANES_MAX];
    unsigned nplanes;
    struct xtq__bootstrap *bootstrap;
    struct xtq__stats stats;
};
#include "trace.h" /* XTQ_TRACE_POINT() for the data path */
#endif /* XTQ_INTERNAL_H */
