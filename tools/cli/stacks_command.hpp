// `cuprof stacks TRACE`: the CUDA calls' native stacks in flamegraph.pl's
// folded format, as torch's export_stacks writes them.
#pragma once

#include <cuprof/output/folded_stacks.hpp>

#include "common.hpp"

#include <string>
#include <vector>

namespace cuprof::cli {

inline const char* stacks_about =
    "usage: cuprof stacks TRACE [--metric M]\n"
    "\n"
    "Prints the native call stacks of the trace's CUDA calls (recorded with with_stack,\n"
    "CUPROF_STACKS=1 or cuprof run --stacks) in the folded format of flamegraph.pl and\n"
    "speedscope, as torch's export_stacks writes it: a line per stack, frames root first\n"
    "joined by ';', then a value in microseconds. TRACE - reads standard input.\n"
    "\n";

inline const command_options stacks_command_options = {
    {"metric", "M",
     "self_cuda_time_total (default; self_device_time_total too): the GPU time of the work launched from each stack; "
     "self_cpu_time_total: the CUDA calls' own CPU time"},
};

inline int stacks_command(const invocation& c) {
  const auto& [args, out, err, plan, term] = c;
  const parsed p = parse(args, 2, stacks_command_options, "stacks");
  if (p.positional.size() != 1)
    throw usage_error(p.positional.empty() ? "missing the TRACE file" : "stacks takes one TRACE file", "stacks");
  stack_metric metric = stack_metric::self_cuda_time_total;
  if (const std::string* m = option(p, "metric")) {
    try {
      metric = detail::parse_stack_metric(*m);
    } catch (const error& e) {
      throw usage_error(detail::message_of(e), "stacks");
    }
  }
  const loaded_trace lt = load(p.positional[0], term, "stacks");
  if (lt.t.stacks.empty())
    err += "cuprof: " + detail::terminal_safe(lt.source) + ": no call stacks in the trace (record it with with_stack)\n";
  out += folded_stacks(lt.t, metric);
  return exit_ok;
}

}  // namespace cuprof::cli
