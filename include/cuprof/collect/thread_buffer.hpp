// What a scope writes, and where: the hot path of every annotated file.
//
// Each thread appends 16-byte slots to its own chain of chunks; the only
// shared write is a release store of the chunk's slot count, so a collector on
// another thread can read what is published while the owner keeps writing
// (single producer, single consumer). A fresh chunk comes from the runtime
// (chunk_pool.hpp) through the process's hooks when one is full, never per
// scope. This header includes nothing heavier than <atomic>: a file that only
// annotates compiles none of the runtime.
#pragma once

#include "../base/process_state.hpp"
#include "../base/config.hpp"
#include "scope_arg.hpp"

#include <pthread.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace cuprof::detail {

enum class slot_kind : std::uint64_t {
  enter_static = 0,   // payload: pointer to a NUL-terminated name with static storage
  enter_dynamic = 1,  // payload: name length; the name's bytes fill the following slots
  enter_step = 2,     // payload: the step number of a ProfilerStep#N scope
  exit = 3,           // payload unused
  args = 4,           // right after its scope's enter, same ticks; payload: args_payload(); one slot per
                      // argument follows: the key's pointer, then the value's bits
};

constexpr int slot_kind_shift = 61;  // 61 bits of ticks: 24 years of a 3 GHz TSC
constexpr std::uint64_t slot_time_mask = (std::uint64_t(1) << slot_kind_shift) - 1;

struct slot {
  std::uint64_t head;  // ticks in the low 61 bits, slot_kind in the top 3
  std::uint64_t payload;
};
static_assert(sizeof(slot) == 16, "slots are 16 bytes");

inline constexpr std::uint64_t make_head(slot_kind kind, std::uint64_t ticks) noexcept {
  return (ticks & slot_time_mask) | (std::uint64_t(kind) << slot_kind_shift);
}
inline constexpr slot_kind slot_kind_of(const slot& s) noexcept { return slot_kind(s.head >> slot_kind_shift); }
inline constexpr std::uint64_t ticks_of(const slot& s) noexcept { return s.head & slot_time_mask; }
// An args record's payload: the count in the low byte, then one bit per
// argument that is a double (else an int64).
inline constexpr std::uint64_t args_payload(std::size_t count, std::uint64_t real_mask) noexcept {
  return std::uint64_t(count) | (real_mask << 8);
}
inline constexpr std::size_t args_count(const slot& s) noexcept { return std::size_t(s.payload & 0xff); }
inline constexpr bool arg_is_real(const slot& s, std::size_t i) noexcept { return (s.payload >> (8 + i)) & 1; }
// The slots one record takes: a dynamic name's bytes follow its enter slot,
// arguments their args slot.
inline constexpr std::size_t record_slots(const slot& s) noexcept {
  switch (slot_kind_of(s)) {
    case slot_kind::enter_dynamic: return 1 + (std::size_t(s.payload) + sizeof(slot) - 1) / sizeof(slot);
    case slot_kind::args: return 1 + args_count(s);
    default: return 1;
  }
}

// A thread's chunks grow: its first holds 64 slots (1 KiB), its second 1024
// (16 KiB), every later one chunk_slots (128 KiB). A program that starts
// thousands of short-lived threads in one window, each recording a few scopes,
// then holds about 1 KiB per thread until the window ends instead of 128 KiB,
// and more of them fit under the CPU event cap, which counts every chunk. The
// hot path is unchanged by it: a push compares its index with the current
// chunk's end, kept in the buffer next to the index, as it compared it with a
// constant before; the growth costs two more chunk changes per thread.
constexpr std::size_t chunk_slots = 8192;
constexpr int chunk_size_classes = 3;
inline constexpr std::uint32_t chunk_class_slots[chunk_size_classes] = {64, 1024, std::uint32_t(chunk_slots)};
// A dynamic name, its enter slot and the most arguments must fit one chunk;
// longer names are cut.
constexpr std::size_t max_dynamic_name = (chunk_slots - 2 - max_scope_args) * sizeof(slot) - 1;

// A chunk's header; its `capacity` slots follow it in the same allocation
// (the runtime's chunk_pool makes and frees them).
struct chunk {
  explicit chunk(std::uint32_t slots) noexcept : capacity(slots) {}
  std::atomic<std::uint32_t> count{0};  // slots published by the owner
  const std::uint32_t capacity;
  std::atomic<chunk*> next{nullptr};  // set once the owner moved on
  slot* slots() noexcept { return reinterpret_cast<slot*>(this + 1); }
};
static_assert(sizeof(chunk) == 16 && alignof(chunk) % alignof(slot) == 0, "slots follow the chunk's header");

class thread_buffer {
 public:
  // `first` may be null (the CPU event cap was reached): the thread is known
  // and counts what it drops, and gets a chunk when one is free again.
  thread_buffer(std::uint32_t tid, pthread_t handle, std::uint64_t serial, chunk* first) noexcept
      : tid_(tid),
        handle_(handle),
        serial_(serial),
        write_chunk_(first),
        write_end_(first ? first->capacity : 0),
        first_chunk_(first),
        read_chunk_(first) {}
  thread_buffer(const thread_buffer&) = delete;
  thread_buffer& operator=(const thread_buffer&) = delete;
  ~thread_buffer();  // chunk_pool.hpp: the runtime frees buffers

  // ---- owner thread only ------------------------------------------------
  // Both return false when the record was dropped (past the cap, or no memory):
  // a scope whose enter was dropped then records no exit either.
  bool push(slot s) noexcept {
    if (CUPROF_UNLIKELY(write_index_ == write_end_) && !next_chunk(1)) return false;
    write_chunk_->slots()[write_index_++] = s;
    write_chunk_->count.store(write_index_, std::memory_order_release);
    return true;
  }

  // `args`: the scope's arguments (n <= max_scope_args), published with its
  // enter as one unit, so that a collector never sees the one without the other.
  bool push_dynamic(std::uint64_t ticks, std::string_view name, const scope_arg* args = nullptr, std::size_t n = 0) noexcept {
    if (CUPROF_UNLIKELY(name.size() > max_dynamic_name)) g_process->hooks.load(std::memory_order_acquire)->name_cut();
    const std::size_t len = name.size() < max_dynamic_name ? name.size() : max_dynamic_name;
    const std::size_t name_slots = 1 + (len + sizeof(slot) - 1) / sizeof(slot);
    const std::size_t needed = name_slots + (n ? 1 + n : 0);
    if (CUPROF_UNLIKELY(write_index_ + needed > write_end_) && !next_chunk(needed)) return false;
    slot* out = write_chunk_->slots() + write_index_;
    out->head = make_head(slot_kind::enter_dynamic, ticks);
    out->payload = len;
    if (len) std::memcpy(out + 1, name.data(), len);
    if (n) write_args(out + name_slots, ticks, args, n);
    write_index_ += std::uint32_t(needed);
    write_chunk_->count.store(write_index_, std::memory_order_release);
    return true;
  }

  bool push_with_args(slot enter, const scope_arg* args, std::size_t n) noexcept {
    if (CUPROF_UNLIKELY(write_index_ + 2 + n > write_end_) && !next_chunk(2 + n)) return false;
    slot* out = write_chunk_->slots() + write_index_;
    out[0] = enter;
    write_args(out + 1, ticks_of(enter), args, n);
    write_index_ += std::uint32_t(2 + n);
    write_chunk_->count.store(write_index_, std::memory_order_release);
    return true;
  }

  // A record of n slots (n <= chunk_slots) that no scope reader sees: the
  // tracer's recorded CUDA calls (cupti/call_recorder.hpp). Published whole.
  bool push_record(const slot* record, std::size_t n) noexcept {
    if (CUPROF_UNLIKELY(write_index_ + n > write_end_) && !next_chunk(n)) return false;
    std::memcpy(write_chunk_->slots() + write_index_, record, n * sizeof(slot));
    write_index_ += std::uint32_t(n);
    write_chunk_->count.store(write_index_, std::memory_order_release);
    return true;
  }

  // ---- the runtime (chunk_pool.hpp) ---------------------------------------
  // Moves the owner on to `fresh` (owner thread only).
  void continue_in(chunk* fresh) noexcept {
    if (write_chunk_) write_chunk_->next.store(fresh, std::memory_order_release);
    else first_chunk_.store(fresh, std::memory_order_release);
    write_chunk_ = fresh;
    write_index_ = 0;
    write_end_ = fresh->capacity;
  }
  // The size class of the chunk the owner writes; -1 before its first (owner thread only).
  int write_class() const noexcept {
    if (!write_chunk_) return -1;
    int c = 0;
    while (c + 1 < chunk_size_classes && chunk_class_slots[c] < write_chunk_->capacity) ++c;
    return c;
  }
  // Offers take(const slot*, n) every published run of slots not yet read;
  // take returns how many it used. Using fewer stops the drain there, and the
  // rest stays for the next drain: that is how a window ends at an instant
  // that writers still recording cannot move. Runs never split a multi-slot
  // record, since the owner publishes it whole. Collector only.
  template <class Take>
  void drain(Take&& take);
  // Throws away the records up to `limit_ticks`; later ones stay.
  void discard_until(std::uint64_t limit_ticks);

  std::uint32_t tid() const noexcept { return tid_; }
  pthread_t handle() const noexcept { return handle_; }
  // Unique to this buffer for the life of the process: a scope keeps it to
  // tell at its exit whether it is still on the thread that entered it (a
  // buffer's address may be reused by a later thread's buffer; its serial is not).
  std::uint64_t serial() const noexcept { return serial_; }
  bool exited() const noexcept { return exited_.load(std::memory_order_acquire); }
  void mark_exited() noexcept { exited_.store(true, std::memory_order_release); }

  // ---- a recorded CUDA call in progress (cupti/call_recorder.hpp) ----------
  // The owner publishes when its outermost recorded call started, so that the
  // collector knows how far the thread's calls are all in: a window is
  // complete only when no thread is still inside a call that started in it.
  // entering_call: the owner is about to read the clock (its call started no
  // earlier than the collector can tell); 0: not inside a recorded call.
  static constexpr std::uint64_t entering_call = 1;
  void call_entering() noexcept { call_since_.store(entering_call, std::memory_order_seq_cst); }
  void call_started(std::uint64_t ticks) noexcept { call_since_.store(ticks, std::memory_order_release); }
  // After the call's record was pushed: a collector that reads this drains it.
  void call_ended() noexcept { call_since_.store(0, std::memory_order_release); }
  std::uint64_t call_since() const noexcept { return call_since_.load(std::memory_order_acquire); }
  void count_dropped() noexcept { dropped_.fetch_add(1, std::memory_order_relaxed); }
  // Records lost since the last call (past the cap, or no memory for a chunk).
  std::uint64_t take_dropped() noexcept { return dropped_.exchange(0, std::memory_order_relaxed); }
  // Copies of cuprof on this thread that hold the buffer (owner thread only).
  std::uint32_t users = 0;

 private:
  // Offers the slots published up to `published`; false if take stopped short.
  template <class Take>
  bool offer(Take& take, std::uint32_t published) {
    if (published <= read_index_) return true;
    const std::size_t offered = published - read_index_;
    const std::size_t used = take(read_chunk_->slots() + read_index_, offered);
    read_index_ += std::uint32_t(used);
    return used == offered;
  }

  static void write_args(slot* out, std::uint64_t ticks, const scope_arg* args, std::size_t n) noexcept {
    std::uint64_t real_mask = 0;
    for (std::size_t i = 0; i < n; ++i) {
      out[1 + i] = {std::uint64_t(reinterpret_cast<std::uintptr_t>(args[i].key)), args[i].bits};
      real_mask |= std::uint64_t(args[i].is_real) << i;
    }
    out[0] = {make_head(slot_kind::args, ticks), args_payload(n, real_mask)};
  }

  CUPROF_NOINLINE bool next_chunk(std::size_t needed) noexcept {
    return g_process->hooks.load(std::memory_order_acquire)->next_chunk(*this, needed);
  }

  const std::uint32_t tid_;
  const pthread_t handle_;
  const std::uint64_t serial_;
  // owner state
  chunk* write_chunk_;  // null until the thread's first chunk
  std::uint32_t write_index_ = 0;
  std::uint32_t write_end_;  // write_chunk_'s capacity, 0 without one
  // The owner's first chunk, where the collector starts; set by the owner
  // when a thread registered past the cap gets its first chunk later.
  std::atomic<chunk*> first_chunk_;
  // collector state
  chunk* read_chunk_;  // null until the collector found the first chunk
  std::uint32_t read_index_ = 0;
  std::atomic<bool> exited_{false};
  std::atomic<std::uint64_t> dropped_{0};
  std::atomic<std::uint64_t> call_since_{0};
};

// This copy's cache of the calling thread's buffer; the runtime holds the
// thread's one buffer, shared by every copy.
inline thread_local thread_buffer* t_buffer = nullptr;

// Gives the buffer back when the thread ends, so that the runtime can free it
// once every copy that used it let go.
struct thread_buffer_release {
  ~thread_buffer_release() {
    thread_buffer* b = t_buffer;
    t_buffer = nullptr;
    if (b) g_process->hooks.load(std::memory_order_acquire)->release_thread(b);
  }
};

CUPROF_NOINLINE inline thread_buffer* acquire_thread_buffer() noexcept {
  const runtime_hooks* hooks = g_process->hooks.load(std::memory_order_acquire);
  if (!hooks) return nullptr;  // no runtime in this process: nothing records anyway
  thread_local thread_buffer_release release;
  (void)release;
  t_buffer = hooks->acquire_thread();
  return t_buffer;
}

inline thread_buffer* current_thread_buffer() noexcept {
  thread_buffer* b = t_buffer;
  return CUPROF_LIKELY(b != nullptr) ? b : acquire_thread_buffer();
}

inline slot exit_slot() noexcept { return {make_head(slot_kind::exit, now_ticks()), 0}; }

// A scope's exit where the calling thread is not the one whose buffer
// `serial` names (or this copy has not cached the thread's buffer): another
// thread (a coroutine resumed elsewhere, an object handed over), or the
// entering thread has exited and its buffer may be freed. Only the calling
// thread's own buffer is written, and only when it is the one the scope
// entered; anything else is dropped and counted, never written into another
// thread's single-producer buffer.
CUPROF_NOINLINE inline void exit_off_thread(std::uint64_t serial) noexcept {
  thread_buffer* b = t_buffer;
  if (!b) {  // another copy of cuprof may hold this thread's buffer
    const runtime_hooks* hooks = g_process->hooks.load(std::memory_order_acquire);
    b = hooks ? hooks->registered_thread() : nullptr;
  }
  if (b && b->serial() == serial) {
    b->push(exit_slot());
    return;
  }
  g_process->dropped_scope_exits.fetch_add(1, std::memory_order_relaxed);
}

// A scope's exit: `serial` is the serial of the buffer its enter went to.
inline void push_exit(std::uint64_t serial) noexcept {
  thread_buffer* b = t_buffer;
  if (CUPROF_LIKELY(b != nullptr && b->serial() == serial)) b->push(exit_slot());
  else exit_off_thread(serial);
}

inline bool cpu_recording() noexcept { return g_process->cpu_recording.load(std::memory_order_relaxed); }

}  // namespace cuprof::detail
