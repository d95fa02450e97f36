// The short form of a call stack that a call's "Call stack" arg carries, for
// Perfetto, which reads no stackFrames: the file keeps each whole stack once
// (trace_header.hpp), each call names its own ("sf"). Text in, text out.
#pragma once

#include "../base/demangle.hpp"

#include <string>
#include <string_view>
#include <vector>

namespace cuprof::detail {

// A frame as a call's "Call stack" arg shows it: the function without its
// return type, template arguments, parameter list and clone suffix, with its
// "(file:line)", the file by its name alone, where it has one. "bool
// at::cuda::blas::gemm<float>(char, long) (/src/Blas.cpp:42)" is
// "at::cuda::blas::gemm (Blas.cpp:42)". A frame
// named by library and offset ("libx.so+0x1a2b") is left as it is; nvcc's
// launch stub, "__device_stub__Z...", is named by its kernel.
inline std::string short_frame(std::string_view frame) {
  constexpr std::string_view stub = "__device_stub_";
  if (frame.substr(0, stub.size() + 2) == std::string(stub) + "_Z") {
    // The stub's own parameters follow its mangled name: "__device_stub__Z...(float*, int)".
    const std::string_view mangled = frame.substr(stub.size(), frame.find('(') - stub.size());
    const std::string kernel = demangled_name(std::string(mangled).c_str());
    if (kernel.substr(0, 2) != "_Z") return short_frame(kernel);
  }
  std::string_view name = frame, where;
  // "(file:line)" after the last " (": kept.
  if (const std::size_t at = frame.rfind(" ("); at != std::string_view::npos && frame.back() == ')') {
    const std::string_view inside = frame.substr(at + 2, frame.size() - at - 3);
    const std::size_t colon = inside.rfind(':');
    if (colon != std::string_view::npos && colon + 1 < inside.size() &&
        inside.find_first_not_of("0123456789", colon + 1) == std::string_view::npos)
      where = frame.substr(at), name = frame.substr(0, at);
  }
  // The file by its name alone: "(/home/me/src/model.cpp:42)" is "(model.cpp:42)".
  if (const std::size_t slash = where.rfind('/'); slash != std::string_view::npos) where = where.substr(slash + 1);
  for (std::size_t clone; name.size() > 1 && name.back() == ']' && (clone = name.rfind(" [clone ")) != std::string_view::npos;)
    name = name.substr(0, clone);
  std::string out;
  int angle = 0;
  bool parameters = false;  // a demangled function's: only then may a return type precede its name
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    if (!angle && out.size() >= 8 && out.compare(out.size() - 8, 8, "operator") == 0 &&
        std::string_view("<>=!+-*/%&|^~[]()").find(c) != std::string_view::npos) {
      // An operator's own symbols ("operator<<", "operator()"): part of its name.
      const std::size_t end = name.find_first_not_of("<>=!+-*/%&|^~[]()", i);
      std::string_view symbols = name.substr(i, (end == std::string_view::npos ? name.size() : end) - i);
      if (symbols.size() > 2 && symbols.substr(0, 2) == "()") symbols = "()";  // operator() and its parameters
      else if (const std::size_t paren = symbols.find('('); paren != std::string_view::npos) symbols = symbols.substr(0, paren);
      out += symbols;
      i += symbols.size() - 1;
      continue;
    }
    if (c == '<') {
      ++angle;
    } else if (c == '>' && angle) {
      --angle;
    } else if (angle) {
      continue;
    } else if (c == '(' && name.substr(i, 21) == "(anonymous namespace)") {
      out += "(anonymous namespace)";
      i += 20;
    } else if (c == '(') {  // a parameter list: to its matching ')'
      parameters = true;
      for (int depth = 0; i < name.size(); ++i)
        if (name[i] == '(') ++depth;
        else if (name[i] == ')' && --depth == 0) break;
    } else {
      out += c;
    }
  }
  for (bool trimmed = true; trimmed;) {  // " const", and the blank a template's arguments left ("operator<< <char>")
    trimmed = false;
    while (!out.empty() && out.back() == ' ') out.pop_back(), trimmed = true;
    if (out.size() > 6 && out.compare(out.size() - 6, 6, " const") == 0) out.resize(out.size() - 6), trimmed = true;
  }
  // The return type: what precedes the last space outside parentheses.
  std::size_t last_space = std::string::npos;
  int depth = 0;
  for (std::size_t i = 0; i < out.size(); ++i)
    if (out[i] == '(') ++depth;
    else if (out[i] == ')') --depth;
    else if (out[i] == ' ' && depth == 0) last_space = i;
  if (parameters && last_space != std::string::npos && last_space + 1 < out.size()) out.erase(0, last_space + 1);
  if (out.empty()) return std::string(frame);
  return out + (where.empty() ? std::string() : (where.front() == ' ' ? "" : " (") + std::string(where));
}

// What a call's "Call stack" arg shows of its stack (innermost first): short
// frames, a run of one library's frames that only its offsets name as one
// entry ("libx.so (4 frames)"), the innermost entries up to about
// `budget` characters (one at least), then "+N frames" for the rest: a
// PyTorch launch's 46 frames take 4 KB whole. Perfetto shows the arg; the
// whole stack is the file's stackFrames (cuprof stacks, the tables).
inline std::vector<std::string> stack_summary(const std::vector<std::string_view>& frames, std::size_t budget = 200) {
  // "libx.so+0x1a2b": its library, else empty.
  const auto library_of = [](std::string_view f) {
    const std::size_t plus = f.rfind("+0x");
    return plus != std::string_view::npos && plus > 0 &&
                   f.find_first_not_of("0123456789abcdef", plus + 3) == std::string_view::npos && f.size() > plus + 3
               ? f.substr(0, plus)
               : std::string_view();
  };
  std::vector<std::string> shown;
  std::size_t used = 0, i = 0;
  while (i < frames.size()) {
    const std::string_view library = library_of(frames[i]);
    std::size_t run = 1;
    if (!library.empty())
      while (i + run < frames.size() && library_of(frames[i + run]) == library) ++run;
    std::string entry = library.empty() ? short_frame(frames[i])
                        : run == 1      ? std::string(frames[i])
                                        : std::string(library) + " (" + std::to_string(run) + " frames)";
    if (!shown.empty() && used + entry.size() > budget) break;
    used += entry.size();
    shown.push_back(std::move(entry));
    i += run;
  }
  if (i < frames.size()) shown.push_back("+" + std::to_string(frames.size() - i) + " frames");
  return shown;
}

}  // namespace cuprof::detail
