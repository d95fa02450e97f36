// "elementwise chain": elementwise kernels on one stream that one scope call
// launched (the innermost scope enclosing them, below the step; at most
// chain_gap_kernels other kernels between two of them), or back to back
// without a known scope: each writes its result to memory and the next reads
// inputs back. Fused (as torch.compile or a hand-written kernel does),
// memory-bound elementwise kernels cost about as much as the longest of them:
// the intermediates stay in registers. With the kernels' DRAM throughput
// (trace::gpu_metrics), the estimate is by bytes rather than time: each
// kernel's traffic is its time x its DRAM share of peak; fused, the chain
// moves about its largest member's traffic at the best DRAM share any of
// them reached.
#include "context.hpp"

#include <cuprof/model/attribution.hpp>

#include <algorithm>
#include <map>

namespace cuprof::detail::insight_rules {

namespace {

// The innermost scope enclosing both, below the steps; no_index when none (or a step).
std::uint32_t common_scope(const trace& t, std::uint32_t a, std::uint32_t b) {
  std::vector<std::uint32_t> up;
  for (; a != no_index; a = t.spans[a].parent) up.push_back(a);
  for (; b != no_index; b = t.spans[b].parent)
    if (std::find(up.begin(), up.end(), b) != up.end()) return t.spans[b].is_step ? no_index : b;
  return no_index;
}

// A kernel's short name: what its decoded name says (its operation), else the name itself, cut.
std::string short_kernel(const trace& t, name_id n) {
  const std::string& name = t.names.str(n);
  const kernel_name_info k = decode_kernel_name(name);
  if (k.category == kernel_category::elementwise && !k.op.empty()) return k.op;
  return shorten(name, 60);
}

}  // namespace

void elementwise_chains(context& c) {
  const trace& t = c.t;
  const std::vector<std::uint32_t> order = c.stream_order();
  struct group {
    std::size_t count = 0;
    std::uint64_t total = 0, saving = 0;
    std::vector<std::uint64_t> per_member;  // total time per member position
    std::vector<std::uint32_t> rows;        // per member position: its in.kernels entry
    std::uint32_t first = no_index, scope = no_index;
    std::vector<name_id> between;  // other kernels between the members, first occurrence
  };
  std::map<std::vector<name_id>, group> groups;
  std::vector<std::vector<name_id>> keys;  // in first-seen order
  std::vector<std::uint32_t> run;
  std::vector<name_id> between, pending;
  std::uint32_t run_scope = no_index;
  const auto flush = [&]() {
    if (run.size() >= 2) {
      std::vector<name_id> key;
      std::uint64_t total = 0, longest = 0;
      for (std::uint32_t i : run) {
        const gpu_activity& g = t.gpu[i];
        key.push_back(g.name);
        total += g.end_ns - g.start_ns;
        longest = std::max(longest, g.end_ns - g.start_ns);
      }
      auto [it, inserted] = groups.try_emplace(key);
      group& gr = it->second;
      if (inserted) {
        keys.push_back(key);
        gr.first = run[0];
        gr.scope = run_scope;
        gr.per_member.assign(key.size(), 0);
        for (std::uint32_t i : run) gr.rows.push_back(c.row_of[i]);
        gr.between = between;
      }
      ++gr.count;
      gr.total += total;
      gr.saving += total - longest;
      for (std::size_t i = 0; i < run.size(); ++i) gr.per_member[i] += t.gpu[run[i]].end_ns - t.gpu[run[i]].start_ns;
    }
    run.clear();
    between.clear();
    pending.clear();
    run_scope = no_index;
  };
  for (std::size_t k = 0; k < order.size(); ++k) {
    const gpu_activity& g = t.gpu[order[k]];
    if (!run.empty() && !c.same_stream(g, t.gpu[run[0]])) flush();
    if (g.kind != gpu_kind::kernel || c.category_of(g.name) != kernel_category::elementwise) {
      if (!run.empty() && g.kind == gpu_kind::kernel) pending.push_back(g.name);
      continue;
    }
    if (!run.empty()) {
      const std::uint32_t scope = common_scope(t, launching_span(t, t.gpu[run.back()]), launching_span(t, g));
      const bool same_call =
          scope != no_index && (run.size() == 1 || scope == run_scope) && pending.size() <= c.o.chain_gap_kernels;
      const bool back_to_back = pending.empty() && scope == no_index && run_scope == no_index;
      if (same_call || back_to_back) {
        if (run.size() == 1) run_scope = scope;
        for (name_id n : pending)
          if (std::find(between.begin(), between.end(), n) == between.end()) between.push_back(n);
        pending.clear();
        run.push_back(order[k]);
        continue;
      }
      flush();
    }
    run.push_back(order[k]);
  }
  flush();
  const bool sampled = !t.gpu_metrics.empty();
  for (const std::vector<name_id>& key : keys) {
    const group& gr = groups[key];
    // By bytes when every member's DRAM share is known (see above).
    bool by_bytes = sampled;
    double largest = 0, best = 0, dram_ns = 0, sm_ns = 0, sm_weight = 0;
    kernel_counters counters;  // the chain's, time-weighted over its members
    for (std::size_t i = 0; i < key.size() && by_bytes; ++i) {
      const kernel_counters& k = c.in.kernels[gr.rows[i]].counters;
      if (k.samples == 0 || k.samples < c.o.metric_min_samples || !(k.dram >= 0)) {
        by_bytes = false;
        break;
      }
      const double ns = double(gr.per_member[i]);
      largest = std::max(largest, ns * k.dram);
      best = std::max(best, k.dram);
      dram_ns += ns * k.dram;
      if (k.sm == k.sm) sm_ns += ns * k.sm, sm_weight += ns;
      counters.samples += k.samples;
    }
    by_bytes = by_bytes && best > 0;
    std::uint64_t saving = gr.saving;
    if (by_bytes) {
      counters.dram = dram_ns / double(gr.total);
      if (sm_weight > 0) counters.sm = sm_ns / sm_weight;
      saving = gr.total - std::min(gr.total, std::uint64_t(largest / best));
    }
    finding f;
    f.kind = "elementwise chain";
    std::string chain;
    for (name_id n : key) chain += (chain.empty() ? "" : " -> ") + short_kernel(t, n);
    f.cause = f.kind + ": " + chain;
    f.headline =
        std::to_string(key.size()) + " elementwise kernels, " + chain + ", " +
        (gr.scope != no_index ? "in one " + t.names.str(t.spans[gr.scope].name) + " call" : std::string("back to back")) + ", " +
        std::to_string(gr.count) + (gr.count == 1 ? " time" : " times") + ": " + us_text(gr.total);
    if (by_bytes) f.headline += "; " + counters_text(counters, counter_bound::memory);
    for (std::size_t i = 0; i < key.size(); ++i)
      f.details.push_back(
          shorten(t.names.str(key[i]), 90) + ": " + us_text(gr.per_member[i]) +
          (by_bytes ? "; " + counters_text(c.in.kernels[gr.rows[i]].counters, counter_bound::memory) : std::string()));
    std::string others;
    for (name_id n : gr.between) others += (others.empty() ? "" : ", ") + short_kernel(t, n);
    if (!others.empty()) f.details.push_back("other kernels between them: " + others);
    f.details.push_back(
        "each writes its result to memory and the next reads it back; fused (torch.compile, a hand-written "
        "kernel) the intermediates stay in registers, if one feeds the other (the trace shows no data "
        "flow, nor the bytes moved)");
    if (sampled && !by_bytes)
      f.details.push_back("its kernels' counters are too few (kernels shorter than the sampling interval): estimated by time");
    f.where = c.where_gpu(t.gpu[gr.first]);
    f.cost_ns = gr.total;
    f.cost_of = cost_base::gpu_time;
    f.saving_ns = saving;
    f.estimate = by_bytes
                     ? "fused, the chain moves about its largest member's bytes (time x DRAM share: " + us_text(largest / 100.0) +
                           " at DRAM's peak) at the best DRAM share among them (" + fixed_text(best, 0) +
                           "%): the chain's time minus " + us_text(largest / best)
                     : "fused, memory-bound elementwise kernels cost about the longest of them: the chain's time minus "
                       "its longest kernel, per occurrence";
    c.add(std::move(f));
  }
}

}  // namespace cuprof::detail::insight_rules
