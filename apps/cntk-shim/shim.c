/*
 * The communicator: validation, packing of small buffers, staging of
 * device buffers for back-ends that reduce host memory only, and the
 * asynchronous handle. A back-end sees one contiguous buffer per
 * collective (shim_internal.h).
 */
#include "shim_internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <xtq/param.h>

/* Every back-end this build has. */
static const struct shim_backend_ops *const backends[] = {
#ifdef XTQ_SHIM_HAVE_MPI
    &shim__mpi_ops,
#endif
#ifdef XTQ_SHIM_HAVE_XTQ
    &shim__xtq_ops,
#endif
#ifdef XTQ_SHIM_HAVE_NCCL
    &shim__nccl_ops,
#endif
};

/* Named back-ends this build lacks, with the reason. */
static const struct {
    const char *name, *why;
} missing_backends[] = {
#ifndef XTQ_SHIM_HAVE_MPI
    {"mpi", "built without MPI (install libopenmpi-dev and reconfigure)"},
#endif
#ifndef XTQ_SHIM_HAVE_XTQ
    {"xtq", "needs libxtq_coll (apps/allreduce), which this build does not have"},
#endif
#ifndef XTQ_SHIM_HAVE_NCCL
    {"nccl", "built without the CUDA toolkit (NCCL itself is loaded at run time)"},
#endif
    {NULL, NULL}, /* ends the list, which is otherwise empty in a full build */
};


/* A scratch area: host (malloc), pinned host, or device memory. */
enum arena_kind { ARENA_HOST, ARENA_PINNED, ARENA_DEVICE };
struct arena {
    void *p;
    size_t cap;
};

/* One back-end collective. */
struct shim_op {
    void *send, *recv; /* what the back-end reduces */
    size_t count;      /* elements */
    enum xtq_datatype type;
    enum xtq_shim_mem mem; /* memory kind the back-end sees */
    void *dev_out;         /* staged: device destination of recv's result */
    size_t index;          /* the buffer it reduces (group < 0) */
    int group;             /* pack group, or -1 */
};

/* Small buffers of one type and memory kind, packed together. */
struct shim_group {
    enum xtq_datatype type;
    enum xtq_shim_mem mem; /* of the member buffers */
    size_t count;          /* elements */
    size_t offset;         /* into the scratch area holding the pack */
    bool staged;           /* packed straight into pinned host memory */
};

struct xtq_shim_handle {
    xtq_shim_comm_t *comm;
    xtq_shim_buf_t *in, *out;
    size_t *slot;  /* in[i]'s element offset inside its group, or SIZE_MAX */
    int *group_of; /* in[i]'s group, or -1 */
    size_t n, cap_n;
    struct shim_op *ops;
    struct shim_group *groups;
    shim_breq_t *reqs;
    size_t nops, ngroups, cap_ops;
    struct arena arena[3];
    size_t npacked, nstaged; /* for the statistics */
    bool started, completed;
    uint64_t t0;
};

#define SHIM_SPARE 4

struct xtq_shim_comm {
    struct shim_backend *be;
    size_t pack_bytes;
    int check;
    xtq_shim_worker_t *workers;
    xtq_shim_stats_t stats;
    xtq_shim_handle_t *spare[SHIM_SPARE]; /* finished handles kept for reuse */
    unsigned inflight;
    char err[320];
};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

__attribute__((format(printf, 3, 4))) static int seterr(xtq_shim_comm_t *comm, int rc,
                                                        const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(comm->err, sizeof(comm->err), fmt, ap);
    va_end(ap);
    return rc;
}

/* ---- parameters (declared in xtq/params.def) --------------------------- */

static const char *param_text(const char *name)
{
    unsigned n = xtq_param_count();
    for (unsigned i = 0; i < n; i++) {
        xtq_param_info_t p;
        if (xtq_param_get_info(i, &p) == 0 && strcmp(p.name, name) == 0)
            return p.value && *p.value ? p.value : p.default_value;
    }
    return NULL;
}

/* As libxtq reads sizes: a number with an optional K, M or G suffix. */
static int parse_size(const char *s, size_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 0);
    if (errno || end == s || v < 0)
        return -XTQ_EINVAL;
    switch (*end) {
    case 'k':
    case 'K':
        v <<= 10;
        end++;
        break;
    case 'm':
    case 'M':
        v <<= 20;
        end++;
        break;
    case 'g':
    case 'G':
        v <<= 30;
        end++;
        break;
    default:
        break;
    }
    if (*end)
        return -XTQ_EINVAL;
    *out = (size_t)v;
    return 0;
}

static int parse_bool(const char *s, int *out)
{
    if (!strcmp(s, "1") || !strcasecmp(s, "true") || !strcasecmp(s, "on") || !strcasecmp(s, "yes"))
        *out = 1;
    else if (!strcmp(s, "0") || !strcasecmp(s, "false") || !strcasecmp(s, "off") ||
             !strcasecmp(s, "no"))
        *out = 0;
    else
        return -XTQ_EINVAL;
    return 0;
}

/* ---- back-end table ---------------------------------------------------- */

int xtq_shim_backend_info(unsigned index, const char **name, int *available, const char **why)
{
    const char *n, *w = "";
    int avail;
    if (index < SHIM_ARRAY_SIZE(backends)) {
        n = backends[index]->name;
        avail = backends[index]->available(&w);
    } else {
        size_t m = index - SHIM_ARRAY_SIZE(backends), i = 0;
        while (missing_backends[i].name && i < m)
            i++;
        if (!missing_backends[i].name)
            return -XTQ_ERANGE;
        n = missing_backends[i].name;
        w = missing_backends[i].why;
        avail = 0;
    }
    if (name)
        *name = n;
    if (available)
        *available = avail;
    if (why)
        *why = w;
    return 0;
}

/* ---- init / finalize ---------------------------------------------------- */

static int exchange_host_ids(xtq_shim_comm_t *comm)
{
    struct shim_backend *be = comm->be;
    size_t bytes = be->size * sizeof(xtq_shim_worker_t);
    xtq_shim_worker_t *w = calloc(be->size, sizeof(*w));
    if (!w)
        return -XTQ_ENOMEM;
    /* An allgather as a bitwise-OR allreduce: every other slot is zero. */
    xtq_shim_worker_t *me = &w[be->rank];
    if (gethostname(me->host_id, sizeof(me->host_id) - 1) != 0)
        snprintf(me->host_id, sizeof(me->host_id), "unknown");
    me->host_id[sizeof(me->host_id) - 1] = '\0';
    shim_breq_t req;
    int rc = be->ops->iallreduce(be, w, w, bytes, XTQ_DT_BYTE, XTQ_OP_BOR, XTQ_SHIM_MEM_HOST, &req);
    if (rc == 0)
        rc = be->ops->waitall(be, &req, 1);
    if (rc != 0) {
        free(w);
        return rc;
    }
    for (size_t r = 0; r < be->size; r++)
        w[r].global_rank = r;
    comm->workers = w;
    return 0;
}

int xtq_shim_init(const xtq_shim_attr_t *attr, xtq_shim_comm_t **out)
{
    static const xtq_shim_attr_t none;
    char err[256] = "";
    int rc;
    if (!out)
        return -XTQ_EINVAL;
    *out = NULL;
    if (!attr)
        attr = &none;
    xtq_shim_comm_t *comm = calloc(1, sizeof(*comm));
    if (!comm)
        return -XTQ_ENOMEM;

    const char *name = (attr->field_mask & XTQ_SHIM_ATTR_FIELD_BACKEND) && attr->backend
                           ? attr->backend
                           : param_text("XTQ_SHIM_BACKEND");
    if (attr->field_mask & XTQ_SHIM_ATTR_FIELD_PACK_BYTES) {
        comm->pack_bytes = attr->pack_bytes;
    } else if (parse_size(param_text("XTQ_SHIM_PACK_BYTES"), &comm->pack_bytes) != 0) {
        fprintf(stderr, "xtq_shim: XTQ_SHIM_PACK_BYTES='%s' is not a size\n",
                param_text("XTQ_SHIM_PACK_BYTES"));
        rc = -XTQ_EINVAL;
        goto err_comm;
    }
    if (attr->field_mask & XTQ_SHIM_ATTR_FIELD_CHECK) {
        comm->check = attr->check != 0;
    } else if (parse_bool(param_text("XTQ_SHIM_CHECK"), &comm->check) != 0) {
        fprintf(stderr, "xtq_shim: XTQ_SHIM_CHECK='%s' is not a boolean\n",
                param_text("XTQ_SHIM_CHECK"));
        rc = -XTQ_EINVAL;
        goto err_comm;
    }

    const struct shim_backend_ops *ops = NULL;
    for (size_t i = 0; i < SHIM_ARRAY_SIZE(backends); i++)
        if (!strcmp(backends[i]->name, name))
            ops = backends[i];
    if (!ops) {
        rc = -XTQ_ENOENT;
        for (size_t i = 0; missing_backends[i].name; i++)
            if (!strcmp(missing_backends[i].name, name)) {
                fprintf(stderr, "xtq_shim: back-end '%s' is not available: %s\n", name,
                        missing_backends[i].why);
                rc = -XTQ_ENOSYS;
            }
        if (rc == -XTQ_ENOENT)
            fprintf(stderr,
                    "xtq_shim: unknown back-end '%s' (XTQ_SHIM_BACKEND: mpi, xtq or nccl)\n",
                    name);
        goto err_comm;
    }
    const char *why = "";
    if (!ops->available(&why)) {
        fprintf(stderr, "xtq_shim: back-end '%s' is not available: %s\n", name, why);
        rc = -XTQ_ENOSYS;
        goto err_comm;
    }
    rc = ops->open(attr, &comm->be, err, sizeof(err));
    if (rc != 0) {
        fprintf(stderr, "xtq_shim: back-end '%s' failed to start: %s (%s)\n", name, err,
                xtq_strerror(rc));
        goto err_comm;
    }
    rc = exchange_host_ids(comm);
    if (rc != 0) {
        fprintf(stderr, "xtq_shim: exchanging host names failed (%s)\n", xtq_strerror(rc));
        goto err_be;
    }
    *out = comm;
    return 0;

err_be:
    comm->be->ops->close(comm->be);
err_comm:
    free(comm);
    return rc;
}

static void handle_free(xtq_shim_handle_t *h);

int xtq_shim_finalize(xtq_shim_comm_t *comm)
{
    if (!comm)
        return -XTQ_EINVAL;
    if (comm->inflight)
        return seterr(comm, -XTQ_EBUSY, "%u aggregates still in flight", comm->inflight);
    for (int i = 0; i < SHIM_SPARE; i++)
        handle_free(comm->spare[i]);
    int rc = comm->be->ops->close(comm->be);
    free(comm->workers);
    free(comm);
    return rc;
}

const char *xtq_shim_backend(const xtq_shim_comm_t *comm)
{
    return comm ? comm->be->ops->name : "?";
}

size_t xtq_shim_size(const xtq_shim_comm_t *comm)
{
    return comm ? comm->be->size : 0;
}

size_t xtq_shim_rank(const xtq_shim_comm_t *comm)
{
    return comm ? comm->be->rank : 0;
}

const xtq_shim_worker_t *xtq_shim_workers(const xtq_shim_comm_t *comm, size_t *count)
{
    if (count)
        *count = comm ? comm->be->size : 0;
    return comm ? comm->workers : NULL;
}

const xtq_shim_worker_t *xtq_shim_current_worker(const xtq_shim_comm_t *comm)
{
    return comm ? &comm->workers[comm->be->rank] : NULL;
}

int xtq_shim_get_stats(const xtq_shim_comm_t *comm, xtq_shim_stats_t *stats)
{
    if (!comm || !stats)
        return -XTQ_EINVAL;
    *stats = comm->stats;
    return 0;
}

const char *xtq_shim_last_error(const xtq_shim_comm_t *comm)
{
    return comm ? comm->err : "";
}

/* ---- scratch memory ------------------------------------------------------ */

static void free_pinned(void *p)
{
    shim__cuda_host_free(p);
}

static void free_device(void *p)
{
    shim__cuda_free(p);
}

/* CUDA memory is freed where the device may idle (device_idle); where
 * that cannot be had, it is left allocated, with a message, rather than
 * freed into a hang. */
static void arena_release(struct shim_backend *be, struct arena *a, enum arena_kind kind)
{
    if (!a->p)
        return;
    if (kind == ARENA_HOST) {
        free(a->p);
    } else {
        void (*fn)(void *) = kind == ARENA_PINNED ? free_pinned : free_device;
        int rc = be && be->ops->device_idle ? be->ops->device_idle(be, fn, a->p) : (fn(a->p), 0);
        if (rc != 0)
            fprintf(stderr,
                    "xtq_shim: %zu bytes of %s scratch left allocated: the device could not be "
                    "made idle to free them (%s)\n",
                    a->cap, kind == ARENA_PINNED ? "pinned" : "device", xtq_strerror(rc));
    }
    a->p = NULL;
    a->cap = 0;
}

static int arena_reserve(struct shim_backend *be, struct arena *a, enum arena_kind kind,
                         size_t bytes)
{
    if (bytes <= a->cap)
        return 0;
    arena_release(be, a, kind);
    bytes = (bytes + 4095) & ~(size_t)4095;
    int rc = 0;
    if (kind == ARENA_HOST)
        rc = posix_memalign(&a->p, 64, bytes) == 0 ? 0 : -XTQ_ENOMEM;
    else if (kind == ARENA_PINNED)
        rc = shim__cuda_host_alloc(&a->p, bytes);
    else
        rc = shim__cuda_alloc(&a->p, bytes);
    if (rc != 0) {
        a->p = NULL;
        return rc;
    }
    a->cap = bytes;
    return 0;
}

static void handle_free(xtq_shim_handle_t *h)
{
    if (!h)
        return;
    for (int k = 0; k < 3; k++)
        arena_release(h->comm ? h->comm->be : NULL, &h->arena[k], (enum arena_kind)k);
    free(h->in);
    free(h->slot);
    free(h->group_of);
    free(h->ops);
    free(h->groups);
    free(h->reqs);
    free(h);
}

/* A handle with room for n buffers, reused from the spares when possible. */
static xtq_shim_handle_t *handle_get(xtq_shim_comm_t *comm, size_t n)
{
    xtq_shim_handle_t *h = NULL;
    for (int i = 0; i < SHIM_SPARE && !h; i++)
        if (comm->spare[i]) {
            h = comm->spare[i];
            comm->spare[i] = NULL;
        }
    if (!h && !(h = calloc(1, sizeof(*h))))
        return NULL;
    if (n > h->cap_n) {
        size_t cap = n < 8 ? 8 : n;
        xtq_shim_buf_t *bufs = realloc(h->in, 2 * cap * sizeof(*bufs));
        size_t *slot = realloc(h->slot, cap * sizeof(*slot));
        int *group_of = realloc(h->group_of, cap * sizeof(*group_of));
        struct shim_op *ops = realloc(h->ops, cap * sizeof(*ops));
        struct shim_group *groups = realloc(h->groups, cap * sizeof(*groups));
        shim_breq_t *reqs = realloc(h->reqs, cap * sizeof(*reqs));
        if (bufs)
            h->in = bufs;
        if (slot)
            h->slot = slot;
        if (group_of)
            h->group_of = group_of;
        if (ops)
            h->ops = ops;
        if (groups)
            h->groups = groups;
        if (reqs)
            h->reqs = reqs;
        if (!bufs || !slot || !group_of || !ops || !groups || !reqs) {
            handle_free(h);
            return NULL;
        }
        h->cap_n = cap;
    }
    h->out = h->in + h->cap_n;
    h->comm = comm;
    h->n = h->nops = h->ngroups = h->npacked = h->nstaged = 0;
    h->started = h->completed = false;
    return h;
}

static void handle_put(xtq_shim_comm_t *comm, xtq_shim_handle_t *h)
{
    for (int i = 0; i < SHIM_SPARE; i++)
        if (!comm->spare[i]) {
            comm->spare[i] = h;
            return;
        }
    handle_free(h);
}

/* ---- checks -------------------------------------------------------------- */

static uint64_t mix64(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h ^= h >> 31;
    h *= 0xbf58476d1ce4e5b9ull;
    return h ^ (h >> 29);
}

/*
 * XTQ_SHIM_CHECK: every worker contributes its call's signature (or a
 * local error) to one MAX allreduce of {sig, ~sig, err}: max(~sig) =
 * ~min(sig), so all workers learn together whether they agree.
 */
static int check_collective(xtq_shim_comm_t *comm, uint64_t sig, int local_rc)
{
    struct shim_backend *be = comm->be;
    uint64_t v[3] = {sig, ~sig, local_rc ? 1 : 0};
    shim_breq_t req;
    int rc = be->ops->iallreduce(be, v, v, 3, XTQ_DT_UINT64, XTQ_OP_MAX, XTQ_SHIM_MEM_HOST, &req);
    if (rc == 0)
        rc = be->ops->waitall(be, &req, 1);
    if (rc != 0)
        return seterr(comm, rc, "check allreduce failed (%s)", xtq_strerror(rc));
    if (local_rc)
        return local_rc;
    if (v[2])
        return seterr(comm, -XTQ_EINVAL, "another worker's arguments were invalid");
    if (v[0] != sig || ~v[1] != sig)
        return seterr(comm, -XTQ_EINVAL,
                      "workers called with different buffer lists (counts, types or op)");
    return 0;
}

static int check_buf(xtq_shim_comm_t *comm, const xtq_shim_buf_t *b, size_t i, enum xtq_op op)
{
    if (b->count && !b->data)
        return seterr(comm, -XTQ_EINVAL, "buffer %zu: NULL data with count %zu", i, b->count);
    if ((unsigned)b->type >= XTQ_DT_COUNT || !xtq_reduce_supported(op, b->type))
        return seterr(comm, -XTQ_EINVAL, "buffer %zu: %s of %s is not a reduction", i,
                      xtq_op_name(op), xtq_datatype_name(b->type));
    if (!comm->be->ops->supported(comm->be, b->type, op))
        return seterr(comm, -XTQ_ENOSYS, "buffer %zu: back-end %s cannot reduce %s with %s", i,
                      comm->be->ops->name, xtq_datatype_name(b->type), xtq_op_name(op));
    if (b->mem != XTQ_SHIM_MEM_HOST && b->mem != XTQ_SHIM_MEM_CUDA)
        return seterr(comm, -XTQ_EINVAL, "buffer %zu: unknown memory kind %d", i, (int)b->mem);
    if (b->count > SIZE_MAX / 64)
        return seterr(comm, -XTQ_EOVERFLOW, "buffer %zu: count %zu too large", i, b->count);
    if (b->mem == XTQ_SHIM_MEM_CUDA) {
        const char *why = "";
        if (!shim__cuda_available(&why))
            return seterr(comm, -XTQ_ENODEV, "buffer %zu is device memory but %s", i, why);
    }
    return 0;
}

/* ---- planning ------------------------------------------------------------- */

static size_t align_up(size_t v, size_t a)
{
    return (v + a - 1) / a * a;
}

/*
 * Build the handle's collectives from its buffers and reserve scratch:
 * small buffers join their (type, memory) group, the rest go alone;
 * device memory the back-end cannot reduce is staged in pinned memory.
 */
static int plan(xtq_shim_handle_t *h, enum xtq_op op, size_t pack_bytes, uint64_t *sig)
{
    xtq_shim_comm_t *comm = h->comm;
    bool device_ok = comm->be->caps & SHIM_CAP_DEVICE_MEM;
    size_t need[3] = {0, 0, 0};
    int rc;
    *sig = mix64(0x5348494d, h->n);
    *sig = mix64(*sig, (uint64_t)op);
    for (size_t i = 0; i < h->n; i++) {
        const xtq_shim_buf_t *in = &h->in[i], *out = &h->out[i];
        if ((rc = check_buf(comm, in, i, op)) != 0)
            return rc;
        if (out->count != in->count || out->type != in->type || out->mem != in->mem ||
            (out->count && !out->data))
            return seterr(comm, -XTQ_EINVAL,
                          "buffer %zu: output differs from input in count, type or memory", i);
        *sig = mix64(mix64(*sig, in->count), (uint64_t)in->type);
        h->group_of[i] = -1;
        h->slot[i] = SIZE_MAX;
        size_t esz = xtq_datatype_size(in->type), bytes = in->count * esz;
        if (bytes == 0)
            continue;
        bool staged = in->mem == XTQ_SHIM_MEM_CUDA && !device_ok;
        if (bytes < pack_bytes) {
            size_t g = 0;
            while (g < h->ngroups &&
                   !(h->groups[g].type == in->type && h->groups[g].mem == in->mem))
                g++;
            if (g == h->ngroups) {
                h->groups[g] =
                    (struct shim_group){.type = in->type, .mem = in->mem, .staged = staged};
                h->ngroups++;
            }
            h->group_of[i] = (int)g;
            h->slot[i] = h->groups[g].count;
            h->groups[g].count += in->count;
            h->npacked++;
            continue;
        }
        struct shim_op *o = &h->ops[h->nops++];
        *o = (struct shim_op){.send = in->data,
                              .recv = out->data,
                              .count = in->count,
                              .type = in->type,
                              .mem = in->mem,
                              .index = i,
                              .group = -1};
        if (staged) {
            /* D2H into pinned memory, reduce there in place, H2D back. */
            o->send = o->recv = (void *)(uintptr_t)need[ARENA_PINNED];
            o->dev_out = out->data;
            o->mem = XTQ_SHIM_MEM_HOST;
            need[ARENA_PINNED] = align_up(need[ARENA_PINNED] + bytes, 64);
            h->nstaged++;
        }
    }
    /* Each group becomes one in-place collective on its pack. */
    for (size_t g = 0; g < h->ngroups; g++) {
        struct shim_group *gr = &h->groups[g];
        size_t bytes = gr->count * xtq_datatype_size(gr->type);
        enum arena_kind k = gr->mem == XTQ_SHIM_MEM_HOST ? ARENA_HOST
                            : gr->staged                 ? ARENA_PINNED
                                                         : ARENA_DEVICE;
        gr->offset = need[k];
        need[k] = align_up(need[k] + bytes, 64);
        struct shim_op *o = &h->ops[h->nops++];
        *o = (struct shim_op){.send = (void *)(uintptr_t)gr->offset,
                              .count = gr->count,
                              .type = gr->type,
                              .mem = gr->staged ? XTQ_SHIM_MEM_HOST : gr->mem,
                              .group = (int)g};
        o->recv = o->send;
        h->nstaged += gr->staged;
    }
    for (int k = 0; k < 3; k++)
        if ((rc = arena_reserve(comm->be, &h->arena[k], (enum arena_kind)k, need[k])) != 0)
            return seterr(comm, rc, "cannot allocate %zu bytes of %s scratch", need[k],
                          k == ARENA_HOST     ? "host"
                          : k == ARENA_PINNED ? "pinned"
                                              : "device");
    /* Offsets become addresses. */
    for (size_t j = 0; j < h->nops; j++) {
        struct shim_op *o = &h->ops[j];
        int k = -1;
        if (o->group >= 0) {
            struct shim_group *gr = &h->groups[o->group];
            k = gr->mem == XTQ_SHIM_MEM_HOST ? ARENA_HOST
                : gr->staged                 ? ARENA_PINNED
                                             : ARENA_DEVICE;
        } else if (o->dev_out) {
            k = ARENA_PINNED;
        }
        if (k >= 0) {
            o->send = o->recv = (char *)h->arena[k].p + (uintptr_t)o->send;
        }
    }
    return 0;
}

static void *group_base(xtq_shim_handle_t *h, int g)
{
    struct shim_group *gr = &h->groups[g];
    int k = gr->mem == XTQ_SHIM_MEM_HOST ? ARENA_HOST : gr->staged ? ARENA_PINNED : ARENA_DEVICE;
    return (char *)h->arena[k].p + gr->offset;
}

/*
 * gather: copy inputs into packs and staging areas; else scatter results
 * from them into the outputs.
 */
static int stage(xtq_shim_handle_t *h, bool gather)
{
    bool cuda = false;
    int rc = 0;
    for (size_t i = 0; i < h->n && rc == 0; i++) {
        if (h->group_of[i] < 0)
            continue;
        struct shim_group *gr = &h->groups[h->group_of[i]];
        size_t esz = xtq_datatype_size(gr->type), bytes = h->in[i].count * esz;
        char *pack = (char *)group_base(h, h->group_of[i]) + h->slot[i] * esz;
        void *user = gather ? h->in[i].data : h->out[i].data;
        void *dst = gather ? pack : user;
        const void *src = gather ? user : pack;
        if (gr->mem == XTQ_SHIM_MEM_HOST) {
            memcpy(dst, src, bytes);
            continue;
        }
        cuda = true;
        if (!gr->staged)
            rc = shim__cuda_copy_d2d(dst, src, bytes);
        else
            rc = gather ? shim__cuda_copy_d2h(dst, src, bytes)
                        : shim__cuda_copy_h2d(dst, src, bytes);
    }
    for (size_t j = 0; j < h->nops && rc == 0; j++) {
        struct shim_op *o = &h->ops[j];
        size_t bytes = o->count * xtq_datatype_size(o->type);
        if (o->group >= 0 || !o->dev_out)
            continue;
        cuda = true;
        rc = gather ? shim__cuda_copy_d2h(o->send, h->in[o->index].data, bytes)
                    : shim__cuda_copy_h2d(o->dev_out, o->recv, bytes);
    }
    if (rc == 0 && cuda)
        rc = shim__cuda_sync();
    if (rc != 0)
        return seterr(h->comm, rc, "copying %s device buffers failed: %s", gather ? "from" : "into",
                      shim__cuda_last_error());
    return 0;
}

/* ---- aggregate -------------------------------------------------------------- */

static int start(xtq_shim_comm_t *comm, const xtq_shim_buf_t *in, const xtq_shim_buf_t *out,
                 size_t n, enum xtq_op op, size_t pack_bytes, xtq_shim_handle_t **hp)
{
    struct shim_backend *be = comm->be;
    int rc;
    *hp = NULL;
    if (n && !in)
        return seterr(comm, -XTQ_EINVAL, "NULL buffer list");
    xtq_shim_handle_t *h = handle_get(comm, n);
    if (!h)
        return seterr(comm, -XTQ_ENOMEM, "out of memory for %zu buffers", n);
    h->t0 = now_ns();
    h->n = n;
    if (n) {
        memcpy(h->in, in, n * sizeof(*in));
        memcpy(h->out, out ? out : in, n * sizeof(*in));
    }
    uint64_t sig = 0;
    rc = plan(h, op, pack_bytes, &sig);
    if (comm->check)
        rc = check_collective(comm, sig, rc);
    if (rc != 0)
        goto err;
    if ((rc = stage(h, true)) != 0)
        goto err;
    for (size_t j = 0; j < h->nops; j++) {
        struct shim_op *o = &h->ops[j];
        rc = be->ops->iallreduce(be, o->send, o->recv, o->count, o->type, op, o->mem, &h->reqs[j]);
        if (rc != 0) {
            /* Already started ones must finish before the buffers go. */
            be->ops->waitall(be, h->reqs, j);
            seterr(comm, rc, "%s allreduce of %zu %s failed (%s)", be->ops->name, o->count,
                   xtq_datatype_name(o->type), xtq_strerror(rc));
            goto err;
        }
        comm->stats.collectives++;
        comm->stats.bytes += o->count * xtq_datatype_size(o->type);
    }
    comm->stats.aggregates++;
    comm->stats.packed += h->npacked;
    comm->stats.staged += h->nstaged;
    h->started = true;
    comm->inflight++;
    *hp = h;
    return 0;
err:
    handle_put(comm, h);
    return rc;
}

static int finish(xtq_shim_handle_t *h)
{
    xtq_shim_comm_t *comm = h->comm;
    struct shim_backend *be = comm->be;
    int rc = 0;
    if (!h->completed) {
        rc = be->ops->waitall(be, h->reqs, h->nops);
        if (rc != 0)
            seterr(comm, rc, "%s allreduce failed (%s)", be->ops->name, xtq_strerror(rc));
    }
    if (rc == 0)
        rc = stage(h, false);
    comm->inflight--;
    comm->stats.wait_ns += now_ns() - h->t0;
    handle_put(comm, h);
    return rc;
}

int xtq_shim_aggregate_async(xtq_shim_comm_t *comm, const xtq_shim_buf_t *in,
                             const xtq_shim_buf_t *out, size_t n, xtq_shim_handle_t **handle)
{
    if (!comm || !handle)
        return -XTQ_EINVAL;
    uint64_t t0 = now_ns();
    int rc = start(comm, in, out, n, XTQ_OP_SUM, comm->pack_bytes, handle);
    if (rc == 0)
        (*handle)->t0 = now_ns(); /* blocked time counts from the wait */
    comm->stats.wait_ns += now_ns() - t0;
    return rc;
}

int xtq_shim_test(xtq_shim_handle_t *h, int *done)
{
    if (!h || !done)
        return -XTQ_EINVAL;
    if (!h->completed) {
        int d = 0;
        int rc = h->comm->be->ops->testall(h->comm->be, h->reqs, h->nops, &d);
        if (rc != 0)
            return seterr(h->comm, rc, "test failed (%s)", xtq_strerror(rc));
        h->completed = d != 0;
    }
    *done = h->completed;
    return 0;
}

int xtq_shim_wait(xtq_shim_handle_t *h)
{
    if (!h)
        return -XTQ_EINVAL;
    h->t0 = now_ns();
    return finish(h);
}

int xtq_shim_aggregate(xtq_shim_comm_t *comm, const xtq_shim_buf_t *in, const xtq_shim_buf_t *out,
                       size_t n)
{
    if (!comm)
        return -XTQ_EINVAL;
    xtq_shim_handle_t *h;
    uint64_t t0 = now_ns();
    int rc = start(comm, in, out, n, XTQ_OP_SUM, comm->pack_bytes, &h);
    if (rc != 0) {
        comm->stats.wait_ns += now_ns() - t0;
        return rc;
    }
    h->t0 = t0;
    return finish(h);
}

int xtq_shim_aggregate_in_place(xtq_shim_comm_t *comm, const xtq_shim_buf_t *bufs, size_t n)
{
    return xtq_shim_aggregate(comm, bufs, bufs, n);
}

int xtq_shim_allreduce(xtq_shim_comm_t *comm, const void *send, void *recv, size_t count,
                       enum xtq_datatype type, enum xtq_op op, enum xtq_shim_mem mem)
{
    if (!comm)
        return -XTQ_EINVAL;
    if ((unsigned)op >= XTQ_OP_COUNT || op == XTQ_OP_REPLACE || op == XTQ_OP_NO_OP)
        return seterr(comm, -XTQ_EINVAL, "%s is not an allreduce operation", xtq_op_name(op));
    xtq_shim_buf_t in = {
        .data = (void *)(send ? send : recv), .count = count, .type = type, .mem = mem};
    xtq_shim_buf_t out = {.data = recv, .count = count, .type = type, .mem = mem};
    xtq_shim_handle_t *h;
    uint64_t t0 = now_ns();
    /* One buffer: no packing, so the back-end reduces it where it is. */
    int rc = start(comm, &in, &out, 1, op, 0, &h);
    if (rc != 0)
        return rc;
    h->t0 = t0;
    return finish(h);
}

int xtq_shim_barrier(xtq_shim_comm_t *comm)
{
    if (!comm)
        return -XTQ_EINVAL;
    int rc = comm->be->ops->barrier(comm->be);
    if (rc != 0)
        return seterr(comm, rc, "barrier failed (%s)", xtq_strerror(rc));
    return 0;
}
