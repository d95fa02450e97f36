// One CUDA call as CUPTI's callback API hands it to the call recorder, for
// the tests that drive cupti/call_recorder.hpp without a GPU.
#pragma once

#include <cuprof/cupti/call_recorder.hpp>

#include <cstdint>
#include <cstring>

namespace cuprof_test {

// An NVTX range event as the runtime's hook (process_state::on_nvtx_range) gets it.
inline cuprof::detail::nvtx_range_event nvtx_event(cuprof::detail::nvtx_range_event::kind_t kind, const char* message,
                                                   std::uintptr_t domain = 0, std::uint64_t id = 0) {
  cuprof::detail::nvtx_range_event e;
  e.kind = kind;
  e.message = message;
  e.length = message ? std::strlen(message) : 0;
  e.domain = domain;
  e.id = id;
  return e;
}

// One CUDA call as CUPTI's callback API reports it: entry, what the call
// does inside (a nested driver call), exit with its result.
template <class Inside>
void traced_call(cuprof::detail::cupti::call_recorder& r, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                 std::uint32_t correlation, std::int32_t result, Inside&& inside, const void* params = nullptr,
                 std::uint32_t context_uid = 0) {
  std::uint64_t per_call = 0;  // CUPTI's correlationData: one slot per call, entry to exit
  CUpti_CallbackData d;
  std::memset(static_cast<void*>(&d), 0, sizeof d);
  d.correlationData = &per_call;
  d.correlationId = correlation;
  d.functionReturnValue = &result;
  d.functionParams = params;
  d.contextUid = context_uid;
  d.callbackSite = CUPTI_API_ENTER;
  r.on_call(domain, cbid, d);
  inside();
  d.callbackSite = CUPTI_API_EXIT;
  r.on_call(domain, cbid, d);
}
inline void traced_call(cuprof::detail::cupti::call_recorder& r, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                        std::uint32_t correlation, std::int32_t result = 0) {
  traced_call(r, domain, cbid, correlation, result, [] {});
}

}  // namespace cuprof_test
