#include "json_reader.hpp"

#include <cuprof/base/error.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>

namespace cuprof::detail {

const char* json_type_name(json_kind k) {
  switch (k) {
    case json_kind::null: return "null";
    case json_kind::boolean: return "a boolean";
    case json_kind::number: return "a number";
    case json_kind::string: return "a string";
    case json_kind::array: return "an array";
    default: return "an object";
  }
}

void pad_for_json(std::string& bytes) {
  const std::size_t n = bytes.size();
  bytes.resize(n + simdjson::SIMDJSON_PADDING);  // reallocates only when the capacity is short
  bytes.resize(n);
}

std::size_t utf8_length(const unsigned char* s, std::size_t left) noexcept {
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

std::string json_for_parser(std::string_view text, std::vector<json_rewrite>& rewrites) {
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

simdjson::ondemand::value json_document::root() {
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
  return got<simdjson::ondemand::value>(doc_.get_value(), "expected a value");
}

void json_document::expect_end() {
  const char* at = nullptr;
  if (doc_.current_location().get(at) == simdjson::SUCCESS)
    fail_at(offset_of(at), "unexpected data after the end of the JSON document");
}

const json_node& json_document::read(simdjson::ondemand::value v, std::vector<json_node>& out, member_filter keep) {
  out.clear();
  keep_ = keep;
  read_into(v, {}, out, 0);
  return out.front();
}

void json_document::release_before(std::size_t at) {
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

void json_document::fail_at(std::size_t at, const std::string& what) const {
  const std::size_t end = std::max(released_, at < text_.size() ? at : text_.size());
  std::size_t line = 1 + released_lines_, line_start = released_line_start_;
  const char* const stop = text_.data() + end;
  for (const char* p = text_.data() + released_;
       p < stop && (p = static_cast<const char*>(std::memchr(p, '\n', std::size_t(stop - p))));)
    ++line, line_start = std::size_t(++p - text_.data());
  const std::size_t column = end - line_start + 1;
  std::string msg = source_ + ": line " + std::to_string(line) + ", column " + std::to_string(column);
  if (at >= text_.size()) msg += ": unexpected end of input (truncated?)";
  throw error(msg + ": " + what);
}

std::size_t json_document::offset_of(const char* p) const noexcept {
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

std::size_t json_document::here() {
  const char* at = nullptr;
  return doc_.current_location().get(at) == simdjson::SUCCESS ? offset_of(at) : text_.size();
}

void json_document::check(simdjson::error_code e, const char* expected) {
  if (!e) return;
  const std::size_t at = here();
  if (at >= text_.size()) fail_at(at, expected);
  fail_at(at, std::string(expected) + ", found " + describe(at));
}

std::string_view json_document::key_of(simdjson::ondemand::field& m) {
  const char* raw = m.key().raw();
  const char* end = raw;
  while (*end != '"' && *end != '\\') ++end;  // the parser found the string closed
  if (*end == '"') return std::string_view(raw, std::size_t(end - raw));
  std::string_view key;
  if (m.unescaped_key().get(key)) fail_at(offset_of(raw) - 1, bad_escape(raw));
  return key;
}

void json_document::read_into(simdjson::ondemand::value v, std::string_view key, std::vector<json_node>& out, int depth) {
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

bool json_document::is_json_number(std::string_view s) {
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

std::string json_document::bad_escape(const char* s) const {
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

std::string json_document::describe(std::size_t at) const {
  if (at >= text_.size()) return "the end of input";
  const unsigned char c = static_cast<unsigned char>(text_[at]);
  if (c >= 0x20 && c < 0x7F) return std::string("'") + char(c) + "'";
  static const char hex[] = "0123456789abcdef";
  return std::string("byte 0x") + hex[c >> 4] + hex[c & 15];
}

}  // namespace cuprof::detail
