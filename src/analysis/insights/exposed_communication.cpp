// "exposed communication": collective (NCCL) kernel time during which no
// compute kernel runs on the same GPU (the union of the collectives minus the
// union of the other kernels, as HTA's comm/comp overlap computes it), less
// the time each rank's collective waited for the last rank to reach it: that
// wait is the straggler's cost (straggler.cpp), and counting it here too
// would count the same time twice and blame the communication for it. Per
// rank, with HTA's overlap percentage and the time by collective kind.
#include "rank_rules.hpp"

#include <algorithm>

namespace cuprof::detail::insight_rules {

void exposed_communication(rank_report& r, const rank_options& o) {
  std::uint64_t exposed = 0, comm = 0, gpu = 0, waiting = 0;
  const rank_summary* most = nullptr;
  for (const rank_summary& s : r.ranks) {
    exposed += s.exposed_after_wait_ns, comm += s.comm_ns, gpu += s.gpu_ns, waiting += s.exposed_ns - s.exposed_after_wait_ns;
    if (!most || s.exposed_after_wait_ns > most->exposed_after_wait_ns) most = &s;
  }
  if (exposed == 0 || !most) return;
  finding f;
  f.kind = "exposed communication";
  f.headline = us_text(double(exposed)) + " of " + us_text(double(comm)) +
               " in collectives runs with no compute kernel on its GPU once every rank has reached it" +
               (waiting ? " (" + us_text(double(waiting)) + " more waits for the last rank: the straggler's)" : std::string()) +
               " over " + std::to_string(r.ranks.size()) + (r.ranks.size() == 1 ? " rank" : " ranks") + "; most on rank " +
               std::to_string(most->rank) + ": " + us_text(double(most->exposed_after_wait_ns));
  std::size_t listed = 0;
  for (const rank_summary& s : r.ranks) {
    if (listed++ >= o.max_items) {
      f.details.push_back("... " + std::to_string(r.ranks.size() - o.max_items) + " more ranks");
      break;
    }
    std::string kinds;
    for (const collective_total& k : s.kinds)
      kinds += (kinds.empty() ? "" : ", ") + k.kind + " " + std::to_string(k.count) + "x " + us_text(double(k.total_ns));
    f.details.push_back("rank " + std::to_string(s.rank) + ": collectives " + us_text(double(s.collective_ns)) +
                        (kinds.empty() ? std::string() : " (" + kinds + ")") + ", exposed " +
                        us_text(double(s.exposed_after_wait_ns)) + " after the last rank's arrival (" +
                        us_text(double(s.exposed_ns)) + " with the waits), overlap " + fixed_text(s.overlap_pct(), 1) +
                        "%, compute " + us_text(double(s.compute_ns)));
  }
  f.details.push_back(
      "exposed: the union of a GPU's collective kernels minus the union of its other kernels and of the time each "
      "waited for the last rank to reach it; overlap: the share of communication time compute hides, waits included "
      "(HTA's get_comm_comp_overlap)");
  f.where = "rank " + std::to_string(most->rank) + ": " + (most->sources.empty() ? std::string() : most->sources.front());
  f.cost_ns = exposed;
  f.cost_of = cost_base::gpu_time;
  f.saving_ns = exposed;
  f.estimate =
      "at most the exposed time, if the collectives ran under compute, as DDP's bucketed all-reduce does during backward";
  add_rank_finding(r, std::move(f), gpu);
}

}  // namespace cuprof::detail::insight_rules
