/*
 * The libfabric transport: one FI_EP_RDM endpoint with FI_MSG, FI_TAGGED and
 * FI_MULTI_RECV, one CQ (data format, fd wait object where the provider has
 * one) and a table AV filled from the bootstrap allgather.
 */
#include "internal.h"
#include "nic-emul/engine.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <rdma/fi_tagged.h>
#include <stdio.h>
#include <strings.h>
#include <unistd.h>

#define OFI_VERSION FI_VERSION(1, 14)

static struct fi_info *ofi_hints(const char *prov, bool source)
{
    struct fi_info *hints = fi_allocinfo();
    if (!hints)
        return NULL;
    /* FI_TAGGED: control traffic (acks, probes) has receives of its own,
     * apart from the multi-receive regions that hold puts. FI_SOURCE:
     * each arrival names the endpoint it came from, which the target
     * checks against the rank the message claims (target.c). */
    hints->caps = FI_MSG | FI_TAGGED | FI_MULTI_RECV | (source ? FI_SOURCE : 0);
    hints->ep_attr->type = FI_EP_RDM;
    hints->mode = 0;
    hints->domain_attr->threading = FI_THREAD_DOMAIN;
    hints->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
    hints->domain_attr->control_progress = FI_PROGRESS_UNSPEC;
    hints->domain_attr->data_progress = FI_PROGRESS_UNSPEC;
    if (prov && *prov)
        hints->fabric_attr->prov_name = strdup(prov);
    return hints;
}

/* "tcp" also matches the utility-layered "tcp;ofi_rxm". */
static bool prov_matches(const char *want, const char *have)
{
    if (!want || !*want)
        return true;
    size_t n = strlen(want);
    return strcasecmp(want, have) == 0 || (strncasecmp(want, have, n) == 0 && have[n] == ';');
}

/*
 * tcp lists one fi_info per interface address (loopback and IPv6
 * link-local ones too) in the kernel's order, and peers connect to the
 * address this endpoint publishes: it must be one they can reach. Score
 * each entry; 0 excludes it. XTQ_TCP_IFACE names the interface, else
 * IPv4 beats routable IPv6 beats loopback (a network namespace whose
 * veth is listed after lo, tests/multihost, must not publish 127.0.0.1).
 */
static int tcp_addr_score(const struct fi_info *p, const char *iface)
{
    const char *dom = p->domain_attr ? p->domain_attr->name : NULL;
    bool named = iface && *iface && strcmp(iface, "auto") != 0;
    int score = 0;

    if (named && (!dom || strcmp(dom, iface) != 0))
        return 0;
    if (p->addr_format == FI_SOCKADDR_IN && p->src_addr) {
        const struct sockaddr_in *sin = p->src_addr;
        score = (ntohl(sin->sin_addr.s_addr) >> 24) == 127 ? 1 : 4;
    } else if (p->addr_format == FI_SOCKADDR_IN6 && p->src_addr) {
        const struct sockaddr_in6 *sin6 = p->src_addr;
        if (IN6_IS_ADDR_LOOPBACK(&sin6->sin6_addr))
            score = 1;
        else if (IN6_IS_ADDR_LINKLOCAL(&sin6->sin6_addr))
            score = named ? 2 : 0; /* no scope id travels with the name */
        else
            score = 3;
    }
    return score;
}

static struct fi_info *tcp_pick(struct fi_info *list, const char *prov)
{
    const char *iface = xtq__param_string(XTQ__PARAM_XTQ_TCP_IFACE);
    struct fi_info *best = NULL;
    int best_score = 0;
    for (struct fi_info *p = list; p; p = p->next) {
        int sc = prov_matches(prov, p->fabric_attr->prov_name) ? tcp_addr_score(p, iface) : 0;
        if (sc > best_score) {
            best = p;
            best_score = sc;
        }
    }
    if (!best)
        xtq_err(OFI, "tcp: no usable address on interface %s (XTQ_TCP_IFACE)", iface);
    return best;
}

static bool is_tcp(const char *name)
{
    return prov_matches("tcp", name);
}

int xtq__ofi_list_providers(char names[][64], int max)
{
    struct fi_info *hints = ofi_hints(NULL, false), *info = NULL;
    int n = 0;
    if (!hints)
        return -XTQ_ENOMEM;
    if (fi_getinfo(OFI_VERSION, NULL, NULL, 0, hints, &info) == 0) {
        for (struct fi_info *p = info; p && n < max; p = p->next) {
            bool seen = false;
            for (int i = 0; i < n; i++)
                seen |= strcmp(names[i], p->fabric_attr->prov_name) == 0;
            if (!seen)
                snprintf(names[n++], 64, "%s", p->fabric_attr->prov_name);
        }
        fi_freeinfo(info);
    }
    fi_freeinfo(hints);
    return n;
}

/*
 * libfabric's shm (1.17) names an endpoint's region "/dev/shm/<pid>:<n>:<n>"
 * and creates it exclusively. A process killed before it closed its
 * endpoint leaves its region behind; a later process that gets the same
 * pid then fails fi_endpoint with EBUSY. Such a region is stale: no other
 * live process has our pid, and one of ours would be mapped here. Remove
 * those before opening (a handful of names per host at most).
 */
static void shm_clear_stale(void)
{
    char prefix[32], maps_line[512], path[320];
    DIR *d = opendir("/dev/shm");
    struct dirent *de;
    int plen = snprintf(prefix, sizeof(prefix), "%ld:", (long)getpid());

    if (!d)
        return;
    while ((de = readdir(d)) != NULL) {
        bool mapped = false;
        FILE *maps;
        if (strncmp(de->d_name, prefix, (size_t)plen) != 0)
            continue;
        snprintf(path, sizeof(path), "/dev/shm/%s", de->d_name);
        maps = fopen("/proc/self/maps", "r");
        while (maps && !mapped && fgets(maps_line, sizeof(maps_line), maps))
            mapped = strstr(maps_line, path) != NULL;
        if (maps)
            fclose(maps);
        if (!mapped && unlink(path) == 0)
            xtq_info(OFI, "shm: removed %s, left by a dead process with our pid", path);
    }
    closedir(d);
}

int xtq__ofi_open(struct xtq__ofi *o, const char *prov, size_t min_multi_recv)
{
    struct fi_info *hints, *list = NULL, *pick = NULL;
    struct fi_cq_attr cq_attr = {0};
    struct fi_av_attr av_attr = {0};
    int rc = -FI_ENODATA;

    memset(o, 0, sizeof(*o));
    o->wait_fd = -1;
    xtq__mutex_init(&o->lock);
    /* With FI_SOURCE where the provider has it, else without (the target
     * then trusts the rank a message claims: said once at open). */
    for (int source = 1; source >= 0 && !pick; source--) {
        hints = ofi_hints(prov, source);
        if (!hints)
            return -XTQ_ENOMEM;
        rc = fi_getinfo(OFI_VERSION, NULL, NULL, 0, hints, &list);
        fi_freeinfo(hints);
        for (struct fi_info *p = rc ? NULL : list; p; p = p->next)
            if (prov_matches(prov, p->fabric_attr->prov_name)) {
                pick = p;
                o->source = source;
                break;
            }
        if (!pick && list) {
            fi_freeinfo(list);
            list = NULL;
        }
    }
    if (!pick && rc) {
        xtq_err(OFI, "fi_getinfo(provider %s): %s", prov ? prov : "any", fi_strerror(-rc));
        return -XTQ_EFABRIC;
    }
    if (pick && is_tcp(pick->fabric_attr->prov_name) && !(pick = tcp_pick(list, prov))) {
        fi_freeinfo(list);
        return -XTQ_EFABRIC;
    }
    if (!pick) {
        xtq_err(OFI, "no RDM provider named %s with FI_MSG|FI_MULTI_RECV", prov);
        fi_freeinfo(list);
        return -XTQ_EFABRIC;
    }
    o->info = fi_dupinfo(pick);
    fi_freeinfo(list);
    if (!o->info)
        return -XTQ_ENOMEM;
    snprintf(o->prov_name, sizeof(o->prov_name), "%s", o->info->fabric_attr->prov_name);
    if (!o->source)
        xtq_warn(OFI, "%s: no FI_SOURCE; source ranks are taken as the messages claim them",
                 o->prov_name);
    o->iov_limit = o->info->tx_attr->iov_limit;
    o->inject_size = o->info->tx_attr->inject_size;
    o->rx_size = o->info->rx_attr->size;

    rc = fi_fabric(o->info->fabric_attr, &o->fabric, NULL);
    if (rc)
        goto err;
    rc = fi_domain(o->fabric, o->info, &o->domain, NULL);
    if (rc)
        goto err;
    if (strcmp(o->prov_name, "shm") == 0)
        shm_clear_stale();
    rc = fi_endpoint(o->domain, o->info, &o->ep, NULL);
    if (rc)
        goto err;

    cq_attr.format = FI_CQ_FORMAT_DATA;
    cq_attr.size = 4096;
    cq_attr.wait_obj = FI_WAIT_FD;
    rc = fi_cq_open(o->domain, &cq_attr, &o->cq, NULL);
    if (rc) {
        /* No fd wait object: the engine naps instead of blocking. */
        xtq_info(OFI, "%s: CQ with FI_WAIT_FD unavailable (%s); using bounded naps",
                 o->prov_name, fi_strerror(-rc));
        cq_attr.wait_obj = FI_WAIT_NONE;
        rc = fi_cq_open(o->domain, &cq_attr, &o->cq, NULL);
        if (rc)
            goto err;
    } else if (fi_control(&o->cq->fid, FI_GETWAIT, &o->wait_fd) != 0) {
        o->wait_fd = -1;
    }

    av_attr.type = FI_AV_TABLE;
    rc = fi_av_open(o->domain, &av_attr, &o->av, NULL);
    if (rc)
        goto err;
    rc = fi_ep_bind(o->ep, &o->cq->fid, FI_TRANSMIT | FI_RECV);
    if (rc)
        goto err;
    rc = fi_ep_bind(o->ep, &o->av->fid, 0);
    if (rc)
        goto err;
    /* After fi_enable: shm (1.17) keeps the option in its shared receive
     * context, which exists only once the endpoint is enabled. */
    rc = fi_enable(o->ep);
    if (rc)
        goto err;
    rc = fi_setopt(&o->ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &min_multi_recv,
                   sizeof(min_multi_recv));
    if (rc)
        goto err;
    xtq_info(OFI, "opened %s (fabric %s, domain %s), wait fd %d, iov_limit %zu, inject %zu",
             o->prov_name, o->info->fabric_attr->name, o->info->domain_attr->name, o->wait_fd,
             o->iov_limit, o->inject_size);
    return 0;

err:
    xtq_err(OFI, "%s: opening the endpoint failed: %s", o->prov_name, fi_strerror(-rc));
    xtq__ofi_close(o);
    return -XTQ_EFABRIC;
}

void xtq__ofi_close(struct xtq__ofi *o)
{
    if (o->ep)
        fi_close(&o->ep->fid);
    if (o->av)
        fi_close(&o->av->fid);
    if (o->cq)
        fi_close(&o->cq->fid);
    if (o->domain)
        fi_close(&o->domain->fid);
    if (o->fabric)
        fi_close(&o->fabric->fid);
    if (o->info)
        fi_freeinfo(o->info);
    free(o->addrs);
    o->ep = NULL;
    o->av = NULL;
    o->cq = NULL;
    o->domain = NULL;
    o->fabric = NULL;
    o->info = NULL;
    o->addrs = NULL;
    pthread_mutex_destroy(&o->lock);
}

int xtq__ofi_getname(struct xtq__ofi *o, void *addr, size_t *len)
{
    int rc = fi_getname(&o->ep->fid, addr, len);
    if (rc) {
        xtq_err(OFI, "fi_getname: %s", fi_strerror(-rc));
        return -XTQ_EFABRIC;
    }
    return 0;
}

int xtq__ofi_insert(struct xtq__ofi *o, const void *addrs, size_t stride, int n)
{
    o->addrs = calloc((size_t)n, sizeof(fi_addr_t));
    if (!o->addrs)
        return -XTQ_ENOMEM;
    o->nranks = n;
    for (int r = 0; r < n; r++) {
        const char *blob = (const char *)addrs + (size_t)r * stride;
        int got = fi_av_insert(o->av, blob + sizeof(uint32_t), 1, &o->addrs[r], 0, NULL);
        if (got != 1) {
            xtq_err(OFI, "fi_av_insert of rank %d failed (%d)", r, got);
            return -XTQ_EFABRIC;
        }
    }
    return 0;
}

int xtq__ofi_retarget(struct xtq__ofi *o, int rank, const void *name)
{
    fi_addr_t a;
    int rc = 0;
    if (rank < 0 || rank >= o->nranks)
        return -XTQ_EINVAL;
    pthread_mutex_lock(&o->lock);
    if (fi_av_insert(o->av, name, 1, &a, 0, NULL) != 1)
        rc = -XTQ_EFABRIC;
    else
        o->addrs[rank] = a;
    pthread_mutex_unlock(&o->lock);
    return rc;
}

int xtq__ofi_post_multi_recv(struct xtq__ofi *o, void *buf, size_t len, void *context)
{
    struct iovec iov = {.iov_base = buf, .iov_len = len};
    struct fi_msg msg = {
        .msg_iov = &iov, .desc = NULL, .iov_count = 1, .addr = FI_ADDR_UNSPEC,
        .context = context, .data = 0,
    };
    ssize_t rc;
    xtq__mutex_lock(&o->lock);
    rc = fi_recvmsg(o->ep, &msg, FI_MULTI_RECV);
    pthread_mutex_unlock(&o->lock);
    return (int)rc;
}

ssize_t xtq__ofi_sendv(struct xtq__ofi *o, const struct iovec *iov, size_t count, int dest,
                       void *context)
{
    ssize_t rc;
    atomic_fetch_add_explicit(&o->senders, 1, memory_order_relaxed);
    xtq__mutex_lock(&o->lock);
    rc = fi_sendv(o->ep, iov, NULL, count, o->addrs[dest], context);
    pthread_mutex_unlock(&o->lock);
    atomic_fetch_sub_explicit(&o->senders, 1, memory_order_relaxed);
    return rc;
}

ssize_t xtq__ofi_inject(struct xtq__ofi *o, const void *buf, size_t len, int dest)
{
    ssize_t rc;
    atomic_fetch_add_explicit(&o->senders, 1, memory_order_relaxed);
    xtq__mutex_lock(&o->lock);
    rc = fi_inject(o->ep, buf, len, o->addrs[dest]);
    pthread_mutex_unlock(&o->lock);
    atomic_fetch_sub_explicit(&o->senders, 1, memory_order_relaxed);
    return rc;
}

bool xtq__ofi_source_is(const struct xtq__ofi *o, int rank, fi_addr_t src)
{
    return !o->source || (rank >= 0 && rank < o->nranks && o->addrs[rank] == src);
}

ssize_t xtq__ofi_cq_read(struct xtq__ofi *o, struct fi_cq_data_entry *entries, fi_addr_t *src,
                         size_t n, struct fi_cq_err_entry *err, bool polite)
{
    ssize_t rc;
    if (polite) {
        if (atomic_load_explicit(&o->senders, memory_order_relaxed) ||
            pthread_mutex_trylock(&o->lock) != 0)
            return -FI_EBUSY;
    } else {
        xtq__mutex_lock(&o->lock);
    }
    rc = o->source ? fi_cq_readfrom(o->cq, entries, n, src) : fi_cq_read(o->cq, entries, n);
    if (rc == -FI_EAVAIL) {
        memset(err, 0, sizeof(*err));
        if (fi_cq_readerr(o->cq, err, 0) < 0)
            rc = -FI_EAGAIN;
    }
    pthread_mutex_unlock(&o->lock);
    return rc;
}

int xtq__ofi_trywait(struct xtq__ofi *o)
{
    struct fid *fids[1] = {&o->cq->fid};
    int rc;
    if (o->wait_fd < 0)
        return -FI_EAGAIN;
    pthread_mutex_lock(&o->lock);
    rc = fi_trywait(o->fabric, fids, 1);
    pthread_mutex_unlock(&o->lock);
    return rc;
}

ssize_t xtq__ofi_tinject(struct xtq__ofi *o, const void *buf, size_t len, int dest, uint64_t tag)
{
    ssize_t rc;
    atomic_fetch_add_explicit(&o->senders, 1, memory_order_relaxed);
    xtq__mutex_lock(&o->lock);
    rc = fi_tinject(o->ep, buf, len, o->addrs[dest], tag);
    pthread_mutex_unlock(&o->lock);
    atomic_fetch_sub_explicit(&o->senders, 1, memory_order_relaxed);
    return rc;
}

int xtq__ofi_post_trecv(struct xtq__ofi *o, void *buf, size_t len, uint64_t tag, void *context)
{
    ssize_t rc;
    xtq__mutex_lock(&o->lock);
    rc = fi_trecv(o->ep, buf, len, NULL, FI_ADDR_UNSPEC, tag, 0, context);
    pthread_mutex_unlock(&o->lock);
    return (int)rc;
}
