// The schema stage of reading a trace: Chrome trace JSON values (cuprof's and
// Kineto's vocabulary, output/trace_schema.hpp) to raw events, checking each
// field's type and range. trace_reader.hpp builds the model from them.
#pragma once

#include "json_reader.hpp"
#include <cuprof/analysis.hpp>
#include <cuprof/model/event.hpp>
#include <cuprof/model/string_table.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace cuprof::detail {

// Decimal microseconds ("861533.571", "-2", "1.5e3") to integer nanoseconds.
bool us_to_ns(std::string_view text, std::int64_t& out);

// An integral JSON number ("7", "-1", "7.0") as int64.
bool to_int(const json_node& v, std::int64_t& out);

struct raw_arg {
  std::string key;
  span_arg::type kind = span_arg::type::integer;
  std::int64_t integer = 0;
  double real = 0;
  std::string text;
};

// Names are ids in raw_trace::names.
struct raw_span {
  std::int64_t start, end;
  name_id name;
  std::uint32_t tid;
  std::int64_t ext = -1;
  std::size_t order;
  std::vector<raw_arg> args;
};

// A JSON value as compact text, arrays as torch prints its input shapes
// ("[[4096, 4096], []]").
void append_compact(std::string& out, const json_node& v);

// A span's arguments, as the grouping by args (table.hpp) keys them: a torch
// op's input shapes ("Input Dims", written with record_shapes=True), else,
// in a cuprof trace, the scope's own numbers and strings. Torch's other args
// (Ev Idx, Record function id, ...) are bookkeeping, not arguments.
std::vector<raw_arg> span_args_of(const json_node* args, bool cuprof_trace);

struct raw_call {
  std::int64_t start, end;
  name_id name;
  std::uint32_t tid;
  std::int64_t ext = -1, correlation = -1, cbid = 0;
  api_domain domain;
  std::uint32_t stack = no_index;  // "Call stack": index into raw_trace::stacks
  std::int64_t frame = -1;         // "sf": its innermost frame in raw_trace::frame_nodes; -1: none
};

struct raw_gpu {
  std::int64_t start = 0, end = 0;
  name_id name = 0;
  gpu_kind kind = gpu_kind::kernel;
  std::uint8_t subkind = 0;
  std::uint16_t device = 0;  // as gpu_activity's: checked when read
  std::uint32_t stream = 0, context = 0;
  std::int64_t ext = -1, correlation = -1;
  std::uint64_t bytes = 0;
  bool has_details = false;
  kernel_details details;
  bool has_wait = false;  // an event sync's or a stream's wait's wait_on_* args
  event_wait wait;
  // A collective kernel's args (torch's record_param_comms names), where the file gives them.
  std::unique_ptr<collective_args> collective;
};

struct raw_annotation {
  std::int64_t start, end;
  name_id name;
  std::uint32_t device, stream;
  std::int64_t ext = -1;
};

// An allocation or free ([memory] instant event): the model's event as the
// file gives it, but for its time, relative to base_ns, and the scope that
// made it, which the model resolves to a span.
struct raw_memory {
  std::int64_t ts = 0;
  std::int64_t ext = -1;  // the scope's External id, where the file names one (cuprof's traces)
  memory_event event;     // ts_ns and span unset
};

// A GPU hardware metric sample (a "gpu_metric" counter event: one metric of
// one GPU at one time), its time relative to base_ns.
struct raw_metric_sample {
  std::int64_t ts = 0;
  double value = 0;
  name_id label = 0;  // the counter's name: the metric's label
  std::uint16_t device = 0;
};

// What the cuprof block says of the metric samples (schema::cuprof_gpu_metrics).
struct raw_metric_block {
  bool present = false;
  bool held_values = false;  // a counter holds until its track's next event or a gap
  std::uint64_t interval_ns = 0, dropped = 0, out_of_range = 0;
  std::vector<gpu_metric> metrics;     // distinct labels, at most max_gpu_metrics
  std::vector<std::uint16_t> devices;  // distinct
  struct alignment {
    std::uint16_t device;
    std::int64_t shift_ns;
    bool aligned;
  };
  std::vector<alignment> alignments;  // at most one a device
  struct gap {
    std::uint16_t device;
    std::int64_t ts, dur;  // ns; ts as events' before the base is added
    metric_gap_cause cause;
  };
  std::vector<gap> gaps;  // at most max_metric_gaps
};

// A trace reads this many metric gaps at most: a GPU sampled without trouble
// has none; more is a hostile file.
inline constexpr std::size_t max_metric_gaps = 100000;

// A trace reads this many metrics at most (the default set has 4): a file
// naming more is hostile or broken, and each costs a value per sample.
inline constexpr std::size_t max_gpu_metrics = 64;

// The memory kind (memory_event::memory_kind) a "Memory Kind" arg names
// (memory_kind_name: "Device", "Pinned", ...); 0 if none.
std::uint8_t memory_kind_of(std::string_view name);

enum class event_category { skip, span, runtime, driver, kernel, memcpy, memset, sync, gpu_annotation, overhead };

// Older torch.profiler traces spell categories capitalised and bare
// ("Operator", "Runtime", "Memcpy"): compared lower-cased, the bare ones too.
event_category category_of(std::string_view cat);

// The memcpy kind a GPU event's name states (memcpy_kind_name), 0 if none.
std::uint8_t memcpy_kind_of(std::string_view name);

// The synchronization kind named `name` (sync_kind_name), 0 if none.
std::uint8_t sync_kind_of(std::string_view name);

// The members of an event that trace_event_reader::event() looks at, and
// those of its "args": the trace reader skips the others unread (most of a
// torch trace's args: "Sequence number", "Ev Idx", ...). An args key not known
// as torch's bookkeeping is read: it may be a scope's argument (span_args_of).
bool event_member_used(int depth, std::string_view object, std::string_view key);

// A trace's events as the file states them (times relative to base_ns), before
// they become the model: what the schema stage hands the build stage.
struct raw_trace {
  std::uint64_t base_ns = 0;
  std::size_t events = 0, used = 0;
  trace_metadata meta;
  string_table names;  // the events' names, interned as read: the document's text is not kept
  std::vector<raw_span> spans, overhead;
  std::vector<raw_call> calls;
  std::vector<std::vector<name_id>> stacks;  // the calls' distinct stacks, innermost frame first
  // "stackFrames": by id, a frame and its caller's id (-1: none). A call's
  // "sf" names its stack there, whole, where its "Call stack" arg may be short.
  struct frame_node {
    name_id frame;
    std::int64_t parent;
  };
  std::unordered_map<std::int64_t, frame_node> frame_nodes;
  std::vector<raw_gpu> gpu;
  std::vector<raw_annotation> annotations;
  std::vector<raw_memory> memory;                 // in file order
  std::vector<raw_metric_sample> metric_samples;  // in file order
  raw_metric_block metric_block;
  std::unordered_map<std::int64_t, std::string> process_names;
  struct thread_candidate {
    std::int64_t pid, tid;
    std::string name;
  };
  std::vector<thread_candidate> thread_candidates;
  std::int64_t cpu_pid = -1;
  std::int64_t window_start = 0, window_end = 0;
  bool has_profiler_start = false;
  std::int64_t profiler_start = 0;  // torch's "Trace" span's start (relative ns)
  bool is_cuprof = false, is_torch = false;
  std::int64_t rank = -1;  // distributedInfo's rank as written; -1 without one
};

// Appends the events of `pieces`, read in turn from the items that follow
// those of `into` (read_raw_trace_in_pieces reads a large array so), freeing
// each piece as it goes: names re-interned in the order the pieces met them,
// so ids come out as one reader gives them. Room for all is reserved first:
// each event is moved once.
void join_events(raw_trace& into, std::vector<raw_trace>& pieces);

// Reads the top-level keys and the events of one document into a raw_trace.
class trace_event_reader {
 public:
  // What the file says, for the build stage.
  raw_trace& result() noexcept { return raw_; }

  // A top-level member of the document but "traceEvents": its metadata.
  void top_level(std::string_view key, const json_node& v, const json_document& doc);

  // Item `index` of "traceEvents", read with event_member_used.
  void event(const json_node& e, std::size_t index, const json_document& doc);

 private:
  // A metadata ("M") event: a process's or a thread's name.
  void metadata(const json_node& e);

  // An instant ("i") event: an allocation or free when named [memory]. A
  // damaged one is skipped, not refused: it costs one figure, not the trace.
  void instant(const json_node& e);

  // A counter ("C") event: a GPU metric sample when its category is
  // gpu_metric. A damaged one is skipped, as an instant event is.
  void counter(const json_node& e);

  // The cuprof block's gpu_metrics; what is damaged in it is ignored.
  void metric_block(const json_node& v);

  [[noreturn]] void fail(const std::string& what) const;

  name_id name_id_of(const json_node& name);

  // "stackFrames" into raw_trace::frame_nodes; a node that is not an object
  // with a string "name" is left out (a call naming it keeps its "Call stack").
  void stack_frames(const json_node& v);

  // A CUDA call's "Call stack" (an array of frames, innermost first) as an
  // index into raw_trace::stacks; no_index when absent or not an array of strings.
  std::uint32_t stack_of(const json_node* args);

  void note_cpu_pid(std::int64_t pid);

  raw_trace raw_;
  std::map<std::vector<name_id>, std::uint32_t> stack_index_;  // raw_.stacks by their frames
  const json_document* doc_ = nullptr;
  std::size_t at_ = 0;  // where the value being read starts: errors point there
};

}  // namespace cuprof::detail
