// pm_sampling_probe: a standalone CUPTI PM sampling probe (CUDA 13.0 API:
// cupti_pmsampling.h + cupti_profiler_host.h), the first step towards GPU
// hardware metrics in cuprof. Not part of the library and not part of the
// CPU test suite: it links libcupti directly.
//
// What it does, in order:
//   1. checks that PM sampling can run on the device (CUDA context,
//      cuptiProfilerInitialize, cuptiProfilerDeviceSupported for the PM
//      sampling API, chip name, counter availability, cuptiPmSamplingEnable)
//      and, when it can't, prints the failing call with its CUPTI result
//      string and exits 2;
//   2. picks the metrics: each wanted metric has a list of candidate names,
//      the first that the host object accepts and that keeps the whole config
//      in ONE pass (PM sampling only takes single-pass configs) is kept;
//      dropped names are printed with the reason;
//   3. samples (GPU time interval trigger) while it runs three workloads
//      (WMMA tensor-core GEMM 4096^3, GELU over 256 Mi floats, float4 copy of
//      1 GiB), each repetition in its own span (cudaDeviceSynchronize + 2 ms
//      host sleep between), recording per repetition CUDA events, the GPU's
//      %globaltimer (a one-thread marker kernel before and after), CUPTI's
//      cuptiGetTimestamp() and host clocks;
//   4. stops, decodes into counter data images (several if one fills up),
//      reads each sample's start/end timestamps and evaluates each metric;
//   5. writes pm_samples.json, pm_kernels.json, pm_meta.json, the raw
//      pm_config.bin / pm_counter_data*.bin / pm_counter_availability.bin,
//      pm_metrics_available.txt, and prints a summary table.
//
// Modes without a GPU (for CPU tests):
//   --host-only --chip GH100   metric listing + selection + config image only
//   --decode DIR               re-evaluate a recorded DIR (pm_meta.json and the
//                              .bin files) with the host API only
//
// Build (standalone):
//   nvcc -O2 -std=c++17 -arch=sm_90 tests/gpu/pm_sampling_probe.cu -o /tmp/pm_probe \
//     -I/usr/local/cuda/include -L/usr/local/cuda/lib64 -lcupti -lnvperf_host \
//     -lnvperf_target -Xlinker -rpath,/usr/local/cuda/lib64
// Run:
//   /tmp/pm_probe --out pm_out [--interval-us 20] [--reps 5] [--hw-buffer-mb 256]
//                 [--max-samples 20000] [--device 0] [--metrics a,b,c]
//   /tmp/pm_probe --workloads-only [--reps 1]     (for ncu; see the printed line)
//
// Exit codes: 0 ok, 2 PM sampling unsupported/unavailable here (one line says
// which call and why), 1 any other failure.

#include <cuda.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cupti.h>
#include <cupti_pmsampling.h>
#include <cupti_profiler_host.h>
#include <cupti_profiler_target.h>
#include <cupti_target.h>
#include <mma.h>

#include <sys/stat.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

// --------------------------------------------------------------- utilities

const char* cupti_str(CUptiResult r) {
  const char* s = nullptr;
  if (cuptiGetResultString(r, &s) != CUPTI_SUCCESS || s == nullptr) return "CUPTI_ERROR_<unknown>";
  return s;
}

[[noreturn]] void unsupported(const char* call, const std::string& why) {
  std::printf("PM_SAMPLING_UNSUPPORTED: %s: %s\n", call, why.c_str());
  std::fflush(stdout);
  std::exit(2);
}

[[noreturn]] void fail(const char* call, const std::string& why) {
  std::fprintf(stderr, "pm_sampling_probe: %s failed: %s\n", call, why.c_str());
  std::exit(1);
}

// A CUPTI call during setup: unsupported (exit 2) when it fails.
#define SETUP_CUPTI(call)                                       \
  do {                                                          \
    CUptiResult r_ = (call);                                    \
    if (r_ != CUPTI_SUCCESS) unsupported(#call, cupti_str(r_)); \
  } while (0)
// A CUPTI call after setup: a plain failure (exit 1).
#define CHECK_CUPTI(call)                                \
  do {                                                   \
    CUptiResult r_ = (call);                             \
    if (r_ != CUPTI_SUCCESS) fail(#call, cupti_str(r_)); \
  } while (0)
#define CHECK_CUDA(call)                                                                                   \
  do {                                                                                                     \
    cudaError_t e_ = (call);                                                                               \
    if (e_ != cudaSuccess) fail(#call, cudaGetErrorName(e_) + std::string(": ") + cudaGetErrorString(e_)); \
  } while (0)

uint64_t cupti_now() {
  uint64_t t = 0;
  cuptiGetTimestamp(&t);
  return t;
}
uint64_t clock_ns(clockid_t id) {
  timespec ts{};
  clock_gettime(id, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

std::string json_str(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      o += '\\';
      o += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", c);
      o += b;
    } else o += c;
  }
  return o + "\"";
}
std::string json_num(double v) {
  if (!std::isfinite(v)) return "null";
  char b[64];
  std::snprintf(b, sizeof b, "%.17g", v);
  return b;
}

bool write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  return bool(f);
}
bool read_bytes(const std::string& path, std::vector<uint8_t>& bytes) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  bytes.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  return true;
}
bool read_text(const std::string& path, std::string& text) {
  std::ifstream f(path);
  if (!f) return false;
  std::stringstream ss;
  ss << f.rdbuf();
  text = ss.str();
  return true;
}

// ---------------------------------------------------------------- options

struct Options {
  std::string out = "pm_out";
  double interval_us = 20.0;
  int reps = 5;
  size_t hw_buffer_mb = 256;
  uint32_t max_samples = 20000;  // per counter data image (more images if it fills)
  int device = 0;
  bool workloads_only = false;
  bool host_only = false;
  std::string chip;                  // --chip, for --host-only
  std::string decode_dir;            // --decode
  std::vector<std::string> metrics;  // --metrics overrides the candidate lists
  bool sysclk = false;               // --sysclk: interval in SYS clock cycles, not ns
  int decode_every_ms = 0;           // --decode-every-ms: decode while the workloads run
  bool reuse_image = false;          // --reuse-image: decode into one image until it is full
};

// Where the decoding thread's time goes (--decode-every-ms), in ns of wall
// time on that thread: CUPTI's decode, the image's initialization, the
// samples' info and their evaluation.
struct DecodeCost {
  uint64_t decode = 0, init = 0, info = 0, evaluate = 0, samples = 0, calls = 0;
};
DecodeCost g_cost;
uint64_t steady_ns() {
  return uint64_t(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> v;
  std::string cur;
  for (char c : s) {
    if (c == ',') {
      if (!cur.empty()) v.push_back(cur);
      cur.clear();
    } else cur += c;
  }
  if (!cur.empty()) v.push_back(cur);
  return v;
}

void usage() {
  std::printf(
      "usage: pm_sampling_probe [--out DIR] [--interval-us N] [--reps N] [--hw-buffer-mb N]\n"
      "                         [--max-samples N] [--device N] [--metrics a,b,c] [--sysclk] [--decode-every-ms N] "
      "[--reuse-image]\n"
      "       pm_sampling_probe --workloads-only [--reps N]\n"
      "       pm_sampling_probe --host-only --chip GH100 [--out DIR] [--metrics a,b,c]\n"
      "       pm_sampling_probe --decode DIR\n");
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        usage();
        std::exit(1);
      }
      return argv[++i];
    };
    if (a == "--out") o.out = next();
    else if (a == "--interval-us") o.interval_us = std::atof(next().c_str());
    else if (a == "--reps") o.reps = std::max(1, std::atoi(next().c_str()));
    else if (a == "--hw-buffer-mb") o.hw_buffer_mb = size_t(std::max(1, std::atoi(next().c_str())));
    else if (a == "--max-samples") o.max_samples = uint32_t(std::max(16, std::atoi(next().c_str())));
    else if (a == "--device") o.device = std::atoi(next().c_str());
    else if (a == "--metrics") o.metrics = split_commas(next());
    else if (a == "--workloads-only") o.workloads_only = true;
    else if (a == "--host-only") o.host_only = true;
    else if (a == "--chip") o.chip = next();
    else if (a == "--decode") o.decode_dir = next();
    else if (a == "--sysclk") o.sysclk = true;
    else if (a == "--decode-every-ms") o.decode_every_ms = std::max(1, std::atoi(next().c_str()));
    else if (a == "--reuse-image") o.reuse_image = true;
    else if (a == "-h" || a == "--help") {
      usage();
      std::exit(0);
    } else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      usage();
      std::exit(1);
    }
  }
  if (!(o.interval_us > 0)) {
    std::fprintf(stderr, "--interval-us must be > 0\n");
    std::exit(1);
  }
  return o;
}

// ---------------------------------------------------------------- workloads

constexpr int kGemmN = 4096;                  // M = N = K
constexpr size_t kElems = size_t(256) << 20;  // 256 Mi floats = 1 GiB

// Writes the GPU's global nanosecond timer (the clock CUPTI activity records
// and, presumably, PM samples use) so spans can be matched in that domain.
__global__ void pm_mark(unsigned long long* out) {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  *out = t;
}

// C = A * B, A row-major MxK, B row-major KxN, half inputs, float accumulate.
// 4 warps per block in 2x2, each warp a 32x32 tile (2x2 WMMA 16x16x16
// fragments), operands straight from global memory (L1/L2 serve the reuse):
// simple, tensor pipe busy, no shared memory staging.
__global__ void __launch_bounds__(128) pm_wmma_gemm(const half* A, const half* B, float* C, int n) {
  using namespace nvcuda;
  const int warp = threadIdx.x / 32;
  const int row0 = blockIdx.y * 64 + (warp / 2) * 32;
  const int col0 = blockIdx.x * 64 + (warp % 2) * 32;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);
  wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> a[2];
  wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::row_major> b[2];
  for (int k = 0; k < n; k += 16) {
    for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(a[i], A + size_t(row0 + 16 * i) * n + k, n);
    for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(b[j], B + size_t(k) * n + col0 + 16 * j, n);
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
  }
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j)
      wmma::store_matrix_sync(C + size_t(row0 + 16 * i) * n + col0 + 16 * j, acc[i][j], n, wmma::mem_row_major);
}

__global__ void pm_gelu(const float* __restrict__ x, float* __restrict__ y, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    float v = x[i];
    y[i] = 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)));
  }
}

__global__ void pm_copy_f4(const float4* __restrict__ src, float4* __restrict__ dst, size_t n4) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n4; i += size_t(gridDim.x) * blockDim.x) dst[i] = src[i];
}

__global__ void pm_fill_half(half* p, size_t n, float scale) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    p[i] = __float2half(scale * float(int(i % 17) - 8));
}
__global__ void pm_fill_float(float* p, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    p[i] = float(int(i % 1000) - 500) * 0.01f;
}

struct Buffers {
  half* a = nullptr;
  half* b = nullptr;
  float* c = nullptr;
  float* x = nullptr;
  float* y = nullptr;
  unsigned long long* marks = nullptr;  // 2 per span
  int grid = 0;                         // grid-stride grid size
};

struct Span {
  std::string name;
  int rep = 0;
  float event_ms = 0;                       // CUDA events around the kernel
  uint64_t gpu_start = 0, gpu_end = 0;      // %globaltimer before/after (marker kernels)
  uint64_t cupti_start = 0, cupti_end = 0;  // cuptiGetTimestamp before launch / after sync
  uint64_t mono_start = 0, mono_end = 0;    // CLOCK_MONOTONIC_RAW, same points
  uint64_t real_start = 0, real_end = 0;    // CLOCK_REALTIME, same points
};

const char* kWorkloads[] = {"wmma_gemm_4096", "gelu_256Mi", "copy_f4_1GiB"};
const char* kKernelRegex = "regex:pm_(wmma_gemm|gelu|copy_f4)";

void alloc_buffers(Buffers& b, int max_spans) {
  const size_t nn = size_t(kGemmN) * kGemmN;
  CHECK_CUDA(cudaMalloc(&b.a, nn * sizeof(half)));
  CHECK_CUDA(cudaMalloc(&b.b, nn * sizeof(half)));
  CHECK_CUDA(cudaMalloc(&b.c, nn * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&b.x, kElems * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&b.y, kElems * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&b.marks, size_t(max_spans) * 2 * sizeof(unsigned long long)));
  int sms = 0;
  CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  b.grid = std::max(1, sms) * 16;
  pm_fill_half<<<b.grid, 256>>>(b.a, nn, 1.0f / 64);
  pm_fill_half<<<b.grid, 256>>>(b.b, nn, 1.0f / 64);
  pm_fill_float<<<b.grid, 256>>>(b.x, kElems);
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaDeviceSynchronize());
}

void launch_workload(int w, const Buffers& b) {
  switch (w) {
    case 0: pm_wmma_gemm<<<dim3(kGemmN / 64, kGemmN / 64), 128>>>(b.a, b.b, b.c, kGemmN); break;
    case 1: pm_gelu<<<b.grid, 256>>>(b.x, b.y, kElems); break;
    case 2: pm_copy_f4<<<b.grid, 256>>>(reinterpret_cast<const float4*>(b.x), reinterpret_cast<float4*>(b.y), kElems / 4); break;
  }
}

// Runs every workload `reps` times, each in its own span, with a sync and a
// 2 ms sleep between spans so samples separate.
std::vector<Span> run_workloads(const Buffers& b, int reps) {
  std::vector<Span> spans;
  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));
  int slot = 0;
  for (int w = 0; w < 3; ++w) {
    for (int r = 0; r < reps; ++r, ++slot) {
      Span s;
      s.name = kWorkloads[w];
      s.rep = r;
      CHECK_CUDA(cudaDeviceSynchronize());
      s.mono_start = clock_ns(CLOCK_MONOTONIC_RAW);
      s.real_start = clock_ns(CLOCK_REALTIME);
      s.cupti_start = cupti_now();
      pm_mark<<<1, 1>>>(b.marks + 2 * slot);
      CHECK_CUDA(cudaEventRecord(e0));
      launch_workload(w, b);
      CHECK_CUDA(cudaEventRecord(e1));
      pm_mark<<<1, 1>>>(b.marks + 2 * slot + 1);
      CHECK_CUDA(cudaGetLastError());
      CHECK_CUDA(cudaDeviceSynchronize());
      s.cupti_end = cupti_now();
      s.mono_end = clock_ns(CLOCK_MONOTONIC_RAW);
      s.real_end = clock_ns(CLOCK_REALTIME);
      CHECK_CUDA(cudaEventElapsedTime(&s.event_ms, e0, e1));
      spans.push_back(s);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  std::vector<unsigned long long> marks(size_t(slot) * 2);
  CHECK_CUDA(cudaMemcpy(marks.data(), b.marks, marks.size() * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < spans.size(); ++i) {
    spans[i].gpu_start = marks[2 * i];
    spans[i].gpu_end = marks[2 * i + 1];
  }
  CHECK_CUDA(cudaEventDestroy(e0));
  CHECK_CUDA(cudaEventDestroy(e1));
  // %globaltimer against CLOCK_REALTIME: the marker kernel runs after the host
  // read, so start differences are (offset + launch latency), end differences
  // (offset - sync return latency); their midpoint estimates the offset.
  for (auto& s : spans)
    std::printf("CLOCKS %s: gpu-real start %+.1f us, end %+.1f us\n", s.name.c_str(),
                (double(int64_t(s.gpu_start - s.real_start))) / 1000.0, (double(int64_t(s.gpu_end - s.real_end))) / 1000.0);
  return spans;
}

// ------------------------------------------------------- host object, metrics

struct Host {
  CUpti_Profiler_Host_Object* obj = nullptr;
  std::string chip;
  std::vector<uint8_t> availability;
};

CUptiResult host_init(Host& h) {
  CUpti_Profiler_Host_Initialize_Params p{CUpti_Profiler_Host_Initialize_Params_STRUCT_SIZE};
  p.pPriv = nullptr;
  p.profilerType = CUPTI_PROFILER_TYPE_PM_SAMPLING;
  p.pChipName = h.chip.c_str();
  p.pCounterAvailabilityImage = h.availability.empty() ? nullptr : h.availability.data();
  CUptiResult r = cuptiProfilerHostInitialize(&p);
  h.obj = p.pHostObject;
  return r;
}
void host_deinit(Host& h) {
  if (!h.obj) return;
  CUpti_Profiler_Host_Deinitialize_Params p{CUpti_Profiler_Host_Deinitialize_Params_STRUCT_SIZE};
  p.pHostObject = h.obj;
  cuptiProfilerHostDeinitialize(&p);
  h.obj = nullptr;
}

// Builds a config image for `metrics` on a fresh host object (the host object
// accumulates metrics, so each trial gets its own). Returns the CUPTI result
// of the first failing step (and which step), the image and its pass count.
struct ConfigTry {
  CUptiResult result = CUPTI_SUCCESS;
  const char* step = "";
  std::vector<uint8_t> image;
  size_t passes = 0;
};
ConfigTry try_config(const Host& base, const std::vector<std::string>& metrics) {
  ConfigTry t;
  Host h;
  h.chip = base.chip;
  h.availability = base.availability;
  if ((t.result = host_init(h)) != CUPTI_SUCCESS) {
    t.step = "cuptiProfilerHostInitialize";
    return t;
  }
  std::vector<const char*> names;
  for (auto& m : metrics) names.push_back(m.c_str());
  CUpti_Profiler_Host_ConfigAddMetrics_Params add{CUpti_Profiler_Host_ConfigAddMetrics_Params_STRUCT_SIZE};
  add.pHostObject = h.obj;
  add.ppMetricNames = names.data();
  add.numMetrics = names.size();
  if ((t.result = cuptiProfilerHostConfigAddMetrics(&add)) != CUPTI_SUCCESS) {
    t.step = "cuptiProfilerHostConfigAddMetrics";
    host_deinit(h);
    return t;
  }
  CUpti_Profiler_Host_GetConfigImageSize_Params sz{CUpti_Profiler_Host_GetConfigImageSize_Params_STRUCT_SIZE};
  sz.pHostObject = h.obj;
  if ((t.result = cuptiProfilerHostGetConfigImageSize(&sz)) != CUPTI_SUCCESS) {
    t.step = "cuptiProfilerHostGetConfigImageSize";
    host_deinit(h);
    return t;
  }
  t.image.resize(sz.configImageSize);
  CUpti_Profiler_Host_GetConfigImage_Params img{CUpti_Profiler_Host_GetConfigImage_Params_STRUCT_SIZE};
  img.pHostObject = h.obj;
  img.configImageSize = t.image.size();
  img.pConfigImage = t.image.data();
  if ((t.result = cuptiProfilerHostGetConfigImage(&img)) != CUPTI_SUCCESS) {
    t.step = "cuptiProfilerHostGetConfigImage";
    host_deinit(h);
    return t;
  }
  CUpti_Profiler_Host_GetNumOfPasses_Params np{CUpti_Profiler_Host_GetNumOfPasses_Params_STRUCT_SIZE};
  np.configImageSize = t.image.size();
  np.pConfigImage = t.image.data();
  if ((t.result = cuptiProfilerHostGetNumOfPasses(&np)) != CUPTI_SUCCESS) {
    t.step = "cuptiProfilerHostGetNumOfPasses";
    host_deinit(h);
    return t;
  }
  t.passes = np.numOfPasses;
  host_deinit(h);
  return t;
}

// Writes every base metric the host object lists for this chip (all three
// types) to `path`, and the ones matching the interesting words to stdout's
// count line. Returns the number listed.
size_t list_base_metrics(const Host& h, const std::string& path) {
  static const char* type_names[] = {"counter", "ratio", "throughput"};
  std::ofstream f(path);
  f << "# PM sampling base metrics for chip " << h.chip
    << " (cuptiProfilerHostGetBaseMetrics; append .avg/.sum/.max + .pct_of_peak_sustained_elapsed etc.)\n";
  size_t total = 0;
  std::vector<std::string> interesting;
  for (int t = 0; t < CUPTI_METRIC_TYPE__COUNT; ++t) {
    CUpti_Profiler_Host_GetBaseMetrics_Params p{CUpti_Profiler_Host_GetBaseMetrics_Params_STRUCT_SIZE};
    p.pHostObject = h.obj;
    p.metricType = CUpti_MetricType(t);
    CUptiResult r = cuptiProfilerHostGetBaseMetrics(&p);
    if (r != CUPTI_SUCCESS) {
      f << "# type " << type_names[t] << ": " << cupti_str(r) << "\n";
      continue;
    }
    for (size_t i = 0; i < p.numMetrics; ++i) {
      std::string m = p.ppMetricNames[i];
      f << type_names[t] << "\t" << m << "\n";
      ++total;
      for (const char* w : {"dram", "tensor", "warps_active", "throughput", "cycles_elapsed", "time_duration"})
        if (m.find(w) != std::string::npos) {
          interesting.push_back(std::string(type_names[t]) + "\t" + m);
          break;
        }
    }
  }
  f << "\n# matching dram|tensor|warps_active|throughput|cycles_elapsed|time_duration:\n";
  for (auto& m : interesting) f << "# " << m << "\n";
  return total;
}

struct WantedMetric {
  const char* role;
  std::vector<const char*> candidates;  // first that fits in one pass wins
};
// Candidate names per role. Found on GH100 with CUDA 13.0's host API (see
// --host-only): the plain sm__throughput needs 19 passes under PM sampling,
// its TriageCompute variant one; sm__pipe_tensor_op_hmma_cycles_active is
// not a PM sampling metric; sm__inst_executed_pipe_tensor needs 2 passes.
std::vector<WantedMetric> wanted_metrics() {
  return {
      {"sm_throughput",
       {"sm__throughput.avg.pct_of_peak_sustained_elapsed", "TriageCompute.sm__throughput.avg.pct_of_peak_sustained_elapsed"}},
      {"dram_throughput",
       {"dram__throughput.avg.pct_of_peak_sustained_elapsed", "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
        "dram__bytes_read.sum.pct_of_peak_sustained_elapsed"}},
      {"tensor_pipe",
       {"sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed",
        "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
        "sm__pipe_tensor_cycles_active_realtime.avg.pct_of_peak_sustained_elapsed",
        "sm__inst_executed_pipe_tensor.avg.pct_of_peak_sustained_elapsed"}},
      {"occupancy",
       {"sm__warps_active.avg.pct_of_peak_sustained_active", "sm__warps_active_realtime.avg.pct_of_peak_sustained_active",
        "sm__warps_active_realtime.avg.pct_of_peak_sustained_elapsed"}},
      {"gpu_time", {"gpu__time_duration.sum"}},
      {"gpc_cycles", {"gpc__cycles_elapsed.max", "sm__cycles_elapsed.max"}},
  };
}

// Greedy: for each role, the first candidate that is valid and keeps the
// combined config single-pass. With --metrics, each given name is tried in
// order the same way.
std::vector<std::string> select_metrics(const Host& h, const Options& o, std::vector<uint8_t>& config) {
  std::vector<WantedMetric> roles;
  std::vector<std::string> given = o.metrics;
  if (!given.empty()) {
    for (auto& m : given) roles.push_back({"given", {m.c_str()}});
  } else {
    roles = wanted_metrics();
  }
  std::vector<std::string> chosen;
  for (auto& role : roles) {
    bool got = false;
    for (const char* cand : role.candidates) {
      ConfigTry alone = try_config(h, {cand});
      if (alone.result != CUPTI_SUCCESS) {
        std::printf("metric dropped: %s (%s: %s)\n", cand, alone.step, cupti_str(alone.result));
        continue;
      }
      if (alone.passes != 1) {
        std::printf("metric dropped: %s (needs %zu passes alone; PM sampling takes 1)\n", cand, alone.passes);
        continue;
      }
      std::vector<std::string> with = chosen;
      with.push_back(cand);
      ConfigTry all = try_config(h, with);
      if (all.result != CUPTI_SUCCESS || all.passes != 1) {
        std::printf("metric dropped: %s (with the metrics kept before it: %s)\n", cand,
                    all.result != CUPTI_SUCCESS ? cupti_str(all.result) : (std::to_string(all.passes) + " passes").c_str());
        continue;
      }
      chosen = with;
      got = true;
      std::printf("metric kept:    %-14s %s\n", role.role, cand);
      break;
    }
    if (!got) std::printf("metric role %s: no candidate fits\n", role.role);
  }
  if (!chosen.empty()) {
    ConfigTry final_cfg = try_config(h, chosen);
    config = final_cfg.image;
  }
  return chosen;
}

// ---------------------------------------------------------------- decoding

struct Sample {
  uint64_t start = 0, end = 0;
  std::vector<double> values;
};

// Reads every completed sample of one counter data image. `pm` may be null
// (offline decode): GetSampleInfo takes a PM sampling object in its params.
CUptiResult read_samples(const Host& h, CUpti_PmSampling_Object* pm, const std::vector<uint8_t>& image,
                         const std::vector<std::string>& metrics, std::vector<Sample>& out, size_t* completed, std::string* err,
                         size_t first = 0) {
  CUpti_PmSampling_GetCounterDataInfo_Params info{CUpti_PmSampling_GetCounterDataInfo_Params_STRUCT_SIZE};
  info.pPriv = nullptr;
  info.pCounterDataImage = image.data();
  info.counterDataImageSize = image.size();
  CUptiResult r = cuptiPmSamplingGetCounterDataInfo(&info);
  if (r != CUPTI_SUCCESS) {
    *err = std::string("cuptiPmSamplingGetCounterDataInfo: ") + cupti_str(r);
    return r;
  }
  *completed = info.numCompletedSamples;
  std::vector<const char*> names;
  for (auto& m : metrics) names.push_back(m.c_str());
  for (size_t i = first; i < info.numCompletedSamples; ++i) {
    Sample s;
    const uint64_t t0 = steady_ns();
    CUpti_PmSampling_CounterData_GetSampleInfo_Params si{CUpti_PmSampling_CounterData_GetSampleInfo_Params_STRUCT_SIZE};
    si.pPmSamplingObject = pm;
    si.pCounterDataImage = image.data();
    si.counterDataImageSize = image.size();
    si.sampleIndex = i;
    r = cuptiPmSamplingCounterDataGetSampleInfo(&si);
    if (r != CUPTI_SUCCESS) {
      *err = "cuptiPmSamplingCounterDataGetSampleInfo(" + std::to_string(i) + "): " + cupti_str(r);
      return r;
    }
    s.start = si.startTimestamp;
    s.end = si.endTimestamp;
    s.values.assign(metrics.size(), NAN);
    const uint64_t t1 = steady_ns();
    CUpti_Profiler_Host_EvaluateToGpuValues_Params ev{CUpti_Profiler_Host_EvaluateToGpuValues_Params_STRUCT_SIZE};
    ev.pHostObject = h.obj;
    ev.pCounterDataImage = image.data();
    ev.counterDataImageSize = image.size();
    ev.rangeIndex = i;  // for PM sampling the "range" is the sample index
    ev.ppMetricNames = names.data();
    ev.numMetrics = names.size();
    ev.pMetricValues = s.values.data();
    r = cuptiProfilerHostEvaluateToGpuValues(&ev);
    if (r != CUPTI_SUCCESS) {
      *err = "cuptiProfilerHostEvaluateToGpuValues(" + std::to_string(i) + "): " + cupti_str(r);
      return r;
    }
    const uint64_t t2 = steady_ns();
    g_cost.info += t1 - t0;
    g_cost.evaluate += t2 - t1;
    ++g_cost.samples;
    out.push_back(std::move(s));
  }
  return CUPTI_SUCCESS;
}

void write_samples_json(const std::string& path, const std::string& chip, double interval_us,
                        const std::vector<std::string>& metrics, const std::vector<Sample>& samples) {
  std::ofstream f(path);
  f << "{\n  \"chip\": " << json_str(chip) << ",\n  \"interval_us\": " << json_num(interval_us)
    << ",\n  \"trigger_mode\": \"CUPTI_PM_SAMPLING_TRIGGER_MODE_GPU_TIME_INTERVAL\",\n  \"metrics\": [";
  for (size_t i = 0; i < metrics.size(); ++i) f << (i ? ", " : "") << json_str(metrics[i]);
  f << "],\n  \"samples\": [\n";
  for (size_t i = 0; i < samples.size(); ++i) {
    const Sample& s = samples[i];
    f << "    {\"start_ns\": " << s.start << ", \"end_ns\": " << s.end << ", \"values\": {";
    for (size_t m = 0; m < metrics.size(); ++m) f << (m ? ", " : "") << json_str(metrics[m]) << ": " << json_num(s.values[m]);
    f << "}}" << (i + 1 < samples.size() ? "," : "") << "\n";
  }
  f << "  ]\n}\n";
}

// ------------------------------------------------------- overlap with spans

struct Domain {
  const char* name;
  uint64_t Span::*start;
  uint64_t Span::*end;
};
const Domain kDomains[] = {
    {"gpu_globaltimer", &Span::gpu_start, &Span::gpu_end},
    {"cupti_timestamp", &Span::cupti_start, &Span::cupti_end},
    {"host_realtime", &Span::real_start, &Span::real_end},
    {"host_monotonic_raw", &Span::mono_start, &Span::mono_end},
};

// How many spans fall inside the samples' overall time range in this domain.
int spans_inside(const Domain& d, const std::vector<Span>& spans, const std::vector<Sample>& samples) {
  if (samples.empty()) return 0;
  uint64_t lo = UINT64_MAX, hi = 0;
  for (auto& s : samples) {
    lo = std::min(lo, s.start);
    hi = std::max(hi, s.end);
  }
  int n = 0;
  for (auto& sp : spans)
    if (sp.*d.start >= lo && sp.*d.end <= hi && sp.*d.end > sp.*d.start) ++n;
  return n;
}

struct SpanStats {
  int overlapping = 0;
  std::vector<double> avg;  // time-weighted by overlap
};
SpanStats overlap(uint64_t a, uint64_t b, const std::vector<Sample>& samples, size_t nmetrics) {
  SpanStats st;
  st.avg.assign(nmetrics, NAN);
  std::vector<double> sum(nmetrics, 0.0), wsum(nmetrics, 0.0);
  for (auto& s : samples) {
    uint64_t lo = std::max(a, s.start), hi = std::min(b, s.end);
    if (hi <= lo) continue;
    ++st.overlapping;
    double w = double(hi - lo);
    for (size_t m = 0; m < nmetrics; ++m)
      if (std::isfinite(s.values[m])) {
        sum[m] += w * s.values[m];
        wsum[m] += w;
      }
  }
  for (size_t m = 0; m < nmetrics; ++m)
    if (wsum[m] > 0) st.avg[m] = sum[m] / wsum[m];
  return st;
}

void write_kernels_json_and_table(const std::string& path, const std::vector<std::string>& metrics,
                                  const std::vector<Span>& spans, const std::vector<Sample>& samples) {
  // Pick the clock domain the sample timestamps live in: the one holding the
  // most spans inside the samples' range (the header doesn't say; expected:
  // the GPU's globaltimer, which CUPTI's timestamps normally equal).
  int best = 0, best_n = -1;
  std::printf("\nclock domain check (spans inside the samples' time range, of %zu):\n", spans.size());
  for (int d = 0; d < 4; ++d) {
    int n = spans_inside(kDomains[d], spans, samples);
    std::printf("  %-20s %d\n", kDomains[d].name, n);
    if (n > best_n) {
      best_n = n;
      best = d;
    }
  }
  const Domain& dom = kDomains[best];
  if (!samples.empty()) {
    std::printf("  samples range [%llu, %llu]; first span globaltimer %llu cupti %llu realtime %llu\n",
                (unsigned long long)samples.front().start, (unsigned long long)samples.back().end,
                spans.empty() ? 0ull : (unsigned long long)spans[0].gpu_start,
                spans.empty() ? 0ull : (unsigned long long)spans[0].cupti_start,
                spans.empty() ? 0ull : (unsigned long long)spans[0].real_start);
  }
  std::printf("  using %s\n", dom.name);

  std::ofstream f(path);
  f << "{\n  \"clock_domain\": " << json_str(dom.name) << ",\n  \"metrics\": [";
  for (size_t i = 0; i < metrics.size(); ++i) f << (i ? ", " : "") << json_str(metrics[i]);
  f << "],\n  \"workloads\": [\n";

  // per workload name: aggregate over reps (overlap-weighted over all reps)
  struct Agg {
    std::string name;
    double dur_us = 0;
    int reps = 0;
    int samples = 0;
    std::vector<double> sum, w;
  };
  std::vector<Agg> aggs;
  for (size_t i = 0; i < spans.size(); ++i) {
    const Span& sp = spans[i];
    uint64_t a = sp.*dom.start, b = sp.*dom.end;
    SpanStats st = overlap(a, b, samples, metrics.size());
    double dur_us = double(sp.event_ms) * 1000.0;
    f << "    {\"name\": " << json_str(sp.name) << ", \"rep\": " << sp.rep << ", \"start_ns\": " << a << ", \"end_ns\": " << b
      << ", \"duration_us\": " << json_num(dur_us) << ", \"span_us\": " << json_num(double(b - a) / 1000.0)
      << ", \"samples_overlapping\": " << st.overlapping << ", \"averages\": {";
    for (size_t m = 0; m < metrics.size(); ++m) f << (m ? ", " : "") << json_str(metrics[m]) << ": " << json_num(st.avg[m]);
    f << "}, \"clocks\": {\"gpu_globaltimer\": [" << sp.gpu_start << ", " << sp.gpu_end << "], \"cupti_timestamp\": ["
      << sp.cupti_start << ", " << sp.cupti_end << "], \"host_realtime\": [" << sp.real_start << ", " << sp.real_end
      << "], \"host_monotonic_raw\": [" << sp.mono_start << ", " << sp.mono_end << "]}}" << (i + 1 < spans.size() ? "," : "")
      << "\n";
    Agg* ag = nullptr;
    for (auto& x : aggs)
      if (x.name == sp.name) ag = &x;
    if (!ag) {
      aggs.push_back({sp.name, 0, 0, 0, std::vector<double>(metrics.size(), 0), std::vector<double>(metrics.size(), 0)});
      ag = &aggs.back();
    }
    ag->dur_us += dur_us;
    ag->reps += 1;
    ag->samples += st.overlapping;
    double w = double(b - a);
    for (size_t m = 0; m < metrics.size(); ++m)
      if (std::isfinite(st.avg[m])) {
        ag->sum[m] += w * st.avg[m];
        ag->w[m] += w;
      }
  }
  f << "  ]\n}\n";

  // summary table
  std::printf("\n%-16s %11s %8s", "workload", "avg_us", "samples");
  for (size_t m = 0; m < metrics.size(); ++m) std::printf("  m%zu", m);
  std::printf("\n");
  for (auto& ag : aggs) {
    std::printf("%-16s %11.1f %8d", ag.name.c_str(), ag.dur_us / std::max(1, ag.reps), ag.samples);
    for (size_t m = 0; m < metrics.size(); ++m) {
      double v = ag.w[m] > 0 ? ag.sum[m] / ag.w[m] : NAN;
      std::printf("  %10.3f", v);
    }
    std::printf("\n");
  }
  for (size_t m = 0; m < metrics.size(); ++m) std::printf("  m%zu = %s\n", m, metrics[m].c_str());
}

void write_meta(const std::string& path, const Host& h, const Options& o, const std::vector<std::string>& metrics,
                size_t config_size, const std::vector<std::string>& images, const std::vector<size_t>& image_sizes,
                size_t nsamples, int decode_calls, bool overflow) {
  std::ofstream f(path);
  f << "{\n  \"chip\": " << json_str(h.chip) << ",\n  \"metrics\": [";
  for (size_t i = 0; i < metrics.size(); ++i) f << (i ? ", " : "") << json_str(metrics[i]);
  f << "],\n  \"interval_us\": " << json_num(o.interval_us) << ",\n  \"interval_ns\": " << uint64_t(o.interval_us * 1000.0 + 0.5)
    << ",\n  \"trigger_mode\": \"CUPTI_PM_SAMPLING_TRIGGER_MODE_GPU_TIME_INTERVAL\",\n  \"hardware_buffer_bytes\": "
    << o.hw_buffer_mb * 1024 * 1024 << ",\n  \"max_samples_per_image\": " << o.max_samples
    << ",\n  \"config_image\": \"pm_config.bin\",\n  \"config_image_bytes\": " << config_size
    << ",\n  \"counter_availability_image\": " << (h.availability.empty() ? "null" : "\"pm_counter_availability.bin\"")
    << ",\n  \"counter_availability_bytes\": " << h.availability.size() << ",\n  \"counter_data_images\": [";
  for (size_t i = 0; i < images.size(); ++i) f << (i ? ", " : "") << json_str(images[i]);
  f << "],\n  \"counter_data_image_bytes\": [";
  for (size_t i = 0; i < image_sizes.size(); ++i) f << (i ? ", " : "") << image_sizes[i];
  f << "],\n  \"samples\": " << nsamples << ",\n  \"decode_calls\": " << decode_calls
    << ",\n  \"hw_buffer_overflow\": " << (overflow ? "true" : "false") << ",\n  \"cupti_version\": ";
  uint32_t v = 0;
  cuptiGetVersion(&v);
  f << v << "\n}\n";
}

// Minimal readers for our own pm_meta.json.
std::string meta_string(const std::string& text, const std::string& key) {
  size_t k = text.find("\"" + key + "\"");
  if (k == std::string::npos) return "";
  size_t q1 = text.find('"', text.find(':', k) + 1);
  if (q1 == std::string::npos) return "";
  size_t q2 = text.find('"', q1 + 1);
  return text.substr(q1 + 1, q2 - q1 - 1);
}
std::vector<std::string> meta_list(const std::string& text, const std::string& key) {
  std::vector<std::string> v;
  size_t k = text.find("\"" + key + "\"");
  if (k == std::string::npos) return v;
  size_t a = text.find('[', k), b = text.find(']', a);
  std::string body = text.substr(a + 1, b - a - 1);
  size_t p = 0;
  while ((p = body.find('"', p)) != std::string::npos) {
    size_t e = body.find('"', p + 1);
    v.push_back(body.substr(p + 1, e - p - 1));
    p = e + 1;
  }
  return v;
}

// ----------------------------------------------------------------- modes

// Re-evaluates a recorded directory with a fresh host object and no PM
// sampling object (pPmSamplingObject = NULL in GetSampleInfo): what a CPU-only
// decoder would do. Note: the nvperf host decoders do not validate images; a
// garbage image segfaults inside NVPW_PeriodicSampler_CounterData_GetInfo.
int decode_dir(const std::string& dir, std::vector<Sample>& samples, std::vector<std::string>& metrics_out) {
  std::string meta;
  if (!read_text(dir + "/pm_meta.json", meta)) fail("read", dir + "/pm_meta.json");
  Host h;
  h.chip = meta_string(meta, "chip");
  std::vector<std::string> metrics = meta_list(meta, "metrics");
  std::vector<std::string> images = meta_list(meta, "counter_data_images");
  read_bytes(dir + "/pm_counter_availability.bin", h.availability);  // optional
  std::printf("offline decode: chip %s, %zu metrics, %zu images, availability %zu bytes\n", h.chip.c_str(), metrics.size(),
              images.size(), h.availability.size());
  CUptiResult r = host_init(h);
  if (r != CUPTI_SUCCESS) {
    // retry without the availability image
    h.availability.clear();
    r = host_init(h);
    if (r != CUPTI_SUCCESS) fail("cuptiProfilerHostInitialize", cupti_str(r));
  }
  // The host object also needs the metrics' config for evaluation? The
  // samples evaluate against the counter data image; add the metrics so the
  // object knows them (cheap, and what the live path has done).
  {
    std::vector<const char*> names;
    for (auto& m : metrics) names.push_back(m.c_str());
    CUpti_Profiler_Host_ConfigAddMetrics_Params add{CUpti_Profiler_Host_ConfigAddMetrics_Params_STRUCT_SIZE};
    add.pHostObject = h.obj;
    add.ppMetricNames = names.data();
    add.numMetrics = names.size();
    r = cuptiProfilerHostConfigAddMetrics(&add);
    if (r != CUPTI_SUCCESS) std::printf("cuptiProfilerHostConfigAddMetrics: %s (continuing)\n", cupti_str(r));
  }
  int rc = 0;
  for (auto& name : images) {
    std::vector<uint8_t> image;
    if (!read_bytes(dir + "/" + name, image) || image.empty()) fail("read", dir + "/" + name);
    size_t completed = 0;
    std::string err;
    r = read_samples(h, nullptr, image, metrics, samples, &completed, &err);
    std::printf("  %s: %zu bytes, %zu completed samples, %s\n", name.c_str(), image.size(), completed,
                r == CUPTI_SUCCESS ? "ok" : err.c_str());
    if (r != CUPTI_SUCCESS) rc = 1;
  }
  metrics_out = metrics;
  host_deinit(h);
  return rc;
}

int mode_decode(const Options& o) {
  std::vector<Sample> samples;
  std::vector<std::string> metrics;
  int rc = decode_dir(o.decode_dir, samples, metrics);
  std::string meta, chip;
  read_text(o.decode_dir + "/pm_meta.json", meta);
  chip = meta_string(meta, "chip");
  double interval_us = 0;
  {
    size_t k = meta.find("\"interval_us\"");
    if (k != std::string::npos) interval_us = std::atof(meta.c_str() + meta.find(':', k) + 1);
  }
  write_samples_json(o.decode_dir + "/pm_samples_offline.json", chip, interval_us, metrics, samples);
  std::printf("wrote %s/pm_samples_offline.json (%zu samples)\n", o.decode_dir.c_str(), samples.size());
  return rc;
}

int mode_host_only(const Options& o) {
  if (o.chip.empty()) {
    std::fprintf(stderr, "--host-only needs --chip (e.g. GH100)\n");
    return 1;
  }
  mkdir(o.out.c_str(), 0755);
  Host h;
  h.chip = o.chip;
  CUptiResult r = host_init(h);
  if (r != CUPTI_SUCCESS) fail("cuptiProfilerHostInitialize", cupti_str(r));
  size_t n = list_base_metrics(h, o.out + "/pm_metrics_available.txt");
  std::printf("chip %s: %zu base metrics listed in %s/pm_metrics_available.txt\n", h.chip.c_str(), n, o.out.c_str());
  std::vector<uint8_t> config;
  std::vector<std::string> metrics = select_metrics(h, o, config);
  write_bytes(o.out + "/pm_config.bin", config);
  std::printf("config image: %zu bytes, %zu metrics, single pass -> %s/pm_config.bin\n", config.size(), metrics.size(),
              o.out.c_str());
  host_deinit(h);
  return metrics.empty() ? 1 : 0;
}

void print_ncu_line(const char* argv0) {
  std::printf(
      "ncu comparison: ncu --metrics "
      "sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,"
      "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active "
      "-k %s %s --workloads-only --reps 1\n",
      kKernelRegex, argv0);
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  if (!o.decode_dir.empty()) return mode_decode(o);
  if (o.host_only) return mode_host_only(o);

  // ---- CUDA context
  int ndev = 0;
  cudaError_t ce = cudaGetDeviceCount(&ndev);
  if (ce != cudaSuccess && o.workloads_only) fail("cudaGetDeviceCount", cudaGetErrorString(ce));
  if (ce != cudaSuccess) unsupported("cudaGetDeviceCount", std::string(cudaGetErrorName(ce)) + ": " + cudaGetErrorString(ce));
  if (o.device < 0 || o.device >= ndev)
    unsupported("device", "no device " + std::to_string(o.device) + " (" + std::to_string(ndev) + " present)");
  CHECK_CUDA(cudaSetDevice(o.device));
  CHECK_CUDA(cudaFree(nullptr));
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, o.device));
  std::printf("device %d: %s, sm_%d%d, %d SMs\n", o.device, prop.name, prop.major, prop.minor, prop.multiProcessorCount);

  if (o.workloads_only) {
    Buffers b;
    alloc_buffers(b, 3 * o.reps);
    std::vector<Span> spans = run_workloads(b, o.reps);
    for (auto& s : spans) std::printf("%-16s rep %d  %10.1f us\n", s.name.c_str(), s.rep, s.event_ms * 1000.0);
    print_ncu_line(argv[0]);
    return 0;
  }
  if (prop.major < 7 || (prop.major == 7 && prop.minor < 5)) unsupported("device", "PM sampling needs compute capability >= 7.5");
  if (prop.major == 8 && prop.minor == 0)
    unsupported("device", "GA100 has no GPU_TIME_INTERVAL trigger (this probe uses only that mode)");

  mkdir(o.out.c_str(), 0755);
  std::printf("CUPTI PM sampling probe: out %s, interval %.3f us, reps %d\n", o.out.c_str(), o.interval_us, o.reps);

  // ---- profiler API and device support
  CUpti_Profiler_Initialize_Params init{CUpti_Profiler_Initialize_Params_STRUCT_SIZE};
  init.pPriv = nullptr;
  SETUP_CUPTI(cuptiProfilerInitialize(&init));

  CUpti_Profiler_DeviceSupported_Params sup{CUpti_Profiler_DeviceSupported_Params_STRUCT_SIZE};
  sup.pPriv = nullptr;
  sup.cuDevice = CUdevice(o.device);
  sup.api = CUPTI_PROFILER_PM_SAMPLING;
  SETUP_CUPTI(cuptiProfilerDeviceSupported(&sup));
  if (sup.isSupported != CUPTI_PROFILER_CONFIGURATION_SUPPORTED) {
    auto lvl = [](CUpti_Profiler_Support_Level l) {
      switch (l) {
        case CUPTI_PROFILER_CONFIGURATION_SUPPORTED: return "supported";
        case CUPTI_PROFILER_CONFIGURATION_UNSUPPORTED: return "UNSUPPORTED";
        case CUPTI_PROFILER_CONFIGURATION_DISABLED: return "DISABLED";
        default: return "unknown";
      }
    };
    char why[512];
    std::snprintf(why, sizeof why, "isSupported=%s architecture=%s sli=%s vGpu=%s confidentialCompute=%s cmp=%s wsl=%s",
                  lvl(sup.isSupported), lvl(sup.architecture), lvl(sup.sli), lvl(sup.vGpu), lvl(sup.confidentialCompute),
                  lvl(sup.cmp), lvl(sup.wsl));
    unsupported("cuptiProfilerDeviceSupported(CUPTI_PROFILER_PM_SAMPLING)", why);
  }

  Host h;
  CUpti_Device_GetChipName_Params chip{CUpti_Device_GetChipName_Params_STRUCT_SIZE};
  chip.pPriv = nullptr;
  chip.deviceIndex = size_t(o.device);
  SETUP_CUPTI(cuptiDeviceGetChipName(&chip));
  h.chip = chip.pChipName ? chip.pChipName : "";
  std::printf("chip: %s\n", h.chip.c_str());

  // Counter availability: the first call sizes, the second fills. Fails with
  // CUPTI_ERROR_INSUFFICIENT_PRIVILEGES under RmProfilingAdminOnly=1.
  CUpti_PmSampling_GetCounterAvailability_Params av{CUpti_PmSampling_GetCounterAvailability_Params_STRUCT_SIZE};
  av.pPriv = nullptr;
  av.deviceIndex = size_t(o.device);
  av.pCounterAvailabilityImage = nullptr;
  SETUP_CUPTI(cuptiPmSamplingGetCounterAvailability(&av));
  h.availability.resize(av.counterAvailabilityImageSize);
  av.pCounterAvailabilityImage = h.availability.data();
  SETUP_CUPTI(cuptiPmSamplingGetCounterAvailability(&av));
  write_bytes(o.out + "/pm_counter_availability.bin", h.availability);

  SETUP_CUPTI(host_init(h));
  size_t nlisted = list_base_metrics(h, o.out + "/pm_metrics_available.txt");
  std::printf("%zu base metrics listed in %s/pm_metrics_available.txt\n", nlisted, o.out.c_str());

  std::vector<uint8_t> config;
  std::vector<std::string> metrics = select_metrics(h, o, config);
  if (metrics.empty()) unsupported("metric selection", "no requested metric fits a single-pass PM sampling config");
  write_bytes(o.out + "/pm_config.bin", config);
  std::vector<const char*> names;
  for (auto& m : metrics) names.push_back(m.c_str());
  // host object used for evaluation: the selected metrics added to it too
  {
    CUpti_Profiler_Host_ConfigAddMetrics_Params add{CUpti_Profiler_Host_ConfigAddMetrics_Params_STRUCT_SIZE};
    add.pHostObject = h.obj;
    add.ppMetricNames = names.data();
    add.numMetrics = names.size();
    SETUP_CUPTI(cuptiProfilerHostConfigAddMetrics(&add));
  }

  // Buffers before sampling starts, and one warm-up of each workload.
  Buffers b;
  alloc_buffers(b, 3 * o.reps);
  for (int w = 0; w < 3; ++w) launch_workload(w, b);
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaDeviceSynchronize());

  // ---- enable + configure. INSUFFICIENT_PRIVILEGES: RmProfilingAdminOnly;
  // INVALID_OPERATION: already enabled (another tool / profiler session).
  CUpti_PmSampling_Enable_Params en{CUpti_PmSampling_Enable_Params_STRUCT_SIZE};
  en.pPriv = nullptr;
  en.deviceIndex = size_t(o.device);
  SETUP_CUPTI(cuptiPmSamplingEnable(&en));
  CUpti_PmSampling_Object* pm = en.pPmSamplingObject;

  CUpti_PmSampling_SetConfig_Params sc{CUpti_PmSampling_SetConfig_Params_STRUCT_SIZE};
  sc.pPriv = nullptr;
  sc.pPmSamplingObject = pm;
  sc.configSize = config.size();
  sc.pConfig = config.data();
  sc.hardwareBufferSize = o.hw_buffer_mb * 1024 * 1024;
  sc.samplingInterval = uint64_t(o.interval_us * 1000.0 + 0.5);  // ns in GPU_TIME_INTERVAL mode, cycles in SYSCLK
  sc.triggerMode =
      o.sysclk ? CUPTI_PM_SAMPLING_TRIGGER_MODE_GPU_SYSCLK_INTERVAL : CUPTI_PM_SAMPLING_TRIGGER_MODE_GPU_TIME_INTERVAL;
  sc.hwBufferAppendMode = CUPTI_PM_SAMPLING_HARDWARE_BUFFER_APPEND_MODE_KEEP_OLDEST;  // overflow reported
  SETUP_CUPTI(cuptiPmSamplingSetConfig(&sc));

  CUpti_PmSampling_GetCounterDataSize_Params ds{CUpti_PmSampling_GetCounterDataSize_Params_STRUCT_SIZE};
  ds.pPriv = nullptr;
  ds.pPmSamplingObject = pm;
  ds.pMetricNames = names.data();
  ds.numMetrics = names.size();
  ds.maxSamples = o.max_samples;
  SETUP_CUPTI(cuptiPmSamplingGetCounterDataSize(&ds));
  std::printf("counter data image: %zu bytes for %u samples; hardware buffer %zu MiB\n", ds.counterDataSize, o.max_samples,
              o.hw_buffer_mb);
  auto fresh_image = [&](std::vector<uint8_t>& img) {
    img.assign(ds.counterDataSize, 0);
    CUpti_PmSampling_CounterDataImage_Initialize_Params ci{CUpti_PmSampling_CounterDataImage_Initialize_Params_STRUCT_SIZE};
    ci.pPriv = nullptr;
    ci.pPmSamplingObject = pm;
    ci.counterDataSize = img.size();
    ci.pCounterData = img.data();
    CHECK_CUPTI(cuptiPmSamplingCounterDataImageInitialize(&ci));
  };

  // ---- sample the workloads; decode: until END_OF_RECORDS, one image per
  // COUNTER_DATA_FULL, also while sampling when --decode-every-ms is given.
  std::vector<Sample> samples;
  std::vector<std::string> image_files;
  std::vector<size_t> image_sizes;
  bool overflow = false;
  int decode_calls = 0;
  int chunk = 0;
  std::vector<uint8_t> kept_image;  // --reuse-image: decoded into until full
  size_t kept_read = 0;             // its samples already read
  auto decode_pass = [&](bool final_pass) {
    for (int guard = 0; guard < 1000; ++guard) {
      std::vector<uint8_t> fresh;
      const bool reuse = o.reuse_image && !kept_image.empty();
      const uint64_t t0 = steady_ns();
      if (!reuse) fresh_image(o.reuse_image ? kept_image : fresh);
      std::vector<uint8_t>& img = o.reuse_image ? kept_image : fresh;
      if (!reuse) kept_read = 0;
      const uint64_t t1 = steady_ns();
      CUpti_PmSampling_DecodeData_Params dd{CUpti_PmSampling_DecodeData_Params_STRUCT_SIZE};
      dd.pPriv = nullptr;
      dd.pPmSamplingObject = pm;
      dd.pCounterDataImage = img.data();
      dd.counterDataImageSize = img.size();
      CUptiResult r = cuptiPmSamplingDecodeData(&dd);
      const uint64_t t2 = steady_ns();
      g_cost.init += t1 - t0;
      g_cost.decode += t2 - t1;
      ++g_cost.calls;
      ++decode_calls;
      if (dd.overflow) overflow = true;
      if (r != CUPTI_SUCCESS) {
        std::printf("cuptiPmSamplingDecodeData: %s (overflow=%d)\n", cupti_str(r), int(dd.overflow));
        if (r != CUPTI_ERROR_OUT_OF_MEMORY) return;
      }
      size_t completed = 0;
      std::string err;
      CUptiResult rr = read_samples(h, pm, img, metrics, samples, &completed, &err, kept_read);
      const size_t new_samples = completed - std::min(completed, kept_read);
      kept_read = completed;
      const bool full = dd.decodeStopReason == CUPTI_PM_SAMPLING_DECODE_STOP_REASON_COUNTER_DATA_FULL;
      if (o.reuse_image && full) kept_image.clear();
      if (!o.reuse_image && completed > 0 && (final_pass || chunk < 4)) {
        std::string file = chunk == 0 ? "pm_counter_data.bin" : "pm_counter_data." + std::to_string(chunk) + ".bin";
        write_bytes(o.out + "/" + file, img);
        image_files.push_back(file);
        image_sizes.push_back(img.size());
        ++chunk;
      }
      if (final_pass || new_samples > 0)
        std::printf("decode %d: stop reason %d, overflow %d, %zu new samples%s%s\n", decode_calls, int(dd.decodeStopReason),
                    int(dd.overflow), new_samples, rr == CUPTI_SUCCESS ? "" : "; ", rr == CUPTI_SUCCESS ? "" : err.c_str());
      if (!full) return;
    }
  };
  uint64_t start_cupti = cupti_now();
  CUpti_PmSampling_Start_Params st{CUpti_PmSampling_Start_Params_STRUCT_SIZE};
  st.pPriv = nullptr;
  st.pPmSamplingObject = pm;
  SETUP_CUPTI(cuptiPmSamplingStart(&st));
  const uint64_t started_cupti = cupti_now();
  std::atomic<bool> sampling{true};
  std::thread decoder;
  if (o.decode_every_ms > 0)
    decoder = std::thread([&] {
      while (sampling.load()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(o.decode_every_ms));
        decode_pass(false);
      }
    });
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  std::vector<Span> spans = run_workloads(b, o.reps);
  sampling.store(false);
  if (decoder.joinable()) decoder.join();
  CUpti_PmSampling_Stop_Params sp{CUpti_PmSampling_Stop_Params_STRUCT_SIZE};
  sp.pPriv = nullptr;
  sp.pPmSamplingObject = pm;
  CHECK_CUPTI(cuptiPmSamplingStop(&sp));
  uint64_t stop_cupti = cupti_now();
  std::printf("sampled %.3f ms (cuptiGetTimestamp), %zu spans\n", double(stop_cupti - start_cupti) / 1e6, spans.size());
  const uint64_t live_samples = g_cost.samples;
  const DecodeCost live = g_cost;
  decode_pass(true);
  if (!samples.empty())
    std::printf(
        "START: cuptiPmSamplingStart between host %llu and %llu (%.1f us); first sample [%llu, %llu]: start - host before %+.1f "
        "us\n",
        (unsigned long long)start_cupti, (unsigned long long)started_cupti, double(started_cupti - start_cupti) / 1e3,
        (unsigned long long)samples.front().start, (unsigned long long)samples.front().end,
        double(int64_t(samples.front().start - start_cupti)) / 1e3);
  if (live.samples)
    std::printf(
        "COST (while sampling, %llu samples, %llu decode calls, image %zu bytes%s): per sample decode %.1f us, image init "
        "%.1f us, info %.1f us, evaluate %.1f us\n",
        (unsigned long long)live_samples, (unsigned long long)live.calls, size_t(ds.counterDataSize),
        o.reuse_image ? ", reused" : "", double(live.decode) / 1e3 / double(live.samples),
        double(live.init) / 1e3 / double(live.samples), double(live.info) / 1e3 / double(live.samples),
        double(live.evaluate) / 1e3 / double(live.samples));
  {
    // The hardware's actual period: gaps between consecutive sample starts,
    // and each sample's own length.
    std::vector<double> gaps, lens;
    for (size_t i = 0; i < samples.size(); ++i) {
      lens.push_back(double(samples[i].end - samples[i].start) / 1000.0);
      if (i) gaps.push_back(double(samples[i].start - samples[i - 1].start) / 1000.0);
    }
    auto pct = [](std::vector<double> v, double q) {
      if (v.empty()) return 0.0;
      std::sort(v.begin(), v.end());
      return v[size_t(q * double(v.size() - 1))];
    };
    // Stretches the GPU left unsampled: a sample starting more than 1.5 intervals after the previous one ended.
    size_t holes = 0;
    double hole_us = 0;
    for (size_t i = 1; i < samples.size(); ++i)
      if (samples[i].start > samples[i - 1].end && double(samples[i].start - samples[i - 1].end) > 1500.0 * o.interval_us) {
        ++holes;
        hole_us += double(samples[i].start - samples[i - 1].end) / 1000.0;
      }
    std::printf("HOLES: %zu stretches without samples, %.1f ms in all\n", holes, hole_us / 1000.0);
    std::printf(
        "PERIOD: mode %s interval %.1f, %zu samples over %.3f ms; gap us p10 %.2f p50 %.2f p90 %.2f max %.2f; "
        "length us p50 %.2f; overflow %d; decode calls %d\n",
        o.sysclk ? "sysclk" : "time", o.interval_us, samples.size(),
        samples.empty() ? 0.0 : double(samples.back().end - samples.front().start) / 1e6, pct(gaps, 0.1), pct(gaps, 0.5),
        pct(gaps, 0.9), pct(gaps, 1.0), pct(lens, 0.5), int(overflow), decode_calls);
  }

  CUpti_PmSampling_Disable_Params dis{CUpti_PmSampling_Disable_Params_STRUCT_SIZE};
  dis.pPriv = nullptr;
  dis.pPmSamplingObject = pm;
  CUptiResult dr = cuptiPmSamplingDisable(&dis);
  if (dr != CUPTI_SUCCESS) std::printf("cuptiPmSamplingDisable: %s\n", cupti_str(dr));

  write_samples_json(o.out + "/pm_samples.json", h.chip, o.interval_us, metrics, samples);
  write_meta(o.out + "/pm_meta.json", h, o, metrics, config.size(), image_files, image_sizes, samples.size(), decode_calls,
             overflow);
  std::printf("%zu samples", samples.size());
  if (samples.size() > 1) {
    double mean_us = double(samples.back().end - samples.front().start) / 1000.0 / double(samples.size());
    std::printf(" (mean sample period %.2f us)", mean_us);
  }
  std::printf("\n");
  write_kernels_json_and_table(o.out + "/pm_kernels.json", metrics, spans, samples);
  std::printf(
      "\nwrote %s/{pm_samples.json,pm_kernels.json,pm_meta.json,pm_config.bin,pm_counter_data*.bin,"
      "pm_counter_availability.bin,pm_metrics_available.txt}\n",
      o.out.c_str());

  // The recorded files decoded again as a CPU-only reader would (fresh host
  // object, no PM sampling object); compared with the live values.
  {
    std::printf("\noffline re-decode of %s (fresh host object, pPmSamplingObject = NULL):\n", o.out.c_str());
    std::vector<Sample> again;
    std::vector<std::string> m2;
    int rc2 = decode_dir(o.out, again, m2);
    double maxdiff = 0;
    size_t n = std::min(again.size(), samples.size());
    bool ts_same = again.size() == samples.size();
    for (size_t i = 0; i < n; ++i) {
      if (again[i].start != samples[i].start || again[i].end != samples[i].end) ts_same = false;
      for (size_t m = 0; m < metrics.size() && m < again[i].values.size(); ++m)
        if (std::isfinite(samples[i].values[m]) && std::isfinite(again[i].values[m]))
          maxdiff = std::max(maxdiff, std::fabs(samples[i].values[m] - again[i].values[m]));
    }
    std::printf("OFFLINE_DECODE: %s, %zu/%zu samples, timestamps %s, max |value diff| %g\n", rc2 == 0 ? "ok" : "FAILED",
                again.size(), samples.size(), ts_same ? "identical" : "DIFFER", maxdiff);
  }
  print_ncu_line(argv[0]);

  host_deinit(h);
  CUpti_Profiler_DeInitialize_Params deinit{CUpti_Profiler_DeInitialize_Params_STRUCT_SIZE};
  cuptiProfilerDeInitialize(&deinit);
  return samples.empty() ? 1 : 0;
}
