/*
 * Completion words on one host (XTQ_DIRECT_COMPLETION; docs/design.md,
 * "Completion words on one host").
 *
 * A remote-completion put's ack crosses the target's send path, the
 * transport and the initiator's receive before the waiting thread hears
 * of it. Where every rank is on one host, the target can say the same
 * thing with one store: each engine owns a segment of POSIX shared memory
 * holding a 64-bit word per (initiator rank, window slot), writes the
 * word of a put that asked for it (wire flag NOTIFY) when the task
 * retires, before its ack leaves, and the initiators map it read-only. A
 * waiter that polls sees the word and reports the put DONE at once; the
 * ack still comes, frees the window slot and counts the put, exactly as
 * without the word. Nothing depends on the word: a put whose word was
 * never written, or was written over, completes with its ack.
 *
 * The segments are made, named and mapped the way the doorbells are
 * (wakeup.c): made before the address exchange, which carries the name,
 * mapped after it, and unlinked once every rank has mapped them.
 */
#include "internal.h"
#include "nic-emul/engine_int.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Largest segment made: ranks x window words past this are acked only
 * (4096 ranks of the default window fit). */
#define NOTIFY_SEG_MAX ((size_t)32 << 20)

/* XTQ_DIRECT_COMPLETION: -1 (auto) where every rank is on this host and
 * the transport is libfabric's shm provider, 1 on one host whatever the
 * provider, 0 never. */
static bool notify_wanted(const struct xtq__engine *e)
{
    int64_t v = xtq__param_int(XTQ__PARAM_XTQ_DIRECT_COMPLETION);
    if (v == 0 || !e->same_host)
        return false;
    return v > 0 || strcmp(e->ofi.prov_name, "shm") == 0;
}

void xtq__notify_open(struct xtq__engine *e)
{
    xtq_ctx_t *ctx = e->ctx;
    e->notify_name[0] = '\0';
    if (!notify_wanted(e))
        return;
    size_t words = (size_t)ctx->size * e->window;
    /* Whole pages: the agents map it for their devices. */
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t len = XTQ_ALIGN_UP(sizeof(struct xtq__notify_seg) + words * sizeof(uint64_t), page);
    if (len > NOTIFY_SEG_MAX) {
        xtq_info(ENGINE,
                 "completion words: %d ranks x window %u need %zu bytes, above %zu; puts to "
                 "this rank are acked only",
                 ctx->size, e->window, len, NOTIFY_SEG_MAX);
        return;
    }
    void *p = xtq__shm_create(e, e->notify_name, "w", len);
    if (!p) {
        xtq_warn(ENGINE,
                 "completion words: no shared memory segment (%s); puts to this rank "
                 "are acked only",
                 strerror(errno));
        return;
    }
    struct xtq__notify_seg *g = p; /* ftruncate zeroed it: no word is current */
    g->words_per_peer = e->window;
    g->nranks = (uint32_t)ctx->size;
    atomic_thread_fence(memory_order_release);
    g->magic = XTQ__NOTIFY_MAGIC;
    e->notify_own = g;
    e->notify_len = len;
    /* A GPU's processor may then store a word itself (the enqueue's notify);
     * without the mapping the retire stores every one. */
    e->notify_agents = xtq__agents_mem_register(ctx, g, len) == 0;
}

void xtq__notify_name(struct xtq__engine *e, char name[XTQ__BELL_NAME_MAX])
{
    snprintf(name, XTQ__BELL_NAME_MAX, "%s", e->notify_own ? e->notify_name : "");
}

/* A peer's segment, read-only; NULL when it has none or it is not what
 * this library makes (checked before any word of it is used). */
static void *notify_map(const char *name, int r, int nranks, size_t *len)
{
    struct xtq__notify_seg *g = xtq__shm_map(name, PROT_READ, sizeof(*g), len);
    if (!g)
        return NULL;
    size_t need = sizeof(*g) + (size_t)nranks * g->words_per_peer * sizeof(uint64_t);
    if (g->magic != XTQ__NOTIFY_MAGIC || g->nranks != (uint32_t)nranks || !g->words_per_peer ||
        need > *len) {
        xtq_warn(ENGINE,
                 "rank %d's completion words are not in this library's format; its puts "
                 "are acked only",
                 r);
        munmap(g, *len);
        return NULL;
    }
    return g;
}

void xtq__notify_connect(struct xtq__engine *e, const char *names, size_t stride)
{
    /* We use peers' words only where we would make our own. */
    if (!notify_wanted(e))
        return;
    int mapped = xtq__shm_peers_map(e, &e->notify_peers, names, stride, e->notify_own, notify_map);
    if (mapped >= 0 && e->plane == 0 && e->ctx->rank == 0)
        xtq_info(ENGINE, "completion words: %d of %d ranks' mapped (XTQ_DIRECT_COMPLETION)", mapped,
                 e->ctx->size);
}

void xtq__notify_unlink(struct xtq__engine *e)
{
    if (e->notify_name[0]) {
        shm_unlink(e->notify_name);
        e->notify_name[0] = '\0';
    }
}

void xtq__notify_close(struct xtq__engine *e)
{
    xtq__notify_unlink(e);
    xtq__shm_peers_unmap(e, &e->notify_peers, e->notify_own);
    xtq__shm_unmap(e, e->notify_own, e->notify_len, e->notify_agents);
    e->notify_agents = false;
    e->notify_own = NULL;
}

_Atomic uint64_t *xtq__notify_own_word(struct xtq__engine *e, uint32_t src, uint64_t seq)
{
    struct xtq__notify_seg *g = e->notify_own;
    /* src was checked against the job's size when the put arrived. */
    if (!g || src >= g->nranks)
        return NULL;
    return &g->words[(size_t)src * g->words_per_peer + seq % g->words_per_peer];
}

void xtq__notify_post(struct xtq__engine *e, uint32_t src, uint64_t seq, int status)
{
    _Atomic uint64_t *w = xtq__notify_own_word(e, src, seq);
    /* Release: the task's writes (visible to this thread, which retires
     * it) before the word, for the initiator's acquiring load. A device
     * that stored it already stored the same value. */
    if (w)
        atomic_store_explicit(w, XTQ__NOTIFY_WORD(seq, status), memory_order_release);
}

const _Atomic uint64_t *xtq__notify_word(const struct xtq__engine *e, int target, uint64_t seq)
{
    if (!e->notify_peers.seg || target < 0 || target >= e->ctx->size)
        return NULL;
    const struct xtq__notify_seg *g = e->notify_peers.seg[target];
    /* Two puts in flight at once never share a word while our window is
     * no wider than the owner's; a seq whose tag would read 0 is skipped. */
    if (!g || e->window > g->words_per_peer || (uint32_t)(seq + 1) == 0)
        return NULL;
    return &g->words[(size_t)e->ctx->rank * g->words_per_peer + seq % g->words_per_peer];
}
