// Per-thread, lock-free recording of scope enters and exits.
//
// Each thread appends 16-byte slots to its own chain of fixed-size chunks; the
// only shared write is a release store of the chunk's slot count, so a
// collector on another thread can read what is published while the owner keeps
// writing (single producer, single consumer). Chunks come from a pool; the pool
// lock is taken once per chunk (every 8192 slots), never per scope.
#pragma once

#include "../config.hpp"
#include "clock.hpp"
#include "env.hpp"
#include "log.hpp"

#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <string_view>
#include <vector>

namespace cuprof::detail {

enum class slot_kind : std::uint64_t {
  enter_static = 0,   // payload: pointer to a NUL-terminated name with static storage
  enter_dynamic = 1,  // payload: name length; the name's bytes fill the following slots
  enter_step = 2,     // payload: the step number of a ProfilerStep#N scope
  exit = 3,           // payload unused
};

constexpr int slot_kind_shift = 62;
constexpr std::uint64_t slot_time_mask = (std::uint64_t(1) << slot_kind_shift) - 1;

struct slot {
  std::uint64_t head;  // ticks in the low 62 bits, slot_kind in the top 2
  std::uint64_t payload;
};
static_assert(sizeof(slot) == 16, "slots are 16 bytes");

inline constexpr std::uint64_t make_head(slot_kind kind, std::uint64_t ticks) noexcept {
  return (ticks & slot_time_mask) | (std::uint64_t(kind) << slot_kind_shift);
}
inline constexpr slot_kind kind_of(const slot& s) noexcept { return slot_kind(s.head >> slot_kind_shift); }
inline constexpr std::uint64_t ticks_of(const slot& s) noexcept { return s.head & slot_time_mask; }
// The slots one record takes: a dynamic name's bytes follow its enter slot.
inline constexpr std::size_t record_slots(const slot& s) noexcept {
  return kind_of(s) == slot_kind::enter_dynamic ? 1 + (std::size_t(s.payload) + sizeof(slot) - 1) / sizeof(slot) : 1;
}

// How many of the n slots at s hold whole records stamped at or before
// `limit_ticks`. A thread's stamps only grow, so the first later record ends it.
inline std::size_t records_until(const slot* s, std::size_t n, std::uint64_t limit_ticks) noexcept {
  std::size_t i = 0;
  while (i < n && ticks_of(s[i]) <= limit_ticks) i += record_slots(s[i]);
  return i;
}

constexpr std::size_t chunk_slots = 8192;  // 128 KiB per chunk
// A dynamic name and its enter slot must fit one chunk; longer names are cut.
constexpr std::size_t max_dynamic_name = (chunk_slots - 1) * sizeof(slot) - 1;

// Set once a name was cut; tests clear it to see the message again.
inline std::atomic<bool> g_said_name_cut{false};

// A cut name is cut on every scope that uses it: said once per process.
CUPROF_NOINLINE inline void say_name_cut() {
  if (!g_said_name_cut.exchange(true, std::memory_order_relaxed))
    log_line("a scope name longer than " + std::to_string(max_dynamic_name) +
             " bytes was cut to that length (said once; later ones are cut too)");
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

struct chunk {
  slot slots[chunk_slots];
  std::atomic<std::uint32_t> count{0};  // slots published by the owner
  std::atomic<chunk*> next{nullptr};    // set once the owner moved on
};

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

inline chunk_pool& global_chunk_pool() {
  static chunk_pool* pool = new chunk_pool;  // never destroyed: threads may write during exit
  return *pool;
}

class thread_buffer {
 public:
  thread_buffer(std::uint32_t tid, pthread_t handle, chunk* first) noexcept
      : tid_(tid), handle_(handle), write_chunk_(first), read_chunk_(first) {}
  thread_buffer(const thread_buffer&) = delete;
  thread_buffer& operator=(const thread_buffer&) = delete;

  // ---- owner thread only ------------------------------------------------
  // Both return false when the record was dropped (past the cap, or no memory):
  // a scope whose enter was dropped then records no exit either.
  bool push(slot s) noexcept {
    if (CUPROF_UNLIKELY(write_index_ == chunk_slots) && !advance_chunk()) return false;
    write_chunk_->slots[write_index_++] = s;
    write_chunk_->count.store(write_index_, std::memory_order_release);
    return true;
  }

  bool push_dynamic(std::uint64_t ticks, std::string_view name) noexcept {
    if (CUPROF_UNLIKELY(name.size() > max_dynamic_name)) say_name_cut();
    const std::size_t len = std::min(name.size(), max_dynamic_name);
    const std::size_t needed = 1 + (len + sizeof(slot) - 1) / sizeof(slot);
    if (CUPROF_UNLIKELY(write_index_ + needed > chunk_slots) && !advance_chunk()) return false;
    slot* out = write_chunk_->slots + write_index_;
    out->head = make_head(slot_kind::enter_dynamic, ticks);
    out->payload = len;
    if (len) std::memcpy(out + 1, name.data(), len);
    write_index_ += std::uint32_t(needed);
    write_chunk_->count.store(write_index_, std::memory_order_release);
    return true;
  }

  void mark_exited() noexcept { exited_.store(true, std::memory_order_release); }

  // ---- collector (one at a time, under the registry lock) ---------------
  // Offers take(const slot*, n) every published run of slots not yet read;
  // take returns how many it used. Using fewer stops the drain there, and the
  // rest stays for the next drain: that is how a window ends at an instant
  // that writers still recording cannot move. Runs never split a multi-slot
  // record, since the owner publishes it whole.
  template <class Take>
  void drain(Take&& take) {
    for (;;) {
      if (!offer(take, read_chunk_->count.load(std::memory_order_acquire))) return;
      chunk* next = read_chunk_->next.load(std::memory_order_acquire);
      if (!next) return;
      // The owner set `next` after its last write to this chunk: re-read the
      // count once more so nothing published just before is lost.
      if (!offer(take, read_chunk_->count.load(std::memory_order_acquire))) return;
      global_chunk_pool().release(read_chunk_);
      read_chunk_ = next;
      read_index_ = 0;
    }
  }
  // Throws away the records up to `limit_ticks`; later ones stay.
  void discard_until(std::uint64_t limit_ticks) {
    drain([&](const slot* s, std::size_t n) { return records_until(s, n, limit_ticks); });
  }

  std::uint32_t tid() const noexcept { return tid_; }
  pthread_t handle() const noexcept { return handle_; }
  bool exited() const noexcept { return exited_.load(std::memory_order_acquire); }
  // Records lost since the last call (no memory for a new chunk).
  std::uint64_t take_dropped() noexcept { return dropped_.exchange(0, std::memory_order_relaxed); }

  ~thread_buffer() {
    chunk* c = read_chunk_;
    while (c) {
      chunk* next = c->next.load(std::memory_order_acquire);
      global_chunk_pool().release(c);
      c = next;
    }
  }

 private:
  // Offers the slots published up to `published`; false if take stopped short.
  template <class Take>
  bool offer(Take& take, std::uint32_t published) {
    if (published <= read_index_) return true;
    const std::size_t offered = published - read_index_;
    const std::size_t used = take(read_chunk_->slots + read_index_, offered);
    read_index_ += std::uint32_t(used);
    return used == offered;
  }

  CUPROF_NOINLINE bool advance_chunk() noexcept {
    chunk* fresh = global_chunk_pool().acquire();
    if (!fresh) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    write_chunk_->next.store(fresh, std::memory_order_release);
    write_chunk_ = fresh;
    write_index_ = 0;
    return true;
  }

  const std::uint32_t tid_;
  const pthread_t handle_;
  // owner state
  chunk* write_chunk_;
  std::uint32_t write_index_ = 0;
  // collector state
  chunk* read_chunk_;
  std::uint32_t read_index_ = 0;
  std::atomic<bool> exited_{false};
  std::atomic<std::uint64_t> dropped_{0};
};

// Every thread that ever recorded a scope, so collection can reach them all.
class thread_registry {
 public:
  thread_buffer* add(std::uint32_t tid, pthread_t handle) noexcept {
    chunk* first = global_chunk_pool().acquire_uncapped();
    if (!first) return nullptr;
    auto* buffer = new (std::nothrow) thread_buffer(tid, handle, first);
    if (!buffer) {
      global_chunk_pool().release(first);
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

inline thread_registry& global_thread_registry() {
  static thread_registry* registry = new thread_registry;  // outlives every thread
  return *registry;
}

// The hot-path switch: scopes record only while this is set.
inline std::atomic<bool> g_cpu_recording{false};

inline thread_local thread_buffer* t_buffer = nullptr;

inline std::uint32_t current_tid() noexcept { return std::uint32_t(::syscall(SYS_gettid)); }

struct thread_exit_marker {
  ~thread_exit_marker() {
    if (t_buffer) t_buffer->mark_exited();
    t_buffer = nullptr;
  }
};

CUPROF_NOINLINE inline thread_buffer* register_current_thread() noexcept {
  thread_local thread_exit_marker marker;
  (void)marker;
  t_buffer = global_thread_registry().add(current_tid(), pthread_self());
  return t_buffer;
}

inline thread_buffer* current_thread_buffer() noexcept {
  thread_buffer* b = t_buffer;
  return CUPROF_LIKELY(b != nullptr) ? b : register_current_thread();
}

}  // namespace cuprof::detail
