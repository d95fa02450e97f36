// A running process's control endpoint: `cuprof trigger PID` asks it for a
// trace window now (as Kineto's on-demand tracing through dynolog does), with
// no signal. One Unix stream socket per process, served by a thread of its own
// (poll on the socket and a wake-up pipe), so the program's threads never wait
// on it.
//
// Where: <dir>/<pid>.sock, <dir> being $XDG_RUNTIME_DIR/cuprof when
// XDG_RUNTIME_DIR names a directory of this user closed to others, else
// /tmp/cuprof-<uid>. The directory is made with mode 0700 and then checked
// with lstat: a directory, not a link, owned by this user, nothing for group
// or others; otherwise one line says why and there is no endpoint. The socket
// is 0600, and each peer's uid (SO_PEERCRED) must be this process's effective
// uid: another user's request is answered "refused" and one line is logged.
// The socket is bound under a temporary name and renamed into place once it
// listens, so a file named <pid>.sock either listens or is stale (left by a
// process that ended without removing it: a crash, _exit, SIGKILL); the
// process that gets that pid next replaces it.
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

#include "abnormal_exit.hpp"
#include "../base/error.hpp"
#include "../base/log.hpp"
#include "../base/text.hpp"
#include "../base/threads.hpp"
#include "process_info.hpp"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace cuprof::detail {

constexpr int trigger_protocol_version = 1;
constexpr std::size_t trigger_line_max = 4096;      // a request line with its '\n'
constexpr double trigger_default_seconds = 2;       // a request that names neither a duration nor steps
constexpr std::uint64_t trigger_max_ms = 86400000;  // a day: a window nobody can end early is bounded
constexpr std::uint64_t trigger_max_steps = (1u << 30) - 1;
// How long a client has to send its request line. The endpoint reads every
// connection's line at once: a silent client holds back no other.
constexpr int trigger_request_timeout_ms = 2000;
// Connections whose request line is still awaited, at most; more wait to be accepted.
constexpr std::size_t trigger_max_waiting = 64;

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

// Called on the endpoint's thread for each window request from this user
// while no other triggered window is open. It opens the window and returns
// (the thread serves no one meanwhile: it must not wait for the window to
// end). After accepting, the caller owes the endpoint exactly one finish(),
// from any thread, before close(). Plain function pointers, not
// std::function: several copies of cuprof can live in one process, and a
// lambda's std::function code is shared between them (docs/architecture.md).
using trigger_handler = trigger_reply (*)(const trigger_request&);
// Cancels the triggered window (its client went away, or asked `cancel`);
// false when there is none.
using trigger_canceller = bool (*)();
// Whether a window is open now apart from a triggered one (CUPROF_DURATION's, say), for --list.
using window_probe = bool (*)();

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
  const std::string version = std::to_string(trigger_protocol_version);
  const std::string_view magic = "cuprof-trigger ";
  if (!starts_with(line, magic)) {
    why = "not a cuprof-trigger request";
    return false;
  }
  line.remove_prefix(magic.size());
  const std::size_t space = line.find(' ');
  if (line.substr(0, space) != version) {
    why = "protocol version " + terminal_safe(shorten(line.substr(0, space), 16)) + " not spoken here (this process speaks " +
          version + ")";
    return false;
  }
  line = space == std::string_view::npos ? std::string_view() : line.substr(space + 1);
  if (line == "status" || line == "cancel") {
    out = {};
    out.status = line == "status";
    out.cancel = line == "cancel";
    return true;
  }
  const std::string_view window = "window duration_ms=";
  if (!starts_with(line, window)) {
    why = "unknown request (window, status or cancel)";
    return false;
  }
  line.remove_prefix(window.size());
  const std::size_t steps_at = line.find(" steps=");
  const std::size_t output_at = line.find(" output=");
  if (steps_at == std::string_view::npos || output_at == std::string_view::npos || output_at < steps_at) {
    why = "a window request is: window duration_ms=<D> steps=<S> output=<PATH>";
    return false;
  }
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

class control_endpoint {
 public:
  // Creates this process's endpoint and starts its thread; nullptr, with one
  // line saying why, when it cannot. Never destroyed: its thread and exit
  // handlers may use it until the process ends.
  static control_endpoint* open(trigger_handler handler, window_probe window_open = nullptr, trigger_canceller cancel = nullptr) {
    std::string why;
    const std::string dir = control_directory(true, why);
    if (dir.empty()) {
      log_line("no control endpoint (cuprof trigger): " + why);
      return nullptr;
    }
    auto* e = new control_endpoint;
    e->handler_ = handler;
    e->window_open_ = window_open;
    e->cancel_ = cancel;
    e->owner_ = ::getpid();
    e->path_ = endpoint_path(dir, e->owner_);
    const bool listening = e->listen(why);
    if (!listening || !start_detached_thread(why, &control_endpoint::serve, e)) {
      log_line("no control endpoint (cuprof trigger) at " + terminal_safe(e->path_) + ": " + why);
      if (listening) ::unlink(e->path_.c_str());
      e->close_fds();
      delete e;
      return nullptr;
    }
    forked_child_closes() = e;
    static const bool registered = ::pthread_atfork(nullptr, nullptr, &close_in_forked_child) == 0;
    (void)registered;
    return e;
  }

  const std::string& path() const { return path_; }

  // The accepted window's trace was written (`written`: `detail` names the
  // file) or could not be (`detail` says why): tells the waiting client, then
  // closes its connection. Nothing when no triggered window is open.
  void finish(bool written, const std::string& detail) {
    if (::getpid() != owner_) return;
    const std::string line = std::string(written ? "written " : "failed ") + terminal_safe(detail) + "\n";
    std::lock_guard<std::mutex> lock(mutex_);
    if (!busy_) return;
    if (!ok_sent_) {
      finish_line_ = line;  // the thread sends it after its "ok"
      return;
    }
    send_line(served_fd_, line);
    end_window();
  }

  // At exit: stops the thread (waiting for it at most stop_wait_ms: it may
  // be inside the handler, which may wait for the caller) and removes the
  // socket file. A forked child leaves its parent's endpoint alone. Safe to
  // call twice.
  void close() {
    if (::getpid() != owner_ || closed_.exchange(true)) return;
    ::unlink(path_.c_str());
    const char byte = 1;
    while (::write(wake_[1], &byte, 1) < 0 && errno == EINTR) {}
    std::unique_lock<std::mutex> lock(mutex_);
    if (stopped_signal_.wait_for(lock, std::chrono::milliseconds(stop_wait_ms), [this] { return stopped_; })) close_fds();
  }

 private:
  static constexpr int stop_wait_ms = 200;

  control_endpoint() = default;

  static control_endpoint*& forked_child_closes() {
    static control_endpoint* e = nullptr;
    return e;
  }

  // Bound under a temporary name, listening, 0600, then renamed into place:
  // whoever finds <pid>.sock finds it listening. A <pid>.sock that answers
  // belongs to a live process (another pid namespace sharing the directory):
  // left alone.
  bool listen(std::string& why) {
    sockaddr_un address;
    const std::string temporary = path_ + ".new";
    if (!unix_address(temporary, address)) {
      why = "the path is longer than a Unix socket's address allows";
      return false;
    }
    if (::pipe2(wake_, O_CLOEXEC) != 0) {
      why = std::string("pipe: ") + std::strerror(errno);
      return false;
    }
    if (answers(path_)) {
      why = "a live endpoint answers there already";
      return false;
    }
    listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ::unlink(temporary.c_str());
    if (listen_fd_ < 0 || ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
        ::chmod(temporary.c_str(), 0600) != 0 || ::listen(listen_fd_, 16) != 0 ||
        ::rename(temporary.c_str(), path_.c_str()) != 0) {
      why = std::strerror(errno);
      ::unlink(temporary.c_str());
      return false;
    }
    return true;
  }

  // Whether something listens at `path`. Never blocks: a stopped process
  // (Ctrl-Z, a debugger) whose backlog is full refuses with EAGAIN, and is live.
  static bool answers(const std::string& path) {
    sockaddr_un address;
    if (!unix_address(path, address)) return false;
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    const bool live = fd >= 0 && (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 || errno == EAGAIN);
    if (fd >= 0) ::close(fd);
    return live;
  }

  void close_fds() {
    for (int* fd : {&listen_fd_, &wake_[0], &wake_[1], &served_fd_}) {
      if (*fd >= 0) ::close(*fd);
      *fd = -1;
    }
  }

  // Threads do not follow fork: the child must not keep its parent's clients
  // connected (they would wait for it too) nor touch the parent's socket.
  static void close_in_forked_child() {
    if (control_endpoint* e = forked_child_closes(); e && ::getpid() != e->owner_) e->close_fds();
  }

  // Under mutex_: the served window is over.
  void end_window() {
    if (served_fd_ >= 0) ::close(served_fd_);
    served_fd_ = -1;
    busy_ = ok_sent_ = false;
    finish_line_.clear();
  }

  // The endpoint's thread. A plain function, as every thread cuprof starts.
  // Reads the request lines of every waiting connection at once, each with
  // its own deadline, and answers each once its line is in. Out of
  // descriptors (the program at its limit), accepting fails while the
  // connection waits: the thread backs off, 50 ms doubling to 2 s, instead
  // of polling the same failure at full speed.
  static void serve(control_endpoint* self) {
    block_forwarded_signals();
    std::vector<waiting_client> waiting;
    served_watch watch;
    std::chrono::milliseconds back_off{0};
    std::chrono::steady_clock::time_point accept_again{};
    for (;;) {
      const auto now = std::chrono::steady_clock::now();
      const bool full = waiting.size() >= trigger_max_waiting;  // the next connections wait in the listen backlog
      const bool accepting = !full && now >= accept_again;
      self->follow(watch);
      std::vector<pollfd> fds = {
          {self->wake_[0], POLLIN, 0}, {accepting ? self->listen_fd_ : -1, POLLIN, 0}, {watch.fd, POLLIN | POLLRDHUP, 0}};
      auto next = full || accepting ? std::chrono::steady_clock::time_point::max() : accept_again;
      for (const waiting_client& w : waiting) {
        fds.push_back({w.fd, POLLIN, 0});
        next = std::min(next, w.until);
      }
      const int timeout_ms =
          next == std::chrono::steady_clock::time_point::max()
              ? -1
              : int(std::max<long long>(0, std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count() + 1));
      if (::poll(fds.data(), nfds_t(fds.size()), timeout_ms) < 0) {
        if (errno == EINTR) continue;
        break;
      }
      if (fds[0].revents != 0 || (fds[1].revents & (POLLERR | POLLNVAL)) != 0) break;
      if (fds[2].revents != 0 && self->client_gone(watch)) self->cancel_served(watch);
      // Lines in, connections gone, deadlines passed.
      std::vector<waiting_client> still;
      for (std::size_t i = 0; i < waiting.size(); ++i) {
        waiting_client& w = waiting[i];
        std::string why;
        std::optional<std::string> line;
        bool done = false;
        if (fds[3 + i].revents != 0) done = !read_more(w, line, why);
        if (!done && !line && std::chrono::steady_clock::now() >= w.until) {
          why = "no request line within " + std::to_string(trigger_request_timeout_ms) + " ms";
          done = true;
        }
        if (line) {
          self->answer(w.fd, w.peer, *line);
        } else if (done) {
          if (!why.empty()) send_line(w.fd, "refused " + why + "\n");
          ::close(w.fd);
        } else {
          still.push_back(std::move(w));
        }
      }
      waiting = std::move(still);
      if ((fds[1].revents & POLLIN) == 0) continue;
      const int client = ::accept4(self->listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (client < 0) {
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          back_off = std::min(back_off.count() ? back_off * 2 : std::chrono::milliseconds(50), std::chrono::milliseconds(2000));
          accept_again = std::chrono::steady_clock::now() + back_off;
        }
        continue;
      }
      back_off = std::chrono::milliseconds(0);
      if (std::optional<ucred> peer = self->admitted(client))
        waiting.push_back(
            {client, *peer, {}, std::chrono::steady_clock::now() + std::chrono::milliseconds(trigger_request_timeout_ms)});
    }
    for (const waiting_client& w : waiting) ::close(w.fd);
    if (watch.fd >= 0) ::close(watch.fd);
    std::lock_guard<std::mutex> lock(self->mutex_);
    self->stopped_ = true;
    self->stopped_signal_.notify_all();
  }

  // The served window's client, watched for going away: a copy of its
  // descriptor, which finish() closing the served one leaves valid.
  struct served_watch {
    int fd = -1;
    std::uint64_t serial = 0;
  };

  // Watches the served window's client, or none once its window ended.
  void follow(served_watch& w) {
    std::lock_guard<std::mutex> lock(mutex_);
    const bool serving = busy_ && served_fd_ >= 0;
    if (serving && w.serial == served_serial_) return;  // watched already, or its hangup handled
    if (w.fd >= 0) ::close(w.fd);
    w.fd = -1;
    if (serving) {
      w.fd = ::fcntl(served_fd_, F_DUPFD_CLOEXEC, 0);
      w.serial = served_serial_;
    }
  }

  // Whether the watched client hung up (what it sends meanwhile is read and ignored).
  static bool client_gone(served_watch& w) {
    char buffer[256];
    for (;;) {
      const ssize_t n = ::recv(w.fd, buffer, sizeof buffer, MSG_DONTWAIT);
      if (n < 0 && errno == EINTR) continue;
      if (n > 0) continue;
      return n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
    }
  }

  // The served window's client went away: its window is cancelled (one not
  // yet open is dropped; an open one ends and is written), once.
  void cancel_served(served_watch& w) {
    bool current;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      current = busy_ && w.serial == served_serial_;
    }
    ::close(w.fd);
    w.fd = -1;
    if (current && cancel_) cancel_();
  }

  // A connection whose request line is awaited.
  struct waiting_client {
    int fd;
    ucred peer;
    std::string received;
    std::chrono::steady_clock::time_point until;
  };

  // Reads what `w` sent: false once it is done (gone, or `why` refuses it),
  // `line` once its line is in.
  static bool read_more(waiting_client& w, std::optional<std::string>& line, std::string& why) {
    char buffer[512];
    for (;;) {
      const ssize_t n = ::recv(w.fd, buffer, sizeof buffer, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
      if (n <= 0) return false;
      w.received.append(buffer, std::size_t(n));
      const std::size_t newline = w.received.find('\n');
      if (newline != std::string::npos && newline < trigger_line_max) {
        line = w.received.substr(0, newline);
        return true;
      }
      if (w.received.size() >= trigger_line_max) {
        why = "the request is longer than " + std::to_string(trigger_line_max) + " bytes";
        return false;
      }
    }
  }

  // Whether a triggered window is open (or its handler runs).
  bool serving() {
    std::lock_guard<std::mutex> lock(mutex_);
    return busy_;
  }

  // Closes a client that holds no window.
  void release_unanswered(int client) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (client == served_fd_) end_window();
    else ::close(client);
  }

  // The peer, if it is this process's user; another user's is refused, and logged.
  std::optional<ucred> admitted(int client) {
    ucred peer{};
    socklen_t size = sizeof peer;
    if (::getsockopt(client, SOL_SOCKET, SO_PEERCRED, &peer, &size) == 0 && peer.uid == ::geteuid()) return peer;
    const std::string uid = size == sizeof peer ? std::to_string(peer.uid) : std::string("unknown");
    send_line(client, "refused uid " + uid + " may not trigger this process (only uid " + std::to_string(::geteuid()) + ")\n");
    log_line("refused a trigger from uid " + uid + " (pid " + std::to_string(peer.pid) + "): only this process's user may");
    ::close(client);
    return std::nullopt;
  }

  // Answers a request line; a failure is the client's refusal.
  void answer(int client, const ucred& peer, const std::string& line) {
    try {
      answer_request(client, peer, line);
    } catch (const std::exception& e) {
      send_line(client, "refused " + terminal_safe(message_of(e)) + "\n");
      release_unanswered(client);
    }
  }

  void answer_request(int client, const ucred& peer, const std::string& line) {
    std::string why;
    control_request request;
    if (!parse_control_request(line, request, why)) {
      send_line(client, "refused " + why + "\n");
      ::close(client);
      return;
    }
    if (request.cancel) {
      const bool any = serving() && cancel_ && cancel_();
      send_line(client, any ? "cancelled\n" : "refused no triggered window to cancel\n");
      ::close(client);
      return;
    }
    if (request.status) {
      const bool open = serving() || (window_open_ && window_open_());
      send_line(client, "status pid=" + std::to_string(owner_) + " window=" + (open ? "open" : "closed") +
                            " name=" + terminal_safe(process_name()) + "\n");
      ::close(client);
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (busy_) {
        send_line(client, "refused busy: another trigger's window is open (asked by pid " + std::to_string(served_pid_) + ")\n");
        ::close(client);
        return;
      }
      busy_ = true;
      served_fd_ = client;
      served_pid_ = peer.pid;
      ++served_serial_;
    }
    const trigger_reply reply = handler_(request.window);
    std::lock_guard<std::mutex> lock(mutex_);
    if (!reply.accepted) {
      send_line(client, "refused " + terminal_safe(reply.text) + "\n");
      end_window();
      return;
    }
    send_line(client, "ok " + terminal_safe(reply.text) + "\n");
    ok_sent_ = true;
    if (!finish_line_.empty()) {
      send_line(client, finish_line_);
      end_window();
    }
  }

  trigger_handler handler_ = nullptr;
  window_probe window_open_ = nullptr;
  trigger_canceller cancel_ = nullptr;
  pid_t owner_ = 0;
  std::string path_;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};  // written by close(): the thread stops
  std::atomic<bool> closed_{false};
  std::mutex mutex_;  // the served window, and stopped_
  std::condition_variable stopped_signal_;
  bool stopped_ = false;
  bool busy_ = false;     // a triggered window is open (or its handler runs)
  bool ok_sent_ = false;  // its client has the "ok" line
  int served_fd_ = -1;    // its client, until finish()
  pid_t served_pid_ = 0;
  std::uint64_t served_serial_ = 0;  // counts the windows accepted: which one a watch is of
  std::string finish_line_;          // finish() came before the "ok" was sent
};

}  // namespace cuprof::detail
