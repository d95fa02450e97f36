// Libraries loaded at run time rather than linked, so that a program that
// includes cuprof runs where they are absent: libcupti and libcuda
// (cupti/libraries.hpp), libdeflate (output/file_sink.hpp).
#pragma once

#include <dlfcn.h>

#include <string>
#include <vector>

namespace cuprof::detail {

// The first of `candidates` that loads; null when none does (dlerror says why).
inline void* open_first(const std::vector<std::string>& candidates) {
  for (const std::string& path : candidates) {
    if (path.empty()) continue;
    if (void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) return handle;
  }
  return nullptr;
}

template <class Fn>
bool bind(void* lib, Fn& fn, const char* symbol) {
  fn = reinterpret_cast<Fn>(::dlsym(lib, symbol));
  return fn != nullptr;
}

}  // namespace cuprof::detail
