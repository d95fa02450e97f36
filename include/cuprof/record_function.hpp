// Scoped annotations, torch's record_function for C++.
//
//   { CUPROF_SCOPE("matmul_add"); ... }        // static name: the fast path
//   { cuprof::record_function r(some_string); } // dynamic name: copied
//   void f() { CUPROF_FUNCTION(); ... }
//   { CUPROF_SCOPE("gemm", {{"M", m}, {"N", n}, {"K", k}}); ... }  // with arguments
//
// Arguments (scope_arg.hpp: literal keys, integer or floating-point values,
// at most max_scope_args) go into the trace as the scope's args; a scope
// with them writes one more slot, and one per argument, in the same append.
// When no profiler records, a scope costs one relaxed load and a branch. While
// one records, enter and exit each read the clock and append 16 bytes to a
// thread-local chunk: no lock, no allocation, no system call, no CUPTI call.
// This header includes no CUDA header.
#pragma once

#include "base/config.hpp"
#include "collect/scope_arg.hpp"

#include <cstddef>
#ifndef CUPROF_DISABLE
#include "collect/thread_buffer.hpp"

#include <cstdint>
#include <string_view>
#endif
#if defined(CUPROF_NVTX) && !defined(CUPROF_DISABLE)
#include <nvtx3/nvToolsExt.h>
#endif

namespace cuprof {

#if defined(CUPROF_NVTX) && !defined(CUPROF_DISABLE)
namespace detail {
// With CUPROF_NVTX defined, every scope is also an NVTX range in the "cuprof"
// domain, so Nsight Systems shows it; cuprof's own NVTX capture skips that domain.
inline nvtxDomainHandle_t nvtx_domain() {
  static const nvtxDomainHandle_t domain = nvtxDomainCreateA("cuprof");
  return domain;
}
inline void nvtx_push(const char* name) noexcept {
  nvtxEventAttributes_t a{};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = name;
  nvtxDomainRangePushEx(nvtx_domain(), &a);
}
inline void nvtx_push(std::string_view name) noexcept {
  char buf[256];  // NVTX wants a terminated string; long names are cut
  const std::size_t n = name.size() < sizeof buf - 1 ? name.size() : sizeof buf - 1;
  for (std::size_t i = 0; i < n; ++i) buf[i] = name[i];
  buf[n] = '\0';
  nvtx_push(static_cast<const char*>(buf));
}
}  // namespace detail
#define CUPROF_NVTX_PUSH(name) ::cuprof::detail::nvtx_push(name)
#define CUPROF_NVTX_POP() nvtxDomainRangePop(::cuprof::detail::nvtx_domain())
#else
#define CUPROF_NVTX_PUSH(name) static_cast<void>(0)
#define CUPROF_NVTX_POP() static_cast<void>(0)
#endif

// A name whose characters outlive the program's last profiler, such as a
// string literal or __func__. Scopes keep only the pointer (never null).
struct static_name {
  const char* str;
};

class record_function {
 public:
#ifndef CUPROF_DISABLE
  explicit record_function(static_name name) noexcept {
    CUPROF_NVTX_PUSH(name.str);
    if (CUPROF_LIKELY(!detail::cpu_recording())) return;
    detail::thread_buffer* b = detail::current_thread_buffer();
    if (CUPROF_UNLIKELY(!b)) return;
    if (b->push({detail::make_head(detail::slot_kind::enter_static, detail::now_ticks()),
                 std::uint64_t(reinterpret_cast<std::uintptr_t>(name.str))}))
      serial_ = b->serial();
  }
  explicit record_function(std::string_view name) noexcept {
    CUPROF_NVTX_PUSH(name);
    if (CUPROF_LIKELY(!detail::cpu_recording())) return;
    enter_dynamic(name, nullptr, 0);
  }
  template <std::size_t N>
  record_function(static_name name, const scope_arg (&args)[N]) noexcept {
    static_assert(N <= max_scope_args, "cuprof: a scope takes at most max_scope_args arguments");
    CUPROF_NVTX_PUSH(name.str);
    if (CUPROF_LIKELY(!detail::cpu_recording())) return;
    enter_static_with_args(name, args, N);
  }
  template <std::size_t N>
  record_function(std::string_view name, const scope_arg (&args)[N]) noexcept {
    static_assert(N <= max_scope_args, "cuprof: a scope takes at most max_scope_args arguments");
    CUPROF_NVTX_PUSH(name);
    if (CUPROF_LIKELY(!detail::cpu_recording())) return;
    enter_dynamic(name, args, N);
  }
  ~record_function() {
    if (serial_) detail::push_exit(serial_);
    CUPROF_NVTX_POP();
  }
#else
  template <class Name>
  explicit record_function(const Name&) noexcept {}
  template <class Name, std::size_t N>
  record_function(const Name&, const scope_arg (&)[N]) noexcept {}
#endif

  record_function(const record_function&) = delete;
  record_function& operator=(const record_function&) = delete;
  record_function(record_function&&) = delete;
  record_function& operator=(record_function&&) = delete;
  // Scopes must nest (LIFO per thread), so they live on the stack only.
  static void* operator new(std::size_t) = delete;
  static void* operator new[](std::size_t) = delete;

 private:
#ifndef CUPROF_DISABLE
  CUPROF_NOINLINE void enter_dynamic(std::string_view name, const scope_arg* args, std::size_t n) noexcept {
    detail::thread_buffer* b = detail::current_thread_buffer();
    if (!b) return;
    if (b->push_dynamic(detail::now_ticks(), name, args, n)) serial_ = b->serial();
  }
  CUPROF_NOINLINE void enter_static_with_args(static_name name, const scope_arg* args, std::size_t n) noexcept {
    detail::thread_buffer* b = detail::current_thread_buffer();
    if (!b) return;
    if (b->push_with_args({detail::make_head(detail::slot_kind::enter_static, detail::now_ticks()),
                           std::uint64_t(reinterpret_cast<std::uintptr_t>(name.str))},
                          args, n))
      serial_ = b->serial();
  }
  // The serial of the buffer the enter went to, 0 when none was recorded. A
  // serial, not the buffer's address: the exit may run on another thread, or
  // after the entering thread exited and its buffer was freed (a scope held
  // in a std::optional, a coroutine resumed elsewhere); push_exit then drops
  // and counts it without touching that buffer.
  std::uint64_t serial_ = 0;
#endif
};

}  // namespace cuprof

#ifndef CUPROF_DISABLE
// CUPROF_SCOPE(name) or CUPROF_SCOPE(name, {{"key", value}, ...}). "" name ""
// rejects anything but a string literal, whose storage is static. The empty
// argument appended keeps a one-argument call valid C++17; it leaves a
// trailing comma, which a braced initializer allows.
#define CUPROF_SCOPE(...) CUPROF_SCOPE_WITH_(__VA_ARGS__, )
#define CUPROF_SCOPE_WITH_(name, ...) \
  ::cuprof::record_function CUPROF_UNIQUE_NAME(cuprof_scope_) { ::cuprof::static_name{"" name ""}, __VA_ARGS__ }
#define CUPROF_FUNCTION()                                       \
  ::cuprof::record_function CUPROF_UNIQUE_NAME(cuprof_scope_) { \
    ::cuprof::static_name { __func__ }                          \
  }
#else
#define CUPROF_SCOPE(...) static_cast<void>(0)
#define CUPROF_FUNCTION() static_cast<void>(0)
#endif
