// The byte stage of reading a trace: what a file or buffer holds before it is
// parsed as JSON: gzip data inflated in bounded memory, and JSON text checked
// as it arrives, so that binary or zero-filled input is refused early.
#pragma once

#include <cuprof/analysis.hpp>

#include <cstdint>
#include <string>
#include <string_view>

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

  void feed(const char* data, std::size_t n);

 private:
  static bool is_blank(unsigned char c) noexcept { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

  // True, with the blank run brought up to date, when `p` holds no control
  // byte but blanks and does not make the blank run too long.
  bool plain_text(const char* p, std::size_t len) noexcept;

  void check_bytes(const char* data, std::size_t n);

  [[noreturn]] void refuse(std::uint64_t at, const std::string& what) const;

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
std::string gunzip(const std::string& in, const std::string& source, const read_progress& progress = {});

// Asks for transparent huge pages behind a large buffer about to be filled,
// where the system grants them on request: reading 300 MB into it then takes
// hundreds of page faults, not 75,000. It is filled whole: no more memory.
void advise_huge_pages(const char* data, std::size_t size) noexcept;

bool is_gzip(std::string_view bytes);

bool ends_with_gz(const std::string& path);

}  // namespace cuprof::detail
