/* Prints the layout of the Sanitizer API structs the tool reads (compare with
 * crates/streamsan-tool/src/sys.rs). Built on the GPU machine against the real headers. */
#include <stdio.h>
#include <stddef.h>
#include <sanitizer.h>
#define F(T, f) printf("%s.%s %zu\n", #T, #f, offsetof(T, f))
#define S(T) printf("%s size %zu\n", #T, sizeof(T))
int main(void) {
    S(Sanitizer_CallbackData); F(Sanitizer_CallbackData, functionParams); F(Sanitizer_CallbackData, functionReturnValue); F(Sanitizer_CallbackData, context);
    S(Sanitizer_ResourceContextData); F(Sanitizer_ResourceContextData, device);
    S(Sanitizer_ResourceStreamData); F(Sanitizer_ResourceStreamData, hStream);
    S(Sanitizer_ResourceModuleData); F(Sanitizer_ResourceModuleData, library);
    S(Sanitizer_ResourceMemoryData); F(Sanitizer_ResourceMemoryData, stream); F(Sanitizer_ResourceMemoryData, flags); F(Sanitizer_ResourceMemoryData, sourceDevice);
    S(Sanitizer_SynchronizeData);
    S(Sanitizer_LaunchData); F(Sanitizer_LaunchData, functionName); F(Sanitizer_LaunchData, gridId); F(Sanitizer_LaunchData, hLaunch); F(Sanitizer_LaunchData, device); F(Sanitizer_LaunchData, apiContext); F(Sanitizer_LaunchData, apiStream); F(Sanitizer_LaunchData, hApiStream);
    S(Sanitizer_MemcpyData); F(Sanitizer_MemcpyData, srcContext); F(Sanitizer_MemcpyData, dstContext); F(Sanitizer_MemcpyData, srcStream); F(Sanitizer_MemcpyData, srcAddress); F(Sanitizer_MemcpyData, size); F(Sanitizer_MemcpyData, width); F(Sanitizer_MemcpyData, srcPitch); F(Sanitizer_MemcpyData, isAsync); F(Sanitizer_MemcpyData, direction); F(Sanitizer_MemcpyData, apiStream);
    S(Sanitizer_MemsetData); F(Sanitizer_MemsetData, address); F(Sanitizer_MemsetData, width); F(Sanitizer_MemsetData, elementSize); F(Sanitizer_MemsetData, isAsync);
    S(Sanitizer_GraphExecData); S(Sanitizer_GraphNodeLaunchData); F(Sanitizer_GraphNodeLaunchData, nodeType); F(Sanitizer_GraphNodeLaunchData, launchData); F(Sanitizer_GraphNodeLaunchData, isGraphUpload);
    S(Sanitizer_GraphLaunchData); S(Sanitizer_EventData); F(Sanitizer_EventData, stream);
    printf("CU_GRAPH_NODE_TYPE_KERNEL %d MEMCPY %d MEMSET %d HOST %d EVENT_RECORD %d WAIT_EVENT %d MEM_ALLOC %d MEM_FREE %d\n",
           CU_GRAPH_NODE_TYPE_KERNEL, CU_GRAPH_NODE_TYPE_MEMCPY, CU_GRAPH_NODE_TYPE_MEMSET, CU_GRAPH_NODE_TYPE_HOST,
           CU_GRAPH_NODE_TYPE_EVENT_RECORD, CU_GRAPH_NODE_TYPE_WAIT_EVENT, CU_GRAPH_NODE_TYPE_MEM_ALLOC, CU_GRAPH_NODE_TYPE_MEM_FREE);
    printf("direction: H2H? see enum: %d %d %d %d %d\n", SANITIZER_MEMCPY_DIRECTION_UNKNOWN, SANITIZER_MEMCPY_DIRECTION_HOST_TO_HOST,
           SANITIZER_MEMCPY_DIRECTION_HOST_TO_DEVICE, SANITIZER_MEMCPY_DIRECTION_DEVICE_TO_HOST, SANITIZER_MEMCPY_DIRECTION_DEVICE_TO_DEVICE);
    return 0;
}
