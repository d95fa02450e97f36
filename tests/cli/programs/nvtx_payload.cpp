// A program that ends an NVTX range as NCCL 2.25 and later end a communicator's
// creation: a push in the domain "NCCL", then nvtxRangePopPayload with the
// creation's payload. NVTX looks up InitializeInjectionNvtxExtension in the
// library NVTX_INJECTION64_PATH names; under `cuprof run` that is cuprof's
// injection library (cli_run_nvtx_payload_extension). Needs no GPU.
#include <nvtx3/nvToolsExtPayload.h>

#include <cstdint>
#include <cstdio>

int main() {
  const nvtxDomainHandle_t nccl = nvtxDomainCreateA("NCCL");
  struct {
    std::uint64_t comm;
    int nranks, rank, cuda_dev;
  } creation{0x5eed, 2, 1, 0};
  const nvtxPayloadData_t payload{NVTX_PAYLOAD_SCHEMA_ID_STATIC_START + 11, sizeof creation, &creation};
  nvtxEventAttributes_t range{};
  range.version = NVTX_VERSION;
  range.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  range.messageType = NVTX_MESSAGE_TYPE_ASCII;
  range.message.ascii = "ncclCommInitRankConfig";
  nvtxDomainRangePushEx(nccl, &range);
  nvtxRangePopPayload(nccl, &payload, 1);
  std::puts("communicator created");
  return 0;
}
