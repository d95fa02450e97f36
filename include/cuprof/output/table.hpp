// torch.profiler's summary table: its rows (event_averages), their sort keys
// and table(), in torch's layout, columns, units and footer, so a torch user
// reads it at a glance. key_averages.hpp makes the rows from a trace.
#pragma once

#include "../base/text.hpp"
#include "../base/error.hpp"
#include "../model/api_vocabulary.hpp"
#include "../model/event.hpp"
#include "../model/stats.hpp"
#include "trace_schema.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <utility>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace cuprof {

// What a row stands for; torch keys rows by name and device type alike.
enum class row_kind : std::uint8_t {
  cpu_scope,       // record_function scopes and ProfilerStep*
  cuda_api,        // runtime / driver calls
  gpu_work,        // kernels, memcpys, memsets
  gpu_annotation,  // a scope's extent on a GPU stream
};

// What key_averages() groups rows by: the name, as torch's key_averages(), or
// the name and the scope's arguments, as its group_by_input_shape=True.
enum class group_by : std::uint8_t { name, args };

struct event_average {
  std::string key;
  std::string args;  // grouped by args: the scopes' arguments as format_span_args() writes them
  // Grouped by stack: the first frames of the call stack (with_stack) of a CUDA
  // call, or of the call that launched GPU work, innermost first (torch's Source Location).
  std::vector<std::string> stack;
  row_kind kind = row_kind::cpu_scope;
  std::uint64_t count = 0;
  std::uint64_t self_cpu_ns = 0;
  std::uint64_t cpu_total_ns = 0;
  std::uint64_t self_cuda_ns = 0;
  std::uint64_t cuda_total_ns = 0;
  // The first occurrence's start and end: rows keep torch's order when
  // unsorted or tied (events by start, the longer first at the same start).
  std::uint64_t first_ns = 0;
  std::uint64_t first_end_ns = 0;
  // Bytes allocated less bytes freed (torch's memory columns): by the scope
  // itself, and with its nested scopes; CUDA is device and managed memory,
  // CPU is pinned host memory.
  std::int64_t self_cuda_memory = 0;
  std::int64_t cuda_memory = 0;
  std::int64_t self_cpu_memory = 0;
  std::int64_t cpu_memory = 0;
  // Per occurrence: its CPU total and its CUDA total (the distribution columns).
  std::vector<std::uint64_t> cpu_samples_ns;
  std::vector<std::uint64_t> cuda_samples_ns;
  // GPU metrics (model/gpu_metrics.hpp), on a kernel's row where its GPU was
  // sampled, else empty: per event_averages::metric_labels(), the kernels'
  // averages weighted by their durations (NaN where none had a value), and
  // `sampled`, the kernels with a value. A kernel shorter than the sampling
  // interval, or with no sample, counts in neither.
  std::vector<double> metrics;
  std::uint64_t sampled = 0;

  double cpu_time_avg_ns() const { return count ? double(cpu_total_ns) / double(count) : 0.0; }
  double cuda_time_avg_ns() const { return count ? double(cuda_total_ns) / double(count) : 0.0; }
  // The totals as torch sums them for its averages: each occurrence's time
  // in microseconds, a double made from times relative to the trace's start
  // (end / 1000 - start / 1000). A mean that falls on half a nanosecond then
  // rounds in the table as torch's does.
  double cpu_total_us = 0;
  double cuda_total_us = 0;
  double cpu_time_avg_us() const { return count ? cpu_total_us / double(count) : 0.0; }
  double cuda_time_avg_us() const { return count ? cuda_total_us / double(count) : 0.0; }
  distribution cpu_distribution() const { return summarize(cpu_samples_ns); }
  distribution cuda_distribution() const { return summarize(cuda_samples_ns); }
};

// The totals that the table, insights and diff report, defined here only.
// Self CPU time total is torch's footer. Of it, time in calls that block the
// CPU thread until the GPU is done (api_vocabulary.hpp) is the CPU waiting,
// as long as the GPU's work: it is shown apart, and the CPU time compared
// and judged is the rest, the CPU's own work.
struct time_totals {
  std::uint64_t self_cpu_ns = 0;   // Self CPU time total, as torch's footer gives it
  std::uint64_t sync_ns = 0;       // of it, in synchronize calls
  std::uint64_t self_cuda_ns = 0;  // Self CUDA time total: GPU work
  std::uint64_t cpu_ns() const { return self_cpu_ns - sync_ns; }
};

struct table_options {
  std::string sort_by;  // empty: first-occurrence order
  int row_limit = 100;  // -1: all rows
  std::string header;   // written above a line of '=' when not empty
  int max_name_column_width = 55;
  // > 0: lines (with their trailing blanks) fit this many characters, a
  // terminal's width, by narrowing the Name column, down to 12 characters;
  // where even that cannot fit them, the lines wrap and Name keeps its width.
  std::size_t line_width = 0;
  // Opt-in columns after torch's: per-call CPU and CUDA min, median, p95 and max
  // ("-" where a row has no such time).
  bool stats = false;
  // Opt-in columns where the trace has GPU metrics: each metric's average on
  // kernel rows (event_average::metrics) and how many kernels had values
  // ("Sampled"); "-" elsewhere.
  bool metrics = false;
  // When set, a last column says what each kernel's name means, as this hook
  // tells: cuprof::compact_kernel_name (cuprof::analysis) or your own. The
  // table itself decodes nothing, so the profiler's runtime carries no decoder.
  std::string (*describe_kernel)(std::string_view kernel_name) = nullptr;
};

inline const char* row_kind_name(row_kind k) {
  switch (k) {
    case row_kind::cpu_scope: return "cpu_scope";
    case row_kind::cuda_api: return "cuda_api";
    case row_kind::gpu_work: return "gpu_work";
    default: return "gpu_annotation";
  }
}

// A cell as a record holds it (`cuprof table --format csv|json`): text, a
// time in nanoseconds (written in microseconds), a count or bytes, or a
// derived figure (NaN where the text prints "-" or "NaN": null).
struct column_value {
  enum class kind : std::uint8_t { string, time_ns, integer, real };
  kind type = kind::real;
  std::string text;
  std::int64_t number = 0;
  double figure = NAN;
  static column_value string(std::string s) { return {kind::string, std::move(s), 0, NAN}; }
  static column_value time(std::uint64_t ns) { return {kind::time_ns, {}, std::int64_t(ns), NAN}; }
  static column_value integer(std::int64_t n) { return {kind::integer, {}, n, NAN}; }
  static column_value real(double v) { return {kind::real, {}, 0, v}; }
};

// One column of the table, declared once for both its forms: table()'s text
// (torch's header and units) and the records (a name, a typed value, in
// their own order: name, kind, calls and args first).
struct table_column {
  std::string header;   // table()'s
  std::string record;   // the records'
  int record_rank = 0;  // the records' order, lowest first
  bool in_text = true, in_records = true;
  int width = 12;     // the text's, at least (Name's follows the others')
  bool left = false;  // left-aligned (Source Location, Kernel), else right
  // The text of a row's cell; none for Source Location, whose frames are a line each.
  std::function<std::string(const event_average&)> text;
  std::function<column_value(const event_average&)> value;
};

class event_averages {
 public:
  event_averages() = default;
  // `memory`: the trace recorded allocations; the memory columns are shown.
  // `metric_labels`: the GPU metrics of the rows' `metrics`, in their order.
  explicit event_averages(std::vector<event_average> rows, bool memory = false, std::vector<std::string> metric_labels = {})
      : rows_(std::move(rows)), memory_(memory), metric_labels_(std::move(metric_labels)) {}
  bool has_memory() const noexcept { return memory_; }
  const std::vector<std::string>& metric_labels() const noexcept { return metric_labels_; }

  const std::vector<event_average>& rows() const noexcept { return rows_; }
  const event_average* find(std::string_view key, row_kind kind) const {
    for (const auto& r : rows_)
      if (r.key == key && r.kind == kind) return &r;
    return nullptr;
  }
  std::uint64_t self_cpu_time_total_ns() const {
    std::uint64_t sum = 0;
    for (const auto& r : rows_) sum += r.self_cpu_ns;
    return sum;
  }
  // As torch: GPU work only; scope extents on the GPU lanes are not work.
  std::uint64_t self_cuda_time_total_ns() const {
    std::uint64_t sum = 0;
    for (const auto& r : rows_)
      if (r.kind == row_kind::gpu_work) sum += r.self_cuda_ns;
    return sum;
  }
  time_totals totals() const {
    time_totals t;
    t.self_cpu_ns = self_cpu_time_total_ns();
    t.self_cuda_ns = self_cuda_time_total_ns();
    for (const auto& r : rows_)
      if (r.kind == row_kind::cuda_api && detail::is_cpu_blocking_synchronization(r.key)) t.sync_ns += r.self_cpu_ns;
    return t;
  }

  // The rows table() prints, in its order: sorted by `sort_by` (empty: first
  // occurrence), at most `row_limit` (-1: all). Throws cuprof::error for a
  // sort key it cannot honour.
  std::vector<const event_average*> sorted_rows(const std::string& sort_by, int row_limit) const;

  std::string table(const table_options& options = {}) const;
  // Every column the options ask for, in table()'s order, each saying
  // whether the text or the records show it; `shown`: the rows printed (the
  // Kernel column is as wide as theirs need).
  std::vector<table_column> columns(const table_options& options, const std::vector<const event_average*>& shown) const;
  std::string table(std::string_view sort_by, int row_limit = 100) const {
    table_options o;
    o.sort_by = std::string(sort_by);
    o.row_limit = row_limit;
    return table(o);
  }

 private:
  // Whether a row has GPU time: torch shows the CUDA columns and footer only then.
  bool has_cuda_time() const {
    return std::any_of(rows_.begin(), rows_.end(), [](const event_average& r) { return r.self_cuda_ns > 0; });
  }
  std::vector<event_average> rows_;
  bool memory_ = false;
  std::vector<std::string> metric_labels_;
};

namespace detail {

inline std::string format_time_us(double us) {
  char buf[48];
  if (us >= 1e6) std::snprintf(buf, sizeof buf, "%.3fs", us / 1e6);
  else if (us >= 1e3) std::snprintf(buf, sizeof buf, "%.3fms", us / 1e3);
  else std::snprintf(buf, sizeof buf, "%.3fus", us);
  return buf;
}

// torch's: two decimals of GB, MB or KB (powers of 1024), else whole bytes.
inline std::string format_memory(std::int64_t bytes) {
  constexpr double kb = 1024, mb = kb * 1024, gb = mb * 1024;
  const double v = double(bytes), size = v < 0 ? -v : v;
  char buf[48];
  if (size >= gb) std::snprintf(buf, sizeof buf, "%.2f GB", v / gb);
  else if (size >= mb) std::snprintf(buf, sizeof buf, "%.2f MB", v / mb);
  else if (size >= kb) std::snprintf(buf, sizeof buf, "%.2f KB", v / kb);
  else std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(bytes));
  return buf;
}

inline std::string format_share(double part, double total) {
  if (total == 0) return "NaN";
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.2f%%", part * 100.0 / total);
  return buf;
}

using sort_value = double (*)(const event_average&);

struct sort_key {
  const char* name;
  sort_value value;
};

// torch's keys, each "cuda" one also spelled "device" (torch's newer name).
// A constant array: tables are also printed from exit handlers, after
// function-local statics with destructors may be gone.
inline constexpr sort_key sort_keys[] = {
    {"cpu_time", [](const event_average& r) { return r.cpu_time_avg_ns(); }},
    {"cuda_time", [](const event_average& r) { return r.cuda_time_avg_ns(); }},
    {"cpu_time_total", [](const event_average& r) { return double(r.cpu_total_ns); }},
    {"cuda_time_total", [](const event_average& r) { return double(r.cuda_total_ns); }},
    {"self_cpu_time_total", [](const event_average& r) { return double(r.self_cpu_ns); }},
    {"self_cuda_time_total", [](const event_average& r) { return double(r.self_cuda_ns); }},
    {"cpu_memory_usage", [](const event_average& r) { return double(r.cpu_memory); }},
    {"self_cpu_memory_usage", [](const event_average& r) { return double(r.self_cpu_memory); }},
    {"cuda_memory_usage", [](const event_average& r) { return double(r.cuda_memory); }},
    {"self_cuda_memory_usage", [](const event_average& r) { return double(r.self_cuda_memory); }},
    {"count", [](const event_average& r) { return double(r.count); }},
};

inline sort_value find_sort_key(const std::string& key) {
  std::string cuda_key = key;  // a "device" key is its "cuda" twin
  if (const std::size_t at = cuda_key.find("device"); at != std::string::npos) cuda_key.replace(at, 6, "cuda");
  for (const sort_key& k : sort_keys)
    if (cuda_key == k.name) return k.value;
  std::string valid;
  for (const sort_key& k : sort_keys) {
    const std::string name = k.name;
    valid += (valid.empty() ? "" : ", ") + name;
    if (const std::size_t at = name.find("cuda"); at != std::string::npos)
      valid += ", " + std::string(name).replace(at, 4, "device");
  }
  throw error("unknown sort key '" + key + "'; valid keys: " + valid);
}

}  // namespace detail

inline std::vector<const event_average*> event_averages::sorted_rows(const std::string& sort_by, int row_limit) const {
  std::vector<const event_average*> rows;
  for (const auto& r : rows_) rows.push_back(&r);
  std::stable_sort(rows.begin(), rows.end(), [](const event_average* a, const event_average* b) {
    return a->first_ns != b->first_ns ? a->first_ns < b->first_ns : a->first_end_ns > b->first_end_ns;
  });
  if (!sort_by.empty()) {
    const detail::sort_value value = detail::find_sort_key(sort_by);
    // Refused rather than ignored: all zeros would give an order that looks sorted and is not.
    if (!memory_ && detail::ends_with(sort_by, "_memory_usage"))
      throw error("cannot sort by '" + sort_by +
                  "': this trace has no memory figures (record them with profile_options::profile_memory, "
                  "CUPROF_MEMORY=1 or `cuprof run --memory`)");
    std::stable_sort(rows.begin(), rows.end(),
                     [&](const event_average* a, const event_average* b) { return value(*a) > value(*b); });
  }
  if (row_limit >= 0 && rows.size() > std::size_t(row_limit)) rows.resize(std::size_t(row_limit));
  return rows;
}

inline std::vector<table_column> event_averages::columns(const table_options& options,
                                                         const std::vector<const event_average*>& shown) const {
  using value = column_value;
  const bool has_cuda = has_cuda_time();
  // torch's: CPU Mem whenever memory was recorded, CUDA Mem where some scope used device memory.
  const bool has_cuda_memory =
      memory_ && std::any_of(rows_.begin(), rows_.end(), [](const event_average& r) { return r.self_cuda_memory != 0; });
  const bool has_args = std::any_of(rows_.begin(), rows_.end(), [](const event_average& r) { return !r.args.empty(); });
  const bool has_stack = std::any_of(rows_.begin(), rows_.end(), [](const event_average& r) { return !r.stack.empty(); });
  const bool show_metrics = options.metrics && !metric_labels_.empty();
  const std::uint64_t cpu_ns = self_cpu_time_total_ns(), cuda_ns = self_cuda_time_total_ns();
  const double total_cpu = double(cpu_ns) / 1000.0, total_cuda = double(cuda_ns) / 1000.0;
  const auto time = [](std::uint64_t ns) { return detail::format_time_us(double(ns) / 1000.0); };
  const auto pct = [](double part, double total) { return value::real(total ? part * 100.0 / total : NAN); };

  std::vector<table_column> c;
  const auto add = [&](std::string header, std::string record, int rank, bool text, bool recorded, auto show, auto of) {
    c.push_back({std::move(header), std::move(record), rank, text, recorded, 12, false, show, of});
  };
  // Name's width and cut are the layout's (they follow the other columns').
  add(
      "Name", "name", 0, true, true, [](const event_average& r) { return detail::terminal_safe(r.key); },
      [](const event_average& r) { return value::string(r.key); });
  add("", "kind", 1, false, true, nullptr, [](const event_average& r) { return value::string(row_kind_name(r.kind)); });
  // A time, its share of the total and its average per call, where torch has them: torch prints
  // the share before the time for the CPU, after it for CUDA; the records give the time first.
  using time_field = std::uint64_t event_average::*;
  using average = double (event_average::*)() const;
  struct timed {
    const char *share_header, *share_record, *time_header, *time_record, *avg_header, *avg_record;
    time_field field;
    average avg_us, avg_ns;  // the text's (torch's rounding) and the records'
    bool cuda;
    int rank;  // the time's; its share's is the next, its average's the one after the share's
  };
  const timed times[] = {
      {"Self CPU %", "self_cpu_pct", "Self CPU", "self_cpu_us", nullptr, nullptr, &event_average::self_cpu_ns, nullptr, nullptr,
       false, 4},
      {"CPU total %", "cpu_total_pct", "CPU total", "cpu_total_us", "CPU time avg", "cpu_avg_us", &event_average::cpu_total_ns,
       &event_average::cpu_time_avg_us, &event_average::cpu_time_avg_ns, false, 6},
      {"Self CUDA %", "self_cuda_pct", "Self CUDA", "self_cuda_us", nullptr, nullptr, &event_average::self_cuda_ns, nullptr,
       nullptr, true, 9},
      {nullptr, nullptr, "CUDA total", "cuda_total_us", "CUDA time avg", "cuda_avg_us", &event_average::cuda_total_ns,
       &event_average::cuda_time_avg_us, &event_average::cuda_time_avg_ns, true, 11},
  };
  for (const timed& m : times) {
    const time_field f = m.field;
    const bool text = !m.cuda || has_cuda;
    const double total_us = m.cuda ? total_cuda : total_cpu;
    const std::uint64_t total = m.cuda ? cuda_ns : cpu_ns;
    const auto add_share = [&] {
      if (!m.share_header) return;
      add(
          m.share_header, m.share_record, m.rank + 1, text, true,
          [=](const event_average& r) { return detail::format_share(double(r.*f) / 1000.0, total_us); },
          [=](const event_average& r) { return pct(double(r.*f), double(total)); });
    };
    if (!m.cuda) add_share();
    add(
        m.time_header, m.time_record, m.rank, text, true, [=](const event_average& r) { return time(r.*f); },
        [f](const event_average& r) { return value::time(r.*f); });
    if (m.cuda) add_share();
    if (m.avg_header) {
      const average in_us = m.avg_us, in_ns = m.avg_ns;
      add(
          m.avg_header, m.avg_record, m.rank + 2, text, true,
          [in_us](const event_average& r) { return detail::format_time_us((r.*in_us)()); },
          [in_ns](const event_average& r) { return value::real((r.*in_ns)() / 1000.0); });
    }
  }
  // Memory in bytes: torch's units in the text, whole bytes in the records.
  using memory_field = std::int64_t event_average::*;
  const struct {
    const char *header, *record;
    memory_field field;
    bool text;
  } memory[] = {{"CPU Mem", "cpu_memory_bytes", &event_average::cpu_memory, memory_},
                {"Self CPU Mem", "self_cpu_memory_bytes", &event_average::self_cpu_memory, memory_},
                {"CUDA Mem", "cuda_memory_bytes", &event_average::cuda_memory, has_cuda_memory},
                {"Self CUDA Mem", "self_cuda_memory_bytes", &event_average::self_cuda_memory, has_cuda_memory}};
  for (int i = 0; i < 4; ++i) {
    const memory_field f = memory[i].field;
    add(
        memory[i].header, memory[i].record, 40 + i, memory[i].text, memory_,
        [f](const event_average& r) { return detail::format_memory(r.*f); },
        [f](const event_average& r) { return value::integer(r.*f); });
  }
  add(
      "# of Calls", "calls", 2, true, true, [](const event_average& r) { return std::to_string(r.count); },
      [](const event_average& r) { return value::integer(std::int64_t(r.count)); });
  // Grouped by args: their column, right-aligned as torch's Input Shapes, at most 80 wide.
  if (has_args) {
    constexpr std::size_t max_args_width = 80;
    std::size_t longest = 0;
    for (const auto& r : rows_) longest = std::max(longest, detail::utf8_length(detail::terminal_safe(r.args)));
    add(
        "Args", "args", 3, true, true,
        [](const event_average& r) {
          std::string args = detail::terminal_safe(r.args);
          return detail::utf8_length(args) > max_args_width ? detail::utf8_prefix(args, max_args_width - 3) + "..." : args;
        },
        [](const event_average& r) { return value::string(r.args); });
    c.back().width = int(std::min(longest + 4, max_args_width));
  }
  // Per call: min, median, p95, max; "-" (null) where the row has no such time.
  if (options.stats) {
    const char* stat_names[] = {"min", "median", "p95", "max"};
    for (int cuda = 0; cuda < 2; ++cuda)
      for (int k = 0; k < 4; ++k) {
        const auto pick = [k, cuda](const event_average& r) -> std::pair<bool, std::uint64_t> {
          const distribution d = cuda ? r.cuda_distribution() : r.cpu_distribution();
          const std::uint64_t v[] = {d.min_ns, d.median_ns, d.p95_ns, d.max_ns};
          return {(cuda ? r.cuda_total_ns : r.cpu_total_ns) > 0, v[k]};
        };
        add(
            std::string(cuda ? "CUDA " : "CPU ") + stat_names[k], std::string(cuda ? "cuda_" : "cpu_") + stat_names[k] + "_us",
            20 + cuda * 4 + k, !cuda || has_cuda, true,
            [=](const event_average& r) {
              const auto [any, ns] = pick(r);
              return any ? time(ns) : std::string("-");
            },
            [=](const event_average& r) {
              const auto [any, ns] = pick(r);
              return any ? value::time(ns) : value::real(NAN);
            });
      }
  }
  // GPU metrics: each label's kernel average, and the kernels sampled.
  if (show_metrics) {
    for (std::size_t m = 0; m < metric_labels_.size(); ++m) {
      add(
          detail::terminal_safe(metric_labels_[m]), metric_labels_[m], 60 + int(m), true, true,
          [m](const event_average& r) {
            char buf[48] = "-";
            if (m < r.metrics.size() && std::isfinite(r.metrics[m])) std::snprintf(buf, sizeof buf, "%.2f", r.metrics[m]);
            return std::string(buf);
          },
          [m](const event_average& r) { return value::real(m < r.metrics.size() ? r.metrics[m] : NAN); });
      c.back().width = int(std::max<std::size_t>(12, detail::utf8_length(c.back().header)));
    }
    add(
        "Sampled", "sampled", 1000, true, true,
        [](const event_average& r) { return r.metrics.empty() ? std::string("-") : std::to_string(r.sampled); },
        [](const event_average& r) { return r.metrics.empty() ? value::real(NAN) : value::integer(std::int64_t(r.sampled)); });
  }
  // Grouped by stack: torch's Source Location, at most 75 wide, a frame per
  // line (the layout's), a blank line after each row that has frames.
  if (has_stack) {
    constexpr std::size_t max_source_width = 75;
    std::size_t longest = 0;
    for (const auto& r : rows_)
      for (const std::string& f : r.stack) longest = std::max(longest, detail::utf8_length(detail::terminal_safe(f)));
    add("Source Location", "", 0, true, false, nullptr, nullptr);
    c.back().width = int(std::min(longest + 4, max_source_width));
    c.back().left = true;
  }
  // What each kernel's name says, as the hook tells; left-aligned, as wide as the rows shown need.
  if (const auto describe = options.describe_kernel) {
    const auto kernel = [describe](const event_average& r) {
      return r.kind == row_kind::gpu_work ? describe(r.key) : std::string();
    };
    add(
        "Kernel", "kernel", 2000, true, true, [kernel](const event_average& r) { return detail::terminal_safe(kernel(r)); },
        [kernel](const event_average& r) { return value::string(kernel(r)); });
    std::size_t widest = 6;
    for (const event_average* r : shown) widest = std::max(widest, detail::utf8_length(c.back().text(*r)));
    c.back().width = int(widest);
    c.back().left = true;
  }
  return c;
}

inline std::string event_averages::table(const table_options& options) const {
  if (rows_.empty()) return {};  // as torch
  const std::vector<const event_average*> rows = sorted_rows(options.sort_by, options.row_limit);
  std::vector<table_column> columns = this->columns(options, rows);
  columns.erase(std::remove_if(columns.begin(), columns.end(), [](const table_column& c) { return !c.in_text; }), columns.end());
  std::size_t source_column = std::size_t(-1);
  std::vector<int> widths;
  std::vector<std::string> headers;
  for (const table_column& c : columns) {
    if (!c.text) source_column = headers.size();  // the frames, laid out below
    widths.push_back(c.width);
    headers.push_back(c.header);
  }
  int max_name = options.max_name_column_width;
  if (options.line_width > 0) {
    std::size_t others = 0;
    for (std::size_t i = 1; i < widths.size(); ++i)  // a header may be wider than its column ("CUDA time avg")
      others += std::max(std::size_t(widths[i]), detail::utf8_length(headers[i])) + 2;
    const std::size_t room = options.line_width > others + 2 ? options.line_width - others - 2 : 0;
    if (room >= 12) max_name = std::min(max_name, int(room));
  }
  std::size_t longest = 0;
  for (const auto& r : rows_) longest = std::max(longest, detail::utf8_length(detail::terminal_safe(r.key)));
  widths[0] = std::min(int(longest) + 4, max_name);

  std::string out;
  const auto row_line = [&](const std::vector<std::string>& cells) {
    for (std::size_t i = 0; i < cells.size(); ++i) {
      const std::size_t shown = detail::utf8_length(cells[i]);
      const std::size_t pad = int(shown) < widths[i] ? std::size_t(widths[i]) - shown : 0;
      if (!columns[i].left) out.append(pad, ' ');
      out += cells[i];
      if (columns[i].left) out.append(pad, ' ');
      out += "  ";
    }
    out += '\n';
  };
  std::string separator;
  int line_length = -2;
  for (int w : widths) {
    separator.append(std::size_t(w), '-');
    separator += "  ";
    line_length += w + 2;
  }
  separator += '\n';

  if (!options.header.empty()) {
    out.append(std::size_t(line_length), '=');
    out += '\n' + options.header + '\n';
  }
  out += separator;
  row_line(headers);
  out += separator;

  // torch's trim_path: a frame too long keeps its end, "..." in front.
  const auto source_cell = [&](const std::string& frame) {
    const std::string shown = detail::terminal_safe(frame);
    const std::size_t width = std::size_t(widths[source_column]);
    if (detail::utf8_length(shown) <= width) return shown;
    return "..." + detail::utf8_suffix(shown, width - 3);
  };
  for (const event_average* r : rows) {
    std::vector<std::string> cells;
    for (const table_column& c : columns) cells.push_back(c.text ? c.text(*r) : std::string());
    // torch's own cut (not detail::shorten's): from max_name - 3 characters on,
    // the first max_name - 3 and "...", even when nothing was cut.
    if (max_name > 3 && detail::utf8_length(cells[0]) >= std::size_t(max_name - 3))
      cells[0] = detail::utf8_prefix(cells[0], std::size_t(max_name - 3)) + "...";
    if (source_column != std::size_t(-1) && !r->stack.empty()) cells[source_column] = source_cell(r->stack[0]);
    row_line(cells);
    if (!r->stack.empty()) {
      std::vector<std::string> more(cells.size());
      for (std::size_t k = 1; k < r->stack.size(); ++k) {
        more[source_column] = source_cell(r->stack[k]);
        row_line(more);
      }
      more[source_column].clear();
      row_line(more);
    }
  }
  out += separator;
  out += "Self CPU time total: " + detail::format_time_us(double(self_cpu_time_total_ns()) / 1000.0) + "\n";
  if (has_cuda_time())
    out += "Self CUDA time total: " + detail::format_time_us(double(self_cuda_time_total_ns()) / 1000.0) + "\n";
  return out;
}

}  // namespace cuprof
