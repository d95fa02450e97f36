// The byte stage of reading a trace: what a file or buffer holds before it is
// parsed as JSON: gzip data inflated in bounded memory, and JSON text checked
// as it arrives, so that binary or zero-filled input is refused early.
#pragma once

#include <cuprof/base/error.hpp>

#include <sys/mman.h>
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>

namespace cuprof {

// How far a read has come, for a progress display: called often (each 64 KiB
// read or decompressed, each MiB parsed), cheap when `report` is null.
// `done` and `total` count bytes of that stage's input; `total` is 0 when
// unknown (a pipe).
enum class read_stage : std::uint8_t { reading, decompressing, parsing };

struct read_progress {
  void (*report)(void* context, read_stage stage, std::uint64_t done, std::uint64_t total) = nullptr;
  void* context = nullptr;

  void operator()(read_stage stage, std::uint64_t done, std::uint64_t total) const {
    if (report) report(context, stage, done, total);
  }
};

}  // namespace cuprof

namespace cuprof::detail {

// Checks text as it arrives, before it is parsed or even held whole. A trace
// is JSON text: it never holds a NUL or another control byte but tab, line
// feed and carriage return (JSON escapes them inside strings), and no trace
// writer puts a megabyte of whitespace in a row (indentation is a few bytes a
// line). So a zero-filled or sparse file, binary data, or a gzip bomb of
// zeros or blanks is refused after its first bytes, in constant memory.
class json_text_check {
 public:
  static constexpr std::size_t max_blank_run = 1u << 20;

  // `source`: the file; `where`: "" for its own bytes, or " of its decompressed data".
  json_text_check(const std::string& source, const char* where) : source_(source), where_(where) {}

  void feed(const char* data, std::size_t n) {
    // By slices: most are plainly text, seen a word at a time; a slice that
    // is not goes through the byte loop, which says where.
    constexpr std::size_t slice = 1u << 16;  // well under max_blank_run: a longer run spans slices
    for (std::size_t from = 0; from < n; from += slice) {
      const std::size_t len = std::min(slice, n - from);
      if (!plain_text(data + from, len)) check_bytes(data + from, len);
      offset_ += len;
    }
  }

 private:
  static bool is_blank(unsigned char c) noexcept { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

  // True, with the blank run brought up to date, when `p` holds no control
  // byte but blanks and does not make the blank run too long.
  bool plain_text(const char* p, std::size_t len) noexcept {
    std::size_t i = 0;
    for (; i + 8 <= len; i += 8) {
      std::uint64_t w;
      std::memcpy(&w, p + i, 8);
      if (((w - 0x2020202020202020ull) & ~w & 0x8080808080808080ull) == 0) continue;  // no byte below 0x20
      for (std::size_t k = i; k < i + 8; ++k)
        if (static_cast<unsigned char>(p[k]) < 0x20 && !is_blank(static_cast<unsigned char>(p[k]))) return false;
    }
    for (; i < len; ++i)
      if (static_cast<unsigned char>(p[i]) < 0x20 && !is_blank(static_cast<unsigned char>(p[i]))) return false;
    std::size_t leading = 0, trailing = 0;
    while (leading < len && is_blank(static_cast<unsigned char>(p[leading]))) ++leading;
    if (leading == len) {
      if (blank_run_ + len > max_blank_run) return false;
      blank_run_ += len;
      return true;
    }
    if (blank_run_ + leading > max_blank_run) return false;
    while (is_blank(static_cast<unsigned char>(p[len - 1 - trailing]))) ++trailing;
    blank_run_ = trailing;
    return true;
  }

  void check_bytes(const char* data, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
      const unsigned char c = static_cast<unsigned char>(data[i]);
      if (is_blank(c)) {
        if (++blank_run_ > max_blank_run)
          refuse(offset_ + i, "more than 1 MiB of whitespace in a row: not a trace (no trace writer emits that)");
      } else {
        blank_run_ = 0;
        if (c == 0) refuse(offset_ + i, "a NUL byte: not JSON text (a zero-filled or sparse file, or binary data)");
        if (c < 0x20) {
          char hex[8];
          std::snprintf(hex, sizeof hex, "0x%02x", c);
          refuse(offset_ + i, std::string("a control byte (") + hex + "): not JSON text (binary data?)");
        }
      }
    }
  }

  [[noreturn]] void refuse(std::uint64_t at, const std::string& what) const {
    throw error("'" + source_ + "': byte " + std::to_string(at) + where_ + " is " + what);
  }

  const std::string& source_;
  const char* where_;
  std::uint64_t offset_ = 0;
  std::size_t blank_run_ = 0;
};

// Beyond what json_text_check sees, a bomb of valid-looking JSON is bounded
// by size. Real traces are large, and gzip 15-25x (cuprof writes level 1,
// less): a million kernel launches make about 600 MB of JSON, and cuprof's
// default record cap (16 Mi records) about 4 GB in one window. So 8 GiB is
// twice the largest trace cuprof writes by default, and past 256 MiB a ratio
// above 100x (4-7 times the usual) is not a trace anyone wrote. The output
// never grows past the cap by capacity doubling. A real trace beyond these
// reads once decompressed (gunzip): plain JSON has no cap but its size.
constexpr std::uint64_t max_decompressed = 8ull << 30;
constexpr std::uint64_t ratio_checked_from = 256ull << 20;
constexpr std::uint64_t max_ratio = 100;

// The bytes of a gzip (or zlib) stream, all members; throws on damage.
inline std::string gunzip(const std::string& in, const std::string& source, const read_progress& progress = {}) {
  const auto refuse = [&](const std::string& why) {
    throw error("'" + source + "' " + why + ": refused as a decompression bomb (gunzip it to read it anyway)");
  };
  json_text_check check(source, " of its decompressed data");
  std::string out;
  z_stream z;
  std::memset(&z, 0, sizeof z);
  if (inflateInit2(&z, 15 + 32) != Z_OK) throw error(source + ": cannot initialise zlib");
  struct inflate_end {
    z_stream& z;
    ~inflate_end() { inflateEnd(&z); }
  } end{z};
  std::size_t consumed = 0;
  char buf[1 << 16];
  int rc = Z_OK;
  while (true) {
    const std::size_t left = in.size() - consumed;
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data() + consumed));
    z.avail_in = uInt(std::min<std::size_t>(left, 1u << 30));
    const uInt given = z.avail_in;
    z.next_out = reinterpret_cast<Bytef*>(buf);
    z.avail_out = sizeof buf;
    rc = inflate(&z, Z_NO_FLUSH);
    consumed += given - z.avail_in;
    const std::size_t produced = sizeof buf - z.avail_out;
    check.feed(buf, produced);
    const std::uint64_t total = std::uint64_t(out.size()) + produced;
    if (total > max_decompressed) refuse("decompresses to more than " + std::to_string(max_decompressed >> 30) + " GiB");
    if (total > ratio_checked_from && total > max_ratio * std::uint64_t(consumed))
      refuse("decompresses to more than " + std::to_string(max_ratio) + " times its compressed size");
    if (total > out.capacity()) out.reserve(std::size_t(std::min(max_decompressed, std::max<std::uint64_t>(total, 2 * out.capacity()))));
    out.append(buf, produced);
    progress(read_stage::decompressing, consumed, in.size());
    const bool moved = given != z.avail_in || z.avail_out != sizeof buf;
    if (rc == Z_STREAM_END) {
      // Another member may follow (concatenated gzip files); trailing zeros are padding.
      std::size_t rest = consumed;
      while (rest < in.size() && in[rest] == '\0') ++rest;
      if (rest >= in.size()) break;
      if (inflateReset(&z) != Z_OK) break;
      consumed = rest;
      continue;
    }
    if ((rc == Z_OK || rc == Z_BUF_ERROR) && consumed >= in.size() && z.avail_out != 0)
      throw error(source + ": truncated gzip data");
    if ((rc == Z_OK || rc == Z_BUF_ERROR) && moved) continue;
    if (rc == Z_OK || rc == Z_BUF_ERROR)  // no progress with input and room left: stop rather than spin
      throw error(source + ": not valid gzip data");
    throw error(source + ": not valid gzip data (" + (z.msg ? z.msg : "invalid data") + ")");
  }
  return out;
}

// Asks for transparent huge pages behind a large buffer about to be filled,
// where the system grants them on request: reading 300 MB into it then takes
// hundreds of page faults, not 75,000. It is filled whole: no more memory.
inline void advise_huge_pages(const char* data, std::size_t size) noexcept {
  constexpr std::uintptr_t huge = std::uintptr_t(2) << 20;
  const std::uintptr_t from = (reinterpret_cast<std::uintptr_t>(data) + huge - 1) & ~(huge - 1);
  const std::uintptr_t to = (reinterpret_cast<std::uintptr_t>(data) + size) & ~(huge - 1);
  if (to > from) ::madvise(reinterpret_cast<void*>(from), std::size_t(to - from), MADV_HUGEPAGE);
}

inline bool is_gzip(std::string_view bytes) {
  return bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x1f && static_cast<unsigned char>(bytes[1]) == 0x8b;
}

inline bool ends_with_gz(const std::string& path) {
  return path.size() >= 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
}

}  // namespace cuprof::detail
