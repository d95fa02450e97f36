// CUPROF_CAPTURE_RANGE=cuda|nvtx:MSG[@DOM], CUPROF_CAPTURE_RANGE_END=stop|
// repeat|repeat:N: windows the program marks itself, between its
// cudaProfilerStart and cudaProfilerStop, or inside an NVTX range. The
// profile waits with CUPTI attached and nothing recording (an idle
// profiler's cost). The hooks match the call on the program's thread and
// ask; the driver opens and closes the window and this policy writes each
// trace, numbered when there are several.
//
// NVTX: `nvtx:MSG` without a domain takes the first range named MSG of any
// domain and ends at that range's own pop or end (a pushed range at the pop
// that matches its push on its thread and domain, a started range at the end
// of its id). `stop` means no window after the first.
#pragma once

#include "driver.hpp"
#include "../../base/env.hpp"
#include "../../base/log.hpp"
#include "../../base/text.hpp"

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

namespace cuprof::detail {

// The windows the program itself marks (CUPROF_CAPTURE_RANGE): between its
// cudaProfilerStart and cudaProfilerStop calls, or inside an NVTX range of
// a given message. Outside them nothing records.
struct capture_range {
  // trigger: only the windows `cuprof trigger` asks for; refused: a value not understood, which traces nothing
  enum kind_t { none, cuda, nvtx, trigger, refused } kind = none;
  std::string message;  // nvtx: the range's message, matched whole
  std::string domain;   // nvtx: its domain's name; empty: any domain
  int ranges = 1;       // how many ranges are captured, each a trace; 0: every one
};

// "cuda", "nvtx:MSG", "nvtx:MSG@DOMAIN" or "trigger". A range not understood
// is refused, with its problem: a window was asked for, so the whole run is
// not what the user wants.
inline env_setting<capture_range> read_capture_range(const char* text) {
  capture_range c;
  const std::string r = text ? text : "";
  if (r.empty()) return {c, {}};
  if (r == "cuda" || r == "cudaProfilerApi") {
    c.kind = capture_range::cuda;
  } else if (r == "trigger") {
    c.kind = capture_range::trigger;
    c.ranges = 0;
  } else if (r.compare(0, 5, "nvtx:") == 0 && r.size() > 5) {
    c.kind = capture_range::nvtx;
    const std::size_t at = r.rfind('@');
    c.message = r.substr(5, at == std::string::npos || at < 5 ? std::string::npos : at - 5);
    if (at != std::string::npos && at >= 5) c.domain = r.substr(at + 1);
    if (c.message.empty() || (at != std::string::npos && c.domain.empty())) {
      c.kind = capture_range::refused;
      return {c, "CUPROF_CAPTURE_RANGE=" + quoted_value(r) +
                     " names no range message or an empty domain (nvtx:MESSAGE or nvtx:MESSAGE@DOMAIN); nothing is traced"};
    }
  } else {
    c.kind = capture_range::refused;
    return {c, "CUPROF_CAPTURE_RANGE=" + quoted_value(r) +
                   " is not cuda, nvtx:MESSAGE, nvtx:MESSAGE@DOMAIN or trigger; nothing is traced"};
  }
  return {c, {}};
}

// CUPROF_CAPTURE_RANGE_END: how many ranges are captured, 0 for every one.
// "stop" (and a value not understood) keeps the range's own count: the first
// only, or every window for a trigger.
inline env_setting<int> read_capture_range_end(const char* text, int ranges) {
  const std::string e = text ? text : "";
  std::optional<int> n;
  if (e == "stop") n = ranges;
  else if (e == "repeat") n = 0;
  else if (e.compare(0, 7, "repeat:") == 0) {
    n = parse_env_int(e.c_str() + 7);
    if (n && *n < 1) n.reset();
  }
  return read_setting("CUPROF_CAPTURE_RANGE_END", text, n, ranges, "stop, repeat or repeat:N (N at least 1)", "stop");
}

class capture_range_window final : public window_policy {
 public:
  capture_range_window(window_driver& d, const capture_range& range, trace_destination& out)
      : driver_(d), range_(range), out_(out), owner_pid_(std::uint32_t(::getpid())) {
    index_ = d.add(this);
  }

  // ---- the program's threads ----

  void on_profiler_api(bool start) noexcept override {
    if (range_.kind != capture_range::cuda || done_.load(std::memory_order_relaxed)) return;
    // cudaProfilerStart calls cuProfilerStart: both reach the hook, one range.
    if (start ? !driver_.claim(index_) : !driver_.release(index_)) return;
    if (start) ask(window_ask::open);
    else closed();
  }

  void on_nvtx(const nvtx_range_event& e) noexcept override {
    if (range_.kind != capture_range::nvtx || done_.load(std::memory_order_relaxed)) return;
    const auto is = [&e](const std::string& text) {
      return e.message && e.length == text.size() && std::memcmp(e.message, text.data(), e.length) == 0;
    };
    const bool in_range = driver_.owner() == index_;
    switch (e.kind) {
      case nvtx_range_event::domain_created:
        if (!range_.domain.empty() && is(range_.domain)) named_domain_.store(e.domain, std::memory_order_relaxed);
        return;
      case nvtx_range_event::push:
      case nvtx_range_event::start:
        if (in_range) {
          if (e.kind == nvtx_range_event::push && same_thread_and_domain(e)) level_.fetch_add(1, std::memory_order_relaxed);
          return;
        }
        if (!is(range_.message) ||
            (!range_.domain.empty() && (!e.domain || e.domain != named_domain_.load(std::memory_order_relaxed))))
          return;
        if (std::uint32_t(::getpid()) != owner_pid_) return;  // a forked child: no driver's thread there
        if (!driver_.claim(index_)) return;                   // a trigger's window
        tid_.store(std::uint32_t(::syscall(SYS_gettid)), std::memory_order_relaxed);
        domain_.store(e.domain, std::memory_order_relaxed);
        id_.store(e.kind == nvtx_range_event::start ? e.id : 0, std::memory_order_relaxed);
        level_.store(1, std::memory_order_relaxed);
        return ask(window_ask::open);
      case nvtx_range_event::pop:
        if (!in_range || id_.load(std::memory_order_relaxed) != 0 || !same_thread_and_domain(e) ||
            level_.fetch_sub(1, std::memory_order_relaxed) != 1)
          return;
        break;
      case nvtx_range_event::end:
        if (!in_range || e.id == 0 || e.id != id_.load(std::memory_order_relaxed)) return;
        break;
    }
    if (driver_.release(index_)) closed();
  }

  // ---- the driver's thread ----

  bool watches() const override { return !done_.load(std::memory_order_relaxed); }

  // A range can close and the next open before the driver gets to either:
  // the asks come in the order of their instants, and an open that finds the
  // window still open (its close not posted yet) waits for that close.
  void on_ask(const window_ask& a, window_target& t) override {
    if (a.kind == window_ask::open) {
      if (open_) return void(deferred_open_ = true);
      open_ = opened_any_ = true;
      return t.open();
    }
    if (a.kind != window_ask::close || !open_) return;
    open_ = false;
    t.close_at(a.ticks);
    if (deferred_open_) {
      deferred_open_ = false;
      open_ = true;
      t.open();
    }
  }

  // Each window's trace: to the trace path with %n its number (or ".<n>"
  // before the extension when several ranges are captured and the path has
  // no %n). A window after the first never replaces an earlier trace of the
  // run: numbered, as %n would, and said.
  void write(profile& p) override {
    const int n = ++out_.windows_written;
    const bool numbered = range_.ranges != 1 || n > 1;
    const std::string path = numbered_trace_path(out_.path, n, numbered ? "" : nullptr);
    if (n > 1 && range_.ranges == 1 && out_.path.find("%n") == std::string::npos)
      log_line("window " + std::to_string(n) + " is written to " + terminal_safe(path) + ", beside the first trace, not over it");
    out_.write(p.last_trace(), path);
    if (out_.print_table) write_stderr(p.key_averages().table("self_cuda_time_total", 30));
  }

  // A window still open at exit is ended by the profile's stop() and written
  // here; no range at all is said.
  void finish(window_target&) override {
    if (opened_any_) return;
    log_line(std::string("no capture range started (") +
             (range_.kind == capture_range::cuda
                  ? "cudaProfilerStart was never called"
                  : "no NVTX range '" + terminal_safe(range_.message) + "' in the domain asked for") +
             "): no trace written, '" + terminal_safe(out_.path) + "' left as it was");
  }

 private:
  void ask(window_ask::kind_t kind) noexcept {
    window_ask a;
    a.kind = kind;
    a.policy = std::uint8_t(index_);
    a.tid = std::uint32_t(::syscall(SYS_gettid));
    a.ticks = now_ticks();
    if (kind == window_ask::open) driver_.post_and_wait(a);
    else driver_.post(a);
  }

  // The hook that closes a range counts it at once: a range that opens
  // after the last one asked for closed opens nothing.
  void closed() noexcept {
    const int ranges = range_.ranges;
    if (ranges > 0 && closed_.fetch_add(1, std::memory_order_relaxed) + 1 >= ranges) done_.store(true, std::memory_order_relaxed);
    ask(window_ask::close);
  }

  bool same_thread_and_domain(const nvtx_range_event& e) const noexcept {
    return e.domain == domain_.load(std::memory_order_relaxed) &&
           std::uint32_t(::syscall(SYS_gettid)) == tid_.load(std::memory_order_relaxed);
  }

  window_driver& driver_;
  int index_ = 0;
  const capture_range range_;
  trace_destination& out_;
  const std::uint32_t owner_pid_;
  // The hooks', on the program's threads.
  std::atomic<std::uint32_t> tid_{0};            // nvtx: the thread that opened the range
  std::atomic<std::uintptr_t> domain_{0};        // its domain
  std::atomic<std::uint64_t> id_{0};             // a started range's id; 0: a pushed range
  std::atomic<int> level_{0};                    // pushed range: its thread's pushes in its domain, its own counted
  std::atomic<std::uintptr_t> named_domain_{0};  // the handle of the domain asked for, once created
  std::atomic<int> closed_{0};                   // ranges closed, counted at the closing call
  std::atomic<bool> done_{false};                // as many as CUPROF_CAPTURE_RANGE_END asked for
  // The driver's.
  bool open_ = false;
  bool deferred_open_ = false;
  bool opened_any_ = false;
};

}  // namespace cuprof::detail
