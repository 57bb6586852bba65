/*
 * ROCr agent: AMD GPUs through the HSA runtime (paper Section IV).
 *
 * The runtime is loaded with dlopen, so one build runs with or without AMD
 * GPUs. A ROCr queue is a hardware AQL queue (hsa_queue_create): its ring,
 * its write/read indices (amd_queue_t write_dispatch_id / read_dispatch_id)
 * and its doorbell signal are handed to the generic queue code, so the
 * engine reserves, writes, publishes and rings with no host thread between
 * the receive and the doorbell.
 *
 * Completion: the command processor can only decrement HSA signals, never
 * an xtq_signal. The queue's prepare hook (run by the producer before the
 * header store) swaps the packet's completion signal for an HSA signal from
 * a per-queue pool; an hsa_amd_signal_async_handler on that signal mirrors
 * the completion into the registered xtq_signal (add -1) and calls the
 * queue's retire(cookie, status), which lets the engine recycle receive
 * space and acknowledge.
 */
#include "internal.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <unistd.h>

#include "hsa-glue/rocr_agent.h"
#include "queue_int.h"

#ifdef XTQ_HAVE_ROCR

#include <hsa/hsa.h>
#include <hsa/hsa_ext_amd.h>
#include <hsa/amd_hsa_queue.h>

/* Every packet type keeps completion_signal at byte 56, as in hsa.h. */
XTQ_STATIC_ASSERT(offsetof(hsa_kernel_dispatch_packet_t, completion_signal) == 56, "aql");
XTQ_STATIC_ASSERT(offsetof(hsa_barrier_and_packet_t, completion_signal) == 56, "aql");
XTQ_STATIC_ASSERT(offsetof(xtq_kernel_dispatch_packet_t, completion_signal) == 56, "aql");
XTQ_STATIC_ASSERT(offsetof(amd_queue_t, hsa_queue) == 0, "hsa_queue_t embedded first");
XTQ_STATIC_ASSERT(sizeof(hsa_signal_t) == sizeof(xtq_signal_handle_t), "signal handle");

/* ---- the runtime: one per process ------------------------------------- */

/* X(symbol): every HSA entry point the agent calls. */
#define ROCR_FN_LIST(X)                                                                    \
    X(hsa_init)                                                                            \
    X(hsa_shut_down)                                                                       \
    X(hsa_status_string)                                                                   \
    X(hsa_system_get_info)                                                                 \
    X(hsa_iterate_agents)                                                                  \
    X(hsa_agent_get_info)                                                                  \
    X(hsa_agent_iterate_regions)                                                           \
    X(hsa_region_get_info)                                                                 \
    X(hsa_memory_allocate)                                                                 \
    X(hsa_memory_free)                                                                     \
    X(hsa_queue_create)                                                                    \
    X(hsa_queue_destroy)                                                                   \
    X(hsa_queue_load_read_index_scacquire)                                                 \
    X(hsa_queue_add_write_index_screlease)                                                 \
    X(hsa_signal_create)                                                                   \
    X(hsa_signal_destroy)                                                                  \
    X(hsa_signal_store_screlease)                                                          \
    X(hsa_signal_silent_store_relaxed)                                                     \
    X(hsa_signal_wait_scacquire)                                                           \
    X(hsa_amd_signal_async_handler)                                                        \
    X(hsa_amd_memory_lock)                                                                 \
    X(hsa_amd_memory_unlock)                                                               \
    X(hsa_code_object_reader_create_from_file)                                             \
    X(hsa_code_object_reader_destroy)                                                      \
    X(hsa_executable_create_alt)                                                           \
    X(hsa_executable_destroy)                                                              \
    X(hsa_executable_load_agent_code_object)                                               \
    X(hsa_executable_freeze)                                                               \
    X(hsa_executable_get_symbol_by_name)                                                   \
    X(hsa_executable_symbol_get_info)

#define ROCR_FN_FIELD(sym) __typeof__(&sym) sym;
struct rocr_fns {
    ROCR_FN_LIST(ROCR_FN_FIELD)
};
#undef ROCR_FN_FIELD

#define ROCR_MAX_GPUS 16
#define ROCR_MAX_KERNELS 256
/* Completion signals a queue starts with; more are made when all are in
 * flight (each is a KFD event, of which a process has a few thousand). */
#define ROCR_SIGNALS_INITIAL 32u

struct rocr_kernel;

static struct {
    pthread_mutex_t lock;
    void *dl;
    struct rocr_fns fn;
    bool loaded;
    bool probed;
    int status;
    char reason[160];
    unsigned ngpus;
    hsa_agent_t gpus[ROCR_MAX_GPUS];
    /* Kernels by object, so the prepare hook can raise a packet's segment
     * sizes to what the code object needs (initiators cannot know them). */
    _Atomic(struct rocr_kernel *) kernels[ROCR_MAX_KERNELS];
} rocr = {.lock = PTHREAD_MUTEX_INITIALIZER};

#define HSA (&rocr.fn)

static const char *rocr_strstatus(hsa_status_t st)
{
    const char *s = NULL;

    if (rocr.fn.hsa_status_string == NULL || HSA->hsa_status_string(st, &s) != HSA_STATUS_SUCCESS ||
        s == NULL)
        return "unknown HSA status";
    return s;
}

unsigned xtq__rocr_symbol_count(void)
{
#define ROCR_FN_COUNT(sym) +1
    return 0 ROCR_FN_LIST(ROCR_FN_COUNT);
#undef ROCR_FN_COUNT
}

/* Caller holds rocr.lock. */
static int rocr_load_locked(char *reason, size_t reason_len)
{
    void *dl;
    const char *missing = NULL;

    if (rocr.loaded)
        return 0;
    dl = dlopen(XTQ__ROCR_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    if (dl == NULL) {
        snprintf(reason, reason_len, "%s", dlerror());
        goto err;
    }
#define ROCR_FN_RESOLVE(sym)                                                               \
    rocr.fn.sym = (__typeof__(rocr.fn.sym))dlsym(dl, #sym);                                \
    if (rocr.fn.sym == NULL && missing == NULL)                                            \
        missing = #sym;
    ROCR_FN_LIST(ROCR_FN_RESOLVE)
#undef ROCR_FN_RESOLVE
    if (missing != NULL) {
        snprintf(reason, reason_len, "%s lacks %s", XTQ__ROCR_LIBRARY, missing);
        goto err_close;
    }
    rocr.dl = dl;
    rocr.loaded = true;
    return 0;

err_close:
    memset(&rocr.fn, 0, sizeof(rocr.fn));
    dlclose(dl);
err:
    xtq_info(ROCR, "ROCr runtime not loaded: %s", reason);
    return -XTQ_ENOAGENT;
}

int xtq__rocr_load(char *reason, size_t reason_len)
{
    int rc;

    pthread_mutex_lock(&rocr.lock);
    rc = rocr_load_locked(reason, reason_len);
    pthread_mutex_unlock(&rocr.lock);
    return rc;
}

static hsa_status_t rocr_collect_gpu(hsa_agent_t agent, void *data)
{
    hsa_device_type_t type;

    (void)data;
    if (HSA->hsa_agent_get_info(agent, HSA_AGENT_INFO_DEVICE, &type) != HSA_STATUS_SUCCESS)
        return HSA_STATUS_SUCCESS;
    if (type == HSA_DEVICE_TYPE_GPU && rocr.ngpus < ROCR_MAX_GPUS)
        rocr.gpus[rocr.ngpus++] = agent;
    return HSA_STATUS_SUCCESS;
}

/* The first probe decides for the whole process: hsa_init is reference
 * counted, and the one reference taken here is held until exit so agents,
 * queues and executables of any context stay valid. */
static int rocr_probe(char *reason, size_t reason_len, unsigned *device_count)
{
    hsa_status_t st;
    int rc;

    pthread_mutex_lock(&rocr.lock);
    if (rocr.probed)
        goto out;
    rocr.probed = true;
    rocr.status = -XTQ_ENOAGENT;
    if (access("/dev/kfd", F_OK) != 0) {
        snprintf(rocr.reason, sizeof(rocr.reason), "no /dev/kfd (no AMD GPU driver)");
        goto out;
    }
    if (access("/dev/kfd", R_OK | W_OK) != 0) {
        snprintf(rocr.reason, sizeof(rocr.reason),
                 "/dev/kfd not accessible: %s (add the user to the render/video group)",
                 strerror(errno));
        goto out;
    }
    if (rocr_load_locked(rocr.reason, sizeof(rocr.reason)) != 0)
        goto out;
    st = HSA->hsa_init();
    if (st != HSA_STATUS_SUCCESS) {
        snprintf(rocr.reason, sizeof(rocr.reason), "hsa_init: %s", rocr_strstatus(st));
        goto out;
    }
    st = HSA->hsa_iterate_agents(rocr_collect_gpu, NULL);
    if (st != HSA_STATUS_SUCCESS) {
        snprintf(rocr.reason, sizeof(rocr.reason), "hsa_iterate_agents: %s",
                 rocr_strstatus(st));
        goto out_shut_down;
    }
    if (rocr.ngpus == 0) {
        snprintf(rocr.reason, sizeof(rocr.reason), "ROCr found no GPU agent");
        goto out_shut_down;
    }
    rocr.status = 0;
    rocr.reason[0] = '\0';
    goto out;

out_shut_down:
    rocr.ngpus = 0;
    HSA->hsa_shut_down();
out:
    if (rocr.status != 0)
        xtq_info(ROCR, "ROCr agent unavailable: %s", rocr.reason);
    if (reason != NULL && reason_len > 0)
        snprintf(reason, reason_len, "%s", rocr.reason);
    if (device_count != NULL)
        *device_count = rocr.ngpus;
    rc = rocr.status;
    pthread_mutex_unlock(&rocr.lock);
    return rc;
}

/* ---- objects ------------------------------------------------------------ */

struct rocr_agent {
    struct xtq_agent base;
    hsa_agent_t hsa;
    hsa_profile_t profile;
    hsa_region_t kernarg_region;
    bool has_kernarg_region;
    uint32_t queue_min;
    /* Host memory locked through mem_register and not unlocked yet: the
     * engine's receive regions outlive the agents at finalize, so close
     * unlocks what is left before its owner frees it. */
    pthread_mutex_t locked_lock;
    void **locked;
    uint32_t nlocked, locked_cap;
};

struct rocr_queue;

/* One in-flight completion: an HSA signal the command processor decrements
 * from 1 to 0, and what to tell when it does. */
struct rocr_sig {
    hsa_signal_t hsig;
    struct rocr_queue *q;
    void *cookie;
    xtq_signal_t *user;
    bool busy;
    struct rocr_sig *next; /* free list */
};

struct rocr_queue {
    struct xtq_queue base;
    struct rocr_agent *agent;
    hsa_queue_t *hq;
    pthread_mutex_t lock; /* free list, all[], armed */
    pthread_cond_t idle;
    struct rocr_sig *free;
    struct rocr_sig **all;
    uint32_t nall;
    uint32_t cap;
    uint32_t armed; /* async handlers registered and not yet finished */
    _Atomic int closing;
    _Atomic int error; /* set by the queue error callback */
};

struct rocr_kernel {
    struct xtq_kernel base;
    hsa_executable_t exec;
    uint32_t group_segment_size;
    uint32_t private_segment_size;
    uint32_t slot;
};

static const struct xtq__agent_ops rocr_agent_ops;

static struct rocr_agent *rocr_agent_of(xtq_agent_t *agent)
{
    if (agent == NULL || agent->ops != &rocr_agent_ops)
        return NULL;
    return container_of(agent, struct rocr_agent, base);
}

/* ---- completion signals --------------------------------------------------- */

/* Runs on the runtime's async-event thread when a signal drops below 1. */
static bool rocr_sig_handler(hsa_signal_value_t value, void *arg)
{
    struct rocr_sig *s = arg;
    struct rocr_queue *rq = s->q;
    int closing = atomic_load_explicit(&rq->closing, memory_order_acquire);
    int error = atomic_load_explicit(&rq->error, memory_order_acquire);
    xtq_signal_t *user;
    void *cookie;
    bool was_busy;
    int status;

    (void)value;
    pthread_mutex_lock(&rq->lock);
    was_busy = s->busy;
    cookie = s->cookie;
    user = s->user;
    s->busy = false;
    s->cookie = NULL;
    s->user = NULL;
    if (!closing) {
        /* Re-arm before the signal can be handed out again. */
        HSA->hsa_signal_silent_store_relaxed(s->hsig, 1);
        if (was_busy) {
            s->next = rq->free;
            rq->free = s;
        }
    }
    pthread_mutex_unlock(&rq->lock);

    if (was_busy) {
        status = closing ? -XTQ_ECANCELED : error ? -XTQ_EIO : 0;
        /* HSA semantics: a failed task does not decrement its signal. */
        if (user != NULL && status == 0)
            xtq_signal_add(user, -1);
        if (cookie != NULL && rq->base.retire != NULL)
            rq->base.retire(cookie, status);
    }
    if (!closing)
        return true; /* keep watching: the signal is reused */
    pthread_mutex_lock(&rq->lock);
    if (--rq->armed == 0)
        pthread_cond_broadcast(&rq->idle);
    pthread_mutex_unlock(&rq->lock);
    return false;
}

/* Caller holds rq->lock. */
static struct rocr_sig *rocr_sig_new_locked(struct rocr_queue *rq)
{
    struct rocr_sig *s = NULL, **all;
    hsa_status_t st;

    if (rq->nall == rq->cap) {
        uint32_t cap = rq->cap ? rq->cap * 2 : ROCR_SIGNALS_INITIAL;

        all = realloc(rq->all, cap * sizeof(*all));
        if (all == NULL) {
            xtq_err(ROCR, "out of memory growing the signal pool");
            goto err;
        }
        rq->all = all;
        rq->cap = cap;
    }
    s = calloc(1, sizeof(*s));
    if (s == NULL) {
        xtq_err(ROCR, "out of memory for a completion signal");
        goto err;
    }
    s->q = rq;
    st = HSA->hsa_signal_create(1, 0, NULL, &s->hsig);
    if (st != HSA_STATUS_SUCCESS) {
        xtq_err(ROCR, "hsa_signal_create: %s", rocr_strstatus(st));
        goto err_free;
    }
    st = HSA->hsa_amd_signal_async_handler(s->hsig, HSA_SIGNAL_CONDITION_LT, 1,
                                           rocr_sig_handler, s);
    if (st != HSA_STATUS_SUCCESS) {
        xtq_err(ROCR, "hsa_amd_signal_async_handler: %s", rocr_strstatus(st));
        goto err_destroy;
    }
    rq->armed++;
    rq->all[rq->nall++] = s;
    return s;

err_destroy:
    HSA->hsa_signal_destroy(s->hsig);
err_free:
    free(s);
err:
    return NULL;
}

static struct rocr_sig *rocr_sig_get(struct rocr_queue *rq)
{
    struct rocr_sig *s;

    pthread_mutex_lock(&rq->lock);
    s = rq->free;
    if (s != NULL)
        rq->free = s->next;
    else
        s = rocr_sig_new_locked(rq);
    if (s != NULL)
        s->busy = true;
    pthread_mutex_unlock(&rq->lock);
    return s;
}

/* An xtq_signal handle, or some other runtime's (an HSA signal a local
 * thread put there)? An amd_signal_t holds the high half of a user-space
 * pointer where xtq_signal keeps its magic, which no such pointer has. */
static xtq_signal_t *rocr_xtq_signal(uint64_t handle)
{
    struct xtq_signal *sig = (struct xtq_signal *)(uintptr_t)handle;

    if (handle == 0 || (handle & 7) != 0 || sig->magic != XTQ__SIGNAL_MAGIC)
        return NULL;
    return sig;
}

static const struct rocr_kernel *rocr_kernel_lookup(uint64_t object)
{
    for (unsigned i = 0; i < ROCR_MAX_KERNELS; i++) {
        struct rocr_kernel *k = atomic_load_explicit(&rocr.kernels[i], memory_order_acquire);

        if (k != NULL && k->base.object == object)
            return k;
    }
    return NULL;
}

/* Producer side, before the header store (xtq_queue_publish). */
static void rocr_prepare(xtq_queue_t *queue, uint64_t index, xtq_aql_packet_t *slot)
{
    struct rocr_queue *rq = container_of(queue, struct rocr_queue, base);
    uint64_t handle = slot->kernel.completion_signal.handle;
    void *cookie = NULL;
    xtq_signal_t *user = NULL;
    struct rocr_sig *s;

    if (queue->cookies != NULL) {
        cookie = queue->cookies[index & queue->mask];
        queue->cookies[index & queue->mask] = NULL;
    }
    /* The header is not stored yet, so the type is unknown here. Byte 32
     * is kernel_object in a kernel dispatch, a dependency signal in a
     * barrier: an HSA signal's address is never a live kernel descriptor's,
     * so only a kernel dispatch matches. (Agent dispatch packets do not run
     * on GPU queues.) */
    if (slot->kernel.kernel_object != 0) {
        const struct rocr_kernel *k = rocr_kernel_lookup(slot->kernel.kernel_object);

        if (k != NULL) {
            if (slot->kernel.group_segment_size < k->group_segment_size)
                slot->kernel.group_segment_size = k->group_segment_size;
            if (slot->kernel.private_segment_size < k->private_segment_size)
                slot->kernel.private_segment_size = k->private_segment_size;
        }
    }
    if (handle != 0) {
        user = rocr_xtq_signal(handle);
        if (user == NULL) {
            /* Already an HSA signal: the command processor handles it. */
            if (cookie != NULL)
                XTQ_LOG_ONCE(ROCR, WARN, "packet carries both an HSA signal and a retire "
                                         "cookie; the cookie is not retired");
            return;
        }
    }
    if (user == NULL && cookie == NULL)
        return;
    s = rocr_sig_get(rq);
    if (unlikely(s == NULL)) {
        XTQ_LOG_ONCE(ROCR, ERROR, "no completion signal: task runs, completion is lost");
        slot->kernel.completion_signal.handle = 0;
        return;
    }
    s->cookie = cookie;
    s->user = user;
    slot->kernel.completion_signal.handle = s->hsig.handle;
}

/* ---- queues --------------------------------------------------------------- */

static void rocr_queue_error(hsa_status_t status, hsa_queue_t *hq, void *data)
{
    struct rocr_queue *rq = data;

    xtq_err(ROCR, "queue %p failed: %s", (void *)hq, rocr_strstatus(status));
    if (rq == NULL)
        return;
    atomic_store_explicit(&rq->error, 1, memory_order_release);
    /* The command processor stopped: fail everything in flight. */
    pthread_mutex_lock(&rq->lock);
    for (uint32_t i = 0; i < rq->nall; i++)
        if (rq->all[i]->busy)
            HSA->hsa_signal_store_screlease(rq->all[i]->hsig, 0);
    pthread_mutex_unlock(&rq->lock);
}

static uint64_t rocr_timeout_ticks(uint64_t ns)
{
    uint64_t hz = 0;

    if (HSA->hsa_system_get_info(HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY, &hz) != HSA_STATUS_SUCCESS ||
        hz == 0)
        return UINT64_MAX;
    return ns / 1000u * (hz / 1000000u ? hz / 1000000u : 1u);
}

/* Push one barrier-AND through our own view of the queue (ring, index
 * pointers, doorbell) and check that the command processor saw it: proves
 * the amd_queue_t layout assumption before the engine relies on it. */
static int rocr_queue_selftest(struct rocr_queue *rq)
{
    xtq_queue_t *q = &rq->base;
    hsa_signal_t done;
    xtq_aql_packet_t *slot;
    uint64_t index, rd;
    hsa_signal_value_t v;
    hsa_status_t st;
    uint16_t header;
    int rc = -XTQ_EIO;

    st = HSA->hsa_signal_create(1, 0, NULL, &done);
    if (st != HSA_STATUS_SUCCESS) {
        xtq_err(ROCR, "hsa_signal_create: %s", rocr_strstatus(st));
        goto out;
    }
    index = atomic_fetch_add_explicit(q->write_index, 1, memory_order_acq_rel);
    slot = &q->ring[index & q->mask];
    memset((char *)slot + 4, 0, XTQ_AQL_PACKET_SIZE - 4);
    slot->barrier.completion_signal.handle = done.handle;
    header = xtq_aql_header(XTQ_PACKET_TYPE_BARRIER_AND, 1, XTQ_FENCE_SCOPE_SYSTEM,
                            XTQ_FENCE_SCOPE_SYSTEM);
    __atomic_store_n((uint32_t *)slot, header, __ATOMIC_RELEASE);
    HSA->hsa_signal_store_screlease(rq->hq->doorbell_signal, (hsa_signal_value_t)index);
    v = HSA->hsa_signal_wait_scacquire(done, HSA_SIGNAL_CONDITION_LT, 1,
                                       rocr_timeout_ticks(2000000000u), HSA_WAIT_STATE_BLOCKED);
    if (v >= 1) {
        xtq_err(ROCR, "self-test barrier did not complete: amd_queue_t layout differs");
        goto out_destroy;
    }
    rd = HSA->hsa_queue_load_read_index_scacquire(rq->hq);
    if (rd != index + 1 || atomic_load(q->read_index) != rd ||
        HSA->hsa_queue_add_write_index_screlease(rq->hq, 0) != index + 1) {
        xtq_err(ROCR, "queue indices disagree with the runtime (read %" PRIu64 ")", rd);
        goto out_destroy;
    }
    rc = 0;
out_destroy:
    HSA->hsa_signal_destroy(done);
out:
    return rc;
}

static void rocr_queue_release_signals(struct rocr_queue *rq)
{
    atomic_store_explicit(&rq->closing, 1, memory_order_release);
    pthread_mutex_lock(&rq->lock);
    /* Each handler sees `closing`, retires what it held, and unregisters. */
    for (uint32_t i = 0; i < rq->nall; i++)
        HSA->hsa_signal_store_screlease(rq->all[i]->hsig, 0);
    while (rq->armed > 0)
        pthread_cond_wait(&rq->idle, &rq->lock);
    pthread_mutex_unlock(&rq->lock);
    for (uint32_t i = 0; i < rq->nall; i++) {
        HSA->hsa_signal_destroy(rq->all[i]->hsig);
        free(rq->all[i]);
    }
    free(rq->all);
    rq->all = NULL;
    rq->nall = rq->cap = 0;
    rq->free = NULL;
}

static int rocr_queue_create(xtq_agent_t *agent, uint32_t size, xtq_queue_t **queue)
{
    struct rocr_agent *ra = rocr_agent_of(agent);
    struct rocr_queue *rq;
    amd_queue_t *aq;
    hsa_status_t st;
    int rc;

    if (ra == NULL || queue == NULL || size < 2 || (size & (size - 1)) != 0 ||
        size < ra->queue_min || size > agent->info.max_queue_size) {
        xtq_err(ROCR, "queue size %u not a power of two in [%u, %u]", size, ra ? ra->queue_min : 0,
                ra ? ra->base.info.max_queue_size : 0);
        rc = -XTQ_EINVAL;
        goto err;
    }
    rq = calloc(1, sizeof(*rq));
    if (rq == NULL) {
        xtq_err(ROCR, "out of memory for a queue");
        rc = -XTQ_ENOMEM;
        goto err;
    }
    rq->agent = ra;
    pthread_mutex_init(&rq->lock, NULL);
    pthread_cond_init(&rq->idle, NULL);
    rq->base.cookies = calloc(size, sizeof(void *));
    /* Generic producers write a result slot beside every cookie. */
    rq->base.results = calloc(size, sizeof(*rq->base.results));
    if (rq->base.cookies == NULL || rq->base.results == NULL) {
        xtq_err(ROCR, "out of memory for queue cookies");
        rc = -XTQ_ENOMEM;
        free(rq->base.cookies);
        free(rq->base.results);
        goto err_free;
    }
    /* A host mirror, so generic code may store into queue->doorbell; the
     * hardware doorbell is rung by rocr_doorbell(). */
    rc = xtq_signal_create(0, &rq->base.doorbell);
    if (rc != 0) {
        xtq_err(ROCR, "doorbell mirror: %s", xtq_strerror(rc));
        goto err_cookies;
    }
    st = HSA->hsa_queue_create(ra->hsa, size, HSA_QUEUE_TYPE_MULTI, rocr_queue_error, rq,
                               UINT32_MAX, UINT32_MAX, &rq->hq);
    if (st != HSA_STATUS_SUCCESS) {
        xtq_err(ROCR, "hsa_queue_create(%u): %s", size, rocr_strstatus(st));
        rc = st == HSA_STATUS_ERROR_OUT_OF_RESOURCES ? -XTQ_ENOMEM : -XTQ_EIO;
        goto err_doorbell;
    }
    /* ROCr's hsa_queue_t is the first member of its amd_queue_t, whose
     * dispatch ids are the queue's write and read indices. */
    aq = (amd_queue_t *)rq->hq;
    rq->base.ring = (xtq_aql_packet_t *)rq->hq->base_address;
    rq->base.size = rq->hq->size;
    rq->base.mask = rq->hq->size - 1;
    rq->base.idx = NULL;
    rq->base.write_index = (_Atomic uint64_t *)(uintptr_t)&aq->write_dispatch_id;
    rq->base.read_index = (_Atomic uint64_t *)(uintptr_t)&aq->read_dispatch_id;
    rq->base.prepare = rocr_prepare;
    rq->base.agent = agent;
    rc = rocr_queue_selftest(rq);
    if (rc != 0)
        goto err_queue;
    pthread_mutex_lock(&rq->lock);
    for (uint32_t i = 0; i < ROCR_SIGNALS_INITIAL && i < size; i++) {
        struct rocr_sig *s = rocr_sig_new_locked(rq);

        if (s == NULL)
            break;
        s->next = rq->free;
        rq->free = s;
    }
    pthread_mutex_unlock(&rq->lock);
    if (rq->free == NULL) {
        xtq_err(ROCR, "no completion signal could be created");
        rc = -XTQ_ENOMEM;
        goto err_signals;
    }
    *queue = &rq->base;
    return 0;

err_signals:
    rocr_queue_release_signals(rq);
err_queue:
    HSA->hsa_queue_destroy(rq->hq);
err_doorbell:
    xtq_signal_destroy(rq->base.doorbell);
err_cookies:
    free(rq->base.cookies);
    free(rq->base.results);
err_free:
    pthread_cond_destroy(&rq->idle);
    pthread_mutex_destroy(&rq->lock);
    free(rq);
err:
    return rc;
}

static int rocr_queue_destroy(xtq_queue_t *queue)
{
    struct rocr_queue *rq = container_of(queue, struct rocr_queue, base);
    hsa_status_t st;
    int rc = 0;

    /* The command processor stops first, so no signal changes under us. */
    st = HSA->hsa_queue_destroy(rq->hq);
    if (st != HSA_STATUS_SUCCESS) {
        xtq_err(ROCR, "hsa_queue_destroy: %s", rocr_strstatus(st));
        rc = -XTQ_EIO;
    }
    rocr_queue_release_signals(rq);
    xtq_signal_destroy(rq->base.doorbell);
    free(rq->base.cookies);
    free(rq->base.results);
    pthread_cond_destroy(&rq->idle);
    pthread_mutex_destroy(&rq->lock);
    free(rq);
    return rc;
}

static void rocr_doorbell(xtq_queue_t *queue, uint64_t index)
{
    struct rocr_queue *rq = container_of(queue, struct rocr_queue, base);

    HSA->hsa_signal_store_screlease(rq->hq->doorbell_signal, (hsa_signal_value_t)index);
}

/* ---- kernels -------------------------------------------------------------- */

static int rocr_kernel_destroy(xtq_kernel_t *kernel)
{
    struct rocr_kernel *k = container_of(kernel, struct rocr_kernel, base);
    hsa_status_t st;
    int rc = 0;

    atomic_store_explicit(&rocr.kernels[k->slot], NULL, memory_order_release);
    st = HSA->hsa_executable_destroy(k->exec);
    if (st != HSA_STATUS_SUCCESS) {
        xtq_err(ROCR, "hsa_executable_destroy: %s", rocr_strstatus(st));
        rc = -XTQ_EIO;
    }
    free(k);
    return rc;
}

static int rocr_function_destroy(xtq_function_t *function)
{
    (void)function;
    return -XTQ_ENOSYS; /* GPU agents run no agent-dispatch functions */
}

static int rocr_symbol_u32(hsa_executable_symbol_t sym, hsa_executable_symbol_info_t attr,
                           uint32_t *out)
{
    return HSA->hsa_executable_symbol_get_info(sym, attr, out) == HSA_STATUS_SUCCESS ? 0 : -1;
}

int xtq_kernel_create_rocr(xtq_agent_t *agent, const char *code_object_path, const char *symbol,
                           xtq_kernel_t **kernel)
{
    struct rocr_agent *ra = rocr_agent_of(agent);
    hsa_code_object_reader_t reader;
    hsa_executable_symbol_t sym;
    struct rocr_kernel *k;
    char kd_name[256];
    hsa_status_t st;
    int fd, rc;

    if (agent == NULL || code_object_path == NULL || symbol == NULL || kernel == NULL) {
        rc = -XTQ_EINVAL;
        goto err;
    }
    if (ra == NULL) {
        xtq_err(ROCR, "xtq_kernel_create_rocr on a %s agent", xtq_agent_kind_name(agent->kind));
        rc = -XTQ_EAGENTKIND;
        goto err;
    }
    k = calloc(1, sizeof(*k));
    if (k == NULL) {
        xtq_err(ROCR, "out of memory for a kernel");
        rc = -XTQ_ENOMEM;
        goto err;
    }
    fd = open(code_object_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        xtq_err(ROCR, "%s: %s", code_object_path, strerror(errno));
        rc = -XTQ_ENOENT;
        goto err_free;
    }
    st = HSA->hsa_code_object_reader_create_from_file(fd, &reader);
    if (st != HSA_STATUS_SUCCESS) {
        xtq_err(ROCR, "%s: hsa_code_object_reader_create_from_file: %s", code_object_path,
                rocr_strstatus(st));
        rc = -XTQ_EIO;
        goto err_close;
    }
    st = HSA->hsa_executable_create_alt(ra->profile, HSA_DEFAULT_FLOAT_ROUNDING_MODE_DEFAULT,
                                        NULL, &k->exec);
    if (st != HSA_STATUS_SUCCESS) {
        xtq_err(ROCR, "hsa_executable_create_alt: %s", rocr_strstatus(st));
        rc = -XTQ_EIO;
        goto err_reader;
    }
    st = HSA->hsa_executable_load_agent_code_object(k->exec, ra->hsa, reader, NULL, NULL);
    if (st != HSA_STATUS_SUCCESS) {
        xtq_err(ROCR, "%s: load for %s: %s (built for another ISA?)", code_object_path,
                agent->info.name, rocr_strstatus(st));
        rc = -XTQ_EIO;
        goto err_exec;
    }
    st = HSA->hsa_executable_freeze(k->exec, NULL);
    if (st != HSA_STATUS_SUCCESS) {
        xtq_err(ROCR, "hsa_executable_freeze: %s", rocr_strstatus(st));
        rc = -XTQ_EIO;
        goto err_exec;
    }
    st = HSA->hsa_executable_get_symbol_by_name(k->exec, symbol, &ra->hsa, &sym);
    if (st != HSA_STATUS_SUCCESS) {
        snprintf(kd_name, sizeof(kd_name), "%s.kd", symbol);
        st = HSA->hsa_executable_get_symbol_by_name(k->exec, kd_name, &ra->hsa, &sym);
    }
    if (st != HSA_STATUS_SUCCESS) {
        xtq_err(ROCR, "%s: no kernel %s (nor %s.kd)", code_object_path, symbol, symbol);
        rc = -XTQ_ENOENT;
        goto err_exec;
    }
    if (HSA->hsa_executable_symbol_get_info(sym, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT,
                                            &k->base.object) != HSA_STATUS_SUCCESS ||
        rocr_symbol_u32(sym, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE,
                        &k->base.kernarg_size) != 0 ||
        rocr_symbol_u32(sym, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE,
                        &k->group_segment_size) != 0 ||
        rocr_symbol_u32(sym, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_PRIVATE_SEGMENT_SIZE,
                        &k->private_segment_size) != 0) {
        xtq_err(ROCR, "%s: cannot read the attributes of kernel %s", code_object_path, symbol);
        rc = -XTQ_EIO;
        goto err_exec;
    }
    k->base.agent = agent;
    k->base.flags = 0;
    for (k->slot = 0; k->slot < ROCR_MAX_KERNELS; k->slot++) {
        struct rocr_kernel *none = NULL;

        if (atomic_compare_exchange_strong(&rocr.kernels[k->slot], &none, k))
            break;
    }
    if (k->slot == ROCR_MAX_KERNELS) {
        xtq_err(ROCR, "more than %u ROCr kernels", ROCR_MAX_KERNELS);
        rc = -XTQ_ENOSPC;
        goto err_exec;
    }
    /* The loaded executable keeps what it needs; the reader may go. */
    HSA->hsa_code_object_reader_destroy(reader);
    close(fd);
    xtq_dbg(ROCR, "kernel %s: object 0x%" PRIx64 " kernarg %u group %u private %u", symbol,
            k->base.object, k->base.kernarg_size, k->group_segment_size,
            k->private_segment_size);
    *kernel = &k->base;
    return 0;

err_exec:
    HSA->hsa_executable_destroy(k->exec);
err_reader:
    HSA->hsa_code_object_reader_destroy(reader);
err_close:
    close(fd);
err_free:
    free(k);
err:
    return rc;
}

/* ---- memory ---------------------------------------------------------------- */

static int rocr_mem_register(xtq_agent_t *agent, void *addr, size_t len)
{
    struct rocr_agent *ra = rocr_agent_of(agent);
    void *agent_ptr = NULL;
    hsa_status_t st;
    int rc;

    if (ra == NULL || addr == NULL || len == 0) {
        rc = -XTQ_EINVAL;
        goto err;
    }
    st = HSA->hsa_amd_memory_lock(addr, len, &ra->hsa, 1, &agent_ptr);
    if (st != HSA_STATUS_SUCCESS) {
        xtq_err(ROCR, "hsa_amd_memory_lock(%p, %zu): %s", addr, len, rocr_strstatus(st));
        rc = -XTQ_EIO;
        goto err;
    }
    /* The rewrite stores host addresses into packets and kernel arguments:
     * the GPU must see the memory at the same address. */
    if (agent_ptr != addr) {
        xtq_err(ROCR, "hsa_amd_memory_lock mapped %p at %p for the GPU; XTQ needs one address",
                addr, agent_ptr);
        rc = -XTQ_ENOSYS;
        goto err_unlock;
    }
    pthread_mutex_lock(&ra->locked_lock);
    if (ra->nlocked == ra->locked_cap) {
        uint32_t cap = ra->locked_cap ? ra->locked_cap * 2 : 16;
        void **l = realloc(ra->locked, cap * sizeof(*l));
        if (l == NULL) {
            pthread_mutex_unlock(&ra->locked_lock);
            rc = -XTQ_ENOMEM;
            goto err_unlock;
        }
        ra->locked = l;
        ra->locked_cap = cap;
    }
    ra->locked[ra->nlocked++] = addr;
    pthread_mutex_unlock(&ra->locked_lock);
    return 0;

err_unlock:
    HSA->hsa_amd_memory_unlock(addr);
err:
    return rc;
}

static int rocr_mem_deregister(xtq_agent_t *agent, void *addr, size_t len)
{
    struct rocr_agent *ra = rocr_agent_of(agent);
    hsa_status_t st;

    (void)len;
    if (ra == NULL || addr == NULL)
        return -XTQ_EINVAL;
    pthread_mutex_lock(&ra->locked_lock);
    for (uint32_t i = 0; i < ra->nlocked; i++)
        if (ra->locked[i] == addr) {
            ra->locked[i] = ra->locked[--ra->nlocked];
            break;
        }
    pthread_mutex_unlock(&ra->locked_lock);
    st = HSA->hsa_amd_memory_unlock(addr);
    if (st != HSA_STATUS_SUCCESS) {
        xtq_err(ROCR, "hsa_amd_memory_unlock(%p): %s", addr, rocr_strstatus(st));
        return -XTQ_EIO;
    }
    return 0;
}

int xtq_rocr_mem_register(xtq_agent_t *agent, void *addr, size_t len)
{
    if (agent != NULL && rocr_agent_of(agent) == NULL)
        return -XTQ_EAGENTKIND;
    return rocr_mem_register(agent, addr, len);
}

int xtq_rocr_mem_deregister(xtq_agent_t *agent, void *addr, size_t len)
{
    if (agent != NULL && rocr_agent_of(agent) == NULL)
        return -XTQ_EAGENTKIND;
    return rocr_mem_deregister(agent, addr, len);
}

int xtq_rocr_kernarg_alloc(xtq_agent_t *agent, size_t size, void **ptr)
{
    struct rocr_agent *ra = rocr_agent_of(agent);
    hsa_status_t st;

    if (agent == NULL || ptr == NULL || size == 0)
        return -XTQ_EINVAL;
    if (ra == NULL)
        return -XTQ_EAGENTKIND;
    if (!ra->has_kernarg_region)
        return -XTQ_ENOSYS;
    st = HSA->hsa_memory_allocate(ra->kernarg_region, size, ptr);
    if (st != HSA_STATUS_SUCCESS) {
        xtq_err(ROCR, "hsa_memory_allocate(kernarg, %zu): %s", size, rocr_strstatus(st));
        return -XTQ_ENOMEM;
    }
    return 0;
}

int xtq_rocr_kernarg_free(xtq_agent_t *agent, void *ptr)
{
    if (agent == NULL || ptr == NULL)
        return -XTQ_EINVAL;
    if (rocr_agent_of(agent) == NULL)
        return -XTQ_EAGENTKIND;
    return HSA->hsa_memory_free(ptr) == HSA_STATUS_SUCCESS ? 0 : -XTQ_EINVAL;
}

/* ---- agents --------------------------------------------------------------- */

int xtq__rocr_agent_isa(xtq_agent_t *agent, char *isa, size_t isa_len)
{
    struct rocr_agent *ra = rocr_agent_of(agent);
    char name[64] = "";

    if (ra == NULL)
        return -XTQ_EAGENTKIND;
    if (HSA->hsa_agent_get_info(ra->hsa, HSA_AGENT_INFO_NAME, name) != HSA_STATUS_SUCCESS)
        return -XTQ_EIO;
    name[sizeof(name) - 1] = '\0';
    snprintf(isa, isa_len, "%s", name);
    return 0;
}

static hsa_status_t rocr_find_kernarg(hsa_region_t region, void *data)
{
    struct rocr_agent *ra = data;
    hsa_region_segment_t segment;
    hsa_region_global_flag_t flags;

    if (HSA->hsa_region_get_info(region, HSA_REGION_INFO_SEGMENT, &segment) !=
            HSA_STATUS_SUCCESS ||
        segment != HSA_REGION_SEGMENT_GLOBAL)
        return HSA_STATUS_SUCCESS;
    if (HSA->hsa_region_get_info(region, HSA_REGION_INFO_GLOBAL_FLAGS, &flags) !=
            HSA_STATUS_SUCCESS ||
        !(flags & HSA_REGION_GLOBAL_FLAG_KERNARG))
        return HSA_STATUS_SUCCESS;
    ra->kernarg_region = region;
    ra->has_kernarg_region = true;
    return HSA_STATUS_INFO_BREAK;
}

static void rocr_close(xtq_agent_t *agent)
{
    struct rocr_agent *ra = container_of(agent, struct rocr_agent, base);

    /* Memory its owner did not deregister (the engine's receive regions,
     * freed after the agents close): unlocked here, before it is freed. */
    for (uint32_t i = 0; i < ra->nlocked; i++)
        HSA->hsa_amd_memory_unlock(ra->locked[i]);
    free(ra->locked);
    pthread_mutex_destroy(&ra->locked_lock);
    free(ra);
}

static int rocr_open(xtq_ctx_t *ctx, unsigned device_index, xtq_agent_t **agent)
{
    struct rocr_agent *ra;
    char name[64] = "";
    uint32_t cus = 0;
    hsa_status_t st;
    int rc;

    if (rocr.status != 0 || device_index >= rocr.ngpus) {
        rc = -XTQ_ENOAGENT;
        goto err;
    }
    ra = calloc(1, sizeof(*ra));
    if (ra == NULL) {
        xtq_err(ROCR, "out of memory for an agent");
        rc = -XTQ_ENOMEM;
        goto err;
    }
    ra->hsa = rocr.gpus[device_index];
    pthread_mutex_init(&ra->locked_lock, NULL);
    ra->base.ops = &rocr_agent_ops;
    ra->base.kind = XTQ_AGENT_ROCR;
    ra->base.ctx = ctx;
    ra->base.info.kind = XTQ_AGENT_ROCR;
    ra->base.info.device_index = device_index;
    if (HSA->hsa_agent_get_info(ra->hsa, (hsa_agent_info_t)HSA_AMD_AGENT_INFO_PRODUCT_NAME,
                                name) != HSA_STATUS_SUCCESS ||
        name[0] == '\0')
        HSA->hsa_agent_get_info(ra->hsa, HSA_AGENT_INFO_NAME, name);
    name[sizeof(name) - 1] = '\0';
    snprintf(ra->base.info.name, sizeof(ra->base.info.name), "%s", name);
    if (HSA->hsa_agent_get_info(ra->hsa, (hsa_agent_info_t)HSA_AMD_AGENT_INFO_COMPUTE_UNIT_COUNT,
                                &cus) == HSA_STATUS_SUCCESS)
        ra->base.info.workers = cus;
    st = HSA->hsa_agent_get_info(ra->hsa, HSA_AGENT_INFO_QUEUE_MAX_SIZE,
                                 &ra->base.info.max_queue_size);
    if (st == HSA_STATUS_SUCCESS)
        st = HSA->hsa_agent_get_info(ra->hsa, HSA_AGENT_INFO_QUEUE_MIN_SIZE, &ra->queue_min);
    if (st == HSA_STATUS_SUCCESS)
        st = HSA->hsa_agent_get_info(ra->hsa, HSA_AGENT_INFO_PROFILE, &ra->profile);
    if (st != HSA_STATUS_SUCCESS) {
        xtq_err(ROCR, "hsa_agent_get_info(%s): %s", name, rocr_strstatus(st));
        rc = -XTQ_EIO;
        goto err_free;
    }
    st = HSA->hsa_agent_iterate_regions(ra->hsa, rocr_find_kernarg, ra);
    if (st != HSA_STATUS_SUCCESS && st != HSA_STATUS_INFO_BREAK) {
        xtq_err(ROCR, "hsa_agent_iterate_regions(%s): %s", name, rocr_strstatus(st));
        rc = -XTQ_EIO;
        goto err_free;
    }
    if (!ra->has_kernarg_region)
        xtq_warn(ROCR, "%s has no kernarg region: only XTQ puts can carry arguments", name);
    xtq_info(ROCR, "agent %u: %s, %u CUs, queues up to %u packets", device_index, name, cus,
             ra->base.info.max_queue_size);
    *agent = &ra->base;
    return 0;

err_free:
    pthread_mutex_destroy(&ra->locked_lock);
    free(ra);
err:
    return rc;
}

/* The generic enqueue (the prepare hook swaps in HSA signals). A GPU
 * kernel of a ROCr queue is given no result buffer: a fetching put is
 * refused rather than answered with zeros. */
static int rocr_enqueue(xtq_queue_t *queue, const struct xtq__enqueue *desc)
{
    if (desc->result != NULL)
        return -XTQ_ENOSYS;
    return xtq__queue_enqueue(queue, desc);
}

static const struct xtq__agent_ops rocr_agent_ops = {
    .name = "rocr",
    .queue_create = rocr_queue_create,
    .queue_destroy = rocr_queue_destroy,
    .enqueue = rocr_enqueue,
    .doorbell = rocr_doorbell,
    .kernel_destroy = rocr_kernel_destroy,
    .function_destroy = rocr_function_destroy,
    .mem_register = rocr_mem_register,
    .mem_deregister = rocr_mem_deregister,
    .close = rocr_close,
    /* Its retire thread waits on the runtime's signals (not yet polled
     * from engine turns: no AMD GPU here to measure it on). */
    .retire_poll = xtq__agent_retire_poll_none,
    .retire_release = xtq__agent_retire_release_none,
};

const struct xtq__agent_provider xtq__rocr_agent_provider = {
    .kind = XTQ_AGENT_ROCR,
    .name = "rocr",
    .probe = rocr_probe,
    .open = rocr_open,
};

#else /* !XTQ_HAVE_ROCR: built without hsa.h; the public entry points say so. */

int xtq__rocr_load(char *reason, size_t reason_len)
{
    snprintf(reason, reason_len, "libxtq built without hsa/hsa.h (libhsa-runtime-dev)");
    return -XTQ_ENOAGENT;
}

unsigned xtq__rocr_symbol_count(void)
{
    return 0;
}

int xtq__rocr_agent_isa(xtq_agent_t *agent, char *isa, size_t isa_len)
{
    (void)agent, (void)isa, (void)isa_len;
    return -XTQ_EAGENTKIND;
}

int xtq_kernel_create_rocr(xtq_agent_t *agent, const char *code_object_path, const char *symbol,
                           xtq_kernel_t **kernel)
{
    (void)agent, (void)code_object_path, (void)symbol, (void)kernel;
    return -XTQ_ENOAGENT;
}

int xtq_rocr_mem_register(xtq_agent_t *agent, void *addr, size_t len)
{
    (void)agent, (void)addr, (void)len;
    return -XTQ_ENOAGENT;
}

int xtq_rocr_mem_deregister(xtq_agent_t *agent, void *addr, size_t len)
{
    (void)agent, (void)addr, (void)len;
    return -XTQ_ENOAGENT;
}

int xtq_rocr_kernarg_alloc(xtq_agent_t *agent, size_t size, void **ptr)
{
    (void)agent, (void)size, (void)ptr;
    return -XTQ_ENOAGENT;
}

int xtq_rocr_kernarg_free(xtq_agent_t *agent, void *ptr)
{
    (void)agent, (void)ptr;
    return -XTQ_ENOAGENT;
}

#endif /* XTQ_HAVE_ROCR */
