// A busy process for window tests, simulated on the CPU: 8 or more threads
// launching CUDA kernels nonstop through the real call recorder, their GPU
// records delivered late and in batches to a record store, as CUPTI's worker
// does, and each thread's own log of when its launches entered (the
// independent count the windows are checked against). The window engine
// (collect/window_engine.hpp) takes windows from it through busy_records.
//
// The rule checked (docs/guide.md, "Windows and their edges"): a CUDA call
// belongs to the window in which it started and brings its GPU work with it,
// even if that work ends after the window; a record belongs to one window at
// most; back-to-back windows lose nothing between them.
#pragma once

#include <cuprof/collect/window_engine.hpp>
#include <cuprof/cupti/call_recorder.hpp>

#include "cupti_calls.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace cuprof_test {

// Sanitizers make every launch many times slower: the tests launch fewer, further apart.
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define CUPROF_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define CUPROF_TEST_SANITIZED 1
#endif
#endif
#ifdef CUPROF_TEST_SANITIZED
inline constexpr bool under_sanitizer = true;
#else
inline constexpr bool under_sanitizer = false;
#endif

using cuprof::api_domain;
using cuprof::detail::now_ticks;
using cuprof::detail::cupti::call_recorder;
using cuprof::detail::cupti::record_store;

constexpr CUpti_CallbackId launch_cbid = 211;  // cudaLaunchKernel
constexpr CUpti_CallbackId driver_launch_cbid = 307;
constexpr CUpti_CallbackId sync_cbid = 131;  // cudaStreamSynchronize

inline std::string window_raw_name(api_domain d, std::uint32_t cbid) {
  if (d == api_domain::runtime && cbid == launch_cbid) return "cudaLaunchKernel_v7000";
  if (d == api_domain::runtime && cbid == sync_cbid) return "cudaStreamSynchronize_v3020";
  if (d == api_domain::driver && cbid == driver_launch_cbid) return "cuLaunchKernel";
  return "cbid" + std::to_string(cbid);
}

// What a worker knows of one of its launches: the recorder stamps the call's
// start between `before` and `after`.
struct launch_log {
  std::uint32_t correlation = 0;
  std::uint64_t before = 0, after = 0;
  std::uint32_t tid = 0;
};

struct window_span {
  std::uint64_t start = 0, end = 0;
};

// The process's CUDA calls, their GPU work and CUPTI's worker, simulated:
// workers launch nonstop (some calls last long enough to straddle a window's
// edge, every 64th launch a stream sync); each kernel reaches the "GPU" queue
// and the store only after a delay, in batches, as CUPTI's buffers do.
class busy_process {
 public:
  // `max_launches`: a thread's at most; `pause_us`: after every 4th launch.
  // 40,000 at 20 us is about twice what 100 windows of 2 ms take unhindered;
  // tests whose windows are longer launch slower and longer.
  explicit busy_process(int threads, int max_launches = 40000, int pause_us = 20)
      : max_launches_(max_launches), pause_us_(pause_us), store_(window_raw_name) {
    recorder().start_recording(now_ticks());
    for (int i = 0; i < threads; ++i) workers_.emplace_back([this, i] { work(i); });
    cupti_worker_ = std::thread([this] { deliver(); });
  }
  ~busy_process() { finish(); }

  // The workers launch no more (the windows are all closed); their calls in progress end.
  void stop_launching() { launching_.store(false); }

  void finish() {
    stop_launching();
    if (stop_.exchange(true)) return;
    for (std::thread& t : workers_) t.join();
    cupti_worker_.join();
  }

  template <class Fn>
  auto with_store(Fn&& fn) {
    std::lock_guard<std::mutex> lock(store_mutex_);
    return fn(store_);
  }

  // What tracer::flush does: the GPU records so far and the calls drained.
  void flush() {
    std::deque<CUpti_ActivityKernel10> ready;
    {
      std::lock_guard<std::mutex> lock(gpu_mutex_);
      ready.swap(gpu_);
    }
    std::lock_guard<std::mutex> lock(store_mutex_);
    for (const CUpti_ActivityKernel10& k : ready) store_.add(reinterpret_cast<const CUpti_Activity*>(&k));
    recorder().drain_into(store_);
  }

  std::vector<launch_log> launches() const {
    std::vector<launch_log> all;
    for (const auto& l : logs_) all.insert(all.end(), l.begin(), l.end());
    return all;
  }

 private:
  // One recorder per process, as the tracer's (threads keep their buffers in
  // a thread_local): these threads are new, so they register with it.
  static call_recorder& recorder() {
    static auto* r = new call_recorder;
    return *r;
  }

  void work(int index) {
    std::minstd_rand random(std::uint32_t(index) * 7919u + 1);
    std::vector<launch_log>& log = logs_[std::size_t(index)];
    log.reserve(1 << 16);
    // Launches are capped, and end with the last window: under a sanitizer the windows are taken far
    // slower than launches come, and what no window takes would pile up in the store.
    for (int n = 0; n < max_launches_ && launching_.load(std::memory_order_relaxed); ++n) {
      const std::uint32_t id = next_id_.fetch_add(2);
      launch_log l;
      l.correlation = id;
      l.tid = cuprof::detail::current_tid();
      l.before = now_ticks();
      std::uint64_t returned = 0;
      cuprof_test::traced_call(recorder(), CUPTI_CB_DOMAIN_RUNTIME_API, launch_cbid, id, 0, [&] {
        l.after = now_ticks();
        // Now and then a launch that takes a while: in flight across an edge.
        if (random() % 97 == 0) std::this_thread::sleep_for(std::chrono::microseconds(300));
        cuprof_test::traced_call(recorder(), CUPTI_CB_DOMAIN_DRIVER_API, driver_launch_cbid, id + 1);
        returned = now_ticks();
      });
      log.push_back(l);
      // The kernel carries the driver call's id and runs after the launch, on this thread's stream.
      CUpti_ActivityKernel10 k;
      std::memset(static_cast<void*>(&k), 0, sizeof k);
      k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
      k.start = returned + 1000 + random() % 50000;
      k.end = k.start + 2000;
      k.correlationId = id + 1;
      k.streamId = std::uint32_t(index + 1);
      k.contextId = 1;
      k.name = "_Z4spinPfi";
      {
        std::lock_guard<std::mutex> lock(gpu_mutex_);
        gpu_.push_back(k);
      }
      // A launch costs a GPU program a few microseconds; a pause keeps 8 threads on 2 cores at that pace.
      if (n % 4 == 3) std::this_thread::sleep_for(std::chrono::microseconds(pause_us_));
      if (n % 64 == 63) {  // a stream sync: a call without GPU work of its own
        cuprof_test::traced_call(recorder(), CUPTI_CB_DOMAIN_RUNTIME_API, sync_cbid, next_id_.fetch_add(1), 0,
                                 [] { std::this_thread::sleep_for(std::chrono::microseconds(50)); });
      }
    }
  }

  // CUPTI's worker: buffers come every millisecond or so, out of step with the windows.
  void deliver() {
    while (!stop_.load(std::memory_order_relaxed)) {
      flush();
      std::this_thread::sleep_for(std::chrono::microseconds(700));
    }
    flush();
  }

  const int max_launches_;
  const int pause_us_;
  record_store store_;
  std::mutex store_mutex_;
  std::mutex gpu_mutex_;
  std::deque<CUpti_ActivityKernel10> gpu_;
  std::atomic<std::uint32_t> next_id_{10};
  std::atomic<bool> launching_{true};
  std::atomic<bool> stop_{false};
  std::array<std::vector<launch_log>, 16> logs_;
  std::vector<std::thread> workers_;
  std::thread cupti_worker_;
};

struct taken_window {
  window_span span;
  std::set<std::uint32_t> launches;      // the runtime launch calls' ids
  std::map<std::uint32_t, int> kernels;  // kernels by the id they were linked to
  std::set<std::uint32_t> launch_tids;   // the threads whose launches it holds
  cuprof::window_edges edges;
};

// The busy process's records as the window engine takes them.
struct busy_records {
  busy_process& p;
  void discard_before(std::uint64_t ticks) {
    p.with_store([&](cuprof::detail::cupti::record_store& s) {
      s.discard_before(ticks);
      return 0;
    });
  }
  bool complete(std::uint64_t start, std::uint64_t end) {
    p.flush();
    return p.with_store([&](cuprof::detail::cupti::record_store& s) { return s.window_complete(start, end); });
  }
  void take(cuprof::trace& out, std::uint64_t start, std::uint64_t end, const cuprof::detail::tick_converter& clock) {
    p.with_store([&](cuprof::detail::cupti::record_store& s) {
      s.take(out, start, end, clock);
      return 0;
    });
  }
};

// What a test keeps of a window handed over.
inline taken_window summary_of(const cuprof::detail::closed_window& w) {
  const cuprof::trace& t = *w.collected;
  taken_window out;
  out.span = {w.start_ticks, w.end_ticks};
  out.edges = t.meta.edges;
  for (const cuprof::api_call& c : t.api_calls)
    if (t.names.str(t.name_of(c)) == "cudaLaunchKernel") out.launches.insert(c.correlation), out.launch_tids.insert(c.tid);
  for (const cuprof::gpu_activity& g : t.gpu)
    if (g.kind == cuprof::gpu_kind::kernel) ++out.kernels[g.correlation];
  return out;
}

// Hands over what is complete; with `wait`, waits (at most 20 s) until every closed window is.
inline void hand_over(cuprof::detail::window_engine<busy_records>& engine, busy_records& r, std::vector<taken_window>& taken,
                      bool wait) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (;;) {
    engine.hand_over(r, false, cuprof::detail::monotonic_ns(),
                     [&](cuprof::detail::closed_window& w) { taken.push_back(summary_of(w)); });
    if (!wait || !engine.waiting()) return;
    if (std::chrono::steady_clock::now() >= give_up) {
      CHECK_MESSAGE(false, "a window still incomplete after 20 s");
      engine.hand_over(r, true, cuprof::detail::monotonic_ns(),
                       [&](cuprof::detail::closed_window& w) { taken.push_back(summary_of(w)); });
      return;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
}

// Checks every window against the workers' own log and the rule.
inline void check_windows(const std::vector<taken_window>& taken, const std::vector<launch_log>& log, int threads) {
  std::map<std::uint32_t, int> windows_of;  // launch id -> how many windows hold it
  std::size_t exact = 0, straddling = 0;
  std::map<const taken_window*, std::set<std::uint32_t>> launched_in;  // by the workers' log: who launched in each window
  // Where a launch is, by its own log and by the windows, when a check fails.
  const auto whereabouts = [&](std::uint32_t id) {
    std::string out;
    for (const launch_log& l : log)
      if (l.correlation == id) out += "logged at [" + std::to_string(l.before) + ", " + std::to_string(l.after) + "]";
    for (std::size_t i = 0; i < taken.size(); ++i) {
      const taken_window& w = taken[i];
      if (w.launches.count(id) || w.kernels.count(id))
        out += "; window " + std::to_string(i) + " [" + std::to_string(w.span.start) + ", " + std::to_string(w.span.end) +
               "] has " + (w.launches.count(id) ? "the launch" : "") + (w.kernels.count(id) ? " its kernel" : "");
    }
    return out;
  };
  for (const taken_window& w : taken) {
    CAPTURE(w.span.start);
    // One to one: each launch its kernel, each kernel its launch (linked to the runtime call).
    for (std::uint32_t id : w.launches) {
      const auto k = w.kernels.find(id);
      CHECK_MESSAGE((k != w.kernels.end() && k->second == 1), "launch " << id << " without its one kernel: " << whereabouts(id));
    }
    for (const auto& [id, n] : w.kernels) CHECK_MESSAGE(w.launches.count(id) == 1, "kernel " << id << " without its launch");
    CHECK_MESSAGE(!w.edges.lost(), cuprof::window_losses(w.edges));
    for (std::uint32_t id : w.launches) ++windows_of[id];
  }
  for (const launch_log& l : log) {
    CAPTURE(l.correlation);
    const auto held = windows_of.find(l.correlation);
    const int n = held == windows_of.end() ? 0 : held->second;
    CHECK(n <= 1);  // a record belongs to one window at most
    // The windows are taken in order and do not overlap: the one that may hold `t` is the last to start by it.
    const auto inside = [&](std::uint64_t t) {
      const auto after = std::upper_bound(taken.begin(), taken.end(), t,
                                          [](std::uint64_t v, const taken_window& w) { return v < w.span.start; });
      if (after == taken.begin()) return static_cast<const taken_window*>(nullptr);
      const taken_window& w = *(after - 1);
      return t <= w.span.end ? &w : static_cast<const taken_window*>(nullptr);
    };
    const taken_window* at_before = inside(l.before);
    const taken_window* at_after = inside(l.after);
    if (at_before == at_after) {
      ++exact;
      if (at_before) launched_in[at_before].insert(l.tid);
      if (at_before)
        CHECK_MESSAGE(at_before->launches.count(l.correlation) == 1,
                      "launch lost from its window (in " << n << " windows; window " << (at_before - taken.data()) << ")");
      else CHECK(n == 0);
    } else {
      ++straddling;  // the call's start was stamped across an edge: either side, once
    }
  }
  // Every thread that launched in a window, by its own log, is in it; on a busy
  // machine a thread may get no launch into a short window, so not always all.
  std::size_t whole = 0;
  for (const auto& [w, tids] : launched_in) {
    for (std::uint32_t tid : tids) CHECK_MESSAGE(w->launch_tids.count(tid) == 1, "thread " << tid << " missing from a window");
    whole += tids.size() == std::size_t(threads);
  }
  CHECK(whole > 0);
  CHECK(exact > 1000);
  MESSAGE(taken.size() << " windows, " << exact << " launches placed exactly, " << straddling << " stamped across an edge");
}

}  // namespace cuprof_test
