// What the command does differently on a terminal: tables as wide as the
// window, and a progress line for long reads. Pipes, files and the tests'
// captured output get neither, so their output stays byte for byte the same.
#pragma once

#include <cuprof/base/text.hpp>
#include <cuprof/analysis.hpp>

#include <sys/ioctl.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace cuprof::cli {

// What main() knows of where the output goes. The tests' in-process runs,
// like pipes and files, have no terminal: their output is the same on every machine.
struct terminal {
  std::size_t stdout_columns = 0;  // stdout's width when it is a terminal: tables fit it (0: torch's width)
  int progress_fd = -1;            // stderr when it is a terminal: the progress of reads over a second
  int live_fd = -1;                // stdout, for a command that waits (trigger): its lines as they come; -1: into out
};

// The width of the terminal `fd` is, from the kernel (TIOCGWINSZ), else from
// $COLUMNS; 0 when `fd` is no terminal or neither says.
inline std::size_t terminal_columns(int fd) {
  if (!::isatty(fd)) return 0;
  winsize ws{};
  if (::ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  const char* env = std::getenv("COLUMNS");
  if (!env) return 0;
  char* end = nullptr;
  const long v = std::strtol(env, &end, 10);
  return *env && *end == '\0' && v > 0 && v < 100000 ? std::size_t(v) : 0;
}

// "cuprof: parsing t.json: 312 of 680 MB" on one line of the terminal `fd`,
// rewritten in place, from one second after the read began, at most ten times
// a second; erased when the read is done (destructor).
class progress_line {
 public:
  using clock = std::chrono::steady_clock;

  progress_line(int fd, std::string source, clock::time_point start = clock::now())
      : fd_(fd), source_(detail::display_name(source, 60)), start_(start) {}
  progress_line(const progress_line&) = delete;
  progress_line& operator=(const progress_line&) = delete;
  ~progress_line() {
    if (shown_) write("\r\x1b[K");
  }

  // For read_trace_file / read_trace_stream.
  read_progress hook() {
    return {[](void* self, read_stage stage, std::uint64_t done, std::uint64_t total) {
              static_cast<progress_line*>(self)->update(stage, done, total, clock::now());
            },
            this};
  }

  void update(read_stage stage, std::uint64_t done, std::uint64_t total, clock::time_point now) {
    using std::chrono::milliseconds;
    if (now - start_ < std::chrono::seconds(1) || (shown_ && now - last_ < milliseconds(100))) return;
    last_ = now;
    shown_ = true;
    const char* what = stage == read_stage::reading         ? "reading"
                       : stage == read_stage::decompressing ? "decompressing"
                                                            : "parsing";
    const auto mb = [](std::uint64_t bytes) { return std::to_string((bytes + (1u << 19)) >> 20); };
    std::string line = "\rcuprof: " + std::string(what) + " " + source_ + ": " + mb(done);
    line += total ? " of " + mb(total) + " MB" : " MB";
    write(line + "\x1b[K");
  }

 private:
  void write(const std::string& s) const {
    for (std::size_t at = 0; at < s.size();) {
      const ssize_t n = ::write(fd_, s.data() + at, s.size() - at);
      if (n <= 0) return;  // a progress line is not worth failing for
      at += std::size_t(n);
    }
  }

  int fd_;
  std::string source_;
  clock::time_point start_, last_{};
  bool shown_ = false;
};

}  // namespace cuprof::cli
