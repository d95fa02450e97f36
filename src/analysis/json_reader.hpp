// The JSON stage of reading a trace, with simdjson's On-Demand parser
// (libsimdjson-dev; private to the analysis library: neither its public
// header nor the instrumentation headers include this). The trace reader walks the top-level members and the
// traceEvents array, and reads each element into a small flat tree
// (json_node), validated whole: numbers are kept as their text, so that
// timestamps convert to integer nanoseconds exactly, and strings are views of
// the document (or of simdjson's buffer when they hold escapes), so an event
// costs no allocation. Errors say where: the line and column of the byte.
#pragma once

#include <simdjson.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cuprof::detail {

enum class json_kind : std::uint8_t { null, boolean, number, string, array, object };

const char* json_type_name(json_kind k);

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
void pad_for_json(std::string& bytes);

// What simdjson refuses but a trace may hold, and the old reader read: raw
// control bytes inside strings (some torch traces have tabs and line breaks in
// names) and invalid UTF-8 (names cut inside a character). The copy given to
// the parser has the first escaped (\u00XX) and the second replaced by U+FFFD,
// as cuprof's writer replaces it. Each change is a json_rewrite, in order.
struct json_rewrite {
  std::size_t at;     // where it begins in the copy
  std::size_t width;  // its bytes in the copy, for 1 of the text
  std::size_t grown;  // the copy's extra bytes up to its end
};

// The bytes of the UTF-8 character at `s` (`left` bytes readable), or 0 when
// it is not valid UTF-8 there.
std::size_t utf8_length(const unsigned char* s, std::size_t left) noexcept;

// The copy of `text` the parser is given, its changes listed in `rewrites`.
std::string json_for_parser(std::string_view text, std::vector<json_rewrite>& rewrites);

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
  simdjson::ondemand::value root();

  // Calls `f(key, value)` for each member of `object`, in order.
  template <class F>
  void for_each_member(simdjson::ondemand::value object, F&& f) {
    for (auto member : got<simdjson::ondemand::object>(object.get_object(), "expected an object")) {
      auto m = got<simdjson::ondemand::field>(std::move(member), "expected a member (\"name\": value), ',' or '}'");
      f(key_of(m), m.value());
    }
  }

  // Calls `f(item)` for each item of `array`.
  template <class F>
  void for_each_item(simdjson::ondemand::value array, F&& f) {
    for (auto item : got<simdjson::ondemand::array>(array.get_array(), "expected an array"))
      f(got<simdjson::ondemand::value>(std::move(item), "expected a value, ',' or ']'"));
  }

  // After the root: nothing but blanks may follow.
  void expect_end();

  // Which members of an object read() keeps: `depth` 0 for the value read,
  // `object` the object's own member name. The others are skipped unread:
  // simdjson has checked their strings and brackets, not their grammar.
  using member_filter = bool (*)(int depth, std::string_view object, std::string_view key);

  // Reads `v` into `out` (cleared), checking as JSON what it keeps; the
  // value is out.front(), its members (or items) after it.
  const json_node& read(simdjson::ondemand::value v, std::vector<json_node>& out, member_filter keep = nullptr);

  // Gives the memory of the text before `at` back to the system (whole
  // pages): what was read there is not needed again, and the parser's
  // structural index already holds as many bytes as the text, so a large
  // trace's peak stays under twice its size. Its lines are counted first,
  // for fail_at(); its bytes read as zeros after. Not for a rewritten text
  // (json_for_parser), whose copy is what the parser reads.
  void release_before(std::size_t at);

  // Throws the error `what` at offset `at` of the text, as its line and column.
  [[noreturn]] void fail_at(std::size_t at, const std::string& what) const;

 private:
  std::size_t bom() const noexcept { return text_.substr(0, 3) == "\xEF\xBB\xBF" ? 3 : 0; }

  std::size_t skip_blanks(std::size_t at) const noexcept {
    while (at < text_.size() && (text_[at] == ' ' || text_[at] == '\n' || text_[at] == '\r' || text_[at] == '\t')) ++at;
    return at;
  }

  // A place in the parsed text as an offset in the document.
  std::size_t offset_of(const char* p) const noexcept;

  // Where the parser stands: at the end when it ran past it.
  std::size_t here();

  // Fails, saying what was `expected` where the parser stands, on an error.
  void check(simdjson::error_code e, const char* expected);

  // What a parser result holds, or check()'s failure.
  template <class T, class Result>
  T got(Result&& r, const char* expected) {
    T value;
    check(std::forward<Result>(r).get(value), expected);
    return value;
  }

  std::string_view key_of(simdjson::ondemand::field& m);

  void read_into(simdjson::ondemand::value v, std::string_view key, std::vector<json_node>& out, int depth);

  static bool is_json_number(std::string_view s);

  // What is wrong in the string starting at `s` (after its quote) that the parser refused.
  std::string bad_escape(const char* s) const;

  // The byte at `at`, as an error message names it.
  std::string describe(std::size_t at) const;

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
