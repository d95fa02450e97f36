// JSON text helpers for the trace writer: string escaping that always yields
// valid UTF-8, integer-nanosecond timestamps printed as microseconds, and
// members' keys.
#pragma once

#include "../model/event.hpp"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>

namespace cuprof::detail {

// An append-only byte buffer for the trace writer: one capacity check and a
// memcpy per piece, none of std::string's per-append bookkeeping. Its appends
// are forced inline, so that a piece of constant size copies as a few moves.
class text_buffer {
 public:
  explicit text_buffer(std::size_t capacity = 1 << 16) : data_(new char[capacity]), capacity_(capacity) {}

  [[gnu::always_inline]] void append(const char* p, std::size_t n) {
    if (n > capacity_ - size_) grow(n);
    std::memcpy(data_.get() + size_, p, n);
    size_ += n;
  }
  [[gnu::always_inline]] void push_back(char c) {
    if (size_ == capacity_) grow(1);
    data_[size_++] = c;
  }
  text_buffer& operator+=(char c) {
    push_back(c);
    return *this;
  }
  // A string literal: its length known where it is written, so the copy is a
  // few moves, not a strlen and a memcpy call.
  template <std::size_t N>
  text_buffer& operator+=(const char (&literal)[N]) {
    append(literal, N - 1);
    return *this;
  }
  text_buffer& operator+=(std::string_view s) {
    append(s.data(), s.size());
    return *this;
  }
  text_buffer& operator+=(const std::string& s) {
    append(s.data(), s.size());
    return *this;
  }

  // Room for `n` more bytes at the end, to write in place; added(k) keeps k of them.
  [[gnu::always_inline]] char* room(std::size_t n) {
    if (n > capacity_ - size_) grow(n);
    return data_.get() + size_;
  }
  void added(std::size_t n) noexcept { size_ += n; }

  const char* data() const noexcept { return data_.get(); }
  std::size_t size() const noexcept { return size_; }
  std::size_t capacity() const noexcept { return capacity_; }
  void clear() noexcept { size_ = 0; }
  void swap(text_buffer& other) noexcept {
    data_.swap(other.data_);
    std::swap(size_, other.size_);
    std::swap(capacity_, other.capacity_);
  }

 private:
  // Out of line: the appends above stay small enough to inline, with
  // constant-size copies for literals.
  [[gnu::noinline]] void grow(std::size_t extra) {
    std::size_t capacity = capacity_ * 2;
    while (capacity - size_ < extra) capacity *= 2;
    std::unique_ptr<char[]> bigger(new char[capacity]);
    std::memcpy(bigger.get(), data_.get(), size_);
    data_.swap(bigger);
    capacity_ = capacity;
  }

  std::unique_ptr<char[]> data_;
  std::size_t size_ = 0;
  std::size_t capacity_;
};

// Length of the valid UTF-8 sequence at s[i], or 0 if the bytes there are not one.
inline std::size_t utf8_sequence_length(std::string_view s, std::size_t i) noexcept {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  std::size_t n;
  std::uint32_t cp;
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) {
    n = 2;
    cp = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    n = 3;
    cp = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    n = 4;
    cp = c & 0x07;
  } else return 0;
  if (i + n > s.size()) return 0;
  for (std::size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  // Overlong forms, surrogates and values past U+10FFFF are not valid UTF-8.
  static constexpr std::uint32_t min_for_length[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < min_for_length[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

// Appends `s` as the inside of a JSON string: quotes, backslashes and control
// characters escaped, invalid UTF-8 bytes replaced by U+FFFD, characters
// beyond the BMP kept raw (Perfetto rejects surrogate escapes).
template <class Out>
inline void append_json_escaped(Out& out, std::string_view s) {
  static constexpr char hex[] = "0123456789abcdef";
  for (std::size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {
      out.push_back(char(c));
      ++i;
      continue;
    }
    switch (c) {
      case '"':
        out += "\\\"";
        ++i;
        continue;
      case '\\':
        out += "\\\\";
        ++i;
        continue;
      case '\n':
        out += "\\n";
        ++i;
        continue;
      case '\t':
        out += "\\t";
        ++i;
        continue;
      case '\r':
        out += "\\r";
        ++i;
        continue;
      default: break;
    }
    if (c < 0x20 || c == 0x7F) {
      out += "\\u00";
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
      ++i;
      continue;
    }
    const std::size_t n = utf8_sequence_length(s, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD
      ++i;
    } else {
      out.append(s.data() + i, n);
      i += n;
    }
  }
}

inline std::string json_escaped(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  append_json_escaped(out, s);
  return out;
}

template <class Out, class Int>
inline void append_int(Out& out, Int v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, std::size_t(r.ptr - buf));
}

// The trace writer's: digits written in place.
template <class Int>
[[gnu::always_inline]] inline void append_int(text_buffer& out, Int v) {
  char* at = out.room(24);
  out.added(std::size_t(std::to_chars(at, at + 24, v).ptr - at));
}

// Its commonest numbers, ids and microseconds (under 71 minutes) of up to 10
// digits: the length from comparisons (the same few branches, number after
// number), then two digits at a time from the last, in place; 64-bit values
// that fit take the same way.
[[gnu::always_inline]] inline void append_int(text_buffer& out, std::uint32_t v) {
  static constexpr char pairs[] =
      "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
      "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
      "8081828384858687888990919293949596979899";
  const std::size_t n = v < 100000       ? (v < 100     ? (v < 10 ? 1 : 2)
                                            : v < 1000  ? 3
                                            : v < 10000 ? 4
                                                        : 5)
                        : v < 10000000   ? (v < 1000000 ? 6 : 7)
                        : v < 100000000  ? 8
                        : v < 1000000000 ? 9
                                         : 10;
  char* at = out.room(10) + n;
  while (v >= 100) {
    at -= 2;
    std::memcpy(at, pairs + 2 * (v % 100), 2);
    v /= 100;
  }
  if (v >= 10) std::memcpy(at - 2, pairs + 2 * v, 2);
  else at[-1] = char('0' + v);
  out.added(n);
}
[[gnu::always_inline]] inline void append_int(text_buffer& out, std::uint64_t v) {
  if (v <= UINT32_MAX) return append_int(out, std::uint32_t(v));
  char* at = out.room(24);
  out.added(std::size_t(std::to_chars(at, at + 24, v).ptr - at));
}

// Nanoseconds as microseconds with the decimals needed and no more: "12.345",
// "12.34", "12.3", "12". Exact (JSON numbers are decimal text); 0.4 bytes
// shorter per number than three decimals on the GPU traces of tests/data/gpu.
template <class Out>
inline void append_us(Out& out, std::uint64_t ns) {
  append_int(out, ns / 1000);
  const unsigned frac = unsigned(ns % 1000);
  if (frac == 0) return;
  const char digits[4] = {'.', char('0' + frac / 100), char('0' + frac / 10 % 10), char('0' + frac % 10)};
  if (frac % 10) out.append(digits, 4);  // constant sizes: a few moves each
  else if (frac % 100) out.append(digits, 3);
  else out.append(digits, 2);
}

// The microseconds from `from` to `to`, 0 where `to` is not later: a "dur",
// or a "ts" after the trace's base (a time before the base written as 0).
template <class Out>
inline void append_us_between(Out& out, std::uint64_t from, std::uint64_t to) {
  append_us(out, to > from ? to - from : 0);
}

// Three decimals by default, never exponent notation (496.485, 0.008): enough
// for the derived figures it prints (blocks per SM, bandwidth) and short; two
// for percentages (GPU metrics).
template <class Out>
inline void append_double(Out& out, double v, int decimals = 3) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed, decimals);
  out.append(buf, std::size_t(r.ptr - buf));
}

// A double as the shortest text that reads back to it ("0.1", "1e+20"), or
// non_finite_name() quoted.
template <class Out>
inline void append_json_real(Out& out, double v) {
  if (!std::isfinite(v)) {
    const std::string_view name = non_finite_name(v);  // model/event.hpp
    out.append("\"", 1);
    out.append(name.data(), name.size());
    out.append("\"", 1);
    return;
  }
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, std::size_t(r.ptr - buf));
}

// A member's key, "key": (and ,"key": after another member), for keys that
// need no escaping: the schema's and the viewers'. Forced inline: a constant
// key then copies as a constant.
[[gnu::always_inline]] inline void append_key(text_buffer& out, std::string_view key) {
  out += '"';
  out += key;
  out += "\":";
}
[[gnu::always_inline]] inline void append_next_key(text_buffer& out, std::string_view key) {
  out += ',';
  append_key(out, key);
}

}  // namespace cuprof::detail
