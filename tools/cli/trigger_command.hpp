// `cuprof trigger PID`: asks a running process (started under `cuprof run`,
// or with CUPROF_TRACE) for a trace window now, through its control endpoint
// (include/cuprof/runtime/control_protocol.hpp: the protocol and where the
// endpoints live; control_endpoint.hpp: who may use them); `cuprof trigger
// --list`: the processes that accept one.
#pragma once

#include <cuprof/base/env.hpp>
#include <cuprof/base/text.hpp>
#include <cuprof/runtime/control_protocol.hpp>

#include "common.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace cuprof::cli {

inline const char* trigger_about =
    "usage: cuprof trigger PID [--duration S | --steps N] [--output PATH] [--timeout S]\n"
    "       cuprof trigger PID --cancel\n"
    "       cuprof trigger --list\n"
    "\n"
    "Asks a running process of yours, started under `cuprof run` or with CUPROF_TRACE, for a\n"
    "trace window now, and waits until its trace is written. One window at a time: a trigger\n"
    "that comes while another's window is open is refused (busy).\n"
    "\n";

inline const command_options trigger_command_options = {
    {"duration", "S", "the window's length in seconds, 0.001 to 86400 (default 2; \"2s\" is\nread as 2)"},
    {"steps", "N", "N program steps instead (NVTX ranges named \"step ...\")"},
    {"output", "PATH",
     "where the process writes this window's trace (default: its own trace path); a relative PATH is taken from this directory"},
    {"timeout", "S",
     "how long to wait for the trace (default: the duration and 60 s more; with --steps, until the process writes it or ends)"},
    {"cancel", "",
     "the process's triggered window: one waiting for its first step is dropped, an open one ends now and is written (the "
     "window's own client hears which); so is one whose client goes away before it opens"},
    {"list", "",
     "the processes that accept a trigger, and whether a window is open; removes endpoints left by processes that are gone"},
};

inline const char* trigger_notes =
    "\n"
    "Endpoints: $XDG_RUNTIME_DIR/cuprof/PID.sock (else /tmp/cuprof-UID/), for their user only.\n"
    "exit status: 0 the trace was written, 1 refused, failed or no answer, 2 bad usage\n";

// Where the command's lines go: `live_fd` as they come (a command that waits
// shows the window opening before it ends), or `out` when -1 (tests).
struct trigger_output {
  std::string& out;
  int live_fd;
  void say(const std::string& line) {
    if (live_fd < 0) {
      out += line;
      return;
    }
    for (std::size_t done = 0; done < line.size();) {
      const ssize_t n = ::write(live_fd, line.data() + done, line.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;
      done += std::size_t(n);
    }
  }
};

class endpoint_client {
 public:
  endpoint_client() = default;
  endpoint_client(const endpoint_client&) = delete;
  endpoint_client& operator=(const endpoint_client&) = delete;
  ~endpoint_client() {
    if (fd_ >= 0) ::close(fd_);
  }

  // Connects to the endpoint at `path`, trying for at most `seconds`: a
  // stopped process (Ctrl-Z, a debugger) with a full listen backlog refuses
  // with EAGAIN until it runs again, where a blocking connect would wait for
  // good. False with errno set when it cannot (ETIMEDOUT: no room in time),
  // with errno EPERM when another user serves it (a socket this user's
  // private directory should not hold), or with ESRCH when a process other
  // than `pid` as this pid namespace sees it serves it (peer_pid()): a
  // container's process sharing the directory names its endpoint by its own
  // pid, which is another process's here.
  bool connect(const std::string& path, double seconds, long pid) {
    sockaddr_un address;
    if (!detail::unix_address(path, address)) {
      errno = ENAMETOOLONG;
      return false;
    }
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd_ < 0) return false;
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(std::max(seconds, 0.0));
    while (::connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN) return false;
      if (std::chrono::steady_clock::now() >= until) {
        errno = ETIMEDOUT;
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_NONBLOCK);  // connected: sends may wait for room
    ucred peer{};
    socklen_t size = sizeof peer;
    if (::getsockopt(fd_, SOL_SOCKET, SO_PEERCRED, &peer, &size) != 0 || peer.uid != ::geteuid()) {
      errno = EPERM;
      return false;
    }
    peer_pid_ = peer.pid;  // as this namespace sees it; 0 when it cannot see the process at all
    if (peer.pid != pid) {
      errno = ESRCH;
      return false;
    }
    return true;
  }
  long peer_pid() const noexcept { return peer_pid_; }

  bool send(const std::string& line) {
    for (std::size_t done = 0; done < line.size();) {
      const ssize_t n = ::send(fd_, line.data() + done, line.size() - done, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      done += std::size_t(n);
    }
    return true;
  }

  enum class got { line, end, timeout };
  // The next line (without '\n'), waiting at most `seconds` (negative: no limit).
  got next_line(double seconds, std::string& line) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(std::max(seconds, 0.0));
    for (;;) {
      if (const std::size_t newline = pending_.find('\n'); newline != std::string::npos) {
        line = pending_.substr(0, newline);
        pending_.erase(0, newline + 1);
        return got::line;
      }
      if (pending_.size() > detail::trigger_line_max) return got::end;  // no line of this protocol is that long
      int wait_ms = -1;
      if (seconds >= 0) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
        if (left.count() <= 0) return got::timeout;
        wait_ms = int(std::min<long long>(left.count(), 1 << 30));
      }
      pollfd p{fd_, POLLIN, 0};
      const int r = ::poll(&p, 1, wait_ms);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return got::end;
      if (r == 0) continue;
      char buffer[1024];
      const ssize_t n = ::recv(fd_, buffer, sizeof buffer, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return got::end;
      pending_.append(buffer, std::size_t(n));
    }
  }

 private:
  int fd_ = -1;
  long peer_pid_ = 0;
  std::string pending_;
};

inline bool process_exists(long pid) { return ::kill(pid_t(pid), 0) == 0 || errno == EPERM; }

// The endpoints' directory as the client trusts it (control_directory,
// without creating it); empty when there is none (`missing`) or when it is
// not private (`why` says so).
inline std::string trusted_control_directory(bool& missing, std::string& why) {
  const std::string dir = detail::control_directory(false, why);
  struct stat st {};
  missing = dir.empty() && ::lstat(detail::control_directory_path().c_str(), &st) != 0 && errno == ENOENT;
  return dir;
}

// A number of seconds as --duration and --timeout take it: parse_seconds'
// number, above 0, an "s" after it allowed.
inline std::optional<double> option_seconds(std::string text) {
  if (detail::ends_with(text, "s")) text.pop_back();
  const std::optional<double> s = detail::parse_seconds(text.c_str());
  if (!s || *s <= 0) return std::nullopt;
  return s;
}

inline std::string seconds_text(double seconds) {
  std::string s = std::to_string(seconds);
  s.erase(s.find_last_not_of('0') + 1);
  if (s.back() == '.') s.pop_back();
  return s + " s";
}

inline std::string describe_window(const detail::trigger_request& r) {
  return r.steps > 0 ? std::to_string(r.steps) + " step" + (r.steps == 1 ? "" : "s") : seconds_text(r.duration_s);
}

// What serves an endpoint named by another pid than its server's here.
inline std::string other_namespace(long peer_pid) {
  return "its endpoint is served by " + (peer_pid ? "pid " + std::to_string(peer_pid) : std::string("a process")) +
         " as this pid namespace sees it (a process of another pid namespace sharing the directory, a container's)";
}

struct endpoint_status {
  long pid = 0;
  std::string window = "?", name = "(not answering)";
};

// How long --list tries to reach each endpoint, and waits for all their answers together.
constexpr double list_connect_seconds = 0.5;
constexpr double list_answer_seconds = 2;

// `cuprof trigger --list`.
inline int list_endpoints(std::string& out, std::string& err) {
  bool missing = false;
  std::string why;
  const std::string dir = trusted_control_directory(missing, why);
  if (missing) {
    out +=
        "no process of this user accepts cuprof trigger (no " + detail::terminal_safe(detail::control_directory_path()) + ")\n";
    return 0;
  }
  if (dir.empty()) {
    err += "cuprof: will not use the endpoints' directory " + why + "\n";
    return 1;
  }
  std::vector<long> pids;
  std::vector<std::string> leftovers;  // temporary names of processes that ended while making their endpoint
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      const std::size_t dot = name.find('.');
      const std::string number = name.substr(0, dot);
      const std::optional<int> pid = detail::parse_env_int(number.c_str());
      if (dot == std::string::npos || number.find_first_not_of("0123456789") != std::string::npos || !pid) continue;
      if (name.substr(dot) == ".sock") pids.push_back(*pid);
      else if (name.substr(dot) == ".sock.new" && !process_exists(*pid)) leftovers.push_back(name);
    }
    ::closedir(d);
  }
  std::sort(pids.begin(), pids.end());
  for (const std::string& name : leftovers) ::unlink((dir + "/" + name).c_str());
  std::vector<endpoint_status> live;
  std::vector<std::unique_ptr<endpoint_client>> asked;  // by position in `live`; null: not reached
  std::string notes;
  for (const long pid : pids) {
    const std::string path = detail::endpoint_path(dir, pid);
    auto client = std::make_unique<endpoint_client>();
    const bool connected = client->connect(path, list_connect_seconds, pid);
    const int error = errno;
    if (!connected && error != ETIMEDOUT) {
      // Nothing listens (an endpoint is renamed into place only once it listens): its process ended
      // without removing it, and the process with that pid now, if any, made none.
      if (error == ECONNREFUSED && ::unlink(path.c_str()) == 0)
        notes += "removed a stale endpoint: pid " + std::to_string(pid) +
                 (process_exists(pid) ? " is another process now" : " is not running") + "\n";
      else if (error == ESRCH)
        notes += "pid " + std::to_string(pid) + ": left out: " + other_namespace(client->peer_pid()) + "\n";
      else if (error != ENOENT)
        notes += "pid " + std::to_string(pid) + ": cannot connect to its endpoint: " + std::strerror(error) + "\n";
      continue;
    }
    endpoint_status s;
    s.pid = pid;
    live.push_back(s);
    // A process that is stopped, or whose backlog is full, is listed as not answering.
    asked.push_back(connected && client->send(detail::format_status_request()) ? std::move(client) : nullptr);
  }
  // The answers, all awaited together: a process that does not answer holds back no other.
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(list_answer_seconds);
  for (std::size_t i = 0; i < live.size(); ++i) {
    if (!asked[i]) continue;
    const double left = std::chrono::duration<double>(until - std::chrono::steady_clock::now()).count();
    std::string line;
    if (asked[i]->next_line(std::max(left, 0.0), line) != endpoint_client::got::line) continue;
    const std::string prefix = "status pid=" + std::to_string(live[i].pid) + " window=";
    const std::size_t name_at = line.find(" name=");
    if (detail::starts_with(line, prefix) && name_at != std::string::npos && name_at > prefix.size()) {
      live[i].window = line.substr(prefix.size(), name_at - prefix.size());
      live[i].name = line.substr(name_at + 6);
    }
  }
  if (live.empty()) out += "no process of this user accepts cuprof trigger (" + detail::terminal_safe(dir) + ")\n";
  else out += "PID      WINDOW  PROGRAM\n";
  for (const endpoint_status& s : live) {
    std::string pid = std::to_string(s.pid), window = detail::terminal_safe(s.window);
    pid.resize(std::max<std::size_t>(pid.size() + 1, 9), ' ');
    window.resize(std::max<std::size_t>(window.size() + 1, 8), ' ');
    out += pid + window + detail::terminal_safe(s.name) + "\n";
  }
  out += notes;
  return 0;
}

// How long `cuprof trigger PID` tries to reach the endpoint without --timeout.
constexpr double connect_seconds = 10;

// Why `pid` has no endpoint to talk to (connecting to `path` failed with `error`).
inline std::string no_endpoint(long pid, const std::string& path, int error, long peer_pid = 0) {
  const std::string who = "pid " + std::to_string(pid);
  if (error == ETIMEDOUT)
    return who +
           " is not answering: its endpoint has no room for a connection (is the process stopped, by Ctrl-Z or a "
           "debugger?)";
  if (!process_exists(pid))
    return who + " is not running" +
           (error == ECONNREFUSED ? " (its stale endpoint is left: cuprof trigger --list removes it)" : "");
  if (error == ENOENT)
    return who + " accepts no trigger (no " + detail::terminal_safe(path) + "): start it under cuprof run or with CUPROF_TRACE";
  if (error == ECONNREFUSED)
    return who +
           "'s endpoint is stale: the process that made it ended and the pid is another process's now (cuprof "
           "trigger --list removes it)";
  if (error == EPERM) return detail::terminal_safe(path) + " is served by another user: not asking it";
  if (error == ESRCH) return who + ": not asking it: " + other_namespace(peer_pid);
  return "cannot connect to " + detail::terminal_safe(path) + ": " + std::strerror(error);
}

// `cuprof trigger PID --cancel`: 0 once the process passed the cancel on; 1,
// with a line on `err`, when it has no triggered window or cannot be reached.
inline int cancel_window(long pid, std::string& out, std::string& err) {
  const std::string who = "pid " + std::to_string(pid);
  bool missing = false;
  std::string why;
  const std::string dir = trusted_control_directory(missing, why);
  const std::string path = detail::endpoint_path(dir.empty() ? detail::control_directory_path() : dir, pid);
  endpoint_client client;
  if (dir.empty() || !client.connect(path, connect_seconds, pid)) {
    err += "cuprof: " +
           (dir.empty() && !missing ? "will not use the endpoints' directory " + why
                                    : no_endpoint(pid, path, errno, client.peer_pid())) +
           "\n";
    return 1;
  }
  std::string line;
  if (!client.send(detail::format_cancel_request()) || client.next_line(10, line) != endpoint_client::got::line) {
    err += "cuprof: " + who + " did not answer the cancel\n";
    return 1;
  }
  if (line == "cancelled") {
    out += who + ": its triggered window is cancelled\n";
    return 0;
  }
  err += "cuprof: " + who + ": " + detail::terminal_safe(detail::starts_with(line, "refused ") ? line.substr(8) : line) + "\n";
  return 1;
}

// Asks `pid` for the window `request` and waits for its trace: 0 once
// written; 1, with a line on `err`, when there is no endpoint, the window is
// refused or the trace not written, the process ends, or nothing comes within
// `wait_s` (none: 60 s for the window to open, then its duration and 60 s
// more, or without limit for steps).
inline int trigger_window(long pid, const detail::trigger_request& request, std::optional<double> wait_s, std::string& out,
                          std::string& err, int live_fd) {
  const std::string who = "pid " + std::to_string(pid);
  bool missing = false;
  std::string why;
  const std::string dir = trusted_control_directory(missing, why);
  if (dir.empty()) {
    err += "cuprof: " +
           (missing ? no_endpoint(pid, detail::endpoint_path(detail::control_directory_path(), pid), ENOENT)
                    : "will not use the endpoints' directory " + why) +
           "\n";
    return 1;
  }
  const std::string path = detail::endpoint_path(dir, pid);
  endpoint_client client;
  if (!client.connect(path, wait_s.value_or(connect_seconds), pid)) {
    err += "cuprof: " + no_endpoint(pid, path, errno, client.peer_pid()) + "\n";
    return 1;
  }
  const auto unknown = [&](const std::string& line) {
    err += "cuprof: " + who + " gave an answer this cuprof does not know: '" + detail::terminal_safe(detail::shorten(line, 200)) +
           "'\n";
    return 1;
  };
  const auto started = std::chrono::steady_clock::now();
  std::string line;
  // The first answer comes once the window is open: starting a profile can take a while.
  const endpoint_client::got first = client.send(detail::format_trigger_request(request))
                                         ? client.next_line(wait_s.value_or(60), line)
                                         : endpoint_client::got::end;
  if (first != endpoint_client::got::line) {
    err += "cuprof: " + who +
           (first == endpoint_client::got::timeout ? " did not answer in time" : " closed the connection without an answer") +
           "\n";
    return 1;
  }
  if (detail::starts_with(line, "refused ")) {
    err += "cuprof: " + who + " refused the window: " + detail::terminal_safe(line.substr(8)) + "\n";
    return 1;
  }
  if (!detail::starts_with(line, "ok ")) return unknown(line);
  trigger_output live{out, live_fd};
  live.say(who + ": window open for " + describe_window(request) + ", trace to " + detail::terminal_safe(line.substr(3)) + "\n");
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  const double limit = wait_s ? std::max(*wait_s - waited, 0.0) : request.steps > 0 ? -1 : request.duration_s + 60;
  const endpoint_client::got last = client.next_line(limit, line);
  if (last == endpoint_client::got::timeout) {
    err += "cuprof: " + who + ": no word of the trace within " + seconds_text(wait_s ? *wait_s : limit) +
           " (the process may still write it)\n";
    return 1;
  }
  if (last == endpoint_client::got::end) {
    err += "cuprof: " + who + ": the process ended during the window (its exit writes what was recorded)\n";
    return 1;
  }
  if (detail::starts_with(line, "written ")) {
    live.say(who + ": trace written: " + detail::terminal_safe(line.substr(8)) + "\n");
    return 0;
  }
  if (detail::starts_with(line, "failed ")) {
    err += "cuprof: " + who + ": the trace was not written: " + detail::terminal_safe(line.substr(7)) + "\n";
    return 1;
  }
  return unknown(line);
}

inline int trigger_command(const invocation& c) {
  const auto& [args, out, err, plan, term] = c;
  const parsed p = parse(args, 2, trigger_command_options, "trigger");
  const std::string *duration = option(p, "duration"), *steps = option(p, "steps"), *output = option(p, "output"),
                    *timeout = option(p, "timeout");
  if (option(p, "list")) {
    if (!p.positional.empty() || p.options.size() > 1) throw usage_error("--list takes nothing else", "trigger");
    return list_endpoints(out, err);
  }
  const bool cancel = option(p, "cancel") != nullptr;
  if (cancel && p.options.size() > 1) throw usage_error("--cancel takes the PID alone", "trigger");
  if (p.positional.size() != 1)
    throw usage_error(p.positional.empty() ? "missing the PID to trigger (or --list)" : "trigger takes one PID", "trigger");
  const std::string& pid_text = p.positional[0];
  const std::optional<int> pid = detail::parse_env_int(pid_text.c_str());
  if (!pid || *pid == 0 || pid_text.find_first_not_of("0123456789") != std::string::npos)
    throw usage_error("the PID is a process id, not '" + pid_text + "'", "trigger");
  if (cancel) return cancel_window(*pid, out, err);
  if (duration && steps) throw usage_error("--duration and --steps both say how long the window lasts: give one", "trigger");
  detail::trigger_request request;
  request.duration_s = detail::trigger_default_seconds;
  if (duration) {
    // Sent in whole milliseconds, where 0 means the default: at least 1 ms.
    const std::optional<double> s = option_seconds(*duration);
    if (!s || *s < 0.001 || *s * 1000 > double(detail::trigger_max_ms))
      throw usage_error("--duration takes a number of seconds from 0.001 to " + std::to_string(detail::trigger_max_ms / 1000) +
                            " (a day), not '" + *duration + "'",
                        "trigger");
    request.duration_s = *s;
  }
  if (steps) {
    const std::optional<int> n = detail::parse_env_int(steps->c_str());
    if (!n || *n == 0) throw usage_error("--steps takes a whole number from 1 to 2^30, not '" + *steps + "'", "trigger");
    request.duration_s = 0;
    request.steps = *n;
  }
  std::optional<double> wait_s;
  if (timeout && !(wait_s = option_seconds(*timeout)))
    throw usage_error("--timeout takes a number of seconds above 0 up to 1e7, not '" + *timeout + "'", "trigger");
  if (output) {
    if (output->empty() || detail::has_control_character(*output))
      throw usage_error("--output takes a path without control characters", "trigger");
    request.output = *output;
    if (request.output[0] != '/') {  // the process has its own working directory
      char cwd[4096];
      if (!::getcwd(cwd, sizeof cwd)) throw error(std::string("cannot resolve the relative --output: ") + std::strerror(errno));
      request.output = std::string(cwd) + "/" + request.output;
    }
    if (request.output.size() + 100 > detail::trigger_line_max)
      throw usage_error("--output is too long for a request line (" + std::to_string(detail::trigger_line_max) + " bytes)",
                        "trigger");
  }
  return trigger_window(*pid, request, wait_s, out, err, term.live_fd);
}

}  // namespace cuprof::cli
