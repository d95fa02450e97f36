#include "trace_input.hpp"

#include <cuprof/base/error.hpp>

#include <sys/mman.h>
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace cuprof::detail {

void json_text_check::feed(const char* data, std::size_t n) {
  // By slices: most are plainly text, seen a word at a time; a slice that
  // is not goes through the byte loop, which says where.
  constexpr std::size_t slice = 1u << 16;  // well under max_blank_run: a longer run spans slices
  for (std::size_t from = 0; from < n; from += slice) {
    const std::size_t len = std::min(slice, n - from);
    if (!plain_text(data + from, len)) check_bytes(data + from, len);
    offset_ += len;
  }
}

bool json_text_check::plain_text(const char* p, std::size_t len) noexcept {
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

void json_text_check::check_bytes(const char* data, std::size_t n) {
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

void json_text_check::refuse(std::uint64_t at, const std::string& what) const {
  throw error("'" + source_ + "': byte " + std::to_string(at) + where_ + " is " + what);
}

std::string gunzip(const std::string& in, const std::string& source, const read_progress& progress) {
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
    if (total > out.capacity())
      out.reserve(std::size_t(std::min(max_decompressed, std::max<std::uint64_t>(total, 2 * out.capacity()))));
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

void advise_huge_pages(const char* data, std::size_t size) noexcept {
  constexpr std::uintptr_t huge = std::uintptr_t(2) << 20;
  const std::uintptr_t from = (reinterpret_cast<std::uintptr_t>(data) + huge - 1) & ~(huge - 1);
  const std::uintptr_t to = (reinterpret_cast<std::uintptr_t>(data) + size) & ~(huge - 1);
  if (to > from) ::madvise(reinterpret_cast<void*>(from), std::size_t(to - from), MADV_HUGEPAGE);
}

bool is_gzip(std::string_view bytes) {
  return bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x1f && static_cast<unsigned char>(bytes[1]) == 0x8b;
}

bool ends_with_gz(const std::string& path) { return path.size() >= 3 && path.compare(path.size() - 3, 3, ".gz") == 0; }

}  // namespace cuprof::detail
