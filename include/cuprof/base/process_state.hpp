// One cuprof runtime per process, however many copies of cuprof's headers the
// process links: an executable and shared libraries that each annotate their
// code, hidden or default visibility, dlopen'ed plugins, the `cuprof run`
// injection library. Inline variables are per copy when symbols are hidden
// (and per dlopen'ed library with RTLD_LOCAL), so whatever must be one per
// process lives in one process_state that every copy finds:
//   - the switch scopes read, the clock they stamp with, the clock anchor;
//   - the runtime's hooks (thread buffers, chunks), so that a file that only
//     annotates compiles none of the runtime;
//   - the slot of the one running profile, and the environment's profile.
//
// Copies find it through the environment variable CUPROF_PROCESS_STATE_<abi>,
// whose value "<image>:<address>" names the process image (the kernel's 16
// random bytes of AT_RANDOM, new at every exec, the same after fork, whose
// copy of the state is valid) and where the state lives. A variable inherited
// across exec names another image and is ignored. Copies join while the
// dynamic loader runs their static initialisers, which it serialises, so two
// copies never create the state at once.
//
// The variable is a hint, never trusted: a value must be exactly this image's
// prefix and 16 lowercase hex digits of a non-null aligned address whose first
// bytes, read through the kernel so that a bad address fails instead of
// faulting, are the state's mark. And a program may clear its environment
// (clearenv(), unsetenv()) before a plugin with cuprof is opened: the state
// lives in a private mapping of a memfd named for the ABI, which
// /proc/self/maps lists by that name, so a copy that finds no valid variable
// looks there before it creates a state, and publishes the variable again. A
// forked child keeps both the mapping (its own copy, being private) and the
// variable; an exec drops the mapping.
#pragma once

#include "config.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>

namespace cuprof::detail {

class thread_buffer;

// What the runtime does for every copy; code in the module that installed it,
// which then stays loaded for the life of the process.
struct runtime_hooks {
  // The calling thread's buffer, registered on its first use; null without
  // memory. Each copy that caches it calls release_thread when the thread ends.
  thread_buffer* (*acquire_thread)() noexcept;
  void (*release_thread)(thread_buffer*) noexcept;
  // Gives `b` a fresh chunk to write, of at least `needed` slots; false when
  // the CPU event cap is reached.
  bool (*next_chunk)(thread_buffer& b, std::size_t needed) noexcept;
  // A scope name was cut to fit a chunk (said once per process).
  void (*name_cut)() noexcept;
  // The calling thread's buffer if it has one, without registering it.
  thread_buffer* (*registered_thread)() noexcept;
};

// What process_state::on_nvtx_range hands over. `message` is not terminated
// where NVTX's registered strings are kept: use `length`; null for a pop, an
// end, or a range whose message is neither ASCII nor a registered string.
// `domain`: the handle, 0 for NVTX's default domain; for domain_created, the
// new domain's, with its name as the message. `id`: a started range's id, or
// the id an end names (0 for pushes and pops).
struct nvtx_range_event {
  enum kind_t : std::uint8_t { push, start, pop, end, domain_created } kind = push;
  const char* message = nullptr;
  std::size_t length = 0;
  std::uintptr_t domain = 0;
  std::uint64_t id = 0;
};

// A (ticks, monotonic ns, realtime ns) sample taken as close together as we can.
struct clock_sample {
  std::uint64_t ticks = 0, mono_ns = 0, real_ns = 0;
};

// Bumped whenever process_state, runtime_hooks or the thread buffers change
// layout: copies of different layouts then never meet (each keeps its own).
constexpr int process_state_abi = 5;
#define CUPROF_PROCESS_STATE_VARIABLE "CUPROF_PROCESS_STATE_5"
#define CUPROF_PROCESS_STATE_MAPPING "cuprof_process_state_5"

// The first 8 bytes of every process state: an address is taken for a state
// only where they are (an arbitrary 64-bit value, unlikely anywhere else).
constexpr std::uint64_t process_state_magic = 0x8f3d6b2a51c97e04ull;

struct process_state {
  // process_state_magic in a published state (create()), read before the rest
  // is trusted; 0 in a copy's detached state, which is never looked up.
  std::uint64_t magic = 0;
  std::atomic<bool> cpu_recording{false};  // scopes record only while set
  std::atomic<bool> use_tsc{false};        // decided once, before recording first starts
  std::atomic<const runtime_hooks*> hooks{nullptr};
  std::atomic<void*> runtime_objects{nullptr};  // detail::runtime::objects of the installing copy
  std::atomic<int> anchor_state{0};             // 0 none, 1 being taken, 2 taken
  clock_sample anchor;
  std::atomic<const void*> running_profile{nullptr};     // the one profile recording
  std::atomic<bool> environment_profile_claimed{false};  // CUPROF_TRACE's profile started by some copy
  // The one CUPTI tracer (one subscriber per process), opened by the first
  // copy that asks: 0 not yet, 1 being opened, 2 done (tracer set, or the
  // reason it could not be in tracer_failure).
  std::atomic<int> tracer_state{0};
  std::atomic<void*> tracer{nullptr};
  char tracer_failure[512] = {};
  std::atomic<bool> cuda_status_said{false};
  std::atomic<bool> inside_cuda_init{false};  // set by the injection library during the driver's InitializeInjection
  std::atomic<bool> forked_child{false};      // CUPTI has no worker thread in a forked child
  std::atomic<void (*)()> before_exit{
      nullptr};  // the environment's profile writes from the exit gate  // "tracing CUDA" / "CUDA tracing is off" once per process
  std::atomic<bool> abnormal_exits_handled{false};
  // Scope exits dropped because they ran on another thread than their enter
  // (or after that thread had exited): reported with the next window's drops.
  std::atomic<std::uint64_t> dropped_scope_exits{0};
  // Called for every NVTX range pushed, started, popped or ended in a domain
  // other than "cuprof", and for every domain created, on the thread that
  // makes the call, from CUPTI's NVTX callback (cupti/nvtx_recorder.hpp),
  // while CUPTI is attached and NVTX reaches it (NVTX_INJECTION64_PATH). Null
  // by default; set by the runtime (a window at a program step, a capture
  // range). It runs inside the program's NVTX call: it must be quick, must not
  // throw, and must not push NVTX ranges itself. Read with a relaxed load.
  std::atomic<void (*)(const nvtx_range_event& event)> on_nvtx_range{nullptr};
  // Called at the entry of cudaProfilerStart/Stop and cuProfilerStart/Stop
  // (`start`: which), on the calling thread, from CUPTI's callback, while
  // CUPTI is attached, recording or not: a capture range the program defines.
  // The same rules as on_nvtx_range.
  std::atomic<void (*)(bool start)> on_profiler_api{nullptr};
};
static_assert(offsetof(process_state, magic) == 0, "the mark is read at the state's address");

// Runs `init` once per process, by whichever copy and thread gets here first;
// the others wait until it returned. `state`: 0 not yet, 1 running, 2 done.
template <class Init>
void once_per_process(std::atomic<int>& state, Init&& init) {
  int expected = 0;
  if (state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
    init();
    state.store(2, std::memory_order_release);
    return;
  }
  while (state.load(std::memory_order_acquire) != 2) ::sched_yield();
}

// The state of a copy that has not joined (a scope in a static initialiser
// that runs before its file's copy joined): nothing records.
inline process_state g_detached_state;

namespace process_state_key {
inline constexpr char hex_digits[] = "0123456789abcdef";
constexpr int address_digits = 2 * int(sizeof(std::uintptr_t));

// "<32 hex digits of AT_RANDOM>:" into out; returns the length written.
inline int image_prefix(char* out) noexcept {
  const auto* random = reinterpret_cast<const unsigned char*>(::getauxval(AT_RANDOM));
  int n = 0;
  for (int i = 0; i < 16; ++i) {
    const unsigned char b = random ? random[i] : 0;
    out[n++] = hex_digits[b >> 4];
    out[n++] = hex_digits[b & 15];
  }
  out[n++] = ':';
  return n;
}

// Copies n bytes at `from` into `to` through a pipe: the kernel says EFAULT
// where they are not mapped or not readable, where a plain read would fault.
inline bool read_without_faulting(std::uintptr_t from, void* to, std::size_t n) noexcept {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return false;
  const bool ok = ::write(fds[1], reinterpret_cast<const void*>(from), n) == ssize_t(n) && ::read(fds[0], to, n) == ssize_t(n);
  ::close(fds[0]);
  ::close(fds[1]);
  return ok;
}

// The state at `address`, or null where none is: null, misaligned, unreadable or unmarked.
inline process_state* state_at(std::uintptr_t address) noexcept {
  if (!address || address % alignof(process_state) != 0) return nullptr;
  std::uint64_t magic = 0;
  if (!read_without_faulting(address, &magic, sizeof magic) || magic != process_state_magic) return nullptr;
  return reinterpret_cast<process_state*>(address);
}

// The state a variable's value names: exactly `prefix` (this image's), then
// address_digits lowercase hex digits, as publish() writes them.
inline process_state* parse(const char* value, const char* prefix, int prefix_length) noexcept {
  for (int i = 0; i < prefix_length; ++i)
    if (value[i] != prefix[i]) return nullptr;  // a shorter value stops at its NUL
  const char* p = value + prefix_length;
  std::uintptr_t address = 0;
  for (int i = 0; i < address_digits; ++i, ++p) {
    const char c = *p;
    const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (digit < 0) return nullptr;
    address = address << 4 | std::uintptr_t(digit);
  }
  return *p ? nullptr : state_at(address);
}

// The state's mapping, looked up by its name in /proc/self/maps: found
// however the environment was changed. Reads in fixed blocks, allocating nothing.
inline process_state* find_mapped() noexcept {
  const int fd = ::open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return nullptr;
  static constexpr char name[] = " /memfd:" CUPROF_PROCESS_STATE_MAPPING;
  constexpr std::size_t name_length = sizeof name - 1;
  char block[4096];
  std::size_t have = 0;
  bool skipping = false;  // inside a line longer than the block, which is not the state's
  process_state* state = nullptr;
  for (;;) {
    const ssize_t got = ::read(fd, block + have, sizeof block - have);
    if (got <= 0) break;
    have += std::size_t(got);
    std::size_t start = 0;
    while (!state) {
      auto* end = static_cast<char*>(std::memchr(block + start, '\n', have - start));
      if (!end) break;
      const char* line = block + start;
      const std::size_t length = std::size_t(end - line);
      start += length + 1;
      if (skipping) {
        skipping = false;
        continue;
      }
      // "<start>-<end> <perms> <offset> <dev> <inode>   /memfd:<name> (deleted)"
      const char* at = static_cast<const char*>(::memmem(line, length, name, name_length));
      if (!at || (at + name_length != end && at[name_length] != ' ')) continue;
      std::uintptr_t address = 0;
      const char* p = line;
      for (; p < end && *p != '-'; ++p) {
        const char c = *p;
        const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (digit < 0) break;
        address = address << 4 | std::uintptr_t(digit);
      }
      if (p < end && *p == '-') state = state_at(address);
    }
    if (state) break;
    std::memmove(block, block + start, have - start);
    have -= start;
    if (have == sizeof block) {
      have = 0;
      skipping = true;
    }
  }
  ::close(fd);
  return state;
}

inline process_state* marked(process_state* state) noexcept {
  if (state) state->magic = process_state_magic;
  return state;
}

// LeakSanitizer scans globals, stacks and the heap, not a mapping of our own:
// what only the state points to (the runtime's objects) would be reported as
// leaked at exit in a program built with -fsanitize=address.
#if defined(__SANITIZE_ADDRESS__)
extern "C" void __lsan_register_root_region(const void* p, std::size_t size);
inline void register_leak_root(const void* at, std::size_t size) noexcept { __lsan_register_root_region(at, size); }
#else
inline void register_leak_root(const void*, std::size_t) noexcept {}
#endif

// A new state in a private mapping of a memfd named CUPROF_PROCESS_STATE_MAPPING
// (find_mapped's channel), or on the heap where memfds are not to be had.
inline process_state* create() noexcept {
#if defined(SYS_memfd_create) && defined(MFD_CLOEXEC)
  const long page = ::sysconf(_SC_PAGESIZE);
  const std::size_t size =
      page > 0 ? (sizeof(process_state) + std::size_t(page) - 1) / std::size_t(page) * std::size_t(page) : sizeof(process_state);
  const int fd = int(::syscall(SYS_memfd_create, CUPROF_PROCESS_STATE_MAPPING, unsigned(MFD_CLOEXEC)));
  if (fd >= 0) {
    void* at = MAP_FAILED;
    if (::ftruncate(fd, off_t(size)) == 0) at = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    ::close(fd);
    if (at != MAP_FAILED) {
      register_leak_root(at, size);
      return marked(new (at) process_state);
    }
  }
#endif
  return marked(new (std::nothrow) process_state);
}

// Sets the variable to "<prefix><address>"; `value` holds the prefix already.
inline void publish(char* value, int prefix_length, const process_state* state) noexcept {
  int n = prefix_length;
  const auto address = reinterpret_cast<std::uintptr_t>(state);
  for (int shift = address_digits * 4 - 4; shift >= 0; shift -= 4) value[n++] = hex_digits[(address >> shift) & 15];
  value[n] = '\0';
  ::setenv(CUPROF_PROCESS_STATE_VARIABLE, value, 1);
}
}  // namespace process_state_key

// Finds the process's state, or creates and publishes it. Never fails: without
// memory the copy stays detached and records nothing.
CUPROF_NOINLINE inline process_state* find_or_create_process_state() noexcept {
  char value[64];
  const int prefix = process_state_key::image_prefix(value);
  if (const char* found = std::getenv(CUPROF_PROCESS_STATE_VARIABLE))
    if (process_state* state = process_state_key::parse(found, value, prefix)) return state;
  // No valid variable: none was published yet, or the program cleared or
  // overwrote it after a copy did; the mapping tells the two apart.
  process_state* state = process_state_key::find_mapped();
  if (!state) state = process_state_key::create();
  if (!state) return &g_detached_state;
  process_state_key::publish(value, prefix, state);
  return state;
}

// This copy's view of the process state: joined while static initialisers
// run (below), or at the latest when this copy's runtime first needs it.
inline process_state* g_process = &g_detached_state;

inline process_state& process() noexcept {
  if (CUPROF_UNLIKELY(g_process == &g_detached_state)) g_process = find_or_create_process_state();
  return *g_process;
}

inline const bool g_process_joined = (process(), true);

// A static scope's name is kept as a pointer into the module that holds it
// until the trace is written, and the runtime's hooks are code in the module
// that installed them: a module with cuprof's headers stays loaded for the
// life of the process (dlclose leaves it mapped). Once per module, since the
// variable is hidden: `inside` is an address in this module.
inline bool pin_module_of(const void* inside) noexcept {
  Dl_info info{};
  if (::dladdr(inside, &info) && info.dli_fname && *info.dli_fname)
    ::dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
  return true;
}
#if defined(__GNUC__)
__attribute__((visibility("hidden"))) inline const bool g_module_pinned = pin_module_of(&g_module_pinned);
#endif

inline std::uint64_t monotonic_ns() noexcept {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return std::uint64_t(ts.tv_sec) * 1000000000ull + std::uint64_t(ts.tv_nsec);
}

// Ticks: the TSC when the runtime found it invariant (about half the cost of
// clock_gettime), CLOCK_MONOTONIC nanoseconds otherwise. Every copy stamps
// with the same clock, since their stamps share buffers.
inline std::uint64_t now_ticks() noexcept {
#if defined(__x86_64__)
  if (CUPROF_LIKELY(g_process->use_tsc.load(std::memory_order_relaxed))) return __builtin_ia32_rdtsc();
#endif
  return monotonic_ns();
}

// now_ticks(), read in program order with the memory accesses around it: the
// TSC read is not ordered with loads and stores, so a reading taken just
// after a store could be older than the store, or one taken just before a
// load newer than the load. The call horizon depends on both (a call's
// published start against a drain's clock, cupti/call_recorder.hpp).
// monotonic_ns() reads the TSC in order already.
inline std::uint64_t now_ticks_ordered() noexcept {
#if defined(__x86_64__)
  if (CUPROF_LIKELY(g_process->use_tsc.load(std::memory_order_relaxed))) {
    __builtin_ia32_lfence();
    const std::uint64_t t = __builtin_ia32_rdtsc();
    __builtin_ia32_lfence();
    return t;
  }
#endif
  return monotonic_ns();
}

}  // namespace cuprof::detail
