// What cuprof's headers hold under CUPROF_DISABLE: the session API as empty
// inline stubs, so a program compiles unchanged and its build pays nothing,
// not even the standard headers the real API needs (<string> alone costs a
// translation unit about 0.2 s). Nothing is recorded, no file is written, no
// CUPTI is loaded; texts are empty and lists have no elements. Reading or
// analysing traces is the cuprof::analysis library's, built without it.
#pragma once

#ifndef CUPROF_DISABLE
#error "cuprof: disabled_api.hpp stands in for the API under CUPROF_DISABLE only"
#endif

#include "activity.hpp"
#include "base/config.hpp"
#include "record_function.hpp"
#include "schedule.hpp"

namespace cuprof {

namespace detail {

// Stands for the std::string the real API returns: empty, printable, and
// convertible to any string type.
struct disabled_text {
  const char* c_str() const noexcept { return ""; }
  const char* data() const noexcept { return ""; }
  bool empty() const noexcept { return true; }
  decltype(sizeof 0) size() const noexcept { return 0; }
  template <class String>
  operator String() const {
    return String();
  }
  template <class Stream>
  friend Stream& operator<<(Stream& out, const disabled_text&) {
    return out;
  }
};

// Accepts anything assigned to it (a sort key, a path) and keeps nothing.
struct ignored_value {
  ignored_value() = default;
  template <class T>
  ignored_value(const T&) noexcept {}
  template <class T>
  ignored_value& operator=(const T&) noexcept {
    return *this;
  }
};

// Accepts any handler and never calls it.
struct ignored_handler : ignored_value {
  using ignored_value::ignored_value;
  explicit operator bool() const noexcept { return false; }
};

template <class T>
struct empty_list {
  const T* begin() const noexcept { return nullptr; }
  const T* end() const noexcept { return nullptr; }
  decltype(sizeof 0) size() const noexcept { return 0; }
  bool empty() const noexcept { return true; }
};

}  // namespace detail

class error {
 public:
  const char* what() const noexcept { return "cuprof: disabled"; }
};

// The recorded model, always empty: its element types have no fields.
struct cpu_span {};
struct api_call {};
struct gpu_activity {};
struct trace {
  detail::empty_list<cpu_span> spans;
  detail::empty_list<api_call> api_calls;
  detail::empty_list<gpu_activity> gpu;
};

struct event_average {};
struct table_options {
  detail::ignored_value sort_by;
  int row_limit = 100;
  detail::ignored_value header;
  int max_name_column_width = 55;
  bool stats = false;
  bool metrics = false;
  detail::ignored_value describe_kernel;
};

enum class group_by : unsigned char { name, args };

class event_averages {
 public:
  detail::empty_list<event_average> rows() const noexcept { return {}; }
  detail::disabled_text table(const table_options& = {}) const noexcept { return {}; }
  template <class SortBy>
  detail::disabled_text table(const SortBy&, int = 100) const noexcept {
    return {};
  }
};

struct export_result {
  detail::disabled_text path;
  decltype(sizeof 0) events = 0;
  unsigned long long bytes = 0;
};

enum class trace_detail : unsigned char { kineto, lean };
struct export_options {
  trace_detail detail = trace_detail::kineto;
};

inline event_averages key_averages(const trace&, group_by = group_by::name, int = 0) noexcept { return {}; }
template <class Path>
export_result export_chrome_trace(const trace&, const Path&, const export_options& = {}) noexcept {
  return {};
}
template <class... Name>
detail::disabled_text chrome_trace_json(const trace&, const Name&...) noexcept {
  return {};
}

class profile;

struct gpu_metrics_options {
  detail::ignored_value metrics;
  double interval_us = 200;
};

struct profile_options {
  activity activities = activity::cpu | activity::cuda;
  detail::ignored_value schedule;
  detail::ignored_value slow_steps;
  detail::ignored_value gpu_metrics;
  bool profile_memory = false;
  bool with_stack = false;
  detail::ignored_handler on_trace_ready;
};

struct start_now_t {};
inline constexpr start_now_t start_now{};

class profile {
 public:
  explicit profile(const profile_options& = {}) noexcept {}
  profile(const profile_options&, start_now_t) noexcept {}
  profile(const profile&) = delete;
  profile& operator=(const profile&) = delete;

  void start() noexcept {}
  void stop() noexcept {}
  void step() noexcept {}
  bool running() const noexcept { return false; }
  long long step_num() const noexcept { return 0; }
  profiler_action current_action() const noexcept { return profiler_action::none; }
  detail::disabled_text cuda_status() const noexcept { return {}; }
  const trace& last_trace() const noexcept {
    static const trace empty;
    return empty;
  }
  event_averages key_averages(group_by = group_by::name, int = 0) const noexcept { return {}; }
  template <class Path, class... Metric>
  void export_stacks(const Path&, const Metric&...) const noexcept {}
  template <class Path>
  export_result export_chrome_trace(const Path&, const export_options& = {}) const noexcept {
    return {};
  }
};

template <class... Arguments>
detail::ignored_handler tensorboard_trace_handler(const Arguments&...) noexcept {
  return {};
}

}  // namespace cuprof
