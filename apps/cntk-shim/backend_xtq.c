/*
 * The xtq back-end: libxtq_coll (apps/allreduce, <xtq/coll.h>). Each
 * allreduce is a schedule of XtqPuts whose tasks reduce the arriving
 * pieces on the receiver's agent: the CPU agent for host buffers, the
 * CUDA agent for device buffers (no staging through host memory), with
 * the steps chained without the application thread.
 *
 * Two teams over every rank of the context: one for host memory, made at
 * open, and one for device memory, made at the first device buffer (all
 * workers pass device buffers in the same call, so they create it
 * together; a worker without a CUDA agent stages instead, and then the
 * team's creation times out with an error rather than hanging). The
 * context is the caller's (xtq_shim_attr_t.xtq_ctx) or the back-end's own,
 * bootstrapped by libxtq (PMIx under mpirun: the same ranks as MPI's).
 */
#include "shim_internal.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <xtq/coll.h>
#include <xtq/xtq.h>

struct xtq_backend {
    struct shim_backend base;
    xtq_ctx_t *ctx;
    int own_ctx;
    xtq_coll_team_t *team[2]; /* indexed by enum xtq_shim_mem */
};

static int xtq_available(const char **why)
{
    *why = "";
    return 1;
}

static int make_team(struct xtq_backend *be, enum xtq_shim_mem mem)
{
    xtq_coll_team_attr_t attr = {
        .field_mask = XTQ_COLL_TEAM_ATTR_FIELD_MEM,
        .mem = mem == XTQ_SHIM_MEM_CUDA ? XTQ_COLL_MEM_CUDA : XTQ_COLL_MEM_HOST,
    };
    int rc = xtq_coll_team_create(be->ctx, &attr, &be->team[mem]);
    if (rc != 0) {
        fprintf(stderr, "xtq_shim(xtq): rank %zu: cannot create the %s team: %s\n", be->base.rank,
                mem == XTQ_SHIM_MEM_CUDA ? "device" : "host", xtq_strerror(rc));
        be->team[mem] = NULL;
    }
    return rc;
}

static int xtq_open(const xtq_shim_attr_t *attr, struct shim_backend **out, char *err,
                    size_t errlen)
{
    struct xtq_backend *be = calloc(1, sizeof(*be));
    int rc;
    if (!be) {
        snprintf(err, errlen, "out of memory");
        return -XTQ_ENOMEM;
    }
    if ((attr->field_mask & XTQ_SHIM_ATTR_FIELD_XTQ_CTX) && attr->xtq_ctx) {
        be->ctx = attr->xtq_ctx;
    } else {
        rc = xtq_init(NULL, &be->ctx);
        if (rc != 0) {
            snprintf(err, errlen, "xtq_init failed");
            goto err_be;
        }
        be->own_ctx = 1;
    }
    be->base.ops = &shim__xtq_ops;
    be->base.rank = (size_t)xtq_rank(be->ctx);
    be->base.size = (size_t)xtq_size(be->ctx);
    /* Device buffers go to the CUDA agent when this process has one. */
    be->base.caps =
        xtq_agent_kind_status(be->ctx, XTQ_AGENT_CUDA, NULL, 0) == 0 ? SHIM_CAP_DEVICE_MEM : 0;
    rc = make_team(be, XTQ_SHIM_MEM_HOST);
    if (rc != 0) {
        snprintf(err, errlen, "creating the host team failed");
        goto err_ctx;
    }
    *out = &be->base;
    return 0;
err_ctx:
    if (be->own_ctx)
        xtq_finalize(be->ctx);
err_be:
    free(be);
    return rc;
}

static int xtq_close(struct shim_backend *base)
{
    struct xtq_backend *be = container_of(base, struct xtq_backend, base);
    int rc = 0, r;
    for (int m = 1; m >= 0; m--)
        if (be->team[m] && (r = xtq_coll_team_destroy(be->team[m])) != 0 && rc == 0)
            rc = r;
    if (be->own_ctx && (r = xtq_finalize(be->ctx)) != 0 && rc == 0)
        rc = r;
    free(be);
    return rc;
}

static int xtq_supported(struct shim_backend *be, enum xtq_datatype type, enum xtq_op op)
{
    /* libxtq_coll takes every pair xtq_reduce_supported() accepts but the
     * accumulate-only operations (the core refuses those already). */
    return op != XTQ_OP_REPLACE && op != XTQ_OP_NO_OP;
}

static int xtq_iallreduce(struct shim_backend *base, const void *send, void *recv, size_t count,
                          enum xtq_datatype type, enum xtq_op op, enum xtq_shim_mem mem,
                          shim_breq_t *req)
{
    struct xtq_backend *be = container_of(base, struct xtq_backend, base);
    xtq_coll_req_t *r = NULL;
    int rc;
    if (!be->team[mem] && (rc = make_team(be, mem)) != 0)
        return rc;
    rc = xtq_coll_iallreduce(be->team[mem], send == recv ? XTQ_COLL_IN_PLACE : send, recv, count,
                             type, op, &r);
    req->ptr = rc == 0 ? r : NULL;
    return rc;
}

/* A finished request is freed by libxtq_coll; its slot becomes NULL. */
static int xtq_testall(struct shim_backend *be, shim_breq_t *reqs, size_t n, int *done)
{
    int rc = 0, all = 1;
    for (size_t i = 0; i < n; i++) {
        if (!reqs[i].ptr)
            continue;
        int d = 0, r = xtq_coll_test(reqs[i].ptr, &d);
        if (d)
            reqs[i].ptr = NULL;
        else
            all = 0;
        if (r != 0 && rc == 0)
            rc = r;
    }
    *done = all;
    return rc;
}

static int xtq_waitall(struct shim_backend *be, shim_breq_t *reqs, size_t n)
{
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        if (!reqs[i].ptr)
            continue;
        int r = xtq_coll_wait(reqs[i].ptr, XTQ_TIMEOUT_INFINITE);
        reqs[i].ptr = NULL;
        if (r != 0 && rc == 0)
            rc = r;
    }
    return rc;
}

static int xtq_shim_barrier_op(struct shim_backend *base)
{
    struct xtq_backend *be = container_of(base, struct xtq_backend, base);
    return xtq_barrier(be->ctx);
}

struct idle_call {
    void (*fn)(void *);
    void *arg;
    bool ran;
};

static void idle_run(void *arg)
{
    struct idle_call *c = arg;
    c->fn(c->arg);
    c->ran = true;
}

/* With a CUDA agent in this process its processor keeps the device busy:
 * fn runs inside xtq_cuda_quiesce. Without one, directly. */
static int xtq_device_idle(struct shim_backend *base, void (*fn)(void *), void *arg)
{
    struct xtq_backend *be = container_of(base, struct xtq_backend, base);
    struct idle_call c = {fn, arg, false};
    xtq_agent_t *cuda;

    if (xtq_agent_find_device(be->ctx, XTQ_AGENT_CUDA, (uint32_t)shim__cuda_device(), &cuda) != 0) {
        fn(arg);
        return 0;
    }
    int rc = xtq_cuda_quiesce(cuda, idle_run, &c);
    return c.ran ? 0 : rc ? rc : -XTQ_EIO;
}

const struct shim_backend_ops shim__xtq_ops = {
    .name = "xtq",
    .available = xtq_available,
    .open = xtq_open,
    .close = xtq_close,
    .supported = xtq_supported,
    .iallreduce = xtq_iallreduce,
    .testall = xtq_testall,
    .waitall = xtq_waitall,
    .barrier = xtq_shim_barrier_op,
    .device_idle = xtq_device_idle,
};
