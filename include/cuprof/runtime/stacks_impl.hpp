// The definitions of the call stacks' export (profile::export_stacks):
// the folded text (output/folded_stacks.hpp) written atomically. Compiled once
// per program (runtime.hpp).
#pragma once

#include "../base/log.hpp"
#include "../base/text.hpp"
#include "../output/file_sink.hpp"
#include "../output/folded_stacks.hpp"
#include "../profile.hpp"

#include <string>

namespace cuprof {

void profile::export_stacks(const std::string& path, const std::string& metric) const {
  const std::string text = folded_stacks(last_trace(), detail::parse_stack_metric(metric));
  if (last_trace().stacks.empty())
    detail::log_line("no call stacks to export to '" + detail::terminal_safe(path) +
                     "': the profile was not started with with_stack, or recorded no CUDA call");
  detail::atomic_file file(path);
  file.write(text.data(), text.size());
  file.commit();
}

}  // namespace cuprof
