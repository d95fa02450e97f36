// The JSON stage of reading a trace, with simdjson's On-Demand parser
// (libsimdjson-dev; the analysis side only: the instrumentation headers never
// include this). The trace reader walks the top-level members and the
// traceEvents array, and reads each element into a small flat tree
// (json_node), validated whole: numbers are kept as their text, so that
// timestamps convert to integer nanoseconds exactly, and strings are views of
// the document (or of simdjson's buffer when they hold escapes), so an event
// costs no allocation. Errors say where: the line and column of the byte.
#pragma once

#include <cuprof/base/error.hpp>

#include <simdjson.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace cuprof::detail {

enum class json_kind : std::uint8_t { null, boolean, number, string, array, object };

inline const char* json_type_name(json_kind k) {
  switch (k) {
    case json_kind::null: return "null";
    case json_kind::boolean: return "a boolean";
    case json_kind::number: return "a number";
    case json_kind::string: return "a string";
    case json_kind::array: return "an array";
    default: return "an object";
  }
}

// One value of a tree read by json_document::read(), which stores a value's
// members (or items) right after it, in order: a node and its descendants are
// contiguous. Views stay valid while the document lives.
struct json_node {
  json_kind type = json_kind::null;
  bool boolean = false;
  std::uint32_t count = 0;        // an object's members, an array's items
  std::uint32_t descendants = 0;  // the nodes after this one that belong to it
  std::size_t offset = 0;         // where it starts in the document
  std::string_view key;           // the member's name, in an object
  std::string_view text;          // a string's characters, or a number as written

  bool is_number() const noexcept { return type == json_kind::number; }
  bool is_string() const noexcept { return type == json_kind::string; }
  bool is_object() const noexcept { return type == json_kind::object; }
  bool is_array() const noexcept { return type == json_kind::array; }

  const json_node* first() const noexcept { return this + 1; }
  const json_node* next() const noexcept { return this + 1 + descendants; }

  // The first member named `k`, or null (also when this is not an object).
  const json_node* find(std::string_view k) const noexcept {
    if (type != json_kind::object) return nullptr;
    const json_node* m = first();
    for (std::uint32_t i = 0; i < count; ++i, m = m->next())
      if (same_key(m->key, k)) return m;
    return nullptr;
  }

  // Equal keys; most differ in size or first letter, which is cheaper to see than a memcmp call.
  static bool same_key(std::string_view a, std::string_view b) noexcept {
    return a.size() == b.size() && (a.empty() || (a[0] == b[0] && std::memcmp(a.data(), b.data(), a.size()) == 0));
  }
};

// simdjson reads past the end of the text it parses: a buffer holding JSON
// gets this much room after it, zero-filled (its capacity, not its size).
inline void pad_for_json(std::string& bytes) {
  const std::size_t n = bytes.size();
  bytes.resize(n + simdjson::SIMDJSON_PADDING);  // reallocates only when the capacity is short
  bytes.resize(n);
}

// What simdjson refuses but a trace may hold, and the old reader read: raw
// control bytes inside strings (some torch traces have tabs and line breaks in
// names) and invalid UTF-8 (names cut inside a character). The copy given to
// the parser has the first escaped (\u00XX) and the second replaced by U+FFFD,
// as cuprof's writer replaces it. Each change is a json_rewrite, in order.
struct json_rewrite {
  std::size_t at;      // where it begins in the copy
  std::size_t width;   // its bytes in the copy, for 1 of the text
  std::size_t grown;   // the copy's extra bytes up to its end
};

inline std::size_t utf8_length(const unsigned char* s, std::size_t left) noexcept {  // 0: not valid UTF-8 here
  const unsigned char c = s[0];
  if (c < 0x80) return 1;
  std::size_t n = 0;
  unsigned char low = 0x80, high = 0xBF;  // the second byte's range
  if (c >= 0xC2 && c <= 0xDF) n = 2;
  else if (c >= 0xE0 && c <= 0xEF) n = 3, low = c == 0xE0 ? 0xA0 : 0x80, high = c == 0xED ? 0x9F : 0xBF;
  else if (c >= 0xF0 && c <= 0xF4) n = 4, low = c == 0xF0 ? 0x90 : 0x80, high = c == 0xF4 ? 0x8F : 0xBF;
  if (n == 0 || n > left || s[1] < low || s[1] > high) return 0;
  for (std::size_t k = 2; k < n; ++k)
    if ((s[k] & 0xC0) != 0x80) return 0;
  return n;
}

inline std::string json_for_parser(std::string_view text, std::vector<json_rewrite>& rewrites) {
  std::string out;
  out.reserve(text.size() + text.size() / 16 + simdjson::SIMDJSON_PADDING);
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  bool in_string = false, escaped = false;
  const auto rewrite = [&](const char* with, std::size_t width) {
    const std::size_t grown = (rewrites.empty() ? 0 : rewrites.back().grown) + width - 1;
    rewrites.push_back({out.size(), width, grown});
    out.append(with, width);
  };
  for (std::size_t i = 0; i < text.size();) {
    const unsigned char c = s[i];
    if (in_string && c < 0x20) {
      static const char hex[] = "0123456789abcdef";
      const char esc[] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
      rewrite(esc, sizeof esc);
      escaped = false;
      ++i;
      continue;
    }
    const std::size_t n = utf8_length(s + i, text.size() - i);
    if (n == 0) {
      rewrite("\xEF\xBF\xBD", 3);
      escaped = false;
      ++i;
      continue;
    }
    out.append(text.data() + i, n);
    if (escaped) escaped = false;
    else if (in_string && c == '\\') escaped = true;
    else if (c == '"') in_string = !in_string;
    i += n;
  }
  pad_for_json(out);
  return out;
}

class json_document {
 public:
  static constexpr int max_depth = 64;

  // `text` must be followed by simdjson::SIMDJSON_PADDING readable bytes
  // (pad_for_json); release_before() may give its pages back. `source`
  // names it in messages. `parser`: one to reuse (its buffers), for a thread
  // that reads many documents in turn; else the document's own.
  json_document(std::string_view text, std::string source, simdjson::ondemand::parser* parser = nullptr)
      : text_(text), source_(std::move(source)), parser_(parser ? *parser : own_parser_) {}

  // Where the document's value starts: past a UTF-8 byte order mark and
  // blanks (the text's size if there is none).
  std::size_t start() const noexcept { return skip_blanks(bom()); }

  // Starts the parse (the text at start() is '{' or '['): the document's value.
  simdjson::ondemand::value root() {
    std::string_view parsed = text_.substr(bom());
    simdjson::error_code e = parser_.iterate(parsed, parsed.size() + simdjson::SIMDJSON_PADDING).get(doc_);
    if (e == simdjson::UNESCAPED_CHARS || e == simdjson::UTF8_ERROR) {
      rewritten_ = json_for_parser(parsed, rewrites_);
      parsed = rewritten_;
      e = parser_.iterate(rewritten_).get(doc_);
    }
    parsed_ = parsed.data();
    if (e == simdjson::UNCLOSED_STRING) fail_at(text_.size(), "unterminated string");
    if (e == simdjson::CAPACITY) fail_at(0, "larger than 4 GiB of JSON, more than the parser (simdjson) reads at once");
    if (e) fail_at(0, simdjson::error_message(e));
    simdjson::ondemand::value v;
    check(doc_.get_value().get(v), "expected a value");
    return v;
  }

  // Calls `f(key, value)` for each member of `object`, in order.
  template <class F>
  void for_each_member(simdjson::ondemand::value object, F&& f) {
    simdjson::ondemand::object o;
    check(object.get_object().get(o), "expected an object");
    for (auto member : o) {
      simdjson::ondemand::field m;
      check(std::move(member).get(m), "expected a member (\"name\": value), ',' or '}'");
      const std::string_view key = key_of(m);
      f(key, m.value());
    }
  }

  // Calls `f(item)` for each item of `array`.
  template <class F>
  void for_each_item(simdjson::ondemand::value array, F&& f) {
    simdjson::ondemand::array a;
    check(array.get_array().get(a), "expected an array");
    for (auto item : a) {
      simdjson::ondemand::value v;
      check(std::move(item).get(v), "expected a value, ',' or ']'");
      f(v);
    }
  }

  // After the root: nothing but blanks may follow.
  void expect_end() {
    const char* at = nullptr;
    if (doc_.current_location().get(at) == simdjson::SUCCESS)
      fail_at(offset_of(at), "unexpected data after the end of the JSON document");
  }

  // Which members of an object read() keeps: `depth` 0 for the value read,
  // `object` the object's own member name. The others are skipped unread:
  // simdjson has checked their strings and brackets, not their grammar.
  using member_filter = bool (*)(int depth, std::string_view object, std::string_view key);

  // Reads `v` into `out` (cleared), checking as JSON what it keeps; the
  // value is out.front(), its members (or items) after it.
  const json_node& read(simdjson::ondemand::value v, std::vector<json_node>& out, member_filter keep = nullptr) {
    out.clear();
    keep_ = keep;
    read_into(v, {}, out, 0);
    return out.front();
  }


  // Gives the memory of the text before `at` back to the system (whole
  // pages): what was read there is not needed again, and the parser's
  // structural index already holds as many bytes as the text, so a large
  // trace's peak stays under twice its size. Its lines are counted first,
  // for fail_at(); its bytes read as zeros after. Not for a rewritten text
  // (json_for_parser), whose copy is what the parser reads.
  void release_before(std::size_t at) {
    if (!rewrites_.empty() || at > text_.size()) return;
    static const std::uintptr_t page = std::uintptr_t(::sysconf(_SC_PAGESIZE));
    const std::uintptr_t base = reinterpret_cast<std::uintptr_t>(text_.data());
    const std::uintptr_t from = (base + released_ + page - 1) / page * page, to = (base + at) / page * page;
    if (to <= from) return;
    const std::size_t upto = std::size_t(to - base);
    const char* const counted = text_.data() + released_;
    released_lines_ += std::size_t(std::count(counted, text_.data() + upto, '\n'));
    for (const char* p = text_.data() + upto; p > counted;)
      if (*--p == '\n') {
        released_line_start_ = std::size_t(p + 1 - text_.data());
        break;
      }
    released_ = upto;
    ::madvise(reinterpret_cast<void*>(from), std::size_t(to - from), MADV_DONTNEED);
  }

  [[noreturn]] void fail_at(std::size_t at, const std::string& what) const {
    const std::size_t end = std::max(released_, at < text_.size() ? at : text_.size());
    std::size_t line = 1 + released_lines_, line_start = released_line_start_;
    const char* const stop = text_.data() + end;
    for (const char* p = text_.data() + released_; p < stop && (p = static_cast<const char*>(std::memchr(p, '\n', std::size_t(stop - p))));)
      ++line, line_start = std::size_t(++p - text_.data());
    const std::size_t column = end - line_start + 1;
    std::string msg = source_ + ": line " + std::to_string(line) + ", column " + std::to_string(column);
    if (at >= text_.size()) msg += ": unexpected end of input (truncated?)";
    throw error(msg + ": " + what);
  }

 private:
  std::size_t bom() const noexcept { return text_.substr(0, 3) == "\xEF\xBB\xBF" ? 3 : 0; }

  std::size_t skip_blanks(std::size_t at) const noexcept {
    while (at < text_.size() && (text_[at] == ' ' || text_[at] == '\n' || text_[at] == '\r' || text_[at] == '\t')) ++at;
    return at;
  }

  // A place in the parsed text as an offset in the document.
  std::size_t offset_of(const char* p) const noexcept {
    std::size_t in_parsed = std::size_t(p - parsed_);
    const auto after = std::upper_bound(rewrites_.begin(), rewrites_.end(), in_parsed,
                                        [](std::size_t at, const json_rewrite& r) { return at < r.at; });
    if (after != rewrites_.begin()) {
      const json_rewrite& r = after[-1];  // the last rewrite at or before the place
      in_parsed = in_parsed < r.at + r.width ? r.at + r.width - 1 - r.grown : in_parsed - r.grown;
    }
    const std::size_t at = bom() + in_parsed;
    return at < text_.size() ? at : text_.size();
  }

  // Where the parser stands: at the end when it ran past it.
  std::size_t here() {
    const char* at = nullptr;
    return doc_.current_location().get(at) == simdjson::SUCCESS ? offset_of(at) : text_.size();
  }

  void check(simdjson::error_code e, const char* expected) {
    if (!e) return;
    const std::size_t at = here();
    if (at >= text_.size()) fail_at(at, expected);
    fail_at(at, std::string(expected) + ", found " + describe(at));
  }

  std::string_view key_of(simdjson::ondemand::field& m) {
    const char* raw = m.key().raw();
    const char* end = raw;
    while (*end != '"' && *end != '\\') ++end;  // the parser found the string closed
    if (*end == '"') return std::string_view(raw, std::size_t(end - raw));
    std::string_view key;
    if (m.unescaped_key().get(key)) fail_at(offset_of(raw) - 1, bad_escape(raw));
    return key;
  }

  void read_into(simdjson::ondemand::value v, std::string_view key, std::vector<json_node>& out, int depth) {
    std::string_view token = v.raw_json_token();
    while (!token.empty() && (token.back() == ' ' || token.back() == '\n' || token.back() == '\r' || token.back() == '\t'))
      token.remove_suffix(1);
    const std::size_t at = offset_of(token.data());
    const std::size_t index = out.size();
    out.emplace_back();
    out[index].key = key;
    out[index].offset = at;
    simdjson::ondemand::json_type type;
    if (v.type().get(type)) {
      if (at >= text_.size()) fail_at(at, "expected a value");
      fail_at(at, "expected a value, found " + describe(at));
    }
    switch (type) {
      case simdjson::ondemand::json_type::object:
      case simdjson::ondemand::json_type::array: {
        if (depth >= max_depth) fail_at(at, "nesting deeper than " + std::to_string(max_depth) + " levels");
        const bool object = type == simdjson::ondemand::json_type::object;
        out[index].type = object ? json_kind::object : json_kind::array;
        std::uint32_t count = 0;
        if (object)
          for_each_member(v, [&](std::string_view k, simdjson::ondemand::value m) {
            if (!keep_ || keep_(depth, key, k)) read_into(m, k, out, depth + 1), ++count;
          });
        else for_each_item(v, [&](simdjson::ondemand::value item) { read_into(item, {}, out, depth + 1), ++count; });
        out[index].count = count;
        out[index].descendants = std::uint32_t(out.size() - index - 1);
        break;
      }
      case simdjson::ondemand::json_type::number:
        if (!is_json_number(token)) fail_at(at, "invalid number");
        if (token.size() > 400) fail_at(at, "number too long");
        out[index].type = json_kind::number;
        out[index].text = token;
        break;
      case simdjson::ondemand::json_type::string: {
        std::string_view s = token.substr(1, token.size() >= 2 ? token.size() - 2 : 0);
        if (s.find('\\') != std::string_view::npos && v.get_string().get(s)) fail_at(at, bad_escape(token.data() + 1));
        out[index].type = json_kind::string;
        out[index].text = s;
        break;
      }
      case simdjson::ondemand::json_type::boolean:
        if (token != "true" && token != "false") fail_at(at, "expected a value, found " + describe(at));
        out[index].type = json_kind::boolean;
        out[index].boolean = token == "true";
        break;
      default:
        if (token != "null") fail_at(at, "expected a value, found " + describe(at));
        out[index].type = json_kind::null;
    }
  }

  static bool is_json_number(std::string_view s) {
    std::size_t i = 0;
    const auto digits = [&] {
      const std::size_t from = i;
      while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
      return i > from;
    };
    if (i < s.size() && s[i] == '-') ++i;
    if (i < s.size() && s[i] == '0') ++i;
    else if (!digits()) return false;
    if (i < s.size() && s[i] == '.' && (++i, !digits())) return false;
    if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
      ++i;
      if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
      if (!digits()) return false;
    }
    return i == s.size();
  }

  // What is wrong in the string starting at `s` (after its quote) that the parser refused.
  std::string bad_escape(const char* s) const {
    for (const char* p = s; *p != '"'; ++p) {
      if (*p != '\\') continue;
      const char e = *++p;
      if (e == 'u') {
        for (int i = 1; i <= 4; ++i)
          if (!std::isxdigit(static_cast<unsigned char>(p[i]))) return "invalid \\u escape";
        p += 4;
      } else if (!std::strchr("\"\\/bfnrt", e) || e == '\0') {
        return std::string("invalid escape '\\") + e + "'";
      }
    }
    return "invalid \\u escape (a lone UTF-16 surrogate)";
  }

  std::string describe(std::size_t at) const {
    if (at >= text_.size()) return "the end of input";
    const unsigned char c = static_cast<unsigned char>(text_[at]);
    if (c >= 0x20 && c < 0x7F) return std::string("'") + char(c) + "'";
    static const char hex[] = "0123456789abcdef";
    return std::string("byte 0x") + hex[c >> 4] + hex[c & 15];
  }

  std::string_view text_;
  std::string source_;
  std::size_t released_ = 0, released_lines_ = 0, released_line_start_ = 0;  // release_before()
  std::string rewritten_;  // json_for_parser()'s copy, for a text that needs one
  std::vector<json_rewrite> rewrites_;
  const char* parsed_ = nullptr;
  member_filter keep_ = nullptr;
  simdjson::ondemand::parser own_parser_;
  simdjson::ondemand::parser& parser_;
  simdjson::ondemand::document doc_;
};

}  // namespace cuprof::detail
