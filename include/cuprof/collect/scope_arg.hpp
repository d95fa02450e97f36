// A scope's argument: CUPROF_SCOPE("gemm", {{"M", m}, {"N", n}, {"K", k}}).
// A key and an integer or floating-point value, 16 bytes plus a flag, kept
// as given: recording copies the key's pointer and the value's bits, so that
// a scope with arguments neither allocates nor formats. Dependency-free.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace cuprof {

// At most this many arguments per scope (a compile-time check).
inline constexpr std::size_t max_scope_args = 6;

struct scope_arg {
  // The key must outlive the program's last profiler, as a static name does:
  // a string literal. Integers are kept as int64, floating point as double.
  template <class T, std::enable_if_t<std::is_integral_v<T>, int> = 0>
  constexpr scope_arg(const char* k, T v) noexcept : key(k), bits(std::uint64_t(std::int64_t(v))), is_real(false) {}
  template <class T, std::enable_if_t<std::is_floating_point_v<T>, int> = 0>
  scope_arg(const char* k, T v) noexcept : key(k), bits(real_bits(double(v))), is_real(true) {}

  const char* key;
  std::uint64_t bits;  // the int64, or the double's bits
  bool is_real;

 private:
  static std::uint64_t real_bits(double d) noexcept {
    std::uint64_t b;
    std::memcpy(&b, &d, sizeof b);
    return b;
  }
};

}  // namespace cuprof
