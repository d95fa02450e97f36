// Allocates and frees memory in every way a CUDA program can, each way in a
// scope of its own with sizes known here, so that tests/gpu/gpu_check.py can
// check cuprof's memory events, "Self CUDA Mem" / "Self CPU Mem" columns and
// memory insights against them, and count the allocations against an
// independent CUPTI counter (cupti_counter.cpp):
//
//   memory_kinds TRACE   profiled (profile_memory), the trace written to TRACE
//   memory_kinds         plain: cuprof compiled in but not started
//
// The bytes each scope keeps (allocated minus freed in it) are printed as
// "memory_kinds: expect SCOPE DEVICE_BYTES HOST_BYTES" lines. Some of it is
// made to fire insights: the "leaky" scope never frees its buffer, every
// step of the loop calls cudaMalloc and cudaFree, and each step copies from
// pageable host memory (and once from pinned memory, for a bandwidth to
// compare with).
#define CUPROF_IMPLEMENTATION
#include <cuprof/cuprof.hpp>

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CHECK(call)                                                                                      \
  do {                                                                                                   \
    const cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess) {                                                                             \
      std::fprintf(stderr, "memory_kinds: %s: %s (line %d)\n", #call, cudaGetErrorString(e_), __LINE__); \
      std::exit(1);                                                                                      \
    }                                                                                                    \
  } while (0)
#define CHECK_CU(call)                                                                          \
  do {                                                                                          \
    const CUresult r_ = (call);                                                                 \
    if (r_ != CUDA_SUCCESS) {                                                                   \
      std::fprintf(stderr, "memory_kinds: %s: error %d (line %d)\n", #call, int(r_), __LINE__); \
      std::exit(1);                                                                             \
    }                                                                                           \
  } while (0)

constexpr std::size_t KiB = 1024, MiB = 1024 * KiB;

static void expect(const char* scope, long long device_bytes, long long host_bytes) {
  std::printf("memory_kinds: expect %s %lld %lld\n", scope, device_bytes, host_bytes);
}

__global__ void touch(float* x, std::size_t n) {
  const std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1.0f;
}

int main(int argc, char** argv) {
  const char* trace_path = argc > 1 ? argv[1] : nullptr;
  CHECK(cudaFree(nullptr));  // the context, before the window
  cuprof::profile_options options;
  options.profile_memory = true;
  // One window over every step (a schedule, so that the steps are ProfilerStep#N
  // spans), closed by stop(): the loop is steps 1 to 5.
  options.schedule = cuprof::schedule(0, 0, 1000, 1);
  cuprof::profile prof(options);
  if (trace_path) prof.start();

  void *kept = nullptr, *freed = nullptr;
  {
    CUPROF_SCOPE("device_malloc");  // +1 MiB kept, 3 MiB allocated and freed
    CHECK(cudaMalloc(&kept, 1 * MiB));
    CHECK(cudaMalloc(&freed, 3 * MiB));
    CHECK(cudaFree(freed));
    expect("device_malloc", 1 * MiB, 0);
  }
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  {
    CUPROF_SCOPE("async_default_pool");  // 2 MiB from the device's default pool, freed in order
    void* p = nullptr;
    CHECK(cudaMallocAsync(&p, 2 * MiB, stream));
    touch<<<(2 * MiB / 4 + 255) / 256, 256, 0, stream>>>(static_cast<float*>(p), 2 * MiB / 4);
    CHECK(cudaFreeAsync(p, stream));
    CHECK(cudaStreamSynchronize(stream));
    expect("async_default_pool", 0, 0);
  }
  {
    CUPROF_SCOPE("async_own_pool");  // a pool of its own: 4 MiB allocated and freed, then trimmed
    int device = 0;
    CHECK(cudaGetDevice(&device));
    cudaMemPoolProps props = {};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    cudaMemPool_t pool;
    CHECK(cudaMemPoolCreate(&pool, &props));
    void* p = nullptr;
    CHECK(cudaMallocFromPoolAsync(&p, 4 * MiB, pool, stream));
    CHECK(cudaFreeAsync(p, stream));
    CHECK(cudaStreamSynchronize(stream));
    CHECK(cudaMemPoolTrimTo(pool, 0));
    CHECK(cudaMemPoolDestroy(pool));
    expect("async_own_pool", 0, 0);
  }
  void* managed = nullptr;
  {
    CUPROF_SCOPE("managed");  // +512 KiB managed, freed in "cleanup"
    CHECK(cudaMallocManaged(&managed, 512 * KiB));
    expect("managed", 512 * KiB, 0);
  }
  void *pinned_kept = nullptr, *pinned_freed = nullptr;
  {
    CUPROF_SCOPE("pinned_host");  // host memory: +256 KiB kept, 128 KiB allocated and freed
    CHECK(cudaHostAlloc(&pinned_kept, 256 * KiB, cudaHostAllocDefault));
    CHECK(cudaMallocHost(&pinned_freed, 128 * KiB));
    CHECK(cudaFreeHost(pinned_freed));
    expect("pinned_host", 0, 256 * KiB);
  }
  {
    CUPROF_SCOPE("driver_alloc");  // the driver API: 64 KiB allocated and freed
    CUdeviceptr d = 0;
    CHECK_CU(cuMemAlloc(&d, 64 * KiB));
    CHECK_CU(cuMemFree(d));
    expect("driver_alloc", 0, 0);
  }
  {
    CUPROF_SCOPE("virtual_memory");  // one granule created, mapped, unmapped and released
    int device = 0;
    CHECK(cudaGetDevice(&device));
    CUmemAllocationProp prop = {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device;
    std::size_t granule = 0;
    CHECK_CU(cuMemGetAllocationGranularity(&granule, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    CUmemGenericAllocationHandle handle;
    CHECK_CU(cuMemCreate(&handle, granule, &prop, 0));
    CUdeviceptr va = 0;
    CHECK_CU(cuMemAddressReserve(&va, granule, 0, 0, 0));
    CHECK_CU(cuMemMap(va, granule, 0, handle, 0));
    CUmemAccessDesc access = {};
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CHECK_CU(cuMemSetAccess(va, granule, &access, 1));
    CHECK_CU(cuMemUnmap(va, granule));
    CHECK_CU(cuMemRelease(handle));
    CHECK_CU(cuMemAddressFree(va, granule));
    expect("virtual_memory", 0, 0);
    std::printf("memory_kinds: granule %zu\n", granule);
  }
  {
    CUPROF_SCOPE("leaky");  // 8 MiB never freed
    void* p = nullptr;
    CHECK(cudaMalloc(&p, 8 * MiB));
    expect("leaky", 8 * MiB, 0);
  }
  // The steady loop: each step allocates and frees a scratch buffer with
  // cudaMalloc/cudaFree and copies 16 MiB from pageable host memory.
  const std::size_t copy_bytes = 16 * MiB;
  std::vector<char> pageable(copy_bytes, 1);
  float* staging = nullptr;
  CHECK(cudaMalloc(&staging, copy_bytes));
  char* pinned_copy = nullptr;
  CHECK(cudaMallocHost(&pinned_copy, copy_bytes));
  std::memset(pinned_copy, 2, copy_bytes);
  prof.step();
  for (int step = 0; step < 5; ++step) {
    {
      CUPROF_SCOPE("train_step");  // 1 MiB allocated and freed per step
      void* scratch = nullptr;
      CHECK(cudaMalloc(&scratch, 1 * MiB));
      CHECK(cudaMemcpy(staging, pageable.data(), copy_bytes, cudaMemcpyHostToDevice));
      touch<<<(copy_bytes / 4 + 255) / 256, 256>>>(staging, copy_bytes / 4);
      CHECK(cudaFree(scratch));
      if (step == 0) CHECK(cudaMemcpy(staging, pinned_copy, copy_bytes, cudaMemcpyHostToDevice));
    }
    prof.step();  // outside the scope: a step's boundary inside a scope would cut across it
  }
  expect("train_step", 0, 0);
  {
    CUPROF_SCOPE("cleanup");  // frees what "managed" and "pinned_host" kept, and the loop's buffers
    CHECK(cudaFree(managed));
    CHECK(cudaFreeHost(pinned_kept));
    CHECK(cudaFree(staging));
    CHECK(cudaFreeHost(pinned_copy));
    CHECK(cudaFree(kept));
    expect("cleanup", -(long long)(512 * KiB + copy_bytes + 1 * MiB), -(long long)(256 * KiB + copy_bytes));
  }
  CHECK(cudaDeviceSynchronize());
  if (trace_path) {
    prof.stop();
    prof.export_chrome_trace(trace_path);  // throws cuprof::error on failure
  }
  CHECK(cudaStreamDestroy(stream));
  std::printf("memory_kinds: done\n");
  return 0;
}
