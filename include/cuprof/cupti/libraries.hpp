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

// The CUPTI entry points cuprof uses.
struct cupti_library {
  decltype(&cuptiGetVersion) get_version = nullptr;
  decltype(&cuptiGetResultString) get_result_string = nullptr;
  decltype(&cuptiGetCallbackName) get_callback_name = nullptr;
  decltype(&cuptiSubscribe_v2) subscribe = nullptr;
  decltype(&cuptiEnableCallback) enable_callback = nullptr;
  decltype(&cuptiSetThreadIdType) set_thread_id_type = nullptr;
  decltype(&cuptiActivityRegisterTimestampCallback) register_timestamp_callback = nullptr;
  decltype(&cuptiActivityRegisterCallbacks) register_callbacks = nullptr;
  decltype(&cuptiActivitySetAttribute) set_attribute = nullptr;
  decltype(&cuptiActivityEnable) enable = nullptr;
  decltype(&cuptiActivityDisable) disable = nullptr;
  decltype(&cuptiActivityFlushAll) flush_all = nullptr;
  decltype(&cuptiActivityGetNextRecord) get_next_record = nullptr;
  decltype(&cuptiActivityGetNumDroppedRecords) get_num_dropped_records = nullptr;
  decltype(&cuptiUnsubscribe) unsubscribe = nullptr;
  decltype(&cuptiFinalize) finalize = nullptr;
  decltype(&cuptiGetStreamIdEx) get_stream_id_ex = nullptr;
  std::string path;  // of the loaded library

  // Empty on success, otherwise why CUPTI cannot be used.
  std::string load() {
    std::string error;
    void* lib = open_cupti_library(error);
    if (!lib) return error;
    link_map* map = nullptr;
    if (::dlinfo(lib, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name) path = map->l_name;
    const bool ok = bind(lib, get_version, "cuptiGetVersion") && bind(lib, get_result_string, "cuptiGetResultString") &&
                    bind(lib, get_callback_name, "cuptiGetCallbackName") && bind(lib, subscribe, "cuptiSubscribe_v2") &&
                    bind(lib, enable_callback, "cuptiEnableCallback") && bind(lib, set_thread_id_type, "cuptiSetThreadIdType") &&
                    bind(lib, register_timestamp_callback, "cuptiActivityRegisterTimestampCallback") &&
                    bind(lib, register_callbacks, "cuptiActivityRegisterCallbacks") &&
                    bind(lib, set_attribute, "cuptiActivitySetAttribute") && bind(lib, enable, "cuptiActivityEnable") &&
                    bind(lib, disable, "cuptiActivityDisable") && bind(lib, flush_all, "cuptiActivityFlushAll") &&
                    bind(lib, get_next_record, "cuptiActivityGetNextRecord") &&
                    bind(lib, get_num_dropped_records, "cuptiActivityGetNumDroppedRecords") &&
                    bind(lib, unsubscribe, "cuptiUnsubscribe") && bind(lib, finalize, "cuptiFinalize") &&
                    bind(lib, get_stream_id_ex, "cuptiGetStreamIdEx");
    if (!ok) {
      const char* why = ::dlerror();  // once: a second call returns null
      return "the loaded libcupti lacks CUPTI 13 entry points (" + std::string(why ? why : "?") + ")";
    }
    return {};
  }

  std::string result_string(CUptiResult r) const {
    const char* s = nullptr;
    if (get_result_string && get_result_string(r, &s) == CUPTI_SUCCESS && s) return s;
    return "CUPTI error " + std::to_string(int(r));
  }
};

// The driver entry points cuprof uses: device properties and a device sync
// that needs no CUDA runtime linked into the program.
struct driver_library {
  decltype(&cuInit) init = nullptr;
  decltype(&cuDriverGetVersion) driver_get_version = nullptr;
  decltype(&cuDeviceGetCount) device_get_count = nullptr;
  decltype(&cuDeviceGet) device_get = nullptr;
  decltype(&cuDeviceGetName) device_get_name = nullptr;
  decltype(&cuDeviceTotalMem_v2) device_total_mem = nullptr;
  decltype(&cuDeviceGetAttribute) device_get_attribute = nullptr;
  decltype(&cuDevicePrimaryCtxGetState) primary_ctx_get_state = nullptr;
  decltype(&cuDevicePrimaryCtxRetain) primary_ctx_retain = nullptr;
  decltype(&cuDevicePrimaryCtxRelease_v2) primary_ctx_release = nullptr;
  decltype(&cuCtxPushCurrent_v2) ctx_push = nullptr;
  decltype(&cuCtxPopCurrent_v2) ctx_pop = nullptr;
  decltype(&cuCtxSynchronize) ctx_synchronize = nullptr;
  decltype(&cuGetErrorName) get_error_name = nullptr;

  // `initialize`: call cuInit and report a missing device; not from inside
  // cuInit itself (the injection library is loaded there).
  std::string load(bool initialize) {
    void* lib = open_first({"libcuda.so.1", "libcuda.so"});
    if (!lib) return "no CUDA driver (libcuda.so.1 not found)";
    const bool ok = bind(lib, init, "cuInit") && bind(lib, driver_get_version, "cuDriverGetVersion") &&
                    bind(lib, device_get_count, "cuDeviceGetCount") && bind(lib, device_get, "cuDeviceGet") &&
                    bind(lib, device_get_name, "cuDeviceGetName") && bind(lib, device_total_mem, "cuDeviceTotalMem_v2") &&
                    bind(lib, device_get_attribute, "cuDeviceGetAttribute") &&
                    bind(lib, primary_ctx_get_state, "cuDevicePrimaryCtxGetState") &&
                    bind(lib, primary_ctx_retain, "cuDevicePrimaryCtxRetain") &&
                    bind(lib, primary_ctx_release, "cuDevicePrimaryCtxRelease_v2") &&
                    bind(lib, ctx_push, "cuCtxPushCurrent_v2") && bind(lib, ctx_pop, "cuCtxPopCurrent_v2") &&
                    bind(lib, ctx_synchronize, "cuCtxSynchronize") && bind(lib, get_error_name, "cuGetErrorName");
    if (!ok) return "the CUDA driver lacks expected entry points";
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

}  // namespace cuprof::detail::cupti
