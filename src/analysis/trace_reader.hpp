// The stages of reading a trace back, behind the public read_trace_file(),
// parse_trace() and the like (cuprof/analysis.hpp): bytes (trace_input.hpp:
// gzip, text checks), JSON values (json_reader.hpp: simdjson's On-Demand
// parser) read against the schema into raw events (trace_events.hpp), and the
// model built from them (build_trace, here). A large document's events are
// read in pieces on several threads.
#pragma once

#include "json_reader.hpp"
#include "trace_events.hpp"
#include "trace_input.hpp"
#include <cuprof/analysis.hpp>
#include <cuprof/base/error.hpp>
#include <cuprof/output/trace_schema.hpp>

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cuprof::detail {

// An id the file gives an event (External id, correlation) as the index
// keys it: ids outside 32 bits are not linked.
std::optional<std::uint32_t> file_id(std::int64_t id);

// The build stage: raw events to the model, times made absolute, parents
// linked by nesting, GPU work attributed as the file says.
void build_trace(raw_trace& raw, loaded_trace& out);

// The top level of a document: its members but "traceEvents" read as they
// come, each "traceEvents" array (or the bare array of the JSON Array Format)
// handed to `events(doc, array)`.
template <class Events>
void read_top_level(std::string_view json, const std::string& source, trace_event_reader& b, Events&& events) {
  json_document doc(json, source);
  const std::size_t start = doc.start();
  if (start >= json.size()) throw error(source + ": empty input, expected a JSON trace");
  const char first = json[start];
  if (first != '{' && first != '[') doc.fail_at(start, "expected a JSON object with \"traceEvents\"");
  bool saw_events = false;
  std::vector<json_node> nodes;
  simdjson::ondemand::value root = doc.root();
  if (first == '{') {
    doc.for_each_member(root, [&](std::string_view key, simdjson::ondemand::value v) {
      if (key != schema::key_trace_events) return b.top_level(key, doc.read(v, nodes), doc);
      simdjson::ondemand::json_type type;
      if (v.type().get(type) || type != simdjson::ondemand::json_type::array) {
        const json_node& value = doc.read(v, nodes);
        doc.fail_at(value.offset, std::string("\"traceEvents\" is ") + json_type_name(value.type) + ", expected an array");
      }
      saw_events = true;
      events(doc, v);
    });
  } else {
    saw_events = true;
    events(doc, root);
  }
  doc.expect_end();
  if (!saw_events) throw error(source + ": no \"traceEvents\" array: not a Chrome/Kineto trace");
}

// The JSON and schema stages, on one thread: a document's events as it
// states them. `json` is followed by simdjson::SIMDJSON_PADDING readable
// bytes (pad_for_json), and is used up: its pages are given back as its
// events are read (json_document::release_before). The parser's memory is
// freed on return, before the model is built.
raw_trace read_raw_trace_serially(std::string_view json, const std::string& source, const read_progress& progress);

// Where a document's one events array lies: `open` its '[', `close` its ']'
// (a guess, from the text: read_raw_trace_in_pieces checks it).
struct events_array {
  std::size_t open = 0, close = 0;
};

bool is_json_blank(char c) noexcept;

std::optional<events_array> find_events_array(std::string_view json);

// The events array's items cut into pieces of about `piece_bytes`, between
// items ("}", a comma and blanks, "{"): each piece [first, last) runs from
// an item's '{' to another's '}'.
std::vector<std::pair<std::size_t, std::size_t>> split_events(std::string_view json, events_array a, std::size_t piece_bytes);

// The JSON and schema stages on several threads, for a large document whose
// one events array holds objects: its items cut into pieces between items
// (split_events), each piece read as an array of its own (a copy, "[" +
// items + "]") with the reader state the document has at the array, and the
// pieces' events joined in order; the rest of the document (the array
// emptied) is read as one document. A cut in the wrong place (inside a
// string, inside an event) makes a piece or the rest invalid JSON: if all
// parse, the pieces are the array's items. Null on any failure: the caller
// reads the document serially, which says what is wrong where.
std::optional<raw_trace> read_raw_trace_in_pieces(std::string_view json, const std::string& source, const read_progress& progress,
                                                  std::size_t piece_bytes, unsigned threads);

// Documents this large are read in pieces of this size, on up to this many threads.
inline constexpr std::size_t read_piece_bytes = std::size_t(4) << 20;
inline constexpr unsigned max_read_threads = 16;

// A document's events as it states them (see read_raw_trace_serially).
raw_trace read_raw_trace(std::string_view json, const std::string& source, const read_progress& progress);

// A file's bytes to a trace; `checked`: a plain file's bytes went through
// json_text_check as they were read.
loaded_trace trace_of_bytes(std::string bytes, const std::string& source, bool checked, const read_progress& progress = {});

// What is read from a stream of unknown size (a pipe, a FIFO): as much as the
// gzip reader decompresses at most, and twice what the JSON parser takes at once.
constexpr std::uint64_t max_stream_bytes = max_decompressed;

// An open stream's bytes to a trace. JSON is checked as it is read, so a
// zero-filled or sparse file is refused at its first bytes, not held whole.
// `size`: the file's size when known (reserved once the start looked like a
// trace), else 0: then at most `limit` bytes are read, and more is refused.
loaded_trace read_stream(std::FILE* f, const std::string& source, std::uint64_t size, const read_progress& progress,
                         std::uint64_t limit = max_stream_bytes);

}  // namespace cuprof::detail
