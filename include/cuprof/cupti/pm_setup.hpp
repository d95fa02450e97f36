// What PM sampling needs before it samples (cupti_pmsampling.h and the
// profiler host API): the entry points, why a device refuses, and one
// device's set-up: its support checked, its metrics compiled into a
// single-pass configuration, its PM sampling object configured, and a blank
// counter data image sized. pm_sampler.hpp samples with what this sets up.
#pragma once

#include <cuda.h>
#include <cupti.h>
#include <cupti_pmsampling.h>
#include <cupti_profiler_host.h>
#include <cupti_profiler_target.h>
#include <cupti_target.h>

#include "../base/dynamic_library.hpp"
#include "../base/text.hpp"
#include "../model/gpu_metrics.hpp"
#include "libraries.hpp"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace cuprof::detail::cupti {

// What a profile asks for: the metrics (default_gpu_metrics() when empty) and
// the sampling period.
struct pm_sampling_request {
  std::vector<gpu_metric> metrics;
  std::uint64_t interval_ns = default_gpu_metrics_interval_ns;
};

// The PM sampling and host-evaluation entry points, from the same libcupti as
// tracing, as X(member, symbol), bound in this order. Each call's params are
// zeroed (pPriv must be null) and then given their structSize.
#define CUPROF_PM_ENTRY_POINTS(X)                                       \
  X(profiler_initialize, cuptiProfilerInitialize)                       \
  X(device_supported, cuptiProfilerDeviceSupported)                     \
  X(chip_name, cuptiDeviceGetChipName)                                  \
  X(counter_availability, cuptiPmSamplingGetCounterAvailability)        \
  X(host_initialize, cuptiProfilerHostInitialize)                       \
  X(host_deinitialize, cuptiProfilerHostDeinitialize)                   \
  X(host_add_metrics, cuptiProfilerHostConfigAddMetrics)                \
  X(host_config_size, cuptiProfilerHostGetConfigImageSize)              \
  X(host_config_image, cuptiProfilerHostGetConfigImage)                 \
  X(host_passes, cuptiProfilerHostGetNumOfPasses)                       \
  X(host_evaluate, cuptiProfilerHostEvaluateToGpuValues)                \
  X(enable, cuptiPmSamplingEnable)                                      \
  X(disable, cuptiPmSamplingDisable)                                    \
  X(set_config, cuptiPmSamplingSetConfig)                               \
  X(counter_data_size, cuptiPmSamplingGetCounterDataSize)               \
  X(counter_data_initialize, cuptiPmSamplingCounterDataImageInitialize) \
  X(start, cuptiPmSamplingStart)                                        \
  X(stop, cuptiPmSamplingStop)                                          \
  X(decode, cuptiPmSamplingDecodeData)                                  \
  X(counter_data_info, cuptiPmSamplingGetCounterDataInfo)               \
  X(sample_info, cuptiPmSamplingCounterDataGetSampleInfo)               \
  X(get_result_string, cuptiGetResultString)

struct pm_library {
  CUPROF_ENTRY_POINTS(CUPROF_PM_ENTRY_POINTS)

  std::string load() {
    std::string error;
    void* lib = open_cupti_library(error);
    if (!lib) return error;
    if (!bind_entry_points(lib)) return "the loaded libcupti has no PM sampling API (CUPTI 12.6 or later has it)";
    return {};
  }
};
#undef CUPROF_PM_ENTRY_POINTS

// Why a device cannot be sampled, in the user's terms, from the call that failed.
inline std::string pm_refusal(const pm_library& pm, const char* call, CUptiResult r) {
  switch (r) {
    case CUPTI_ERROR_INSUFFICIENT_PRIVILEGES:
      return "the driver allows GPU performance counters to administrators only (RmProfilingAdminOnly=1; see "
             "NVIDIA's ERR_NVGPUCTRPERM page)";
    case CUPTI_ERROR_NOT_SUPPORTED:
    case CUPTI_ERROR_NOT_COMPATIBLE:
      return std::string("this GPU or configuration does not support PM sampling (") + call + ": " +
             result_string(pm.get_result_string, r) + ")";
    case CUPTI_ERROR_INVALID_OPERATION:
    case CUPTI_ERROR_HARDWARE_BUSY:  // a second process sampling the same GPU gets this (H200)
    case CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED:
      return std::string("another tool is using the GPU's performance counters (") + call + ": " +
             result_string(pm.get_result_string, r) + ")";
    default: return std::string(call) + ": " + result_string(pm.get_result_string, r);
  }
}

// How much a device's buffers hold (pm_sampler's sizing, said there).
struct pm_buffer_sizes {
  std::size_t hardware_buffer_bytes;
  int image_ms, room_ms;  // an image holds image_ms of samples; handed off with less than room_ms of room
  std::size_t max_image_bytes;
};

// One device, set up for sampling.
struct pm_device_setup {
  CUpti_Profiler_Host_Object* host = nullptr;  // for evaluating its samples
  CUpti_PmSampling_Object* object = nullptr;
  std::vector<std::uint8_t> config;       // the metrics' configuration image
  std::vector<std::uint8_t> blank_image;  // an initialized counter data image
  std::size_t image_capacity = 0;         // samples an image holds
  std::size_t handoff_at = 0;             // samples in an image that leave it room_ms of room
};

// Sets up device `index` (`dev`, its context current on this thread) to
// sample `request`; empty on success, else why it cannot, in the user's
// terms. What was made before a failure stays in `out` (CUPTI keeps it
// until the process ends).
inline std::string set_up_pm_device(const pm_library& pm, std::uint32_t index, CUdevice dev, const pm_sampling_request& request,
                                    const pm_buffer_sizes& sizes, pm_device_setup& out) {
  CUpti_Profiler_DeviceSupported_Params sup{};
  sup.structSize = CUpti_Profiler_DeviceSupported_Params_STRUCT_SIZE;
  sup.cuDevice = dev;
  sup.api = CUPTI_PROFILER_PM_SAMPLING;
  CUptiResult r = pm.device_supported(&sup);
  if (r != CUPTI_SUCCESS) return pm_refusal(pm, "cuptiProfilerDeviceSupported", r);
  if (sup.isSupported != CUPTI_PROFILER_CONFIGURATION_SUPPORTED) {
    return sup.vGpu != CUPTI_PROFILER_CONFIGURATION_SUPPORTED                  ? "PM sampling is not supported on a virtual GPU"
           : sup.confidentialCompute != CUPTI_PROFILER_CONFIGURATION_SUPPORTED ? "PM sampling is off in confidential computing"
           : sup.architecture != CUPTI_PROFILER_CONFIGURATION_SUPPORTED
               ? "this GPU's architecture has no PM sampling (it needs Turing or later, a time-based interval Ampere "
                 "GA10x or later)"
               : "PM sampling is not supported in this configuration (MIG, SLI or WSL)";
  }
  CUpti_Device_GetChipName_Params chip{};
  chip.structSize = CUpti_Device_GetChipName_Params_STRUCT_SIZE;
  chip.deviceIndex = index;
  if ((r = pm.chip_name(&chip)) != CUPTI_SUCCESS) return pm_refusal(pm, "cuptiDeviceGetChipName", r);
  CUpti_PmSampling_GetCounterAvailability_Params av{};
  av.structSize = CUpti_PmSampling_GetCounterAvailability_Params_STRUCT_SIZE;
  av.deviceIndex = index;
  if ((r = pm.counter_availability(&av)) != CUPTI_SUCCESS) return pm_refusal(pm, "cuptiPmSamplingGetCounterAvailability", r);
  std::vector<std::uint8_t> availability(av.counterAvailabilityImageSize);
  av.pCounterAvailabilityImage = availability.data();
  if ((r = pm.counter_availability(&av)) != CUPTI_SUCCESS) return pm_refusal(pm, "cuptiPmSamplingGetCounterAvailability", r);

  CUpti_Profiler_Host_Initialize_Params hi{};
  hi.structSize = CUpti_Profiler_Host_Initialize_Params_STRUCT_SIZE;
  hi.profilerType = CUPTI_PROFILER_TYPE_PM_SAMPLING;
  hi.pChipName = chip.pChipName;
  hi.pCounterAvailabilityImage = availability.data();
  if ((r = pm.host_initialize(&hi)) != CUPTI_SUCCESS) return pm_refusal(pm, "cuptiProfilerHostInitialize", r);
  out.host = hi.pHostObject;
  std::vector<const char*> names;
  for (const gpu_metric& m : request.metrics) names.push_back(m.name.c_str());
  CUpti_Profiler_Host_ConfigAddMetrics_Params add{};
  add.structSize = CUpti_Profiler_Host_ConfigAddMetrics_Params_STRUCT_SIZE;
  add.pHostObject = out.host;
  add.ppMetricNames = names.data();
  add.numMetrics = names.size();
  if ((r = pm.host_add_metrics(&add)) != CUPTI_SUCCESS) {
    std::string listed;
    for (const gpu_metric& m : request.metrics) listed += (listed.empty() ? "" : ", ") + terminal_safe(m.name);
    return "CUPTI does not know one of " + listed + " on " + std::string(chip.pChipName ? chip.pChipName : "this GPU") + " (" +
           result_string(pm.get_result_string, r) + "); `ncu --query-metrics-collection pmsampling --chip " +
           std::string(chip.pChipName ? chip.pChipName : "NAME") + "` lists those it knows";
  }
  CUpti_Profiler_Host_GetConfigImageSize_Params cs{};
  cs.structSize = CUpti_Profiler_Host_GetConfigImageSize_Params_STRUCT_SIZE;
  cs.pHostObject = out.host;
  if ((r = pm.host_config_size(&cs)) != CUPTI_SUCCESS) return pm_refusal(pm, "cuptiProfilerHostGetConfigImageSize", r);
  out.config.resize(cs.configImageSize);
  CUpti_Profiler_Host_GetConfigImage_Params ci{};
  ci.structSize = CUpti_Profiler_Host_GetConfigImage_Params_STRUCT_SIZE;
  ci.pHostObject = out.host;
  ci.pConfigImage = out.config.data();
  ci.configImageSize = out.config.size();
  if ((r = pm.host_config_image(&ci)) != CUPTI_SUCCESS) return pm_refusal(pm, "cuptiProfilerHostGetConfigImage", r);
  CUpti_Profiler_Host_GetNumOfPasses_Params np{};
  np.structSize = CUpti_Profiler_Host_GetNumOfPasses_Params_STRUCT_SIZE;
  np.pConfigImage = out.config.data();
  np.configImageSize = out.config.size();
  if ((r = pm.host_passes(&np)) != CUPTI_SUCCESS) return pm_refusal(pm, "cuptiProfilerHostGetNumOfPasses", r);
  if (np.numOfPasses != 1) {
    return "these metrics need " + std::to_string(np.numOfPasses) +
           " passes on this GPU; PM sampling reads one pass (name fewer, or their TriageCompute forms)";
  }

  CUpti_PmSampling_Enable_Params en{};
  en.structSize = CUpti_PmSampling_Enable_Params_STRUCT_SIZE;
  en.deviceIndex = index;
  if ((r = pm.enable(&en)) != CUPTI_SUCCESS) return pm_refusal(pm, "cuptiPmSamplingEnable", r);
  out.object = en.pPmSamplingObject;
  CUpti_PmSampling_SetConfig_Params sc{};
  sc.structSize = CUpti_PmSampling_SetConfig_Params_STRUCT_SIZE;
  sc.pPmSamplingObject = out.object;
  sc.configSize = out.config.size();
  sc.pConfig = out.config.data();
  sc.hardwareBufferSize = sizes.hardware_buffer_bytes;
  sc.samplingInterval = request.interval_ns;
  sc.triggerMode = CUPTI_PM_SAMPLING_TRIGGER_MODE_GPU_TIME_INTERVAL;
  sc.hwBufferAppendMode = CUPTI_PM_SAMPLING_HARDWARE_BUFFER_APPEND_MODE_KEEP_OLDEST;  // an overflow is reported, not hidden
  if ((r = pm.set_config(&sc)) != CUPTI_SUCCESS) return pm_refusal(pm, "cuptiPmSamplingSetConfig", r);

  // An image: room for image_ms of samples and some, within sizes.max_image_bytes.
  CUpti_PmSampling_GetCounterDataSize_Params ds{};
  ds.structSize = CUpti_PmSampling_GetCounterDataSize_Params_STRUCT_SIZE;
  ds.pPmSamplingObject = out.object;
  ds.pMetricNames = names.data();
  ds.numMetrics = names.size();
  ds.maxSamples = 1;
  if ((r = pm.counter_data_size(&ds)) != CUPTI_SUCCESS) return pm_refusal(pm, "cuptiPmSamplingGetCounterDataSize", r);
  const std::size_t one = ds.counterDataSize;
  ds.maxSamples = 2;
  if ((r = pm.counter_data_size(&ds)) != CUPTI_SUCCESS) return pm_refusal(pm, "cuptiPmSamplingGetCounterDataSize", r);
  const std::size_t per_sample = ds.counterDataSize > one ? ds.counterDataSize - one : one;
  const std::uint64_t wanted = std::uint64_t(sizes.image_ms) * 1000000u / request.interval_ns + 16;
  const std::uint64_t fits = sizes.max_image_bytes > one ? (sizes.max_image_bytes - one) / per_sample + 1 : 1;
  ds.maxSamples = std::uint32_t(std::max<std::uint64_t>(16, std::min(wanted, fits)));
  if ((r = pm.counter_data_size(&ds)) != CUPTI_SUCCESS) return pm_refusal(pm, "cuptiPmSamplingGetCounterDataSize", r);
  out.image_capacity = ds.maxSamples;
  const std::uint64_t room = std::uint64_t(sizes.room_ms) * 1000000u / request.interval_ns;
  out.handoff_at = out.image_capacity > 2 * room ? out.image_capacity - room : out.image_capacity / 2;
  out.blank_image.assign(ds.counterDataSize, 0);
  CUpti_PmSampling_CounterDataImage_Initialize_Params ii{};
  ii.structSize = CUpti_PmSampling_CounterDataImage_Initialize_Params_STRUCT_SIZE;
  ii.pPmSamplingObject = out.object;
  ii.counterDataSize = out.blank_image.size();
  ii.pCounterData = out.blank_image.data();
  if ((r = pm.counter_data_initialize(&ii)) != CUPTI_SUCCESS)
    return pm_refusal(pm, "cuptiPmSamplingCounterDataImageInitialize", r);
  return {};
}

}  // namespace cuprof::detail::cupti
