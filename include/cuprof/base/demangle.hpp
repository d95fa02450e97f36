// A C++ symbol's name as the source spells it, through the C++ runtime's
// demangler: native stack frames (collect/symbolizer.hpp) and kernel names
// (cupti/activity_converter.hpp).
#pragma once

#include <cxxabi.h>

#include <cstdlib>
#include <memory>
#include <string>

namespace cuprof::detail {

// "_Z5scalePfi" -> "scale(float*, int)"; a name that is not a mangled C++ name
// (a C function, an extern "C" kernel) as it is.
inline std::string demangled_name(const char* mangled) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> out(abi::__cxa_demangle(mangled, nullptr, nullptr, &status), std::free);
  return status == 0 && out ? std::string(out.get()) : std::string(mangled);
}

}  // namespace cuprof::detail
