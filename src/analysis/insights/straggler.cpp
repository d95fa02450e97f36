// "straggler": the rank that reaches the matched collectives last, so that
// the others wait for it; per step (ProfilerStep#N) or, without steps, per
// collective. Its lateness is its kernel's start after the next-to-last
// rank's; each other rank waits from its own start to the last one's.
#include "rank_rules.hpp"

#include <algorithm>

namespace cuprof::detail::insight_rules {

void stragglers(rank_report& r, const rank_options& o) {
  if (r.matched == 0 || r.ranks.size() < 2) return;
  const rank_summary* slowest = nullptr;
  std::uint64_t waits = 0, others_basis = 0;
  for (const rank_summary& s : r.ranks)
    if (!slowest || s.late_ns > slowest->late_ns) slowest = &s;
  if (!slowest || slowest->late_ns == 0) return;
  for (const rank_summary& s : r.ranks)
    if (&s != slowest) waits += s.wait_ns, others_basis += s.basis_ns();
  const std::string unit = r.by_step ? "step" : "window";
  std::size_t groups = 0;  // steps with matched collectives
  for (const straggler_group& g : r.groups) groups += g.collectives > 0;
  const bool one = double(slowest->last) >= o.straggler_share * double(slowest->matched) && slowest->matched > 0;
  std::string waiting;
  std::size_t listed = 0;
  for (const rank_summary& s : r.ranks) {
    if (&s == slowest) continue;
    if (listed++ >= o.max_items) {
      waiting += ", ...";
      break;
    }
    waiting += (waiting.empty() ? "" : ", ") + std::string("rank ") + std::to_string(s.rank) + " waits " +
               percent_text(s.basis_ns() ? double(s.wait_ns) / double(s.basis_ns()) : 0.0);
  }
  waiting += " of the " + unit;
  finding f;
  f.kind = "straggler";
  if (one) {
    f.headline =
        "rank " + std::to_string(slowest->rank) + " is the straggler: it reaches " + std::to_string(slowest->last) + " of " +
        std::to_string(slowest->matched) + " " + r.matched_kinds + " last, " +
        (r.by_step && groups ? us_text(double(slowest->late_ns) / double(groups)) + " late per step on average"
                             : us_text(double(slowest->late_ns) / double(slowest->last)) + " late each time on average") +
        "; " + waiting;
    r.straggler = slowest->rank;
  } else {
    std::string turns;
    for (const rank_summary& s : r.ranks)
      if (s.last)
        turns += (turns.empty() ? "" : ", ") + std::string("rank ") + std::to_string(s.rank) + " " + std::to_string(s.last);
    f.headline = "no single straggler: the ranks reach the " + r.matched_kinds + " last in turn (" + turns + " of " +
                 std::to_string(slowest->matched) + "); " + waiting;
  }
  // The steps (or kinds) where the slowest was latest.
  std::vector<const straggler_group*> worst;
  for (const straggler_group& g : r.groups)
    if (g.late_ns > 0) worst.push_back(&g);
  std::stable_sort(worst.begin(), worst.end(),
                   [](const straggler_group* a, const straggler_group* b) { return a->late_ns > b->late_ns; });
  std::string lines;
  for (std::size_t i = 0; i < worst.size() && i < o.max_items; ++i) {
    const straggler_group& g = *worst[i];
    lines += (lines.empty() ? "" : ", ") + g.name +
             (r.ranks.front().sources.size() > 1 ? " (window " + std::to_string(g.window) + ")" : "") + " rank " +
             std::to_string(g.slowest) + " " + us_text(double(g.late_ns));
  }
  if (!lines.empty()) f.details.push_back(std::string(r.by_step ? "latest steps: " : "latest by kind: ") + lines);
  f.details.push_back(
      "lateness: a rank's collective kernel starting after the next-to-last rank's; waiting: each other rank's start "
      "to the last one's, summed over " +
      std::to_string(r.matched) + " matched " + r.matched_kinds + (r.hosts > 1 ? " (clocks aligned first)" : ""));
  f.details.push_back(
      "the straggler's work before each collective takes longer, or its CPU launches later: read its own "
      "trace with cuprof insights");
  f.where =
      "rank " + std::to_string(slowest->rank) + ": " + (slowest->sources.empty() ? std::string() : slowest->sources.front());
  f.cost_ns = waits;
  f.cost_of = cost_base::window;
  f.saving_ns = one ? slowest->late_ns : 0;
  f.estimate = one ? "its lateness: each collective would start that much earlier on every rank"
                   : "none estimated: the lateness moves between ranks";
  add_rank_finding(r, std::move(f), others_basis);
}

}  // namespace cuprof::detail::insight_rules
