// What `cuprof trigger` (the client) and a process's control endpoint (the
// server, control_endpoint.hpp) share: where the endpoints live, and the
// protocol they speak. Pure text and file checks, no thread.
//
// Where: <dir>/<pid>.sock, <dir> being $XDG_RUNTIME_DIR/cuprof when
// XDG_RUNTIME_DIR names a directory of this user closed to others, else
// /tmp/cuprof-<uid>. The directory is made with mode 0700 and then checked
// with lstat: a directory, not a link, owned by this user, nothing for group
// or others; otherwise one line says why and there is no endpoint.
//
// The protocol, version 1: one request line from the client, at most
// trigger_line_max bytes with its '\n', fields separated by one space:
//
//   cuprof-trigger 1 window duration_ms=<D> steps=<S> output=<PATH>\n
//       a window of D milliseconds, or of S program steps (NVTX ranges named
//       "step ..."); D and S are decimal digits, not both non-zero; both 0:
//       trigger_default_seconds. PATH runs to the end of the line (spaces
//       allowed, no control character): absolute, or empty for the process's
//       own trace path.
//   cuprof-trigger 1 status\n
//       what `cuprof trigger --list` shows.
//   cuprof-trigger 1 cancel\n
//       the triggered window: one still waiting for its first step is
//       dropped, an open one ends now and is written. A window whose client
//       goes away before it opens is dropped the same way.
//
// The process's answers, one line each, after which it closes the connection:
//
//   status pid=<pid> window=open|closed name=<program name>\n
//   cancelled\n                      the cancel was passed on (the window's
//                                     own client hears what became of it)
//   refused <why>\n                   nothing was opened ("refused busy: ..."
//                                     while another trigger's window is open)
//   ok <path>\n                       the window is open; its trace goes to <path>.
//                                     Then, once it is written, one of:
//   written <path and what>\n
//   failed <why>\n
//
// A connection that ends after "ok" without one of those: the process ended
// during the window (its exit path writes what was recorded).
#pragma once

#include "../base/text.hpp"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace cuprof::detail {

constexpr int trigger_protocol_version = 1;
constexpr std::size_t trigger_line_max = 4096;      // a request line with its '\n'
constexpr double trigger_default_seconds = 2;       // a request that names neither a duration nor steps
constexpr std::uint64_t trigger_max_ms = 86400000;  // a day: a window nobody can end early is bounded
constexpr std::uint64_t trigger_max_steps = (1u << 30) - 1;

struct trigger_request {
  double duration_s = 0;  // never both 0 with steps once parsed: the default is trigger_default_seconds
  int steps = 0;          // program steps (NVTX "step ..." ranges) instead of a duration
  std::string output;     // absolute; empty: the process's own trace path
};

// What the process answers: accepted (the window opened; `text` is where its
// trace will go) or refused (`text` says why, one line).
struct trigger_reply {
  bool accepted = false;
  std::string text;
};

// A request as the client sends it.
inline std::string format_trigger_request(const trigger_request& r) {
  const std::uint64_t ms = std::uint64_t(r.duration_s * 1000 + 0.5);
  return "cuprof-trigger " + std::to_string(trigger_protocol_version) + " window duration_ms=" + std::to_string(ms) +
         " steps=" + std::to_string(r.steps) + " output=" + r.output + "\n";
}

inline std::string format_status_request() { return "cuprof-trigger " + std::to_string(trigger_protocol_version) + " status\n"; }
inline std::string format_cancel_request() { return "cuprof-trigger " + std::to_string(trigger_protocol_version) + " cancel\n"; }

// 1 to 11 decimal digits and nothing else, at most `max`.
inline std::optional<std::uint64_t> parse_protocol_number(std::string_view s, std::uint64_t max) {
  if (s.empty() || s.size() > 11) return std::nullopt;
  std::uint64_t x = 0;
  for (const char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    x = x * 10 + std::uint64_t(c - '0');
  }
  if (x > max) return std::nullopt;
  return x;
}

inline bool has_control_character(std::string_view s) {
  for (const char c : s)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7F) return true;
  return false;
}

struct control_request {
  bool status = false;  // else a window or a cancel
  bool cancel = false;
  trigger_request window;
};

// Parses one request line (without its '\n'); every byte came from a socket.
// On failure, `why` is the refusal's text.
inline bool parse_control_request(std::string_view line, control_request& out, std::string& why) {
  const auto refuse = [&why](std::string text) {
    why = std::move(text);
    return false;
  };
  const auto take = [&line](std::string_view prefix) {  // the prefix, off the line if it is there
    if (!starts_with(line, prefix)) return false;
    line.remove_prefix(prefix.size());
    return true;
  };
  const std::string version = std::to_string(trigger_protocol_version);
  if (!take("cuprof-trigger ")) return refuse("not a cuprof-trigger request");
  const std::size_t space = line.find(' ');
  if (line.substr(0, space) != version)
    return refuse("protocol version " + terminal_safe(shorten(line.substr(0, space), 16)) +
                  " not spoken here (this process speaks " + version + ")");
  line = space == std::string_view::npos ? std::string_view() : line.substr(space + 1);
  if (line == "status" || line == "cancel") {
    out = {};
    out.status = line == "status";
    out.cancel = line == "cancel";
    return true;
  }
  if (!take("window duration_ms=")) return refuse("unknown request (window, status or cancel)");
  const std::size_t steps_at = line.find(" steps=");
  const std::size_t output_at = line.find(" output=");
  if (steps_at == std::string_view::npos || output_at == std::string_view::npos || output_at < steps_at)
    return refuse("a window request is: window duration_ms=<D> steps=<S> output=<PATH>");
  const std::optional<std::uint64_t> ms = parse_protocol_number(line.substr(0, steps_at), trigger_max_ms);
  const std::optional<std::uint64_t> steps =
      parse_protocol_number(line.substr(steps_at + 7, output_at - steps_at - 7), trigger_max_steps);
  const std::string_view output = line.substr(output_at + 8);
  if (!ms) why = "duration_ms is not a whole number of milliseconds up to " + std::to_string(trigger_max_ms);
  else if (!steps) why = "steps is not a whole number up to " + std::to_string(trigger_max_steps);
  else if (*ms > 0 && *steps > 0) why = "a window lasts a duration or a number of steps, not both";
  else if (has_control_character(output)) why = "the output path has a control character";
  else if (!output.empty() && output[0] != '/') why = "the output path is not absolute";
  if (!why.empty()) return false;
  out = {};
  out.window.duration_s = *ms == 0 && *steps == 0 ? trigger_default_seconds : double(*ms) / 1000;
  out.window.steps = int(*steps);
  out.window.output = std::string(output);
  return true;
}

// Whether `dir` is a directory (not a link) of this effective user, closed to
// group and others; if not, `why` says what it is.
inline bool private_directory(const std::string& dir, std::string& why) {
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) why = std::strerror(errno);
  else if (S_ISLNK(st.st_mode)) why = "it is a symbolic link";
  else if (!S_ISDIR(st.st_mode)) why = "it is not a directory";
  else if (st.st_uid != ::geteuid())
    why = "it belongs to uid " + std::to_string(st.st_uid) + ", not to this user (uid " + std::to_string(::geteuid()) + ")";
  else if ((st.st_mode & 077) != 0)
    why = "group or others may use it (mode " + std::to_string((st.st_mode >> 6) & 7) + std::to_string((st.st_mode >> 3) & 7) +
          std::to_string(st.st_mode & 7) + ")";
  return why.empty();
}

// Where this user's endpoints live (not checked: see control_directory).
inline std::string control_directory_path() {
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  std::string unused;
  if (runtime && runtime[0] == '/' && private_directory(runtime, unused) && ::access(runtime, W_OK | X_OK) == 0)
    return std::string(runtime) + "/cuprof";
  return "/tmp/cuprof-" + std::to_string(::geteuid());
}

// The endpoints' directory, made (mode 0700) when `create` and missing, then
// checked (private_directory); empty with `why` when it cannot be trusted.
inline std::string control_directory(bool create, std::string& why) {
  const std::string dir = control_directory_path();
  if (create && ::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    why = terminal_safe(dir) + ": cannot create it: " + std::strerror(errno);
    return {};
  }
  std::string what;
  if (private_directory(dir, what)) return dir;
  why = terminal_safe(dir) + ": " + what;
  return {};
}

inline std::string endpoint_path(const std::string& dir, long pid) { return dir + "/" + std::to_string(pid) + ".sock"; }

// A Unix socket address for `path`; false when the path is too long for one.
inline bool unix_address(const std::string& path, sockaddr_un& address) {
  address = {};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof address.sun_path) return false;
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  return true;
}

// Sends a whole line without blocking and without SIGPIPE (the client may be
// gone); a line that does not fit the socket's buffer at once is cut.
inline void send_line(int fd, const std::string& line) {
  std::size_t sent = 0;
  while (sent < line.size()) {
    const ssize_t n = ::send(fd, line.data() + sent, line.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    sent += std::size_t(n);
  }
}

}  // namespace cuprof::detail
