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
#pragma once

#include "../../config.hpp"

#include <dlfcn.h>
#include <sched.h>
#include <sys/auxv.h>
#include <time.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
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
  // Gives `b` a fresh chunk to write; false when the CPU event cap is reached.
  bool (*next_chunk)(thread_buffer& b) noexcept;
  // A scope name was cut to fit a chunk (said once per process).
  void (*name_cut)() noexcept;
};

// A (ticks, monotonic ns, realtime ns) sample taken as close together as we can.
struct clock_sample {
  std::uint64_t ticks = 0;
  std::uint64_t mono_ns = 0;
  std::uint64_t real_ns = 0;
};

// Bumped whenever process_state, runtime_hooks or the thread buffers change
// layout: copies of different layouts then never meet (each keeps its own).
constexpr int process_state_abi = 1;
#define CUPROF_PROCESS_STATE_VARIABLE "CUPROF_PROCESS_STATE_1"

struct process_state {
  std::atomic<bool> cpu_recording{false};  // scopes record only while set
  std::atomic<bool> use_tsc{false};        // decided once, before recording first starts
  std::atomic<const runtime_hooks*> hooks{nullptr};
  std::atomic<void*> runtime_objects{nullptr};  // detail::runtime::objects of the installing copy
  std::atomic<int> anchor_state{0};  // 0 none, 1 being taken, 2 taken
  clock_sample anchor;
  std::atomic<const void*> running_profile{nullptr};  // the one profile recording
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
  std::atomic<void (*)()> before_exit{nullptr};  // the environment's profile writes from the exit gate  // "tracing CUDA" / "CUDA tracing is off" once per process
  std::atomic<bool> abnormal_exits_handled{false};
};

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
}  // namespace process_state_key

// Finds the process's state, or creates and publishes it. Never fails: without
// memory the copy stays detached and records nothing.
CUPROF_NOINLINE inline process_state* find_or_create_process_state() noexcept {
  char value[64];
  const int prefix = process_state_key::image_prefix(value);
  if (const char* found = std::getenv(CUPROF_PROCESS_STATE_VARIABLE)) {
    bool same_image = true;
    for (int i = 0; i < prefix && same_image; ++i) same_image = found[i] == value[i];
    if (same_image) {
      std::uintptr_t address = 0;
      for (const char* p = found + prefix; *p; ++p) {
        const char c = *p;
        address = address * 16 + std::uintptr_t(c <= '9' ? c - '0' : c - 'a' + 10);
      }
      if (address) return reinterpret_cast<process_state*>(address);
    }
  }
  auto* state = new (std::nothrow) process_state;
  if (!state) return &g_detached_state;
  int n = prefix;
  const auto address = reinterpret_cast<std::uintptr_t>(state);
  for (int shift = int(sizeof address * 8) - 4; shift >= 0; shift -= 4)
    value[n++] = process_state_key::hex_digits[(address >> shift) & 15];
  value[n] = '\0';
  ::setenv(CUPROF_PROCESS_STATE_VARIABLE, value, 1);
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

}  // namespace cuprof::detail
