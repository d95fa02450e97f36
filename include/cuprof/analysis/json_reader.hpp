// A small JSON reader for trace files: strict grammar, no recursion (nesting
// is limited), numbers kept as their text so timestamps convert to integer
// nanoseconds exactly, and errors that say where (line and column). The trace
// reader pulls the top-level members and the traceEvents array one element at
// a time, so a large trace is never held as one tree.
#pragma once

#include "../error.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cuprof::detail {

struct json_value {
  enum class kind : std::uint8_t { null, boolean, number, string, array, object };
  kind type = kind::null;
  bool boolean = false;
  std::string text;  // a string's characters, or a number as written
  std::vector<json_value> items;                            // array
  std::vector<std::pair<std::string, json_value>> members;  // object, in order

  bool is_number() const noexcept { return type == kind::number; }
  bool is_string() const noexcept { return type == kind::string; }
  bool is_object() const noexcept { return type == kind::object; }
  bool is_array() const noexcept { return type == kind::array; }

  const json_value* find(std::string_view key) const noexcept {
    if (type != kind::object) return nullptr;
    for (const auto& m : members)
      if (m.first == key) return &m.second;
    return nullptr;
  }
};

inline const char* json_type_name(json_value::kind k) {
  switch (k) {
    case json_value::kind::null: return "null";
    case json_value::kind::boolean: return "a boolean";
    case json_value::kind::number: return "a number";
    case json_value::kind::string: return "a string";
    case json_value::kind::array: return "an array";
    default: return "an object";
  }
}

class json_reader {
 public:
  static constexpr int max_depth = 64;

  json_reader(std::string_view text, std::string source) : s_(text), source_(std::move(source)) {
    // A UTF-8 byte order mark is tolerated.
    if (s_.substr(0, 3) == "\xEF\xBB\xBF") pos_ = 3;
  }

  [[noreturn]] void fail(const std::string& what) const { fail_at(pos_, what); }

  [[noreturn]] void fail_at(std::size_t at, const std::string& what) const {
    std::size_t line = 1, column = 1;
    for (std::size_t i = 0; i < at && i < s_.size(); ++i) {
      if (s_[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    std::string msg = source_ + ": line " + std::to_string(line) + ", column " + std::to_string(column);
    if (at >= s_.size()) msg += ": unexpected end of input (truncated?)";
    throw error(msg + ": " + what);
  }

  void skip_ws() noexcept {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\r' || s_[pos_] == '\t')) ++pos_;
  }

  // The next non-blank character, or '\0' at the end.
  char peek() {
    skip_ws();
    return pos_ < s_.size() ? s_[pos_] : '\0';
  }

  void expect(char c) {
    if (peek() != c) {
      if (pos_ >= s_.size()) fail(std::string("expected '") + c + "'");
      fail(std::string("expected '") + c + "', found " + describe_here());
    }
    ++pos_;
  }

  // After '[' or '{' was consumed and one element was read: true if another follows.
  bool next_in(char close) {
    const char c = peek();
    if (c == ',') {
      ++pos_;
      return true;
    }
    if (c == close) {
      ++pos_;
      return false;
    }
    if (pos_ >= s_.size()) fail(std::string("expected ',' or '") + close + "'");
    fail(std::string("expected ',' or '") + close + "', found " + describe_here());
  }

  // Right after '[' or '{': true if the container is empty (and consumes the close).
  bool empty_container(char close) {
    if (peek() == close) {
      ++pos_;
      return true;
    }
    return false;
  }

  std::string read_string() {
    if (peek() != '"') fail("expected a string, found " + describe_here());
    ++pos_;
    std::string out;
    while (true) {
      if (pos_ >= s_.size()) fail("unterminated string");
      const char c = s_[pos_++];
      if (c == '"') return out;
      if (c != '\\') {
        out.push_back(c);  // raw control characters are tolerated: some torch traces have them
        continue;
      }
      if (pos_ >= s_.size()) fail("unterminated string");
      const char e = s_[pos_++];
      switch (e) {
        case '"': out.push_back('"'); break;
        case '\\': out.push_back('\\'); break;
        case '/': out.push_back('/'); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'n': out.push_back('\n'); break;
        case 'r': out.push_back('\r'); break;
        case 't': out.push_back('\t'); break;
        case 'u': {
          std::uint32_t cp = hex4();
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (s_.substr(pos_, 2) == "\\u") {
              const std::size_t save = pos_;
              pos_ += 2;
              const std::uint32_t low = hex4();
              if (low >= 0xDC00 && low <= 0xDFFF) cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
              else { pos_ = save; cp = 0xFFFD; }
            } else {
              cp = 0xFFFD;
            }
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            cp = 0xFFFD;
          }
          append_utf8(out, cp);
          break;
        }
        default: fail_at(pos_ - 1, std::string("invalid escape '\\") + e + "'");
      }
    }
  }

  // Any value, containers included, without recursion.
  json_value read_value() {
    json_value root;
    std::vector<json_value*> stack;
    json_value* target = &root;
    while (true) {
      const char c = peek();
      bool opened = false;
      if (c == '{' || c == '[') {
        if (int(stack.size()) >= max_depth) fail("nesting deeper than " + std::to_string(max_depth) + " levels");
        ++pos_;
        target->type = c == '{' ? json_value::kind::object : json_value::kind::array;
        if (!empty_container(c == '{' ? '}' : ']')) {
          stack.push_back(target);
          opened = true;
        }
      } else {
        read_scalar(*target);
      }
      if (opened) {
        json_value* parent = stack.back();
        target = begin_element(*parent);
        continue;
      }
      // Close every container this value completed, then start the next element.
      while (!stack.empty()) {
        json_value* parent = stack.back();
        if (next_in(parent->type == json_value::kind::object ? '}' : ']')) {
          target = begin_element(*parent);
          break;
        }
        stack.pop_back();
      }
      if (stack.empty()) return root;
    }
  }

  void skip_value() { (void)read_value(); }

  bool at_end() {
    skip_ws();
    return pos_ >= s_.size();
  }
  std::size_t position() const noexcept { return pos_; }

 private:
  json_value* begin_element(json_value& parent) {
    if (parent.type == json_value::kind::object) {
      std::string key = read_string();
      expect(':');
      parent.members.emplace_back(std::move(key), json_value{});
      return &parent.members.back().second;
    }
    parent.items.emplace_back();
    return &parent.items.back();
  }

  void read_scalar(json_value& v) {
    const char c = peek();
    if (c == '"') {
      v.type = json_value::kind::string;
      v.text = read_string();
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      v.type = json_value::kind::number;
      v.text = read_number();
    } else if (s_.substr(pos_, 4) == "true") {
      v.type = json_value::kind::boolean;
      v.boolean = true;
      pos_ += 4;
    } else if (s_.substr(pos_, 5) == "false") {
      v.type = json_value::kind::boolean;
      pos_ += 5;
    } else if (s_.substr(pos_, 4) == "null") {
      v.type = json_value::kind::null;
      pos_ += 4;
    } else if (pos_ >= s_.size()) {
      fail("expected a value");
    } else {
      fail("expected a value, found " + describe_here());
    }
  }

  std::string read_number() {
    const std::size_t start = pos_;
    const auto digit = [&] { return pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9'; };
    if (s_[pos_] == '-') ++pos_;
    if (!digit()) fail("invalid number");
    if (s_[pos_] == '0') ++pos_;
    else while (digit()) ++pos_;
    if (pos_ < s_.size() && s_[pos_] == '.') {
      ++pos_;
      if (!digit()) fail("invalid number");
      while (digit()) ++pos_;
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (!digit()) fail("invalid number");
      while (digit()) ++pos_;
    }
    if (pos_ - start > 400) fail_at(start, "number too long");
    return std::string(s_.substr(start, pos_ - start));
  }

  std::uint32_t hex4() {
    if (pos_ + 4 > s_.size()) fail("truncated \\u escape");
    std::uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const char h = s_[pos_++];
      v <<= 4;
      if (h >= '0' && h <= '9') v |= std::uint32_t(h - '0');
      else if (h >= 'a' && h <= 'f') v |= std::uint32_t(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F') v |= std::uint32_t(h - 'A' + 10);
      else fail_at(pos_ - 1, "invalid \\u escape");
    }
    return v;
  }

  static void append_utf8(std::string& out, std::uint32_t cp) {
    if (cp < 0x80) {
      out.push_back(char(cp));
    } else if (cp < 0x800) {
      out.push_back(char(0xC0 | (cp >> 6)));
      out.push_back(char(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out.push_back(char(0xE0 | (cp >> 12)));
      out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
      out.push_back(char(0x80 | (cp & 0x3F)));
    } else {
      out.push_back(char(0xF0 | (cp >> 18)));
      out.push_back(char(0x80 | ((cp >> 12) & 0x3F)));
      out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
      out.push_back(char(0x80 | (cp & 0x3F)));
    }
  }

  std::string describe_here() const {
    if (pos_ >= s_.size()) return "the end of input";
    const unsigned char c = static_cast<unsigned char>(s_[pos_]);
    if (c >= 0x20 && c < 0x7F) return std::string("'") + char(c) + "'";
    char buf[16] = {};  // initialised: GCC 12 -O1 with ASan warns otherwise
    static const char hex[] = "0123456789abcdef";
    buf[0] = 'b'; buf[1] = 'y'; buf[2] = 't'; buf[3] = 'e'; buf[4] = ' '; buf[5] = '0'; buf[6] = 'x';
    buf[7] = hex[c >> 4];
    buf[8] = hex[c & 15];
    return std::string(buf, 9);
  }

  std::string_view s_;
  std::string source_;
  std::size_t pos_ = 0;
};

}  // namespace cuprof::detail
