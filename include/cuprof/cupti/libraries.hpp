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
#include "../model/event.hpp"  // device_info

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

  // What the driver says of each device, for the trace's metadata.
  std::vector<device_info> read_devices() const {
    std::vector<device_info> devices;
    int count = 0;
    if (device_get_count(&count) != CUDA_SUCCESS) return devices;
    for (int i = 0; i < count; ++i) {
      CUdevice dev;
      if (device_get(&dev, i) != CUDA_SUCCESS) continue;
      device_info d;
      d.id = i;
      char name[256] = {0};
      device_get_name(name, sizeof name - 1, dev);
      d.name = name;
      size_t mem = 0;
      device_total_mem(&mem, dev);
      d.total_global_mem = mem;
      const auto attr = [&](CUdevice_attribute a) {
        int v = 0;
        device_get_attribute(&v, a, dev);
        return v;
      };
      d.compute_major = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
      d.compute_minor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
      d.max_threads_per_block = attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
      d.max_threads_per_multiprocessor = attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR);
      d.regs_per_block = attr(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK);
      d.regs_per_multiprocessor = attr(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR);
      d.warp_size = attr(CU_DEVICE_ATTRIBUTE_WARP_SIZE);
      d.num_sms = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
      d.shared_mem_per_block = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
      d.shared_mem_per_block_optin = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
      d.shared_mem_per_multiprocessor = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR);
      d.max_blocks_per_multiprocessor = attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR);
      d.clock_rate_khz = attr(CU_DEVICE_ATTRIBUTE_CLOCK_RATE);
      d.memory_clock_rate_khz = attr(CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE);
      d.memory_bus_width = attr(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH);
      devices.push_back(d);
    }
    return devices;
  }

  // Waits for the GPU work of every device whose primary context is active,
  // without making one active.
  void sync_active_devices() const {
    int count = 0;
    if (device_get_count(&count) != CUDA_SUCCESS) return;
    for (int i = 0; i < count; ++i) {
      CUdevice dev;
      unsigned flags = 0;
      int active = 0;
      if (device_get(&dev, i) != CUDA_SUCCESS) continue;
      if (primary_ctx_get_state(dev, &flags, &active) != CUDA_SUCCESS || !active) continue;
      CUcontext ctx = nullptr, popped = nullptr;
      if (primary_ctx_retain(&ctx, dev) != CUDA_SUCCESS) continue;
      if (ctx_push(ctx) == CUDA_SUCCESS) {
        ctx_synchronize();
        ctx_pop(&popped);
      }
      primary_ctx_release(dev);
    }
  }
};
#undef CUPROF_DRIVER_ENTRY_POINTS

}  // namespace cuprof::detail::cupti
