// An independent count of a CUDA program's GPU work, to check cuprof's traces
// against (tests/gpu/gpu_check_corpus.py). It shares no code with cuprof on
// purpose: only CUPTI's activity API, as small as it can be.
//
// Loaded by CUDA itself through CUDA_INJECTION64_PATH=libcupti_counter.so; it
// writes, at exit, to $CUPTI_COUNTER_OUT (a "%p" in it becomes the process id):
//   {"kernels": {mangled name: count}, "memcpy": {"HtoD": count, ...},
//    "memcpy_by_enum": {"1": count, ...}, "memset": N, "dropped": N,
//    "contexts": N, "flushed_at_exit": true|false, "pid": N, "rank": $RANK or -1,
//    "init_error": null|"what failed"}
// With CUPTI_COUNTER_MEMORY=1 it also counts the program's allocations and
// frees, CUPTI's MEMORY2 records by memory kind:
//   "memory": {"Device": {"alloc": N, "free": N, "free_at_exit": N, "alloc_bytes": N}, ...},
//   "pool_records": N, "exit_started": CUPTI timestamp
// where free_at_exit counts the frees made after the program's exit began (a
// library's own teardown: cuFFT frees its work area there).
// and the calls that allocate and free (runtime and driver API records, by
// name): "allocation_calls": {"cudaMalloc": N, ...}. The API records are on
// whenever memory is counted: without them CUPTI 13.0 delivered no free record
// for the frees made on threads that end before exit (simpleCallback's).
// CUPTI_COUNTER_MEMORY_LOG=path writes every MEMORY2 and MEMORY_POOL record
// there, one JSON object a line (what CUPTI gives for each allocation kind),
// and the allocation calls (name, correlation, start, end, thread): a record's
// correlation id names its call.
//
// Exit: CUDA's own atexit teardown can make later CUPTI calls crash, so the
// final flush runs from an atexit handler registered when the first context
// is created, i.e. after CUDA registered its own (handlers run in reverse
// order: ours first). A context destroyed before exit (cudaDeviceReset) is
// flushed when its destruction starts. The JSON is written once.
//
// A thread flushes every 50 ms from the first context on, so that CUPTI does
// not hold many buffers until exit.
//
// Build (scripts/build-corpus does it):
//   g++ -std=c++17 -O2 -shared -fPIC cupti_counter.cpp -I/usr/local/cuda/include
//       -L/usr/local/cuda/lib64 -lcupti -Wl,-rpath,/usr/local/cuda/lib64 -o libcupti_counter.so
#include <cupti.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include <unistd.h>

namespace {

std::mutex mu;
std::map<std::string, std::uint64_t> kernels;  // mangled name -> count
std::map<unsigned, std::uint64_t> memcpys;     // CUpti_ActivityMemcpyKind -> count
std::uint64_t memsets = 0;
std::uint64_t dropped = 0;
std::uint64_t contexts = 0;
bool flushed_at_exit = false;
const char* init_error = nullptr;  // the CUPTI call that failed at injection
struct memory_count {
  std::uint64_t alloc = 0, release = 0, alloc_bytes = 0;
  std::uint64_t release_at_exit = 0;  // of `release`, those made once the program's exit began
};
std::map<std::string, memory_count> memory;             // memory kind -> counts
std::map<std::string, std::uint64_t> allocation_calls;  // call name -> count
std::uint64_t pool_records = 0;
bool count_memory = false;
std::FILE* memory_log = nullptr;
std::atomic<bool> written{false};
std::atomic<bool> atexit_registered{false};
std::atomic<bool> stop_flushing{false};
std::thread flusher;
// CUPTI's timestamp when the program's exit began, 0 before: what a library
// frees in its own exit teardown comes after it.
std::atomic<std::uint64_t> exit_started{0};
CUpti_SubscriberHandle subscriber;

const char* copy_kind_name(unsigned kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOA: return "HtoA";
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOH: return "AtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOA: return "AtoA";
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOD: return "AtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOA: return "DtoA";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "DtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH: return "HtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return "PtoP";
    default: return "Unknown";
  }
}

const char* memory_kind_name(unsigned kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE: return "Pageable";
    case CUPTI_ACTIVITY_MEMORY_KIND_PINNED: return "Pinned";
    case CUPTI_ACTIVITY_MEMORY_KIND_DEVICE: return "Device";
    case CUPTI_ACTIVITY_MEMORY_KIND_ARRAY: return "Array";
    case CUPTI_ACTIVITY_MEMORY_KIND_MANAGED: return "Managed";
    case CUPTI_ACTIVITY_MEMORY_KIND_DEVICE_STATIC: return "Device Static";
    case CUPTI_ACTIVITY_MEMORY_KIND_MANAGED_STATIC: return "Managed Static";
    default: return "Unknown";
  }
}

// The calls that allocate or free memory, by the name CUPTI gives them
// (version suffixes cut): this counter's own list, not cuprof's.
bool is_allocation_call(std::string name) {
  const std::size_t v = name.rfind("_v");
  if (v != std::string::npos && v + 2 < name.size() && name.find_first_not_of("0123456789", v + 2) == std::string::npos)
    name.resize(v);
  static const char* const calls[] = {"cudaMalloc",
                                      "cudaFree",
                                      "cudaMallocAsync",
                                      "cudaFreeAsync",
                                      "cudaMallocFromPoolAsync",
                                      "cudaMallocManaged",
                                      "cudaMallocHost",
                                      "cudaHostAlloc",
                                      "cudaFreeHost",
                                      "cudaMallocPitch",
                                      "cudaMalloc3D",
                                      "cuMemAlloc",
                                      "cuMemFree",
                                      "cuMemAllocAsync",
                                      "cuMemFreeAsync",
                                      "cuMemAllocFromPoolAsync",
                                      "cuMemAllocManaged",
                                      "cuMemAllocHost",
                                      "cuMemHostAlloc",
                                      "cuMemFreeHost",
                                      "cuMemAllocPitch",
                                      "cuMemCreate",
                                      "cuMemRelease",
                                      "cuMemMap",
                                      "cuMemUnmap"};
  for (const char* c : calls)
    if (name == c) return true;
  return false;
}

// Counts an allocation call and, with the memory log on, logs it: its
// correlation id is the one its allocation's or free's record carries.
void count_call(CUpti_CallbackDomain domain, const CUpti_ActivityAPI& call) {
  const char* name = nullptr;
  if (cuptiGetCallbackName(domain, call.cbid, &name) != CUPTI_SUCCESS || !name) return;
  std::string n = name;
  if (!is_allocation_call(n)) return;
  const std::size_t v = n.rfind("_v");
  if (v != std::string::npos && v + 2 < n.size() && n.find_first_not_of("0123456789", v + 2) == std::string::npos) n.resize(v);
  ++allocation_calls[n];
  if (memory_log)
    std::fprintf(memory_log,
                 "{\"record\":\"call\",\"name\":\"%s\",\"correlation\":%u,\"start\":%llu,\"end\":%llu,\"thread\":%u}\n",
                 n.c_str(), call.correlationId, (unsigned long long)call.start, (unsigned long long)call.end, call.threadId);
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *size = 8 << 20;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, *size));
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t, size_t valid) {
  {
    std::lock_guard<std::mutex> lock(mu);
    CUpti_Activity* record = nullptr;
    while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
      switch (record->kind) {
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
          const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
          ++kernels[k->name ? k->name : "(null)"];
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY: ++memcpys[reinterpret_cast<const CUpti_ActivityMemcpy6*>(record)->copyKind]; break;
        case CUPTI_ACTIVITY_KIND_MEMCPY2: ++memcpys[reinterpret_cast<const CUpti_ActivityMemcpyPtoP4*>(record)->copyKind]; break;
        case CUPTI_ACTIVITY_KIND_MEMSET: ++memsets; break;
        case CUPTI_ACTIVITY_KIND_MEMORY2: {
          const auto* m = reinterpret_cast<const CUpti_ActivityMemory4*>(record);
          memory_count& c = memory[memory_kind_name(m->memoryKind)];
          if (m->memoryOperationType == CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION) ++c.alloc, c.alloc_bytes += m->bytes;
          else if (m->memoryOperationType == CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE) {
            ++c.release;
            const std::uint64_t exit_at = exit_started.load();
            if (exit_at && m->timestamp >= exit_at) ++c.release_at_exit;
          }
          if (memory_log)
            std::fprintf(memory_log,
                         "{\"record\":\"memory2\",\"op\":%u,\"kind\":\"%s\",\"correlation\":%u,\"address\":%llu,"
                         "\"bytes\":%llu,\"timestamp\":%llu,\"device\":%u,\"context\":%u,\"stream\":%u,\"async\":%u,"
                         "\"pool_type\":%u,\"pool_address\":%llu,\"pool_size\":%llu,\"pool_utilized\":%llu,"
                         "\"pool_threshold\":%llu}\n",
                         unsigned(m->memoryOperationType), memory_kind_name(m->memoryKind), m->correlationId,
                         (unsigned long long)m->address, (unsigned long long)m->bytes, (unsigned long long)m->timestamp,
                         m->deviceId, m->contextId, m->streamId, m->isAsync, unsigned(m->memoryPoolConfig.memoryPoolType),
                         (unsigned long long)m->memoryPoolConfig.address, (unsigned long long)m->memoryPoolConfig.pool.size,
                         (unsigned long long)m->memoryPoolConfig.utilizedSize,
                         (unsigned long long)m->memoryPoolConfig.releaseThreshold);
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMORY_POOL: {
          const auto* p = reinterpret_cast<const CUpti_ActivityMemoryPool3*>(record);
          ++pool_records;
          if (memory_log)
            std::fprintf(memory_log,
                         "{\"record\":\"pool\",\"op\":%u,\"type\":%u,\"correlation\":%u,\"device\":%u,\"address\":%llu,"
                         "\"size\":%llu,\"utilized\":%llu,\"threshold\":%llu,\"timestamp\":%llu,\"managed\":%u}\n",
                         unsigned(p->memoryPoolOperationType), unsigned(p->memoryPoolType), p->correlationId, p->deviceId,
                         (unsigned long long)p->address, (unsigned long long)p->size, (unsigned long long)p->utilizedSize,
                         (unsigned long long)p->releaseThreshold, (unsigned long long)p->timestamp, unsigned(p->isManagedPool));
          break;
        }
        case CUPTI_ACTIVITY_KIND_RUNTIME:
          count_call(CUPTI_CB_DOMAIN_RUNTIME_API, *reinterpret_cast<const CUpti_ActivityAPI*>(record));
          break;
        case CUPTI_ACTIVITY_KIND_DRIVER:
          count_call(CUPTI_CB_DOMAIN_DRIVER_API, *reinterpret_cast<const CUpti_ActivityAPI*>(record));
          break;
        default: break;
      }
    }
    size_t lost = 0;
    if (cuptiActivityGetNumDroppedRecords(ctx, stream, &lost) == CUPTI_SUCCESS) dropped += lost;
  }
  std::free(buffer);
}

void json_string(std::FILE* f, const std::string& s) {
  std::fputc('"', f);
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') std::fprintf(f, "\\%c", c);
    else if (c < 0x20) std::fprintf(f, "\\u%04x", c);
    else std::fputc(c, f);
  }
  std::fputc('"', f);
}

void write_json() {
  if (written.exchange(true)) return;
  const char* out = std::getenv("CUPTI_COUNTER_OUT");
  if (!out || !*out) return;
  // "%p" is the process id: every process of a multi-process run (torchrun's ranks) writes its own.
  std::string path = out;
  if (const std::size_t at = path.find("%p"); at != std::string::npos) path.replace(at, 2, std::to_string(getpid()));
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "cupti_counter: cannot write %s\n", path.c_str());
    return;
  }
  std::lock_guard<std::mutex> lock(mu);
  if (memory_log) std::fflush(memory_log);
  std::fprintf(f, "{\"kernels\": {");
  bool first = true;
  for (const auto& [name, n] : kernels) {
    std::fprintf(f, "%s\n  ", first ? "" : ",");
    json_string(f, name);
    std::fprintf(f, ": %llu", static_cast<unsigned long long>(n));
    first = false;
  }
  std::fprintf(f, "},\n \"memcpy\": {");
  first = true;
  for (const auto& [kind, n] : memcpys) {
    std::fprintf(f, "%s\"%s\": %llu", first ? "" : ", ", copy_kind_name(kind), static_cast<unsigned long long>(n));
    first = false;
  }
  std::fprintf(f, "},\n \"memcpy_by_enum\": {");
  first = true;
  for (const auto& [kind, n] : memcpys) {
    std::fprintf(f, "%s\"%u\": %llu", first ? "" : ", ", kind, static_cast<unsigned long long>(n));
    first = false;
  }
  std::fprintf(f, "},\n \"memset\": %llu, \"dropped\": %llu, \"contexts\": %llu, \"flushed_at_exit\": %s",
               static_cast<unsigned long long>(memsets), static_cast<unsigned long long>(dropped),
               static_cast<unsigned long long>(contexts), flushed_at_exit ? "true" : "false");
  if (count_memory) {
    std::fprintf(f, ",\n \"memory\": {");
    first = true;
    for (const auto& [kind, c] : memory) {
      std::fprintf(f, "%s\"%s\": {\"alloc\": %llu, \"free\": %llu, \"free_at_exit\": %llu, \"alloc_bytes\": %llu}",
                   first ? "" : ", ", kind.c_str(), (unsigned long long)c.alloc, (unsigned long long)c.release,
                   (unsigned long long)c.release_at_exit, (unsigned long long)c.alloc_bytes);
      first = false;
    }
    std::fprintf(f, "},\n \"pool_records\": %llu, \"exit_started\": %llu", (unsigned long long)pool_records,
                 (unsigned long long)exit_started.load());
    std::fprintf(f, ",\n \"allocation_calls\": {");
    first = true;
    for (const auto& [name, n] : allocation_calls) {
      std::fprintf(f, "%s\"%s\": %llu", first ? "" : ", ", name.c_str(), (unsigned long long)n);
      first = false;
    }
    std::fprintf(f, "}");
  }
  // The rank a launcher (torchrun, MPI, Slurm) gave the process, -1 for none.
  const char* rank = std::getenv("RANK");
  std::fprintf(f, ", \"pid\": %d, \"rank\": %d", int(getpid()), rank && *rank ? std::atoi(rank) : -1);
  std::fprintf(f, ", \"init_error\": ");
  if (init_error) json_string(f, init_error);
  else std::fprintf(f, "null");
  std::fprintf(f, "}\n");
  std::fclose(f);
}

void flush_periodically() {
  while (!stop_flushing.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (!stop_flushing.load()) cuptiActivityFlushAll(0);
  }
}

// Registered after CUDA's own handlers: runs before them.
void at_exit_flush() {
  stop_flushing.store(true);
  if (flusher.joinable()) flusher.join();
  if (written.load()) return;
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  {
    std::lock_guard<std::mutex> lock(mu);
    flushed_at_exit = true;
  }
  write_json();
}

// Marks when exit began. Registered again at every context creation and
// module load, as libraries set up their own teardown lazily (cuFFT at its
// first plan): the last one registered runs before all of theirs.
void mark_exit_start() {
  if (exit_started.load()) return;
  std::uint64_t now = 0;
  if (cuptiGetTimestamp(&now) == CUPTI_SUCCESS) exit_started.store(now);
}

void register_exit_mark() {
  static std::atomic<int> registrations{0};
  if (registrations.fetch_add(1) < 256) std::atexit(mark_exit_start);
}

// Registered at injection, before CUDA's: runs last, makes no CUPTI call.
// Writes what was counted when no context was ever created.
void at_exit_fallback() { write_json(); }

void CUPTIAPI on_resource(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void*) {
  if (domain != CUPTI_CB_DOMAIN_RESOURCE) return;
  if (cbid == CUPTI_CBID_RESOURCE_CONTEXT_CREATED) {
    {
      std::lock_guard<std::mutex> lock(mu);
      ++contexts;
    }
    if (!atexit_registered.exchange(true)) {
      std::atexit(at_exit_flush);
      flusher = std::thread(flush_periodically);
    }
    register_exit_mark();
  } else if (cbid == CUPTI_CBID_RESOURCE_MODULE_LOADED) {
    register_exit_mark();
  } else if (cbid == CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING) {
    // Not once the exit flush ran: CUDA's teardown destroys contexts after it.
    if (!written.load()) cuptiActivityFlushAll(0);
  }
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
  static std::atomic<bool> once{false};
  if (once.exchange(true)) return 1;
  const char* fail = nullptr;
  const char* memory_env = std::getenv("CUPTI_COUNTER_MEMORY");
  count_memory = memory_env && *memory_env && *memory_env != '0';
  if (const char* log = std::getenv("CUPTI_COUNTER_MEMORY_LOG"); count_memory && log && *log) memory_log = std::fopen(log, "w");
  if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS) fail = "register callbacks";
  else if (cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) fail = "enable kernels";
  else if (cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY) != CUPTI_SUCCESS) fail = "enable memcpy";
  else if (cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY2) != CUPTI_SUCCESS) fail = "enable memcpy2";
  else if (cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET) != CUPTI_SUCCESS) fail = "enable memset";
  else if (count_memory && cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMORY2) != CUPTI_SUCCESS) fail = "enable memory2";
  else if (count_memory && cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMORY_POOL) != CUPTI_SUCCESS) fail = "enable memory pool";
  else if (count_memory && cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME) != CUPTI_SUCCESS) fail = "enable runtime";
  else if (count_memory && cuptiActivityEnable(CUPTI_ACTIVITY_KIND_DRIVER) != CUPTI_SUCCESS) fail = "enable driver";
  else if (cuptiSubscribe(&subscriber, on_resource, nullptr) != CUPTI_SUCCESS) fail = "subscribe";
  else if (cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_CONTEXT_CREATED) != CUPTI_SUCCESS)
    fail = "enable context-created callback";
  else if (cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING) !=
           CUPTI_SUCCESS)
    fail = "enable context-destroy callback";
  else if (cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_MODULE_LOADED) != CUPTI_SUCCESS)
    fail = "enable module-loaded callback";
  if (fail) {
    init_error = fail;
    std::fprintf(stderr, "cupti_counter: %s failed\n", fail);
  }
  std::atexit(at_exit_fallback);
  return 1;
}
