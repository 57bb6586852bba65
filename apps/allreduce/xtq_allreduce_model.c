/*
 * xtq_allreduce_model: a LogGP-style model of each allreduce path, fitted
 * to xtq_allreduce's measurements and projected to many nodes (Fig. 9c).
 *
 * The model runs the schedules libxtq_coll would run (coll_sched.c: the
 * algorithm it chooses for the size and rank count, every rank, every
 * step) through a discrete-event simulation with three costs per path:
 *   alpha  per message: software on both sides plus the wire's latency
 *          (a put issued to its task started: o_s + L + o_r)
 *   beta   per byte moved: a rank injects its messages one after another
 *          (LogGP's G)
 *   gamma  per byte reduced: a rank's receive tasks run one at a time
 * A message leaves when the steps it depends on are done and the sender's
 * link is free; a receive runs when its message has arrived, its local
 * inputs are done and its agent is free. The time is the last rank's end.
 *
 * Fit: alpha, beta, gamma of each path minimise the squared log error over
 * the fit files' points (Nelder-Mead in log space). Check: the error on
 * other points (the strong-scaling run) that the fit did not see.
 * Projection: the fitted software costs on a stated network, alpha +
 * L_net per message and max(beta, 1 / bandwidth) per byte, at the given
 * rank counts.
 *
 *   xtq_allreduce_model --fit sweep.csv[,more.csv] --check strong.csv \
 *       --size 4M --project 2,4,8,16,64,256,1024 --latency-us 1.5 \
 *       --gbits 100 --out model.dat
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll_sched.h"

#define MAX_PTS   4096
#define MAX_MODES 8

struct point {
    char mode[16];
    int ranks;
    uint64_t size;
    double us;
};

static struct point fitp[MAX_PTS], chkp[MAX_PTS];
static int nfit, nchk;
static struct coll_thresholds th = {16384, 64u << 20};
static uint64_t piece_bytes = 256u << 10;

/* ---- reading xtq_allreduce's CSV ------------------------------------------------- */

static int read_csv(const char *path, struct point *pts, int *n)
{
    FILE *f = fopen(path, "r");
    char line[1024];
    int col_mode = -1, col_ranks = -1, col_size = -1, col_time = -1, col_place = -1;

    if (!f) {
        fprintf(stderr, "model: %s: %s\n", path, strerror(errno));
        return -1;
    }
    while (fgets(line, sizeof(line), f)) {
        char *tok[32], *save = NULL;
        int nt = 0;
        if (line[0] == '#' || line[0] == '\n')
            continue;
        line[strcspn(line, "\r\n")] = 0;
        for (char *t = strtok_r(line, ",", &save); t && nt < 32; t = strtok_r(NULL, ",", &save))
            tok[nt++] = t;
        if (col_mode < 0) {
            for (int i = 0; i < nt; i++) {
                if (!strcmp(tok[i], "mode"))
                    col_mode = i;
                if (!strcmp(tok[i], "ranks"))
                    col_ranks = i;
                if (!strcmp(tok[i], "size"))
                    col_size = i;
                if (!strcmp(tok[i], "time_us"))
                    col_time = i;
                if (!strcmp(tok[i], "placement"))
                    col_place = i;
            }
            if (col_mode < 0 || col_ranks < 0 || col_size < 0 || col_time < 0) {
                fprintf(stderr, "model: %s: not an xtq_allreduce CSV\n", path);
                fclose(f);
                return -1;
            }
            continue;
        }
        if (nt <= col_time || (col_place >= 0 && strcmp(tok[col_place], "out") != 0))
            continue;
        if (*n == MAX_PTS)
            break;
        struct point *p = &pts[(*n)++];
        snprintf(p->mode, sizeof(p->mode), "%s", tok[col_mode]);
        p->ranks = atoi(tok[col_ranks]);
        p->size = strtoull(tok[col_size], NULL, 10);
        p->us = atof(tok[col_time]);
        if (p->ranks < 2 || p->size == 0 || p->us <= 0)
            (*n)--;
    }
    fclose(f);
    return 0;
}

/* ---- the schedule, timed ------------------------------------------------------------ */

enum { EV_SEND, EV_ARRIVE, EV_DONE };
struct ev {
    double t;
    int kind, rank;
    uint32_t idx;
};
struct heap {
    struct ev *v;
    size_t n, cap;
};

static void push(struct heap *h, struct ev e)
{
    if (h->n == h->cap) {
        h->cap = h->cap ? h->cap * 2 : 1024;
        h->v = realloc(h->v, h->cap * sizeof(*h->v));
    }
    size_t i = h->n++;
    while (i && h->v[(i - 1) / 2].t > e.t) {
        h->v[i] = h->v[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->v[i] = e;
}

static struct ev pop(struct heap *h)
{
    struct ev top = h->v[0], last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && h->v[c + 1].t < h->v[c].t)
            c++;
        if (h->v[c].t >= last.t)
            break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n)
        h->v[i] = last;
    return top;
}

struct rank_state {
    struct coll_sched s;
    uint32_t *send_left, *recv_left;
    double *recv_arrive; /* < 0: not arrived */
    double *dep_ready;   /* sends: latest dependency end */
    double *recv_ready;
    double link_free, agent_free;
};

/* Time (us) of one allreduce of `size` bytes of 4-byte elements at n ranks. */
static double simulate(int n, uint64_t size, double alpha, double beta, double gamma)
{
    struct rank_state *R = calloc((size_t)n, sizeof(*R));
    struct heap h = {0};
    uint64_t count = size / 4 ? size / 4 : 1;
    double end = 0;
    enum xtq_coll_alg alg = coll_choose_alg(XTQ_COLL_ALLREDUCE, n, count, 4, &th);

    for (int r = 0; r < n; r++) {
        struct coll_params p = {XTQ_COLL_ALLREDUCE,      alg, n, r, 0, count, 4, piece_bytes / 4, 0,
                                alg == XTQ_COLL_ALG_RING};
        struct rank_state *x = &R[r];
        if (coll_sched_build(&p, &x->s)) {
            fprintf(stderr, "model: schedule of %d ranks failed\n", n);
            exit(1);
        }
        x->send_left = calloc(x->s.nsends + 1, sizeof(uint32_t));
        x->recv_left = calloc(x->s.nrecvs + 1, sizeof(uint32_t));
        x->recv_arrive = calloc(x->s.nrecvs + 1, sizeof(double));
        x->recv_ready = calloc(x->s.nrecvs + 1, sizeof(double));
        x->dep_ready = calloc(x->s.nsends + 1, sizeof(double));
        for (uint32_t i = 0; i < x->s.nrecvs; i++) {
            x->recv_left[i] = x->s.ops[x->s.recv_op[i]].ndeps + 1; /* + its message */
            x->recv_arrive[i] = -1;
        }
        for (uint32_t i = 0; i < x->s.nsends; i++) {
            x->send_left[i] = x->s.ops[x->s.send_op[i]].ndeps;
            if (!x->send_left[i])
                push(&h, (struct ev){0, EV_SEND, r, i});
        }
    }
    while (h.n) {
        struct ev e = pop(&h);
        struct rank_state *x = &R[e.rank];
        if (e.t > end)
            end = e.t;
        if (e.kind == EV_SEND) {
            const struct coll_op *op = &x->s.ops[x->s.send_op[e.idx]];
            double bytes = (double)op->cnt * 4;
            double start = e.t > x->link_free ? e.t : x->link_free;
            x->link_free = start + bytes * beta;
            struct rank_state *y = &R[op->peer];
            int64_t ri = coll_sched_lookup(&y->s, e.rank, op->seq);
            if (ri < 0) {
                fprintf(stderr, "model: unmatched message\n");
                exit(1);
            }
            push(&h, (struct ev){start + alpha + bytes * beta, EV_ARRIVE, op->peer, (uint32_t)ri});
        } else if (e.kind == EV_ARRIVE || e.kind == EV_DONE) {
            /* EV_ARRIVE: the message of receive idx; EV_DONE: receive idx
             * ran, its successors may start. */
            if (e.kind == EV_ARRIVE) {
                if (x->recv_ready[e.idx] < e.t)
                    x->recv_ready[e.idx] = e.t;
                if (--x->recv_left[e.idx] == 0) {
                    const struct coll_op *op = &x->s.ops[x->s.recv_op[e.idx]];
                    double start = x->recv_ready[e.idx];
                    double work = op->type == COLL_OP_RECV_COPY || op->type == COLL_OP_RECV_CREDIT
                                      ? 0
                                      : (double)op->cnt * 4 * gamma;
                    if (start < x->agent_free)
                        start = x->agent_free;
                    x->agent_free = start + work;
                    push(&h, (struct ev){start + work, EV_DONE, e.rank, e.idx});
                }
                continue;
            }
            for (uint32_t k = x->s.succ_first[e.idx]; k < x->s.succ_first[e.idx + 1]; k++) {
                const struct coll_op *succ = &x->s.ops[x->s.succ[k]];
                if (coll_op_is_recv(succ->type)) {
                    if (x->recv_ready[succ->index] < e.t)
                        x->recv_ready[succ->index] = e.t;
                    if (--x->recv_left[succ->index] == 0)
                        push(&h, (struct ev){e.t, EV_ARRIVE, e.rank, succ->index}),
                            x->recv_left[succ->index] = 1; /* re-enter as the last input */
                } else {
                    if (x->dep_ready[succ->index] < e.t)
                        x->dep_ready[succ->index] = e.t;
                    if (--x->send_left[succ->index] == 0)
                        push(&h,
                             (struct ev){x->dep_ready[succ->index], EV_SEND, e.rank, succ->index});
                }
            }
        }
    }
    for (int r = 0; r < n; r++) {
        coll_sched_free(&R[r].s);
        free(R[r].send_left);
        free(R[r].recv_left);
        free(R[r].recv_arrive);
        free(R[r].recv_ready);
        free(R[r].dep_ready);
    }
    free(R);
    free(h.v);
    return end;
}

/* ---- fitting ---------------------------------------------------------------------------- */

static const char *cur_mode;

static double loss(const double *lx)
{
    double a = exp(lx[0]), b = exp(lx[1]), g = exp(lx[2]), sum = 0;
    int k = 0;
    for (int i = 0; i < nfit; i++) {
        if (strcmp(fitp[i].mode, cur_mode))
            continue;
        double m = simulate(fitp[i].ranks, fitp[i].size, a, b, g);
        double d = log(m / fitp[i].us);
        sum += d * d;
        k++;
    }
    return k ? sum / k : 0;
}

/* Nelder-Mead on 3 parameters. */
static void minimise(double *x)
{
    double p[4][3], f[4];
    for (int i = 0; i < 4; i++) {
        for (int j = 0; j < 3; j++)
            p[i][j] = x[j] + (i == j + 1 ? 1.0 : 0.0);
        f[i] = loss(p[i]);
    }
    for (int it = 0; it < 150; it++) {
        int lo = 0, hi = 0, nh = 0;
        for (int i = 1; i < 4; i++) {
            if (f[i] < f[lo])
                lo = i;
            if (f[i] > f[hi])
                hi = i;
        }
        nh = lo;
        for (int i = 0; i < 4; i++)
            if (i != hi && f[i] > f[nh])
                nh = i;
        double c[3] = {0, 0, 0}, r[3], e[3], k[3];
        for (int i = 0; i < 4; i++)
            if (i != hi)
                for (int j = 0; j < 3; j++)
                    c[j] += p[i][j] / 3;
        for (int j = 0; j < 3; j++)
            r[j] = c[j] + (c[j] - p[hi][j]);
        double fr = loss(r);
        if (fr < f[lo]) {
            for (int j = 0; j < 3; j++)
                e[j] = c[j] + 2 * (c[j] - p[hi][j]);
            double fe = loss(e);
            memcpy(p[hi], fe < fr ? e : r, sizeof(r));
            f[hi] = fe < fr ? fe : fr;
        } else if (fr < f[nh]) {
            memcpy(p[hi], r, sizeof(r));
            f[hi] = fr;
        } else {
            for (int j = 0; j < 3; j++)
                k[j] = c[j] + 0.5 * (p[hi][j] - c[j]);
            double fk = loss(k);
            if (fk < f[hi]) {
                memcpy(p[hi], k, sizeof(k));
                f[hi] = fk;
            } else {
                for (int i = 0; i < 4; i++)
                    if (i != lo) {
                        for (int j = 0; j < 3; j++)
                            p[i][j] = p[lo][j] + 0.5 * (p[i][j] - p[lo][j]);
                        f[i] = loss(p[i]);
                    }
            }
        }
    }
    int lo = 0;
    for (int i = 1; i < 4; i++)
        if (f[i] < f[lo])
            lo = i;
    memcpy(x, p[lo], 3 * sizeof(double));
}

/* ---- main ---------------------------------------------------------------------------------- */

static long long parse_size(const char *s)
{
    char *end;
    long long v = strtoll(s, &end, 0);
    if (*end == 'K' || *end == 'k')
        v <<= 10;
    if (*end == 'M' || *end == 'm')
        v <<= 20;
    return v;
}

int main(int argc, char **argv)
{
    const char *fit = NULL, *chk = NULL, *out = NULL, *proj = "2,4,8,16,64,256,1024";
    double lat = 1.5, gbits = 100;
    uint64_t size = 4u << 20;
    char modes[MAX_MODES][16];
    int nmodes = 0;

    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--fit"))
            fit = argv[i + 1];
        else if (!strcmp(argv[i], "--check"))
            chk = argv[i + 1];
        else if (!strcmp(argv[i], "--out"))
            out = argv[i + 1];
        else if (!strcmp(argv[i], "--project"))
            proj = argv[i + 1];
        else if (!strcmp(argv[i], "--latency-us"))
            lat = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--gbits"))
            gbits = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--size"))
            size = (uint64_t)parse_size(argv[i + 1]);
        else if (!strcmp(argv[i], "--rd-max"))
            th.rd_max = (uint64_t)parse_size(argv[i + 1]);
        else if (!strcmp(argv[i], "--ring-min"))
            th.ring_min = (uint64_t)parse_size(argv[i + 1]);
        else if (!strcmp(argv[i], "--piece"))
            piece_bytes = (uint64_t)parse_size(argv[i + 1]);
        else {
            fprintf(stderr, "model: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (!fit) {
        fprintf(stderr,
                "usage: %s --fit a.csv[,b.csv] [--check strong.csv] [--size 4M]\n"
                "  [--project 2,4,...,1024] [--latency-us 1.5] [--gbits 100] [--out f]\n",
                argv[0]);
        return 2;
    }
    char buf[4096];
    snprintf(buf, sizeof(buf), "%s", fit);
    for (char *s = NULL, *t = strtok_r(buf, ",", &s); t; t = strtok_r(NULL, ",", &s))
        if (read_csv(t, fitp, &nfit))
            return 1;
    if (chk) {
        snprintf(buf, sizeof(buf), "%s", chk);
        for (char *s = NULL, *t = strtok_r(buf, ",", &s); t; t = strtok_r(NULL, ",", &s))
            if (read_csv(t, chkp, &nchk))
                return 1;
    }
    for (int i = 0; i < nfit; i++) {
        int k;
        for (k = 0; k < nmodes; k++)
            if (!strcmp(modes[k], fitp[i].mode))
                break;
        if (k == nmodes && nmodes < MAX_MODES)
            memcpy(modes[nmodes++], fitp[i].mode, sizeof(modes[0]));
    }
    FILE *o = out ? fopen(out, "w") : NULL;
    double g_net = 1.0 / (gbits * 1e3 / 8.0); /* us per byte */
    printf("# LogGP-style fit (alpha us/message, beta ns/byte moved, gamma ns/byte reduced)\n");
    printf("# network for the projection: L %.2f us, %.0f Gb/s (%.4f ns/B)\n", lat, gbits,
           g_net * 1e3);
    if (o)
        fprintf(o, "# mode ranks measured_us model_us projected_us (size %llu B)\n",
                (unsigned long long)size);
    for (int m = 0; m < nmodes; m++) {
        double x[3] = {log(10.0), log(1e-3), log(1e-3)};
        cur_mode = modes[m];
        minimise(x);
        double a = exp(x[0]), b = exp(x[1]), g = exp(x[2]);
        double fit_err = 0, chk_err = 0, chk_max = 0;
        int kf = 0, kc = 0;
        for (int i = 0; i < nfit; i++)
            if (!strcmp(fitp[i].mode, cur_mode)) {
                double mdl = simulate(fitp[i].ranks, fitp[i].size, a, b, g);
                fit_err += fabs(mdl - fitp[i].us) / fitp[i].us;
                kf++;
            }
        printf("%-8s alpha %8.2f us  beta %7.3f ns/B  gamma %7.3f ns/B  fit: %d points, mean "
               "|error| %5.1f%%",
               cur_mode, a, b * 1e3, g * 1e3, kf, kf ? 100 * fit_err / kf : 0);
        for (int i = 0; i < nchk; i++)
            if (!strcmp(chkp[i].mode, cur_mode)) {
                double mdl = simulate(chkp[i].ranks, chkp[i].size, a, b, g);
                double e = fabs(mdl - chkp[i].us) / chkp[i].us;
                chk_err += e;
                chk_max = e > chk_max ? e : chk_max;
                kc++;
                if (o)
                    fprintf(o, "%s %d %.3f %.3f nan\n", cur_mode, chkp[i].ranks, chkp[i].us, mdl);
            }
        if (kc)
            printf("; check: %d points, mean |error| %5.1f%%, max %5.1f%%", kc, 100 * chk_err / kc,
                   100 * chk_max);
        printf("\n");
        snprintf(buf, sizeof(buf), "%s", proj);
        printf("         projected %llu B:", (unsigned long long)size);
        for (char *s = NULL, *t = strtok_r(buf, ",", &s); t; t = strtok_r(NULL, ",", &s)) {
            int n = atoi(t);
            double pr = simulate(n, size, a + lat, b > g_net ? b : g_net, g);
            printf("  %d: %.0f us", n, pr);
            if (o)
                fprintf(o, "%s %d nan nan %.3f\n", cur_mode, n, pr);
        }
        printf("\n");
        if (o)
            fprintf(o, "\n\n");
    }
    if (o)
        fclose(o);
    return 0;
}
