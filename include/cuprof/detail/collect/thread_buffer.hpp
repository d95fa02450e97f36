// The runtime side of scope recording (scope_buffer.hpp is the hot path):
// the pool of chunks, the registry of every thread that recorded, and the
// hooks through which every copy of cuprof in the process reaches them. The
// first copy whose runtime starts installs them in the process state; later
// copies use those, so that one session sees every copy's scopes.
#pragma once

#include "scope_buffer.hpp"
#include "../env.hpp"
#include "../log.hpp"
#include "../../config.hpp"

#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <new>
#include <string>
#include <vector>

namespace cuprof::detail {

// How many of the n slots at s hold whole records stamped at or before
// `limit_ticks`. A thread's stamps only grow, so the first later record ends it.
inline std::size_t records_until(const slot* s, std::size_t n, std::uint64_t limit_ticks) noexcept {
  std::size_t i = 0;
  while (i < n && ticks_of(s[i]) <= limit_ticks) i += record_slots(s[i]);
  return i;
}

// CUPROF_MAX_CPU_EVENTS caps the slots that all threads' buffers hold between
// windows (a scope's enter and exit take one slot each, a dynamic name one more
// per 16 bytes), rounded up to whole chunks; past it records are dropped and
// counted. The default, 16 Mi slots (2,048 chunks, 256 MiB), keeps some 8 M
// scopes per window, seconds of the busiest scope loops, and is the same count
// as CUPROF_MAX_RECORDS's default for GPU records.
constexpr std::size_t default_max_cpu_slots = std::size_t(16) << 20;
inline std::size_t max_cpu_chunks() {
  const std::size_t slots =
      use_setting(read_record_cap("CUPROF_MAX_CPU_EVENTS", std::getenv("CUPROF_MAX_CPU_EVENTS"), default_max_cpu_slots));
  return slots / chunk_slots + (slots % chunk_slots != 0);
}

class chunk_pool {
 public:
  // A thread's next chunk, or null once the chunks in use reached the cap.
  // The cap is checked without the lock, so that a thread past it drops its
  // records without waiting on one; racing threads may pass it by one chunk each.
  chunk* acquire() noexcept {
    if (in_use_.load(std::memory_order_relaxed) >= max_chunks_.load(std::memory_order_relaxed)) return nullptr;
    return acquire_uncapped();
  }
  // A thread's first chunk: the cap never refuses it, so that every thread can
  // register and count what it drops (memory stays within the cap plus one
  // chunk per thread).
  chunk* acquire_uncapped() noexcept {
    chunk* c = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!free_.empty()) {
        c = free_.back();
        free_.pop_back();
      }
    }
    if (!c) {
      c = new (std::nothrow) chunk;
      if (!c) return nullptr;
      allocated_.fetch_add(1, std::memory_order_relaxed);
    }
    in_use_.fetch_add(1, std::memory_order_relaxed);
    return c;
  }
  void release(chunk* c) noexcept {
    c->count.store(0, std::memory_order_relaxed);
    c->next.store(nullptr, std::memory_order_relaxed);
    in_use_.fetch_sub(1, std::memory_order_relaxed);
    std::lock_guard<std::mutex> lock(mutex_);
    try {
      free_.push_back(c);
    } catch (...) {
      allocated_.fetch_sub(1, std::memory_order_relaxed);
      delete c;
    }
  }
  // Held across fork() (runtime::before_fork), so a child never inherits it locked.
  void lock_for_fork() noexcept { mutex_.lock(); }
  void unlock_after_fork() noexcept { mutex_.unlock(); }
  void set_max_chunks(std::size_t n) noexcept { max_chunks_.store(n, std::memory_order_relaxed); }
  std::size_t max_chunks() const noexcept { return max_chunks_.load(std::memory_order_relaxed); }
  std::size_t allocated() const noexcept { return allocated_.load(std::memory_order_relaxed); }

 private:
  std::mutex mutex_;
  std::vector<chunk*> free_;
  std::atomic<std::size_t> allocated_{0};
  std::atomic<std::size_t> in_use_{0};
  std::atomic<std::size_t> max_chunks_{default_max_cpu_slots / chunk_slots};
};

// Every thread that ever recorded a scope, so collection can reach them all.
class thread_registry {
 public:
  thread_buffer* add(chunk_pool& pool, std::uint32_t tid, pthread_t handle) noexcept {
    chunk* first = pool.acquire_uncapped();
    if (!first) return nullptr;
    auto* buffer = new (std::nothrow) thread_buffer(tid, handle, first);
    if (!buffer) {
      pool.release(first);
      return nullptr;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    try {
      buffers_.push_back(buffer);
    } catch (...) {
      delete buffer;
      return nullptr;
    }
    return buffer;
  }

  void lock_for_fork() noexcept { mutex_.lock(); }
  void unlock_after_fork() noexcept { mutex_.unlock(); }

  // fn(thread_buffer&) for each buffer; buffers of exited threads are freed
  // once fn has drained them.
  template <class Fn>
  void for_each(Fn&& fn) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = buffers_.begin(); it != buffers_.end();) {
      thread_buffer* b = *it;
      const bool was_exited = b->exited();
      fn(*b);
      if (was_exited) {
        delete b;
        it = buffers_.erase(it);
      } else {
        ++it;
      }
    }
  }

 private:
  std::mutex mutex_;
  std::vector<thread_buffer*> buffers_;
};

inline std::uint32_t current_tid() noexcept { return std::uint32_t(::syscall(SYS_gettid)); }

// Set once a name was cut; tests clear it to see the message again.
inline std::atomic<bool> g_said_name_cut{false};

namespace runtime {

// The installing copy's record of each thread's one buffer.
inline thread_local thread_buffer* t_thread_buffer = nullptr;

struct objects {
  chunk_pool pool;
  thread_registry threads;
};
inline objects& installed() noexcept { return *static_cast<objects*>(process().runtime_objects.load(std::memory_order_acquire)); }
inline chunk_pool& pool() noexcept { return installed().pool; }
inline thread_registry& threads() noexcept { return installed().threads; }

inline thread_buffer* acquire_thread() noexcept {
  thread_buffer* b = t_thread_buffer;
  if (!b) b = t_thread_buffer = threads().add(pool(), current_tid(), pthread_self());
  if (b) ++b->users;
  return b;
}

inline void release_thread(thread_buffer* b) noexcept {
  if (--b->users) return;
  t_thread_buffer = nullptr;
  b->mark_exited();
}

inline bool next_chunk(thread_buffer& b) noexcept {
  chunk* fresh = pool().acquire();
  if (!fresh) {
    b.count_dropped();
    return false;
  }
  b.continue_in(fresh);
  return true;
}

inline void name_cut() noexcept {
  if (!g_said_name_cut.exchange(true, std::memory_order_relaxed))
    log_line("a scope name longer than " + std::to_string(max_dynamic_name) +
             " bytes was cut to that length (said once; later ones are cut too)");
}

// A child forked while another thread held the pool's or the registry's lock
// would wait on it forever at its first scope that needs a chunk: fork()
// waits for both locks (in the order for_each takes them) and releases them
// on both sides.
inline void before_fork() noexcept {
  threads().lock_for_fork();
  pool().lock_for_fork();
}
inline void after_fork() noexcept {
  pool().unlock_after_fork();
  threads().unlock_after_fork();
}

inline constexpr runtime_hooks hooks{&acquire_thread, &release_thread, &next_chunk, &name_cut};

}  // namespace runtime

// Installs this copy's runtime for the whole process unless a copy did
// already: the first to install wins, the others use its objects and hooks
// (its module stays loaded: process_state.hpp).
// Called before recording first starts, and only where the runtime is
// compiled (a copy that only annotates never calls it).
inline void install_runtime() {
  process_state& p = process();
  if (p.hooks.load(std::memory_order_acquire)) return;
  auto* mine = new runtime::objects;  // never destroyed: threads may record during exit
  void* expected = nullptr;
  if (p.runtime_objects.compare_exchange_strong(expected, mine, std::memory_order_acq_rel)) {
    p.hooks.store(&runtime::hooks, std::memory_order_release);
    ::pthread_atfork(&runtime::before_fork, &runtime::after_fork, &runtime::after_fork);
    return;
  }
  delete mine;
  while (!p.hooks.load(std::memory_order_acquire)) ::sched_yield();  // another copy is publishing its hooks
}

inline chunk_pool& global_chunk_pool() {
  install_runtime();
  return runtime::pool();
}

inline thread_registry& global_thread_registry() {
  install_runtime();
  return runtime::threads();
}

inline thread_buffer::~thread_buffer() {
  chunk* c = read_chunk_;
  while (c) {
    chunk* next = c->next.load(std::memory_order_acquire);
    runtime::pool().release(c);
    c = next;
  }
}

template <class Take>
void thread_buffer::drain(Take&& take) {
  for (;;) {
    if (!offer(take, read_chunk_->count.load(std::memory_order_acquire))) return;
    chunk* next = read_chunk_->next.load(std::memory_order_acquire);
    if (!next) return;
    // The owner set `next` after its last write to this chunk: re-read the
    // count once more so nothing published just before is lost.
    if (!offer(take, read_chunk_->count.load(std::memory_order_acquire))) return;
    runtime::pool().release(read_chunk_);
    read_chunk_ = next;
    read_index_ = 0;
  }
}

inline void thread_buffer::discard_until(std::uint64_t limit_ticks) {
  drain([&](const slot* s, std::size_t n) { return records_until(s, n, limit_ticks); });
}

}  // namespace cuprof::detail
