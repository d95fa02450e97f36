// The one exception type cuprof throws for bad input: bad parameters,
// unwritable paths, an unknown table sort key. Messages start with "cuprof: ".
#pragma once

#include <stdexcept>
#include <string>

namespace cuprof {

class error : public std::runtime_error {
 public:
  explicit error(const std::string& what) : std::runtime_error("cuprof: " + what) {}
};

namespace detail {

// An exception's message without the "cuprof: " it starts with, for a line
// that has its own prefix: a log line, the command's error line.
inline std::string message_of(const std::exception& e) {
  std::string m = e.what();
  constexpr char prefix[] = "cuprof: ";
  std::size_t from = 0;
  while (m.compare(from, sizeof prefix - 1, prefix) == 0) from += sizeof prefix - 1;
  return m.substr(from);
}

}  // namespace detail

}  // namespace cuprof
