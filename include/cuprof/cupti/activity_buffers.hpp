// The buffers CUPTI writes its activity records into. CUPTI asks for one on an
// application thread (often a launching one) and hands it back on its own
// thread, so both ends only move a slot between states in a fixed table:
// atomics, no lock, and no allocation once the slot's memory is mapped. The
// tracer's worker (or a flush) takes the completed ones, parses them and
// gives them back zeroed.
//
// A buffer is its own mapping, buffer_header + buffer_bytes: the header holds
// the slot's index (CUPTI hands back only the records' address) and keeps the
// records 8-byte aligned. Unmapped, a buffer leaves the process at once;
// freed through malloc it could stay in the arena of CUPTI's thread until a
// malloc_trim.
#pragma once

#include "../base/chunked_vector.hpp"  // zero_and_release

#include <sys/mman.h>

#include <atomic>
#include <cstdint>
#include <cstring>

namespace cuprof::detail::cupti {

class activity_buffers {
 public:
  static constexpr std::size_t max_buffers = 1024;  // 1 GiB at most; CUPTI drops (and counts) beyond
  static constexpr std::size_t buffer_header = 64;
  // A buffer's mapping is 1 MiB, whole pages: CUPTI gets it less the header.
  // Small, as the one CUPTI is filling is resident on top of the trace in a burst.
  static constexpr std::size_t buffer_bytes = (1u << 20) - buffer_header;
  static constexpr std::size_t kept_when_idle = 2;

  activity_buffers() = default;
  activity_buffers(const activity_buffers&) = delete;
  activity_buffers& operator=(const activity_buffers&) = delete;

  // For CUPTI's request: the lowest free slot's records, mapped on first use,
  // or nullptr (counted in refused()) when every slot is out or no memory is
  // left. The lowest first: slots whose memory was given back are used again
  // before a new one is mapped, so the memory held is that of the most
  // buffers ever out at once, not one per buffer CUPTI ever asked for.
  std::uint8_t* request() noexcept {
    for (std::size_t i = 0; i < max_buffers; ++i) {
      slot& s = slots_[i];
      std::uint32_t expected = free_slot;
      if (!s.state.compare_exchange_strong(expected, with_cupti, std::memory_order_acq_rel)) continue;
      if (!s.memory) {
        void* p = mmap(nullptr, buffer_header + buffer_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) {
          s.state.store(free_slot, std::memory_order_release);
          break;
        }
        s.memory = static_cast<std::uint8_t*>(p);
        std::memcpy(s.memory, &i, sizeof i);
      }
      return s.memory + buffer_header;
    }
    refused_.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }

  // For CUPTI's completion: `records` (from request()) holds `valid` bytes.
  void complete(std::uint8_t* records, std::size_t valid) noexcept {
    std::size_t i = 0;
    std::memcpy(&i, records - buffer_header, sizeof i);
    slots_[i].valid = valid;
    slots_[i].state.store(completed, std::memory_order_release);
  }

  // Each completed buffer to fn(records, valid), then zeroed for its next use
  // and free again. One caller at a time.
  template <class Fn>
  void take_completed(Fn&& fn) {
    for (slot& s : slots_) {
      std::uint32_t expected = completed;
      if (!s.state.compare_exchange_strong(expected, parsing, std::memory_order_acq_rel)) continue;
      fn(s.memory + buffer_header, s.valid);
      clear_for_reuse(s.memory);
      s.state.store(free_slot, std::memory_order_release);
    }
  }

  // Gives back the memory of free buffers but kept_when_idle of them. A
  // slot's memory is looked at only once the slot is held, as request() maps
  // it on CUPTI's thread while it holds it.
  void trim() noexcept {
    std::size_t kept = 0;
    for (slot& s : slots_) {
      std::uint32_t expected = free_slot;
      if (!s.state.compare_exchange_strong(expected, parsing, std::memory_order_acq_rel)) continue;
      if (s.memory && kept++ >= kept_when_idle) {
        munmap(s.memory, buffer_header + buffer_bytes);
        s.memory = nullptr;
      }
      s.state.store(free_slot, std::memory_order_release);
    }
  }

  // Buffers CUPTI has now (asked for, not handed back).
  std::size_t with_cupti_now() const noexcept {
    std::size_t n = 0;
    for (const slot& s : slots_) n += s.state.load(std::memory_order_acquire) == with_cupti;
    return n;
  }
  // Buffers mapped now, whatever their state; only while nothing else uses the pool (tests).
  std::size_t mapped_now() const noexcept {
    std::size_t n = 0;
    for (const slot& s : slots_) n += s.memory != nullptr;
    return n;
  }
  // Requests that got no buffer.
  std::uint64_t refused() const noexcept { return refused_.load(std::memory_order_relaxed); }

  // Zeroes a parsed buffer's records for its next use, as CUPTI is told
  // buffers come (CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER): its pages go
  // back to the system, so a buffer takes memory only as CUPTI fills it. The
  // header (the slot index) is kept.
  static void clear_for_reuse(std::uint8_t* memory) noexcept {
    zero_and_release(memory + buffer_header, memory + buffer_header + buffer_bytes);
  }

 private:
  enum state : std::uint32_t { free_slot, with_cupti, completed, parsing };
  struct slot {
    std::atomic<std::uint32_t> state{free_slot};
    std::uint8_t* memory = nullptr;  // buffer_header + buffer_bytes; null until first use or after trim()
    std::size_t valid = 0;
  };
  slot slots_[max_buffers];
  std::atomic<std::uint64_t> refused_{0};
};

}  // namespace cuprof::detail::cupti
