// CUPROF_SLOW_STEPS: only the slow steps are kept, each with the steps around
// it, in a trace of its own. The profile records from start-up into the slow
// steps' ring (profile_options::slow_steps, model/slow_steps.hpp); each
// program step's start goes to the profile as a step boundary, which moves
// the ring's start or closes a kept window, and each kept window is written
// here with its steps as ProfilerStep#N spans. At exit the profile's stop()
// hands over a window still waiting for its `after` steps and says the
// summary; nothing else is written.
#pragma once

#include "steps.hpp"
#include "../../base/env.hpp"
#include "../../base/error.hpp"
#include "../../base/log.hpp"
#include "../../base/text.hpp"
#include "../../model/slow_steps.hpp"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <optional>
#include <string>

namespace cuprof::detail {

// CUPROF_SLOW_STEPS (and `cuprof run --slow-steps`): "2x" (slower than twice
// the median) or a time, "50ms" (ns, us, ms or s), then any of ",before=N",
// ",after=N", ",keep=N" (traces), ",ring=N" (steps) and ",ring_mb=N" (the
// ring's cap), in any order, checked by slow_steps::validate(); `why` says
// what is wrong otherwise.
inline std::optional<slow_steps> parse_slow_steps(const char* v, std::string& why) {
  if (!v) return std::nullopt;
  const auto decimal = [](const std::string& text) -> std::optional<double> {
    if (text.empty() || text.find_first_not_of("0123456789.") != std::string::npos) return std::nullopt;
    char* end = nullptr;
    const double x = std::strtod(text.c_str(), &end);
    if (*end != '\0' || !std::isfinite(x)) return std::nullopt;
    return x;
  };
  const std::string spec = v;
  const std::size_t comma = spec.find(',');
  const std::string rule = spec.substr(0, comma);
  slow_steps o;
  std::optional<double> number;
  if (!rule.empty() && (rule.back() == 'x' || rule.back() == 'X')) {
    if ((number = decimal(rule.substr(0, rule.size() - 1)))) o.factor = *number;
  } else {
    static const struct {
      const char* suffix;
      double ms;
    } units[] = {{"ns", 1e-6}, {"us", 1e-3}, {"ms", 1}, {"s", 1e3}};
    for (const auto& u : units)
      if (ends_with(rule, u.suffix)) {
        if ((number = decimal(rule.substr(0, rule.size() - std::strlen(u.suffix))))) o.threshold_ms = *number * u.ms;
        break;
      }
    if (number && o.threshold_ms == 0) number.reset();
  }
  if (!number) {
    why = "the rule comes first: a factor of the median (2x) or a time (50ms; ns, us, ms or s)";
    return std::nullopt;
  }
  for (std::size_t at = comma; at != std::string::npos;) {
    const std::size_t next = spec.find(',', at + 1);
    const std::string item = spec.substr(at + 1, next == std::string::npos ? std::string::npos : next - at - 1);
    at = next;
    const std::size_t eq = item.find('=');
    const std::string key = item.substr(0, eq);
    if (key != "before" && key != "after" && key != "keep" && key != "ring" && key != "ring_mb") {
      why = "'" + quoted_value(item) + "' is not before=N, after=N, keep=N, ring=N or ring_mb=N";
      return std::nullopt;
    }
    // A plain int, not the optional: GCC at -O1 thinks the optional's value may be unset here.
    int n = 0;
    const std::optional<int> parsed = eq == std::string::npos ? std::nullopt : parse_env_int(item.substr(eq + 1).c_str());
    if (!parsed) {
      why = key + " takes a whole number";
      return std::nullopt;
    }
    n = parsed.value_or(0);
    if (key == "before") o.before = n;
    else if (key == "after") o.after = n;
    else if (key == "keep") o.max_traces = n;
    else if (key == "ring") o.ring_steps = n;
    else o.ring_bytes = std::size_t(n) << 20;
  }
  try {
    o.validate();
  } catch (const std::exception& e) {
    why = message_of(e);
    return std::nullopt;
  }
  return o;
}

inline env_setting<std::optional<slow_steps>> read_slow_steps(const char* text) {
  if (!text || !*text) return {std::nullopt, {}};
  std::string why;
  std::optional<slow_steps> parsed = parse_slow_steps(text, why);
  if (parsed) return {parsed, {}};
  return {std::nullopt,
          "CUPROF_SLOW_STEPS=" + quoted_value(text) + " is not a slow-step rule (" + why + "); slow steps are not kept"};
}

class slow_steps_window final : public window_policy {
 public:
  slow_steps_window(window_driver& d, trace_destination& out, std::string step_range)
      : driver_(d), out_(out), step_range_(std::move(step_range)) {
    index_ = d.add(this);
  }

  void on_nvtx(const nvtx_range_event& e) noexcept override { post_step(driver_, index_, e, step_range_); }

  bool watches() const override { return true; }

  void on_ask(const window_ask& a, window_target& t) override {
    if (a.kind != window_ask::step) return;
    const std::uint64_t at = before_step(a.ticks);  // the range in the window, as a step window opens
    marks_.mark(seen_, at, a.tid);
    t.step_boundary(at, seen_ == 0);
    ++seen_;
  }

  // A kept window, with the marks inside it as its steps, to its own file.
  void write(profile& p) override {
    trace t = p.last_trace();
    marks_.add_to(t, marks_.first_index(), step_range_);
    const std::string path = numbered_trace_path(out_.path, ++written_, "slow");
    try {
      out_.write(t, path);
    } catch (const std::exception& e) {
      log_line("could not write a slow step's trace: " + message_of(e));
    }
  }

 private:
  window_driver& driver_;
  int index_ = 0;
  trace_destination& out_;
  const std::string step_range_;
  std::int64_t seen_ = 0;
  int written_ = 0;
  step_marks marks_;
};

}  // namespace cuprof::detail
