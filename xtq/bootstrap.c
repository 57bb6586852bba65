/*
 * PMIx bootstrap: rank, size, hosts, job key, allgather and barrier.
 * A process started without a launcher (no PMIX_RANK / PMIX_NAMESPACE in
 * its environment) is a singleton and never touches PMIx.
 */
#include "internal.h"
#include "bootstrap.h"

#include <sys/stat.h>
#include <unistd.h>
#include <pmix.h>

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

static uint64_t job_key_of(const struct xtq__bootstrap *bs)
{
    const char *param = xtq__param_string(XTQ__PARAM_XTQ_JOB_KEY);
    uint64_t h = 0xcbf29ce484222325ull;
    if (param && *param) {
        char *end;
        unsigned long long v = strtoull(param, &end, 0);
        if (*end == '\0' && end != param)
            return v;
        return fnv1a(param, strlen(param), h);
    }
    if (bs->pmix)
        return fnv1a(bs->nspace, strlen(bs->nspace), h);
    pid_t pid = getpid();
    uint64_t t = xtq__now_ns();
    h = fnv1a(&pid, sizeof(pid), h);
    return fnv1a(&t, sizeof(t), h);
}

/*
 * Which ranks may share memory (shm) and which must talk over the network:
 * those with the same hostname, network namespace and boot. The hostname
 * alone is not enough: network namespaces and containers share it while
 * their networks (and usually /dev/shm) are their own; the boot id tells
 * apart a host name reused by another machine image.
 */
static void host_identity(char *out, size_t len)
{
    char host[XTQ__HOSTNAME_MAX] = {0};
    char boot[64] = "";
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
    snprintf(out, len, "%s|%llu|%s", host, netns, boot);
}

/* Read an integer job or process attribute; `fallback` when absent. */
static long pmix_get_int(const pmix_proc_t *proc, const char *key, long fallback)
{
    pmix_value_t *val = NULL;
    long out = fallback;
    if (PMIx_Get(proc, key, NULL, 0, &val) != PMIX_SUCCESS || !val)
        return fallback;
    switch (val->type) {
    case PMIX_UINT32: out = (long)val->data.uint32; break;
    case PMIX_UINT16: out = (long)val->data.uint16; break;
    case PMIX_INT: out = (long)val->data.integer; break;
    case PMIX_UINT: out = (long)val->data.uint; break;
    case PMIX_PROC_RANK: out = (long)val->data.rank; break;
    default: break;
    }
    PMIX_VALUE_RELEASE(val);
    return out;
}

int xtq__bootstrap_init(struct xtq__bootstrap **out)
{
    struct xtq__bootstrap *bs = calloc(1, sizeof(*bs));
    char host[XTQ__HOST_ID_MAX] = {0};
    int rc;

    if (!bs)
        return -XTQ_ENOMEM;
    host_identity(host, sizeof(host));

    if (getenv("PMIX_RANK") && getenv("PMIX_NAMESPACE")) {
        pmix_status_t prc = PMIx_Init(&my_proc, NULL, 0);
        if (prc != PMIX_SUCCESS) {
            xtq_err(CORE, "PMIx_Init failed: %s", PMIx_Error_string(prc));
            rc = -XTQ_EBOOTSTRAP;
            goto err_free;
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
            rc = -XTQ_EBOOTSTRAP;
            goto err_fini;
        }
        bs->local_rank = (int)pmix_get_int(&my_proc, PMIX_LOCAL_RANK, 0);
        bs->local_size = (int)pmix_get_int(&wild, PMIX_LOCAL_SIZE, 1);
    } else {
        bs->rank = 0;
        bs->size = 1;
        bs->local_rank = 0;
        bs->local_size = 1;
    }

    bs->hosts = calloc((size_t)bs->size, XTQ__HOST_ID_MAX);
    if (!bs->hosts) {
        rc = -XTQ_ENOMEM;
        goto err_fini;
    }
    rc = xtq__bootstrap_allgather(bs, "xtq.host", host, XTQ__HOST_ID_MAX, bs->hosts);
    if (rc)
        goto err_hosts;
    bs->same_host = true;
    for (int r = 0; r < bs->size; r++)
        if (strncmp(bs->hosts[r], host, XTQ__HOST_ID_MAX) != 0)
            bs->same_host = false;
    bs->job_key = job_key_of(bs);
    xtq_dbg(CORE, "bootstrap: rank %d of %d (local %d of %d) %s, job key %016llx, host %s%s",
            bs->rank, bs->size, bs->local_rank, bs->local_size, bs->pmix ? "PMIx" : "singleton",
            (unsigned long long)bs->job_key, host, bs->same_host ? " (all ranks)" : "");
    *out = bs;
    return 0;

err_hosts:
    free(bs->hosts);
err_fini:
    if (bs->pmix)
        PMIx_Finalize(NULL, 0);
err_free:
    free(bs);
    return rc;
}

void xtq__bootstrap_fini(struct xtq__bootstrap *bs)
{
    if (!bs)
        return;
    if (bs->pmix)
        PMIx_Finalize(NULL, 0);
    free(bs->hosts);
    free(bs);
}

int xtq__bootstrap_allgather(struct xtq__bootstrap *bs, const char *key, const void *blob,
                             size_t len, void *out)
{
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
