// Reliability scenarios of docs/reliability.md that run on the CPU machine and
// are not covered elsewhere: output faults (a device, a full disk), API misuse
// with threads (the profile destroyed while threads are inside scopes, threads
// that outlive it, the process exiting while they record), fork, the idle path
// after stop(), busy writers, the CPU event cap and misuse guards, copied
// traces, libcupti not loadable, the environment parsers, and the fuzzing
// corpus and regression inputs replayed through the parsers.
// This binary's CUPROF_TRACE autostart (the exit tests run it as a child with CUPROF_TRACE set).
#define CUPROF_IMPLEMENTATION
#include <cuprof/cuprof.hpp>
#include <cuprof/analysis.hpp>

#include "fuzz/targets.hpp"
#include "child_process.hpp"
#include "stderr_capture.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <ctime>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace fs = std::filesystem;
using json = nlohmann::json;
using cuprof_test::in_child;
using cuprof_test::is_child_run;
using cuprof_test::run_child_case;
using cuprof_test::stderr_capture;
using cuprof_test::wait_or_kill;

namespace {

cuprof::profile_options cpu_only() {
  cuprof::profile_options o;
  o.activities = cuprof::activity::cpu;
  return o;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

struct scratch_dir {
  fs::path path;
  scratch_dir() {
    std::string tmpl = (fs::temp_directory_path() / "cuprof-rel-XXXXXX").string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~scratch_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

bool has_temp_file(const fs::path& dir, const std::string& stem) {
  std::error_code ec;
  for (auto& e : fs::directory_iterator(dir, ec))
    if (e.path().filename().string().rfind(stem + ".tmp", 0) == 0) return true;
  return false;
}

cuprof::trace many_spans(std::size_t n) {
  cuprof::trace t;
  t.meta.pid = 1;
  t.meta.window_start_ns = 1700000000000000000ull;
  t.meta.window_end_ns = t.meta.window_start_ns + n * 1000;
  t.meta.threads = {{1, "main"}};
  for (std::size_t i = 0; i < n; ++i) {
    cuprof::cpu_span s;
    s.start_ns = t.meta.window_start_ns + i * 1000;
    s.end_ns = s.start_ns + 500;
    s.name = t.names.intern("span " + std::to_string(i % 1000));
    s.tid = 1;
    s.id = std::uint32_t(i + 1);
    t.spans.push_back(s);
  }
  return t;
}

// Every span well-formed: end >= start, its parent on the same thread and
// around it. Returns the number of problems.
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

std::size_t spans_named(const cuprof::trace& t, const std::string& name) {
  std::size_t n = 0;
  for (const cuprof::cpu_span& s : t.spans) n += t.names.str(s.name) == name;
  return n;
}

// Recording threads must not outrun memory: a thread recording as fast as it
// can writes GB/s. A pause every `burst` loops keeps each worker to some
// 10-100 MB/s.
inline void pace(std::uint64_t loop, std::uint64_t burst) {
  if (loop % burst == 0) std::this_thread::sleep_for(std::chrono::microseconds(100));
}

// A thread that enters and leaves nested scopes (static and dynamic names)
// until told to stop, free-running unless given a budget of loops.
class scope_worker {
 public:
  explicit scope_worker(std::size_t dynamic_name_bytes = 24)
      : name_(dynamic_name_bytes, 'd'), burst_(dynamic_name_bytes > 256 ? 2 : 16) {
    thread_ = std::thread([this] {
      while (!stop_.load(std::memory_order_relaxed)) {
        if (loops_.load(std::memory_order_relaxed) >= budget_end_.load(std::memory_order_relaxed)) {
          std::this_thread::sleep_for(std::chrono::microseconds(100));
          continue;
        }
        {
          CUPROF_SCOPE("worker_outer");
          cuprof::record_function mid(name_);
          CUPROF_SCOPE("worker_inner");
        }
        pace(loops_.fetch_add(1, std::memory_order_relaxed) + 1, burst_);
      }
    });
  }
  ~scope_worker() { finish(); }
  void finish() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }
  std::uint64_t loops() const { return loops_.load(); }
  void wait_loops(std::uint64_t n) const {
    const std::uint64_t target = loops() + n;
    while (loops() < target) std::this_thread::yield();
  }
  // From now on the worker runs n more loops at most, then idles until given more:
  // what a window holds then depends on the test's steps, not on how fast the
  // machine is (a sanitizer's slowdown otherwise grows each window, as a window
  // also holds the processing of the one before it).
  void allow_loops(std::uint64_t n) { budget_end_.store(loops() + n); }
  void run_loops(std::uint64_t n) {
    const std::uint64_t target = loops() + n;
    budget_end_.store(target);
    while (loops() < target) std::this_thread::yield();
  }

 private:
  std::string name_;
  std::uint64_t burst_;
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> loops_{0};
  std::atomic<std::uint64_t> budget_end_{UINT64_MAX};
  std::thread thread_;
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
std::size_t chunk_bound(std::size_t threads) {
  return cuprof::detail::global_chunk_pool().max_chunks() + 2 * threads;
}

std::size_t lines_containing(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (std::size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + needle.size())) ++n;
  return n;
}

std::vector<fs::path> files_in(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  for (auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file()) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

const fs::path source_dir = CUPROF_TEST_SOURCE_DIR;

// Set in forked children of a multithreaded test that leave through exit():
// the threads that did not follow them into the child leave allocations (their
// thread_local destructor records, a std::thread being started) that
// LeakSanitizer cannot see as reachable; and a thread that was inside ASan's
// allocator at the fork (cuprof's CUPROF_TRACE signal watcher starting, say)
// leaves its lock held in the child, where the leak check at exit waits on it
// forever (GCC 12's ASan takes no allocator lock around fork). Only there is
// leak checking turned off.
std::atomic<bool> g_forked_child_no_leak_check{false};

// Restores an environment variable when it goes out of scope.
class saved_env {
 public:
  explicit saved_env(const char* name) : name_(name) {
    if (const char* v = std::getenv(name)) value_ = v, had_ = true;
  }
  ~saved_env() {
    if (had_) ::setenv(name_.c_str(), value_.c_str(), 1);
    else ::unsetenv(name_.c_str());
  }

 private:
  std::string name_, value_;
  bool had_ = false;
};

}  // namespace

// LeakSanitizer asks this at exit (a no-op without it).
extern "C" int __lsan_is_turned_off() { return g_forked_child_no_leak_check.load() ? 1 : 0; }

// =============================================================================
TEST_SUITE("reliability") {

// --- Output faults (test_trace.cpp "export failures ..." covers a directory,
// a missing parent, an empty path, an unwritable directory and a write failing
// midway under a file size limit) ---------------------------------------------

TEST_CASE("output: a device path (/dev/full, /dev/null, a link to one) is refused and left as it was") {
  const cuprof::trace t = many_spans(10);
  scratch_dir dir;
  const fs::path link = dir.path / "to_full.json";
  fs::create_symlink("/dev/full", link);
  for (const std::string& path : {std::string("/dev/full"), std::string("/dev/null"), link.string()}) {
    CAPTURE(path);
    try {
      cuprof::export_chrome_trace(t, path);
      FAIL("exporting onto a device did not throw");
    } catch (const cuprof::error& e) {
      const std::string m = e.what();
      CHECK(m.find(path) != std::string::npos);
      CHECK(m.find("not a regular file") != std::string::npos);
    }
  }
  // As root, a rename onto /dev/full would replace the device node: it must not happen.
  struct stat st;
  REQUIRE(::stat("/dev/full", &st) == 0);
  CHECK(S_ISCHR(st.st_mode));
  REQUIRE(::stat("/dev/null", &st) == 0);
  CHECK(S_ISCHR(st.st_mode));
  CHECK(fs::is_symlink(link));
  CHECK(fs::read_symlink(link) == "/dev/full");
  CHECK_FALSE(has_temp_file("/dev", "full"));
  CHECK_FALSE(has_temp_file("/dev", "null"));
  CHECK_FALSE(has_temp_file(dir.path, "to_full.json"));
}

TEST_CASE("output: symlinks and FIFOs planted at the temporary file's old predictable names are neither followed nor opened") {
  const cuprof::trace t = many_spans(10);
  scratch_dir dir;
  const fs::path victim = dir.path / "victim";
  { std::ofstream(victim) << "precious"; }
  // In a child, so that its pid is known before the export and a FIFO that
  // blocked it could not hang the suite. The old name was "<path>.tmp.<pid>.<n>",
  // n counting exports in the process: every n up to 2,048 is planted.
  const int rc = in_child([&] {
    int failures = 0;
    const std::string pid = std::to_string(::getpid());
    for (const char* name : {"linked.json", "linked.json.gz", "fifo.json", "fifo.json.gz"}) {
      const bool fifo = std::string(name).rfind("fifo", 0) == 0;
      const std::string target = (dir.path / name).string();
      for (int n = 0; n < 2048; ++n) {
        const std::string planted = target + ".tmp." + pid + "." + std::to_string(n);
        if ((fifo ? ::mkfifo(planted.c_str(), 0666) : ::symlink(victim.c_str(), planted.c_str())) != 0) return 10;
      }
      try {
        cuprof::export_chrome_trace(t, target);
        if (cuprof::read_trace_file(target).t.spans.size() != t.spans.size()) ++failures;
      } catch (const cuprof::error& e) {
        std::fprintf(stderr, "%s: %s\n", name, e.what());
        ++failures;
      }
    }
    return failures;
  }, 20);
  CHECK(rc == 0);  // -1: an export blocked on a FIFO
  CHECK(slurp(victim) == "precious");
  std::size_t symlinks = 0, fifos = 0;
  for (const auto& e : fs::directory_iterator(dir.path)) {
    symlinks += e.is_symlink();
    fifos += e.is_fifo();
  }
  CHECK(symlinks == 2 * 2048);
  CHECK(fifos == 2 * 2048);
}

TEST_CASE("output: a trace keeps the mode of the file it replaces; a new one gets 0666 less the umask") {
  const cuprof::trace t = many_spans(10);
  scratch_dir dir;
  const mode_t umask_now = ::umask(0);
  ::umask(umask_now);
  const auto mode_of = [](const fs::path& p) {
    struct stat st;
    REQUIRE(::stat(p.c_str(), &st) == 0);
    return st.st_mode & 0777;
  };
  for (const char* name : {"t.json", "t.json.gz"}) {
    CAPTURE(name);
    const fs::path target = dir.path / name;
    cuprof::export_chrome_trace(t, target.string());
    CHECK(mode_of(target) == (0666 & ~umask_now));
    for (mode_t kept : {mode_t(0600), mode_t(0640), mode_t(0664)}) {
      CAPTURE(kept);
      REQUIRE(::chmod(target.c_str(), kept) == 0);
      cuprof::export_chrome_trace(t, target.string());
      CHECK(mode_of(target) == kept);
    }
  }
}

TEST_CASE("output: temporary files left by killed writes are removed once their writer is dead, kept while it lives") {
  const cuprof::trace t = many_spans(10);
  scratch_dir dir;
  const pid_t dead = ::fork();
  REQUIRE(dead >= 0);
  if (dead == 0) ::_exit(0);
  REQUIRE(::waitpid(dead, nullptr, 0) == dead);
  const pid_t alive = ::fork();
  REQUIRE(alive >= 0);
  if (alive == 0) {
    ::pause();
    ::_exit(0);
  }
  const fs::path victim = dir.path / "victim";
  { std::ofstream(victim) << "precious"; }
  const std::string target = (dir.path / "t.json").string();
  const auto leftover = [&](pid_t writer, const std::string& tail) { return target + ".tmp." + std::to_string(writer) + "." + tail; };
  const timespec two_minutes_ago[2] = {{std::time(nullptr) - 120, 0}, {std::time(nullptr) - 120, 0}};
  const auto plant = [&](const std::string& path, bool old) {
    { std::ofstream(path) << "half a trace"; }
    if (old) REQUIRE(::utimensat(AT_FDCWD, path.c_str(), two_minutes_ago, 0) == 0);
  };
  plant(leftover(dead, "0"), true);                    // the old naming
  plant(leftover(dead, "5f3a9c01d2e4b786"), true);     // the current one
  plant(leftover(dead, "recent"), false);              // touched within the minute: maybe a writer elsewhere
  plant(leftover(alive, "1a2b3c4d5e6f7a8b"), true);
  plant((dir.path / "other.json").string() + ".tmp." + std::to_string(dead) + ".0", true);
  REQUIRE(::symlink(victim.c_str(), leftover(dead, "link").c_str()) == 0);
  REQUIRE(::utimensat(AT_FDCWD, leftover(dead, "link").c_str(), two_minutes_ago, AT_SYMLINK_NOFOLLOW) == 0);

  cuprof::export_chrome_trace(t, target);
  ::kill(alive, SIGKILL);
  ::waitpid(alive, nullptr, 0);

  CHECK_FALSE(fs::exists(leftover(dead, "0")));
  CHECK_FALSE(fs::exists(leftover(dead, "5f3a9c01d2e4b786")));
  CHECK(fs::exists(leftover(dead, "recent")));
  CHECK(fs::exists(leftover(alive, "1a2b3c4d5e6f7a8b")));
  CHECK(fs::exists((dir.path / "other.json").string() + ".tmp." + std::to_string(dead) + ".0"));
  CHECK(fs::is_symlink(leftover(dead, "link")));
  CHECK(slurp(victim) == "precious");
  CHECK(cuprof::read_trace_file(target).t.spans.size() == t.spans.size());
}

TEST_CASE("output: a full disk (a 64 KiB tmpfs) fails with ENOSPC, keeps the previous trace, leaves no temporary file") {
  scratch_dir dir;
  const fs::path mnt = dir.path / "small";
  fs::create_directory(mnt);
  const cuprof::trace small = many_spans(20);
  const cuprof::trace big = many_spans(20000);  // about 2 MB of JSON
  // In a child: a private mount namespace, so the tmpfs is gone with it.
  const int rc = in_child([&] {
    if (::unshare(CLONE_NEWNS) != 0) return 77;
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return 77;
    if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=64k") != 0) return 77;
    int failures = 0;
    for (const char* name : {"full.json", "full.json.gz"}) {
      const std::string target = (mnt / name).string();
      cuprof::export_chrome_trace(small, target);  // the previous trace
      const std::string before = slurp(target);
      if (before.empty()) return 10;
      try {
        cuprof::export_chrome_trace(big, target);
        std::fprintf(stderr, "no error writing %s to a full disk\n", name);
        ++failures;
      } catch (const cuprof::error& e) {
        const std::string m = e.what();
        const bool plain = std::string(name) == "full.json";
        if (m.find(target) == std::string::npos || m.find("cannot write") == std::string::npos ||
            (plain && m.find("No space left on device") == std::string::npos)) {
          std::fprintf(stderr, "unexpected message: %s\n", m.c_str());
          ++failures;
        }
      }
      if (slurp(target) != before) {
        std::fprintf(stderr, "the previous %s changed\n", name);
        ++failures;
      }
      if (has_temp_file(mnt, name)) {
        std::fprintf(stderr, "a temporary file of %s was left\n", name);
        ++failures;
      }
      // The previous trace still reads.
      try {
        if (cuprof::read_trace_file(target).t.spans.size() != small.spans.size()) ++failures;
      } catch (const cuprof::error& e) {
        std::fprintf(stderr, "%s\n", e.what());
        ++failures;
      }
      fs::remove(target);
    }
    return failures;
  });
  if (rc == 77) {
    MESSAGE("cannot mount a tmpfs here (needs CAP_SYS_ADMIN): skipped; the ulimit -f case covers a failing write");
    return;
  }
  CHECK(rc == 0);
}

TEST_CASE("output: a full disk during a profile's on_trace_ready: stop() reports it, the profile stops, the next window works") {
  scratch_dir dir;
  const fs::path mnt = dir.path / "small";
  fs::create_directory(mnt);
  const int rc = in_child([&] {
    if (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        ::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=16k") != 0)
      return 77;
    cuprof::profile_options o = cpu_only();
    o.on_trace_ready = cuprof::tensorboard_trace_handler(mnt.string(), "full");
    cuprof::profile p(o);
    p.start();
    for (int i = 0; i < 2000; ++i) cuprof::record_function r("scope " + std::to_string(i));
    bool threw = false;
    try {
      p.stop();
    } catch (const cuprof::error& e) {
      threw = std::string(e.what()).find("No space left on device") != std::string::npos;
    }
    if (!threw) return 20;
    if (p.running()) return 21;
    if (!files_in(mnt).empty()) return 22;  // neither a partial trace nor a temporary file
    // The process goes on: another profile records.
    cuprof::profile q(cpu_only());
    q.start();
    { CUPROF_SCOPE("after_full_disk"); }
    q.stop();
    return spans_named(q.last_trace(), "after_full_disk") == 1 ? 0 : 23;
  });
  if (rc == 77) {
    MESSAGE("cannot mount a tmpfs here: skipped");
    return;
  }
  CHECK(rc == 0);
}

TEST_CASE("output: a trace whose name is 250 to 255 characters is written; its temporary file's name fits too") {
  const cuprof::trace t = many_spans(10);
  scratch_dir dir;
  std::set<std::string> written;
  for (const std::string& name : {std::string(250, 'n'), std::string(252, 'g') + ".gz", std::string(255, 'x')}) {
    CAPTURE(name.size());
    const std::string target = (dir.path / name).string();
    try {
      cuprof::export_chrome_trace(t, target);
    } catch (const cuprof::error& e) {
      FAIL(std::string(e.what()));
    }
    written.insert(name);
    CHECK(cuprof::read_trace_file(target).t.spans.size() == t.spans.size());
  }
  std::set<std::string> present;
  for (const fs::path& p : files_in(dir.path)) present.insert(p.filename().string());
  CHECK(present == written);  // no temporary file left
}

// The child half of the next test: CUPROF_TRACE names <base>/d/out.json; while
// the program runs, d is renamed away and a symlink d -> <base>/other takes its place.
TEST_CASE("[child] the trace's directory is swapped for a symlink mid-run") {
  const char* base_dir = std::getenv("CUPROF_TEST_SWAP_BASE");
  if (!base_dir || !is_child_run()) return;
  const fs::path base = base_dir;
  { CUPROF_SCOPE("before_the_swap"); }
  fs::rename(base / "d", base / "d_moved");
  fs::create_directory_symlink(base / "other", base / "d");
  { CUPROF_SCOPE("after_the_swap"); }
}

TEST_CASE("output: CUPROF_TRACE writes into the directory its path named at start, not through a symlink put in its place since") {
  scratch_dir dir;
  fs::create_directory(dir.path / "d");
  fs::create_directory(dir.path / "other");
  { std::ofstream(dir.path / "other" / "out.json") << "precious"; }
  const std::string err = (dir.path / "stderr.txt").string();
  const int rc = run_child_case("[child] the trace's directory is swapped for a symlink mid-run",
                                {{"CUPROF_TEST_SWAP_BASE", dir.path.string()},
                                 {"CUPROF_TRACE", (dir.path / "d" / "out.json").string()},
                                 {"CUPROF_ACTIVITIES", "cpu"},
                                 {"CUPROF_TABLE", "0"}},
                                err);
  const std::string said = slurp(err);
  CAPTURE(said);
  CHECK(rc == 0);
  CHECK(slurp(dir.path / "other" / "out.json") == "precious");
  CHECK(files_in(dir.path / "other").size() == 1);  // nor a temporary file
  REQUIRE(fs::is_symlink(dir.path / "d"));
  const fs::path landed = dir.path / "d_moved" / "out.json";
  REQUIRE(fs::exists(landed));
  CHECK(spans_named(cuprof::read_trace_file(landed.string()).t, "after_the_swap") == 1);
}

TEST_CASE("output: leftovers of a long-named trace's killed writes are known by their shortened name and removed") {
  using cuprof::detail::temporary_file_prefix;
  const cuprof::trace t = many_spans(10);
  scratch_dir dir;
  const pid_t dead = ::fork();
  REQUIRE(dead >= 0);
  if (dead == 0) ::_exit(0);
  REQUIRE(::waitpid(dead, nullptr, 0) == dead);
  CHECK(temporary_file_prefix("t.json") == "t.json.tmp.");
  const std::string name(250, 'n'), sibling = std::string(249, 'n') + "m";
  const std::string prefix = temporary_file_prefix(name);
  CHECK(prefix.size() + 10 + 1 + 16 <= NAME_MAX);  // with the widest pid and the random part
  CHECK(prefix != temporary_file_prefix(sibling));
  const timespec two_minutes_ago[2] = {{std::time(nullptr) - 120, 0}, {std::time(nullptr) - 120, 0}};
  const auto plant = [&](const std::string& file) {
    const fs::path p = dir.path / file;
    { std::ofstream(p) << "half a trace"; }
    REQUIRE(::utimensat(AT_FDCWD, p.c_str(), two_minutes_ago, 0) == 0);
    return p;
  };
  const fs::path ours = plant(prefix + std::to_string(dead) + ".5f3a9c01d2e4b786");
  const fs::path siblings = plant(temporary_file_prefix(sibling) + std::to_string(dead) + ".5f3a9c01d2e4b786");
  cuprof::export_chrome_trace(t, (dir.path / name).string());
  CHECK_FALSE(fs::exists(ours));
  CHECK(fs::exists(siblings));
  CHECK(cuprof::read_trace_file((dir.path / name).string()).t.spans.size() == t.spans.size());
}

TEST_CASE("output: a file being written when its directory is swapped for a symlink lands in the directory it was created in") {
  const cuprof::trace t = many_spans(10);
  scratch_dir dir;
  fs::create_directory(dir.path / "d");
  fs::create_directory(dir.path / "other");
  { std::ofstream(dir.path / "other" / "out.json") << "precious"; }
  { std::ofstream(dir.path / "other" / "bound.json") << "precious"; }
  const auto swap = [&] {
    fs::rename(dir.path / "d", dir.path / "d_moved");
    fs::create_directory_symlink(dir.path / "other", dir.path / "d");
  };
  const std::string sink_path = (dir.path / "d" / "out.json").string();
  const std::string bound_path = (dir.path / "d" / "bound.json").string();
  {
    cuprof::detail::atomic_file sink(sink_path);
    const cuprof::detail::trace_directory bound(bound_path);  // as CUPROF_TRACE binds its path at start
    sink.write("{}", 2);
    swap();
    REQUIRE_NOTHROW(sink.commit());
    REQUIRE_NOTHROW(cuprof::export_chrome_trace(t, bound, bound_path));
  }
  CHECK(slurp(dir.path / "other" / "out.json") == "precious");
  CHECK(slurp(dir.path / "other" / "bound.json") == "precious");
  CHECK(files_in(dir.path / "other").size() == 2);  // nor a temporary file
  CHECK(slurp(dir.path / "d_moved" / "out.json") == "{}");
  CHECK(cuprof::read_trace_file((dir.path / "d_moved" / "bound.json").string()).t.spans.size() == t.spans.size());
  CHECK(files_in(dir.path / "d_moved").size() == 2);
}

TEST_CASE("output: a bound directory whose descriptor the program closed is opened by name again, only if it is the same directory") {
  const cuprof::trace t = many_spans(10);
  scratch_dir dir;
  fs::create_directory(dir.path / "d");
  fs::create_directory(dir.path / "other");
  const std::string target = (dir.path / "d" / "t.json").string();
  // In a child: it closes every descriptor above stderr, as a daemon may.
  const int rc = in_child([&] {
    const cuprof::detail::trace_directory bound(target);
    for (int fd = 3; fd < 1024; ++fd) ::close(fd);
    cuprof::export_chrome_trace(t, bound, target);  // the same directory: written
    if (cuprof::read_trace_file(target).t.spans.size() != t.spans.size()) return 10;
    const cuprof::detail::trace_directory again(target);
    for (int fd = 3; fd < 1024; ++fd) ::close(fd);
    fs::rename(dir.path / "d", dir.path / "d_moved");
    fs::create_directory_symlink(dir.path / "other", dir.path / "d");
    try {
      cuprof::export_chrome_trace(t, again, target);
      return 11;
    } catch (const cuprof::error& e) {
      if (std::string(e.what()).find("replaced") == std::string::npos) return 12;
    }
    return files_in(dir.path / "other").empty() ? 0 : 13;
  });
  CHECK(rc == 0);
}

TEST_CASE("misuse: on_trace_ready throwing what is not a std::exception: stop() passes it on, the profile stops; the destructor says it") {
  // In a child: std::terminate would end the test process.
  const int rc = in_child([] {
    stderr_capture err;
    {
      cuprof::profile_options o = cpu_only();
      o.on_trace_ready = [](cuprof::profile&) { throw 42; };
      cuprof::profile p(o);
      p.start();
      { CUPROF_SCOPE("thrown_window"); }
      try {
        p.stop();
        return 10;
      } catch (int v) {
        if (v != 42) return 11;
      }
      if (p.running()) return 12;
      cuprof::profile q(cpu_only());  // the process's slot was given back
      q.start();
      if (!q.running()) return 13;
      q.stop();
      p.start();  // restartable; destroyed running: ~profile stops, the handler throws again
      if (!p.running()) return 14;
      { CUPROF_SCOPE("second_window"); }
    }
    const std::string said = err.finish();
    std::size_t lines = 0;
    for (std::size_t at = said.find("stopping the profiler failed"); at != std::string::npos;
         at = said.find("stopping the profiler failed", at + 1))
      ++lines;
    std::fprintf(stderr, "%s", said.c_str());
    return lines == 1 ? 0 : 15;
  });
  CHECK(rc == 0);  // 128 + SIGABRT: std::terminate from ~profile
}

// The child half of the next test, in a fresh process: the line is said once per process.
TEST_CASE("[child] a refused profile started again and again") {
  if (!std::getenv("CUPROF_TEST_REFUSED") || !is_child_run()) return;
  cuprof::profile first(cpu_only());
  first.start();
  REQUIRE(first.running());
  stderr_capture err;
  for (int i = 0; i < 200; ++i) {
    cuprof::profile p(cpu_only());
    p.start();
    p.stop();
  }
  cuprof::profile again(cpu_only());
  for (int i = 0; i < 200; ++i) {
    again.start();
    again.step();
    again.stop();
  }
  const std::string said = err.finish();
  std::size_t lines = 0;
  for (std::size_t at = said.find("another cuprof profiler is already running"); at != std::string::npos;
       at = said.find("another cuprof profiler is already running", at + 1))
    ++lines;
  CAPTURE(said.substr(0, 2000));
  CHECK(lines == 1);
  first.stop();
}

TEST_CASE("misuse: a profile refused because another is running says so once per process, however often it is started") {
  scratch_dir dir;
  const std::string err = (dir.path / "stderr.txt").string();
  const int rc = run_child_case("[child] a refused profile started again and again", {{"CUPROF_TEST_REFUSED", "1"}}, err);
  const std::string said = slurp(err);
  CAPTURE(said.substr(0, 4000));
  CHECK(rc == 0);
}

// --- API misuse with threads (test_profile.cpp "misuse: ..." covers start
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
  CHECK(spans_named(window, "held_open") == std::size_t(threads));
  std::size_t at_end = 0;
  for (const cuprof::cpu_span& s : window.spans) at_end += s.end_ns == window.meta.window_end_ns;
  CHECK(at_end == std::size_t(threads) * 2);
  CHECK(spans_named(window, "after_destroy") == 0);
  CHECK(malformed_spans(window) == 0);
  CHECK_NOTHROW(json::parse(cuprof::chrome_trace_json(window)));
  // Nothing recorded after the profile went away leaks into the next one.
  cuprof::profile next(cpu_only());
  next.start();
  { CUPROF_SCOPE("next_window"); }
  next.stop();
  CHECK(next.last_trace().spans.size() == 1);
  CHECK(spans_named(next.last_trace(), "next_window") == 1);
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
        worker_spans += spans_named(p.last_trace(), "worker_outer");
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

TEST_CASE("a copied trace is independent of the profile and trace it was copied from") {
  cuprof::trace copy;
  {
    cuprof::profile p(cpu_only());
    p.start();
    for (int i = 0; i < 100; ++i) cuprof::record_function r("copied name " + std::to_string(i));
    p.stop();
    copy = p.last_trace();
    p.start();  // the next window replaces the one copied
    p.stop();
  }
  const cuprof::trace second = copy;  // copy of a copy
  for (const cuprof::trace* t : {static_cast<const cuprof::trace*>(&copy), &second}) {
    REQUIRE(t->spans.size() == 100);
    CHECK(t->names.str(t->spans[7].name) == "copied name 7");
  }
  // Interning looks names up through the table's index, which must view the copy's own strings.
  cuprof::trace& c = copy;
  CHECK(c.names.intern("copied name 7") == c.spans[7].name);
  const cuprof::name_id fresh = c.names.intern("a new name");
  CHECK(c.names.str(fresh) == "a new name");
  CHECK(c.names.intern("a new name") == fresh);
  CHECK(json::parse(cuprof::chrome_trace_json(second))["traceEvents"].size() > 100);
}

// --- Exit and fork ----------------------------------------------------------------

// The child half of the next test: does nothing unless started by it.
TEST_CASE("[child] exit while threads are inside scopes") {
  if (!is_child_run()) return;
  // A forked child of this process exits first: it must not write this process's trace.
  const char* path = std::getenv("CUPROF_TRACE");
  std::fflush(nullptr);
  const pid_t grandchild = ::fork();
  if (grandchild == 0) {
    { CUPROF_SCOPE("grandchild"); }
    g_forked_child_no_leak_check.store(true);
    std::exit(0);
  }
  int status = 0;
  ::waitpid(grandchild, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ::_exit(3);
  if (::access(path, F_OK) == 0) {
    std::fprintf(stderr, "a forked child wrote the CUPROF_TRACE trace of its parent\n");
    ::_exit(4);
  }
  for (int i = 0; i < 3; ++i)
    std::thread([i] {
      const std::string name = "exit_worker " + std::to_string(i);
      for (std::uint64_t loop = 1;; ++loop) {
        {
          cuprof::record_function r(name);
          CUPROF_SCOPE("exit_worker_inner");
        }
        pace(loop, 16);
      }
    }).detach();
  { CUPROF_SCOPE("main_before_exit"); }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::fflush(nullptr);
  std::exit(0);  // the CUPROF_TRACE exit handler runs while the workers still record
}

TEST_CASE("exit: CUPROF_TRACE writes a valid trace while detached threads are still inside scopes; a forked child does not write it") {
  scratch_dir dir;
  const std::string trace = (dir.path / "at_exit.json").string();
  const std::string err = (dir.path / "stderr.txt").string();
  const int rc = run_child_case("[child] exit while threads are inside scopes",
                                {{"CUPROF_TRACE", trace}, {"CUPROF_ACTIVITIES", "cpu"}, {"CUPROF_TABLE", "0"}}, err);
  const std::string said = slurp(err);
  CAPTURE(said);
  CHECK(rc == 0);  // no crash, no hang, no sanitizer report (the exit-time leak of the profile is suppressed)
  CHECK(said.find("trace written to " + trace) != std::string::npos);
  json doc;
  REQUIRE_NOTHROW(doc = json::parse(slurp(trace)));
  std::size_t main_spans = 0, worker_spans = 0;
  for (const json& e : doc["traceEvents"]) {
    if (e["ph"] != "X") continue;
    main_spans += e["name"] == "main_before_exit";
    worker_spans += e["name"].get<std::string>().rfind("exit_worker ", 0) == 0;
    CHECK(e["name"] != "grandchild");
  }
  CHECK(main_spans == 1);
  CHECK(worker_spans > 0);
  const cuprof::loaded_trace back = cuprof::read_trace_file(trace);
  CHECK(malformed_spans(back.t) == 0);
}

// --- How a traced program ends (CUPROF_TRACE; docs/reliability.md) -----------------

// The child half of the next test: ends the way CUPROF_TEST_END says, after
// recording the scope "before_the_end".
TEST_CASE("[child] the program ends") {
  const char* end = std::getenv("CUPROF_TEST_END");
  if (!end || !is_child_run()) return;
  const std::string how = end;
  { CUPROF_SCOPE("before_the_end"); }
  std::fflush(nullptr);
  if (how == "exit") std::exit(4);
  if (how == "exit_from_thread") {
    std::thread([] {
      CUPROF_SCOPE("thread_calling_exit");
      std::exit(3);
    }).detach();
    for (;;) {
      CUPROF_SCOPE("main_still_working");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  if (how == "quick_exit") std::quick_exit(5);
  if (how == "terminate") std::thread([] { throw std::runtime_error("nobody catches this"); }).join();
  if (how == "abort") std::abort();
  if (how == "sigpipe") {
    int fds[2];
    if (::pipe(fds) != 0) ::_exit(90);
    ::close(fds[0]);
    for (;;) (void)!::write(fds[1], "x", 1);  // the reader is gone: SIGPIPE
  }
  const int sig = std::atoi(how.c_str());  // a signal number, sent to the whole process
  ::kill(::getpid(), sig);
  for (;;) std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

struct ended_child {
  int status;        // exit status, or 128 + signal
  std::string said;  // its stderr
  bool trace_written;
  std::size_t before_the_end = 0;  // spans of that name in the trace
};

ended_child end_traced_child(const std::string& how) {
  scratch_dir dir;
  const std::string trace = (dir.path / "end.json").string();
  const std::string err = (dir.path / "stderr.txt").string();
  ended_child r{run_child_case("[child] the program ends", {{"CUPROF_TEST_END", how}, {"CUPROF_TRACE", trace},
                                                            {"CUPROF_ACTIVITIES", "cpu"}, {"CUPROF_TABLE", "0"}},
                               err),
                "", false};
  r.said = slurp(err);
  std::error_code ec;
  r.trace_written = fs::exists(trace, ec);
  if (r.trace_written) {
    const json doc = json::parse(slurp(trace));
    for (const json& e : doc["traceEvents"]) r.before_the_end += e["ph"] == "X" && e["name"] == "before_the_end";
  }
  return r;
}

TEST_CASE("exit: exit() from main and from another thread write the trace and keep the program's exit status") {
  const ended_child from_main = end_traced_child("exit");
  CAPTURE(from_main.said);
  CHECK(from_main.status == 4);
  CHECK(from_main.trace_written);
  CHECK(from_main.before_the_end == 1);

  const ended_child from_thread = end_traced_child("exit_from_thread");
  CAPTURE(from_thread.said);
  CHECK(from_thread.status == 3);
  CHECK(from_thread.trace_written);
  CHECK(from_thread.before_the_end == 1);
}

TEST_CASE("abnormal ends: each catchable signal writes the trace, then ends the program as the signal would") {
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) {
    const ended_child r = end_traced_child(std::to_string(sig));
    CAPTURE(sig);
    CAPTURE(r.said);
    CHECK(r.status == 128 + sig);
    CHECK(r.trace_written);
    CHECK(r.before_the_end == 1);
    CHECK(r.said.find("writing the trace before the program ends") != std::string::npos);
  }
  const ended_child pipe = end_traced_child("sigpipe");
  CAPTURE(pipe.said);
  CHECK(pipe.status == 128 + SIGPIPE);
  CHECK(pipe.trace_written);
}

TEST_CASE("abnormal ends: std::terminate and quick_exit write the trace; abort() says it was not written") {
  const ended_child terminated = end_traced_child("terminate");
  CAPTURE(terminated.said);
  CHECK(terminated.status == 128 + SIGABRT);
  CHECK(terminated.trace_written);
  CHECK(terminated.before_the_end == 1);
  CHECK(terminated.said.find("std::terminate was called") != std::string::npos);
  CHECK(terminated.said.find("not written") == std::string::npos);

  const ended_child quick = end_traced_child("quick_exit");
  CAPTURE(quick.said);
  CHECK(quick.status == 5);
  CHECK(quick.trace_written);

  const ended_child aborted = end_traced_child("abort");
  CAPTURE(aborted.said);
  CHECK(aborted.status == 128 + SIGABRT);
  CHECK_FALSE(aborted.trace_written);
  CHECK(aborted.said.find("cuprof: the program aborted (SIGABRT): the trace was not written") != std::string::npos);
}

// --- Interrupted profiles: signals that arrive while the program holds locks -----
// (docs/reliability.md, "Ending a profile safely"). The handler only remembers the
// signal and returns, so the interrupted thread lets go of its locks (malloc's,
// stdio's); cuprof's signal thread writes the trace and then ends the process with
// the signal. Each scenario runs CUPROF_STRESS_RUNS times (default 20).

int stress_runs() {
  const char* v = std::getenv("CUPROF_STRESS_RUNS");
  const int n = v ? std::atoi(v) : 20;
  return n > 0 ? n : 20;
}

// Allocates and frees in a loop inside a scope: the thread is in malloc most of the time.
void allocate_in_scopes() {
  for (;;) {
    std::vector<char> v(4096);
    CUPROF_SCOPE("s");
    v[100] = 1;
  }
}

// The child half of the stress cases: CUPROF_TEST_INTERRUPT names the scenario.
TEST_CASE("[child] interrupted while holding locks") {
  const char* scenario_env = std::getenv("CUPROF_TEST_INTERRUPT");
  if (!scenario_env || !is_child_run()) return;
  const std::string scenario = scenario_env;
  { CUPROF_SCOPE("before_the_signal"); }
  std::ofstream(std::string(std::getenv("CUPROF_TRACE")) + ".ready") << "recording\n";
  if (scenario == "allocating" || scenario == "allocating_threads") {
    const int threads = scenario == "allocating" ? 0 : 3 + int(::getpid() % 18);  // 3 to 20
    for (int i = 0; i < threads; ++i) std::thread(&allocate_in_scopes).detach();
    allocate_in_scopes();
  }
  if (scenario == "stderr_logging" || scenario == "stderr_closed") {
    std::thread(&allocate_in_scopes).detach();
    for (std::uint64_t i = 0;; ++i) {
      CUPROF_SCOPE("log");
      std::fprintf(stderr, "program line %llu\n", static_cast<unsigned long long>(i));
    }
  }
  if (scenario == "during_exit_write") {
    // Enough scopes that writing the trace takes a while; a thread sends SIGTERM
    // once the exit handler's temporary file exists, i.e. during the write.
    for (int i = 0; i < 400000; ++i) CUPROF_SCOPE("many");
    const fs::path trace = std::getenv("CUPROF_TRACE");
    std::thread([trace] {
      for (;;) {
        std::error_code ec;
        for (const auto& e : fs::directory_iterator(trace.parent_path(), ec))
          if (e.path().filename().string().rfind(trace.filename().string() + ".tmp.", 0) == 0) {
            ::kill(::getpid(), SIGTERM);
            return;
          }
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    }).detach();
    std::fflush(nullptr);
    std::exit(0);
  }
  ::_exit(90);
}

struct interrupted_run {
  int status = 0;
  std::string said;
  bool trace_valid = false;
  std::size_t before_the_signal = 0;
};

// Runs the scenario once: stderr to a file, or to a pipe that is read for a line and
// closed (stderr_closed); SIGTERM after `delay_s` unless the child signals itself.
interrupted_run interrupt_once(const std::string& scenario, double delay_s) {
  scratch_dir dir;
  const std::string trace = (dir.path / "t.json").string();
  const std::string err = (dir.path / "stderr.txt").string();
  int pipe_fds[2] = {-1, -1};
  const bool closed_pipe = scenario == "stderr_closed";
  if (closed_pipe) REQUIRE(::pipe(pipe_fds) == 0);
  std::fflush(nullptr);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::setenv("CUPROF_TEST_CHILD", "1", 1);
    ::setenv("CUPROF_TEST_INTERRUPT", scenario.c_str(), 1);
    ::setenv("CUPROF_TRACE", trace.c_str(), 1);
    ::setenv("CUPROF_ACTIVITIES", "cpu", 1);
    ::setenv("CUPROF_TABLE", "0", 1);
    // Small traces: the scenarios are about locks, not volume (past the cap scopes are counted, not kept).
    ::setenv("CUPROF_MAX_CPU_EVENTS", scenario == "during_exit_write" ? "1048576" : "131072", 1);
    ::unsetenv("CUPROF_ROOT_PID");
    ::setenv("LSAN_OPTIONS", "suppressions=" CUPROF_TEST_SOURCE_DIR "/tests/lsan.supp", 0);
    const int fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    if (closed_pipe) {
      ::dup2(pipe_fds[1], 2);
      ::close(pipe_fds[0]);
      ::close(pipe_fds[1]);
    } else {
      ::dup2(fd, 2);
    }
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGABRT}) ::signal(sig, SIG_DFL);
    const std::string selector = "--test-case=[child] interrupted while holding locks";
    ::execl("/proc/self/exe", "cuprof_tests", selector.c_str(), "--no-intro", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  interrupted_run r;
  if (closed_pipe) {
    ::close(pipe_fds[1]);
    // The reader of `program 2>&1 | head -1`: one line, then gone.
    char c = 0;
    while (::read(pipe_fds[0], &c, 1) == 1 && c != '\n') {}
    ::close(pipe_fds[0]);
  } else if (delay_s > 0) {
    std::error_code ec;
    for (int i = 0; i < 30000 && !fs::exists(trace + ".ready", ec); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::this_thread::sleep_for(std::chrono::duration<double>(delay_s));
    ::kill(child, SIGTERM);
  }
  r.status = wait_or_kill(child, 90);
  r.said = slurp(err);
  std::error_code ec;
  if (fs::exists(trace, ec)) {
    try {
      const json doc = json::parse(slurp(trace));
      r.trace_valid = true;
      for (const json& e : doc["traceEvents"]) r.before_the_signal += e["ph"] == "X" && e["name"] == "before_the_signal";
    } catch (const std::exception&) {
    }
  }
  return r;
}

TEST_CASE("interrupted: SIGTERM, a closed stderr pipe or a signal during the exit write: the trace is written and the status is the signal's, every time") {
  const int runs = stress_runs();
  const std::vector<std::pair<std::string, int>> scenarios = {
      {"allocating", SIGTERM},     {"allocating_threads", SIGTERM}, {"stderr_logging", SIGTERM},
      {"stderr_closed", SIGPIPE},  {"during_exit_write", SIGTERM}};
  for (const auto& [scenario, sig] : scenarios) {
    int passed = 0;
    for (int i = 0; i < runs; ++i) {
      const interrupted_run r = interrupt_once(scenario, scenario == "during_exit_write" || scenario == "stderr_closed"
                                                             ? 0
                                                             : 0.3 + 0.05 * (i % 10));
      CAPTURE(scenario);
      CAPTURE(i);
      CAPTURE(r.said.substr(r.said.size() > 2000 ? r.said.size() - 2000 : 0));
      CHECK(r.status == 128 + sig);
      CHECK(r.trace_valid);
      CHECK(r.before_the_signal == 1);
      CHECK(r.said.find("could not be written in time") == std::string::npos);
      passed += r.status == 128 + sig && r.trace_valid && r.before_the_signal == 1;
    }
    MESSAGE(scenario << ": " << passed << " of " << runs << " runs wrote the trace and ended with signal " << sig);
  }
}

// The child half of the next case: a CUPROF_DURATION write in progress when a
// thread forks; the child exits at once.
TEST_CASE("[child] fork during the duration write") {
  if (!std::getenv("CUPROF_TEST_FORK_DURING_WRITE") || !is_child_run()) return;
  for (int i = 0; i < 400000; ++i) CUPROF_SCOPE("many");
  const fs::path trace = std::getenv("CUPROF_TRACE");
  for (;;) {  // CUPROF_DURATION's thread writes the trace: wait for its temporary file
    std::error_code ec;
    bool writing = false;
    for (const auto& e : fs::directory_iterator(trace.parent_path(), ec))
      writing |= e.path().filename().string().rfind(trace.filename().string() + ".tmp.", 0) == 0;
    if (writing) break;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  std::fflush(nullptr);
  const pid_t child = ::fork();
  if (child == 0) {
    g_forked_child_no_leak_check.store(true);  // the writing thread's allocations did not follow
    std::exit(0);  // the exit handler must not wait on the parent's write
  }
  const int rc = wait_or_kill(child, 20);
  std::exit(rc == 0 ? 0 : 70);  // after the duration's write: the exit handler waits for it
}

TEST_CASE("fork: a child forked while a CUPROF_DURATION trace is written exits at once") {
  for (int i = 0; i < 5; ++i) {
    scratch_dir dir;
    const std::string trace = (dir.path / "d.json").string();
    const std::string err = (dir.path / "stderr.txt").string();
    const int rc = run_child_case("[child] fork during the duration write",
                                  {{"CUPROF_TEST_FORK_DURING_WRITE", "1"}, {"CUPROF_TRACE", trace},
                                   {"CUPROF_DURATION", "0.3"}, {"CUPROF_ACTIVITIES", "cpu"}, {"CUPROF_TABLE", "0"}},
                                  err);
    CAPTURE(slurp(err));
    CHECK(rc == 0);  // 70: the forked child hung in exit()
    CHECK(fs::exists(trace));
  }
}

// The child half of the next case: daemon(), then a scope, then exit.
TEST_CASE("[child] daemon") {
  const char* pid_file = std::getenv("CUPROF_TEST_DAEMON_PID_FILE");
  if (!pid_file || !is_child_run()) return;
  { CUPROF_SCOPE("before_daemon"); }
  std::fflush(nullptr);
  if (::daemon(1, 1) != 0) ::_exit(80);
  { CUPROF_SCOPE("in_daemon"); }
  std::ofstream(pid_file) << ::getpid() << "\n";
  std::exit(0);
}

TEST_CASE("daemon() under CUPROF_TRACE: the daemon writes its own trace, named with its pid, and says so") {
  scratch_dir dir;
  const std::string trace = (dir.path / "srv.json").string();
  const std::string pid_file = (dir.path / "pid").string();
  const std::string err = (dir.path / "stderr.txt").string();
  const int rc = run_child_case("[child] daemon", {{"CUPROF_TEST_DAEMON_PID_FILE", pid_file}, {"CUPROF_TRACE", trace},
                                                   {"CUPROF_ACTIVITIES", "cpu"}, {"CUPROF_TABLE", "0"}},
                                err);
  CHECK(rc == 0);
  // The daemon goes on after its parent returned: wait for its trace.
  std::string daemon_trace;
  for (int i = 0; i < 2000 && daemon_trace.empty(); ++i) {
    std::ifstream in(pid_file);
    std::string pid;
    if (in >> pid) {
      const std::string expected = (dir.path / ("srv." + pid + ".json")).string();
      if (fs::exists(expected) && slurp(err).find("trace written to") != std::string::npos) daemon_trace = expected;
    }
    if (daemon_trace.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CAPTURE(slurp(err));
  REQUIRE_FALSE(daemon_trace.empty());
  CHECK_FALSE(fs::exists(trace));  // daemon()'s parent ends with _exit: nothing of its own
  CHECK(slurp(err).find("daemon()") != std::string::npos);
  const json doc = json::parse(slurp(daemon_trace));
  std::set<std::string> names;
  for (const json& e : doc["traceEvents"])
    if (e["ph"] == "X") names.insert(e["name"].get<std::string>());
  CHECK(names.count("before_daemon") == 1);
  CHECK(names.count("in_daemon") == 1);
}

TEST_CASE("trace paths: absolute from the start, one per process for processes a traced process started") {
  using cuprof::detail::resolve_trace_path;
  char cwd[4096];
  REQUIRE(::getcwd(cwd, sizeof cwd) != nullptr);
  CHECK(resolve_trace_path("t.json", 100, nullptr, false) == std::string(cwd) + "/t.json");
  CHECK(resolve_trace_path("/abs/t.json", 100, nullptr, false) == "/abs/t.json");
  CHECK(resolve_trace_path("/abs/t.json", 100, "100", false) == "/abs/t.json");  // the first process keeps the name
  CHECK(resolve_trace_path("/abs/t.json", 101, "100", false) == "/abs/t.101.json");
  CHECK(resolve_trace_path("/abs/t.pt.trace.json.gz", 101, "100", false) == "/abs/t.101.pt.trace.json.gz");
  CHECK(resolve_trace_path("/a.b/trace", 101, "100", false) == "/a.b/trace.101");
  CHECK(resolve_trace_path("/abs/t_101.json", 101, "100", true) == "/abs/t_101.json");  // %p already names it
}

// The child half of the next test, in a fresh process: cuprof's "CUDA is off" line is said once per process.
TEST_CASE("[child] CUDA activity alone") {
  if (!is_child_run()) return;
  cuprof::profile_options o;
  o.activities = cuprof::activity::cuda;
  cuprof::profile prof(o);
  prof.start();
  { CUPROF_SCOPE("not_recorded"); }
  prof.stop();
  ::_exit(prof.last_trace().spans.empty() ? 0 : 1);
}

TEST_CASE("CUDA activity alone where CUDA cannot be traced: the line says nothing is recorded, not 'the CPU side'") {
  scratch_dir dir;
  const std::string err = (dir.path / "stderr.txt").string();
  // CUDA cannot be traced with this libcupti, on any machine.
  const int rc = run_child_case("[child] CUDA activity alone", {{"CUPROF_CUPTI_LIBRARY", "/nonexistent/libcupti.so.13"}},
                                err, 60);
  const std::string said = slurp(err);
  CAPTURE(said);
  CHECK(rc == 0);
  CHECK(said.find("CUDA tracing is off: ") != std::string::npos);
  CHECK(said.find("nothing is recorded (CPU activity was not asked for)") != std::string::npos);
  CHECK(said.find("recording the CPU side only") == std::string::npos);
}

TEST_CASE("exit: a fault inside a guarded exit-time call is contained and reported as such") {
  int fault = 0;
  // The fault is raised rather than made: a store through a null pointer is undefined behaviour,
  // which UBSan reports before any fault happens.
  const bool ok = cuprof::detail::call_guarded([] { ::raise(SIGSEGV); }, &fault);
  CHECK_FALSE(ok);
  CHECK(fault == SIGSEGV);
  int calls = 0;
  CHECK(cuprof::detail::call_guarded([&] { ++calls; }));
  CHECK(calls == 1);
  // The guard is gone afterwards: a later fault is the program's own (checked in a child: it dies,
  // by SIGSEGV, or with a sanitizer's report where one handles faults).
  CHECK(in_child([] {
          ::raise(SIGSEGV);
          return 0;
        }) != 0);
}

// Runs in a fresh process (the case below): the threads and process-wide state
// that earlier cases leave behind made a child hang under ThreadSanitizer now and then.
TEST_CASE("[child] fork while a profile records") {
  if (!is_child_run() || !std::getenv("CUPROF_TEST_FORK_WHILE_RECORDING")) return;
  std::vector<std::unique_ptr<scope_worker>> workers;
  // Long dynamic names fill chunks fast, so the chunk pool's lock is taken often;
  // a window per fork hands the chunks back (to the same lock) and bounds memory.
  for (int i = 0; i < 3; ++i) workers.push_back(std::make_unique<scope_worker>(2000));
  std::atomic<bool> spawning{true};
  std::thread spawner([&] {  // short-lived threads register (the registry's lock) and exit
    while (spawning.load()) {
      std::thread([] { CUPROF_SCOPE("short_lived"); }).join();
      std::this_thread::sleep_for(std::chrono::milliseconds(5));  // each thread holds a 128 KiB chunk until collected
    }
  });
  std::size_t windows = 0, malformed = 0, rounds = 0, child_spans = 0, worker_spans = 0, dropped = 0;
  cuprof::profile_options o = cpu_only();
  o.schedule = cuprof::schedule(/*wait*/ 0, /*warmup*/ 0, /*active*/ 1);
  o.on_trace_ready = [&](cuprof::profile& p) {
    const cuprof::trace& t = p.last_trace();
    ++windows;
    malformed += malformed_spans(t);
    rounds += spans_named(t, "fork_round");
    child_spans += spans_named(t, "child_scope");
    worker_spans += spans_named(t, "worker_outer");
    dropped += t.meta.dropped_cpu_events;
  };
  cuprof::profile prof(o);
  prof.start();
  for (auto& w : workers) w->run_loops(10);
  constexpr int forks = 60;
  int ok = 0, hung = 0, failed = 0;
  for (int i = 0; i < forks; ++i) {
    {
      CUPROF_SCOPE("fork_round");
      for (auto& w : workers) w->allow_loops(200);  // a few chunks each, taken while the fork happens
      std::fflush(nullptr);
      const pid_t child = ::fork();
      REQUIRE(child >= 0);
      if (child == 0) {
        // Scopes in the child: enough to need fresh chunks from the pool.
        for (int k = 0; k < 3000; ++k) {
          CUPROF_SCOPE("child_scope");
          cuprof::record_function r(std::string(200, 'c'));
        }
        if (i % 2) ::_exit(0);
        g_forked_child_no_leak_check.store(true);
        std::exit(0);  // exit handlers and static destructors run too
      }
      const int rc = wait_or_kill(child, 30);
      if (rc == 0) ++ok;
      else if (rc == -1) ++hung;
      else ++failed;
      for (auto& w : workers) w->run_loops(2);
    }
    prof.step();
  }
  prof.stop();
  spawning.store(false);
  spawner.join();
  for (auto& w : workers) w->finish();
  CHECK(hung == 0);
  CHECK(failed == 0);
  CHECK(ok == forks);
  CHECK(windows == std::size_t(forks) + 1);  // one per step, and the one stop() ends
  CHECK(rounds == std::size_t(forks));
  CHECK(child_spans == 0);  // the children's scopes stay in the children
  CHECK(worker_spans > 0);
  CHECK(malformed == 0);
  CHECK(dropped == 0);
  scratch_dir dir;
  const std::string path = (dir.path / "parent.json").string();
  prof.export_chrome_trace(path);
  CHECK(cuprof::read_trace_file(path).t.spans.size() == prof.last_trace().spans.size());
}

TEST_CASE("fork: children forked while a profile records and threads use scopes run scopes, exit, and do not hang") {
  scratch_dir dir;
  const std::string err = (dir.path / "stderr.txt").string();
  const int rc = run_child_case("[child] fork while a profile records", {{"CUPROF_TEST_FORK_WHILE_RECORDING", "1"}}, err, 600);
  CAPTURE(slurp(err).substr(0, 4000));
  CHECK(rc == 0);
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
  CHECK(spans_named(window, "busy") > 0);
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
    CHECK(spans_named(t, "busy") > 0);
    CHECK(spans_outside_window(t) == 0);
    CHECK(malformed_spans(t) == 0);
  }
  // ProfilerStep#1 is entered just after the first window's end: it belongs to the second.
  CHECK(spans_named(windows[0], "ProfilerStep#0") == 1);
  CHECK(spans_named(windows[0], "ProfilerStep#1") == 0);
  CHECK(spans_named(windows[1], "ProfilerStep#1") == 1);
}

TEST_CASE("CPU event cap: scopes past CUPROF_MAX_CPU_EVENTS are dropped, counted in the metadata and said in one line") {
  const saved_env saved("CUPROF_MAX_CPU_EVENTS");
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

TEST_CASE("misuse: step() or stop() from on_trace_ready is refused with one line, not recursed into") {
  cuprof::profile_options o = cpu_only();
  o.schedule = cuprof::schedule(/*wait*/ 0, /*warmup*/ 0, /*active*/ 1);  // every step ends a window
  int handed_over = 0;
  o.on_trace_ready = [&](cuprof::profile& p) {
    ++handed_over;
    p.step();
    p.stop();
  };
  cuprof::profile prof(o);
  stderr_capture err;
  prof.start();
  prof.step();
  prof.stop();
  const std::string said = err.finish();
  CAPTURE(said);
  CHECK(handed_over == 2);  // the window step() ended, and the one stop() ended
  CHECK(prof.step_num() == 1);
  CHECK_FALSE(prof.running());
  CHECK(lines_containing(said, "step() called from on_trace_ready; ignored") == 2);
  CHECK(lines_containing(said, "stop() called from on_trace_ready; ignored") == 2);
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

static void two_scopes_on_one_line() { CUPROF_FUNCTION(); CUPROF_SCOPE("same_line_inner"); }

TEST_CASE("two scopes on one source line compile and both record") {
  cuprof::profile prof(cpu_only());
  prof.start();
  { CUPROF_SCOPE("same_line_a"); CUPROF_SCOPE("same_line_b"); }
  two_scopes_on_one_line();
  prof.stop();
  const cuprof::trace& t = prof.last_trace();
  REQUIRE(t.spans.size() == 4);
  CHECK(spans_named(t, "same_line_a") == 1);
  CHECK(spans_named(t, "same_line_b") == 1);
  CHECK(spans_named(t, "two_scopes_on_one_line") == 1);
  CHECK(spans_named(t, "same_line_inner") == 1);
  for (const cuprof::cpu_span& s : t.spans) {
    const bool inner = t.names.str(s.name) == "same_line_b" || t.names.str(s.name) == "same_line_inner";
    CHECK((s.parent != cuprof::no_index) == inner);
  }
}

// --- libcupti not loadable ----------------------------------------------------------

TEST_CASE("CUPROF_CUPTI_LIBRARY that cannot be loaded, or is not CUPTI: one clear reason, nothing else tried") {
  const saved_env saved("CUPROF_CUPTI_LIBRARY");
  ::setenv("CUPROF_CUPTI_LIBRARY", "/nonexistent/libcupti.so.13", 1);
  {
    cuprof::detail::cupti::cupti_library lib;
    const std::string why = lib.load();
    CAPTURE(why);
    CHECK(why.rfind("CUPROF_CUPTI_LIBRARY=/nonexistent/libcupti.so.13 could not be loaded (", 0) == 0);
    const bool bound = lib.get_version != nullptr;
    CHECK_FALSE(bound);
  }
  ::setenv("CUPROF_CUPTI_LIBRARY", "libz.so.1", 1);  // loads, but is not CUPTI
  {
    cuprof::detail::cupti::cupti_library lib;
    const std::string why = lib.load();
    CAPTURE(why);
    CHECK(why.find("lacks CUPTI 13 entry points") != std::string::npos);
  }
}

// --- Environment parsers (fuzzed by tests/fuzz/fuzz_env_config.cpp) ---------------

TEST_CASE("environment parsers: ranks, the record cap, flags, libcupti candidates") {
  using cuprof::detail::parse_env_int;
  using cuprof::detail::parse_record_cap;
  CHECK(parse_env_int(nullptr) == std::nullopt);
  CHECK(parse_env_int("") == std::nullopt);
  CHECK(parse_env_int("7") == 7);
  CHECK(parse_env_int("0") == 0);
  CHECK(parse_env_int("-1") == std::nullopt);
  CHECK(parse_env_int("7x") == std::nullopt);
  CHECK(parse_env_int("1073741824") == std::nullopt);  // 2^30
  CHECK(parse_env_int("99999999999999999999") == std::nullopt);

  CHECK(parse_record_cap(nullptr) == std::nullopt);
  CHECK(parse_record_cap("1000") == std::size_t(1000));
  CHECK(parse_record_cap("0") == std::nullopt);
  // Regression: strtoull read "-1" as 2^64-1, i.e. no cap at all.
  CHECK(parse_record_cap("-1") == std::nullopt);
  CHECK(parse_record_cap(" 5") == std::nullopt);
  CHECK(parse_record_cap("+5") == std::nullopt);
  CHECK(parse_record_cap("1e6") == std::nullopt);
  CHECK(parse_record_cap("99999999999999999999999") == std::size_t(SIZE_MAX));

  using cuprof::detail::parse_switch;
  CHECK(parse_switch(nullptr) == std::nullopt);
  CHECK(parse_switch("") == std::nullopt);
  for (const char* on : {"1", "yes", "YES", "true", "True", "on", "ON"}) CHECK(parse_switch(on) == true);
  for (const char* off : {"0", "no", "No", "false", "FALSE", "off", "Off"}) CHECK(parse_switch(off) == false);
  for (const char* neither : {"maybe", " 1", "1 ", "01", "y", "2", "-1", "onn"}) CHECK(parse_switch(neither) == std::nullopt);

  using cuprof::detail::cupti_library_candidates;
  CHECK(cupti_library_candidates("/x/libcupti.so", "/cuda", nullptr) == std::vector<std::string>{"/x/libcupti.so"});
  const auto c = cupti_library_candidates(nullptr, "/cuda", "");
  CHECK(c.front() == "libcupti.so.13");
  CHECK(std::find(c.begin(), c.end(), "/cuda/extras/CUPTI/lib64/libcupti.so.13") != c.end());
  CHECK(c.back() == "/usr/local/cuda/lib64/libcupti.so.13");
}

TEST_CASE("environment: one parser per kind of setting; a bad value gives one warning naming it, its value and the default used") {
  using namespace cuprof::detail;
  // CUPROF_TABLE reads like CUPROF_QUIET.
  const auto config = [](std::map<std::string, std::string> vars) {
    return read_environment(
        [&vars](const char* name) -> const char* {
          const auto it = vars.find(name);
          return it == vars.end() ? nullptr : it->second.c_str();
        },
        false, 1, "host", 0, 1);
  };
  for (const char* off : {"0", "no", "false", "off", "NO"}) CHECK_FALSE(config({{"CUPROF_TRACE", "t.json"}, {"CUPROF_TABLE", off}}).print_table);
  for (const char* on : {"1", "yes", "true", "on", ""}) CHECK(config({{"CUPROF_TRACE", "t.json"}, {"CUPROF_TABLE", on}}).print_table);
  const environment_config bad = config({{"CUPROF_TRACE", "t.json"}, {"CUPROF_TABLE", "maybe"}, {"CUPROF_DELAY", "nan"},
                                         {"CUPROF_DURATION", "0x10"}, {"CUPROF_ACTIVITIES", "gpu"}});
  CHECK(bad.print_table);
  CHECK(bad.delay_s == 0);
  CHECK(bad.duration_s == 0);
  CHECK(bad.problems == std::vector<std::string>{
                           "CUPROF_TABLE=maybe is not 1/0, yes/no, true/false or on/off; using yes",
                           "CUPROF_ACTIVITIES=gpu is not cpu, cuda or cpu,cuda; using cpu,cuda",
                           "CUPROF_DELAY=nan is not a number of seconds from 0 to 1e7; using 0",
                           "CUPROF_DURATION=0x10 is not a number of seconds from 0 to 1e7; using 0"});
  CHECK(config({{"CUPROF_TRACE", "t.json"}, {"CUPROF_DELAY", "1.5"}, {"CUPROF_DURATION", "2e1"}}).duration_s == 20);
  CHECK(config({{"CUPROF_TRACE", "t.json"}}).export_with.detail == cuprof::trace_detail::kineto);
  for (const char* lean : {"lean", "LEAN", "Lean"})
    CHECK(config({{"CUPROF_TRACE", "t.json"}, {"CUPROF_TRACE_DETAIL", lean}}).export_with.detail == cuprof::trace_detail::lean);
  const environment_config fat = config({{"CUPROF_TRACE", "t.json"}, {"CUPROF_TRACE_DETAIL", "full"}});
  CHECK(fat.export_with.detail == cuprof::trace_detail::kineto);
  CHECK(fat.problems == std::vector<std::string>{"CUPROF_TRACE_DETAIL=full is not kineto or lean; using kineto"});
  for (const char* seconds : {"inf", "1e999", "-1", " 1", "1 ", "0x10", "1e8", "5s", "infinity"})
    CHECK_MESSAGE(parse_seconds(seconds) == std::nullopt, seconds);
  CHECK(parse_seconds(".5") == 0.5);
  CHECK(parse_seconds("10000000") == 1e7);

  for (const char* cap : {"-1", "abc", "0", " 1", "0x10", "1e6"}) {
    CAPTURE(cap);
    const env_setting<std::size_t> s = read_record_cap("CUPROF_MAX_RECORDS", cap, 16777216);
    CHECK(s.value == 16777216);
    CHECK(s.problem == std::string("CUPROF_MAX_RECORDS=") + cap + " is not a positive count in decimal digits; using 16777216");
  }
  CHECK(read_record_cap("CUPROF_MAX_RECORDS", "1000", 5).value == 1000);
  CHECK(read_record_cap("CUPROF_MAX_RECORDS", "1000", 5).problem.empty());
  CHECK(read_record_cap("CUPROF_MAX_RECORDS", nullptr, 5).problem.empty());
  CHECK(read_clock_forced_monotonic("garbage").problem ==
        "CUPROF_CLOCK=garbage is not monotonic; using the default clock (the TSC where it is invariant, else CLOCK_MONOTONIC)");
  CHECK(read_clock_forced_monotonic("MONOTONIC").value);
  CHECK(read_switch("CUPROF_QUIET", "on", false).value);
  // A value is quoted terminal-safe: the warning itself carries no escape sequence.
  CHECK(read_switch("CUPROF_QUIET", "\x1b]0;pwned\x07", false).problem ==
        "CUPROF_QUIET=\\x1b]0;pwned\\x07 is not 1/0, yes/no, true/false or on/off; using no");

  // Through the real environment: each warning once per process, however often the setting is read.
  scratch_dir dir;
  const fs::path err = dir.path / "stderr.txt";
  const int rc = in_child([&] {
    const int fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || ::dup2(fd, 2) < 0) return 10;
    ::setenv("CUPROF_QUIET", "maybe", 1);
    ::setenv("CUPROF_CLOCK", "garbage", 1);
    for (int i = 0; i < 3; ++i) {
      log_info("information");
      choose_clock();  // once per process in real use (clock_anchor); the warning must not depend on that
      (void)cuprof::detail::use_setting(read_record_cap("CUPROF_MAX_RECORDS", "0", 16777216));
    }
    return 0;
  });
  REQUIRE(rc == 0);
  const std::string printed = slurp(err);
  const auto count = [&](const std::string& what) {
    std::size_t n = 0;
    for (std::size_t at = 0; (at = printed.find(what, at)) != std::string::npos; at += what.size()) ++n;
    return n;
  };
  CHECK(count("cuprof: CUPROF_QUIET=maybe is not 1/0, yes/no, true/false or on/off; using no\n") == 1);
  CHECK(count("cuprof: CUPROF_CLOCK=garbage is not monotonic;") == 1);
  CHECK(count("cuprof: CUPROF_MAX_RECORDS=0 is not a positive count in decimal digits; using 16777216\n") == 1);
  CHECK(count("cuprof: information\n") == 3);
}

// --- Fuzzing corpus and regressions, replayed in every build ------------------------

TEST_CASE("fuzz findings stay fixed (tests/fuzz/regressions/trace_reader)") {
  const fs::path dir = source_dir / "tests" / "fuzz" / "regressions" / "trace_reader";
  SUBCASE("baseTimeNanoseconds + ts beyond int64: a clear error, not signed overflow") {
    const std::string bytes = slurp(dir / "base_plus_ts_overflows_int64.json");
    REQUIRE_FALSE(bytes.empty());
    try {
      cuprof::read_trace_bytes(bytes, "overflow");
      FAIL("accepted");
    } catch (const cuprof::error& e) {
      CHECK(std::string(e.what()).find("64-bit nanoseconds") != std::string::npos);
    }
  }
  SUBCASE("CUPTI overhead events only, no window: written with a base near them, so they read back") {
    const std::string bytes = slurp(dir / "overhead_only_no_window");
    REQUIRE_FALSE(bytes.empty());
    const cuprof::loaded_trace lt = cuprof::read_trace_bytes(bytes, "overhead");
    REQUIRE(lt.t.overhead.size() == 1);
    CHECK(lt.t.meta.window_start_ns == 0);
    const cuprof::loaded_trace back = cuprof::parse_trace(cuprof::chrome_trace_json(lt.t), "back");
    REQUIRE(back.t.overhead.size() == 1);
    CHECK(back.t.overhead[0].start_ns == lt.t.overhead[0].start_ns);
    CHECK(back.t.overhead[0].end_ns == lt.t.overhead[0].end_ns);
    // A hand-made trace without a window start: ts relative to its events, not to the epoch.
    cuprof::trace t;
    cuprof::cpu_span s;
    s.start_ns = 1795308099181515213ull;
    s.end_ns = s.start_ns + 1000;
    s.name = t.names.intern("no window");
    s.tid = 1;
    t.spans.push_back(s);
    const json doc = json::parse(cuprof::chrome_trace_json(t));
    CHECK(doc["baseTimeNanoseconds"].get<std::uint64_t>() == 1795308099000000000ull);
    CHECK(cuprof::parse_trace(doc.dump(), "hand-made").t.spans.at(0).start_ns == s.start_ns);
  }
  SUBCASE("a window 31 years from the events: read; written back, a clear error (ts beyond 1e15 us)") {
    const std::string bytes = slurp(dir / "base_time_31_years_from_window");
    REQUIRE_FALSE(bytes.empty());
    const cuprof::loaded_trace lt = cuprof::read_trace_bytes(bytes, "window");
    CHECK(cuprof_fuzz::time_extent_ns(lt.t) >= cuprof_fuzz::max_round_trip_extent_ns);
    CHECK_THROWS_AS(cuprof::parse_trace(cuprof::chrome_trace_json(lt.t), "back"), cuprof::error);
    cuprof_fuzz::trace_reader(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
  }
}

TEST_CASE("fuzz replay: the seed traces, damaged copies of them, and every regression input") {
  std::vector<fs::path> seeds = files_in(source_dir / "tests" / "fixtures" / "gpu");
  for (const fs::path& p : files_in(source_dir / "tools" / "testdata" / "kineto"))
    if (p.extension() == ".json") seeds.push_back(p);
  for (const fs::path& p : files_in(source_dir / "tests" / "fuzz" / "seeds" / "trace_reader"))
    seeds.push_back(p);  // the writer's own output: flows v2 and v1
  REQUIRE(seeds.size() >= 9);
  std::size_t inputs = 0;
  const auto feed = [&](const std::string& bytes) {
    cuprof_fuzz::trace_reader(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
    ++inputs;
  };
  for (const fs::path& p : seeds) {
    CAPTURE(p.string());
    const std::string text = slurp(p);
    REQUIRE_NOTHROW(cuprof::read_trace_bytes(text, p.string()));
    feed(text);
    // Cut at 64 places, and 64 single-byte changes: what a fuzzer tries first.
    std::uint64_t x = 0x9E3779B97F4A7C15ull ^ text.size();
    for (int i = 0; i < 64; ++i) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      feed(text.substr(0, x % text.size()));
      std::string changed = text;
      changed[x % text.size()] = "\"{}[],:0-.e\\\x01\xff"[(x >> 32) % 15];
      feed(changed);
    }
  }
  for (const fs::path& p : files_in(source_dir / "tests" / "fuzz" / "regressions" / "trace_reader")) {
    CAPTURE(p.string());
    feed(slurp(p));
  }
  std::size_t env_inputs = 0;
  const saved_env rank("RANK"), world("WORLD_SIZE"), quiet("CUPROF_QUIET");  // the target sets them
  for (const fs::path& p : files_in(source_dir / "tests" / "fuzz" / "regressions" / "env_config")) {
    const std::string bytes = slurp(p);
    cuprof_fuzz::env_config(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
    ++env_inputs;
  }
  using namespace std::string_literals;
  const std::vector<std::string> env_seeds = {""s, "7"s, "-1"s, "1\0" "2\0" "0\0" "/x\0" "/c\0" "/p"s,
                                              "\0" "-1\0" "00\0" "\0" "\0"s};
  for (const std::string& bytes : env_seeds) {
    cuprof_fuzz::env_config(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
    ++env_inputs;
  }
  MESSAGE(inputs << " trace inputs and " << env_inputs << " environment inputs replayed");
}

}  // TEST_SUITE reliability
