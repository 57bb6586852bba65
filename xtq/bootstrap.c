/*
 * Bootstrap: rank, size, locality, job key and the context's instance id,
 * then allgather and barrier, over one of three channels:
 *  - the caller's out-of-band collectives (xtq_oob_coll_t): a nonblocking
 *    allgather polled with req_test; the barrier is an allgather of one
 *    byte. A manual-progress engine is polled between tests;
 *  - PMIx, when the process was started by a PMIx launcher
 *    (PMIX_RANK / PMIX_NAMESPACE in its environment);
 *  - none: a singleton, rank 0 of 1, never touching PMIx.
 * Every rank contributes one card (host identity, job key, random draws)
 * to a single allgather; rank 0's draws become the context's.
 */
#include "internal.h"
#include "bootstrap.h"

#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <pmix.h>

/* An OOB request is tested this many times back to back, then between
 * naps that double up to OOB_NAP_MAX_NS (waits must sleep: two cores). */
#define OOB_SPINS      64
#define OOB_NAP_MIN_NS 1000
#define OOB_NAP_MAX_NS 200000

static pmix_proc_t my_proc;

static uint64_t fnv1a(const void *data, size_t len, uint64_t h)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

#define FNV_OFFSET 0xcbf29ce484222325ull

/*
 * What identifies this process's host: ranks with equal identities share
 * memory (the shm provider, doorbells). One function, so that what counts
 * as "one host" is decided in one place: the hostname, the network
 * namespace and the boot. The hostname alone is not enough: network
 * namespaces and containers share it while their networks (and usually
 * /dev/shm) are their own (tests/multihost); the boot id tells apart a
 * hostname reused by another machine image.
 */
static void host_identity(char out[XTQ__HOST_ID_MAX])
{
    char host[XTQ__HOST_ID_MAX - 64] = {0};
    char boot[40] = ""; /* a UUID and its newline */
    unsigned long long netns = 0;
    struct stat st;
    FILE *f;

    gethostname(host, sizeof(host) - 1);
    if (stat("/proc/self/ns/net", &st) == 0)
        netns = (unsigned long long)st.st_ino;
    if ((f = fopen("/proc/sys/kernel/random/boot_id", "r"))) {
        if (!fgets(boot, sizeof(boot), f))
            boot[0] = '\0';
        fclose(f);
        boot[strcspn(boot, "\n")] = '\0';
    }
    memset(out, 0, XTQ__HOST_ID_MAX);
    snprintf(out, XTQ__HOST_ID_MAX, "%s|%llu|%s", host, netns, boot);
}

static uint64_t random64(void)
{
    uint64_t v;
    if (getrandom(&v, sizeof(v), 0) == (ssize_t)sizeof(v))
        return v;
    /* No entropy source: a hash of what differs between processes. */
    pid_t pid = getpid();
    uint64_t t = xtq__now_ns();
    uintptr_t where = (uintptr_t)&v;
    v = fnv1a(&pid, sizeof(pid), FNV_OFFSET);
    v = fnv1a(&t, sizeof(t), v);
    return fnv1a(&where, sizeof(where), v);
}

/* XTQ_JOB_KEY: a number, else a hash of the string. false when unset. */
static bool param_job_key(uint64_t *key)
{
    const char *param = xtq__param_string(XTQ__PARAM_XTQ_JOB_KEY);
    if (!param || !*param)
        return false;
    char *end;
    unsigned long long v = strtoull(param, &end, 0);
    *key = (*end == '\0' && end != param) ? v : fnv1a(param, strlen(param), FNV_OFFSET);
    return true;
}

/* Read an integer job or process attribute; `fallback` when absent. */
static long pmix_get_int(const pmix_proc_t *proc, const char *key, long fallback)
{
    pmix_value_t *val = NULL;
    long out = fallback;
    if (PMIx_Get(proc, key, NULL, 0, &val) != PMIX_SUCCESS || !val)
        return fallback;
    switch (val->type) {
    case PMIX_UINT32:
        out = (long)val->data.uint32;
        break;
    case PMIX_UINT16:
        out = (long)val->data.uint16;
        break;
    case PMIX_INT:
        out = (long)val->data.integer;
        break;
    case PMIX_UINT:
        out = (long)val->data.uint;
        break;
    case PMIX_PROC_RANK:
        out = (long)val->data.rank;
        break;
    default:
        break;
    }
    PMIX_VALUE_RELEASE(val);
    return out;
}

static int pmix_open(struct xtq__bootstrap *bs)
{
    pmix_status_t prc = PMIx_Init(&my_proc, NULL, 0);
    if (prc != PMIX_SUCCESS) {
        xtq_err(CORE, "PMIx_Init failed: %s", PMIx_Error_string(prc));
        return -XTQ_EBOOTSTRAP;
    }
    bs->pmix = true;
    bs->rank = (int)my_proc.rank;
    snprintf(bs->nspace, sizeof(bs->nspace), "%s", my_proc.nspace);
    pmix_proc_t wild;
    PMIX_PROC_CONSTRUCT(&wild);
    PMIX_LOAD_PROCID(&wild, my_proc.nspace, PMIX_RANK_WILDCARD);
    bs->size = (int)pmix_get_int(&wild, PMIX_JOB_SIZE, -1);
    if (bs->size <= 0 || bs->rank >= bs->size) {
        xtq_err(CORE, "PMIx gave no usable job size (%d) for rank %d", bs->size, bs->rank);
        return -XTQ_EBOOTSTRAP;
    }
    bs->local_rank = (int)pmix_get_int(&my_proc, PMIX_LOCAL_RANK, 0);
    bs->local_size = (int)pmix_get_int(&wild, PMIX_LOCAL_SIZE, 1);
    return 0;
}

static int oob_check(const xtq_oob_coll_t *oob)
{
    if (!oob->allgather || !oob->req_test || !oob->req_free) {
        xtq_err(CORE, "OOB bootstrap: allgather, req_test and req_free are all needed");
        return -XTQ_EINVAL;
    }
    if (oob->size < 1 || oob->rank < 0 || oob->rank >= oob->size) {
        xtq_err(CORE, "OOB bootstrap: rank %d of %d is not a rank", oob->rank, oob->size);
        return -XTQ_EINVAL;
    }
    return 0;
}

/* One allgather through the caller's collectives, tested until done;
 * `poll` (may be NULL) runs between tests. */
static int oob_allgather(struct xtq__bootstrap *bs, const void *blob, size_t len, void *out,
                         void (*poll)(void *arg), void *arg)
{
    const xtq_oob_coll_t *o = &bs->oob_coll;
    int64_t nap = OOB_NAP_MIN_NS;
    void *req = NULL;
    int rc, frc;

    rc = o->allgather(blob, out, len, o->coll_info, &req);
    if (rc) {
        xtq_err(CORE, "OOB allgather of %zu bytes failed to start: %s", len, xtq_errname(rc));
        return -XTQ_EBOOTSTRAP;
    }
    for (unsigned i = 0; (rc = o->req_test(req)) == -XTQ_EAGAIN; i++) {
        if (poll)
            poll(arg);
        if (i < OOB_SPINS) {
            xtq__cpu_relax();
            continue;
        }
        struct timespec ts = {0, nap};
        nanosleep(&ts, NULL);
        if (nap < OOB_NAP_MAX_NS)
            nap *= 2;
    }
    frc = o->req_free(req);
    if (rc) {
        xtq_err(CORE, "OOB allgather of %zu bytes failed: %s", len, xtq_errname(rc));
        return -XTQ_EBOOTSTRAP;
    }
    if (frc)
        xtq_warn(CORE, "OOB req_free failed: %s", xtq_errname(frc));
    return 0;
}

void xtq__bootstrap_locality(const char (*hosts)[XTQ__HOST_ID_MAX], int size, int rank,
                             int *local_rank, int *local_size, bool *same_host)
{
    int lr = 0, ls = 0;
    for (int r = 0; r < size; r++) {
        if (memcmp(hosts[r], hosts[rank], XTQ__HOST_ID_MAX) != 0)
            continue;
        if (r < rank)
            lr++;
        ls++;
    }
    *local_rank = lr;
    *local_size = ls;
    *same_host = ls == size;
}

/* One per rank, gathered once: rank 0's draws become the context's. */
struct boot_card {
    char host[XTQ__HOST_ID_MAX];
    uint64_t key;      /* the key this rank was given, else its random draw */
    uint64_t instance; /* a random draw */
    uint32_t key_given;
    uint32_t pad_;
};

/* The job key: given (attr, else XTQ_JOB_KEY) on every rank alike, else
 * the launcher's job id under PMIx, else rank 0's random draw. */
static int agree_job_key(struct xtq__bootstrap *bs, const struct boot_card *cards)
{
    for (int r = 1; r < bs->size; r++) {
        if (cards[r].key_given != cards[0].key_given ||
            (cards[0].key_given && cards[r].key != cards[0].key)) {
            xtq_err(CORE,
                    "rank %d: ranks 0 and %d disagree on the job key (xtq_init_attr_t."
                    "job_key or XTQ_JOB_KEY must be the same on every rank, or unset)",
                    bs->rank, r);
            return -XTQ_EINVAL;
        }
    }
    if (!cards[0].key_given && bs->pmix)
        bs->job_key = fnv1a(bs->nspace, strlen(bs->nspace), FNV_OFFSET);
    else
        bs->job_key = cards[0].key;
    return 0;
}

int xtq__bootstrap_init(const struct xtq__bootstrap_attr *attr, struct xtq__bootstrap **out)
{
    struct xtq__bootstrap *bs = calloc(1, sizeof(*bs));
    struct boot_card card, *cards = NULL;
    int rc;

    if (!bs)
        return -XTQ_ENOMEM;
    if (attr && attr->oob) {
        rc = oob_check(attr->oob);
        if (rc)
            goto err_free;
        bs->oob = true;
        bs->oob_coll = *attr->oob;
        bs->rank = attr->oob->rank;
        bs->size = attr->oob->size;
        bs->barrier_buf = calloc((size_t)bs->size, 1);
        if (!bs->barrier_buf) {
            rc = -XTQ_ENOMEM;
            goto err_free;
        }
    } else if (getenv("PMIX_RANK") && getenv("PMIX_NAMESPACE")) {
        rc = pmix_open(bs);
        if (rc)
            goto err_fini;
    } else {
        bs->rank = 0;
        bs->size = 1;
    }

    memset(&card, 0, sizeof(card));
    host_identity(card.host);
    card.instance = random64();
    if (attr && attr->has_job_key) {
        card.key_given = 1;
        card.key = attr->job_key;
    } else if (param_job_key(&card.key)) {
        card.key_given = 1;
    } else {
        card.key = random64();
    }
    bs->hosts = calloc((size_t)bs->size, XTQ__HOST_ID_MAX);
    cards = calloc((size_t)bs->size, sizeof(*cards));
    if (!bs->hosts || !cards) {
        rc = -XTQ_ENOMEM;
        goto err_fini;
    }
    rc = xtq__bootstrap_allgather(bs, "xtq.boot", &card, sizeof(card), cards);
    if (rc)
        goto err_fini;
    for (int r = 0; r < bs->size; r++)
        memcpy(bs->hosts[r], cards[r].host, XTQ__HOST_ID_MAX);
    int local_rank, local_size;
    xtq__bootstrap_locality((const char(*)[XTQ__HOST_ID_MAX])bs->hosts, bs->size, bs->rank,
                            &local_rank, &local_size, &bs->same_host);
    /* PMIx knows the launcher's view of the node; elsewhere the identities
     * are all there is. */
    if (!bs->pmix) {
        bs->local_rank = local_rank;
        bs->local_size = local_size;
    }
    rc = agree_job_key(bs, cards);
    if (rc)
        goto err_fini;
    bs->instance = cards[0].instance;
    free(cards);
    xtq_dbg(CORE, "bootstrap: rank %d of %d (local %d of %d) %s, job key %016llx, instance %016llx",
            bs->rank, bs->size, bs->local_rank, bs->local_size,
            bs->oob    ? "OOB"
            : bs->pmix ? "PMIx"
                       : "singleton",
            (unsigned long long)bs->job_key, (unsigned long long)bs->instance);
    *out = bs;
    return 0;

err_fini:
    free(cards);
    free(bs->hosts);
    if (bs->pmix)
        PMIx_Finalize(NULL, 0);
err_free:
    free(bs->barrier_buf);
    free(bs);
    return rc;
}

void xtq__bootstrap_fini(struct xtq__bootstrap *bs)
{
    if (!bs)
        return;
    if (bs->pmix)
        PMIx_Finalize(NULL, 0);
    free(bs->barrier_buf);
    free(bs->hosts);
    free(bs);
}

int xtq__bootstrap_allgather(struct xtq__bootstrap *bs, const char *key, const void *blob,
                             size_t len, void *out)
{
    if (bs->oob)
        return oob_allgather(bs, blob, len, out, NULL, NULL);
    if (!bs->pmix) {
        memcpy(out, blob, len);
        return 0;
    }
    pmix_value_t val;
    pmix_status_t prc;
    pmix_info_t info;
    bool collect = true;

    PMIX_VALUE_CONSTRUCT(&val);
    val.type = PMIX_BYTE_OBJECT;
    val.data.bo.bytes = (char *)blob;
    val.data.bo.size = len;
    prc = PMIx_Put(PMIX_GLOBAL, key, &val);
    if (prc == PMIX_SUCCESS)
        prc = PMIx_Commit();
    if (prc != PMIX_SUCCESS)
        goto err;
    PMIX_INFO_CONSTRUCT(&info);
    PMIX_INFO_LOAD(&info, PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
    prc = PMIx_Fence(NULL, 0, &info, 1);
    PMIX_INFO_DESTRUCT(&info);
    if (prc != PMIX_SUCCESS)
        goto err;
    for (int r = 0; r < bs->size; r++) {
        pmix_proc_t proc;
        pmix_value_t *got = NULL;
        PMIX_PROC_CONSTRUCT(&proc);
        PMIX_LOAD_PROCID(&proc, bs->nspace, (pmix_rank_t)r);
        prc = PMIx_Get(&proc, key, NULL, 0, &got);
        if (prc != PMIX_SUCCESS || !got)
            goto err;
        if (got->type != PMIX_BYTE_OBJECT || got->data.bo.size != len) {
            xtq_err(CORE, "PMIx key %s of rank %d has the wrong type or size", key, r);
            PMIX_VALUE_RELEASE(got);
            return -XTQ_EBOOTSTRAP;
        }
        memcpy((char *)out + (size_t)r * len, got->data.bo.bytes, len);
        PMIX_VALUE_RELEASE(got);
    }
    return 0;

err:
    xtq_err(CORE, "PMIx allgather of %s failed: %s", key, PMIx_Error_string(prc));
    return -XTQ_EBOOTSTRAP;
}

struct fence_state {
    _Atomic uint32_t done;
    pmix_status_t status;
};

static void fence_cb(pmix_status_t status, void *cbdata)
{
    struct fence_state *fs = cbdata;
    fs->status = status;
    atomic_store_explicit(&fs->done, 1, memory_order_release);
    xtq__futex_wake(&fs->done, -1);
}

int xtq__bootstrap_barrier(struct xtq__bootstrap *bs, void (*poll)(void *arg), void *arg)
{
    if (bs->oob) {
        uint8_t mine = 0;
        return oob_allgather(bs, &mine, 1, bs->barrier_buf, poll, arg);
    }
    if (!bs->pmix)
        return 0;
    struct fence_state fs = {.done = 0, .status = PMIX_SUCCESS};
    pmix_status_t prc = PMIx_Fence_nb(NULL, 0, NULL, 0, fence_cb, &fs);
    if (prc != PMIX_SUCCESS) {
        xtq_err(CORE, "PMIx_Fence_nb failed: %s", PMIx_Error_string(prc));
        return -XTQ_EBOOTSTRAP;
    }
    /* Manual progress: keep the engine turning, nap briefly between turns
     * so the waiting rank does not hog a core its peers need. */
    while (!atomic_load_explicit(&fs.done, memory_order_acquire)) {
        if (poll) {
            poll(arg);
            xtq__futex_wait(&fs.done, 0, 50000);
        } else {
            xtq__futex_wait(&fs.done, 0, XTQ_TIMEOUT_INFINITE);
        }
    }
    if (fs.status != PMIX_SUCCESS) {
        xtq_err(CORE, "PMIx fence failed: %s", PMIx_Error_string(fs.status));
        return -XTQ_EBOOTSTRAP;
    }
    return 0;
}

int xtq__bootstrap_shm_name(const struct xtq__bootstrap *bs, const char *what, int rank, char *buf,
                            size_t len)
{
    int n = snprintf(buf, len, "/xtq-%s-%016llx-%016llx-%d", what, (unsigned long long)bs->job_key,
                     (unsigned long long)bs->instance, rank);
    return n < 0 || (size_t)n >= len ? -XTQ_ENOSPC : 0;
}
