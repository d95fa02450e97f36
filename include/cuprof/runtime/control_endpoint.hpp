// A running process's control endpoint: `cuprof trigger PID` asks it for a
// trace window now (as Kineto's on-demand tracing through dynolog does), with
// no signal. One Unix stream socket per process, served by a thread of its own
// (poll on the socket and a wake-up pipe), so the program's threads never wait
// on it. Where it lives and what it is asked: control_protocol.hpp.
//
// The socket is 0600, and each peer's uid (SO_PEERCRED) must be this
// process's effective uid: another user's request is answered "refused" and
// one line is logged. The socket is bound under a temporary name and renamed
// into place once it listens, so a file named <pid>.sock either listens or is
// stale (left by a process that ended without removing it: a crash, _exit,
// SIGKILL); the process that gets that pid next replaces it.
#pragma once

#include "abnormal_exit.hpp"
#include "../base/error.hpp"
#include "../base/log.hpp"
#include "../base/threads.hpp"
#include "process_info.hpp"
#include "control_protocol.hpp"

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

// How long a client has to send its request line. The endpoint reads every
// connection's line at once: a silent client holds back no other.
constexpr int trigger_request_timeout_ms = 2000;
// Connections whose request line is still awaited, at most; more wait to be accepted.
constexpr std::size_t trigger_max_waiting = 64;

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
