// The control endpoint of `cuprof trigger` (runtime/control_endpoint.hpp) and
// the command's side of it (tools/cli/trigger_command.hpp): the directory's
// and socket's permissions, other users, concurrent triggers, a process that
// ends during its window, stale endpoints, hostile requests. The endpoint runs
// in a forked child (its thread stays out of this process, which later cases
// fork from); the clients run here, raw or as `cuprof trigger`.

#include <cuprof/runtime/control_endpoint.hpp>

#include "support/child_process.hpp"
#include "support/cli.hpp"
#include "support/files.hpp"

#include <doctest/doctest.h>

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using namespace cuprof_test;
using cuprof::detail::control_endpoint;
using cuprof::detail::trigger_reply;
using cuprof::detail::trigger_request;

namespace {

// How the test's windows end: after their duration (written), inside the
// handler (finish() before the "ok" is sent), by the process's _exit, or only
// when cancelled (a window for steps that never begin).
enum class window_end { after_duration, inside_handler, process_exits, when_cancelled };

struct test_server {
  std::atomic<control_endpoint*> endpoint{nullptr};
  window_end ending = window_end::after_duration;
  std::atomic<bool> idle{true};
};

test_server g_server;

void end_window(double seconds, std::string path) {
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  if (g_server.ending == window_end::process_exits) ::_exit(0);
  g_server.idle.store(true);
  g_server.endpoint.load()->finish(true, path + " (test)");
}

// The test's handler: accepts when no window of its own is open.
trigger_reply test_handler(const trigger_request& r) {
  if (!g_server.idle.exchange(false)) return {false, "busy: the test's own window"};
  while (!g_server.endpoint.load()) std::this_thread::yield();  // open() has not returned yet
  const std::string path = r.output.empty() ? "/default/trace.json" : r.output;
  if (g_server.ending == window_end::inside_handler) {
    g_server.idle.store(true);
    g_server.endpoint.load()->finish(true, path + " (test)");
  } else if (g_server.ending == window_end::when_cancelled) {
    // Waits for test_cancel().
  } else {
    std::thread(&end_window, r.steps > 0 ? 0.2 : r.duration_s, path).detach();
  }
  return {true, path};
}

// The test's canceller: the window waiting for its steps is dropped, its client told.
bool test_cancel() {
  if (g_server.idle.load()) return false;
  g_server.idle.store(true);
  g_server.endpoint.load()->finish(false, "cancelled (test)");
  return true;
}

// XDG_RUNTIME_DIR on a fresh private directory: the endpoints go to its cuprof/.
struct runtime_dir {
  temp_dir tmp;
  scoped_env xdg{"XDG_RUNTIME_DIR", tmp.path.c_str()};
  std::string dir() const { return tmp.file("cuprof"); }
  std::string socket_of(pid_t pid) const { return dir() + "/" + std::to_string(pid) + ".sock"; }
};

bool exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

bool wait_for(const std::string& path, double seconds = 10) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!exists(path)) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

int connect_to(const std::string& path);
void send_all(int fd, const std::string& bytes);
std::string read_all(int fd, double seconds = 10);

// A process with an endpoint (served by test_handler) until this object goes:
// then it closes the endpoint and exits. Its stderr goes to `log`.
class served_process {
 public:
  // `at_fd_limit`: once its endpoint is open, the process has no descriptor to spare (RLIMIT_NOFILE).
  served_process(const runtime_dir& where, window_end ending, const std::string& log, bool fork_a_child = false,
                 bool at_fd_limit = false) {
    int go[2];
    REQUIRE(::pipe2(go, O_CLOEXEC) == 0);
    std::fflush(nullptr);
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      ::close(go[1]);
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      ::dup2(fd, 2);
      g_server.ending = ending;
      control_endpoint* e = control_endpoint::open(&test_handler, nullptr, &test_cancel);
      if (!e) ::_exit(3);
      g_server.endpoint.store(e);
      if (fork_a_child) {  // a child that closes "its" endpoint and exits through exit()
        const pid_t child = ::fork();
        if (child == 0) {
          e->close();
          std::exit(0);
        }
        ::waitpid(child, nullptr, 0);
      }
      rlimit before{};
      if (at_fd_limit) {  // every descriptor below the limit taken: the gaps filled, the soft limit just above
        // First a request answered: the endpoint's thread has started. UBSan's check of std::thread's
        // state object (at the thread's start and end) probes memory through a pipe; at the limit it
        // finds no descriptor and reports an invalid vptr. So the limit is lifted again before the
        // end: closing a few descriptors would not do, as the endpoint then accepts the waiting
        // connection and takes one of them while its thread ends.
        const int self = connect_to(where.socket_of(::getpid()));
        if (self < 0) ::_exit(5);
        send_all(self, cuprof::detail::format_status_request());
        if (read_all(self).empty()) ::_exit(6);
        ::close(self);
        int highest = 0;
        if (DIR* d = ::opendir("/proc/self/fd")) {
          while (const dirent* f = ::readdir(d)) highest = std::max(highest, std::atoi(f->d_name));
          ::closedir(d);
        }
        for (int fd = 0; fd >= 0 && fd < highest;) fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (::getrlimit(RLIMIT_NOFILE, &before) != 0) ::_exit(4);
        const rlimit r{rlim_t(highest), before.rlim_max};  // descriptors 0 to highest - 1, all open
        if (::setrlimit(RLIMIT_NOFILE, &r) != 0) ::_exit(4);
      }
      char byte;
      while (::read(go[0], &byte, 1) != 0) {}
      if (at_fd_limit && ::setrlimit(RLIMIT_NOFILE, &before) != 0) ::_exit(7);
      e->close();
      e->close();
      ::_exit(0);
    }
    ::close(go[0]);
    stop_ = go[1];
    REQUIRE(wait_for(where.socket_of(pid_)));
  }
  ~served_process() { end(); }
  pid_t pid() const { return pid_; }
  // Closes the endpoint, waits for the process; its exit status.
  int end() {
    if (stop_ >= 0) {
      ::close(stop_);
      stop_ = -1;
      status_ = wait_or_kill(pid_, 10);
    }
    return status_;
  }

 private:
  pid_t pid_ = -1;
  int stop_ = -1, status_ = -1;
};

int connect_to(const std::string& path) {
  sockaddr_un address;
  REQUIRE(cuprof::detail::unix_address(path, address));
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

void send_all(int fd, const std::string& bytes) {
  for (std::size_t done = 0; done < bytes.size();) {
    const ssize_t n = ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n <= 0) return;  // the endpoint closed early (an over-long line)
    done += std::size_t(n);
  }
}

// Everything the endpoint says until it closes the connection (or `seconds` pass).
std::string read_all(int fd, double seconds) {
  std::string text;
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  char buffer[4096];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    if (left.count() <= 0 || ::poll(&p, 1, int(left.count())) <= 0) break;
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) break;
    text.append(buffer, std::size_t(n));
  }
  return text;
}

// One request, every line of the answer.
std::string ask(const std::string& path, const std::string& request) {
  const int fd = connect_to(path);
  REQUIRE(fd >= 0);
  send_all(fd, request);
  std::string answer = read_all(fd);
  ::close(fd);
  return answer;
}

std::string window_request(const std::string& fields) { return "cuprof-trigger 1 window " + fields + "\n"; }

std::string mode_of(const std::string& path) {
  struct stat st {};
  REQUIRE(::lstat(path.c_str(), &st) == 0);
  char text[8];
  std::snprintf(text, sizeof text, "%03o", unsigned(st.st_mode & 0777));
  return text;
}

}  // namespace

TEST_SUITE("runtime_trigger") {

TEST_CASE("trigger requests: the version-1 line parses strictly; numbers are plain digits; paths absolute, no controls") {
  using cuprof::detail::control_request;
  using cuprof::detail::parse_control_request;
  control_request r;
  std::string why;
  REQUIRE(parse_control_request("cuprof-trigger 1 window duration_ms=1500 steps=0 output=/a b/t.json", r, why));
  CHECK(!r.status);
  CHECK(r.window.duration_s == doctest::Approx(1.5));
  CHECK(r.window.output == "/a b/t.json");
  REQUIRE(parse_control_request("cuprof-trigger 1 window duration_ms=0 steps=0 output=", r, why));
  CHECK(r.window.duration_s == cuprof::detail::trigger_default_seconds);  // neither: the default
  CHECK(r.window.output.empty());
  REQUIRE(parse_control_request("cuprof-trigger 1 window duration_ms=0 steps=7 output=", r, why));
  CHECK(r.window.duration_s == 0);
  CHECK(r.window.steps == 7);
  REQUIRE(parse_control_request("cuprof-trigger 1 status", r, why));
  CHECK(r.status);
  // What the client sends parses back to itself.
  trigger_request sent;
  sent.duration_s = 0.25;
  sent.output = "/x/y z.json";
  const std::string line = cuprof::detail::format_trigger_request(sent);
  REQUIRE(line.back() == '\n');
  REQUIRE(parse_control_request(std::string_view(line).substr(0, line.size() - 1), r, why));
  CHECK(r.window.duration_s == doctest::Approx(0.25));
  CHECK(r.window.output == sent.output);
  const std::pair<const char*, const char*> refused[] = {
      {"", "not a cuprof-trigger request"},
      {"GET / HTTP/1.1", "not a cuprof-trigger request"},
      {"cuprof-trigger 2 status", "protocol version 2 not spoken here"},
      {"cuprof-trigger 1", "unknown request"},
      {"cuprof-trigger 1 status ", "unknown request"},
      {"cuprof-trigger 1 window", "unknown request"},
      {"cuprof-trigger 1 window duration_ms=1", "a window request is"},
      {"cuprof-trigger 1 window duration_ms=+5 steps=0 output=", "duration_ms is not"},
      {"cuprof-trigger 1 window duration_ms= 5 steps=0 output=", "duration_ms is not"},
      {"cuprof-trigger 1 window duration_ms=0x10 steps=0 output=", "duration_ms is not"},
      {"cuprof-trigger 1 window duration_ms=1e3 steps=0 output=", "duration_ms is not"},
      {"cuprof-trigger 1 window duration_ms=99999999999999999999 steps=0 output=", "duration_ms is not"},
      {"cuprof-trigger 1 window duration_ms=86400001 steps=0 output=", "duration_ms is not"},  // a day at most
      {"cuprof-trigger 1 window duration_ms=10000000000 steps=0 output=", "duration_ms is not"},
      {"cuprof-trigger 1 window duration_ms=0 steps=-1 output=", "steps is not"},
      {"cuprof-trigger 1 window duration_ms=0 steps=1073741824 output=", "steps is not"},
      {"cuprof-trigger 1 window duration_ms=1000 steps=3 output=", "not both"},
      {"cuprof-trigger 1 window duration_ms=0 steps=0 output=t.json", "not absolute"},
      {"cuprof-trigger 1 window duration_ms=0 steps=0 output=/t\x1b]0;x\x07.json", "control character"},
      {"cuprof-trigger 1 window duration_ms=0 steps=0 output=/t\r.json", "control character"},
      {"cuprof-trigger 1 window duration_ms=0 steps=0 output=/t\x7f", "control character"},
      {"cuprof-trigger 1 window output=/t steps=0 duration_ms=0", "unknown request"},
  };
  for (const auto& [text, expected] : refused) {
    CAPTURE(text);
    why.clear();
    CHECK(!parse_control_request(text, r, why));
    CHECK(why.find(expected) != std::string::npos);
    CHECK(!cuprof::detail::has_control_character(why));
  }
}

TEST_CASE("the endpoints' directory is made 0700 and checked: a link, another user's or a group-writable one is refused") {
  runtime_dir where;
  std::string why;
  CHECK(cuprof::detail::control_directory_path() == where.dir());
  REQUIRE(cuprof::detail::control_directory(true, why) == where.dir());
  CHECK(mode_of(where.dir()) == "700");
  CHECK(cuprof::detail::control_directory(true, why) == where.dir());  // there already: used as it is

  REQUIRE(::chmod(where.dir().c_str(), 0770) == 0);
  why.clear();
  CHECK(cuprof::detail::control_directory(true, why).empty());
  CHECK(why.find("group or others may use it (mode 770)") != std::string::npos);

  REQUIRE(::rmdir(where.dir().c_str()) == 0);
  REQUIRE(::mkdir(where.tmp.file("elsewhere").c_str(), 0700) == 0);
  REQUIRE(::symlink(where.tmp.file("elsewhere").c_str(), where.dir().c_str()) == 0);
  why.clear();
  CHECK(cuprof::detail::control_directory(true, why).empty());
  CHECK(why.find("symbolic link") != std::string::npos);
  REQUIRE(::unlink(where.dir().c_str()) == 0);

  REQUIRE(::mkdir(where.dir().c_str(), 0700) == 0);
  if (::geteuid() == 0) {
    REQUIRE(::chown(where.dir().c_str(), 65534, 65534) == 0);
    why.clear();
    CHECK(cuprof::detail::control_directory(true, why).empty());
    CHECK(why.find("belongs to uid 65534") != std::string::npos);
  } else {
    MESSAGE("not root: the case of a directory owned by another user is skipped (it needs chown)");
  }

  // No endpoint in a directory that cannot be trusted: one line, no socket.
  const std::string log = where.tmp.file("log");
  const int rc = in_child([&] {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(fd, 2);
    REQUIRE(::chmod(where.dir().c_str(), 0755) == 0);
    REQUIRE(::chown(where.dir().c_str(), ::geteuid(), ::getegid()) == 0);
    return control_endpoint::open(&test_handler) == nullptr ? 0 : 1;
  });
  CHECK(rc == 0);
  CHECK(slurp(log) ==
        "cuprof: no control endpoint (cuprof trigger): " + where.dir() + ": group or others may use it (mode 755)\n");
  CHECK(where.tmp.entries() == std::vector<std::string>{"cuprof", "elsewhere", "log"});
  CHECK(fs::is_empty(where.dir()));

  // XDG_RUNTIME_DIR that is not private to this user is not used.
  REQUIRE(::chmod(where.tmp.path.c_str(), 0777) == 0);
  CHECK(cuprof::detail::control_directory_path() == "/tmp/cuprof-" + std::to_string(::geteuid()));
  REQUIRE(::chmod(where.tmp.path.c_str(), 0700) == 0);
  scoped_env relative("XDG_RUNTIME_DIR", "run/user");
  CHECK(cuprof::detail::control_directory_path() == "/tmp/cuprof-" + std::to_string(::geteuid()));
}

TEST_CASE("an endpoint: <pid>.sock, 0600, owned by this user, answering status; removed by close(); fds close on exec") {
  runtime_dir where;
  const std::string log = where.tmp.file("log");
  std::set<std::string> inherited;  // what this process has open, from whoever started it
  for (const auto& entry : fs::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    inherited.insert(fs::read_symlink(entry.path(), ec).string());
  }
  served_process server(where, window_end::after_duration, log);
  const std::string path = where.socket_of(server.pid());
  struct stat st {};
  REQUIRE(::lstat(path.c_str(), &st) == 0);
  CHECK(S_ISSOCK(st.st_mode));
  CHECK(mode_of(path) == "600");
  CHECK(st.st_uid == ::geteuid());
  CHECK(mode_of(where.dir()) == "700");
  CHECK(std::distance(fs::directory_iterator(where.dir()), fs::directory_iterator{}) == 1);  // no temporary name left
  CHECK(ask(path, "cuprof-trigger 1 status\n") ==
        "status pid=" + std::to_string(server.pid()) + " window=closed name=" + cuprof::detail::process_name() + "\n");
  // The endpoint's descriptors are close-on-exec: a program the process runs gets none of them.
  int unflagged = 0;
  for (const auto& entry : fs::directory_iterator("/proc/" + std::to_string(server.pid()) + "/fd")) {
    const int fd = std::stoi(entry.path().filename().string());
    if (fd <= 2) continue;
    const std::string info = slurp("/proc/" + std::to_string(server.pid()) + "/fdinfo/" + std::to_string(fd));
    const std::size_t flags_at = info.find("flags:");
    REQUIRE(flags_at != std::string::npos);
    const unsigned long flags = std::stoul(info.substr(flags_at + 6), nullptr, 8);
    const std::string target = fs::read_symlink(entry.path()).string();
    if ((target.rfind("socket:", 0) == 0 || target.rfind("pipe:", 0) == 0) && !inherited.count(target) && !(flags & O_CLOEXEC)) {
      MESSAGE("not close-on-exec: fd " << fd << ", " << target);
      ++unflagged;
    }
  }
  CHECK(unflagged == 0);
  CHECK(server.end() == 0);
  CHECK(!exists(path));
  CHECK(slurp(log).empty());
}

TEST_CASE("another user is refused: by the directory's permissions, and by the peer's uid with a line logged (as root)") {
  if (::geteuid() != 0) {
    MESSAGE("not root: skipped (the case needs a second user: a child that setuid()s to nobody, 65534)");
    return;
  }
  runtime_dir where;
  const std::string log = where.tmp.file("log");
  served_process server(where, window_end::after_duration, log);
  const std::string path = where.socket_of(server.pid());
  // As nobody: 10 when connect() fails for want of permission, 20 when the endpoint answers "refused" for the uid.
  const auto as_nobody = [&] {
    return in_child([&] {
      if (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0) return 1;
      sockaddr_un address;
      cuprof::detail::unix_address(path, address);
      const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
      if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) return errno == EACCES ? 10 : 2;
      send_all(fd, window_request("duration_ms=100 steps=0 output="));
      const std::string answer = read_all(fd);
      return answer == "refused uid 65534 may not trigger this process (only uid 0)\n" ? 20 : 3;
    });
  };
  CHECK(as_nobody() == 10);
  // Opened up by hand: the endpoint itself still refuses the other uid.
  for (const std::string& p : {where.tmp.path.string(), where.dir()}) REQUIRE(::chmod(p.c_str(), 0711) == 0);
  REQUIRE(::chmod(path.c_str(), 0666) == 0);
  CHECK(as_nobody() == 20);
  CHECK(ask(path, "cuprof-trigger 1 status\n").find("window=closed") != std::string::npos);  // nothing was opened
  CHECK(server.end() == 0);
  const std::string said = slurp(log);
  CHECK(lines(said) == 1);
  CHECK(said.find("cuprof: refused a trigger from uid 65534 (pid ") == 0);
}

TEST_CASE("two triggers at once: exactly one window, the other refused busy; the next after it is accepted") {
  runtime_dir where;
  served_process server(where, window_end::after_duration, where.tmp.file("log"));
  const std::string path = where.socket_of(server.pid());
  const int a = connect_to(path), b = connect_to(path);
  REQUIRE(a >= 0);
  REQUIRE(b >= 0);
  send_all(a, window_request("duration_ms=500 steps=0 output=/a.json"));
  send_all(b, window_request("duration_ms=500 steps=0 output=/b.json"));
  const std::string from_a = read_all(a), from_b = read_all(b);
  ::close(a);
  ::close(b);
  const std::vector<std::string> answers = {from_a, from_b};
  int accepted = 0, busy = 0;
  for (const std::string& answer : answers) {
    CAPTURE(answer);
    if (answer.rfind("ok /", 0) == 0) {
      ++accepted;
      CHECK(lines(answer) == 2);
      CHECK(answer.find("\nwritten /") != std::string::npos);
    } else {
      busy += answer.rfind("refused busy: another trigger's window is open (asked by pid " + std::to_string(::getpid()) + ")\n",
                           0) == 0;
    }
  }
  CHECK(accepted == 1);
  CHECK(busy == 1);
  // Its window over, the endpoint takes the next.
  CHECK(ask(path, window_request("duration_ms=10 steps=0 output=/c.json")) == "ok /c.json\nwritten /c.json (test)\n");
}

TEST_CASE("cuprof trigger: the window, its trace's line, exit 0; --steps; a relative --output from the client's directory") {
  runtime_dir where;
  served_process server(where, window_end::after_duration, where.tmp.file("log"));
  const std::string pid = std::to_string(server.pid());
  cli_run r = cli({"trigger", pid, "--duration", "0.1s"});
  CHECK(r.rc == 0);
  CHECK(r.out == "pid " + pid + ": window open for 0.1 s, trace to /default/trace.json\npid " + pid +
                     ": trace written: /default/trace.json (test)\n");
  CHECK(r.err.empty());
  r = cli({"trigger", pid, "--steps", "3", "--output", "rel/t.json"});
  CHECK(r.rc == 0);
  const std::string cwd = fs::current_path().string();
  CHECK(r.out == "pid " + pid + ": window open for 3 steps, trace to " + cwd + "/rel/t.json\npid " + pid +
                     ": trace written: " + cwd + "/rel/t.json (test)\n");
  // --list shows it with its program's name.
  r = cli({"trigger", "--list"});
  CHECK(r.rc == 0);
  CHECK(r.out == "PID      WINDOW  PROGRAM\n" + pid + std::string(9 - std::min<std::size_t>(pid.size(), 8), ' ') + "closed  " +
                     cuprof::detail::process_name() + "\n");
}

TEST_CASE("a window finished inside the handler: the client still gets ok first, then written") {
  runtime_dir where;
  served_process server(where, window_end::inside_handler, where.tmp.file("log"));
  const std::string path = where.socket_of(server.pid());
  CHECK(ask(path, window_request("duration_ms=0 steps=0 output=/fast.json")) == "ok /fast.json\nwritten /fast.json (test)\n");
  CHECK(ask(path, window_request("duration_ms=0 steps=0 output=/again.json")) == "ok /again.json\nwritten /again.json (test)\n");
}

TEST_CASE("a process that ends during its window: the client sees the connection end and says so, exit 1") {
  runtime_dir where;
  served_process server(where, window_end::process_exits, where.tmp.file("log"));
  const std::string pid = std::to_string(server.pid());
  const cli_run r = cli({"trigger", pid, "--duration", "0.2", "--output", "/t.json"});
  CHECK(r.rc == 1);
  CHECK(r.out == "pid " + pid + ": window open for 0.2 s, trace to /t.json\n");
  CHECK(r.err == "cuprof: pid " + pid + ": the process ended during the window (its exit writes what was recorded)\n");
  CHECK(server.end() == 0);
}

TEST_CASE("stale endpoints: a dead pid's is reported and removed by --list; the process that gets the pid replaces it") {
  runtime_dir where;
  // A process that made its endpoint and ended without removing it (_exit, as a crash would).
  pid_t dead = 0;
  {
    std::fflush(nullptr);
    dead = ::fork();
    REQUIRE(dead >= 0);
    if (dead == 0) {
      ::dup2(::open("/dev/null", O_WRONLY), 2);
      ::_exit(control_endpoint::open(&test_handler) ? 0 : 3);
    }
    REQUIRE(wait_or_kill(dead, 10) == 0);
  }
  const std::string stale = where.socket_of(dead);
  REQUIRE(exists(stale));
  cli_run r = cli({"trigger", std::to_string(dead)});
  CHECK(r.rc == 1);
  CHECK(r.err == "cuprof: pid " + std::to_string(dead) +
                     " is not running (its stale endpoint is left: cuprof trigger --list removes it)\n");
  // This process's pid with a socket nothing listens on: another process's, before the pid came back.
  const std::string mine = where.socket_of(::getpid());
  {
    sockaddr_un address;
    REQUIRE(cuprof::detail::unix_address(mine, address));
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
    ::close(fd);
  }
  r = cli({"trigger", std::to_string(::getpid())});
  CHECK(r.rc == 1);
  CHECK(r.err == "cuprof: pid " + std::to_string(::getpid()) +
                     "'s endpoint is stale: the process that made it ended and the pid is another process's now (cuprof "
                     "trigger --list removes it)\n");
  served_process live(where, window_end::after_duration, where.tmp.file("log"));
  r = cli({"trigger", "--list"});
  CHECK(r.rc == 0);
  const std::string row = std::to_string(live.pid()) + std::string(9 - std::to_string(live.pid()).size(), ' ') + "closed  ";
  CHECK(r.out.find("PID      WINDOW  PROGRAM\n" + row) == 0);
  CHECK(r.out.find("removed a stale endpoint: pid " + std::to_string(dead) + " is not running\n") != std::string::npos);
  CHECK(r.out.find("removed a stale endpoint: pid " + std::to_string(::getpid()) + " is another process now\n") !=
        std::string::npos);
  CHECK(!exists(stale));
  CHECK(!exists(mine));
  CHECK(exists(where.socket_of(live.pid())));
  r = cli({"trigger", "--list"});
  CHECK(r.out.find("removed") == std::string::npos);

  // A process that starts with a pid whose stale socket is there replaces it: made for the next
  // child's pid by hand, the child opening its endpoint once it is there.
  int go[2];
  REQUIRE(::pipe(go) == 0);
  std::fflush(nullptr);
  const pid_t next = ::fork();
  REQUIRE(next >= 0);
  if (next == 0) {
    ::close(go[1]);
    ::dup2(::open("/dev/null", O_WRONLY), 2);
    char byte;
    if (::read(go[0], &byte, 1) != 1) ::_exit(4);
    control_endpoint* e = control_endpoint::open(&test_handler);
    if (!e) ::_exit(3);
    while (::read(go[0], &byte, 1) != 0) {}
    e->close();
    ::_exit(0);
  }
  ::close(go[0]);
  const std::string replaced = where.socket_of(next);
  {
    sockaddr_un address;
    REQUIRE(cuprof::detail::unix_address(replaced, address));
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
    ::close(fd);
  }
  REQUIRE(::write(go[1], "x", 1) == 1);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  std::string answer;
  while (answer.empty() && std::chrono::steady_clock::now() < until) {
    const int fd = connect_to(replaced);
    if (fd < 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      continue;
    }
    send_all(fd, "cuprof-trigger 1 status\n");
    answer = read_all(fd);
    ::close(fd);
  }
  CHECK(answer.rfind("status pid=" + std::to_string(next) + " window=closed", 0) == 0);
  ::close(go[1]);
  CHECK(wait_or_kill(next, 10) == 0);
  CHECK(!exists(replaced));
}

TEST_CASE("hostile requests: each is refused with one line and the endpoint keeps serving") {
  runtime_dir where;
  const std::string log = where.tmp.file("log");
  served_process server(where, window_end::after_duration, log);
  const std::string path = where.socket_of(server.pid());
  const std::pair<std::string, std::string> cases[] = {
      {std::string(5000, 'a'), "refused the request is longer than 4096 bytes\n"},
      {"cuprof-trigger 1 window duration_ms=0 steps=0 output=/" + std::string(5000, 'x') + "\n",
       "refused the request is longer than 4096 bytes\n"},
      {"garbage\n", "refused not a cuprof-trigger request\n"},
      {std::string("\0\xff\x1b[31m\n", 8), "refused not a cuprof-trigger request\n"},
      {"cuprof-trigger 99 status\n", "refused protocol version 99 not spoken here (this process speaks 1)\n"},
      {"cuprof-trigger \x1b]0;pwned\x07 status\n",
       "refused protocol version \\x1b]0;pwned\\x07 not spoken here (this process speaks 1)\n"},
      {window_request("duration_ms=0 steps=0 output=/t\x1b[2J.json"), "refused the output path has a control character\n"},
      {window_request("duration_ms=0 steps=0 output=/t\t.json"), "refused the output path has a control character\n"},
      {window_request("duration_ms=18446744073709551617 steps=0 output="),
       "refused duration_ms is not a whole number of milliseconds up to 86400000\n"},
      {window_request("duration_ms=0 steps=99999999999 output="), "refused steps is not a whole number up to 1073741823\n"},
      {window_request("duration_ms=-1 steps=0 output="),
       "refused duration_ms is not a whole number of milliseconds up to 86400000\n"},
      {window_request("duration_ms=5 steps=5 output="), "refused a window lasts a duration or a number of steps, not both\n"},
      {window_request("duration_ms=5 steps=0 output=relative.json"), "refused the output path is not absolute\n"},
  };
  for (const auto& [request, answer] : cases) {
    CAPTURE(request.substr(0, 80));
    CHECK(ask(path, request) == answer);
  }
  // A client that says nothing and goes, one that sends half a line and goes, one that sends nothing in time.
  for (const std::string partial : {"", "cuprof-trigger 1 win"}) {
    const int fd = connect_to(path);
    REQUIRE(fd >= 0);
    send_all(fd, partial);
    ::close(fd);
  }
  const int silent = connect_to(path);
  REQUIRE(silent >= 0);
  CHECK(read_all(silent, 5) == "refused no request line within 2000 ms\n");
  ::close(silent);
  // Still serving.
  CHECK(ask(path, "cuprof-trigger 1 status\n").rfind("status pid=" + std::to_string(server.pid()) + " window=closed", 0) == 0);
  CHECK(ask(path, window_request("duration_ms=10 steps=0 output=/ok.json")) == "ok /ok.json\nwritten /ok.json (test)\n");
  CHECK(server.end() == 0);
  CHECK(slurp(log).empty());
}

TEST_CASE("a forked child neither serves nor removes its parent's endpoint") {
  runtime_dir where;
  served_process server(where, window_end::after_duration, where.tmp.file("log"), /*fork_a_child=*/true);
  const std::string path = where.socket_of(server.pid());
  CHECK(exists(path));
  CHECK(ask(path, "cuprof-trigger 1 status\n").rfind("status pid=" + std::to_string(server.pid()) + " ", 0) == 0);
  CHECK(ask(path, window_request("duration_ms=10 steps=0 output=/p.json")) == "ok /p.json\nwritten /p.json (test)\n");
}

// A process at its descriptor limit cannot accept: the endpoint backs off instead of polling the
// same failure at full speed for the rest of the process's life.
TEST_CASE("an endpoint in a process out of descriptors backs off: no busy loop while a connection waits") {
  runtime_dir where;
  const std::string log = where.tmp.file("log");
  served_process server(where, window_end::after_duration, log, false, /*at_fd_limit=*/true);
  const auto cpu_ticks = [&] {  // utime + stime of the server, in clock ticks
    std::ifstream stat("/proc/" + std::to_string(server.pid()) + "/stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    std::istringstream fields(text.substr(text.rfind(')') + 2));
    std::string field;
    long long ticks = 0;
    for (int i = 3; i <= 15 && fields >> field; ++i)
      if (i >= 14) ticks += std::stoll(field);
    return ticks;
  };
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the limit is set once the endpoint is there
  const int fd = connect_to(where.socket_of(server.pid()));
  REQUIRE(fd >= 0);
  send_all(fd, cuprof::detail::format_status_request());
  const long long before = cpu_ticks();
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const long long used = cpu_ticks() - before;
  ::close(fd);
  CAPTURE(used);
  CHECK(used < ::sysconf(_SC_CLK_TCK) / 4);  // under a quarter of a second of CPU in two; a busy loop takes two
  const int status = server.end();
  CAPTURE(slurp(log));
  CHECK(status == 0);
}

// 30 connections that send nothing: each is given its time at once, and a status request
// after them is answered without waiting for theirs to run out.
TEST_CASE("silent connections hold back no other: a status request after 30 of them is answered first") {
  runtime_dir where;
  served_process server(where, window_end::after_duration, where.tmp.file("log"));
  const std::string path = where.socket_of(server.pid());
  std::vector<int> silent;
  for (int i = 0; i < 30; ++i) {
    const int fd = connect_to(path);
    REQUIRE(fd >= 0);
    silent.push_back(fd);
  }
  const std::string answer = ask(path, cuprof::detail::format_status_request());
  int refused = 0;  // silent ones answered by then
  for (const int fd : silent) {
    char byte;
    refused += ::recv(fd, &byte, 1, MSG_DONTWAIT | MSG_PEEK) > 0;
  }
  CHECK(answer.rfind("status pid=" + std::to_string(server.pid()) + " window=closed", 0) == 0);
  CHECK(refused < 30);
  for (const int fd : silent) {
    CHECK(read_all(fd) == "refused no request line within 2000 ms\n");
    ::close(fd);
  }
}

// A stopped process (Ctrl-Z, a debugger) whose listen backlog is full: connect() would wait until it
// runs again. Here a socket that listens and never accepts, its backlog filled, stands for it.
TEST_CASE("a stopped process with a full backlog: --list lists it as not answering, trigger PID says so in time") {
  runtime_dir where;
  REQUIRE(::mkdir(where.dir().c_str(), 0700) == 0);
  const std::string path = where.socket_of(::getpid());
  sockaddr_un address;
  REQUIRE(cuprof::detail::unix_address(path, address));
  const int listener = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  REQUIRE(::listen(listener, 0) == 0);
  std::vector<int> queued;
  for (int i = 0; i < 64; ++i) {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
      REQUIRE(errno == EAGAIN);  // full
      ::close(fd);
      break;
    }
    queued.push_back(fd);
  }
  // In a child: before, the command waited in connect() for good.
  const std::string said = where.tmp.file("said");
  const auto run = [&](const std::vector<std::string>& args) {
    return in_child(
        [&] {
          const cli_run r = cli(args);
          std::ofstream(said) << r.out << r.err;
          return r.rc;
        },
        30);
  };
  CHECK(run({"trigger", "--list"}) == 0);
  CHECK(slurp(said) == "PID      WINDOW  PROGRAM\n" + std::to_string(::getpid()) +
                           std::string(9 - std::min<std::size_t>(std::to_string(::getpid()).size(), 8), ' ') +
                           "?       (not answering)\n");
  CHECK(run({"trigger", std::to_string(::getpid()), "--timeout", "1"}) == 1);
  CHECK(slurp(said) == "cuprof: pid " + std::to_string(::getpid()) +
                           " is not answering: its endpoint has no room for a connection (is the process stopped, by Ctrl-Z "
                           "or a debugger?)\n");
  for (const int fd : queued) ::close(fd);
  ::close(listener);
}

TEST_CASE("cancel: a window whose client goes away before it opens is dropped; trigger PID --cancel drops one too") {
  runtime_dir where;
  served_process server(where, window_end::when_cancelled, where.tmp.file("log"));
  const std::string pid = std::to_string(server.pid());
  const std::string path = where.socket_of(server.pid());
  // The client asks for steps that never come, then goes away: the window is dropped, and the next is taken.
  int fd = connect_to(path);
  REQUIRE(fd >= 0);
  send_all(fd, window_request("duration_ms=0 steps=3 output=/steps.json"));
  char ok[64] = {};
  CHECK(::recv(fd, ok, sizeof ok - 1, 0) > 0);
  CHECK(std::string(ok) == "ok /steps.json\n");
  CHECK(ask(path, window_request("duration_ms=0 steps=3 output=/busy.json")).rfind("refused busy", 0) == 0);
  ::close(fd);
  std::string again;
  for (int i = 0;
       i < 200 && (again = ask(path, cuprof::detail::format_status_request())).find("window=open") != std::string::npos; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(again.find("window=closed") != std::string::npos);
  // Another waits for its steps; `cuprof trigger PID --cancel` drops it, and its own client hears so.
  fd = connect_to(path);
  REQUIRE(fd >= 0);
  send_all(fd, window_request("duration_ms=0 steps=3 output=/steps.json"));
  pollfd p{fd, POLLIN, 0};
  REQUIRE(::poll(&p, 1, 10000) == 1);  // its "ok" is in: the window is the endpoint's now
  cli_run r = cli({"trigger", pid, "--cancel"});
  CHECK(r.rc == 0);
  CHECK(r.out == "pid " + pid + ": its triggered window is cancelled\n");
  CHECK(read_all(fd) == "ok /steps.json\nfailed cancelled (test)\n");
  ::close(fd);
  r = cli({"trigger", pid, "--cancel"});
  CHECK(r.rc == 1);
  CHECK(r.err == "cuprof: pid " + pid + ": no triggered window to cancel\n");
  CHECK(cli({"trigger", pid, "--cancel", "--duration", "2"}).err.find("--cancel takes the PID alone") != std::string::npos);
}

// A process of a container sharing the directory names its endpoint by its pid there, which is
// another process's here: the peer's pid, as this namespace sees it, must be the one asked.
// Here this process serves an endpoint named by its parent's pid.
TEST_CASE("an endpoint named by a pid that is not its server's (another pid namespace): not asked, and said") {
  runtime_dir where;
  REQUIRE(::mkdir(where.dir().c_str(), 0700) == 0);
  const pid_t named = ::getppid();
  const std::string path = where.socket_of(named);
  sockaddr_un address;
  REQUIRE(cuprof::detail::unix_address(path, address));
  const int listener = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  REQUIRE(::listen(listener, 16) == 0);
  const std::string other = "its endpoint is served by pid " + std::to_string(::getpid()) +
                            " as this pid namespace sees it (a process of another pid namespace sharing the directory, a "
                            "container's)";
  cli_run r = cli({"trigger", std::to_string(named), "--duration", "1"});
  CHECK(r.rc == 1);
  CHECK(r.err == "cuprof: pid " + std::to_string(named) + ": not asking it: " + other + "\n");
  r = cli({"trigger", "--list"});
  CHECK(r.rc == 0);
  CHECK(r.out == "no process of this user accepts cuprof trigger (" + where.dir() + ")\npid " + std::to_string(named) +
                     ": left out: " + other + "\n");
  ::close(listener);
}

TEST_CASE("cuprof trigger: no endpoint, a pid not running, and usage errors say so") {
  runtime_dir where;
  cli_run r = cli({"trigger", "--list"});
  CHECK(r.rc == 0);
  CHECK(r.out == "no process of this user accepts cuprof trigger (no " + where.dir() + ")\n");
  r = cli({"trigger", std::to_string(::getpid())});
  CHECK(r.rc == 1);
  CHECK(r.err == "cuprof: pid " + std::to_string(::getpid()) + " accepts no trigger (no " + where.socket_of(::getpid()) +
                     "): start it under cuprof run or with CUPROF_TRACE\n");
  REQUIRE(::mkdir(where.dir().c_str(), 0700) == 0);
  r = cli({"trigger", "--list"});
  CHECK(r.out == "no process of this user accepts cuprof trigger (" + where.dir() + ")\n");
  REQUIRE(::chmod(where.dir().c_str(), 0777) == 0);
  r = cli({"trigger", "1"});
  CHECK(r.rc == 1);
  CHECK(r.err == "cuprof: will not use the endpoints' directory " + where.dir() + ": group or others may use it (mode 777)\n");
  const std::vector<std::pair<std::vector<std::string>, std::string>> usage = {
      {{"trigger"}, "missing the PID to trigger (or --list)"},
      {{"trigger", "1", "2"}, "trigger takes one PID"},
      {{"trigger", "12x"}, "the PID is a process id, not '12x'"},
      {{"trigger", "0"}, "the PID is a process id, not '0'"},
      {{"trigger", "1", "--duration", "2", "--steps", "3"}, "--duration and --steps both say how long the window lasts"},
      {{"trigger", "1", "--duration", "0"}, "--duration takes a number of seconds from 0.001 to 86400 (a day), not '0'"},
      {{"trigger", "1", "--duration", "0.0004"},
       "--duration takes a number of seconds from 0.001 to 86400 (a day), not '0.0004'"},
      {{"trigger", "1", "--duration", "1e7"}, "--duration takes a number of seconds from 0.001 to 86400 (a day)"},
      {{"trigger", "1", "--duration", "86400.5"}, "--duration takes a number of seconds from 0.001 to 86400 (a day)"},
      {{"trigger", "1", "--duration", "inf"}, "--duration takes a number of seconds"},
      {{"trigger", "1", "--steps", "-2"}, "--steps takes a whole number from 1 to 2^30, not '-2'"},
      {{"trigger", "1", "--steps", "0"}, "--steps takes a whole number from 1 to 2^30, not '0'"},
      {{"trigger", "1", "--timeout", "soon"}, "--timeout takes a number of seconds"},
      {{"trigger", "1", "--output", "a\nb"}, "--output takes a path without control characters"},
      {{"trigger", "1", "--output", std::string(5000, 'a')}, "--output is too long for a request line"},
      {{"trigger", "--list", "1"}, "--list takes nothing else"},
      {{"trigger", "1", "--bogus"}, "unknown option '--bogus'"},
  };
  for (const auto& [args, message] : usage) {
    CAPTURE(args.back());
    r = cli(args);
    CHECK(r.rc == 2);
    CHECK(r.err.find("cuprof: " + message) == 0);
    CHECK(r.err.find("Try 'cuprof trigger --help'.") != std::string::npos);
  }
}

}  // TEST_SUITE("runtime_trigger")
