// Text for people: the one place where names are cut to a width and made safe
// to print. Tables, insights, diffs and warnings all go through here. Also the
// prefix and suffix tests that std::string_view gains only in C++20.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace cuprof::detail {

inline bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

inline bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// A..Z to a..z, every other byte as it is (settings and kernel names are
// matched without regard to case, and without the locale).
inline std::string ascii_lowercase(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
  return out;
}

// Widths and cuts count characters, as torch's (Python) layout does, and a cut
// never splits a multi-byte UTF-8 character.
inline std::size_t utf8_length(std::string_view s) {
  std::size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

inline std::string utf8_prefix(std::string_view s, std::size_t characters) {
  std::size_t i = 0;
  for (std::size_t seen = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80 && seen++ == characters) break;
  }
  return std::string(s.substr(0, i));
}

// The last `characters` characters.
inline std::string utf8_suffix(std::string_view s, std::size_t characters) {
  const std::size_t length = utf8_length(s);
  if (length <= characters) return std::string(s);
  return std::string(s.substr(utf8_prefix(s, length - characters).size()));
}

// At most `characters` characters (at least 4); a cut ends in "...".
inline std::string shorten(std::string_view s, std::size_t characters) {
  if (utf8_length(s) <= characters) return std::string(s);
  return utf8_prefix(s, characters - 3) + "...";
}

// A name as it may reach a terminal: a kernel or scope name is data from the
// traced program or a trace file, and an escape sequence in it (ESC ] 0 ; ...
// BEL retitles the window, ESC [ 31 m recolours, CR overwrites the line) must
// not act. C0 controls, DEL and the C1 controls (U+0080..U+009F, which some
// terminals obey too) are written as \xNN of their bytes. So are the
// bidirectional-text controls (U+202A..U+202E embeddings and overrides,
// U+2066..U+2069 isolates, U+200E/U+200F and U+061C marks): they reorder what
// follows on the line, so that a name could show as another. Everything else,
// and so every ordinary name, is left byte for byte.
inline std::size_t unsafe_bytes_at(std::string_view s, std::size_t i) {
  const auto byte = [&](std::size_t k) { return k < s.size() ? static_cast<unsigned char>(s[k]) : 0u; };
  const unsigned c = byte(i);
  if (c < 0x20 || c == 0x7F) return 1;
  if (c == 0xC2 && byte(i + 1) >= 0x80 && byte(i + 1) <= 0x9F) return 2;  // C1
  if (c == 0xD8 && byte(i + 1) == 0x9C) return 2;                         // U+061C
  if (c == 0xE2 && byte(i + 1) == 0x80) {
    const unsigned d = byte(i + 2);
    if (d == 0x8E || d == 0x8F || (d >= 0xAA && d <= 0xAE)) return 3;  // U+200E, U+200F, U+202A..U+202E
  }
  if (c == 0xE2 && byte(i + 1) == 0x81 && byte(i + 2) >= 0xA6 && byte(i + 2) <= 0xA9) return 3;  // U+2066..U+2069
  return 0;
}

inline std::string terminal_safe(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size() && !unsafe_bytes_at(s, i)) ++i;
  if (i == s.size()) return std::string(s);
  static const char hex[] = "0123456789abcdef";
  std::string out(s.substr(0, i));
  while (i < s.size()) {
    const std::size_t n = unsafe_bytes_at(s, i);
    if (!n) {
      out += s[i++];
      continue;
    }
    for (const std::size_t end = i + n; i < end; ++i) {
      const unsigned char c = static_cast<unsigned char>(s[i]);
      out += {'\\', 'x', hex[c >> 4], hex[c & 15]};
    }
  }
  return out;
}

// A name for a text column: safe to print, then cut to `characters`.
inline std::string display_name(std::string_view name, std::size_t characters) {
  return shorten(terminal_safe(name), characters);
}

}  // namespace cuprof::detail
