// The collect layer (include/cuprof/collect/): scopes recorded by a CPU-only
// profile, their names and arguments, slots to spans (span_builder), the clock,
// threads (many, short-lived, exiting, outliving the profile, ending a scope on
// another thread), the idle path after stop(), busy writers and the CPU event cap.

#include <cuprof/cuprof.hpp>
#include <cuprof/collect/cpu_collect.hpp>
#include <cuprof/analysis.hpp>

#include "support/child_process.hpp"
#include "support/files.hpp"
#include "support/stderr_capture.hpp"
#include "support/traces.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace cuprof_test;

namespace {

using cuprof::no_index;

std::uint32_t index_of(const cuprof::trace& t, const cuprof::cpu_span* s) { return std::uint32_t(s - t.spans.data()); }

// A one-shot gate for threads.
class gate {
 public:
  void open() {
    std::lock_guard<std::mutex> lock(m_);
    open_ = true;
    cv_.notify_all();
  }
  void wait() {
    std::unique_lock<std::mutex> lock(m_);
    cv_.wait(lock, [&] { return open_; });
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  bool open_ = false;
};

// A thread entering scopes as fast as it can, with no pause: it outruns any
// collector, which is the point.
class busy_writer {
 public:
  busy_writer()
      : thread_([this] {
          for (std::uint64_t n = 1; !stop_.load(std::memory_order_relaxed); ++n) {
            CUPROF_SCOPE("busy");
            loops_.store(n, std::memory_order_relaxed);
          }
        }) {}
  ~busy_writer() {
    stop_.store(true);
    thread_.join();
  }
  // Counts loops, not time: on a loaded machine the writer may not run for a while.
  void wait_loops(std::uint64_t n) const {
    const std::uint64_t target = loops_.load() + n;
    while (loops_.load() < target) std::this_thread::yield();
  }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> loops_{0};
  std::thread thread_;
};

// Spans that start after their window's end or before its start.
std::size_t spans_outside_window(const cuprof::trace& t) {
  std::size_t n = 0;
  for (const cuprof::cpu_span& s : t.spans) n += s.start_ns > t.meta.window_end_ns || s.start_ns < t.meta.window_start_ns;
  return n;
}

// The chunks a recording can hold: the cap, passed by at most one chunk per
// thread racing past it, plus each thread's first chunk.
std::size_t chunk_bound(std::size_t threads) { return cuprof::detail::global_chunk_pool().max_chunks() + 2 * threads; }

}  // namespace

TEST_SUITE("collect") {

TEST_CASE("nested scopes: parents, counts, self <= total, self = total - children") {
  cuprof::profile prof(cpu_only());
  prof.start();
  REQUIRE(prof.running());
  {
    CUPROF_SCOPE("outer");
    busy_wait_us(200);
    {
      cuprof::record_function mid(std::string("mid") + "1");  // dynamic name
      busy_wait_us(100);
      for (int i = 0; i < 2; ++i) {
        CUPROF_SCOPE("inner");
        busy_wait_us(150);
      }
      busy_wait_us(50);
    }
    {
      cuprof::record_function mid2(cuprof::static_name{"mid2"});
      busy_wait_us(120);
    }
    busy_wait_us(30);
  }
  prof.stop();
  CHECK_FALSE(prof.running());

  const cuprof::trace& t = prof.last_trace();
  REQUIRE(t.spans.size() == 5);
  const std::uint32_t tid = gettid_now();
  // Parents precede children; start order within the thread.
  const auto index_of = [&](const cuprof::cpu_span* s) { return std::uint32_t(s - t.spans.data()); };
  const cuprof::cpu_span* outer = find_span(t, "outer");
  const cuprof::cpu_span* mid1 = find_span(t, "mid1");
  const cuprof::cpu_span* inner0 = find_span(t, "inner", 0);
  const cuprof::cpu_span* inner1 = find_span(t, "inner", 1);
  const cuprof::cpu_span* mid2 = find_span(t, "mid2");
  REQUIRE(outer);
  REQUIRE(mid1);
  REQUIRE(inner0);
  REQUIRE(inner1);
  REQUIRE(mid2);
  CHECK(outer->parent == no_index);
  CHECK(mid1->parent == index_of(outer));
  CHECK(mid2->parent == index_of(outer));
  CHECK(inner0->parent == index_of(mid1));
  CHECK(inner1->parent == index_of(mid1));
  CHECK(index_of(outer) < index_of(mid1));
  CHECK(index_of(mid1) < index_of(inner0));
  CHECK(index_of(inner0) < index_of(inner1));
  CHECK(index_of(inner1) < index_of(mid2));
  for (const auto& s : t.spans) {
    CHECK(s.tid == tid);
    CHECK(s.end_ns >= s.start_ns);
    CHECK_FALSE(s.is_step);
    if (s.parent != no_index) {
      CHECK(s.start_ns >= t.spans[s.parent].start_ns);
      CHECK(s.end_ns <= t.spans[s.parent].end_ns);
    }
  }
  // Busy-waits happened in this order; no timing amounts are asserted.
  CHECK(inner0->end_ns <= inner1->start_ns);
  CHECK(mid1->end_ns <= mid2->start_ns);
  // ids are unique, 1-based, in span order.
  for (std::size_t i = 0; i < t.spans.size(); ++i) CHECK(t.spans[i].id == i + 1);
  // Window covers every span.
  CHECK(t.meta.window_start_ns <= outer->start_ns);
  CHECK(t.meta.window_end_ns >= outer->end_ns);

  const cuprof::event_averages avg = prof.key_averages();
  const auto* r_outer = avg.find("outer", cuprof::row_kind::cpu_scope);
  const auto* r_mid1 = avg.find("mid1", cuprof::row_kind::cpu_scope);
  const auto* r_mid2 = avg.find("mid2", cuprof::row_kind::cpu_scope);
  const auto* r_inner = avg.find("inner", cuprof::row_kind::cpu_scope);
  REQUIRE(r_outer);
  REQUIRE(r_mid1);
  REQUIRE(r_mid2);
  REQUIRE(r_inner);
  CHECK(avg.rows().size() == 4);
  CHECK(r_outer->count == 1);
  CHECK(r_mid1->count == 1);
  CHECK(r_mid2->count == 1);
  CHECK(r_inner->count == 2);
  for (const auto& r : avg.rows()) {
    CHECK(r.self_cpu_ns <= r.cpu_total_ns);
    CHECK(r.self_cuda_ns == 0);
    CHECK(r.cuda_total_ns == 0);
  }
  const auto dur = [](const cuprof::cpu_span* s) { return s->end_ns - s->start_ns; };
  CHECK(r_inner->cpu_total_ns == dur(inner0) + dur(inner1));
  CHECK(r_outer->cpu_total_ns >= r_mid1->cpu_total_ns + r_mid2->cpu_total_ns);
  CHECK(r_mid1->cpu_total_ns >= r_inner->cpu_total_ns);
  // self = total - direct children (exact: integer nanoseconds)
  CHECK(r_outer->self_cpu_ns == r_outer->cpu_total_ns - r_mid1->cpu_total_ns - r_mid2->cpu_total_ns);
  CHECK(r_mid1->self_cpu_ns == r_mid1->cpu_total_ns - r_inner->cpu_total_ns);
  CHECK(r_mid2->self_cpu_ns == r_mid2->cpu_total_ns);
  CHECK(r_inner->self_cpu_ns == r_inner->cpu_total_ns);
  CHECK(avg.self_cpu_time_total_ns() == r_outer->cpu_total_ns);
  CHECK(avg.self_cuda_time_total_ns() == 0);

  // The table of a CPU-only window has no CUDA columns.
  const std::string table = prof.key_averages().table("cpu_time_total");
  CHECK(table.find("CUDA") == std::string::npos);
  // Sorted by total CPU time, which the busy-waits set only roughly on a loaded machine.
  std::vector<decltype(r_outer)> by_total = {r_outer, r_mid1, r_inner, r_mid2};
  std::stable_sort(by_total.begin(), by_total.end(), [](auto a, auto b) { return a->cpu_total_ns > b->cpu_total_ns; });
  std::vector<std::string> expected;
  for (auto r : by_total) expected.push_back(r->key);
  CHECK(row_names(table) == expected);
}

TEST_CASE("scopes record nothing while no profiler runs") {
  { CUPROF_SCOPE("before_start"); }
  cuprof::profile prof(cpu_only());
  prof.start();
  { CUPROF_SCOPE("during"); }
  prof.stop();
  { CUPROF_SCOPE("after_stop"); }
  CHECK(prof.last_trace().spans.size() == 1);
  CHECK(count_spans(prof.last_trace(), "during") == 1);
  // A later window does not see the scope run between the two windows.
  prof.start();
  prof.stop();
  CHECK(prof.last_trace().spans.empty());
}

TEST_CASE("scope names: static, dynamic (copied), empty, CUPROF_FUNCTION") {
  struct local {
    static void named_function() { CUPROF_FUNCTION(); }
  };
  cuprof::profile prof(cpu_only());
  prof.start();
  {
    std::string temp = "dyn";
    temp += "amic";
    cuprof::record_function r(temp);
    temp.assign("overwritten");  // the scope copied the characters
  }
  { cuprof::record_function r(std::string_view{}); }
  local::named_function();
  {
    const std::string big(300, 'x');  // spans several 16-byte slots
    cuprof::record_function r(big);
  }
  { cuprof::record_function r(std::string_view("nul\0inside", 10)); }
  prof.stop();
  const cuprof::trace& t = prof.last_trace();
  CHECK(count_spans(t, "dynamic") == 1);
  CHECK(count_spans(t, "") == 1);
  CHECK(count_spans(t, "named_function") == 1);
  CHECK(count_spans(t, std::string(300, 'x')) == 1);
  CHECK(count_spans(t, std::string("nul\0inside", 10)) == 1);
  CHECK(t.spans.size() == 5);
}

TEST_CASE("collection: scope arguments recorded, exported, read back and grouped by") {
  cuprof::profile prof(cpu_only());
  prof.start();
  for (std::int64_t m : {8192, 8192, 1024}) {
    const std::int64_t n = 3072, k = 768;
    CUPROF_SCOPE("gemm", {{"M", m}, {"N", n}, {"K", k}});
    CUPROF_SCOPE("inner");  // nests under the scope with arguments
  }
  {
    const std::string name = "dyn";
    cuprof::record_function r(name, {{"scale", 0.25}, {"neg", -3}, {"quote\"key", 1u}});
  }
  { CUPROF_SCOPE("six", {{"a", 1}, {"b", 2}, {"c", 3}, {"d", 4}, {"e", 5}, {"f", 6.5f}}); }
  prof.stop();
  const cuprof::trace& t = prof.last_trace();
  std::vector<std::string> gemm_args, others;
  for (const cuprof::cpu_span& s : t.spans) {
    const std::string& name = t.names.str(s.name);
    if (name == "gemm") gemm_args.push_back(cuprof::format_span_args(t, s));
    else others.push_back(name + ": " + cuprof::format_span_args(t, s));
    if (name == "inner") CHECK(t.names.str(t.spans[s.parent].name) == "gemm");
  }
  CHECK(gemm_args == std::vector<std::string>{"M=8192 N=3072 K=768", "M=8192 N=3072 K=768", "M=1024 N=3072 K=768"});
  CHECK(std::count(others.begin(), others.end(), "inner: ") == 3);
  CHECK(std::count(others.begin(), others.end(), "dyn: scale=0.25 neg=-3 quote\"key=1") == 1);
  CHECK(std::count(others.begin(), others.end(), "six: a=1 b=2 c=3 d=4 e=5 f=6.5") == 1);

  // The trace's args hold them, keys escaped; read back, they group the table.
  const std::string json = cuprof::chrome_trace_json(t, "args");
  CHECK(json.find("\"args\":{\"External id\":1,\"M\":8192,\"N\":3072,\"K\":768}") != std::string::npos);
  CHECK(json.find("\"scale\":0.25,\"neg\":-3,\"quote\\\"key\":1}") != std::string::npos);
  const cuprof::loaded_trace back = cuprof::parse_trace(json, "args");
  const cuprof::event_averages rows = cuprof::key_averages(back.t, cuprof::group_by::args);
  std::map<std::string, std::uint64_t> gemm;
  for (const auto& r : rows.rows())
    if (r.key == "gemm") gemm[r.args] = r.count;
  CHECK(gemm == std::map<std::string, std::uint64_t>{{"M=1024 N=3072 K=768", 1}, {"M=8192 N=3072 K=768", 2}});
  CHECK(cuprof::key_averages(back.t).table("", -1) == prof.key_averages().table("", -1));  // by name: as before
}

TEST_CASE("collection: thread metadata for the recording thread") {
  cuprof::profile prof(cpu_only());
  prof.start();
  { CUPROF_SCOPE("a"); }
  prof.stop();
  const cuprof::trace& t = prof.last_trace();
  REQUIRE(t.meta.threads.size() == 1);
  CHECK(t.meta.threads[0].tid == gettid_now());
  char name[64] = {0};
  pthread_getname_np(pthread_self(), name, sizeof name);
  CHECK(t.meta.threads[0].name == name);
  CHECK(t.meta.pid == std::uint32_t(::getpid()));
  CHECK(t.meta.dropped_cpu_events == 0);
  CHECK(t.meta.cuda_status == "not requested");
  CHECK(t.meta.window_start_ns > 1500000000ull * 1000000000ull);  // Unix-epoch ns (after 2017)
  CHECK(t.meta.window_end_ns >= t.meta.window_start_ns);
}

TEST_CASE("span_builder: unmatched exits are skipped, open scopes close at the window end") {
  cuprof::trace t;
  const cuprof::detail::tick_converter identity;
  using cuprof::detail::make_head;
  using cuprof::detail::slot_kind;
  static const char* a = "A";
  static const char* b = "B";
  const cuprof::detail::slot slots[] = {
      {make_head(slot_kind::exit, 5), 0},  // entered before the window
      {make_head(slot_kind::enter_static, 10), std::uint64_t(reinterpret_cast<std::uintptr_t>(a))},
      {make_head(slot_kind::enter_step, 12), 7},
      {make_head(slot_kind::enter_static, 20), std::uint64_t(reinterpret_cast<std::uintptr_t>(b))},
      {make_head(slot_kind::exit, 30), 0},
  };
  cuprof::detail::span_builder builder(t, identity, 42, /*window_start_ticks*/ 0, /*window_end_ticks*/ 100);
  CHECK(builder.consume(slots, 5) == 5);
  builder.finish();
  REQUIRE(t.spans.size() == 3);
  // Enter order, parents first.
  CHECK(t.names.str(t.spans[0].name) == "A");
  CHECK(t.spans[0].start_ns == 10);
  CHECK(t.spans[0].end_ns == 100);
  CHECK(t.spans[0].parent == no_index);
  CHECK(t.names.str(t.spans[1].name) == "ProfilerStep#7");
  CHECK(t.spans[1].is_step);
  CHECK(t.spans[1].end_ns == 100);
  CHECK(t.spans[1].parent == 0);
  CHECK(t.names.str(t.spans[2].name) == "B");
  CHECK(t.spans[2].start_ns == 20);
  CHECK(t.spans[2].end_ns == 30);
  CHECK(t.spans[2].parent == 1);
  for (const auto& s : t.spans) CHECK(s.tid == 42);
}

TEST_CASE("span_builder: an args record gives the scope it follows its arguments") {
  cuprof::trace t;
  const cuprof::detail::tick_converter identity;
  using cuprof::detail::make_head;
  using cuprof::detail::slot_kind;
  static const char* gemm = "gemm";
  static const char* m = "M";
  static const char* alpha = "alpha";
  double half = 0.5;
  std::uint64_t half_bits;
  std::memcpy(&half_bits, &half, sizeof half);
  const auto ptr = [](const char* p) { return std::uint64_t(reinterpret_cast<std::uintptr_t>(p)); };
  const cuprof::detail::slot slots[] = {
      {make_head(slot_kind::enter_static, 10), ptr(gemm)},
      {make_head(slot_kind::args, 10), cuprof::detail::args_payload(2, 0b10)},  // M an int64, alpha a double
      {ptr(m), std::uint64_t(std::int64_t(-4096))},
      {ptr(alpha), half_bits},
      {make_head(slot_kind::enter_static, 20), ptr(gemm)},  // no arguments
      {make_head(slot_kind::exit, 30), 0},
      {make_head(slot_kind::exit, 40), 0},
  };
  CHECK(cuprof::detail::record_slots(slots[1]) == 3);
  CHECK(cuprof::detail::records_until(slots, 7, 10) == 4);  // the enter and its arguments go together
  cuprof::detail::span_builder builder(t, identity, 1, 0, 100);
  CHECK(builder.consume(slots, 7) == 7);
  builder.finish();
  REQUIRE(t.spans.size() == 2);
  REQUIRE(t.spans[0].arg_count == 2);
  CHECK(t.spans[1].arg_count == 0);
  const cuprof::span_arg& a = t.span_args[t.spans[0].first_arg];
  const cuprof::span_arg& b = t.span_args[t.spans[0].first_arg + 1];
  CHECK(t.names.str(a.key) == "M");
  CHECK(a.kind == cuprof::span_arg::type::integer);
  CHECK(a.integer == -4096);
  CHECK(t.names.str(b.key) == "alpha");
  CHECK(b.kind == cuprof::span_arg::type::real);
  CHECK(b.real == 0.5);
}

TEST_CASE("tick_converter: the default converter is the identity; fitted converters are monotonic") {
  const cuprof::detail::tick_converter identity;
  CHECK(identity.ns_per_tick() == 1.0);
  CHECK(identity.to_epoch_ns(0) == 0);
  CHECK(identity.to_epoch_ns(12345) == 12345);
  // Identity-ish: exact while a double holds the tick count to half a tick (< 2^52); only
  // discard_before() uses it, on records it throws away.
  CHECK(identity.to_epoch_ns(123456789012345ull) == 123456789012345ull);
  CHECK(identity.to_epoch_ns((1ull << 52) - 1) == (1ull << 52) - 1);
  CHECK(identity.to_epoch_ns(1700000000123456789ull) / 1000 == 1700000000123456789ull / 1000);

  cuprof::detail::choose_clock();
  const cuprof::detail::clock_sample a = cuprof::detail::sample_clocks();
  busy_wait_us(2000);
  const cuprof::detail::clock_sample b = cuprof::detail::sample_clocks();
  CHECK(b.ticks > a.ticks);
  CHECK(b.mono_ns > a.mono_ns);
  const cuprof::detail::tick_converter c(a, b);
  CHECK(c.ns_per_tick() > 0.0);
  CHECK(c.to_epoch_ns(a.ticks) == a.real_ns);
  std::uint64_t previous = 0;
  for (std::uint64_t k = 0; k <= 10; ++k) {
    const std::uint64_t ns = c.to_epoch_ns(a.ticks + (b.ticks - a.ticks) * k / 10);
    CHECK(ns >= previous);
    previous = ns;
  }
  // The fitted map spans as many ns as the monotonic clock did (a loose bound:
  // only each sample's read-out jitter separates them).
  const std::int64_t spanned = std::int64_t(c.to_epoch_ns(b.ticks) - c.to_epoch_ns(a.ticks));
  const std::int64_t expected = std::int64_t(b.mono_ns - a.mono_ns);
  CHECK(std::llabs(spanned - expected) <= 50000);
}

TEST_CASE(
    "many short-lived threads in one window: chunks stay within CUPROF_MAX_CPU_EVENTS, drops are counted, stop() gives the "
    "chunks back") {
  const int rc = in_child(
      [] {
        cuprof::detail::chunk_pool& pool = cuprof::detail::global_chunk_pool();
        {  // one empty window first: what this process holds without the threads below
          cuprof::profile warm(cpu_only());
          warm.start();
          warm.stop();
        }
        const std::size_t before = pool.allocated();
        ::setenv("CUPROF_MAX_CPU_EVENTS", "32768", 1);  // 4 full chunks
        cuprof::profile prof(cpu_only());
        prof.start();
        const std::size_t cap = pool.max_chunks();
        constexpr int threads = 20000;
        constexpr int batch = 8;
        std::size_t most = 0;
        for (int i = 0; i < threads; i += batch) {
          std::thread running[batch];
          for (std::thread& t : running) t = std::thread([] { CUPROF_SCOPE("short_lived"); });
          for (std::thread& t : running) t.join();
          most = std::max(most, pool.allocated());
        }
        prof.stop();
        const std::size_t after = pool.allocated();
        const cuprof::trace& t = prof.last_trace();
        std::printf("before %zu, cap %zu, most %zu, after %zu; %zu spans, %llu dropped\n", before, cap, most, after,
                    count_spans(t, "short_lived"), static_cast<unsigned long long>(t.meta.dropped_cpu_events));
        std::fflush(stdout);
        int failed = 0;
        if (most > std::max(before, cap) + 1) failed |= 1;  // within the cap, whatever the number of threads
        if (after > before + 1) failed |= 2;                // given back at stop()
        if (t.meta.dropped_cpu_events == 0) failed |= 4;    // the threads past the cap count what they lost
        if (count_spans(t, "short_lived") + t.meta.dropped_cpu_events < threads) failed |= 8;
        if (count_spans(t, "short_lived") == 0) failed |= 16;  // the threads within the cap record
        if (malformed_spans(t) != 0) failed |= 32;
        return failed;
      },
      600);
  CHECK(rc == 0);
}

// --- Scopes that end on another thread, or in a later window ------------------------

TEST_CASE(
    "a scope entered on a thread that exited and ended in a later window is dropped and counted, never written to freed memory") {
  const int rc = in_child([] {
    int failed = 0;
    // All on a fresh thread: its first buffer is allocated after the exited
    // thread's was freed, so it may well get the same address.
    std::thread([&] {
      std::optional<cuprof::record_function> orphan;
      cuprof::profile prof(cpu_only());
      prof.start();
      std::thread([&] {
        orphan.emplace(cuprof::static_name{"orphan"});
        CUPROF_SCOPE("on_the_exited_thread");
      }).join();
      prof.stop();  // drains the exited thread's buffer and frees it
      prof.start();
      {
        CUPROF_SCOPE("later_window");
        orphan.reset();
      }
      prof.stop();
      const cuprof::trace& t = prof.last_trace();
      if (t.meta.dropped_cpu_events != 1) failed |= 1;
      if (count_spans(t, "later_window") != 1) failed |= 2;
      if (count_spans(t, "orphan") != 0) failed |= 4;
      if (malformed_spans(t) != 0) failed |= 8;
      // Entered and ended on one thread across a stop and a start: the exit is
      // this thread's own, and the window that ends has no enter for it.
      prof.start();
      {
        const cuprof::record_function spanning(cuprof::static_name{"spanning"});
        prof.stop();
        prof.start();
        CUPROF_SCOPE("after_restart");
      }
      prof.stop();
      const cuprof::trace& u = prof.last_trace();
      if (count_spans(u, "after_restart") != 1) failed |= 16;
      if (count_spans(u, "spanning") != 0) failed |= 32;
      if (malformed_spans(u) != 0) failed |= 64;
    }).join();
    return failed;
  });
  CHECK(rc == 0);
}

TEST_CASE(
    "a scope entered on one thread and ended on another while the first keeps recording: dropped and counted, the first thread's "
    "spans all kept") {
  const int rc = in_child([] {
    cuprof::profile prof(cpu_only());
    prof.start();
    std::optional<cuprof::record_function> hop;
    std::atomic<int> phase{0};
    std::atomic<std::uint32_t> first_tid{0};
    std::uint64_t loops = 0;
    std::thread first([&] {
      first_tid = cuprof::detail::current_tid();
      hop.emplace(cuprof::static_name{"hop"});
      phase.store(1, std::memory_order_release);
      // Recording before, while and after the other thread ends the scope.
      for (std::uint64_t after = 0; after < 100000; ++loops) {
        CUPROF_SCOPE("first_thread_work");
        if (phase.load(std::memory_order_acquire) == 2) ++after;
      }
    });
    std::thread second([&] {
      while (phase.load(std::memory_order_acquire) != 1) std::this_thread::yield();
      CUPROF_SCOPE("second_thread_work");
      hop.reset();
      phase.store(2, std::memory_order_release);
    });
    first.join();
    second.join();
    prof.stop();
    const cuprof::trace& t = prof.last_trace();
    std::printf("%llu loops, %zu spans of the first thread, %llu dropped\n", static_cast<unsigned long long>(loops),
                count_spans(t, "first_thread_work", first_tid.load()),
                static_cast<unsigned long long>(t.meta.dropped_cpu_events));
    std::fflush(stdout);
    int failed = 0;
    if (count_spans(t, "first_thread_work", first_tid.load()) != loops) failed |= 1;
    if (t.meta.dropped_cpu_events != 1) failed |= 2;
    if (count_spans(t, "second_thread_work") != 1) failed |= 4;
    if (malformed_spans(t) != 0) failed |= 8;
    return failed;
  });
  CHECK(rc == 0);
}

TEST_CASE("8 threads x 10,000 scopes: every span, each with its own thread's tid and name") {
  constexpr int threads = 8, pairs = 5000;  // 2 scopes per iteration
  cuprof::profile prof(cpu_only());
  prof.start();
  REQUIRE(prof.running());

  std::vector<std::uint32_t> tids(threads, 0);
  std::vector<std::thread> pool;
  gate stopped;
  std::mutex m;
  std::condition_variable cv;
  int done = 0;
  for (int i = 0; i < threads; ++i) {
    pool.emplace_back([&, i] {
      const std::string name = "cuprof-w" + std::to_string(i);
      pthread_setname_np(pthread_self(), name.c_str());
      tids[i] = gettid_now();
      for (int k = 0; k < pairs; ++k) {
        CUPROF_SCOPE("thread_outer");
        CUPROF_SCOPE("thread_inner");
      }
      {
        std::lock_guard<std::mutex> lock(m);
        ++done;
      }
      cv.notify_all();
      stopped.wait();  // alive (and named) until the profile stopped
    });
  }
  {
    std::unique_lock<std::mutex> lock(m);
    cv.wait(lock, [&] { return done == threads; });
  }
  prof.stop();
  stopped.open();
  for (auto& th : pool) th.join();

  const cuprof::trace& t = prof.last_trace();
  CHECK(t.spans.size() == std::size_t(threads) * pairs * 2);
  CHECK(t.meta.dropped_cpu_events == 0);
  const std::set<std::uint32_t> expected(tids.begin(), tids.end());
  REQUIRE(expected.size() == std::size_t(threads));
  std::map<std::uint32_t, std::size_t> outer, inner;
  std::size_t bad_parent = 0, foreign = 0;
  for (const auto& s : t.spans) {
    if (!expected.count(s.tid)) ++foreign;
    const std::string& n = t.names.str(s.name);
    if (n == "thread_outer") {
      ++outer[s.tid];
      if (s.parent != no_index) ++bad_parent;
    } else if (n == "thread_inner") {
      ++inner[s.tid];
      if (s.parent == no_index || t.spans[s.parent].tid != s.tid || t.names.str(t.spans[s.parent].name) != "thread_outer")
        ++bad_parent;
    }
  }
  CHECK(foreign == 0);
  CHECK(bad_parent == 0);
  for (std::uint32_t tid : expected) {
    CAPTURE(tid);
    CHECK(outer[tid] == std::size_t(pairs));
    CHECK(inner[tid] == std::size_t(pairs));
  }
  // ids unique across threads
  std::set<std::uint32_t> ids;
  for (const auto& s : t.spans) ids.insert(s.id);
  CHECK(ids.size() == t.spans.size());

  // Thread metadata, and thread_name events in the trace.
  std::map<std::uint32_t, std::string> names;
  for (const auto& th : t.meta.threads) names[th.tid] = th.name;
  for (int i = 0; i < threads; ++i) {
    CAPTURE(i);
    REQUIRE(names.count(tids[i]));
    CHECK(names[tids[i]] == "cuprof-w" + std::to_string(i));
  }
  const json doc = json::parse(cuprof::chrome_trace_json(t));
  std::map<std::uint64_t, std::string> thread_names;
  for (const json& e : doc["traceEvents"])
    if (e["ph"] == "M" && e["name"] == "thread_name" && e["pid"] == t.meta.pid)
      thread_names[e["tid"].get<std::uint64_t>()] = e["args"]["name"];
  for (int i = 0; i < threads; ++i)
    CHECK(thread_names[tids[i]] == "thread " + std::to_string(tids[i]) + " (cuprof-w" + std::to_string(i) + ")");
}

TEST_CASE("threads that exited before stop() keep their spans") {
  cuprof::profile prof(cpu_only());
  prof.start();
  std::vector<std::uint32_t> tids(2, 0);
  std::vector<std::thread> pool;
  for (int i = 0; i < 2; ++i)
    pool.emplace_back([&, i] {
      tids[i] = gettid_now();
      for (int k = 0; k < 1000; ++k) {
        CUPROF_SCOPE("short_lived");
      }
    });
  for (auto& th : pool) th.join();
  prof.stop();
  const cuprof::trace& t = prof.last_trace();
  CHECK(count_spans(t, "short_lived") == 2000);
  std::set<std::uint32_t> meta_tids;
  for (const auto& th : t.meta.threads) meta_tids.insert(th.tid);
  CHECK(meta_tids.count(tids[0]));
  CHECK(meta_tids.count(tids[1]));
  // The next window is clean, and the exited threads' buffers are gone.
  prof.start();
  prof.stop();
  CHECK(prof.last_trace().spans.empty());
  CHECK(prof.last_trace().meta.threads.empty());
}

TEST_CASE("an exception unwinding through scopes closes them, nested correctly") {
  struct thrower {
    static void deepest() {
      CUPROF_FUNCTION();
      throw std::runtime_error("boom");
    }
  };
  cuprof::profile prof(cpu_only());
  prof.start();
  bool caught = false;
  try {
    CUPROF_SCOPE("try_outer");
    busy_wait_us(20);
    {
      cuprof::record_function mid(std::string("try_mid"));
      busy_wait_us(20);
      {
        CUPROF_SCOPE("try_inner");
        thrower::deepest();
      }
    }
  } catch (const std::runtime_error&) {
    caught = true;
  }
  CHECK(caught);
  {
    CUPROF_SCOPE("after");
    busy_wait_us(20);
  }
  prof.stop();
  const cuprof::trace& t = prof.last_trace();
  REQUIRE(t.spans.size() == 5);
  const auto* outer = find_span(t, "try_outer");
  const auto* mid = find_span(t, "try_mid");
  const auto* inner = find_span(t, "try_inner");
  const auto* fn = find_span(t, "deepest");
  const auto* after = find_span(t, "after");
  REQUIRE(outer);
  REQUIRE(mid);
  REQUIRE(inner);
  REQUIRE(fn);
  REQUIRE(after);
  CHECK(outer->parent == no_index);
  CHECK(mid->parent == index_of(t, outer));
  CHECK(inner->parent == index_of(t, mid));
  CHECK(fn->parent == index_of(t, inner));
  CHECK(after->parent == no_index);  // not left inside the unwound scopes
  CHECK(fn->end_ns <= inner->end_ns);
  CHECK(inner->end_ns <= mid->end_ns);
  CHECK(mid->end_ns <= outer->end_ns);
  CHECK(outer->end_ns <= after->start_ns);
  CHECK(after->end_ns <= t.meta.window_end_ns);  // closed by its own exit, not by the window
}

TEST_CASE("a scope open across stop() ends at the window end") {
  cuprof::profile prof(cpu_only());
  SUBCASE("one scope") {
    prof.start();
    {
      CUPROF_SCOPE("open_across");
      busy_wait_us(50);
      prof.stop();
      busy_wait_us(50);
    }
    const cuprof::trace& t = prof.last_trace();
    REQUIRE(t.spans.size() == 1);
    CHECK(t.spans[0].end_ns == t.meta.window_end_ns);
    CHECK(t.spans[0].start_ns >= t.meta.window_start_ns);
    CHECK(t.spans[0].start_ns < t.spans[0].end_ns);
  }
  SUBCASE("nested scopes, then a new window while they are still open") {
    prof.start();
    {
      CUPROF_SCOPE("outer_open");
      {
        CUPROF_SCOPE("inner_open");
        busy_wait_us(20);
        prof.stop();
        const cuprof::trace& t = prof.last_trace();
        REQUIRE(t.spans.size() == 2);
        const auto* outer = find_span(t, "outer_open");
        const auto* inner = find_span(t, "inner_open");
        REQUIRE(outer);
        REQUIRE(inner);
        CHECK(outer->end_ns == t.meta.window_end_ns);
        CHECK(inner->end_ns == t.meta.window_end_ns);
        CHECK(inner->parent == index_of(t, outer));
        prof.start();  // both scopes still open: their exits land in this window
        { CUPROF_SCOPE("second_window"); }
      }
      { CUPROF_SCOPE("sibling_after_stale_exit"); }
    }
    { CUPROF_SCOPE("last"); }
    prof.stop();
    const cuprof::trace& t = prof.last_trace();
    CHECK(t.spans.size() == 3);
    CHECK(count_spans(t, "second_window") == 1);
    CHECK(count_spans(t, "sibling_after_stale_exit") == 1);
    CHECK(count_spans(t, "last") == 1);
    for (const auto& s : t.spans) CHECK(s.parent == no_index);
  }
  SUBCASE("a scope entered before start() does not close a recorded one") {
    {
      CUPROF_SCOPE("entered_before");
      prof.start();
      CUPROF_SCOPE("entered_during");
      busy_wait_us(20);
    }  // entered_during exits, then entered_before (which recorded nothing)
    { CUPROF_SCOPE("next"); }
    prof.stop();
    const cuprof::trace& t = prof.last_trace();
    REQUIRE(t.spans.size() == 2);
    CHECK(count_spans(t, "entered_before") == 0);
    const auto* during = find_span(t, "entered_during");
    const auto* next = find_span(t, "next");
    REQUIRE(during);
    REQUIRE(next);
    CHECK(during->end_ns < t.meta.window_end_ns);
    CHECK(next->parent == no_index);
  }
}

TEST_CASE("names needing escapes, invalid UTF-8 and 64 KiB, recorded by real scopes") {
  cuprof::profile prof(cpu_only());
  prof.start();
  const std::string big = std::string(64 * 1024, 'x') + "\xF0\x9F\x98\x80";
  const std::string huge(300 * 1024, 'h');
  { cuprof::record_function r(std::string("q\"b\\c\x01\n\t")); }
  { cuprof::record_function r(std::string("bad \xFF \xC0\x80 \xED\xA0\x80 \xE2\x82")); }
  { cuprof::record_function r(big); }
  { cuprof::record_function r(huge); }  // longer than a chunk holds: cut
  prof.stop();
  const cuprof::trace& t = prof.last_trace();
  REQUIRE(t.spans.size() == 4);
  CHECK(t.names.str(t.spans[2].name) == big);
  const std::string& cut = t.names.str(t.spans[3].name);
  CHECK(cut.size() == cuprof::detail::max_dynamic_name);
  CHECK(cut == huge.substr(0, cuprof::detail::max_dynamic_name));

  temp_dir dir;
  const std::string path = (dir.path / "names.json").string();
  prof.export_chrome_trace(path);
  json doc;
  REQUIRE_NOTHROW(doc = json::parse(slurp(path)));
  std::vector<std::string> names;
  for (const json& e : doc["traceEvents"])
    if (e["ph"] == "X") names.push_back(e["name"]);
  const std::string r = "\xEF\xBF\xBD";
  REQUIRE(names.size() == 4);
  CHECK(names[0] == "q\"b\\c\x01\n\t");
  CHECK(names[1] == "bad " + r + " " + r + r + " " + r + r + r + " " + r + r);
  CHECK(names[2] == big);
  CHECK(names[3].size() == cuprof::detail::max_dynamic_name);
}

// --- API misuse with threads (runtime_profile.cpp "misuse: ..." covers start
// twice, stop without start, step without a schedule) --------------------------

TEST_CASE("misuse: the profile destroyed while other threads are inside scopes") {
  constexpr int threads = 4;
  std::atomic<int> inside{0};
  std::atomic<bool> destroyed{false};
  std::atomic<std::uint64_t> after{0};
  cuprof::trace window;  // a copy of the destroyed profile's window
  {
    cuprof::profile_options o = cpu_only();
    o.on_trace_ready = [&](cuprof::profile& p) { window = p.last_trace(); };
    auto prof = std::make_unique<cuprof::profile>(o);
    prof->start();
    std::vector<std::thread> pool;
    for (int i = 0; i < threads; ++i)
      pool.emplace_back([&, i] {
        {
          CUPROF_SCOPE("held_open");
          cuprof::record_function dyn("held_open_dynamic " + std::to_string(i));
          inside.fetch_add(1);
          while (!destroyed.load()) std::this_thread::yield();
        }  // exits after the profile is gone
        for (int k = 0; k < 1000; ++k) {
          CUPROF_SCOPE("after_destroy");
          cuprof::record_function r(std::string(100, 'a'));
          after.fetch_add(1, std::memory_order_relaxed);
        }
      });
    while (inside.load() < threads) std::this_thread::yield();
    prof.reset();  // stops (on_trace_ready runs) and frees the profile
    destroyed.store(true);
    for (auto& th : pool) th.join();
  }
  CHECK(after.load() == threads * 1000u);
  // The destroyed profile's window: each held scope closed at the window's end.
  CHECK(count_spans(window, "held_open") == std::size_t(threads));
  std::size_t at_end = 0;
  for (const cuprof::cpu_span& s : window.spans) at_end += s.end_ns == window.meta.window_end_ns;
  CHECK(at_end == std::size_t(threads) * 2);
  CHECK(count_spans(window, "after_destroy") == 0);
  CHECK(malformed_spans(window) == 0);
  CHECK_NOTHROW(json::parse(cuprof::chrome_trace_json(window)));
  // Nothing recorded after the profile went away leaks into the next one.
  cuprof::profile next(cpu_only());
  next.start();
  { CUPROF_SCOPE("next_window"); }
  next.stop();
  CHECK(next.last_trace().spans.size() == 1);
  CHECK(count_spans(next.last_trace(), "next_window") == 1);
}

TEST_CASE("misuse: threads that outlive the profiles keep using scopes; each later window is well-formed") {
  std::vector<std::unique_ptr<scope_worker>> workers;
  for (int i = 0; i < 3; ++i) workers.push_back(std::make_unique<scope_worker>(i == 0 ? 3000 : 24));
  for (auto& w : workers) w->wait_loops(100);
  std::size_t windows = 0, bad = 0, worker_spans = 0;
  for (int round = 0; round < 20; ++round) {
    {
      cuprof::profile p(cpu_only());
      p.start();
      for (auto& w : workers) w->wait_loops(50);
      if (round % 2) p.stop();  // else the destructor stops it
      if (round % 2) {
        bad += malformed_spans(p.last_trace());
        worker_spans += count_spans(p.last_trace(), "worker_outer");
        ++windows;
      }
    }
    for (auto& w : workers) w->wait_loops(20);  // nothing records here
  }
  for (auto& w : workers) w->finish();
  CHECK(windows == 10);
  CHECK(bad == 0);
  CHECK(worker_spans >= 10u * 3 * 49);
  // After the threads are gone, a window is empty.
  cuprof::profile p(cpu_only());
  p.start();
  p.stop();
  CHECK(p.last_trace().spans.empty());
}

// --- No slowdown after profiling --------------------------------------------------

TEST_CASE("after stop(): scopes are not recorded and take the idle path (no buffer, no chunk)") {
  {
    cuprof::profile p(cpu_only());
    p.start();
    for (int i = 0; i < 1000; ++i) cuprof::record_function r(std::string(500, 'x'));
    p.stop();
  }
  CHECK_FALSE(cuprof::detail::cpu_recording());
  const std::size_t chunks = cuprof::detail::global_chunk_pool().allocated();
  // 1,000,000 scopes of 1 KiB names would need about 8,000 chunks if recorded.
  const std::string name(1024, 'y');
  for (int i = 0; i < 1000000; ++i) {
    CUPROF_SCOPE("idle_static");
    cuprof::record_function r(name);
  }
  CHECK(cuprof::detail::global_chunk_pool().allocated() == chunks);
  // A thread that only ever runs scopes while nothing records never registers a buffer.
  bool registered = true;
  std::thread([&] {
    for (int i = 0; i < 100000; ++i) {
      CUPROF_SCOPE("idle_thread");
      cuprof::record_function r(std::string_view("idle dynamic"));
    }
    registered = cuprof::detail::t_buffer != nullptr;
  }).join();
  CHECK_FALSE(registered);
  // And none of it shows up in the next window.
  cuprof::profile p(cpu_only());
  p.start();
  p.stop();
  CHECK(p.last_trace().spans.empty());
}

// --- Busy writers, the CPU event cap and misuse guards ------------------------

TEST_CASE("busy writer: stop() returns, the chunk pool stays within the cap, no span starts after the window's end") {
  const std::size_t before = cuprof::detail::global_chunk_pool().allocated();
  cuprof::trace window;
  {
    busy_writer writer;
    cuprof::profile prof(cpu_only());
    prof.start();
    writer.wait_loops(100000);
    prof.stop();  // a hang here is caught by ctest's timeout
    window = prof.last_trace();
  }
  CHECK(cuprof::detail::global_chunk_pool().allocated() <= std::max(before, chunk_bound(2)));
  CHECK(count_spans(window, "busy") > 0);
  CHECK(window.spans.size() <= chunk_bound(2) * cuprof::detail::chunk_slots);
  CHECK(spans_outside_window(window) == 0);
  CHECK(malformed_spans(window) == 0);
}

TEST_CASE("busy writer across two back-to-back active windows: each ends at its step, the next one keeps what came after") {
  const std::size_t before = cuprof::detail::global_chunk_pool().allocated();
  std::vector<cuprof::trace> windows;
  {
    busy_writer writer;
    cuprof::profile_options o = cpu_only();
    o.schedule = cuprof::schedule(/*wait*/ 0, /*warmup*/ 0, /*active*/ 1, /*repeat*/ 2);  // record_and_save twice
    o.on_trace_ready = [&](cuprof::profile& p) { windows.push_back(p.last_trace()); };
    cuprof::profile prof(o);
    prof.start();
    for (int step = 0; step < 2; ++step) {
      writer.wait_loops(100000);
      prof.step();
    }
    prof.stop();
  }
  CHECK(cuprof::detail::global_chunk_pool().allocated() <= std::max(before, chunk_bound(2)));
  REQUIRE(windows.size() == 2);
  for (const cuprof::trace& t : windows) {
    CHECK(count_spans(t, "busy") > 0);
    CHECK(spans_outside_window(t) == 0);
    CHECK(malformed_spans(t) == 0);
  }
  // ProfilerStep#1 is entered just after the first window's end: it belongs to the second.
  CHECK(count_spans(windows[0], "ProfilerStep#0") == 1);
  CHECK(count_spans(windows[0], "ProfilerStep#1") == 0);
  CHECK(count_spans(windows[1], "ProfilerStep#1") == 1);
}

TEST_CASE("CPU event cap: scopes past CUPROF_MAX_CPU_EVENTS are dropped, counted in the metadata and said in one line") {
  const scoped_env saved("CUPROF_MAX_CPU_EVENTS");
  ::setenv("CUPROF_MAX_CPU_EVENTS", "32768", 1);  // 4 chunks, read at start()
  constexpr std::size_t scopes = 100000;          // 200,000 slots
  cuprof::profile prof(cpu_only());
  stderr_capture err;
  prof.start();
  CHECK(cuprof::detail::global_chunk_pool().max_chunks() == 4);
  for (std::size_t i = 0; i < scopes; ++i) {
    CUPROF_SCOPE("capped");
  }
  prof.stop();
  const std::string said = err.finish();
  CAPTURE(said);
  const cuprof::trace& t = prof.last_trace();
  CHECK(t.meta.dropped_cpu_events > 0);
  CHECK(t.spans.size() <= chunk_bound(1) * cuprof::detail::chunk_slots / 2);
  // A scope is either a span or had its enter or exit dropped.
  CHECK(t.spans.size() + t.meta.dropped_cpu_events >= scopes);
  CHECK(malformed_spans(t) == 0);
  CHECK(lines_containing(said, std::to_string(t.meta.dropped_cpu_events) + " CPU events") == 1);
}

TEST_CASE("names longer than a chunk holds are cut, and that is said once per process") {
  cuprof::detail::g_said_name_cut.store(false);  // an earlier test may have cut a name already
  const std::string long_name(cuprof::detail::max_dynamic_name + 1, 'n');
  const std::string longer_name(2 * cuprof::detail::max_dynamic_name, 'm');
  cuprof::profile prof(cpu_only());
  stderr_capture err;
  prof.start();
  for (int i = 0; i < 3; ++i) {
    cuprof::record_function a(long_name);
    cuprof::record_function b(longer_name);
    cuprof::record_function c(std::string_view("short"));
  }
  prof.stop();
  const std::string said = err.finish();
  CAPTURE(said);
  CHECK(lines_containing(said, "was cut") == 1);
  CHECK(prof.last_trace().spans.size() == 9);
}

static void two_scopes_on_one_line() {
  CUPROF_FUNCTION();
  CUPROF_SCOPE("same_line_inner");
}

TEST_CASE("two scopes on one source line compile and both record") {
  cuprof::profile prof(cpu_only());
  prof.start();
  {
    CUPROF_SCOPE("same_line_a");
    CUPROF_SCOPE("same_line_b");
  }
  two_scopes_on_one_line();
  prof.stop();
  const cuprof::trace& t = prof.last_trace();
  REQUIRE(t.spans.size() == 4);
  CHECK(count_spans(t, "same_line_a") == 1);
  CHECK(count_spans(t, "same_line_b") == 1);
  CHECK(count_spans(t, "two_scopes_on_one_line") == 1);
  CHECK(count_spans(t, "same_line_inner") == 1);
  for (const cuprof::cpu_span& s : t.spans) {
    const bool inner = t.names.str(s.name) == "same_line_b" || t.names.str(s.name) == "same_line_inner";
    CHECK((s.parent != cuprof::no_index) == inner);
  }
}

}  // TEST_SUITE("collect")
