/*
 * Writes a small Fashion-MNIST-shaped IDX set (gzip) for the trainer's
 * tests: 28x28 images whose class is a faint band at a class-dependent
 * place in strong noise, and one label in eight drawn at random, so a few
 * hundred steps learn it to about 90% and no further (accuracies then
 * differ when the training does). With --corrupt it
 * breaks one file the way real downloads break:
 *   missing   no train-labels file
 *   truncated train-images cut in the middle of the gzip stream
 *   magic     train-labels with an image magic number
 *   label     a test label of 12
 *   count     one label fewer than images in the test set
 *   garbage   train-images replaced by non-gzip bytes
 *   huge      train-images header announcing 2^31 images
 * usage: xtq_train_mkdata DIR [--train N] [--test N] [--corrupt MODE]
 */
#include "train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static uint64_t rng(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

static void make(size_t n, uint64_t seed, uint8_t *img, uint8_t *lab)
{
    for (size_t i = 0; i < n; i++) {
        unsigned c = (unsigned)(rng(&seed) % IDX_CLASSES);
        lab[i] = rng(&seed) % 8 ? (uint8_t)c : (uint8_t)(rng(&seed) % IDX_CLASSES);
        uint8_t *p = img + i * 784;
        for (size_t k = 0; k < 784; k++)
            p[k] = (uint8_t)(rng(&seed) % 200);
        /* Classes 0-4: a horizontal band; 5-9: a vertical one. */
        unsigned pos = 3 + (c % 5) * 5;
        for (unsigned a = 0; a < 28; a++)
            for (unsigned b = pos; b < pos + 3; b++) {
                size_t k = c < 5 ? b * 28 + a : a * 28 + b;
                p[k] = (uint8_t)(60 + rng(&seed) % 196);
            }
    }
}

static int write_set(const char *dir, const char *prefix, size_t n, uint64_t seed,
                     const char *corrupt)
{
    uint8_t *img = malloc(n * 784), *lab = malloc(n);
    char path[4096];
    int rc = 0;
    if (!img || !lab)
        return -1;
    make(n, seed, img, lab);
    int train = !strcmp(prefix, "train");
    uint32_t idims[3] = {(uint32_t)n, 28, 28}, ldims[1] = {(uint32_t)n};
    if (corrupt && train && !strcmp(corrupt, "huge"))
        idims[0] = 1u << 31;
    snprintf(path, sizeof(path), "%s/%s-images-idx3-ubyte.gz", dir, prefix);
    if (corrupt && train && !strcmp(corrupt, "garbage")) {
        FILE *f = fopen(path, "wb");
        rc |= !f || fwrite("this is not an IDX file\n", 1, 24, f) != 24;
        if (f)
            fclose(f);
    } else {
        rc |= idx_write(path, 0x803, idims, 3, img, n * 784);
    }
    if (corrupt && train && !strcmp(corrupt, "truncated")) {
        struct stat st;
        rc |= stat(path, &st) != 0 || truncate(path, st.st_size / 2) != 0;
    }
    if (corrupt && !train && !strcmp(corrupt, "label"))
        lab[n / 2] = 12;
    if (corrupt && !train && !strcmp(corrupt, "count"))
        ldims[0] = (uint32_t)n - 1;
    snprintf(path, sizeof(path), "%s/%s-labels-idx1-ubyte.gz", dir, prefix);
    if (!(corrupt && train && !strcmp(corrupt, "missing"))) {
        unsigned magic = corrupt && train && !strcmp(corrupt, "magic") ? 0x803 : 0x801;
        rc |= idx_write(path, magic, ldims, 1, lab, ldims[0]);
    } else {
        unlink(path);
    }
    free(img);
    free(lab);
    return rc ? -1 : 0;
}

int main(int argc, char **argv)
{
    size_t ntrain = 2048, ntest = 512;
    const char *corrupt = NULL;
    if (argc < 2) {
        fprintf(stderr, "usage: %s DIR [--train N] [--test N] [--corrupt MODE]\n", argv[0]);
        return 2;
    }
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--train"))
            ntrain = strtoul(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--test"))
            ntest = strtoul(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--corrupt"))
            corrupt = argv[i + 1];
        else {
            fprintf(stderr, "%s: unknown option %s\n", argv[0], argv[i]);
            return 2;
        }
    }
    if (ntrain < 2 || ntest < 2) {
        fprintf(stderr, "%s: --train and --test need at least 2 images\n", argv[0]);
        return 2;
    }
    mkdir(argv[1], 0755);
    if (write_set(argv[1], "train", ntrain, 0x1234567ull, corrupt) != 0 ||
        write_set(argv[1], "t10k", ntest, 0x7654321ull, corrupt) != 0) {
        fprintf(stderr, "%s: cannot write the set under %s\n", argv[0], argv[1]);
        return 1;
    }
    return 0;
}
