// Captures what is written to stderr (fd 2) while alive, and counts the lines
// said: the test cases that check cuprof's one-line messages share it.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace cuprof_test {

class stderr_capture {
 public:
  stderr_capture() {
    std::fflush(stderr);
    std::snprintf(path_, sizeof path_, "%s", (std::filesystem::temp_directory_path() / "cuprof-stderr-XXXXXX").c_str());
    fd_ = ::mkstemp(path_);
    saved_ = ::dup(2);
    ::dup2(fd_, 2);
  }
  std::string finish() {
    if (saved_ >= 0) {
      std::fflush(stderr);
      ::dup2(saved_, 2);
      ::close(saved_);
      saved_ = -1;
      ::close(fd_);
      std::ifstream in(path_, std::ios::binary);
      std::ostringstream s;
      s << in.rdbuf();
      text_ = s.str();
      ::unlink(path_);
    }
    return text_;
  }
  ~stderr_capture() { finish(); }
  stderr_capture(const stderr_capture&) = delete;
  stderr_capture& operator=(const stderr_capture&) = delete;

 private:
  char path_[4096];
  int fd_ = -1, saved_ = -1;
  std::string text_;
};

// How often `needle` occurs in `text` (a message said once is one line).
inline std::size_t lines_containing(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (std::size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + needle.size())) ++n;
  return n;
}

}  // namespace cuprof_test
