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
  std::string table(std::string_view sort_by, int row_limit = 100) const {
    table_options o;
    o.sort_by = std::string(sort_by);
    o.row_limit = row_limit;
    return table(o);
  }

 private:
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

// torch's keys ("cuda" and "device" spellings alike). A constant array:
// tables are also printed from exit handlers, after function-local statics
// with destructors may be gone.
inline constexpr sort_key sort_keys[] = {
    {"cpu_time", [](const event_average& r) { return r.cpu_time_avg_ns(); }},
    {"cuda_time", [](const event_average& r) { return r.cuda_time_avg_ns(); }},
    {"device_time", [](const event_average& r) { return r.cuda_time_avg_ns(); }},
    {"cpu_time_total", [](const event_average& r) { return double(r.cpu_total_ns); }},
    {"cuda_time_total", [](const event_average& r) { return double(r.cuda_total_ns); }},
    {"device_time_total", [](const event_average& r) { return double(r.cuda_total_ns); }},
    {"self_cpu_time_total", [](const event_average& r) { return double(r.self_cpu_ns); }},
    {"self_cuda_time_total", [](const event_average& r) { return double(r.self_cuda_ns); }},
    {"self_device_time_total", [](const event_average& r) { return double(r.self_cuda_ns); }},
    {"cpu_memory_usage", [](const event_average& r) { return double(r.cpu_memory); }},
    {"self_cpu_memory_usage", [](const event_average& r) { return double(r.self_cpu_memory); }},
    {"cuda_memory_usage", [](const event_average& r) { return double(r.cuda_memory); }},
    {"self_cuda_memory_usage", [](const event_average& r) { return double(r.self_cuda_memory); }},
    {"device_memory_usage", [](const event_average& r) { return double(r.cuda_memory); }},
    {"self_device_memory_usage", [](const event_average& r) { return double(r.self_cuda_memory); }},
    {"count", [](const event_average& r) { return double(r.count); }},
};

inline sort_value find_sort_key(const std::string& key) {
  for (const sort_key& k : sort_keys)
    if (key == k.name) return k.value;
  std::string valid;
  for (const sort_key& k : sort_keys) valid += std::string(valid.empty() ? "" : ", ") + k.name;
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

inline std::string event_averages::table(const table_options& options) const {
  if (rows_.empty()) return {};  // as torch
  const std::vector<const event_average*> rows = sorted_rows(options.sort_by, options.row_limit);

  const bool has_cuda = std::any_of(rows_.begin(), rows_.end(), [](const event_average& r) { return r.self_cuda_ns > 0; });
  std::vector<int> widths = {0, 12, 12, 12, 12, 12};  // the Name column's width follows the others'
  std::vector<std::string> headers = {"Name", "Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg"};
  if (has_cuda) {
    for (const char* h : {"Self CUDA", "Self CUDA %", "CUDA total", "CUDA time avg"}) {
      headers.emplace_back(h);
      widths.push_back(12);
    }
  }
  // torch's: CPU Mem whenever memory was recorded, CUDA Mem where some scope used device memory.
  const bool has_cuda_memory =
      memory_ && std::any_of(rows_.begin(), rows_.end(), [](const event_average& r) { return r.self_cuda_memory != 0; });
  if (memory_) {
    for (const char* h : {"CPU Mem", "Self CPU Mem"}) {
      headers.emplace_back(h);
      widths.push_back(12);
    }
  }
  if (has_cuda_memory) {
    for (const char* h : {"CUDA Mem", "Self CUDA Mem"}) {
      headers.emplace_back(h);
      widths.push_back(12);
    }
  }
  headers.emplace_back("# of Calls");
  widths.push_back(12);
  // Grouped by args: their column, right-aligned as torch's Input Shapes, at most 80 wide.
  constexpr std::size_t max_args_width = 80;
  const bool has_args = std::any_of(rows_.begin(), rows_.end(), [](const event_average& r) { return !r.args.empty(); });
  if (has_args) {
    std::size_t longest_args = 0;
    for (const auto& r : rows_) longest_args = std::max(longest_args, detail::utf8_length(detail::terminal_safe(r.args)));
    headers.emplace_back("Args");
    widths.push_back(int(std::min(longest_args + 4, max_args_width)));
  }
  if (options.stats) {
    for (const char* h : {"CPU min", "CPU median", "CPU p95", "CPU max"}) {
      headers.emplace_back(h);
      widths.push_back(12);
    }
    if (has_cuda) {
      for (const char* h : {"CUDA min", "CUDA median", "CUDA p95", "CUDA max"}) {
        headers.emplace_back(h);
        widths.push_back(12);
      }
    }
  }
  const bool show_metrics = options.metrics && !metric_labels_.empty();
  if (show_metrics) {
    for (const std::string& label : metric_labels_) {
      headers.push_back(detail::terminal_safe(label));
      widths.push_back(int(std::max<std::size_t>(12, detail::utf8_length(headers.back()))));
    }
    headers.emplace_back("Sampled");
    widths.push_back(12);
  }
  // Grouped by stack: torch's Source Location, left-aligned, at most 75 wide, a
  // frame per line, a blank line after each row that has frames.
  constexpr std::size_t max_source_width = 75;
  std::size_t source_column = std::size_t(-1);
  if (std::any_of(rows_.begin(), rows_.end(), [](const event_average& r) { return !r.stack.empty(); })) {
    std::size_t longest_frame = 0;
    for (const auto& r : rows_)
      for (const std::string& f : r.stack) longest_frame = std::max(longest_frame, detail::utf8_length(detail::terminal_safe(f)));
    source_column = headers.size();
    headers.emplace_back("Source Location");
    widths.push_back(int(std::min(longest_frame + 4, max_source_width)));
  }
  std::vector<std::string> kernel_fields;  // per printed row
  std::size_t kernel_width = 0;
  if (options.describe_kernel) {
    for (const event_average* r : rows) {
      kernel_fields.push_back(r->kind == row_kind::gpu_work ? detail::terminal_safe(options.describe_kernel(r->key))
                                                            : std::string());
      kernel_width = std::max(kernel_width, kernel_fields.back().size());
    }
    kernel_width = std::max<std::size_t>(kernel_width, 6);
  }
  int max_name = options.max_name_column_width;
  if (options.line_width > 0) {
    std::size_t others = options.describe_kernel ? kernel_width + 2 : 0;
    for (std::size_t i = 1; i < widths.size(); ++i)  // a header may be wider than its column ("CUDA time avg")
      others += std::max(std::size_t(widths[i]), detail::utf8_length(headers[i])) + 2;
    const std::size_t room = options.line_width > others + 2 ? options.line_width - others - 2 : 0;
    if (room >= 12) max_name = std::min(max_name, int(room));
  }
  std::size_t longest = 0;
  for (const auto& r : rows_) longest = std::max(longest, detail::utf8_length(detail::terminal_safe(r.key)));
  widths[0] = std::min(int(longest) + 4, max_name);

  std::string out;
  // The kernel column is left-aligned, like torch's Source Location.
  const auto row_line = [&](const std::vector<std::string>& cells, const std::string* kernel) {
    for (std::size_t i = 0; i < cells.size(); ++i) {
      const std::size_t shown = detail::utf8_length(cells[i]);
      if (i != source_column && int(shown) < widths[i]) out.append(std::size_t(widths[i]) - shown, ' ');
      out += cells[i];
      if (i == source_column && int(shown) < widths[i]) out.append(std::size_t(widths[i]) - shown, ' ');
      out += "  ";
    }
    if (kernel) {
      out += *kernel;
      out.append(kernel_width - std::min(kernel_width, kernel->size()), ' ');
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
  if (options.describe_kernel) {
    separator.append(kernel_width, '-');
    separator += "  ";
    line_length += int(kernel_width) + 2;
  }
  separator += '\n';
  const std::string kernel_header = "Kernel";

  if (!options.header.empty()) {
    out.append(std::size_t(line_length), '=');
    out += '\n' + options.header + '\n';
  }
  out += separator;
  row_line(headers, options.describe_kernel ? &kernel_header : nullptr);
  out += separator;

  const double total_cpu = double(self_cpu_time_total_ns()) / 1000.0;
  const double total_cuda = double(self_cuda_time_total_ns()) / 1000.0;
  for (std::size_t row = 0; row < rows.size(); ++row) {
    const event_average* r = rows[row];
    // torch's own cut (not detail::shorten's): from max_name - 3 characters on,
    // the first max_name - 3 and "...", even when nothing was cut.
    std::string name = detail::terminal_safe(r->key);
    if (max_name > 3 && detail::utf8_length(name) >= std::size_t(max_name - 3))
      name = detail::utf8_prefix(name, std::size_t(max_name - 3)) + "...";
    const double self_cpu = double(r->self_cpu_ns) / 1000.0, cpu_total = double(r->cpu_total_ns) / 1000.0;
    std::vector<std::string> cells = {name,
                                      detail::format_share(self_cpu, total_cpu),
                                      detail::format_time_us(self_cpu),
                                      detail::format_share(cpu_total, total_cpu),
                                      detail::format_time_us(cpu_total),
                                      detail::format_time_us(r->cpu_time_avg_us())};
    if (has_cuda) {
      const double self_cuda = double(r->self_cuda_ns) / 1000.0;
      cells.push_back(detail::format_time_us(self_cuda));
      cells.push_back(detail::format_share(self_cuda, total_cuda));
      cells.push_back(detail::format_time_us(double(r->cuda_total_ns) / 1000.0));
      cells.push_back(detail::format_time_us(r->cuda_time_avg_us()));
    }
    if (memory_) {
      cells.push_back(detail::format_memory(r->cpu_memory));
      cells.push_back(detail::format_memory(r->self_cpu_memory));
    }
    if (has_cuda_memory) {
      cells.push_back(detail::format_memory(r->cuda_memory));
      cells.push_back(detail::format_memory(r->self_cuda_memory));
    }
    cells.push_back(std::to_string(r->count));
    if (has_args) {
      std::string args = detail::terminal_safe(r->args);
      if (detail::utf8_length(args) > max_args_width) args = detail::utf8_prefix(args, max_args_width - 3) + "...";
      cells.push_back(std::move(args));
    }
    if (options.stats) {
      const auto add_distribution = [&](const distribution& d, bool any) {
        for (std::uint64_t v : {d.min_ns, d.median_ns, d.p95_ns, d.max_ns})
          cells.push_back(any ? detail::format_time_us(double(v) / 1000.0) : std::string("-"));
      };
      add_distribution(r->cpu_distribution(), r->cpu_total_ns > 0);
      if (has_cuda) add_distribution(r->cuda_distribution(), r->cuda_total_ns > 0);
    }
    if (show_metrics) {
      for (std::size_t m = 0; m < metric_labels_.size(); ++m) {
        char buf[48] = "-";
        if (m < r->metrics.size() && std::isfinite(r->metrics[m])) std::snprintf(buf, sizeof buf, "%.2f", r->metrics[m]);
        cells.emplace_back(buf);
      }
      cells.push_back(r->metrics.empty() ? std::string("-") : std::to_string(r->sampled));
    }
    // torch's trim_path: a frame too long keeps its end, "..." in front.
    const auto source_cell = [&](const std::string& frame) {
      const std::string shown = detail::terminal_safe(frame);
      const std::size_t width = std::size_t(widths[source_column]);
      if (detail::utf8_length(shown) <= width) return shown;
      return "..." + detail::utf8_suffix(shown, width - 3);
    };
    if (source_column != std::size_t(-1)) cells.push_back(r->stack.empty() ? std::string() : source_cell(r->stack[0]));
    row_line(cells, options.describe_kernel ? &kernel_fields[row] : nullptr);
    if (!r->stack.empty()) {
      std::vector<std::string> more(cells.size());
      const std::string no_kernel;
      for (std::size_t k = 1; k < r->stack.size(); ++k) {
        more[source_column] = source_cell(r->stack[k]);
        row_line(more, options.describe_kernel ? &no_kernel : nullptr);
      }
      more[source_column].clear();
      row_line(more, options.describe_kernel ? &no_kernel : nullptr);
    }
  }
  out += separator;
  out += "Self CPU time total: " + detail::format_time_us(total_cpu) + "\n";
  if (has_cuda) out += "Self CUDA time total: " + detail::format_time_us(total_cuda) + "\n";
  return out;
}

}  // namespace cuprof
