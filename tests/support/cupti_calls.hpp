// One CUDA call as CUPTI's callback API hands it to the call recorder, for
// the tests that drive cupti/call_recorder.hpp without a GPU.
#pragma once

#include <cuprof/cupti/call_recorder.hpp>

#include <cstdint>
#include <cstring>

namespace cuprof_test {

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
