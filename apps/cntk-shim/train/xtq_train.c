/*
 * xtq_train: data-parallel training of an MLP on Fashion-MNIST, with the
 * gradients of every step aggregated through the shim (CNTK's
 * DistributedCommunicator in C).
 *
 * Every rank holds the same model and sees the same shuffled order; each
 * global batch is split into contiguous slices, one per rank, and each
 * rank's gradient is its slice's loss gradient divided by the global batch
 * size, so the aggregated sum is the global batch's mean gradient whatever
 * the rank count: 1 rank and N ranks follow the same math up to the order
 * of floating-point sums.
 *
 * Faults that one rank sees (missing data, no GPU) are agreed on by all
 * ranks through the shim before anyone acts, so every rank prints the
 * reason and exits; none waits forever in a collective the others left.
 */
#include "train.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define EXIT_SKIP 77
#define MSG_LEN   1024

struct options {
    const char *data, *backend, *device, *csv;
    size_t hidden[MLP_MAX_LAYERS - 1], nhidden;
    size_t epochs, batch, steps, train_limit, test_limit;
    double lr, momentum;
    uint64_t seed;
    int progress; /* -1 auto, 0 off, 1 on */
    int quiet, overlap;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: xtq_train [options]   (under mpirun for several ranks)\n"
               "  --data DIR        Fashion-MNIST gzip IDX files (default "
               "/usr/share/datasets/fashion-mnist)\n"
               "  --backend NAME    shim back-end: mpi or xtq (default: XTQ_SHIM_BACKEND, mpi)\n"
               "  --device NAME     cpu or cuda (default cpu)\n"
               "  --epochs N        passes over the training set (default 10)\n"
               "  --batch N         global batch, split over the ranks (default 64)\n"
               "  --hidden LIST     hidden layer widths (default 256,128)\n"
               "  --lr F            learning rate (default 0.05)\n"
               "  --momentum F      SGD momentum (default 0.9)\n"
               "  --seed N          initialisation and shuffling seed (default 1)\n"
               "  --steps N         at most N steps per epoch (default: the whole set)\n"
               "  --train-limit N   use the first N training images\n"
               "  --test-limit N    evaluate on the first N test images\n"
               "  --overlap         start each layer's aggregation (asynchronous) as soon as\n"
               "                    its gradients exist, while earlier layers are computed\n"
               "  --csv PATH        per-epoch rows (rank 0)\n"
               "  --progress MODE   auto (on a terminal), on or off\n"
               "  --quiet           only errors and the final line\n");
}

static int parse_count(const char *s, size_t *out, size_t min)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || v < min || s[0] == '-')
        return -1;
    *out = (size_t)v;
    return 0;
}

static int parse_args(int argc, char **argv, struct options *o)
{
    static const struct option longopts[] = {{"data", required_argument, 0, 'd'},
                                             {"backend", required_argument, 0, 'b'},
                                             {"device", required_argument, 0, 'D'},
                                             {"epochs", required_argument, 0, 'e'},
                                             {"batch", required_argument, 0, 'B'},
                                             {"hidden", required_argument, 0, 'H'},
                                             {"lr", required_argument, 0, 'l'},
                                             {"momentum", required_argument, 0, 'm'},
                                             {"seed", required_argument, 0, 's'},
                                             {"steps", required_argument, 0, 'S'},
                                             {"train-limit", required_argument, 0, 'T'},
                                             {"test-limit", required_argument, 0, 't'},
                                             {"overlap", no_argument, 0, 'o'},
                                             {"csv", required_argument, 0, 'c'},
                                             {"progress", required_argument, 0, 'p'},
                                             {"quiet", no_argument, 0, 'q'},
                                             {"help", no_argument, 0, 'h'},
                                             {0, 0, 0, 0}};
    *o = (struct options){.data = "/usr/share/datasets/fashion-mnist",
                          .device = "cpu",
                          .hidden = {256, 128},
                          .nhidden = 2,
                          .epochs = 10,
                          .batch = 64,
                          .lr = 0.05,
                          .momentum = 0.9,
                          .seed = 1,
                          .progress = -1};
    int c, li = 0;
    char *end;
    while ((c = getopt_long(argc, argv, "", longopts, &li)) != -1) {
        switch (c) {
        case 'd':
            o->data = optarg;
            break;
        case 'b':
            o->backend = optarg;
            break;
        case 'D':
            o->device = optarg;
            break;
        case 'c':
            o->csv = optarg;
            break;
        case 'q':
            o->quiet = 1;
            break;
        case 'o':
            o->overlap = 1;
            break;
        case 'e':
            if (parse_count(optarg, &o->epochs, 1))
                goto bad;
            break;
        case 'B':
            if (parse_count(optarg, &o->batch, 1))
                goto bad;
            break;
        case 'S':
            if (parse_count(optarg, &o->steps, 1))
                goto bad;
            break;
        case 'T':
            if (parse_count(optarg, &o->train_limit, 1))
                goto bad;
            break;
        case 't':
            if (parse_count(optarg, &o->test_limit, 1))
                goto bad;
            break;
        case 's':
            errno = 0;
            o->seed = strtoull(optarg, &end, 0);
            if (errno || *end)
                goto bad;
            break;
        case 'l':
        case 'm': {
            double v = strtod(optarg, &end);
            if (*end || !(v >= 0) || v > 10)
                goto bad;
            *(c == 'l' ? &o->lr : &o->momentum) = v;
            break;
        }
        case 'H': {
            o->nhidden = 0;
            for (char *tok = strtok(optarg, ","); tok; tok = strtok(NULL, ",")) {
                if (o->nhidden == MLP_MAX_LAYERS - 1 || parse_count(tok, &o->hidden[o->nhidden], 1))
                    goto bad;
                o->nhidden++;
            }
            break;
        }
        case 'p':
            if (!strcmp(optarg, "auto"))
                o->progress = -1;
            else if (!strcmp(optarg, "on"))
                o->progress = 1;
            else if (!strcmp(optarg, "off"))
                o->progress = 0;
            else
                goto bad;
            break;
        case 'h':
            usage(stdout);
            exit(0);
        default:
            usage(stderr);
            return -1;
        }
        continue;
    bad:
        fprintf(stderr, "xtq_train: bad value '%s' for --%s\n", optarg, longopts[li].name);
        usage(stderr);
        return -1;
    }
    if (optind < argc) {
        fprintf(stderr, "xtq_train: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    if (strcmp(o->device, "cpu") && strcmp(o->device, "cuda")) {
        fprintf(stderr, "xtq_train: --device must be cpu or cuda\n");
        return -1;
    }
    return 0;
}

/* ---- collective agreement -------------------------------------------------- */

struct run {
    xtq_shim_comm_t *comm;
    size_t rank, size;
};

static void die_shim(struct run *r, int rc, const char *what)
{
    fprintf(stderr, "xtq_train: rank %zu: %s failed: %s (%s)\n", r->rank, what,
            xtq_shim_last_error(r->comm), xtq_strerror(rc));
    exit(1);
}

/*
 * Every rank says whether it failed (and why). All learn the lowest failing
 * rank and its message; each prints it, with its own rank, and returns the
 * agreed status: 0 when nobody failed, else the highest code.
 */
static int agree(struct run *r, int status, const char *msg, const char *prefix)
{
    int32_t v[2] = {status, status ? (int32_t)r->rank : INT32_MAX};
    int32_t worst[1] = {status};
    int rc;
    if ((rc = xtq_shim_allreduce(r->comm, NULL, worst, 1, XTQ_DT_INT32, XTQ_OP_MAX,
                                 XTQ_SHIM_MEM_HOST)) != 0 ||
        (rc = xtq_shim_allreduce(r->comm, NULL, &v[1], 1, XTQ_DT_INT32, XTQ_OP_MIN,
                                 XTQ_SHIM_MEM_HOST)) != 0)
        die_shim(r, rc, "agreeing on a status");
    if (worst[0] == 0)
        return 0;
    /* The first failing rank's message reaches all ranks. */
    char text[MSG_LEN];
    memset(text, 0, sizeof(text));
    if ((size_t)v[1] == r->rank)
        snprintf(text, sizeof(text), "%s", msg);
    if ((rc = xtq_shim_allreduce(r->comm, NULL, text, sizeof(text), XTQ_DT_BYTE, XTQ_OP_BOR,
                                 XTQ_SHIM_MEM_HOST)) != 0)
        die_shim(r, rc, "sharing an error message");
    text[sizeof(text) - 1] = '\0';
    if ((size_t)v[1] == r->rank || status)
        fprintf(stderr, "xtq_train: rank %zu: %s%s\n", r->rank, prefix, status ? msg : text);
    else
        fprintf(stderr, "xtq_train: rank %zu: rank %d failed: %s%s\n", r->rank, v[1], prefix, text);
    return worst[0];
}

static void sum_doubles(struct run *r, double *v, size_t n, enum xtq_op op)
{
    int rc = xtq_shim_allreduce(r->comm, NULL, v, n, XTQ_DT_DOUBLE, op, XTQ_SHIM_MEM_HOST);
    if (rc != 0)
        die_shim(r, rc, "reducing statistics");
}

/* ---- the training loop -------------------------------------------------------- */

static uint64_t rng_next(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void shuffle(uint32_t *perm, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++)
        perm[i] = (uint32_t)i;
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)(rng_next(&seed) % i);
        uint32_t t = perm[i - 1];
        perm[i - 1] = perm[j];
        perm[j] = t;
    }
}

static void progress_bar(size_t epoch, size_t epochs, size_t step, size_t steps, double loss)
{
    const int width = 30;
    int filled = (int)(width * step / (steps ? steps : 1));
    char bar[64];
    for (int i = 0; i < width; i++)
        bar[i] = i < filled ? '=' : i == filled ? '>' : ' ';
    bar[width] = '\0';
    printf("\repoch %zu/%zu [%s] %3zu%% %zu/%zu loss %.4f ", epoch, epochs, bar,
           100 * step / (steps ? steps : 1), step, steps, loss);
    fflush(stdout);
}

/* --overlap: each layer's tensors start aggregating when the device says
 * they are ready; the step waits for all before the update. */
struct overlap {
    struct run *r;
    xtq_shim_buf_t *bufs;
    xtq_shim_handle_t *h[MLP_MAX_LAYERS];
    size_t nh;
    double t_start; /* seconds spent starting aggregates */
};

static void layer_ready(void *arg, size_t layer)
{
    struct overlap *ov = arg;
    double t0 = now_s();
    int rc = xtq_shim_aggregate_async(ov->r->comm, &ov->bufs[2 * layer], NULL, 2, &ov->h[ov->nh]);
    if (rc != 0)
        die_shim(ov->r, rc, "starting an aggregate");
    ov->nh++;
    ov->t_start += now_s() - t0;
}

int main(int argc, char **argv)
{
    struct options o;
    struct run r = {0};
    char msg[MSG_LEN] = "";
    int rc, status;

    if (parse_args(argc, argv, &o) != 0)
        return 2;
    xtq_shim_attr_t attr = {0};
    if (o.backend) {
        attr.field_mask |= XTQ_SHIM_ATTR_FIELD_BACKEND;
        attr.backend = o.backend;
    }
    if ((rc = xtq_shim_init(&attr, &r.comm)) != 0) {
        fprintf(stderr, "xtq_train: cannot start the shim (%s)\n", xtq_strerror(rc));
        return rc == -XTQ_ENOSYS ? EXIT_SKIP : 1;
    }
    r.rank = xtq_shim_rank(r.comm);
    r.size = xtq_shim_size(r.comm);
    int leader = r.rank == 0;
    int show_bar = leader && !o.quiet && (o.progress == 1 || (o.progress < 0 && isatty(1)));

    /* The device: all ranks use it, or all skip with the reason. */
    const struct device_ops *dev = !strcmp(o.device, "cuda") ? &train_cuda_ops : &train_cpu_ops;
    status = dev->available(msg, sizeof(msg)) ? 0 : EXIT_SKIP;
    if (agree(&r, status, msg, "SKIP: device unavailable: ") != 0) {
        xtq_shim_finalize(r.comm);
        return EXIT_SKIP;
    }

    /* The data: every rank reads it; a fault anywhere stops every rank. */
    dataset_t train = {0}, test = {0};
    status = 0;
    if (idx_load(o.data, "train", &train, msg, sizeof(msg)) != 0 ||
        idx_load(o.data, "t10k", &test, msg, sizeof(msg)) != 0)
        status = 2;
    else if (train.rows != test.rows || train.cols != test.cols) {
        snprintf(msg, sizeof(msg), "%s: training images are %zux%zu but test images %zux%zu",
                 o.data, train.rows, train.cols, test.rows, test.cols);
        status = 2;
    }
    if (agree(&r, status, msg, "") != 0) {
        idx_free(&train);
        idx_free(&test);
        xtq_shim_finalize(r.comm);
        return 2;
    }
    size_t ntrain = o.train_limit && o.train_limit < train.n ? o.train_limit : train.n;
    size_t ntest = o.test_limit && o.test_limit < test.n ? o.test_limit : test.n;
    size_t pixels = train.rows * train.cols;

    /* The model, identical on every rank (same seed). */
    mlp_shape_t shape;
    if (mlp_shape_init(&shape, pixels, o.hidden, o.nhidden, IDX_CLASSES) != 0) {
        fprintf(stderr, "xtq_train: bad --hidden\n");
        return 2;
    }
    float *params = malloc(shape.nparams * sizeof(float));
    uint8_t *xb = malloc(o.batch * pixels), *yb = malloc(o.batch);
    uint32_t *perm = malloc(ntrain * sizeof(uint32_t));
    void *model = NULL;
    status = 0;
    if (!params || !xb || !yb || !perm) {
        snprintf(msg, sizeof(msg), "out of memory");
        status = 1;
    } else {
        mlp_init_params(&shape, o.seed, params);
        if (dev->create(&shape, params, o.batch, &model, msg, sizeof(msg)) != 0)
            status = 1;
    }
    if (agree(&r, status, msg, "") != 0)
        return 1;

    xtq_shim_buf_t bufs[2 * MLP_MAX_LAYERS];
    size_t nbufs = dev->grad_bufs(model, bufs);
    size_t steps = (ntrain + o.batch - 1) / o.batch;
    if (o.steps && o.steps < steps)
        steps = o.steps;
    if (leader && !o.quiet) {
        char arch[128];
        int k = snprintf(arch, sizeof(arch), "%zu", shape.size[0]);
        for (size_t l = 1; l <= shape.nlayers && k < (int)sizeof(arch); l++)
            k += snprintf(arch + k, sizeof(arch) - (size_t)k, "-%zu", shape.size[l]);
        printf("xtq_train: backend %s, %zu rank%s, device %s, MLP %s (%zu parameters in %zu "
               "tensors), global batch %zu (%zu per rank), %zu steps per epoch, %zu train / "
               "%zu test images\n",
               xtq_shim_backend(r.comm), r.size, r.size > 1 ? "s" : "", dev->name, arch,
               shape.nparams, nbufs, o.batch, (o.batch + r.size - 1) / r.size, steps, ntrain,
               ntest);
        printf("%5s %9s %9s %9s %9s %9s %10s %12s\n", "epoch", "loss", "train%", "test%", "epoch_s",
               "compute_s", "aggr_s", "aggr_us/step");
        fflush(stdout);
    }
    FILE *csv = NULL;
    if (leader && o.csv) {
        csv = fopen(o.csv, "w");
        if (!csv) {
            fprintf(stderr, "xtq_train: cannot write %s: %s\n", o.csv, strerror(errno));
        } else {
            char host[256] = "?";
            gethostname(host, sizeof(host) - 1);
            fprintf(csv, "# host: %s, %ld cores\n# command:", host, sysconf(_SC_NPROCESSORS_ONLN));
            for (int i = 0; i < argc; i++)
                fprintf(csv, " %s", argv[i]);
            fprintf(csv, "\nbackend,ranks,device,epoch,steps,train_loss,train_acc,test_loss,"
                         "test_acc,epoch_s,compute_s,aggr_s,aggr_us_per_step\n");
        }
    }

    double final_acc = 0;
    for (size_t epoch = 1; epoch <= o.epochs; epoch++) {
        shuffle(perm, ntrain, o.seed * 1000003u + epoch);
        double loss = 0, t_compute = 0, t_aggr = 0;
        size_t correct = 0, seen = 0;
        double t_epoch = now_s();
        for (size_t step = 0; step < steps; step++) {
            size_t first = step * o.batch;
            size_t gb = ntrain - first < o.batch ? ntrain - first : o.batch;
            size_t lo = first + gb * r.rank / r.size, hi = first + gb * (r.rank + 1) / r.size;
            for (size_t i = lo; i < hi; i++) {
                memcpy(xb + (i - lo) * pixels, train.images + (size_t)perm[i] * pixels, pixels);
                yb[i - lo] = train.labels[perm[i]];
            }
            struct overlap ov = {.r = &r, .bufs = bufs};
            double t0 = now_s();
            if (dev->grad(model, xb, yb, hi - lo, 1.0f / (float)gb, &loss, &correct,
                          o.overlap ? layer_ready : NULL, &ov) != 0) {
                fprintf(stderr, "xtq_train: rank %zu: gradient computation failed\n", r.rank);
                return 1;
            }
            double t1 = now_s();
            if (o.overlap) {
                /* Oldest first: the order every rank started them in. */
                for (size_t i = 0; i < ov.nh; i++)
                    if ((rc = xtq_shim_wait(ov.h[i])) != 0)
                        die_shim(&r, rc, "waiting for gradients");
                /* Starting them was aggregation, not computing. */
                t0 += ov.t_start;
            } else if ((rc = xtq_shim_aggregate_in_place(r.comm, bufs, nbufs)) != 0) {
                die_shim(&r, rc, "aggregating gradients");
            }
            double t2 = now_s();
            dev->update(model, (float)o.lr, (float)o.momentum);
            double t3 = now_s();
            t_compute += (t1 - t0) + (t3 - t2);
            t_aggr += t2 - t1 + ov.t_start;
            seen += hi - lo;
            if (show_bar && (step % 16 == 0 || step + 1 == steps))
                progress_bar(epoch, o.epochs, step + 1, steps, seen ? loss / (double)seen : 0);
        }
        t_epoch = now_s() - t_epoch;
        if (show_bar)
            printf("\r%*s\r", 100, "");

        /* Test accuracy: each rank evaluates a slice of the test set. */
        double test_loss = 0;
        size_t test_correct = 0;
        size_t tlo = ntest * r.rank / r.size, thi = ntest * (r.rank + 1) / r.size;
        dev->evaluate(model, test.images + tlo * pixels, test.labels + tlo, thi - tlo, &test_loss,
                      &test_correct);
        double sums[7] = {loss,      (double)correct, (double)seen, test_loss, (double)test_correct,
                          t_compute, t_aggr};
        sum_doubles(&r, sums, 7, XTQ_OP_SUM);
        double tmax[1] = {t_epoch};
        sum_doubles(&r, tmax, 1, XTQ_OP_MAX);
        double n_seen = sums[2] > 0 ? sums[2] : 1;
        double comp = sums[5] / (double)r.size, aggr = sums[6] / (double)r.size;
        final_acc = 100.0 * sums[4] / (double)ntest;
        if (leader && !o.quiet) {
            printf("%5zu %9.4f %9.2f %9.2f %9.2f %9.2f %10.3f %12.1f\n", epoch, sums[0] / n_seen,
                   100.0 * sums[1] / n_seen, final_acc, tmax[0], comp, aggr,
                   1e6 * aggr / (double)steps);
            fflush(stdout);
        }
        if (csv) {
            fprintf(csv, "%s,%zu,%s,%zu,%zu,%.6f,%.4f,%.6f,%.4f,%.4f,%.4f,%.4f,%.2f\n",
                    xtq_shim_backend(r.comm), r.size, dev->name, epoch, steps, sums[0] / n_seen,
                    100.0 * sums[1] / n_seen, sums[3] / (double)ntest, final_acc, tmax[0], comp,
                    aggr, 1e6 * aggr / (double)steps);
            fflush(csv);
        }
    }
    if (leader)
        printf("final: backend %s ranks %zu device %s epochs %zu test accuracy %.2f%%\n",
               xtq_shim_backend(r.comm), r.size, dev->name, o.epochs, final_acc);
    if (csv)
        fclose(csv);
    dev->destroy(model);
    free(params);
    free(xb);
    free(yb);
    free(perm);
    idx_free(&train);
    idx_free(&test);
    rc = xtq_shim_finalize(r.comm);
    return rc == 0 ? 0 : 1;
}
