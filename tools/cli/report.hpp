// `--format csv|json`: the figures of table, insights and diff for programs.
// A command gives its main list as a record_table (CSV prints that one list:
// a header row, one row per item) and writes everything, that list included,
// through json_writer. Times are microseconds with three decimals, exactly,
// as in the trace files; names are escaped by the trace writer's escaping.
#pragma once

#include <cuprof/base/text.hpp>
#include <cuprof/output/json_text.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cuprof::cli {

enum class output_format : std::uint8_t { text, csv, json };

struct cell {
  enum class kind : std::uint8_t { string, literal };  // literal: a number, true, false or null, written as is
  kind type = kind::string;
  std::string text;
};

inline cell str(std::string s) { return {cell::kind::string, std::move(s)}; }
inline cell num(std::uint64_t n) { return {cell::kind::literal, std::to_string(n)}; }
inline cell signed_num(std::int64_t n) { return {cell::kind::literal, std::to_string(n)}; }
inline cell flag(bool b) { return {cell::kind::literal, b ? "true" : "false"}; }

// Nanoseconds as microseconds with three decimals.
inline cell us(std::uint64_t ns) {
  cell c{cell::kind::literal, {}};
  detail::append_us(c.text, ns);
  return c;
}

// A derived figure (a per-step time, a percentage), three decimals; null when not finite.
inline cell real(double v) {
  cell c{cell::kind::literal, "null"};
  if (std::isfinite(v)) {
    c.text.clear();
    detail::append_double(c.text, v);
  }
  return c;
}

struct record_table {
  std::vector<std::string> columns;
  std::vector<std::vector<cell>> rows;  // one cell per column
};

inline std::string json_string(std::string_view s) {
  std::string out = "\"";
  detail::append_json_escaped(out, s);
  return out + "\"";
}

// A CSV field (RFC 4180): quoted, with quotes doubled, when it holds a comma,
// a quote or starts or ends with a blank. Names are made terminal-safe as in
// the text output, which also writes line breaks as \x0a: one record a line.
// A name is data from the traced program, and a spreadsheet runs a cell that
// starts with =, +, -, @, tab or CR as a formula: such a cell gets
// a leading single quote, which makes it text (OWASP's advice on CSV
// injection), and is quoted. Numbers are literals and stay numbers.
inline std::string csv_field(const cell& c) {
  if (c.type == cell::kind::literal) return c.text == "null" ? std::string() : c.text;
  const bool formula = !c.text.empty() && std::string_view("=+-@\t\r").find(c.text.front()) != std::string_view::npos;
  const std::string safe = (formula ? "'" : "") + detail::terminal_safe(c.text);
  if (!formula && safe.find_first_of(",\"") == std::string::npos && (safe.empty() || (safe.front() != ' ' && safe.back() != ' ')))
    return safe;
  std::string out = "\"";
  for (char ch : safe) out += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return out + "\"";
}

inline std::string to_csv(const record_table& t) {
  std::string out;
  for (std::size_t i = 0; i < t.columns.size(); ++i) out += (i ? "," : "") + csv_field(str(t.columns[i]));
  out += "\n";
  for (const auto& row : t.rows) {
    for (std::size_t i = 0; i < row.size(); ++i) out += (i ? "," : "") + csv_field(row[i]);
    out += "\n";
  }
  return out;
}

// Writes one JSON document: objects and arrays opened and closed in order,
// two spaces of indentation a level, a record table's rows one a line.
class json_writer {
 public:
  json_writer() { out_ = "{"; }

  json_writer& field(std::string_view key, const cell& value) {
    this->key(key);
    out_ += value.type == cell::kind::literal ? value.text : json_string(value.text);
    return *this;
  }
  json_writer& field(std::string_view key, const std::vector<std::string>& strings) {
    this->key(key);
    out_ += "[";
    for (std::size_t i = 0; i < strings.size(); ++i) out_ += (i ? ", " : "") + json_string(strings[i]);
    out_ += "]";
    return *this;
  }
  json_writer& field(std::string_view key, const record_table& t) {
    this->key(key);
    out_ += "[";
    for (std::size_t row = 0; row < t.rows.size(); ++row) {
      out_ += row ? ",\n" : "\n";
      out_.append(2 * (depth_ + 1), ' ');
      out_ += "{";
      for (std::size_t i = 0; i < t.columns.size(); ++i) {
        const cell& c = t.rows[row][i];
        out_ +=
            (i ? ", " : "") + json_string(t.columns[i]) + ": " + (c.type == cell::kind::literal ? c.text : json_string(c.text));
      }
      out_ += "}";
    }
    if (!t.rows.empty()) out_ += "\n" + std::string(2 * depth_, ' ');
    out_ += "]";
    return *this;
  }
  json_writer& open(std::string_view key) {
    this->key(key);
    out_ += "{";
    ++depth_;
    first_ = true;
    return *this;
  }
  json_writer& close() {
    --depth_;
    out_ += "\n" + std::string(2 * depth_, ' ') + "}";
    first_ = false;
    return *this;
  }
  std::string text() const { return out_ + "\n}\n"; }

 private:
  void key(std::string_view k) {
    out_ += first_ ? "\n" : ",\n";
    first_ = false;
    out_.append(2 * depth_, ' ');
    out_ += json_string(k) + ": ";
  }

  std::string out_;
  std::size_t depth_ = 1;
  bool first_ = true;
};

}  // namespace cuprof::cli
