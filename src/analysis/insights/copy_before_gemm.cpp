// "memset before GEMM", "memcpy before GEMM": a memset or memcpy on a stream
// immediately followed by a GEMM on that stream (cuBLAS's flag clear, addmm's
// bias copy).
#include "context.hpp"

#include <cuprof/model/attribution.hpp>

#include <algorithm>
#include <map>
#include <tuple>

namespace cuprof::detail::insight_rules {

void copies_before_gemms(context& c) {
  const trace& t = c.t;
  const insights_options& o = c.o;
  const std::vector<std::uint32_t> order = c.stream_order();
  struct group {
    std::vector<std::uint32_t> copies;
    std::vector<std::uint64_t> gaps;
    std::uint32_t gemm;
  };
  std::map<std::tuple<std::string, std::uint64_t, std::string>, group> groups;  // copy, bytes, GEMM: one cause
  std::vector<std::tuple<std::string, std::uint64_t, std::string>> keys;
  for (std::size_t k = 0; k + 1 < order.size(); ++k) {
    const gpu_activity& cp = t.gpu[order[k]];
    const gpu_activity& n = t.gpu[order[k + 1]];
    if ((cp.kind != gpu_kind::memcpy && cp.kind != gpu_kind::memset) || n.kind != gpu_kind::kernel) continue;
    if (!c.same_stream(cp, n)) continue;
    const kernel_category next = c.category_of(n.name);
    if (next != kernel_category::gemm && next != kernel_category::gemv) continue;
    auto key = std::make_tuple(t.names.str(cp.name), t.bytes_of(cp), t.names.str(n.name));
    auto [it, inserted] = groups.try_emplace(key, group{{}, {}, order[k + 1]});
    if (inserted) keys.push_back(key);
    it->second.copies.push_back(order[k]);
    it->second.gaps.push_back(n.start_ns > cp.end_ns ? n.start_ns - cp.end_ns : 0);
  }
  for (const auto& key : keys) {
    const group& gr = groups[key];
    const gpu_activity& cp = t.gpu[gr.copies[0]];
    const std::string& copy_name = std::get<0>(key);
    const std::string& gemm_name = std::get<2>(key);
    const std::string call = cp.api != no_index ? t.names.str(t.name_of(t.api_calls[cp.api])) : std::string();  // the first's
    const kernel_name_info gemm = decode_kernel_name(gemm_name);
    finding f;
    f.kind = cp.kind == gpu_kind::memset ? "memset before GEMM" : "memcpy before GEMM";
    std::vector<std::uint64_t> durs, call_durs;
    std::vector<std::string> steps;
    std::uint64_t gpu_ns = 0, cpu_ns = 0;
    for (std::uint32_t i : gr.copies) {
      const gpu_activity& g = t.gpu[i];
      durs.push_back(g.end_ns - g.start_ns);
      gpu_ns += g.end_ns - g.start_ns;
      if (g.api != no_index) call_durs.push_back(t.api_calls[g.api].end_ns - t.api_calls[g.api].start_ns);
      if (g.api != no_index) cpu_ns += t.api_calls[g.api].end_ns - t.api_calls[g.api].start_ns;
      const std::string st = c.step_name(c.step_of(g));
      if (!st.empty() && (steps.empty() || steps.back() != st)) steps.push_back(st);
    }
    f.headline = copy_name + " of " + bytes_text(std::get<1>(key)) + " right before the GEMM " + shorten(gemm_name, 90) + ", " +
                 std::to_string(gr.copies.size()) + (gr.copies.size() == 1 ? " time" : " times");
    std::string launched = call.empty() ? std::string("its launching call is not in the trace")
                                        : "launched by " + call + " (median " + us_text(median_of(call_durs)) + " on the CPU)";
    std::vector<std::string> scopes;  // the scopes that launched them, in first-seen order
    for (std::uint32_t i : gr.copies) {
      const std::uint32_t scope = launching_span(t, t.gpu[i]);
      if (scope == no_index) continue;
      const std::string& n = t.names.str(t.spans[scope].name);
      if (std::find(scopes.begin(), scopes.end(), n) == scopes.end()) scopes.push_back(n);
    }
    for (std::size_t i = 0; i < scopes.size() && i < o.max_items; ++i) launched += (i ? ", " : " in ") + scopes[i];
    f.details.push_back(us_text(median_of(std::move(durs))) + " median on the GPU, " + us_text(median_of(gr.gaps)) +
                        " median gap to the GEMM; " + launched);
    // What it costs: its launches' CPU time where CPU time matters, else its GPU time.
    const bool on_cpu = c.in.cpu_time_matters() && cpu_ns > 0;
    f.cause = f.kind + ": " + copy_name + " of " + bytes_text(std::get<1>(key)) + " before " + gemm_name;
    f.cost_ns = on_cpu ? cpu_ns : gpu_ns;
    f.cost_of = on_cpu ? cost_base::cpu_time : cost_base::gpu_time;
    const bool cublas_flag = cp.kind == gpu_kind::memset && t.bytes_of(cp) <= 64;
    if (cublas_flag && !on_cpu) {
      f.estimate = "cuBLAS's own flag clear, a fraction of a microsecond of GPU time a GEMM";
    } else if (cublas_flag) {
      f.saving_ns = f.cost_ns;
      f.estimate = "its launch calls' CPU time: a CUDA graph replays the memset without them";
    } else {
      f.saving_ns = f.cost_ns;
      f.estimate = on_cpu ? "its launch calls' CPU time, if the GEMM did without it (the bias in the GEMM's epilogue)"
                          : "its GPU time, if the GEMM did without it (the bias in the GEMM's epilogue)";
    }
    if (cublas_flag)
      f.details.push_back("cuBLAS clears a small flag or counter before this GEMM (" +
                          (gemm.schedule.empty() ? std::string("its kernel") : gemm.schedule) +
                          "): one more launch per GEMM, not your code");
    else if (cp.kind == gpu_kind::memcpy && cp.subkind == memcpy_device_to_device)
      f.details.push_back(gemm.epilogue.rfind("beta=1", 0) == 0
                              ? "the output seeded with C (the bias) before a beta=1 GEMM, as torch's addmm does: one more "
                                "launch and one more pass over the output"
                              : "a device-to-device copy before the GEMM: often the bias or C copied into the output");
    else f.details.push_back("work of its own before every such GEMM");
    if (gemm.recognised()) f.details.push_back("GEMM: " + gemm.summary());
    if (!steps.empty()) {
      std::string list;
      for (std::size_t i = 0; i < steps.size() && i < o.max_items; ++i) list += (i ? ", " : "") + steps[i];
      if (steps.size() > o.max_items) list += ", ...";
      f.details.push_back("in " + list);
    }
    f.where = c.where_gpu(cp);
    c.add(std::move(f));
  }
}

}  // namespace cuprof::detail::insight_rules
