/*
 * Fashion-MNIST in IDX format (gzip, as Debian's dataset-fashion-mnist
 * ships it, or uncompressed), read with zlib. Every length in a header is
 * checked before anything is allocated; every fault names its file.
 */
#include "train.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#define IDX_LABELS    0x00000801u
#define IDX_IMAGES    0x00000803u
#define IDX_MAX_ITEMS (16u << 20)
#define IDX_MAX_SIDE  4096u

__attribute__((format(printf, 4, 5))) static int fail(char *err, size_t errlen, const char *path,
                                                      const char *fmt, ...)
{
    int k = snprintf(err, errlen, "%s: ", path);
    va_list ap;
    va_start(ap, fmt);
    if (k >= 0 && (size_t)k < errlen)
        vsnprintf(err + k, errlen - (size_t)k, fmt, ap);
    va_end(ap);
    return -1;
}

static const char *gz_why(gzFile f)
{
    int code = Z_OK;
    const char *msg = gzerror(f, &code);
    if (code == Z_ERRNO)
        return strerror(errno);
    return code == Z_OK ? "end of file" : msg;
}

/* Read exactly `len` bytes; returns the count actually read (short at EOF
 * or on a gzip error). */
static size_t gz_read_full(gzFile f, void *buf, size_t len)
{
    size_t got = 0;
    while (got < len) {
        size_t chunk = len - got > (1u << 30) ? (1u << 30) : len - got;
        int r = gzread(f, (char *)buf + got, (unsigned)chunk);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    return got;
}

/* Open `dir`/`name`.gz, else `dir`/`name` (uncompressed). */
static gzFile open_idx(const char *dir, const char *name, char *path, size_t pathlen)
{
    snprintf(path, pathlen, "%s/%s.gz", dir, name);
    if (access(path, F_OK) != 0) {
        char plain[4096];
        snprintf(plain, sizeof(plain), "%s/%s", dir, name);
        if (access(plain, F_OK) == 0)
            snprintf(path, pathlen, "%s", plain);
    }
    return gzopen(path, "rb");
}

/* Read one IDX file: check the magic, read the dimensions, then the data. */
static int read_idx(const char *dir, const char *name, unsigned magic, uint32_t *dims,
                    unsigned ndims, uint8_t **data, size_t *bytes, char *path, size_t pathlen,
                    char *err, size_t errlen)
{
    gzFile f = open_idx(dir, name, path, pathlen);
    unsigned char hdr[4 + 4 * 3];
    size_t need = 4 + 4 * (size_t)ndims, got;
    *data = NULL;
    if (!f)
        return fail(err, errlen, path, "cannot open (%s); %s", strerror(errno ? errno : ENOENT),
                    IDX_INSTALL_HINT);
    got = gz_read_full(f, hdr, need);
    if (got < need) {
        fail(err, errlen, path, "truncated: %zu of the %zu header bytes (%s); %s", got, need,
             gz_why(f), IDX_INSTALL_HINT);
        goto err;
    }
    unsigned m = (unsigned)hdr[0] << 24 | (unsigned)hdr[1] << 16 | (unsigned)hdr[2] << 8 | hdr[3];
    if (m != magic) {
        fail(err, errlen, path, "not an IDX %s file: magic 0x%08x, expected 0x%08x; %s",
             magic == IDX_IMAGES ? "image" : "label", m, magic, IDX_INSTALL_HINT);
        goto err;
    }
    size_t total = 1;
    for (unsigned d = 0; d < ndims; d++) {
        const unsigned char *p = hdr + 4 + 4 * d;
        dims[d] = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
        uint32_t limit = d == 0 ? IDX_MAX_ITEMS : IDX_MAX_SIDE;
        if (dims[d] == 0 || dims[d] > limit) {
            fail(err, errlen, path, "dimension %u is %u (expected 1..%u); %s", d, dims[d], limit,
                 IDX_INSTALL_HINT);
            goto err;
        }
        total *= dims[d];
    }
    *data = malloc(total);
    if (!*data) {
        fail(err, errlen, path, "cannot allocate %zu bytes", total);
        goto err;
    }
    got = gz_read_full(f, *data, total);
    if (got < total) {
        fail(err, errlen, path,
             "truncated: %zu of the %zu data bytes its header announces (%s); %s", got, total,
             gz_why(f), IDX_INSTALL_HINT);
        goto err;
    }
    unsigned char extra;
    if (gzread(f, &extra, 1) != 0) {
        fail(err, errlen, path, "longer than its header announces (%zu data bytes); %s", total,
             IDX_INSTALL_HINT);
        goto err;
    }
    int code = Z_OK;
    gzerror(f, &code);
    if (code != Z_OK && code != Z_STREAM_END) {
        fail(err, errlen, path, "corrupt gzip stream (%s); %s", gz_why(f), IDX_INSTALL_HINT);
        goto err;
    }
    gzclose(f);
    *bytes = total;
    return 0;
err:
    free(*data);
    *data = NULL;
    gzclose(f);
    return -1;
}

int idx_load(const char *dir, const char *prefix, dataset_t *ds, char *err, size_t errlen)
{
    char name[256], ipath[4096], lpath[4096];
    uint32_t idims[3] = {0}, ldims[1] = {0};
    size_t ibytes = 0, lbytes = 0;
    memset(ds, 0, sizeof(*ds));
    snprintf(name, sizeof(name), "%s-images-idx3-ubyte", prefix);
    if (read_idx(dir, name, IDX_IMAGES, idims, 3, &ds->images, &ibytes, ipath, sizeof(ipath), err,
                 errlen) != 0)
        return -1;
    snprintf(name, sizeof(name), "%s-labels-idx1-ubyte", prefix);
    if (read_idx(dir, name, IDX_LABELS, ldims, 1, &ds->labels, &lbytes, lpath, sizeof(lpath), err,
                 errlen) != 0)
        goto err;
    if (idims[0] != ldims[0]) {
        fail(err, errlen, lpath, "holds %u labels but %s holds %u images; %s", ldims[0], ipath,
             idims[0], IDX_INSTALL_HINT);
        goto err;
    }
    for (size_t i = 0; i < lbytes; i++)
        if (ds->labels[i] >= IDX_CLASSES) {
            fail(err, errlen, lpath, "label %u of item %zu is out of range 0..%d; %s",
                 ds->labels[i], i, IDX_CLASSES - 1, IDX_INSTALL_HINT);
            goto err;
        }
    ds->n = idims[0];
    ds->rows = idims[1];
    ds->cols = idims[2];
    return 0;
err:
    idx_free(ds);
    return -1;
}

void idx_free(dataset_t *ds)
{
    free(ds->images);
    free(ds->labels);
    memset(ds, 0, sizeof(*ds));
}

int idx_write(const char *path, unsigned magic, const uint32_t *dims, unsigned ndims,
              const uint8_t *data, size_t bytes)
{
    gzFile f = gzopen(path, "wb");
    if (!f)
        return -1;
    unsigned char hdr[4 + 4 * 4];
    size_t len = 0;
    uint32_t words[5] = {magic};
    for (unsigned d = 0; d < ndims && d < 4; d++)
        words[1 + d] = dims[d];
    for (unsigned w = 0; w < 1 + ndims && w < 5; w++) {
        hdr[len++] = (unsigned char)(words[w] >> 24);
        hdr[len++] = (unsigned char)(words[w] >> 16);
        hdr[len++] = (unsigned char)(words[w] >> 8);
        hdr[len++] = (unsigned char)words[w];
    }
    int ok = gzwrite(f, hdr, (unsigned)len) == (int)len;
    if (ok && bytes)
        ok = gzwrite(f, data, (unsigned)bytes) == (int)bytes;
    return gzclose(f) == Z_OK && ok ? 0 : -1;
}
