// A vector in fixed-size chunks, for the records staged during a burst: it
// grows without copying (a std::vector would hold its old and new block at
// once, and leave the freed blocks of every doubling in the allocator's
// arena), and it can be consumed in order, each chunk freed once read, so
// that building a trace from it does not hold both copies. Chunks are mapped
// and unmapped directly: freed through malloc, 1 MiB blocks can stay in the
// process (glibc raises its mmap threshold after larger blocks are freed).
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <type_traits>
#include <vector>

namespace cuprof::detail {

// Maps in the pages inside [begin, end) in one call rather than one fault per
// page as they are first written (Linux 5.14+; elsewhere they fault as before).
inline void populate_pages(const void* begin, const void* end) noexcept {
#ifdef MADV_POPULATE_WRITE
  static const std::uintptr_t page = std::uintptr_t(::sysconf(_SC_PAGESIZE));
  const std::uintptr_t from = (reinterpret_cast<std::uintptr_t>(begin) + page - 1) & ~(page - 1);
  const std::uintptr_t to = reinterpret_cast<std::uintptr_t>(end) & ~(page - 1);
  if (to > from) ::madvise(reinterpret_cast<void*>(from), to - from, MADV_POPULATE_WRITE);
#else
  (void)begin, (void)end;
#endif
}

// Zeroes [begin, end): the whole pages inside are handed back to the system
// (they read as zeros and take no memory until written again), the bytes
// before and after them are cleared.
inline void zero_and_release(void* begin, void* end) noexcept {
  static const std::uintptr_t page = std::uintptr_t(::sysconf(_SC_PAGESIZE));
  const std::uintptr_t b = reinterpret_cast<std::uintptr_t>(begin), e = reinterpret_cast<std::uintptr_t>(end);
  const std::uintptr_t from = std::min((b + page - 1) & ~(page - 1), e), to = std::max(e & ~(page - 1), from);
  std::memset(begin, 0, from - b);
  if (to > from && ::madvise(reinterpret_cast<void*>(from), to - from, MADV_DONTNEED) != 0)
    std::memset(reinterpret_cast<void*>(from), 0, to - from);
  std::memset(reinterpret_cast<void*>(to), 0, e - to);
}

// Appends to a vector within its reserved capacity, mapping the pages in a
// MiB at a time just ahead of the writes: as cheap as populating it whole,
// without holding its pages before the records that fill them are read.
template <class T>
class populating_appender {
 public:
  explicit populating_appender(std::vector<T>& v) : v_(v), populated_(v.size()) {}
  void push_back(const T& x) {
    if (v_.size() == populated_) {
      populated_ = std::min(v_.capacity(), populated_ + step);
      populate_pages(v_.data() + v_.size(), v_.data() + populated_);
    }
    v_.push_back(x);
  }

 private:
  static constexpr std::size_t step = (std::size_t(1) << 20) / sizeof(T);
  std::vector<T>& v_;
  std::size_t populated_;
};

template <class T>
class chunked_vector {
  static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_destructible_v<T>, "records only");

 public:
  static constexpr std::size_t chunk_bytes = std::size_t(1) << 20;
  static constexpr std::size_t chunk_size = chunk_bytes / sizeof(T);

  chunked_vector() = default;
  chunked_vector(chunked_vector&& other) noexcept : chunks_(std::move(other.chunks_)), size_(other.size_) {
    other.chunks_.clear();
    other.size_ = 0;
  }
  chunked_vector& operator=(chunked_vector&& other) noexcept {
    if (this != &other) {
      clear();
      chunks_.swap(other.chunks_);
      size_ = other.size_;
      other.size_ = 0;
    }
    return *this;
  }
  chunked_vector(const chunked_vector&) = delete;
  chunked_vector& operator=(const chunked_vector&) = delete;
  ~chunked_vector() { clear(); }

  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }

  void push_back(const T& v) {
    if (size_ == chunks_.size() * chunk_size) {
      void* p = mmap(nullptr, chunk_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
      if (p == MAP_FAILED) throw std::bad_alloc();
      chunks_.push_back(static_cast<T*>(p));
    }
    new (&(*this)[size_]) T(v);
    ++size_;
  }
  void pop_back() noexcept { --size_; }
  T& back() noexcept { return (*this)[size_ - 1]; }
  const T& back() const noexcept { return (*this)[size_ - 1]; }

  T& operator[](std::size_t i) noexcept { return chunks_[i / chunk_size][i % chunk_size]; }
  const T& operator[](std::size_t i) const noexcept { return chunks_[i / chunk_size][i % chunk_size]; }

  template <class F>
  void for_each(F&& f) const {
    for (std::size_t i = 0; i < size_; ++i) f((*this)[i]);
  }

  // Calls f on every element in order, freeing each chunk once it is read;
  // the vector is empty afterwards.
  template <class F>
  void consume(F&& f) {
    for (std::size_t c = 0; c < chunks_.size(); ++c) {
      const std::size_t n = std::min(chunk_size, size_ - std::min(size_, c * chunk_size));
      for (std::size_t i = 0; i < n; ++i) f(chunks_[c][i]);
      munmap(chunks_[c], chunk_bytes);
      chunks_[c] = nullptr;
    }
    clear();
  }

  void clear() noexcept {
    for (T* chunk : chunks_)
      if (chunk) munmap(chunk, chunk_bytes);
    std::vector<T*>().swap(chunks_);
    size_ = 0;
  }

 private:
  std::vector<T*> chunks_;
  std::size_t size_ = 0;
};

}  // namespace cuprof::detail
