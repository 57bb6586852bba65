/*
 * Inboxes on one host (XTQ_SHM_INBOX; docs/design.md, "Inboxes on one
 * host").
 *
 * Where every rank is on one host, a small put need not cross the
 * transport: each engine owns a segment of POSIX shared memory with one
 * ring per initiator rank, and that rank writes the put's wire message
 * (header, command, payload: what it would have injected) into a slot of
 * its ring, sets the slot's flag and rings the doorbell. The engine's
 * progress turn takes it from there as it takes a message from a receive
 * region: its header and command copied into a private mirror slot first
 * (a peer cannot change what was validated), then validated, rewritten
 * and enqueued by the same code (target.c), the payload read in place in
 * the ring slot. Nothing else changes: the put is acked (or its
 * completion word written), counted and, if lost, re-asked as before.
 * Acks and control messages to a peer on the host take its inbox too
 * (xtq__inbox_send).
 *
 * Order. One initiator's puts to one target reach its queues in the order
 * they were issued, whichever way each went:
 *  - a put that goes through the transport is preceded, at the target, by
 *    everything its ring held when it arrived (xtq__inbox_take_from before
 *    any transport message of that rank: the ring's flag was stored before
 *    the send began);
 *  - a put goes into the ring only while no put to that target that went
 *    through the transport still has its window slot (fi_unacked): the
 *    slot is freed by the ack, which the target sends once it has handled
 *    the put.
 *
 * The mirror slot and the ring slot live as long as the task holds them
 * (its arguments, its payload read in place): `freed` moves past a slot
 * only once its region is let go of, in ring order. A full ring sends the
 * put through the transport, which the order rules above allow.
 *
 * A peer that reserved an index and died before it stored the flag stops
 * its own ring only. A flag, a length or a message that does not make
 * sense is dropped, as a malformed message from the transport would be.
 */
#include "internal.h"
#include "nic-emul/engine_int.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/*
 * What a peer writes into our inbox in answer to what we wrote into its
 * own (its ack, the next step of a collective) comes after our write, but
 * through another process, which a race detector cannot see: a thread of
 * ours that then changes the buffer our write read (a collective's task
 * reducing into what it sent) looks like a race with it. The transport's
 * path made that order visible by accident (its locks); here, under
 * ThreadSanitizer only, every publish releases one counter of this process
 * and every take acquires it.
 */
#if defined(__SANITIZE_THREAD__)
#define XPROC_ORDER 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define XPROC_ORDER 1
#endif
#endif
#ifdef XPROC_ORDER
static _Atomic uint64_t xproc_order;
#define XPROC_RELEASE() atomic_fetch_add_explicit(&xproc_order, 1, memory_order_release)
#define XPROC_ACQUIRE() ((void)atomic_load_explicit(&xproc_order, memory_order_acquire))
#else
#define XPROC_RELEASE() ((void)0)
#define XPROC_ACQUIRE() ((void)0)
#endif

/* Largest segment made (the mirror is as large): past it, transport only. */
#define INBOX_SEG_MAX ((size_t)64 << 20)
/* Up to this many ranks the owner looks at every ring's next slot (lines
 * it holds shared until a writer changes one); beyond, writers bump one
 * count that it looks at instead. */
#define INBOX_SCAN_MAX 64u

static size_t seg_slots_off(uint32_t nranks)
{
    return sizeof(struct xtq__inbox_seg) + (size_t)nranks * sizeof(struct xtq__inbox_ring);
}

static size_t slot_stride(const struct xtq__inbox_seg *g)
{
    return sizeof(struct xtq__inbox_slot) + g->slot_bytes;
}

static struct xtq__inbox_slot *seg_slot(struct xtq__inbox_seg *g, uint32_t src, uint64_t idx)
{
    size_t n = (size_t)src * g->nslots + (size_t)(idx % g->nslots);
    return (struct xtq__inbox_slot *)((uint8_t *)g + seg_slots_off(g->nranks) +
                                      n * slot_stride(g));
}

/* XTQ_SHM_INBOX: -1 (auto) where every rank is on this host and the
 * transport is libfabric's shm provider (whose doorbells wake a sleeping
 * progress thread), 1 on one host where doorbells or manual progress
 * serve, 0 never. */
static bool inbox_wanted(const struct xtq__engine *e)
{
    int64_t v = xtq__param_int(XTQ__PARAM_XTQ_SHM_INBOX);
    if (v == 0 || !e->same_host)
        return false;
    if (v > 0)
        return e->bell_fence || e->manual;
    return strcmp(e->ofi.prov_name, "shm") == 0;
}

/* Free what inbox_open made besides the segment. */
static void mirror_free(struct xtq__engine *e)
{
    xtq__shm_unmap(e, e->inbox_mirror, e->inbox_mirror_len, e->inbox_mirror_agents);
    e->inbox_mirror_agents = false;
    e->inbox_mirror = NULL;
    free(e->inbox_regions);
    free(e->inbox_cons);
    free(e->inbox_freed);
    e->inbox_regions = NULL;
    e->inbox_cons = NULL;
    e->inbox_freed = NULL;
}

void xtq__inbox_open(struct xtq__engine *e)
{
    xtq_ctx_t *ctx = e->ctx;
    e->inbox_name[0] = '\0';
    if (!inbox_wanted(e))
        return;
    int64_t ns = xtq__param_int(XTQ__PARAM_XTQ_SHM_INBOX_SLOTS);
    size_t sb = xtq__param_size(XTQ__PARAM_XTQ_SHM_INBOX_BYTES);
    uint32_t nslots = ns < 2 ? 2 : ns > 4096 ? 4096 : (uint32_t)ns;
    sb = XTQ_ALIGN_UP(sb < 256 ? 256 : sb > ((size_t)1 << 20) ? ((size_t)1 << 20) : sb,
                      (size_t)XTQ_CACHELINE);
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t per = sizeof(struct xtq__inbox_slot) + sb;
    size_t len = XTQ_ALIGN_UP(seg_slots_off((uint32_t)ctx->size) +
                                  (size_t)ctx->size * nslots * per,
                              page);
    size_t mlen = XTQ_ALIGN_UP((size_t)ctx->size * nslots * sb, page);
    if (len > INBOX_SEG_MAX) {
        xtq_info(ENGINE,
                 "inboxes: %d ranks x %u slots of %zu bytes need %zu bytes, above %zu; puts "
                 "to this rank use the transport",
                 ctx->size, nslots, sb, len, INBOX_SEG_MAX);
        return;
    }
    e->inbox_regions = calloc((size_t)ctx->size * nslots, sizeof(*e->inbox_regions));
    e->inbox_cons = calloc((size_t)ctx->size, sizeof(*e->inbox_cons));
    e->inbox_freed = calloc((size_t)ctx->size, sizeof(*e->inbox_freed));
    void *m = mmap(NULL, mlen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (!e->inbox_regions || !e->inbox_cons || !e->inbox_freed || m == MAP_FAILED) {
        if (m != MAP_FAILED)
            munmap(m, mlen);
        goto fail_mem;
    }
    e->inbox_mirror = m;
    e->inbox_mirror_len = mlen;
    void *p = xtq__shm_create(e, e->inbox_name, "i", len);
    if (!p) {
        xtq_warn(ENGINE, "inboxes: no shared memory segment (%s); puts to this rank use the "
                         "transport",
                 strerror(errno));
        goto fail_mem;
    }
    /* Agents read payloads in place from the ring slots (and what a
     * mirror holds), as from a region: memory a GPU cannot read would
     * fault it. Without both mapped, no inbox. */
    e->inbox_mirror_agents = xtq__agents_mem_register(ctx, m, mlen) == 0;
    if (!e->inbox_mirror_agents || xtq__agents_mem_register(ctx, p, len) != 0) {
        munmap(p, len);
        shm_unlink(e->inbox_name);
        e->inbox_name[0] = '\0';
        goto fail_mem;
    }
    for (size_t i = 0; i < (size_t)ctx->size * nslots; i++) {
        struct rx_region *r = &e->inbox_regions[i];
        r->kind = CTX_REGION;
        r->e = e;
        r->buf = (uint8_t *)m + i * sb;
        r->len = sb;
        r->inbox = true;
        r->inbox_src = (uint32_t)(i / nslots);
        r->out = true; /* never posted */
        atomic_store(&r->refs, 1);
    }
    xtq__mutex_init(&e->inbox_lock);
    e->inbox_lock_init = true;
    struct xtq__inbox_seg *g = p; /* ftruncate zeroed it: no flag is current */
    g->nranks = (uint32_t)ctx->size;
    g->nslots = nslots;
    g->slot_bytes = (uint32_t)sb;
    g->scan = (uint32_t)ctx->size <= INBOX_SCAN_MAX;
    int64_t pns = xtq__param_int(XTQ__PARAM_XTQ_SHM_INBOX_POLL_NS);
    e->inbox_poll_ns = pns < 0 ? 0 : (uint64_t)pns;
    atomic_thread_fence(memory_order_release);
    g->magic = XTQ__INBOX_MAGIC;
    e->inbox_own = g;
    e->inbox_len = len;
    return;

fail_mem:
    mirror_free(e);
}

void xtq__inbox_name(struct xtq__engine *e, char name[XTQ__BELL_NAME_MAX])
{
    snprintf(name, XTQ__BELL_NAME_MAX, "%s", e->inbox_own ? e->inbox_name : "");
}

/* A peer's segment, read-write; NULL when it has none or it is not what
 * this library makes (checked before any ring of it is used). */
static void *inbox_map(const char *name, int r, int nranks, size_t *len)
{
    struct xtq__inbox_seg *g = xtq__shm_map(name, PROT_READ | PROT_WRITE, sizeof(*g), len);
    if (!g)
        return NULL;
    size_t need = g->nslots && g->slot_bytes && g->nranks == (uint32_t)nranks
                      ? seg_slots_off(g->nranks) + (size_t)nranks * g->nslots * slot_stride(g)
                      : SIZE_MAX;
    if (g->magic != XTQ__INBOX_MAGIC || (g->slot_bytes % XTQ_CACHELINE) || need > *len) {
        xtq_warn(ENGINE,
                 "rank %d's inbox is not in this library's format; puts to it use the "
                 "transport",
                 r);
        munmap(g, *len);
        return NULL;
    }
    return g;
}

void xtq__inbox_connect(struct xtq__engine *e, const char *names, size_t stride)
{
    if (!inbox_wanted(e))
        return;
    int mapped = xtq__shm_peers_map(e, &e->inbox_peers, names, stride, e->inbox_own, inbox_map);
    if (mapped < 0)
        return;
    xtq__mutex_init(&e->inbox_tx_lock);
    e->inbox_tx_lock_init = true;
    if (e->plane == 0 && e->ctx->rank == 0)
        xtq_info(ENGINE, "inboxes: %d of %d ranks' mapped (XTQ_SHM_INBOX)", mapped, e->ctx->size);
}

void xtq__inbox_unlink(struct xtq__engine *e)
{
    if (e->inbox_name[0]) {
        shm_unlink(e->inbox_name);
        e->inbox_name[0] = '\0';
    }
}

void xtq__inbox_close(struct xtq__engine *e)
{
    xtq__inbox_unlink(e);
    xtq__shm_peers_unmap(e, &e->inbox_peers, e->inbox_own);
    /* Mapped for the agents with the mirror (both or neither). */
    xtq__shm_unmap(e, e->inbox_own, e->inbox_len, e->inbox_mirror_agents);
    e->inbox_own = NULL;
    mirror_free(e);
    if (e->inbox_lock_init)
        pthread_mutex_destroy(&e->inbox_lock);
    e->inbox_lock_init = false;
    if (e->inbox_tx_lock_init)
        pthread_mutex_destroy(&e->inbox_tx_lock);
    e->inbox_tx_lock_init = false;
}

/* ---- the initiator ------------------------------------------------------- */

/* The next index of our ring at `target`, if it has room. */
static bool reserve(struct xtq__engine *e, int target, size_t len, bool put, uint64_t *idx)
{
    struct xtq__inbox_seg *g = e->inbox_peers.seg ? e->inbox_peers.seg[target] : NULL;
    if (!g || len > g->slot_bytes || !e->peers)
        return false;
    struct peer *p = &e->peers[target];
    /* A put may not overtake one the transport carries (see above). */
    if (put && atomic_load_explicit(&p->fi_unacked, memory_order_acquire))
        return false;
    bool ok = false;
    xtq__mutex_lock(&e->inbox_tx_lock);
    /* `freed` is the owner's line, written at every release: read only
     * when what we saw last leaves no room. */
    if (p->inbox_next - p->inbox_freed_seen >= g->nslots) {
        uint64_t freed = atomic_load_explicit(&g->rings[e->ctx->rank].freed, memory_order_acquire);
        /* freed past what we reserved: not the owner's protocol; never write. */
        if (freed <= p->inbox_next && freed > p->inbox_freed_seen)
            p->inbox_freed_seen = freed;
    }
    if (p->inbox_next - p->inbox_freed_seen < g->nslots) {
        /* A slot our threads wrote before is written again only past the
         * owner's release of it (freed): TSan sees that order here. */
        XPROC_ACQUIRE();
        *idx = p->inbox_next++;
        ok = true;
    }
    pthread_mutex_unlock(&e->inbox_tx_lock);
    return ok;
}

bool xtq__inbox_reserve(struct xtq__engine *e, int target, size_t len, uint64_t *idx)
{
    return reserve(e, target, len, true, idx);
}

ssize_t xtq__inbox_send(struct xtq__engine *e, int dest, const void *msg, size_t len)
{
    uint64_t idx;
    if (!reserve(e, dest, len, false, &idx))
        return -FI_EAGAIN;
    struct iovec iov = {(void *)msg, len};
    xtq__inbox_write(e, dest, idx, &iov, 1);
    return 0;
}

void xtq__inbox_fill(struct xtq__engine *e, int target, uint64_t idx, const struct iovec *iov,
                     size_t niov)
{
    struct xtq__inbox_seg *g = e->inbox_peers.seg[target];
    struct xtq__inbox_slot *s = seg_slot(g, (uint32_t)e->ctx->rank, idx);
    size_t len = 0;
    for (size_t i = 0; i < niov; i++) { /* reserved for at most slot_bytes */
        memcpy(s->data + len, iov[i].iov_base, iov[i].iov_len);
        len += iov[i].iov_len;
    }
    s->len = (uint32_t)len;
}

void xtq__inbox_publish(struct xtq__engine *e, int target, uint64_t idx)
{
    struct xtq__inbox_seg *g = e->inbox_peers.seg[target];
    struct xtq__inbox_slot *s = seg_slot(g, (uint32_t)e->ctx->rank, idx);
    /* No lock: a thread of ours writes this slot again only once the
     * owner has released it (freed), which follows this store through the
     * owner's process; under TSan the counter shows that order. */
    XPROC_RELEASE();
    atomic_store_explicit(&s->flag, idx + 1, memory_order_release);
    if (!g->scan)
        atomic_fetch_add_explicit(&g->posted, 1, memory_order_release);
    /* Its progress thread may sleep: the doorbell, as after a send. */
    xtq__bell_ring(e, target);
}

void xtq__inbox_write(struct xtq__engine *e, int target, uint64_t idx, const struct iovec *iov,
                      size_t niov)
{
    xtq__inbox_fill(e, target, idx, iov, niov);
    xtq__inbox_publish(e, target, idx);
}

/* ---- the target ---------------------------------------------------------- */

/* Take one message from rank `src`'s ring, if its next one is there. */
static bool inbox_take_one(struct xtq__engine *e, uint32_t src)
{
    struct xtq__inbox_seg *g = e->inbox_own;
    uint64_t idx = atomic_load_explicit(&e->inbox_cons[src], memory_order_relaxed);
    struct xtq__inbox_slot *s = seg_slot(g, src, idx);
    if (atomic_load_explicit(&s->flag, memory_order_acquire) != idx + 1)
        return false;
    /* Its mirror slot was let go of by the last task that held it (the
     * writer saw `freed` past it): acquire what that release stored, so
     * that the task's reads come before our copy within this process. */
    (void)atomic_load_explicit(&e->inbox_freed[src], memory_order_acquire);
    XPROC_ACQUIRE();
    uint32_t len = s->len;
    struct rx_region *r = &e->inbox_regions[(size_t)src * g->nslots + idx % g->nslots];
    atomic_store_explicit(&e->inbox_cons[src], idx + 1, memory_order_relaxed);
    atomic_store_explicit(&r->refs, 1, memory_order_relaxed);
    if (len > g->slot_bytes) {
        xtq__stats_rejected(e->ctx, -XTQ_EPROTO);
        XTQ_LOG_ONCE(ENGINE, WARN, "dropped a message of %u bytes in rank %u's inbox (slots "
                                   "hold %u)",
                     len, src, g->slot_bytes);
    } else if (len) {
        /* What is validated and rewritten is copied (the header first,
         * then the command it says precedes the payload); a put's payload
         * is read in place, from the ring slot, which stays the message's
         * until its task lets go (the sender changing it meanwhile changes
         * only its own data, as with a transport that reads the sender's
         * memory). */
        size_t head = len;
        if (len >= sizeof(struct xtq__wire_hdr)) {
            memcpy(r->buf, s->data, sizeof(struct xtq__wire_hdr));
            const struct xtq__wire_hdr *h = r->buf;
            if (h->type == XTQ__MSG_PUT && h->payload_len && h->cmd_len < g->slot_bytes) {
                size_t off = xtq__wire_payload_offset(h->cmd_len);
                if (off < len)
                    head = off;
            }
            memcpy((uint8_t *)r->buf + sizeof(struct xtq__wire_hdr),
                   s->data + sizeof(struct xtq__wire_hdr), head - sizeof(struct xtq__wire_hdr));
        } else {
            memcpy(r->buf, s->data, len);
        }
        xtq__target_recv_inbox(e, r, r->buf, len, src, head < len ? s->data : NULL);
    }
    xtq__region_put(r);
    return true;
}

void xtq__inbox_take_from(struct xtq__engine *e, uint32_t src)
{
    if (!e->inbox_own || src >= e->inbox_own->nranks)
        return;
    while (inbox_take_one(e, src))
        ;
}

bool xtq__inbox_pending(const struct xtq__engine *e)
{
    struct xtq__inbox_seg *g = e->inbox_own;
    if (!g)
        return false;
    if (!g->scan)
        return atomic_load_explicit(&g->posted, memory_order_relaxed) !=
               atomic_load_explicit(&e->inbox_posted_seen, memory_order_relaxed);
    for (uint32_t src = 0; src < g->nranks; src++) {
        uint64_t idx = atomic_load_explicit(&e->inbox_cons[src], memory_order_relaxed);
        if (atomic_load_explicit(&seg_slot(g, src, idx)->flag, memory_order_relaxed) == idx + 1)
            return true;
    }
    return false;
}

int xtq__inbox_poll(struct xtq__engine *e)
{
    struct xtq__inbox_seg *g = e->inbox_own;
    if (!g)
        return 0;
    if (!g->scan) {
        /* Writers bump `posted` after their flag: unchanged, nothing new. */
        uint64_t posted = atomic_load_explicit(&g->posted, memory_order_acquire);
        if (posted == atomic_load_explicit(&e->inbox_posted_seen, memory_order_relaxed))
            return 0;
        atomic_store_explicit(&e->inbox_posted_seen, posted, memory_order_relaxed);
    }
    int n = 0;
    for (uint32_t src = 0; src < g->nranks; src++)
        while (inbox_take_one(e, src))
            n++;
    return n;
}

void xtq__inbox_release(struct rx_region *r)
{
    struct xtq__engine *e = r->e;
    struct xtq__inbox_seg *g = e->inbox_own;
    uint32_t src = r->inbox_src;
    struct rx_region *ring = &e->inbox_regions[(size_t)src * g->nslots];
    xtq__mutex_lock(&e->inbox_lock);
    r->inbox_done = true;
    uint64_t f = atomic_load_explicit(&e->inbox_freed[src], memory_order_relaxed);
    const uint64_t was = f;
    while (ring[f % g->nslots].inbox_done) {
        ring[f % g->nslots].inbox_done = false;
        f++;
    }
    if (f != was) {
        atomic_store_explicit(&e->inbox_freed[src], f, memory_order_release);
        atomic_store_explicit(&g->rings[src].freed, f, memory_order_release);
    }
    pthread_mutex_unlock(&e->inbox_lock);
}
