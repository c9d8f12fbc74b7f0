/* A throwaway Sanitizer API logger that answers the open questions of
 * docs/design/sanitizer-api-notes.md section 6 (injection route, which callbacks fire, on which
 * thread, whether the tool's own syncs call back, whether our patches load and patch). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <sanitizer.h>

static Sanitizer_SubscriberHandle h;
static int inited, in_tool;
static CUcontext patched_ctx;
static const char* patches;
struct Log { unsigned long long count, cap, entries; };
struct Entry { unsigned long long addr; unsigned int len, kind; };
#define CAP 4096
static void* dev_log;

static long tid(void) { return syscall(SYS_gettid); }

static void cb(void* ud, Sanitizer_CallbackDomain d, Sanitizer_CallbackId id, const void* data) {
    if (in_tool) { printf("PROBE tool-reentry domain=%d cbid=%u\n", d, id); return; }
    if (d == SANITIZER_CB_DOMAIN_RUNTIME_API || d == SANITIZER_CB_DOMAIN_DRIVER_API) {
        const Sanitizer_CallbackData* c = data;
        if (c->callbackSite == SANITIZER_API_ENTER)
            printf("PROBE api %s %s cbid=%u tid=%ld\n", d == SANITIZER_CB_DOMAIN_RUNTIME_API ? "rt" : "drv", c->functionName, id, tid());
        else
            printf("PROBE api-exit %s ret=%d\n", c->functionName, *(const int*)c->functionReturnValue);
        return;
    }
    printf("PROBE domain=%d cbid=%u tid=%ld", d, id, tid());
    if (d == SANITIZER_CB_DOMAIN_RESOURCE) {
        if (id == SANITIZER_CBID_RESOURCE_STREAM_CREATED || id == SANITIZER_CBID_RESOURCE_STREAM_DESTROY_STARTING) {
            const Sanitizer_ResourceStreamData* s = data; printf(" stream=%p h=%p", (void*)s->stream, (void*)s->hStream);
        } else if (id >= SANITIZER_CBID_RESOURCE_DEVICE_MEMORY_ALLOC && id <= SANITIZER_CBID_RESOURCE_MEMORY_FREE_ASYNC_DONE) {
            const Sanitizer_ResourceMemoryData* m = data;
            printf(" addr=%#llx size=%llu flags=%#x stream=%p vis=%d", (unsigned long long)m->address, (unsigned long long)m->size, m->flags, (void*)m->stream, m->visibility);
        } else if (id == SANITIZER_CBID_RESOURCE_MODULE_LOADED) {
            const Sanitizer_ResourceModuleData* m = data;
            if (patches) {
                in_tool = 1;
                if (patched_ctx != m->context) {
                    SanitizerResult r = sanitizerAddPatchesFromFile(patches, m->context);
                    printf(" addpatches=%d", r); patched_ctx = m->context;
                    r = sanitizerAlloc(m->context, &dev_log, sizeof(struct Log) + CAP * sizeof(struct Entry));
                    printf(" alloc=%d", r);
                }
                printf(" patch_global=%d", sanitizerPatchInstructions(SANITIZER_INSTRUCTION_GLOBAL_MEMORY_ACCESS, m->module, "streamsan_global_access"));
                printf(" patch_cpasync=%d", sanitizerPatchInstructions(SANITIZER_INSTRUCTION_MEMCPY_ASYNC, m->module, "streamsan_memcpy_async"));
                printf(" patchmodule=%d", sanitizerPatchModule(m->module));
                in_tool = 0;
            }
        } else if (id == SANITIZER_CBID_RESOURCE_CONTEXT_CREATION_FINISHED) {
            const Sanitizer_ResourceContextData* c = data; printf(" ctx=%p dev=%d", (void*)c->context, c->device);
        }
    } else if (d == SANITIZER_CB_DOMAIN_SYNCHRONIZE) {
        const Sanitizer_SynchronizeData* s = data; printf(" stream=%p h=%p", (void*)s->stream, (void*)s->hStream);
    } else if (d == SANITIZER_CB_DOMAIN_LAUNCH) {
        const Sanitizer_LaunchData* l = data;
        printf(" fn=%s stream=%p h=%p grid=%u", l->functionName, (void*)l->stream, (void*)l->hStream, l->gridDim_x);
        if (patches && dev_log) {
            in_tool = 1;
            if (id == SANITIZER_CBID_LAUNCH_BEGIN) {
                struct Log hdr = {0, CAP, (unsigned long long)dev_log + sizeof(struct Log)};
                printf(" h2d=%d", sanitizerMemcpyHostToDeviceAsync(dev_log, &hdr, sizeof hdr, l->hStream));
                printf(" setdata=%d", sanitizerSetLaunchCallbackData(l->hLaunch, l->function, l->hStream, dev_log));
            } else if (id == SANITIZER_CBID_LAUNCH_END) {
                printf(" sync=%d", sanitizerStreamSynchronize(l->hStream));
                struct Log hdr; static struct Entry e[CAP];
                printf(" d2h=%d", sanitizerMemcpyDeviceToHost(&hdr, dev_log, sizeof hdr, l->hStream));
                unsigned long long n = hdr.count < CAP ? hdr.count : CAP;
                sanitizerMemcpyDeviceToHost(e, (char*)dev_log + sizeof hdr, n * sizeof(struct Entry), l->hStream);
                printf(" entries=%llu", hdr.count);
                for (unsigned long long i = 0; i < n && i < 6; i++) printf(" [%#llx+%u k%u]", e[i].addr, e[i].len, e[i].kind);
            }
            in_tool = 0;
        }
    } else if (d == SANITIZER_CB_DOMAIN_MEMCPY) {
        const Sanitizer_MemcpyData* m = data;
        printf(" src=%#llx dst=%#llx size=%llu w=%llu h=%llu dir=%d async=%u srcS=%p dstS=%p apiS=%p", (unsigned long long)m->srcAddress, (unsigned long long)m->dstAddress,
               (unsigned long long)m->size, (unsigned long long)m->width, (unsigned long long)m->height, m->direction, m->isAsync, (void*)m->srcStream, (void*)m->dstStream, (void*)m->apiStream);
    } else if (d == SANITIZER_CB_DOMAIN_MEMSET) {
        const Sanitizer_MemsetData* m = data;
        printf(" addr=%#llx w=%llu h=%llu pitch=%llu es=%u async=%u stream=%p", (unsigned long long)m->address, (unsigned long long)m->width, (unsigned long long)m->height,
               (unsigned long long)m->pitch, m->elementSize, m->isAsync, (void*)m->stream);
    } else if (d == SANITIZER_CB_DOMAIN_EVENTS) {
        const Sanitizer_EventData* e = data; printf(" event=%p stream=%p h=%p", (void*)e->event, (void*)e->stream, (void*)e->hStream);
    } else if (d == SANITIZER_CB_DOMAIN_GRAPHS) {
        if (id == SANITIZER_CBID_GRAPHS_NODE_LAUNCH_BEGIN) {
            const Sanitizer_GraphNodeLaunchData* n = data; printf(" exec=%p node_type=%d launchId=%u", (void*)n->graphExec, n->nodeType, n->launchId);
            if (n->nodeType == CU_GRAPH_NODE_TYPE_KERNEL) printf(" fn=%s h=%p hLaunch=%p apiS=%p", n->launchData.functionName, (void*)n->launchData.hStream, (void*)n->launchData.hLaunch, (void*)n->launchData.apiStream);
        } else if (id == SANITIZER_CBID_GRAPHS_LAUNCH_BEGIN) {
            const Sanitizer_GraphLaunchData* g = data; printf(" exec=%p stream=%p", (void*)g->graphExec, (void*)g->stream);
        } else if (id <= SANITIZER_CBID_GRAPHS_GRAPHEXEC_DESTROYING) {
            const Sanitizer_GraphExecData* g = data; printf(" graph=%p exec=%p", (void*)g->graph, (void*)g->graphExec);
        }
    }
    printf("\n");
    fflush(stdout);
}

static int init(const char* how) {
    if (inited) return 1;
    inited = 1;
    patches = getenv("PROBE_PATCHES");
    SanitizerResult r = sanitizerSubscribe(&h, cb, NULL);
    printf("PROBE init via %s subscribe=%d tid=%ld\n", how, r, tid());
    if (r) return 0;
    sanitizerEnableAllDomains(1, h);
    if (!getenv("PROBE_API")) {
        sanitizerEnableDomain(0, h, SANITIZER_CB_DOMAIN_DRIVER_API);
        sanitizerEnableDomain(0, h, SANITIZER_CB_DOMAIN_RUNTIME_API);
    }
    return 1;
}

int InitializeInjection(void) { return init("InitializeInjection"); }
__attribute__((constructor)) static void ctor(void) { if (getenv("PROBE_CTOR")) init("constructor"); }
