// The one exception type cuprof throws for bad input: bad parameters,
// unwritable paths, an unknown table sort key. Messages start with "cuprof: ".
#pragma once

#ifdef CUPROF_DISABLE
#include "detail/disabled_api.hpp"
#else

#include <stdexcept>
#include <string>

namespace cuprof {

class error : public std::runtime_error {
 public:
  explicit error(const std::string& what) : std::runtime_error("cuprof: " + what) {}
};

}  // namespace cuprof
#endif  // CUPROF_DISABLE
