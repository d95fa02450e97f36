// The Chrome trace's blocks written to a file in order, formatted (and
// compressed, for a ".gz") on one thread per core.
#pragma once

#include "file_sink.hpp"
#include "json_text.hpp"
#include "trace_event_writer.hpp"
#include "trace_layout.hpp"

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <memory>
#include <mutex>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

namespace cuprof::detail {

// Writes a document's blocks on several threads: each worker takes the next
// block, formats it (and compresses it into one gzip member for a ".gz" path)
// into a free slot and goes on to the next block; the worker that finishes
// the block next in order writes it and every finished block after it. So a
// worker waits for an earlier block only when every slot (one per worker and
// two more) holds a finished block. One worker formats and writes on the
// calling thread, no thread started.
class parallel_block_writer {
 public:
  // workers: 0 for one per core, at most 8 (each slot holds a block and its
  // member in memory; the file takes no more: docs/performance.md).
  parallel_block_writer(const chrome_trace_layout& layout, atomic_file& file, unsigned workers = 0)
      : layout_(layout),
        file_(file),
        libdeflate_(file.gzip() ? libdeflate() : nullptr),
        blocks_(layout.block_count()),
        workers_(unsigned(
            std::min<std::size_t>(blocks_, workers ? workers : std::min(8u, std::max(1u, std::thread::hardware_concurrency()))))),
        slots_(workers_ + 2),
        finished_(slots_.size(), nullptr) {
    for (slot& s : slots_) free_.push_back(&s);
  }
  parallel_block_writer(const parallel_block_writer&) = delete;
  parallel_block_writer& operator=(const parallel_block_writer&) = delete;

  // Writes every block, returns the number of trace events written; throws the first error.
  std::size_t run() {
    std::vector<std::thread> threads;
    for (unsigned i = 1; i < workers_; ++i) {
      // A member function, not a lambda: std::thread's code for a lambda type is
      // shared by every copy of cuprof in the process (architecture.md).
      try {
        threads.emplace_back(&parallel_block_writer::work, this);
      } catch (const std::system_error&) {  // no more threads to be had: fewer workers
        break;
      }
    }
    work();
    for (std::thread& t : threads) t.join();
    if (failure_) std::rethrow_exception(failure_);
    return events_;
  }

 private:
  // A block being formatted, or finished and waiting for its turn to be written.
  struct slot {
    std::unique_ptr<chrome_trace_writer> writer;
    std::unique_ptr<gzip_compressor> gzip;
    std::string_view bytes;  // what goes to the file: the text or its member
    std::size_t events = 0;
  };

  void work() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      slot_freed_.wait(lock, [&] { return failed_ || next_taken_ == blocks_ || !free_.empty(); });
      if (failed_ || next_taken_ == blocks_) return;
      const std::size_t order = next_taken_++;
      slot* s = free_.back();
      free_.pop_back();
      lock.unlock();
      const std::exception_ptr error = caught([&] { format(*s, order); });
      lock.lock();
      if (error) {
        fail(error);
        return;
      }
      finished_[order % finished_.size()] = s;  // blocks taken and not written: at most one per slot
      write_finished(lock);
    }
  }

  void format(slot& s, std::size_t order) {
    if (!s.writer) s.writer.reset(new chrome_trace_writer(layout_));
    text_buffer& text = s.writer->out();
    text.clear();
    s.events = s.writer->write_block(order);
    s.bytes = {text.data(), text.size()};
    if (file_.gzip()) {
      if (!s.gzip) s.gzip.reset(new gzip_compressor(libdeflate_));
      s.bytes = s.gzip->compress(text.data(), text.size());
    }
  }

  // Writes the finished blocks next in order, unless another worker is at it
  // (it takes what finishes meanwhile: it looks again after each write).
  void write_finished(std::unique_lock<std::mutex>& lock) {
    if (writing_) return;
    writing_ = true;
    while (!failed_) {
      slot*& next = finished_[next_written_ % finished_.size()];
      slot* const s = next;
      if (!s) break;
      next = nullptr;
      lock.unlock();
      const std::exception_ptr error = caught([&] { file_.write(s->bytes.data(), s->bytes.size()); });
      lock.lock();
      if (error) {
        fail(error);
        break;
      }
      events_ += s->events;
      ++next_written_;
      free_.push_back(s);
      slot_freed_.notify_one();
    }
    writing_ = false;
  }

  // What `step` threw, or null: run outside the lock, reported under it.
  template <class Step>
  static std::exception_ptr caught(Step&& step) noexcept {
    try {
      step();
      return nullptr;
    } catch (...) {
      return std::current_exception();
    }
  }

  void fail(std::exception_ptr error) {
    if (!failed_) failure_ = error;
    failed_ = true;
    slot_freed_.notify_all();
  }

  const chrome_trace_layout& layout_;
  atomic_file& file_;
  const libdeflate_library* libdeflate_;  // null: zlib's gzip
  const std::size_t blocks_;
  const unsigned workers_;
  std::vector<slot> slots_;
  std::mutex mutex_;
  std::condition_variable slot_freed_;
  std::vector<slot*> free_;
  std::vector<slot*> finished_;  // block k's at k % its size, till written; null: not finished
  std::size_t next_taken_ = 0, next_written_ = 0, events_ = 0;
  bool writing_ = false, failed_ = false;
  std::exception_ptr failure_;
};

}  // namespace cuprof::detail
