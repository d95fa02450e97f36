// libcupti and libcuda, loaded at run time: a program that includes cuprof
// links neither, and a machine without them (no driver, no GPU, a missing or
// older CUPTI) gets a CPU-only trace and one line saying why.
#pragma once

#include <cuda.h>
#include <cupti.h>
#include <dlfcn.h>
#include <link.h>

#include "../base/dynamic_library.hpp"
#include "../base/env.hpp"

#include <cstdlib>
#include <string>
#include <vector>

namespace cuprof::detail::cupti {

// The libcupti cuprof uses. Tracing and NVTX capture open it through this
// one function so that they reach the same instance: the same candidates in
// the same order give the same copy, and a copy the program already loaded
// (PyTorch's) is found by its soname first. Null with `error` set on failure.
inline void* open_cupti_library(std::string& error) {
  const char* forced = std::getenv("CUPROF_CUPTI_LIBRARY");  // when given, the only one tried
  if (void* lib = open_first(cupti_library_candidates(forced, std::getenv("CUDA_HOME"), std::getenv("CUDA_PATH")))) return lib;
  const char* why = ::dlerror();
  error = forced && *forced ? "CUPROF_CUPTI_LIBRARY=" + std::string(forced) + " could not be loaded (" + (why ? why : "?") + ")"
                            : "libcupti.so.13 could not be loaded (set CUPROF_CUPTI_LIBRARY to its path)";
  return nullptr;
}

// The CUPTI entry points cuprof uses, as X(member, symbol), bound in this order.
#define CUPROF_CUPTI_ENTRY_POINTS(X)                                     \
  X(get_version, cuptiGetVersion)                                        \
  X(get_result_string, cuptiGetResultString)                             \
  X(get_callback_name, cuptiGetCallbackName)                             \
  X(subscribe, cuptiSubscribe_v2)                                        \
  X(enable_callback, cuptiEnableCallback)                                \
  X(set_thread_id_type, cuptiSetThreadIdType)                            \
  X(register_timestamp_callback, cuptiActivityRegisterTimestampCallback) \
  X(register_callbacks, cuptiActivityRegisterCallbacks)                  \
  X(set_attribute, cuptiActivitySetAttribute)                            \
  X(enable, cuptiActivityEnable)                                         \
  X(disable, cuptiActivityDisable)                                       \
  X(flush_all, cuptiActivityFlushAll)                                    \
  X(get_next_record, cuptiActivityGetNextRecord)                         \
  X(get_num_dropped_records, cuptiActivityGetNumDroppedRecords)          \
  X(unsubscribe, cuptiUnsubscribe)                                       \
  X(finalize, cuptiFinalize)                                             \
  X(get_stream_id_ex, cuptiGetStreamIdEx)

struct cupti_library {
  CUPROF_ENTRY_POINTS(CUPROF_CUPTI_ENTRY_POINTS)
  std::string path;  // of the loaded library

  // Empty on success, otherwise why CUPTI cannot be used.
  std::string load() {
    std::string error;
    void* lib = open_cupti_library(error);
    if (!lib) return error;
    link_map* map = nullptr;
    if (::dlinfo(lib, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name) path = map->l_name;
    if (!bind_entry_points(lib)) {
      const char* why = ::dlerror();  // once: a second call returns null
      return "the loaded libcupti lacks CUPTI 13 entry points (" + std::string(why ? why : "?") + ")";
    }
    return {};
  }
};
#undef CUPROF_CUPTI_ENTRY_POINTS

// CUPTI's words for a result, through cuptiGetResultString where it is bound
// (cupti_library's, pm_library's); its number otherwise.
inline std::string result_string(decltype(&cuptiGetResultString) get_result_string, CUptiResult r) {
  const char* s = nullptr;
  if (get_result_string && get_result_string(r, &s) == CUPTI_SUCCESS && s) return s;
  return "CUPTI error " + std::to_string(int(r));
}

// The driver entry points cuprof uses, as X(member, symbol), bound in this
// order: device properties and a device sync that needs no CUDA runtime
// linked into the program.
#define CUPROF_DRIVER_ENTRY_POINTS(X)                  \
  X(init, cuInit)                                      \
  X(driver_get_version, cuDriverGetVersion)            \
  X(device_get_count, cuDeviceGetCount)                \
  X(device_get, cuDeviceGet)                           \
  X(device_get_name, cuDeviceGetName)                  \
  X(device_total_mem, cuDeviceTotalMem_v2)             \
  X(device_get_attribute, cuDeviceGetAttribute)        \
  X(primary_ctx_get_state, cuDevicePrimaryCtxGetState) \
  X(primary_ctx_retain, cuDevicePrimaryCtxRetain)      \
  X(primary_ctx_release, cuDevicePrimaryCtxRelease_v2) \
  X(ctx_push, cuCtxPushCurrent_v2)                     \
  X(ctx_pop, cuCtxPopCurrent_v2)                       \
  X(ctx_synchronize, cuCtxSynchronize)                 \
  X(get_error_name, cuGetErrorName)

struct driver_library {
  CUPROF_ENTRY_POINTS(CUPROF_DRIVER_ENTRY_POINTS)

  // `initialize`: call cuInit and report a missing device; not from inside
  // cuInit itself (the injection library is loaded there).
  std::string load(bool initialize) {
    void* lib = open_first({"libcuda.so.1", "libcuda.so"});
    if (!lib) return "no CUDA driver (libcuda.so.1 not found)";
    if (!bind_entry_points(lib)) return "the CUDA driver lacks expected entry points";
    if (!initialize) return {};
    const CUresult r = init(0);
    if (r != CUDA_SUCCESS) {
      const char* name = nullptr;
      get_error_name(r, &name);
      return std::string(r == CUDA_ERROR_NO_DEVICE ? "no CUDA device" : "the CUDA driver failed to initialise") +
             " (cuInit: " + (name ? name : std::to_string(int(r))) + ")";
    }
    return {};
  }
};
#undef CUPROF_DRIVER_ENTRY_POINTS

}  // namespace cuprof::detail::cupti
