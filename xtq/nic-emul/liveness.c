/*
 * Liveness: a peer we have puts outstanding to must answer (an ack of our
 * put, or a pong to our ping) within XTQ_PEER_TIMEOUT_MS, else it
 * is declared down once a ping has also gone unanswered for half that time
 * (so that a process that was itself stopped asks before it judges): its pending puts complete with -XTQ_EHOSTDOWN
 * (initiator.c) and new puts to it fail at once. Pings are ACK headers with
 * a reserved sequence number, answered by the peer's progress thread, so a
 * live target whose queue is stuck behind long tasks is not mistaken for a
 * dead one. target.c reports every valid message here; the progress turn
 * (progress.c) runs the check; the transport's connection errors and acks
 * that cannot leave (acks.c) declare a peer down early.
 *
 * A peer declared down is not given up: it is pinged every quarter timeout
 * and an answer from it (its pong, an ack) brings it back,
 * so new puts to it go out again once a link returns. Puts that failed
 * stay failed; their late acks name sequence numbers no slot holds any
 * more (initiator.c) and are dropped, and a slot whose message the
 * transport still held is not reused until the transport lets go of it.
 */
#include "internal.h"
#include "nic-emul/engine_int.h"

/* Liveness probes: ACK headers with reserved sequence numbers, on the
 * control channel (acks.c). Best effort (inject, or nothing): a lost ping
 * is retried, a lost pong costs a retry. */
static ssize_t probe_send(struct xtq__engine *e, int dest, uint64_t seq)
{
    struct xtq__wire_hdr hdr;
    xtq__wire_hdr_init(&hdr, XTQ__MSG_ACK, e->ctx->job_key, (uint32_t)e->ctx->rank, seq);
    ssize_t rc = xtq__ctrl_send(e, dest, &hdr);
    if (rc == 0)
        xtq__bell_ring(e, dest);
    return rc;
}

/* Test hook (engine.h): arrivals from these ranks are dropped. */
_Atomic uint64_t xtq__fault_drop_from;

bool xtq__fault_dropped(uint32_t src)
{
    return src < 64 &&
           (atomic_load_explicit(&xtq__fault_drop_from, memory_order_relaxed) >> src & 1);
}

/* A peer is up or down for the whole context: what one plane learns, the
 * others take (finalize judges by all of them, and only this rank's own
 * plane has puts to fail). */
static bool peer_up_one(struct xtq__engine *e, uint32_t src)
{
    struct peer *p = &e->peers[src];
    if (atomic_load_explicit(&p->down, memory_order_relaxed) && atomic_exchange(&p->down, false)) {
        atomic_fetch_sub(&e->peers_down, 1);
        return true;
    }
    return false;
}

static void peer_heard(struct xtq__engine *e, uint32_t src)
{
    struct peer *p = &e->peers[src];
    atomic_store_explicit(&p->last_heard, xtq__now_ns(), memory_order_relaxed);
    if (peer_up_one(e, src)) {
        xtq_warn(ENGINE, "rank %d: peer %u heard from again; its new puts go out", e->ctx->rank,
                 src);
        for (unsigned j = 0; j < e->ctx->nplanes; j++) {
            struct xtq__engine *f = e->ctx->planes[j];
            if (f && f != e) {
                atomic_store_explicit(&f->peers[src].last_heard, xtq__now_ns(),
                                      memory_order_relaxed);
                peer_up_one(f, src);
            }
        }
    }
}

/* Only answers (acks of this rank's puts, pongs to its pings, a target's
 * word on a put asked about) show that what this rank sends reaches the
 * peer. The peer's own puts, pings and asks show that it runs, not that
 * this direction of the link works: after an outage a tcp connection can
 * sit in retransmission backoff one way for tens of seconds while the
 * other way carries puts (docs/reliability.md). */
void xtq__peer_msg(struct xtq__engine *e, const struct xtq__wire_hdr *hdr)
{
    atomic_store_explicit(&e->peers[hdr->src_rank].last_msg, xtq__now_ns(), memory_order_relaxed);
    if (hdr->type == XTQ__MSG_ACK && hdr->seq != PING_SEQ)
        peer_heard(e, hdr->src_rank);
}

bool xtq__probe_recv(struct xtq__engine *e, const struct xtq__wire_hdr *hdr)
{
    if (hdr->type != XTQ__MSG_ACK)
        return false;
    if (hdr->seq == PING_SEQ) {
        probe_send(e, (int)hdr->src_rank, PONG_SEQ);
        return true;
    }
    if (hdr->seq == FIN_SEQ) {
        atomic_store(&e->peers[hdr->src_rank].fin, true);
        return true;
    }
    return hdr->seq == PONG_SEQ; /* liveness only */
}

/*
 * A finalize without the launcher's barriers (a peer is down, and a dead
 * one would hang the fence) must still not close under the live peers:
 * acks of their last puts may wait in the transport's queue (tcp), and
 * only progress sends them. Each rank sends FIN once its own puts are
 * settled and its tasks drained, and keeps progressing until every live
 * peer's FIN came (that peer has then settled its puts to us: our acks
 * arrived), the peer is declared down, or the deadline passes. FIN is
 * sent again every 50 ms: it is best effort, as pings are.
 */
int xtq__engine_close_with_peers(struct xtq__engine *e, uint64_t deadline)
{
    uint64_t next_fin = 0;
    for (;;) {
        uint64_t now = xtq__now_ns();
        bool all = true, resend = now >= next_fin;
        for (int r = 0; r < e->ctx->size; r++) {
            struct peer *p = &e->peers[r];
            if (r == e->ctx->rank || atomic_load(&p->down))
                continue;
            if (resend)
                (void)probe_send(e, r, FIN_SEQ);
            if (!atomic_load(&p->fin))
                all = false;
        }
        if (resend)
            next_fin = now + 50000000;
        if (all)
            return 0;
        if (now >= deadline)
            return -XTQ_ETIMEDOUT;
        xtq__engine_wait_step(e);
    }
}

/* Fail every put pending to `r` with -XTQ_EHOSTDOWN; later puts fail at
 * once. Slots stay unused afterwards, so a late completion from the
 * provider finds them idle and is ignored. */
static bool peer_down_one(struct xtq__engine *e, int r)
{
    if (atomic_exchange(&e->peers[r].down, true))
        return false;
    atomic_fetch_add(&e->peers_down, 1);
    xtq__puts_fail_peer(e, r, -XTQ_EHOSTDOWN);
    return true;
}

void xtq__peer_down(struct xtq__engine *e, int r, const char *why)
{
    if (!peer_down_one(e, r))
        return;
    xtq_warn(ENGINE, "rank %d: peer %d %s; declared down, its puts fail", e->ctx->rank, r, why);
    for (unsigned j = 0; j < e->ctx->nplanes; j++) {
        struct xtq__engine *f = e->ctx->planes[j];
        if (f && f != e)
            peer_down_one(f, r);
    }
}

/* Progress thread: ping quiet peers we wait on, declare silent ones down,
 * ask the ones down whether they are back. */
void xtq__peers_check(struct xtq__engine *e)
{
    if (!e->peer_timeout_ns)
        return;
    uint64_t now = xtq__now_ns();
    if (now < e->next_peer_check)
        return;
    uint64_t step = e->peer_timeout_ns / 8;
    e->next_peer_check = now + (step < 1000000 ? 1000000 : step > 250000000 ? 250000000 : step);
    for (int r = 0; r < e->ctx->size; r++) {
        struct peer *p = &e->peers[r];
        if (r == e->ctx->rank)
            continue;
        if (atomic_load(&p->down)) {
            /* tcp reconnects for the ping if its connection is gone. */
            if (now - p->ping_sent > e->peer_timeout_ns / 4) {
                p->ping_sent = now;
                probe_send(e, r, PING_SEQ);
            }
            continue;
        }
        xtq__mutex_lock(&e->put_lock);
        uint32_t busy = p->busy;
        pthread_mutex_unlock(&e->put_lock);
        if (!busy)
            continue;
        uint64_t heard = atomic_load_explicit(&p->last_heard, memory_order_relaxed);
        uint64_t quiet = now > heard ? now - heard : 0;
        if (p->ping_sent < heard)
            p->pings = p->pings_failed = 0;
        /* Silence alone does not condemn: this process may have been the
         * one not running (stopped, or starved on a loaded host) while the
         * peer's answers waited in the transport. A peer is declared down
         * only once a ping of ours has gone unanswered for half a timeout
         * as well; a peer that really died was pinged from a quarter
         * timeout of silence on, so it is declared down no later. */
        bool asked = p->pings && now - p->first_ping > e->peer_timeout_ns / 2;
        if (quiet > e->peer_timeout_ns && asked) {
            char why[160];
            snprintf(why, sizeof(why),
                     "silent for %.1f s (XTQ_PEER_TIMEOUT_MS) with %u puts pending, %u pings "
                     "unanswered (%u refused by the transport)",
                     (double)quiet / 1e9, busy, p->pings, p->pings_failed);
            xtq__peer_down(e, r, why);
        } else if (quiet > e->peer_timeout_ns / 4 && now - p->ping_sent > e->peer_timeout_ns / 8) {
            p->ping_sent = now;
            if (p->pings++ == 0)
                p->first_ping = now;
            if (probe_send(e, r, PING_SEQ) != 0)
                p->pings_failed++;
        }
    }
}

unsigned xtq__engine_peers_down(struct xtq__engine *e)
{
    return atomic_load(&e->peers_down);
}
