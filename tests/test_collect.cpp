// Scope collection under misuse and load: many short-lived threads against
// the CPU event cap, scopes that end on another thread or in a later window,
// and the process state's variable cleared or given hostile values. Every case
// runs in a forked child: each changes process-wide state (the cap, the
// environment), and on a broken collector each would write to freed memory.
#include <cuprof/cuprof.hpp>
#include <cuprof/collect/cpu_collect.hpp>

#include "child_process.hpp"

#include <doctest/doctest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

using cuprof_test::in_child;

namespace {

cuprof::profile_options cpu_only() {
  cuprof::profile_options o;
  o.activities = cuprof::activity::cpu;
  return o;
}

std::size_t spans_named(const cuprof::trace& t, const std::string& name, std::uint32_t tid = 0) {
  std::size_t n = 0;
  for (const cuprof::cpu_span& s : t.spans) n += t.names.str(s.name) == name && (tid == 0 || s.tid == tid);
  return n;
}

// Spans whose end precedes their start, or whose parent is on another thread or not around them.
std::size_t malformed_spans(const cuprof::trace& t) {
  std::size_t bad = 0;
  for (const cuprof::cpu_span& s : t.spans) {
    if (s.end_ns < s.start_ns) ++bad;
    if (s.parent == cuprof::no_index) continue;
    if (s.parent >= t.spans.size()) {
      ++bad;
      continue;
    }
    const cuprof::cpu_span& p = t.spans[s.parent];
    if (p.tid != s.tid || p.start_ns > s.start_ns || p.end_ns < s.end_ns) ++bad;
  }
  return bad;
}

std::string hex16(std::uintptr_t v) {
  static const char digits[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) out[std::size_t(i)] = digits[v & 15];
  return out;
}

}  // namespace

TEST_SUITE("collect") {

// --- Memory: many short-lived threads ---------------------------------------------

TEST_CASE("many short-lived threads in one window: chunks stay within CUPROF_MAX_CPU_EVENTS, drops are counted, stop() gives the chunks back") {
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
                    spans_named(t, "short_lived"), static_cast<unsigned long long>(t.meta.dropped_cpu_events));
        std::fflush(stdout);
        int failed = 0;
        if (most > std::max(before, cap) + 1) failed |= 1;  // within the cap, whatever the number of threads
        if (after > before + 1) failed |= 2;                 // given back at stop()
        if (t.meta.dropped_cpu_events == 0) failed |= 4;     // the threads past the cap count what they lost
        if (spans_named(t, "short_lived") + t.meta.dropped_cpu_events < threads) failed |= 8;
        if (spans_named(t, "short_lived") == 0) failed |= 16;  // the threads within the cap record
        if (malformed_spans(t) != 0) failed |= 32;
        return failed;
      },
      600);
  CHECK(rc == 0);
}

// --- Scopes that end on another thread, or in a later window ------------------------

TEST_CASE("a scope entered on a thread that exited and ended in a later window is dropped and counted, never written to freed memory") {
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
      if (spans_named(t, "later_window") != 1) failed |= 2;
      if (spans_named(t, "orphan") != 0) failed |= 4;
      if (malformed_spans(t) != 0) failed |= 8;
      // Entered and ended on one thread across a stop and a start: the exit is
      // this thread's own, and the window that ends has no enter for it.
      std::optional<cuprof::record_function> spanning;
      prof.start();
      spanning.emplace(cuprof::static_name{"spanning"});
      prof.stop();
      prof.start();
      { CUPROF_SCOPE("after_restart"); }
      spanning.reset();
      prof.stop();
      const cuprof::trace& u = prof.last_trace();
      if (spans_named(u, "after_restart") != 1) failed |= 16;
      if (spans_named(u, "spanning") != 0) failed |= 32;
      if (malformed_spans(u) != 0) failed |= 64;
    }).join();
    return failed;
  });
  CHECK(rc == 0);
}

TEST_CASE("a scope entered on one thread and ended on another while the first keeps recording: dropped and counted, the first thread's spans all kept") {
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
                spans_named(t, "first_thread_work", first_tid.load()),
                static_cast<unsigned long long>(t.meta.dropped_cpu_events));
    std::fflush(stdout);
    int failed = 0;
    if (spans_named(t, "first_thread_work", first_tid.load()) != loops) failed |= 1;
    if (t.meta.dropped_cpu_events != 1) failed |= 2;
    if (spans_named(t, "second_thread_work") != 1) failed |= 4;
    if (malformed_spans(t) != 0) failed |= 8;
    return failed;
  });
  CHECK(rc == 0);
}

// --- The process state's variable ---------------------------------------------------

TEST_CASE("process state: a copy that joins after clearenv() or unsetenv() finds the process's state and publishes it again") {
  const int rc = in_child([] {
    cuprof::detail::process_state* const mine = &cuprof::detail::process();
    const char* value = std::getenv(CUPROF_PROCESS_STATE_VARIABLE);
    if (!value) return 1;
    const std::string published = value;
    ::clearenv();
    // What a plugin opened now does while its static initialisers run.
    if (cuprof::detail::find_or_create_process_state() != mine) return 2;
    value = std::getenv(CUPROF_PROCESS_STATE_VARIABLE);
    if (!value || published != value) return 3;
    ::unsetenv(CUPROF_PROCESS_STATE_VARIABLE);
    if (cuprof::detail::find_or_create_process_state() != mine) return 4;
    cuprof::profile prof(cpu_only());
    prof.start();
    { CUPROF_SCOPE("after_clearenv"); }
    prof.stop();
    if (spans_named(prof.last_trace(), "after_clearenv") != 1) return 5;
    return 0;
  });
  CHECK(rc == 0);
}

TEST_CASE("process state: a variable with this image's prefix and a bad address is refused, never dereferenced") {
  const int rc = in_child([] {
    cuprof::detail::process_state* const mine = &cuprof::detail::process();
    const char* value = std::getenv(CUPROF_PROCESS_STATE_VARIABLE);
    if (!value) return 1;
    const std::string published = value;
    const std::string prefix = published.substr(0, published.find(':') + 1);
    if (prefix.size() != 33) return 2;
    const long page = ::sysconf(_SC_PAGESIZE);
    // A heap object without the state's mark, an unmapped page, a page that cannot be read.
    auto* heap = new std::uint64_t[512]();
    void* gone = ::mmap(nullptr, std::size_t(page), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    void* sealed = ::mmap(nullptr, std::size_t(page), PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (gone == MAP_FAILED || sealed == MAP_FAILED) return 3;
    ::munmap(gone, std::size_t(page));
    const auto at = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p); };
    const std::string own = published.substr(prefix.size());
    const std::vector<std::string> hostile = {
        prefix + "zzzzzzzzzzzzzzzz",               // not hex
        prefix + "00007f00000000g0",               // one character not hex
        prefix,                                     // no address
        prefix + "0000000000000000",               // null
        prefix + "12ab",                            // short
        prefix + own + "0",                         // one digit too many
        prefix + "0x" + own.substr(2),              // a C prefix
        prefix + hex16(at(heap)),                   // not a process state
        prefix + hex16(at(heap) + 4),               // misaligned
        prefix + hex16(at(gone)),                   // unmapped
        prefix + hex16(at(sealed)),                 // mapped, not readable
        prefix + hex16(at(mine) - 8),               // next to the state, not at it
        prefix + hex16(~std::uintptr_t(0) & ~std::uintptr_t(0xfff)),  // kernel space
    };
    for (std::size_t i = 0; i < hostile.size(); ++i) {
      ::setenv(CUPROF_PROCESS_STATE_VARIABLE, hostile[i].c_str(), 1);
      if (cuprof::detail::find_or_create_process_state() != mine) return int(10 + i);
    }
    // After all that, scopes and a profile work as before.
    cuprof::profile prof(cpu_only());
    prof.start();
    { CUPROF_SCOPE("after_hostile_values"); }
    prof.stop();
    if (spans_named(prof.last_trace(), "after_hostile_values") != 1) return 4;
    delete[] heap;
    return 0;
  });
  CHECK(rc == 0);
}

}  // TEST_SUITE("collect")
