/*
 * libxtq_shim, run by every rank under mpirun (and alone), on the back-end
 * XTQ_SHIM_BACKEND names (CTest runs every case for each one): workers,
 * aggregates (in place, in to out, asynchronous) over buffer lists that
 * mix packed and unpacked sizes and several types, general allreduce
 * operations, packing statistics, the barrier, and bad calls: mismatched
 * lists, invalid buffers, unknown back-ends, device memory without a
 * device. Values are small integers so every sum is exact.
 */
#include "xtq_shim.h"
#include "xtq_test.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef XTQ_SHIM_TEST_CUDA
#include <cuda_runtime_api.h>
#endif

/* The back-end under test (XTQ_SHIM_BACKEND, default mpi). */
static const char *backend(void)
{
    const char *b = getenv("XTQ_SHIM_BACKEND");
    return b && *b ? b : "mpi";
}

static xtq_shim_comm_t *open_comm(uint64_t mask, size_t pack_bytes, int check)
{
    xtq_shim_attr_t attr = {.field_mask = mask | XTQ_SHIM_ATTR_FIELD_BACKEND,
                            .backend = backend(),
                            .pack_bytes = pack_bytes,
                            .check = check};
    xtq_shim_comm_t *c = NULL;
    CHECK_OK(xtq_shim_init(&attr, &c));
    CHECK(c != NULL);
    return c;
}

static double elem(size_t r, size_t j)
{
    return (double)((r + 1) * ((j % 13) + 1));
}

/* sum over ranks of elem(r, j) */
static double total(size_t size, size_t j)
{
    return (double)((j % 13) + 1) * (double)(size * (size + 1) / 2);
}

/* float16: small integers are exact; 1.0 = 0x3c00, built by hand. */
static uint16_t to_half(double v)
{
    /* v is a positive integer < 2048 */
    if (v == 0)
        return 0;
    int e = 0;
    while (v >= 2.0) {
        v /= 2.0;
        e++;
    }
    return (uint16_t)(((e + 15) << 10) | (uint16_t)((v - 1.0) * 1024.0 + 0.5));
}

static double from_half(uint16_t h)
{
    int e = (h >> 10) & 31;
    double m = 1.0 + (h & 1023) / 1024.0;
    return h == 0 ? 0 : m * (double)(1u << e) / (double)(1u << 15);
}

static void fill(void *p, enum xtq_datatype t, size_t n, size_t r)
{
    for (size_t j = 0; j < n; j++) {
        double v = elem(r, j);
        switch (t) {
        case XTQ_DT_FLOAT:
            ((float *)p)[j] = (float)v;
            break;
        case XTQ_DT_DOUBLE:
            ((double *)p)[j] = v;
            break;
        case XTQ_DT_INT32:
            ((int32_t *)p)[j] = (int32_t)v;
            break;
        case XTQ_DT_INT64:
            ((int64_t *)p)[j] = (int64_t)v;
            break;
        case XTQ_DT_FLOAT16:
            ((uint16_t *)p)[j] = to_half(v);
            break;
        default:
            XTQ_FAIL("type %d", (int)t);
        }
    }
}

static void expect_sums(const void *p, enum xtq_datatype t, size_t n, size_t size, const char *what)
{
    for (size_t j = 0; j < n; j++) {
        double v = 0, want = total(size, j);
        switch (t) {
        case XTQ_DT_FLOAT:
            v = ((const float *)p)[j];
            break;
        case XTQ_DT_DOUBLE:
            v = ((const double *)p)[j];
            break;
        case XTQ_DT_INT32:
            v = ((const int32_t *)p)[j];
            break;
        case XTQ_DT_INT64:
            v = (double)((const int64_t *)p)[j];
            break;
        case XTQ_DT_FLOAT16:
            v = from_half(((const uint16_t *)p)[j]);
            break;
        default:
            break;
        }
        if (v != want)
            XTQ_FAIL("%s: %s element %zu of %zu is %g, expected %g", what, xtq_datatype_name(t), j,
                     n, v, want);
    }
}

/* A list that mixes packed (< 32 KiB) and unpacked buffers, four types. */
static const struct {
    enum xtq_datatype type;
    size_t count;
} list[] = {
    {XTQ_DT_FLOAT, 1},     {XTQ_DT_FLOAT, 100000}, {XTQ_DT_FLOAT, 8191}, {XTQ_DT_FLOAT, 8192},
    {XTQ_DT_DOUBLE, 7},    {XTQ_DT_INT32, 4096},   {XTQ_DT_INT64, 5000}, {XTQ_DT_FLOAT, 0},
    {XTQ_DT_FLOAT16, 300}, {XTQ_DT_DOUBLE, 40000}, {XTQ_DT_FLOAT, 33},
};
#define NLIST (sizeof(list) / sizeof(list[0]))

static void make_list(xtq_shim_buf_t *b, size_t rank)
{
    for (size_t i = 0; i < NLIST; i++) {
        size_t bytes = list[i].count * xtq_datatype_size(list[i].type);
        b[i] = (xtq_shim_buf_t){.data = bytes ? malloc(bytes) : NULL,
                                .count = list[i].count,
                                .type = list[i].type,
                                .mem = XTQ_SHIM_MEM_HOST};
        if (bytes)
            fill(b[i].data, list[i].type, list[i].count, rank);
    }
}

static void free_list(xtq_shim_buf_t *b)
{
    for (size_t i = 0; i < NLIST; i++)
        free(b[i].data);
}

XTQ_TEST(workers)
{
    xtq_shim_comm_t *c = open_comm(0, 0, 0);
    size_t n = 0;
    const xtq_shim_worker_t *w = xtq_shim_workers(c, &n);
    CHECK_EQ(n, xtq_shim_size(c));
    CHECK(xtq_shim_rank(c) < n);
    char host[64] = "";
    gethostname(host, sizeof(host) - 1);
    for (size_t r = 0; r < n; r++) {
        CHECK_EQ(w[r].global_rank, r);
        CHECK(w[r].host_id[0] != '\0');
        /* One host here: every worker reports this host's name. */
        CHECK(strncmp(w[r].host_id, host, 63) == 0);
    }
    CHECK(xtq_shim_current_worker(c) == &w[xtq_shim_rank(c)]);
    CHECK(strcmp(xtq_shim_backend(c), backend()) == 0);
    CHECK_OK(xtq_shim_finalize(c));
}

XTQ_TEST(aggregate_in_place)
{
    xtq_shim_comm_t *c = open_comm(0, 0, 0);
    size_t rank = xtq_shim_rank(c), size = xtq_shim_size(c);
    xtq_shim_buf_t b[NLIST];
    make_list(b, rank);
    for (int round = 0; round < 3; round++) {
        if (round)
            for (size_t i = 0; i < NLIST; i++)
                if (b[i].count)
                    fill(b[i].data, b[i].type, b[i].count, rank);
        CHECK_OK(xtq_shim_aggregate_in_place(c, b, NLIST));
        for (size_t i = 0; i < NLIST; i++)
            expect_sums(b[i].data, b[i].type, b[i].count, size, "in place");
    }
    /* Packing: 32 KiB default; the buffers under it travel packed, one
     * collective per type among them. */
    xtq_shim_stats_t st;
    CHECK_OK(xtq_shim_get_stats(c, &st));
    size_t packed = 0, big = 0;
    for (size_t i = 0; i < NLIST; i++) {
        size_t bytes = list[i].count * xtq_datatype_size(list[i].type);
        packed += bytes && bytes < 32768;
        big += bytes >= 32768;
    }
    CHECK_EQ(st.aggregates, 3);
    CHECK_EQ(st.packed, 3 * packed);
    /* packed groups: float, double, int32, float16 */
    CHECK_EQ(st.collectives, 3 * (big + 4));
    free_list(b);
    CHECK_OK(xtq_shim_finalize(c));
}

XTQ_TEST(no_packing)
{
    xtq_shim_comm_t *c = open_comm(XTQ_SHIM_ATTR_FIELD_PACK_BYTES, 0, 0);
    size_t rank = xtq_shim_rank(c), size = xtq_shim_size(c);
    xtq_shim_buf_t b[NLIST];
    make_list(b, rank);
    CHECK_OK(xtq_shim_aggregate_in_place(c, b, NLIST));
    for (size_t i = 0; i < NLIST; i++)
        expect_sums(b[i].data, b[i].type, b[i].count, size, "unpacked");
    xtq_shim_stats_t st;
    CHECK_OK(xtq_shim_get_stats(c, &st));
    CHECK_EQ(st.packed, 0);
    CHECK_EQ(st.collectives, NLIST - 1); /* all but the empty one */
    free_list(b);
    CHECK_OK(xtq_shim_finalize(c));
}

XTQ_TEST(aggregate_in_to_out)
{
    xtq_shim_comm_t *c = open_comm(0, 0, 0);
    size_t rank = xtq_shim_rank(c), size = xtq_shim_size(c);
    xtq_shim_buf_t in[NLIST], out[NLIST];
    make_list(in, rank);
    make_list(out, 999);
    CHECK_OK(xtq_shim_aggregate(c, in, out, NLIST));
    for (size_t i = 0; i < NLIST; i++) {
        expect_sums(out[i].data, out[i].type, out[i].count, size, "out");
        /* Inputs are untouched. */
        xtq_shim_buf_t again = in[i];
        void *ref = again.count ? malloc(again.count * xtq_datatype_size(again.type)) : NULL;
        if (ref) {
            fill(ref, again.type, again.count, rank);
            CHECK(memcmp(ref, in[i].data, again.count * xtq_datatype_size(again.type)) == 0);
        }
        free(ref);
    }
    free_list(in);
    free_list(out);
    CHECK_OK(xtq_shim_finalize(c));
}

XTQ_TEST(aggregate_async)
{
    xtq_shim_comm_t *c = open_comm(0, 0, 0);
    size_t rank = xtq_shim_rank(c), size = xtq_shim_size(c);
    xtq_shim_buf_t a[NLIST], b[NLIST];
    make_list(a, rank);
    make_list(b, rank);
    xtq_shim_handle_t *ha, *hb;
    CHECK_OK(xtq_shim_aggregate_async(c, a, NULL, NLIST, &ha));
    CHECK_OK(xtq_shim_aggregate_async(c, b, NULL, NLIST, &hb));
    /* Finalize refuses while aggregates are in flight. */
    CHECK_ERR(xtq_shim_finalize(c), -XTQ_EBUSY);
    int done = 0;
    for (int spins = 0; !done && spins < 1000000; spins++)
        CHECK_OK(xtq_shim_test(hb, &done));
    CHECK(done);
    CHECK_OK(xtq_shim_wait(hb));
    CHECK_OK(xtq_shim_wait(ha));
    for (size_t i = 0; i < NLIST; i++) {
        expect_sums(a[i].data, a[i].type, a[i].count, size, "async a");
        expect_sums(b[i].data, b[i].type, b[i].count, size, "async b");
    }
    free_list(a);
    free_list(b);
    CHECK_OK(xtq_shim_finalize(c));
}

XTQ_TEST(allreduce_ops)
{
    xtq_shim_comm_t *c = open_comm(0, 0, 0);
    size_t rank = xtq_shim_rank(c), size = xtq_shim_size(c);
    int32_t v[4] = {(int32_t)rank, -(int32_t)rank, (int32_t)rank + 1, 1 << rank % 30};
    CHECK_OK(xtq_shim_allreduce(c, NULL, &v[0], 1, XTQ_DT_INT32, XTQ_OP_MAX, XTQ_SHIM_MEM_HOST));
    CHECK_OK(xtq_shim_allreduce(c, NULL, &v[1], 1, XTQ_DT_INT32, XTQ_OP_MIN, XTQ_SHIM_MEM_HOST));
    CHECK_OK(xtq_shim_allreduce(c, NULL, &v[2], 1, XTQ_DT_INT32, XTQ_OP_PROD, XTQ_SHIM_MEM_HOST));
    CHECK_OK(xtq_shim_allreduce(c, NULL, &v[3], 1, XTQ_DT_INT32, XTQ_OP_BOR, XTQ_SHIM_MEM_HOST));
    int32_t fact = 1, bits = 0;
    for (size_t r = 0; r < size; r++) {
        fact *= (int32_t)r + 1;
        bits |= 1 << r % 30;
    }
    CHECK_EQ(v[0], size - 1);
    CHECK_EQ(v[1], -(long long)(size - 1));
    CHECK_EQ(v[2], fact);
    CHECK_EQ(v[3], bits);
    /* MAXLOC on {float, int}: the largest value, lowest index on ties. */
    struct {
        float v;
        int i;
    } fi = {rank == 0 ? 5.0f : 7.0f, (int)rank}, out;
    CHECK_OK(
        xtq_shim_allreduce(c, &fi, &out, 1, XTQ_DT_FLOAT_INT, XTQ_OP_MAXLOC, XTQ_SHIM_MEM_HOST));
    CHECK(out.v == (size > 1 ? 7.0f : 5.0f));
    CHECK_EQ(out.i, size > 1 ? 1 : 0);
    /* float16 MAX through the user operation. */
    uint16_t h = to_half((double)rank + 1);
    CHECK_OK(xtq_shim_allreduce(c, NULL, &h, 1, XTQ_DT_FLOAT16, XTQ_OP_MAX, XTQ_SHIM_MEM_HOST));
    CHECK(from_half(h) == (double)size);
    /* Not reductions. */
    CHECK_ERR(xtq_shim_allreduce(c, NULL, v, 1, XTQ_DT_INT32, XTQ_OP_REPLACE, XTQ_SHIM_MEM_HOST),
              -XTQ_EINVAL);
    CHECK_ERR(xtq_shim_allreduce(c, NULL, v, 1, XTQ_DT_BYTE, XTQ_OP_SUM, XTQ_SHIM_MEM_HOST),
              -XTQ_EINVAL);
    CHECK_OK(xtq_shim_finalize(c));
}

XTQ_TEST(barrier)
{
    xtq_shim_comm_t *c = open_comm(0, 0, 0);
    size_t rank = xtq_shim_rank(c), size = xtq_shim_size(c);
    CHECK_OK(xtq_shim_barrier(c));
    /* Rank 0 arrives late; nobody leaves before it arrived (a behaviour,
     * not a speed). Its arrival time, on the host's monotonic clock that
     * every rank of the test reads, reaches the others as a sum of it and
     * zeros: no threshold that a rank scheduled late could miss. */
    struct timespec t;
    if (rank == 0)
        usleep(200000);
    clock_gettime(CLOCK_MONOTONIC, &t);
    double arrived = rank == 0 ? (double)t.tv_sec * 1e9 + (double)t.tv_nsec : 0.0;
    CHECK_OK(xtq_shim_barrier(c));
    clock_gettime(CLOCK_MONOTONIC, &t);
    double left = (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
    xtq_shim_buf_t b = {&arrived, 1, XTQ_DT_DOUBLE, XTQ_SHIM_MEM_HOST};
    CHECK_OK(xtq_shim_aggregate_in_place(c, &b, 1));
    if (size > 1)
        CHECK(left >= arrived);
    CHECK_OK(xtq_shim_finalize(c));
}

/* XTQ_SHIM_CHECK: a worker whose list differs makes every worker fail the
 * call, none hangs, and the next matching call works. */
XTQ_TEST(check_mismatch)
{
    xtq_shim_comm_t *c = open_comm(XTQ_SHIM_ATTR_FIELD_CHECK, 0, 1);
    size_t rank = xtq_shim_rank(c), size = xtq_shim_size(c);
    float x[64];
    fill(x, XTQ_DT_FLOAT, 64, rank);
    xtq_shim_buf_t b = {x, rank == size - 1 && size > 1 ? 63 : 64, XTQ_DT_FLOAT, XTQ_SHIM_MEM_HOST};
    if (size > 1) {
        CHECK_ERR(xtq_shim_aggregate_in_place(c, &b, 1), -XTQ_EINVAL);
        CHECK(strstr(xtq_shim_last_error(c), "different") != NULL);
    }
    /* A bad buffer on one worker: everyone fails. */
    xtq_shim_buf_t bad = {rank == 0 ? NULL : x, 64, XTQ_DT_FLOAT, XTQ_SHIM_MEM_HOST};
    CHECK_ERR(xtq_shim_aggregate_in_place(c, &bad, 1), -XTQ_EINVAL);
    b.count = 64;
    CHECK_OK(xtq_shim_aggregate_in_place(c, &b, 1));
    expect_sums(x, XTQ_DT_FLOAT, 64, size, "after mismatch");
    CHECK_OK(xtq_shim_finalize(c));
}

XTQ_TEST(bad_calls)
{
    xtq_shim_comm_t *c = NULL;
    xtq_shim_attr_t attr = {.field_mask = XTQ_SHIM_ATTR_FIELD_BACKEND, .backend = "nope"};
    CHECK_ERR(xtq_shim_init(&attr, &c), -XTQ_ENOENT);
    CHECK(c == NULL);
    CHECK_ERR(xtq_shim_init(NULL, NULL), -XTQ_EINVAL);
    /* Both back-ends are listed; one this build lacks says why, and
     * asking for it fails with -XTQ_ENOSYS. */
    const char *name, *why;
    int avail, found_xtq = 0, found_mpi = 0, found_nccl = 0;
    for (unsigned i = 0; xtq_shim_backend_info(i, &name, &avail, &why) == 0; i++) {
        found_mpi |= !strcmp(name, "mpi");
        if (!strcmp(name, "nccl")) {
            /* Without a GPU, NCCL or the CUDA toolkit: listed, with why. */
            found_nccl = 1;
            if (!avail) {
                CHECK(why != NULL && *why != '\0');
                attr.backend = "nccl";
                CHECK_ERR(xtq_shim_init(&attr, &c), -XTQ_ENOSYS);
                CHECK(c == NULL);
            }
        }
        if (!strcmp(name, "xtq")) {
            found_xtq = 1;
            if (!avail) {
                CHECK(strstr(why, "libxtq_coll") != NULL);
                attr.backend = "xtq";
                CHECK_ERR(xtq_shim_init(&attr, &c), -XTQ_ENOSYS);
            }
        }
    }
    CHECK(found_xtq && found_mpi && found_nccl);

    c = open_comm(XTQ_SHIM_ATTR_FIELD_CHECK, 0, 1);
    float x[4] = {0};
    xtq_shim_buf_t in = {x, 4, XTQ_DT_FLOAT, XTQ_SHIM_MEM_HOST};
    xtq_shim_buf_t out = {x, 3, XTQ_DT_FLOAT, XTQ_SHIM_MEM_HOST};
    CHECK_ERR(xtq_shim_aggregate(c, &in, &out, 1), -XTQ_EINVAL);
    xtq_shim_buf_t byte = {x, 4, XTQ_DT_BYTE, XTQ_SHIM_MEM_HOST};
    CHECK_ERR(xtq_shim_aggregate_in_place(c, &byte, 1), -XTQ_EINVAL);
    xtq_shim_buf_t kind = {x, 4, XTQ_DT_FLOAT, (enum xtq_shim_mem)7};
    CHECK_ERR(xtq_shim_aggregate_in_place(c, &kind, 1), -XTQ_EINVAL);
    CHECK_ERR(xtq_shim_aggregate_in_place(c, NULL, 1), -XTQ_EINVAL);
    CHECK_OK(xtq_shim_aggregate_in_place(c, NULL, 0));
#ifndef XTQ_SHIM_TEST_CUDA
    /* Device memory in a build without CUDA: refused with the reason. */
    xtq_shim_buf_t dev = {x, 4, XTQ_DT_FLOAT, XTQ_SHIM_MEM_CUDA};
    CHECK_ERR(xtq_shim_aggregate_in_place(c, &dev, 1), -XTQ_ENODEV);
    CHECK(strstr(xtq_shim_last_error(c), "CUDA") != NULL);
#endif
    CHECK_OK(xtq_shim_finalize(c));
}

/* Device buffers, staged through pinned memory by the mpi back-end. */
XTQ_TEST(device_staged)
{
#ifdef XTQ_SHIM_TEST_CUDA
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0)
        XTQ_SKIP("no CUDA device");
    /* The rank's GPU is current before the communicator opens: the xtq
     * back-end's CUDA team and NCCL's communicator take it then. */
    const char *ws = getenv("OMPI_COMM_WORLD_SIZE"), *wr = getenv("OMPI_COMM_WORLD_RANK");
    int wsize = ws ? atoi(ws) : 1, wrank = wr ? atoi(wr) : 0;
    if (!strcmp(backend(), "nccl") && wsize > n)
        XTQ_SKIP("nccl needs a GPU per rank: %d ranks, %d GPU(s)", wsize, n);
    cudaSetDevice(wrank % n);
    xtq_shim_comm_t *c = open_comm(0, 0, 0);
    size_t rank = xtq_shim_rank(c), size = xtq_shim_size(c);
    xtq_shim_buf_t h[NLIST], d[NLIST];
    make_list(h, rank);
    for (size_t i = 0; i < NLIST; i++) {
        size_t bytes = h[i].count * xtq_datatype_size(h[i].type);
        d[i] = h[i];
        d[i].mem = XTQ_SHIM_MEM_CUDA;
        d[i].data = NULL;
        if (bytes) {
            CHECK(cudaMalloc(&d[i].data, bytes) == cudaSuccess);
            CHECK(cudaMemcpy(d[i].data, h[i].data, bytes, cudaMemcpyHostToDevice) == cudaSuccess);
        }
    }
    CHECK_OK(xtq_shim_aggregate_in_place(c, d, NLIST));
    for (size_t i = 0; i < NLIST; i++) {
        size_t bytes = h[i].count * xtq_datatype_size(h[i].type);
        if (bytes)
            CHECK(cudaMemcpy(h[i].data, d[i].data, bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
        expect_sums(h[i].data, h[i].type, h[i].count, size, "device");
    }
    xtq_shim_stats_t st;
    CHECK_OK(xtq_shim_get_stats(c, &st));
    /* mpi reduces host memory: every device buffer went through it. */
    if (!strcmp(backend(), "mpi"))
        CHECK(st.staged > 0);
    free_list(h);
    CHECK_OK(xtq_shim_finalize(c));
    /* cudaFree waits for an idle device: after the xtq back-end's CUDA
     * processor has stopped (docs/cuda.md). */
    for (size_t i = 0; i < NLIST; i++)
        cudaFree(d[i].data);
#else
    XTQ_SKIP("built without CUDA");
#endif
}
