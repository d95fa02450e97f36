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

// At most `characters` characters (at least 4); a cut ends in "...".
inline std::string shorten(std::string_view s, std::size_t characters) {
  if (utf8_length(s) <= characters) return std::string(s);
  return utf8_prefix(s, characters - 3) + "...";
}

// A name as it may reach a terminal: a kernel or scope name is data from the
// traced program or a trace file, and an escape sequence in it (ESC ] 0 ; ...
// BEL retitles the window, ESC [ 31 m recolours, CR overwrites the line) must
// not act. C0 controls, DEL and the C1 controls (U+0080..U+009F, which some
// terminals obey too) are written as \xNN of their bytes; everything else,
// and so every ordinary name, is left byte for byte.
inline std::string terminal_safe(std::string_view s) {
  const auto is_control = [&](std::size_t i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    return c < 0x20 || c == 0x7F ||
           (c == 0xC2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) >= 0x80 &&
            static_cast<unsigned char>(s[i + 1]) <= 0x9F);
  };
  std::size_t i = 0;
  while (i < s.size() && !is_control(i)) ++i;
  if (i == s.size()) return std::string(s);
  static const char hex[] = "0123456789abcdef";
  std::string out(s.substr(0, i));
  const auto escape = [&](unsigned char c) { out += {'\\', 'x', hex[c >> 4], hex[c & 15]}; };
  for (; i < s.size(); ++i) {
    if (!is_control(i)) {
      out += s[i];
      continue;
    }
    escape(static_cast<unsigned char>(s[i]));
    if (static_cast<unsigned char>(s[i]) == 0xC2) escape(static_cast<unsigned char>(s[++i]));
  }
  return out;
}

// A name for a text column: safe to print, then cut to `characters`.
inline std::string display_name(std::string_view name, std::size_t characters) {
  return shorten(terminal_safe(name), characters);
}

}  // namespace cuprof::detail
