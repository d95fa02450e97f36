// Return addresses of captured stacks (native_stack.hpp) -> "function (file:line)",
// in the process that captured them, while the modules they point into are
// mapped: at the end of a window, never on the hot path.
//
// elfutils' libdw (its dwfl API) gives the symbol from each module's symbol
// table and the file and line from its DWARF where the module has debug
// information (built with -g, or with a separate debug file). It is loaded
// with dlopen and its few functions declared here, so that neither building
// nor running needs it: without it, dladdr gives the names of exported symbols
// only, and an address without a name is shown as module+offset.
#pragma once

#include "../base/demangle.hpp"
#include "../base/dynamic_library.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace cuprof::detail {

// One frame as shown, and whether it is the profiler's own doing: cuprof's
// code, CUPTI, libcuda, libcudart or the unwinder, which sit above the
// program's frame at a CUDA call's callback and are dropped from the top of
// a stack. Libraries that make CUDA calls (cuBLAS, with its own copy of the
// runtime inside) are the program's.
struct symbolized_frame {
  std::string text;
  bool tool_frame = false;
};

// "libcudart.so.12" and "/usr/lib/x86_64-linux-gnu/libcuda.so.1" are the
// profiler's own; "libcublasLt.so.12" is not.
inline bool is_tool_module(std::string_view path) {
  const std::size_t slash = path.rfind('/');
  const std::string_view base = slash == std::string_view::npos ? path : path.substr(slash + 1);
  for (std::string_view prefix : {"libcupti.", "libcuda.", "libcudart.", "libunwind.", "libcuprof_inject."})
    if (base.substr(0, prefix.size()) == prefix) return true;
  return false;
}

inline bool is_tool_function(std::string_view demangled) { return demangled.substr(0, 8) == "cuprof::"; }

// "fn (file.cpp:42)", "fn", or "libfoo.so+0x1a2b" when nothing names the address.
inline std::string frame_text(const std::string& function, const char* file, int line, std::string_view module,
                              std::uint64_t offset) {
  if (function.empty()) {
    const std::size_t slash = module.rfind('/');
    char hex[24];
    std::snprintf(hex, sizeof hex, "+0x%llx", static_cast<unsigned long long>(offset));
    return std::string(slash == std::string_view::npos ? module : module.substr(slash + 1)) + hex;
  }
  if (!file || !*file || line <= 0) return function;
  return function + " (" + file + ":" + std::to_string(line) + ")";
}

class symbolizer {
 public:
  // `use_libdw` false: dladdr only (tests of the fallback).
  explicit symbolizer(bool use_libdw = true) {
    if (use_libdw && load_libdw()) open_session();
  }
  ~symbolizer() {
    if (session_) dw_.end(session_);
  }
  symbolizer(const symbolizer&) = delete;
  symbolizer& operator=(const symbolizer&) = delete;

  // Whether file and line can be known (libdw loaded and reporting the process).
  bool has_line_info() const noexcept { return session_ != nullptr; }

  // A return address: the call before it is what the frame was doing, so its
  // line is that of the byte before.
  symbolized_frame resolve(std::uint64_t return_address) {
    const std::uint64_t pc = return_address ? return_address - 1 : 0;
    if (session_) {
      void* module = dw_.addrmodule(session_, pc);
      if (!module && !reported_again_) {
        // A library loaded since the session began: report the maps again, once.
        reported_again_ = true;
        dw_.end(session_);
        session_ = nullptr;
        open_session();
        if (session_) module = dw_.addrmodule(session_, pc);
      }
      if (module) return resolve_in(module, pc);
    }
    return resolve_with_dladdr(pc);
  }

 private:
  // libdw.h's Dwarf_Die and Dwarf_Attribute, handed to libdw by address only.
  struct dwarf_die {
    void* addr;
    void* cu;
    void* abbrev;
    long padding;
  };
  struct dwarf_attribute {
    unsigned code;
    unsigned form;
    unsigned char* valp;
    void* cu;
  };
  static constexpr int dw_tag_inlined_subroutine = 0x1d, dw_tag_subprogram = 0x2e;
  static constexpr unsigned dw_at_call_file = 0x58, dw_at_call_line = 0x59;
  // The dwfl API's declarations (elfutils' libdwfl.h), for the calls made here.
  struct dwfl_callbacks {
    void* find_elf;
    void* find_debuginfo;
    void* section_address;
    char** debuginfo_path;
  };
  struct libdw_api {
    void* (*begin)(const dwfl_callbacks*) = nullptr;
    void (*end)(void*) = nullptr;
    void (*report_begin)(void*) = nullptr;
    int (*linux_proc_report)(void*, pid_t) = nullptr;
    int (*report_end)(void*, int (*)(void*, void*, const char*, std::uint64_t, void*), void*) = nullptr;
    void* (*addrmodule)(void*, std::uint64_t) = nullptr;
    const char* (*module_addrname)(void*, std::uint64_t) = nullptr;
    void* (*module_getsrc)(void*, std::uint64_t) = nullptr;
    const char* (*lineinfo)(void*, std::uint64_t*, int*, int*, std::uint64_t*, std::uint64_t*) = nullptr;
    const char* (*module_info)(void*, void***, std::uint64_t*, std::uint64_t*, std::uint64_t*, std::uint64_t*, const char**,
                               const char**) = nullptr;
    // For code inlined into a function: where the function called it (libdw.h's DIE API).
    void* (*module_addrdie)(void*, std::uint64_t, std::uint64_t*) = nullptr;
    int (*getscopes)(void*, std::uint64_t, dwarf_die**) = nullptr;
    int (*tag)(dwarf_die*) = nullptr;
    void* (*attr)(dwarf_die*, unsigned, dwarf_attribute*) = nullptr;
    int (*formudata)(dwarf_attribute*, std::uint64_t*) = nullptr;
    int (*getsrcfiles)(void*, void**, std::size_t*) = nullptr;
    const char* (*filesrc)(void*, std::size_t, std::uint64_t*, std::uint64_t*) = nullptr;
  };

  bool load_libdw() {
    void* lib = open_first({"libdw.so.1", "libdw.so"});
    if (!lib) return false;
    callbacks_.find_elf = ::dlsym(lib, "dwfl_linux_proc_find_elf");
    callbacks_.find_debuginfo = ::dlsym(lib, "dwfl_standard_find_debuginfo");
    return callbacks_.find_elf && callbacks_.find_debuginfo && bind(lib, dw_.begin, "dwfl_begin") &&
           bind(lib, dw_.end, "dwfl_end") && bind(lib, dw_.report_begin, "dwfl_report_begin") &&
           bind(lib, dw_.linux_proc_report, "dwfl_linux_proc_report") && bind(lib, dw_.report_end, "dwfl_report_end") &&
           bind(lib, dw_.addrmodule, "dwfl_addrmodule") && bind(lib, dw_.module_addrname, "dwfl_module_addrname") &&
           bind(lib, dw_.module_getsrc, "dwfl_module_getsrc") && bind(lib, dw_.lineinfo, "dwfl_lineinfo") &&
           bind(lib, dw_.module_info, "dwfl_module_info") && (bind_inline_api(lib), true);
  }

  // Optional: without it a frame in inlined code gets the inlined code's line.
  void bind_inline_api(void* lib) {
    inline_api_ = bind(lib, dw_.module_addrdie, "dwfl_module_addrdie") && bind(lib, dw_.getscopes, "dwarf_getscopes") &&
                  bind(lib, dw_.tag, "dwarf_tag") && bind(lib, dw_.attr, "dwarf_attr") &&
                  bind(lib, dw_.formudata, "dwarf_formudata") && bind(lib, dw_.getsrcfiles, "dwarf_getsrcfiles") &&
                  bind(lib, dw_.filesrc, "dwarf_filesrc");
  }

  // A pc in code inlined into the frame's function (a kernel's launch stub
  // inlined where <<<>>> is written, a small helper): the line table gives
  // the inlined code's line, but the frame is the function's, whose line is
  // where it called the outermost inlined code. Sets `file` and `line` to that.
  void call_site_of_inlined_code(void* module, std::uint64_t pc, const char*& file, int& line) {
    std::uint64_t bias = 0;
    void* cu = dw_.module_addrdie(module, pc, &bias);
    dwarf_die* scopes = nullptr;
    const int n = cu ? dw_.getscopes(cu, pc - bias, &scopes) : 0;
    dwarf_die* outermost_inlined = nullptr;
    for (int i = 0; i < n; ++i) {
      const int tag = dw_.tag(&scopes[i]);
      if (tag == dw_tag_subprogram) break;
      if (tag == dw_tag_inlined_subroutine) outermost_inlined = &scopes[i];
    }
    std::uint64_t call_file = 0, call_line = 0;
    dwarf_attribute a{};
    void* files = nullptr;
    std::size_t file_count = 0;
    if (outermost_inlined && dw_.attr(outermost_inlined, dw_at_call_line, &a) && dw_.formudata(&a, &call_line) == 0 &&
        call_line > 0 && dw_.attr(outermost_inlined, dw_at_call_file, &a) && dw_.formudata(&a, &call_file) == 0 &&
        dw_.getsrcfiles(cu, &files, &file_count) == 0 && call_file < file_count) {
      if (const char* name = dw_.filesrc(files, std::size_t(call_file), nullptr, nullptr)) {
        file = name;
        line = int(call_line);
      }
    }
    std::free(scopes);
  }

  void open_session() {
    void* s = dw_.begin(&callbacks_);
    if (!s) return;
    dw_.report_begin(s);
    const bool reported = dw_.linux_proc_report(s, ::getpid()) == 0;
    if (dw_.report_end(s, nullptr, nullptr) != 0 || !reported) {
      dw_.end(s);
      return;
    }
    session_ = s;
  }

  symbolized_frame resolve_in(void* module, std::uint64_t pc) {
    std::uint64_t start = 0;
    const char* path = dw_.module_info(module, nullptr, &start, nullptr, nullptr, nullptr, nullptr, nullptr);
    const std::string_view module_path = path ? path : "";
    const char* symbol = dw_.module_addrname(module, pc);
    const std::string function = symbol ? demangled_name(symbol) : std::string();
    const char* file = nullptr;
    int line = 0;
    if (void* src = dw_.module_getsrc(module, pc)) file = dw_.lineinfo(src, nullptr, &line, nullptr, nullptr, nullptr);
    if (inline_api_ && file) call_site_of_inlined_code(module, pc, file, line);
    symbolized_frame f;
    f.text = frame_text(function, file, line, module_path, pc - start);
    f.tool_frame = is_tool_module(module_path) || is_tool_function(function);
    return f;
  }

  static symbolized_frame resolve_with_dladdr(std::uint64_t pc) {
    Dl_info info{};
    symbolized_frame f;
    if (!::dladdr(reinterpret_cast<void*>(pc), &info)) {
      char hex[24];
      std::snprintf(hex, sizeof hex, "0x%llx", static_cast<unsigned long long>(pc));
      f.text = hex;
      return f;
    }
    const std::string_view module = info.dli_fname ? info.dli_fname : "";
    const std::string function = info.dli_sname ? demangled_name(info.dli_sname) : std::string();
    f.text = frame_text(function, nullptr, 0, module, pc - reinterpret_cast<std::uint64_t>(info.dli_fbase));
    f.tool_frame = is_tool_module(module) || is_tool_function(function);
    return f;
  }

  libdw_api dw_;
  dwfl_callbacks callbacks_{};
  void* session_ = nullptr;
  bool reported_again_ = false;
  bool inline_api_ = false;  // call_site_of_inlined_code() can run
};

}  // namespace cuprof::detail
