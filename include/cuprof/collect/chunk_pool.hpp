// The runtime side of scope recording (thread_buffer.hpp is the hot path):
// the pool of chunks, the registry of every thread that recorded, and the
// hooks through which every copy of cuprof in the process reaches them. The
// first copy whose runtime starts installs them in the process state; later
// copies use those, so that one session sees every copy's scopes.
#pragma once

#include "thread_buffer.hpp"
#include "../base/env.hpp"
#include "../base/log.hpp"
#include "../base/config.hpp"

#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
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

// CUPROF_MAX_CPU_EVENTS caps the slots of every chunk allocated, each
// thread's first included (a scope's enter and exit take one slot each, a
// dynamic name one more per 16 bytes), rounded up to whole full chunks; past
// it records are dropped and counted. The default, 16 Mi slots (256 MiB),
// keeps some 8 M scopes per window, seconds of the busiest scope loops, and is
// the same count as CUPROF_MAX_RECORDS's default for GPU records.
constexpr std::size_t default_max_cpu_slots = std::size_t(16) << 20;
inline std::size_t max_cpu_chunks() {
  const std::size_t slots =
      use_setting(read_record_cap("CUPROF_MAX_CPU_EVENTS", std::getenv("CUPROF_MAX_CPU_EVENTS"), default_max_cpu_slots));
  return slots / chunk_slots + (slots % chunk_slots != 0);
}

// The chunks of every thread, within the cap. While a profile runs, chunks a
// drain is done with wait on free lists for the next owner (fresh memory
// costs its page faults on the hot path of the thread that writes it);
// otherwise they are freed at once, and stopping frees the lists (trim), so
// that nothing but the chunks live threads write to stays allocated once
// recording stops. The tracer's call records of a profile without CPU
// activity then take a fresh chunk per 4096 calls, microseconds against the
// calls' milliseconds.
class chunk_pool {
 public:
  // A chunk of `size_class` (chunk_class_slots), or null when it would take
  // the slots allocated past the cap (or without memory). A free chunk of the
  // class is reused first; free chunks of other classes are freed to make
  // room. A thread past the cap is refused without taking the lock, so that
  // it drops its records without waiting on one.
  chunk* acquire(int size_class) noexcept {
    const std::size_t slots = chunk_class_slots[size_class];
    if (allocated_slots_.load(std::memory_order_relaxed) + slots > max_slots_.load(std::memory_order_relaxed) &&
        free_slots_.load(std::memory_order_relaxed) == 0)
      return nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      std::vector<chunk*>& same = free_[size_class];
      if (!same.empty()) {
        chunk* c = same.back();
        same.pop_back();
        free_slots_.fetch_sub(slots, std::memory_order_relaxed);
        return c;
      }
      for (int other = chunk_size_classes - 1; other >= 0 && !fits(slots); --other) {
        while (!fits(slots) && !free_[other].empty()) {
          chunk* c = free_[other].back();
          free_[other].pop_back();
          free_slots_.fetch_sub(c->capacity, std::memory_order_relaxed);
          destroy(c);
        }
      }
      if (!fits(slots)) return nullptr;
      allocated_slots_.fetch_add(slots, std::memory_order_relaxed);  // reserved under the lock: the cap holds exactly
    }
    void* raw = ::operator new(sizeof(chunk) + slots * sizeof(slot), std::nothrow);
    if (!raw) {
      allocated_slots_.fetch_sub(slots, std::memory_order_relaxed);
      return nullptr;
    }
    return new (raw) chunk(std::uint32_t(slots));
  }

  void release(chunk* c) noexcept {
    // While a profile runs, also between its windows: a schedule's next window
    // then writes into memory already faulted in.
    if (process().running_profile.load(std::memory_order_relaxed) || process().cpu_recording.load(std::memory_order_relaxed)) {
      c->count.store(0, std::memory_order_relaxed);
      c->next.store(nullptr, std::memory_order_relaxed);
      std::lock_guard<std::mutex> lock(mutex_);
      try {
        free_[class_of(c->capacity)].push_back(c);
        free_slots_.fetch_add(c->capacity, std::memory_order_relaxed);
        return;
      } catch (...) {}
    }
    destroy(c);
  }

  // Frees every chunk on the free lists.
  void trim() noexcept {
    std::vector<chunk*> lists[chunk_size_classes];
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (int k = 0; k < chunk_size_classes; ++k) lists[k].swap(free_[k]);
      free_slots_.store(0, std::memory_order_relaxed);
    }
    for (std::vector<chunk*>& list : lists)
      for (chunk* c : list) destroy(c);
  }

  // Held across fork() (runtime::before_fork), so a child never inherits it locked.
  void lock_for_fork() noexcept { mutex_.lock(); }
  void unlock_after_fork() noexcept { mutex_.unlock(); }
  void set_max_chunks(std::size_t n) noexcept {
    set_max_slots(n > SIZE_MAX / chunk_slots ? SIZE_MAX : n * chunk_slots);  // CUPROF_MAX_CPU_EVENTS may be huge
  }
  void set_max_slots(std::size_t n) noexcept { max_slots_.store(n, std::memory_order_relaxed); }
  std::size_t max_chunks() const noexcept { return max_slots_.load(std::memory_order_relaxed) / chunk_slots; }
  // The memory held, in use or free, as full chunks (rounded up), and as slots.
  std::size_t allocated() const noexcept { return (allocated_slots() + chunk_slots - 1) / chunk_slots; }
  std::size_t allocated_slots() const noexcept { return allocated_slots_.load(std::memory_order_relaxed); }
  // The slots of chunks that threads write to or that wait to be collected.
  std::size_t in_use_slots() const noexcept {
    const std::size_t all = allocated_slots(), free = free_slots_.load(std::memory_order_relaxed);
    return free < all ? all - free : 0;
  }

 private:
  bool fits(std::size_t slots) const noexcept {
    return allocated_slots_.load(std::memory_order_relaxed) + slots <= max_slots_.load(std::memory_order_relaxed);
  }
  static int class_of(std::uint32_t capacity) noexcept {
    int k = 0;
    while (k + 1 < chunk_size_classes && chunk_class_slots[k] < capacity) ++k;
    return k;
  }
  void destroy(chunk* c) noexcept {
    allocated_slots_.fetch_sub(c->capacity, std::memory_order_relaxed);
    c->~chunk();
    ::operator delete(static_cast<void*>(c));
  }

  std::mutex mutex_;
  std::vector<chunk*> free_[chunk_size_classes];
  std::atomic<std::size_t> allocated_slots_{0};  // in use and free
  std::atomic<std::size_t> free_slots_{0};
  std::atomic<std::size_t> max_slots_{default_max_cpu_slots};
};

// Every thread that ever recorded a scope, so collection can reach them all.
class thread_registry {
 public:
  // A thread past the cap registers with no chunk: it costs its buffer's
  // header, counts what it drops, and gets a chunk when the cap has room again.
  thread_buffer* add(chunk_pool& pool, std::uint32_t tid, pthread_t handle) noexcept {
    chunk* first = pool.acquire(0);
    auto* buffer = new (std::nothrow) thread_buffer(tid, handle, next_serial_.fetch_add(1, std::memory_order_relaxed), first);
    if (!buffer) {
      if (first) pool.release(first);
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
  // once fn has drained them. One pass, so that a window after which
  // 100,000 threads exited frees them in linear time.
  template <class Fn>
  void for_each(Fn&& fn) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::size_t kept = 0;  // buffers_[0, kept) stay; [kept, next) were freed
    std::size_t next = 0;
    struct close_gap {  // also when fn throws: the buffers not reached yet stay
      std::vector<thread_buffer*>& buffers;
      const std::size_t& kept;
      const std::size_t& next;
      ~close_gap() { buffers.erase(buffers.begin() + std::ptrdiff_t(kept), buffers.begin() + std::ptrdiff_t(next)); }
    };
    {
      close_gap gap{buffers_, kept, next};
      while (next < buffers_.size()) {
        thread_buffer* b = buffers_[next];
        const bool was_exited = b->exited();
        fn(*b);
        ++next;
        if (was_exited) delete b;
        else buffers_[kept++] = b;
      }
    }
    if (buffers_.capacity() > 4 * buffers_.size() + 64) buffers_.shrink_to_fit();
  }

 private:
  std::mutex mutex_;
  std::vector<thread_buffer*> buffers_;
  std::atomic<std::uint64_t> next_serial_{1};  // 0 is a scope's "nothing recorded"
};

inline std::uint32_t current_tid() noexcept { return std::uint32_t(::syscall(SYS_gettid)); }

inline void nothing_at_thread_end() noexcept {}

// A thread's own buffer in a registry, for a recorder outside the scopes' (the
// CUDA calls', NVTX's): Owner makes each recorder's thread_local slot its own.
// Registered at the thread's first record; when the thread ends it is marked
// exited (the next drain frees it once read) and at_thread_end runs. A thread
// that is ending gets none.
template <class Owner, void (*at_thread_end)() = &nothing_at_thread_end>
class thread_slot {
 public:
  static thread_buffer* get(thread_registry& threads, chunk_pool& pool) noexcept {
    thread_buffer* b = buffer_;
    if (CUPROF_LIKELY(b != nullptr) || given_back_) return b;
    thread_local release at_end;
    (void)at_end;
    return buffer_ = threads.add(pool, current_tid(), pthread_self());
  }
  // The buffer, or null where the thread has none yet.
  static thread_buffer* current() noexcept { return buffer_; }

 private:
  struct release {
    ~release() {
      given_back_ = true;
      if (thread_buffer* b = buffer_) b->mark_exited();
      buffer_ = nullptr;
      at_thread_end();
    }
  };
  static inline thread_local thread_buffer* buffer_ = nullptr;
  static inline thread_local bool given_back_ = false;
};

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

// The next size class after the chunk b writes, or one that holds `needed`.
inline bool next_chunk(thread_buffer& b, std::size_t needed) noexcept {
  int size_class = std::min(b.write_class() + 1, chunk_size_classes - 1);
  while (size_class + 1 < chunk_size_classes && chunk_class_slots[size_class] < needed) ++size_class;
  chunk* fresh = pool().acquire(size_class);
  if (!fresh) {
    b.count_dropped();
    return false;
  }
  b.continue_in(fresh);
  return true;
}

inline thread_buffer* registered_thread() noexcept { return t_thread_buffer; }

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

inline constexpr runtime_hooks hooks{&acquire_thread, &release_thread, &next_chunk, &name_cut, &registered_thread};

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
  chunk* c = read_chunk_ ? read_chunk_ : first_chunk_.load(std::memory_order_acquire);
  while (c) {
    chunk* next = c->next.load(std::memory_order_acquire);
    runtime::pool().release(c);
    c = next;
  }
}

template <class Take>
void thread_buffer::drain(Take&& take) {
  if (!read_chunk_ && !(read_chunk_ = first_chunk_.load(std::memory_order_acquire))) return;  // none yet
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
