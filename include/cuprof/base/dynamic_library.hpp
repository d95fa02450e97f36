// Libraries loaded at run time rather than linked, so that a program that
// includes cuprof runs where they are absent: libcupti and libcuda
// (cupti/libraries.hpp), libdeflate (output/file_sink.hpp).
#pragma once

#include <dlfcn.h>
#include <link.h>

#include <string>
#include <string_view>
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

// A library's entry points, each named once. Inside a struct,
// CUPROF_ENTRY_POINTS(LIST), where LIST(X) is X(member, symbol) for each
// function, declares the members `decltype(&symbol) member = nullptr;` and
// bool bind_entry_points(void* lib), which looks them up in LIST's order and
// returns false at the first one missing (dlerror() says which; those after
// it stay null).
#define CUPROF_ENTRY_POINT_MEMBER(member, symbol) decltype(&symbol) member = nullptr;
#define CUPROF_ENTRY_POINT_BIND(member, symbol) &&::cuprof::detail::bind(lib, member, #symbol)
#define CUPROF_ENTRY_POINTS(list) \
  list(CUPROF_ENTRY_POINT_MEMBER) bool bind_entry_points(void* lib) { return true list(CUPROF_ENTRY_POINT_BIND); }

// The paths of the shared objects loaded in the process now (the program
// itself has an empty name and is left out). Off the hot path: a window's end.
inline std::vector<std::string> loaded_libraries() {
  std::vector<std::string> paths;
  ::dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* out) {
        if (info->dlpi_name && *info->dlpi_name) static_cast<std::vector<std::string>*>(out)->emplace_back(info->dlpi_name);
        return 0;
      },
      &paths);
  return paths;
}

// The version of the NCCL library loaded in the process ("2.21.5"), from its
// ncclGetVersion (NCCL_VERSION_CODE: major * 10000 + minor * 100 + patch since
// 2.9); empty when no libnccl is loaded or it has no such function. Loads
// nothing: the library is looked up only among those already loaded.
inline std::string loaded_nccl_version(const std::vector<std::string>& libraries) {
  for (const std::string& path : libraries) {
    const std::string_view file = std::string_view(path).substr(path.rfind('/') == std::string::npos ? 0 : path.rfind('/') + 1);
    if (file.substr(0, 8) != "libnccl." && file.substr(0, 8) != "libnccl-") continue;
    void* lib = ::dlopen(path.c_str(), RTLD_LAZY | RTLD_NOLOAD);
    if (!lib) continue;
    int (*get_version)(int*) = nullptr;
    int code = 0;
    const bool ok = bind(lib, get_version, "ncclGetVersion") && get_version(&code) == 0 && code >= 20900;
    ::dlclose(lib);  // drops the reference RTLD_NOLOAD took
    if (ok) return std::to_string(code / 10000) + "." + std::to_string(code / 100 % 100) + "." + std::to_string(code % 100);
  }
  return {};
}

}  // namespace cuprof::detail
