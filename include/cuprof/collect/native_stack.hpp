// Native call stacks at the CUDA calls cuprof shows (profile_options::with_stack):
// captured on the calling thread inside CUPTI's callback, kept once per thread.
//
// The unwinder is libunwind's unw_backtrace where libunwind is installed, else
// glibc's backtrace(). Both unwind by the DWARF call frame information, which
// CUDA's libraries have where they have no frame pointers; unw_backtrace caches
// what it decoded per return address, backtrace() decodes every frame afresh:
// 99 against 1,522 ns for 8 frames, 469 against 5,578 for 56 (bench/run stacks).
//
// A thread keeps the stacks it captured in a table of its own (no lock, and
// nothing allocated for a stack seen before): a call then carries the small id
// of its stack, and only a stack new to the thread is published, once, in the
// thread's call buffer ahead of the call that uses it (cupti/call_recorder.hpp).
// Stacks of different threads are merged where the buffers are drained, off
// the hot path (cupti/stack_store.hpp).
#pragma once

#include "../base/config.hpp"
#include "../base/dynamic_library.hpp"

#include <execinfo.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <vector>

namespace cuprof::detail {

// Frames kept per stack, innermost first. Deeper stacks lose their outermost
// frames (a Python interpreter's, typically).
constexpr std::size_t max_stack_frames = 64;

using unwind_function = int (*)(void** frames, int size);

inline int glibc_backtrace(void** frames, int size) { return ::backtrace(frames, size); }

// The unwinder, found once: libunwind (dlopen'ed, so a machine without it
// still runs), else glibc's. Called once here, off the hot path: backtrace()
// loads libgcc_s at its first call, and libunwind sets up its caches.
#if defined(__SANITIZE_THREAD__)
inline constexpr bool libunwind_usable = false;  // unw_backtrace segfaults walking past ThreadSanitizer's thread start
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
inline constexpr bool libunwind_usable = false;
#else
inline constexpr bool libunwind_usable = true;
#endif
#else
inline constexpr bool libunwind_usable = true;
#endif

inline unwind_function stack_unwinder() {
  static const unwind_function chosen = [] {
    unwind_function f = nullptr;
    if (void* lib = libunwind_usable ? open_first({"libunwind.so.8"}) : nullptr) bind(lib, f, "unw_backtrace");
    if (!f) f = &glibc_backtrace;
    void* warm[max_stack_frames];
    f(warm, int(max_stack_frames));
    return f;
  }();
  return chosen;
}

// FNV-1a over the return addresses: the per-thread table's key.
inline std::uint64_t stack_hash(const std::uint64_t* frames, std::size_t n) noexcept {
  std::uint64_t h = 1469598103934665603ull;
  for (std::size_t i = 0; i < n; ++i) h = (h ^ frames[i]) * 1099511628211ull;
  return h ^ n;
}

// One thread's distinct stacks, by their frames: open addressing on the hash,
// the frames kept for an exact compare. Only its thread touches it.
class thread_stacks {
 public:
  static constexpr std::uint32_t none = 0xFFFFFFFFu;

  // The id of the stack `frames`, or none when the thread has not kept it.
  std::uint32_t find(std::uint64_t hash, const std::uint64_t* frames, std::size_t n) const noexcept {
    if (slots_.empty()) return none;
    const std::size_t mask = slots_.size() - 1;
    for (std::size_t i = std::size_t(hash) & mask;; i = (i + 1) & mask) {
      const entry& e = slots_[i];
      if (e.depth == 0) return none;
      if (e.hash == hash && e.depth == n && std::memcmp(&frames_[e.first], frames, n * sizeof *frames) == 0) return e.id;
    }
  }

  // Keeps a stack not kept yet as id count(); false without memory.
  bool add(std::uint64_t hash, const std::uint64_t* frames, std::size_t n) noexcept {
    if (n == 0) return false;
    try {
      if (2 * (count_ + 1) > slots_.size()) grow();
      const std::size_t first = frames_.size();
      frames_.insert(frames_.end(), frames, frames + n);
      place({hash, std::uint32_t(first), std::uint32_t(n), count_});
      ++count_;
      return true;
    } catch (...) {
      return false;
    }
  }

  std::uint32_t count() const noexcept { return count_; }

  // Forgets every stack, keeping the memory: a new recording's ids start at 0.
  void clear() noexcept {
    frames_.clear();
    for (entry& e : slots_) e = entry{};
    count_ = 0;
  }

  // Which recording the ids belong to (call_recorder's stack epoch).
  std::uint32_t epoch = 0;

 private:
  struct entry {
    std::uint64_t hash = 0;
    std::uint32_t first = 0;
    std::uint32_t depth = 0;  // 0: free
    std::uint32_t id = 0;
  };

  void place(const entry& e) noexcept {
    const std::size_t mask = slots_.size() - 1;
    std::size_t i = std::size_t(e.hash) & mask;
    while (slots_[i].depth != 0) i = (i + 1) & mask;
    slots_[i] = e;
  }

  void grow() {
    std::vector<entry> old(slots_.empty() ? 64 : slots_.size() * 2);
    old.swap(slots_);
    for (const entry& e : old)
      if (e.depth != 0) place(e);
  }

  std::vector<std::uint64_t> frames_;
  std::vector<entry> slots_;  // a power of two, at most half full
  std::uint32_t count_ = 0;
};

// The calling thread's stack, innermost first, into `frames` (max_stack_frames
// of them); how many were written.
CUPROF_NOINLINE inline std::size_t capture_stack(unwind_function unwind, std::uint64_t* frames) noexcept {
  static_assert(sizeof(void*) == sizeof(std::uint64_t), "frames are 64-bit addresses");
  const int n = unwind(reinterpret_cast<void**>(frames), int(max_stack_frames));
  return n > 0 ? std::size_t(n) : 0;
}

}  // namespace cuprof::detail
