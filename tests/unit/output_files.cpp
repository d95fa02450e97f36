// The output layer's files (include/cuprof/output/file_sink.hpp): export written
// atomically, plain and gzip, from several threads; and faults: devices, full
// disks, planted symlinks and FIFOs, killed writes, long names, directories
// swapped or closed under the writer.

#include <cuprof/cuprof.hpp>
#include <cuprof/output/block_writer.hpp>
#include <cuprof/output/file_sink.hpp>
#include <cuprof/output/trace_event_writer.hpp>
#include <cuprof/output/trace_layout.hpp>
#include <cuprof/analysis.hpp>

#include "support/child_process.hpp"
#include "support/files.hpp"
#include "support/stderr_capture.hpp"
#include "support/trace_contract.hpp"
#include "support/traces.hpp"
#include "trace_input.hpp"  // gunzip (src/analysis)

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
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

bool leftover_temp(const fs::path& dir) {
  std::error_code ec;
  for (auto& e : fs::recursive_directory_iterator(dir, ec))
    if (e.path().filename().string().find(".tmp") != std::string::npos) return true;
  return false;
}

// 0: export threw cuprof::error whose message has `path` and `expect`; 1: no throw; 2: wrong message; 3: other.
int export_must_fail(const cuprof::trace& t, const std::string& path, const std::string& expect) {
  try {
    cuprof::export_chrome_trace(t, path);
    return 1;
  } catch (const cuprof::error& e) {
    const std::string m = e.what();
    if (m.rfind("cuprof: ", 0) != 0 || m.find(path) == std::string::npos || m.find(expect) == std::string::npos) {
      std::fprintf(stderr, "unexpected message: %s\n", m.c_str());
      return 2;
    }
    return 0;
  } catch (...) {
    return 3;
  }
}

cuprof::trace big_trace(std::size_t spans) {
  cuprof::trace t;
  t.meta.pid = 1;
  t.meta.window_start_ns = epoch;
  t.meta.window_end_ns = epoch + spans * 1000;
  t.meta.threads = {{1, "main"}};
  for (std::size_t i = 0; i < spans; ++i) {
    cuprof::cpu_span s;
    s.start_ns = epoch + i * 1000;
    s.end_ns = s.start_ns + 500 + i % 499;
    s.name = t.names.intern("scope number " + std::to_string(i * 7919 % 100003) + " of a rather long family of names");
    s.tid = 1;
    s.id = std::uint32_t(i + 1);
    t.spans.push_back(s);
  }
  return t;
}

// `rounds` rounds of every kind of event, with what the writer carries from
// one event to another: flows (some calls with three GPU records, the later
// two at the end of the GPU records), launch configurations shared over two
// devices, two contexts on one device, overlapping overhead records, names
// that need escapes or are not UTF-8.
cuprof::trace every_kind_trace(std::size_t rounds) {
  cuprof::trace t;
  cuprof::trace_metadata& m = t.meta;
  m.pid = pid;
  m.process_name = "proc \"quoted\" \x01";
  m.host_name = "host\\";
  m.window_start_ns = epoch;
  m.window_end_ns = epoch + rounds * 10000;
  m.threads = {{tid_main, "main"}, {tid_worker, "worker \xff"}};
  for (int id : {0, 1}) {
    cuprof::device_info d;
    d.id = id;
    d.name = "GPU \"" + std::to_string(id) + "\"";
    d.num_sms = id ? 108 : 132;
    d.max_threads_per_multiprocessor = 2048;
    d.max_blocks_per_multiprocessor = 32;
    d.regs_per_multiprocessor = 65536;
    d.shared_mem_per_multiprocessor = 233472;
    m.devices.push_back(d);
  }
  const cuprof::name_id names[] = {t.names.intern("plain"), t.names.intern("quote \" back \\ tab \t line \n"),
                                   t.names.intern("bad \xff\xfe utf-8 \xc3"), t.names.intern("control \x01\x1f \x7f"),
                                   t.names.intern("rocket \xf0\x9f\x9a\x80 \xc3\xa9")};
  for (std::uint32_t c = 0; c < 3; ++c) {
    cuprof::kernel_details k;
    k.grid[0] = 1 + c * 500, k.grid[1] = k.grid[2] = 1;
    k.block[0] = 128u << c, k.block[1] = k.block[2] = 1;
    k.registers_per_thread = 32 + 40 * c;
    k.dynamic_shared_memory = c * 4096;
    k.graph_id = c == 2 ? 9 : 0;
    t.kernels.push_back(k);
  }
  std::vector<cuprof::gpu_activity> later;  // graph nodes after the first: far from their call
  for (std::uint32_t r = 0; r < rounds; ++r) {
    const std::uint64_t now = epoch + std::uint64_t(r) * 10000;
    const std::uint32_t tid = r % 4 == 3 ? tid_worker : tid_main;
    cuprof::cpu_span s;
    s.start_ns = now;
    s.end_ns = now + 8000 + r % 7;
    s.name = names[r % 5];
    s.tid = tid;
    s.id = r + 1;
    s.first_arg = std::uint32_t(t.span_args.size());
    s.arg_count = 2;
    t.spans.push_back(s);
    cuprof::span_arg a;
    a.key = names[(r + 1) % 5];
    a.kind = r % 2 ? cuprof::span_arg::type::text : cuprof::span_arg::type::real;
    a.text = names[(r + 2) % 5];
    a.real = r * 0.125;
    t.span_args.push_back(a);
    a.key = t.names.intern("n");
    a.kind = cuprof::span_arg::type::integer;
    a.integer = -std::int64_t(r);
    t.span_args.push_back(a);
    cuprof::api_call c;
    c.start_ns = now + 1000;
    c.end_ns = now + 2000;
    c.kind = std::uint16_t(
        t.add_call_kind({names[(r + 3) % 5], 0, r % 2 ? cuprof::api_domain::driver : cuprof::api_domain::runtime, r % 11 != 10}));
    c.tid = tid;
    c.correlation = r + 1;
    t.api_calls.push_back(c);
    cuprof::gpu_activity g;
    g.start_ns = now + 3000;
    g.end_ns = now + 4000 + r % 13;
    g.name = names[(r + 4) % 5];
    g.correlation = r + 1;
    const std::uint32_t device = (r / 3) % 2;
    g.lane = t.add_gpu_lane({device, device == 1 ? 1 + r % 2 : 1, 7 + r % 2});
    g.kind = cuprof::gpu_kind(r % 4);
    g.subkind = g.kind == cuprof::gpu_kind::sync ? std::uint8_t(3 + r % 2) : std::uint8_t(r % 9);
    if (g.kind == cuprof::gpu_kind::memcpy || g.kind == cuprof::gpu_kind::memset) t.set_bytes(g, 4096 + r);
    if (g.kind == cuprof::gpu_kind::kernel) g.details = r % 3;
    t.gpu.push_back(g);
    if (g.kind == cuprof::gpu_kind::kernel && g.details == 2)
      for (std::uint64_t node = 1; node <= 2; ++node) {
        g.start_ns = now + 4500 + node * 1000;
        g.end_ns = g.start_ns + 500;
        later.push_back(g);
      }
    if (r % 10 == 0) {
      t.overhead.push_back({now, now + 3000, names[r % 5]});
      t.overhead.push_back({now + 1000, now + 5000, names[(r + 1) % 5]});
    }
  }
  t.gpu.insert(t.gpu.end(), later.begin(), later.end());
  cuprof::attribute(t);
  return t;
}

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

}  // namespace

TEST_SUITE("output_files") {

TEST_CASE("output: a device path (/dev/full, /dev/null, a link to one) is refused and left as it was") {
  const cuprof::trace t = many_spans(10);
  temp_dir dir;
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
  temp_dir dir;
  const fs::path victim = dir.path / "victim";
  { std::ofstream(victim) << "precious"; }
  // In a child, so that its pid is known before the export and a FIFO that
  // blocked it could not hang the suite. The old name was "<path>.tmp.<pid>.<n>",
  // n counting exports in the process: every n up to 2,048 is planted.
  const int rc = in_child(
      [&] {
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
      },
      20);
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
  temp_dir dir;
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
  temp_dir dir;
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
  const auto leftover = [&](pid_t writer, const std::string& tail) {
    return target + ".tmp." + std::to_string(writer) + "." + tail;
  };
  const timespec two_minutes_ago[2] = {{std::time(nullptr) - 120, 0}, {std::time(nullptr) - 120, 0}};
  const auto plant = [&](const std::string& path, bool old) {
    { std::ofstream(path) << "half a trace"; }
    if (old) REQUIRE(::utimensat(AT_FDCWD, path.c_str(), two_minutes_ago, 0) == 0);
  };
  plant(leftover(dead, "0"), true);                 // the old naming
  plant(leftover(dead, "5f3a9c01d2e4b786"), true);  // the current one
  plant(leftover(dead, "recent"), false);           // touched within the minute: maybe a writer elsewhere
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
  temp_dir dir;
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
  temp_dir dir;
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
    return count_spans(q.last_trace(), "after_full_disk") == 1 ? 0 : 23;
  });
  if (rc == 77) {
    MESSAGE("cannot mount a tmpfs here: skipped");
    return;
  }
  CHECK(rc == 0);
}

TEST_CASE("output: a trace whose name is 250 to 255 characters is written; its temporary file's name fits too") {
  const cuprof::trace t = many_spans(10);
  temp_dir dir;
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

TEST_CASE(
    "output: CUPROF_TRACE writes into the directory its path named at start, not through a symlink put in its place since") {
  temp_dir dir;
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
  CHECK(count_spans(cuprof::read_trace_file(landed.string()).t, "after_the_swap") == 1);
}

TEST_CASE("output: leftovers of a long-named trace's killed writes are known by their shortened name and removed") {
  using cuprof::detail::temporary_file_prefix;
  const cuprof::trace t = many_spans(10);
  temp_dir dir;
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
  temp_dir dir;
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

TEST_CASE(
    "output: a bound directory whose descriptor the program closed is opened by name again, only if it is the same directory") {
  const cuprof::trace t = many_spans(10);
  temp_dir dir;
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

TEST_CASE("export_chrome_trace writes the same document as chrome_trace_json, atomically") {
  fixture f;
  temp_dir dir;
  const std::string path = (dir.path / "trace.pt.trace.json").string();
  const cuprof::export_result r = cuprof::export_chrome_trace(f.t, path);
  CHECK(r.path == path);
  const std::string text = slurp(path);
  CHECK(text == cuprof::chrome_trace_json(f.t, path));
  const json doc = check_contract(text);
  CHECK(r.events == doc["traceEvents"].size());
  CHECK(dir.entries() == std::vector<std::string>{"trace.pt.trace.json"});  // no temporary left
  // Overwrites an existing file.
  std::ofstream(path) << "old";
  cuprof::export_chrome_trace(f.t, path);
  CHECK(slurp(path) == text);
  CHECK(dir.entries().size() == 1);
}

TEST_CASE("export_chrome_trace compresses when the path ends in .gz") {
  fixture f;
  temp_dir dir;
  const std::string path = (dir.path / "trace.pt.trace.json.gz").string();
  const cuprof::export_result r = cuprof::export_chrome_trace(f.t, path);
  const std::string raw = slurp(path);
  REQUIRE(raw.size() > 2);
  CHECK(static_cast<unsigned char>(raw[0]) == 0x1f);
  CHECK(static_cast<unsigned char>(raw[1]) == 0x8b);
  const std::string text = gunzip_file(path);
  CHECK(text == cuprof::chrome_trace_json(f.t, path));
  const json doc = check_contract(text);
  CHECK(r.events == doc["traceEvents"].size());
  CHECK(dir.entries() == std::vector<std::string>{"trace.pt.trace.json.gz"});
}

TEST_CASE("large traces stream through several flushes, plain and gzip") {
  const cuprof::trace t = big_trace(30000);  // several MiB of JSON
  temp_dir dir;
  const std::string plain = (dir.path / "big.json").string();
  const std::string gz = (dir.path / "big.json.gz").string();
  const cuprof::export_result a = cuprof::export_chrome_trace(t, plain);
  const cuprof::export_result b = cuprof::export_chrome_trace(t, gz);
  const std::string text = slurp(plain);
  CHECK(text.size() > (3u << 20));
  CHECK(text == cuprof::chrome_trace_json(t, plain));
  json doc;
  REQUIRE_NOTHROW(doc = json::parse(text));
  std::size_t spans = 0;
  for (const json& e : doc["traceEvents"]) spans += e["ph"] == "X";
  CHECK(spans == 30000);
  CHECK(a.events == doc["traceEvents"].size());
  CHECK(b.events == a.events);
  json doc_gz;
  REQUIRE_NOTHROW(doc_gz = json::parse(gunzip_file(gz)));
  CHECK(doc_gz["traceEvents"].size() == doc["traceEvents"].size());
  const std::string compressed = slurp(gz);
  CHECK(compressed.size() < text.size() / 4);
  // One gzip member per flushed block (compressed in parallel); the reader takes them all.
  std::size_t members = 0;
  for (std::size_t at = compressed.find("\x1f\x8b\x08"); at != std::string::npos; at = compressed.find("\x1f\x8b\x08", at + 1))
    ++members;
  CHECK(members > 1);
  const cuprof::loaded_trace back = cuprof::read_trace_file(gz);
  CHECK(back.events == doc["traceEvents"].size());
  CHECK(back.t.spans.size() == 30000);
}

TEST_CASE("blocks formatted on several threads make the serial writer's document, byte for byte, plain and gzip") {
  const cuprof::trace t = every_kind_trace(3000);
  temp_dir dir;
  const std::string plain = (dir.path / "blocks.json").string(), gz = plain + ".gz";
  // The serial writer: the whole document as one block, on this thread.
  const auto serial = [](const cuprof::trace& t, const std::string& trace_name) {
    const cuprof::detail::chrome_trace_layout whole(t, trace_name, std::numeric_limits<std::size_t>::max());
    REQUIRE(whole.block_count() == 1);
    return cuprof::detail::chrome_trace_writer(whole).document();
  };
  const std::string expected = serial(t, plain), expected_gz = serial(t, gz);
  keep_trace("writer_every_kind.json", expected);
  json doc;
  REQUIRE_NOTHROW(doc = json::parse(expected));
  const std::size_t events = doc["traceEvents"].size();
  // What crosses blocks is there: a call's first flow (v2, 2^32 + correlation: the trace
  // has v1 flows) and its second (v1, ordinal 1 in the id's high half), contexts (two on
  // device 1), GPU annotations, overhead lanes, escapes and U+FFFD.
  for (const char* part : {"\"bind_id\":4294967297,\"flow_out\":true,", "\"bind_id\":4294967297,\"flow_in\":true,",
                           "\"id\":4294967305,", "\"context\":2", "\"gpu_user_annotation\"", "\"tid\":1,", "\\u0001",
                           "\xEF\xBF\xBD", "\xf0\x9f\x9a\x80", "quote \\\" back \\\\"})
    CHECK_MESSAGE(expected.find(part) != std::string::npos, std::string(part));

  SUBCASE("export_chrome_trace: blocks of the default size, one worker per core") {
    REQUIRE(cuprof::detail::chrome_trace_layout(t, plain).block_count() > 2);
    CHECK(cuprof::export_chrome_trace(t, plain).events == events);
    CHECK(slurp(plain) == expected);
    CHECK(cuprof::export_chrome_trace(t, gz).events == events);
    CHECK(gunzip_file(gz) == expected_gz);
    CHECK(cuprof::chrome_trace_json(t, plain) == expected);
  }
  SUBCASE("small blocks; one worker, and more workers than blocks per core") {
    for (unsigned workers : {1u, 2u, 5u})
      for (const std::string& path : {plain, gz}) {
        CAPTURE(workers);
        CAPTURE(path);
        const cuprof::detail::chrome_trace_layout layout(t, path, 97);
        REQUIRE(layout.block_count() > 100);
        cuprof::detail::atomic_file file(path);
        CHECK(cuprof::detail::parallel_block_writer(layout, file, workers).run() == events);
        file.commit();
        if (path == plain) {
          CHECK(slurp(plain) == expected);
        } else {
          CHECK(gunzip_file(gz) == expected_gz);
          const cuprof::loaded_trace back = cuprof::read_trace_file(gz);
          CHECK(back.events == events);
        }
      }
  }
  SUBCASE("a first block far slower than the rest: later blocks finish first, fill every slot and wait their turn") {
    // The process name, escaped byte by byte in each of block 0's metadata
    // events, makes block 0 take milliseconds, the others microseconds.
    cuprof::trace slow_first = t;
    slow_first.meta.process_name.assign(4 << 20, '"');
    for (const std::string& path : {plain, gz}) {
      CAPTURE(path);
      const cuprof::detail::chrome_trace_layout layout(slow_first, path, 97);
      cuprof::detail::atomic_file file(path);
      CHECK(cuprof::detail::parallel_block_writer(layout, file, 2).run() == events);
      file.commit();
      CHECK((path == plain ? slurp(plain) : gunzip_file(gz)) == serial(slow_first, path));
    }
  }
}

TEST_CASE("gzip members from libdeflate and from zlib (its fallback) read back whole, concatenated") {
  std::string text;
  for (int i = 0; i < 20000; ++i) text += "{\"ph\":\"X\",\"ts\":" + std::to_string(i * 7919 % 100003) + "},\n";
  const std::string first = text.substr(0, text.size() / 3), second = text.substr(text.size() / 3);
  // libdeflate is loaded at run time, where installed: scripts/test installs it (libdeflate0).
  const cuprof::detail::libdeflate_library* libdeflate = cuprof::detail::libdeflate();
  std::vector<const cuprof::detail::libdeflate_library*> backends = {nullptr};  // null: zlib
  if (libdeflate) backends.push_back(libdeflate);
  std::string all;
  for (const cuprof::detail::libdeflate_library* backend : backends) {
    CAPTURE(backend != nullptr);
    cuprof::detail::gzip_compressor gzip(backend);
    std::string members;
    for (const std::string* block : {&first, &second}) {
      const std::string_view member = gzip.compress(block->data(), block->size());
      CHECK(member.substr(0, 3) == "\x1f\x8b\x08");
      CHECK(member.size() < block->size() / 4);
      members.append(member.data(), member.size());
    }
    CHECK(cuprof::detail::gunzip(members, "members") == text);  // the reader's, the cuprof command's
    all += members;
  }
  temp_dir dir;
  const fs::path path = dir.path / "members.gz";
  std::ofstream(path, std::ios::binary) << all;
  CHECK(gunzip_file(path) == (libdeflate ? text + text : text));  // zlib's gzread; Python's gzip (HTA) alike
  CHECK_MESSAGE(libdeflate, "libdeflate.so.0 not found (Debian: libdeflate0): only the zlib path was tested");
}

TEST_CASE("context is written for devices with work in several contexts; shared memory always, 0 included") {
  fixture f;
  cuprof::trace t = f.t;
  const auto kernel_args = [](const cuprof::trace& tr, const std::string& name) {
    const json doc = json::parse(cuprof::chrome_trace_json(tr));
    for (const json& e : doc["traceEvents"])
      if (e.value("cat", "") == "kernel" && e["name"] == name) return e["args"];
    return json();
  };
  CHECK_FALSE(kernel_args(t, "gemm").contains("context"));  // every record in context 1 of device 0
  for (cuprof::gpu_activity& g : t.gpu)
    if (t.names.str(g.name) == "nvjet") g.lane = t.add_gpu_lane({0, 2, 7});
  CHECK(kernel_args(t, "gemm")["context"] == 1);
  CHECK(kernel_args(t, "nvjet")["context"] == 2);
  const cuprof::loaded_trace back = cuprof::parse_trace(cuprof::chrome_trace_json(t), "two contexts");
  for (const cuprof::gpu_activity& g : back.t.gpu)  // the reader takes them back
    if (g.kind == cuprof::gpu_kind::kernel) CHECK(back.t.lane_of(g).context == (back.t.names.str(g.name) == "nvjet" ? 2u : 1u));
  CHECK(kernel_args(t, "gemm")["shared memory"] == 16384);
  for (cuprof::kernel_details& k : t.kernels) k.static_shared_memory = k.dynamic_shared_memory = 0;
  CHECK(kernel_args(t, "gemm")["shared memory"] == 0);  // a resource-light kernel's footprint, as Kineto writes it
}

TEST_CASE(
    "trace_detail::lean: GPU records lose device, External id and launch configuration, nothing else; the table reads back the "
    "same") {
  fixture f;
  cuprof::trace t = f.t;
  for (cuprof::gpu_activity& g : t.gpu)
    if (t.names.str(g.name) == "nvjet") g.lane = t.add_gpu_lane({0, 2, 7});  // context still says which, where it tells something
  const std::string kineto = cuprof::chrome_trace_json(t);
  const std::string lean = cuprof::chrome_trace_json(t, "cuprof", {cuprof::trace_detail::lean});
  const json dk = check_contract(kineto), dl = check_contract(lean);
  CHECK_FALSE(dk["cuprof"].contains("trace_detail"));
  CHECK(dl["cuprof"]["trace_detail"] == "lean");
  const json &ek = dk["traceEvents"], &el = dl["traceEvents"];
  REQUIRE(ek.size() == el.size());
  const std::set<std::string> dropped = {"device", "External id", "registers per thread",     "shared memory",
                                         "grid",   "block",       "est. achieved occupancy %"};
  std::size_t lean_records = 0;
  for (std::size_t i = 0; i < ek.size(); ++i) {
    json expected = ek[i];
    const std::string cat = expected.value("cat", "");
    CAPTURE(cat);
    CAPTURE(expected.value("name", ""));
    if (cat == "kernel" || cat == "gpu_memcpy" || cat == "gpu_memset") {
      ++lean_records;
      for (const std::string& key : dropped) expected["args"].erase(key);
      CHECK(el[i]["args"].contains("stream"));
      CHECK(el[i]["args"].contains("correlation"));
    }
    CHECK(el[i] == expected);  // the same slice, flow members and other args, in the same place
  }
  CHECK(lean_records == 8);  // six kernels, a copy, a memset
  for (const json& e : el)
    if (e.value("name", "") == "graph_node_a") CHECK(e["args"]["graph id"] == 2);  // a node's identity stays
  const cuprof::loaded_trace back = cuprof::parse_trace(lean, "lean");
  CHECK(back.unmatched_annotations == 0);
  for (const char* key : {"cuda_time_total", "cpu_time_total", "self_cuda_time_total", "count"}) {
    CAPTURE(key);
    CHECK(cuprof::key_averages(back.t).table(key, -1) == cuprof::key_averages(t).table(key, -1));
  }
  for (const cuprof::gpu_activity& g : back.t.gpu) {
    CHECK(back.t.lane_of(g).device == 0);  // from the lane
    if (g.kind == cuprof::gpu_kind::kernel) CHECK(back.t.lane_of(g).context == (back.t.names.str(g.name) == "nvjet" ? 2u : 1u));
  }
}

TEST_CASE("export failures throw cuprof::error, leave no temporary file and keep the old target") {
  fixture f;
  temp_dir dir;

  SUBCASE("the path is a directory") {
    const fs::path target = dir.path / "a_directory.json";
    fs::create_directory(target);
    CHECK(export_must_fail(f.t, target.string(), "not a regular file") == 0);
    CHECK(fs::is_directory(target));
    CHECK(fs::is_empty(target));
  }
  SUBCASE("the parent directory does not exist") {
    const std::string target = (dir.path / "missing" / "trace.json").string();
    CHECK(export_must_fail(f.t, target, "No such file or directory") == 0);
    CHECK(export_must_fail(f.t, target + ".gz", "cannot create") == 0);
    CHECK_FALSE(fs::exists(dir.path / "missing"));
  }
  SUBCASE("an empty path") { CHECK_THROWS_AS(cuprof::export_chrome_trace(f.t, ""), cuprof::error); }
  SUBCASE("an unwritable directory (as an unprivileged user)") {
    const fs::path ro = dir.path / "read_only";
    fs::create_directory(ro);
    fs::permissions(dir.path, fs::perms::owner_all | fs::perms::others_exec | fs::perms::group_exec);
    fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec | fs::perms::others_read | fs::perms::others_exec |
                            fs::perms::group_read | fs::perms::group_exec);
    std::ofstream(ro / "existing.json") << "old";  // root may still write it
    const std::string target = (ro / "existing.json").string();
    const std::string fresh = (ro / "new.json.gz").string();
    const int rc = in_child([&] {
      if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) return 77;  // cannot drop root
      const int a = export_must_fail(f.t, target, "Permission denied");
      if (a) return 20 + a;
      const int b = export_must_fail(f.t, fresh, "cannot create");
      return b ? 30 + b : 0;
    });
    if (rc == 77) {
      MESSAGE("running as root without the right to change user: skipped");
      return;
    }
    CHECK(rc == 0);
    CHECK(slurp(target) == "old");
    CHECK_FALSE(fs::exists(fresh));
    CHECK_FALSE(leftover_temp(dir.path));
  }
  SUBCASE("a write that fails midway (file size limit) keeps the previous file") {
    const cuprof::trace big = big_trace(20000);
    for (const char* name : {"limited.json", "limited.json.gz"}) {
      CAPTURE(name);
      const std::string target = (dir.path / name).string();
      std::ofstream(target) << "previous contents";
      const int rc = in_child([&] {
        ::signal(SIGXFSZ, SIG_IGN);
        rlimit lim{};
        lim.rlim_cur = lim.rlim_max = 64 * 1024;
        if (::setrlimit(RLIMIT_FSIZE, &lim) != 0) return 10;
        return export_must_fail(big, target, "cannot write");
      });
      CHECK(rc == 0);
      CHECK(slurp(target) == "previous contents");
    }
  }
  CHECK_FALSE(leftover_temp(dir.path));
}

TEST_CASE("two threads exporting to the same path at once leave one whole, valid trace") {
  // Each export must write its own temporary file: sharing one interleaves
  // the two documents and makes the second rename fail.
  const cuprof::trace a = big_trace(30000), b = big_trace(20000);
  temp_dir dir;
  const std::string path = (dir.path / "shared.json").string();
  const std::string text_a = cuprof::chrome_trace_json(a, path), text_b = cuprof::chrome_trace_json(b, path);
  int failures = 0, corrupt = 0;
  for (int round = 0; round < 3; ++round) {
    std::atomic<int> threw{0};
    const auto export_one = [&](const cuprof::trace& t) {
      try {
        cuprof::export_chrome_trace(t, path);
      } catch (const std::exception&) {
        ++threw;
      }
    };
    std::thread t1(export_one, std::cref(a));
    std::thread t2(export_one, std::cref(b));
    t1.join();
    t2.join();
    failures += threw.load();
    const std::string text = slurp(path);
    corrupt += text != text_a && text != text_b;
  }
  CHECK(failures == 0);
  CHECK(corrupt == 0);
  CHECK_FALSE(leftover_temp(dir.path));
}

}  // TEST_SUITE("output_files")
