/*
 * xtq_info: what libxtq sees on this machine. Version, libfabric and its
 * usable providers, agents (and why a kind is unavailable), the hwloc
 * topology and where the progress thread would go, and every XTQ_*
 * parameter.
 *   xtq_info                  everything
 *   xtq_info --brief          one line per section
 *   xtq_info --params-markdown  the README's parameter table rows
 */
#include <xtq/xtq.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hwloc.h>
#include <rdma/fabric.h>

static void print_params_markdown(void)
{
    for (unsigned i = 0; i < xtq_param_count(); i++) {
        xtq_param_info_t p;
        if (xtq_param_get_info(i, &p) == 0)
            printf("| %s | %s | %s | %s |\n", p.name, xtq_param_type_name(p.type),
                   p.default_value, p.help);
    }
}

static void print_params(void)
{
    printf("\nParameters (%u):\n", xtq_param_count());
    for (unsigned i = 0; i < xtq_param_count(); i++) {
        xtq_param_info_t p;
        if (xtq_param_get_info(i, &p) != 0)
            continue;
        printf("  %-24s %-6s default=%-10s current=%s\n      %s\n", p.name,
               xtq_param_type_name(p.type), p.default_value[0] ? p.default_value : "\"\"",
               p.value ? p.value : "(unset)", p.help);
    }
}

/* RDM providers that offer what the engine needs: FI_MSG | FI_MULTI_RECV. */
static void print_fabric(bool brief)
{
    uint32_t v = fi_version();
    struct fi_info *hints = fi_allocinfo(), *info = NULL;
    char seen[32][64];
    int n = 0;

    hints->caps = FI_MSG | FI_MULTI_RECV;
    hints->ep_attr->type = FI_EP_RDM;
    hints->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
    int rc = fi_getinfo(FI_VERSION(1, 14), NULL, NULL, 0, hints, &info);
    printf("%slibfabric %u.%u:", brief ? "" : "\n", FI_MAJOR(v), FI_MINOR(v));
    if (rc) {
        printf(" no RDM provider with FI_MSG|FI_MULTI_RECV (%s)\n", fi_strerror(-rc));
        fi_freeinfo(hints);
        return;
    }
    if (!brief)
        printf(" RDM providers with FI_MSG|FI_MULTI_RECV:\n");
    for (struct fi_info *p = info; p; p = p->next) {
        bool dup = false;
        for (int i = 0; i < n; i++)
            dup |= strcmp(seen[i], p->fabric_attr->prov_name) == 0;
        if (dup || n == 32)
            continue;
        snprintf(seen[n++], 64, "%s", p->fabric_attr->prov_name);
        if (brief)
            printf(" %s", p->fabric_attr->prov_name);
        else
            printf("  %-14s fabric %-16s domain %-8s iov_limit %zu inject %zu\n",
                   p->fabric_attr->prov_name, p->fabric_attr->name, p->domain_attr->name,
                   p->tx_attr->iov_limit, p->tx_attr->inject_size);
    }
    if (brief)
        printf("\n");
    fi_freeinfo(info);
    fi_freeinfo(hints);
}

static void print_topology(bool brief)
{
    hwloc_topology_t topo;
    if (hwloc_topology_init(&topo))
        return;
    hwloc_topology_set_components(topo, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, "x86");
    if (hwloc_topology_load(topo)) {
        printf("hwloc: topology unavailable\n");
        return;
    }
    int pk = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE);
    int cores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
    int pus = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
    int numa = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
    /* Same rule as the engine: XTQ_PROGRESS_CPU, else the last core (the
     * next ones backwards for further ranks on the host). */
    const char *env = getenv("XTQ_PROGRESS_CPU");
    int want = env && *env ? atoi(env) : -1;
    int n = cores > 0 ? cores : pus;
    const char *unit = cores > 0 ? "core" : "PU";
    if (want < 0)
        want = n - 1;
    printf("%shwloc %s: %d package(s), %d core(s), %d PU(s), %d NUMA node(s); progress thread "
           "of local rank 0 on %s %d%s\n",
           brief ? "" : "\n", HWLOC_VERSION, pk, cores, pus, numa, unit, n > 0 ? want % n : 0,
           env && *env ? " (XTQ_PROGRESS_CPU)" : " (last core)");
    if (!brief && cores > 0) {
        for (int i = 0; i < cores; i++) {
            hwloc_obj_t c = hwloc_get_obj_by_type(topo, HWLOC_OBJ_CORE, (unsigned)i);
            char set[128];
            hwloc_bitmap_list_snprintf(set, sizeof(set), c->cpuset);
            printf("  core %d: PUs %s\n", i, set);
        }
    }
    hwloc_topology_destroy(topo);
}

static void print_agents(bool brief)
{
    xtq_init_attr_t attr = {.field_mask = XTQ_INIT_ATTR_FIELD_PROGRESS,
                            .progress = XTQ_PROGRESS_MANUAL};
    xtq_ctx_t *ctx = NULL;
    int rc = xtq_init(&attr, &ctx);
    if (rc) {
        printf("%sagents: unknown (xtq_init failed: %s)\n", brief ? "" : "\n", xtq_strerror(rc));
        return;
    }
    printf("%sagents (%u):", brief ? "" : "\n", xtq_agent_count(ctx));
    if (!brief)
        printf("\n");
    for (unsigned i = 0; i < xtq_agent_count(ctx); i++) {
        xtq_agent_t *a;
        xtq_agent_info_t info;
        if (xtq_agent_get(ctx, i, &a) || xtq_agent_get_info(a, &info))
            continue;
        if (brief)
            printf(" %s:%s", xtq_agent_kind_name(info.kind), info.name);
        else
            printf("  %-5s %-32s device %u, %u workers, queues up to %u packets\n",
                   xtq_agent_kind_name(info.kind), info.name, info.device_index, info.workers,
                   info.max_queue_size);
    }
    if (brief)
        printf("\n");
    for (int k = 0; k < XTQ_AGENT_KIND_COUNT; k++) {
        char reason[200] = "";
        if (xtq_agent_kind_status(ctx, (enum xtq_agent_kind)k, reason, sizeof(reason)) != 0)
            printf("  %s unavailable: %s\n", xtq_agent_kind_name((enum xtq_agent_kind)k), reason);
    }
    printf("%sengine provider for a single process: %s\n", brief ? "" : "  ",
           xtq_provider_name(ctx));
    xtq_finalize(ctx);
}

int main(int argc, char **argv)
{
    bool brief = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--params-markdown") == 0) {
            print_params_markdown();
            return 0;
        } else if (strcmp(argv[i], "--brief") == 0) {
            brief = true;
        } else {
            fprintf(stderr, "usage: %s [--brief | --params-markdown]\n", argv[0]);
            return 2;
        }
    }
    printf("libxtq %s\n", xtq_version());
    print_fabric(brief);
    print_agents(brief);
    print_topology(brief);
    if (!brief)
        print_params();
    return 0;
}
