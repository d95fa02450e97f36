// "elementwise chain": elementwise kernels on one stream that one scope call
// launched (the innermost scope enclosing them, below the step; at most
// chain_gap_kernels other kernels between two of them), or back to back
// without a known scope: each writes its result to memory and the next reads
// inputs back. Fused (as torch.compile or a hand-written kernel does),
// memory-bound elementwise kernels cost about as much as the longest of them:
// the intermediates stay in registers.
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
  for (const std::vector<name_id>& key : keys) {
    const group& gr = groups[key];
    finding f;
    f.kind = "elementwise chain";
    std::string chain;
    for (name_id n : key) chain += (chain.empty() ? "" : " -> ") + short_kernel(t, n);
    f.cause = f.kind + ": " + chain;
    f.headline =
        std::to_string(key.size()) + " elementwise kernels, " + chain + ", " +
        (gr.scope != no_index ? "in one " + t.names.str(t.spans[gr.scope].name) + " call" : std::string("back to back")) + ", " +
        std::to_string(gr.count) + (gr.count == 1 ? " time" : " times") + ": " + us_text(gr.total);
    for (std::size_t i = 0; i < key.size(); ++i)
      f.details.push_back(shorten(t.names.str(key[i]), 90) + ": " + us_text(gr.per_member[i]));
    std::string others;
    for (name_id n : gr.between) others += (others.empty() ? "" : ", ") + short_kernel(t, n);
    if (!others.empty()) f.details.push_back("other kernels between them: " + others);
    f.details.push_back(
        "each writes its result to memory and the next reads it back; fused (torch.compile, a hand-written "
        "kernel) the intermediates stay in registers, if one feeds the other (the trace shows no data "
        "flow, nor the bytes moved)");
    f.where = c.where_gpu(t.gpu[gr.first]);
    f.cost_ns = gr.total;
    f.cost_of = cost_base::gpu_time;
    f.saving_ns = gr.saving;
    f.estimate =
        "fused, memory-bound elementwise kernels cost about the longest of them: the chain's time minus its longest "
        "kernel, per occurrence";
    c.add(std::move(f));
  }
}

}  // namespace cuprof::detail::insight_rules
