// "clock offset": a host whose clock is ahead of (or behind) the reference
// rank's host, measured from the matched collectives' end times, with its
// precision and the number of collectives it rests on. The offset is
// subtracted before the straggler analysis (analyze_ranks).
#include "rank_rules.hpp"

namespace cuprof::detail::insight_rules {

void clock_offsets(rank_report& r, const rank_options&) {
  if (r.clocks.empty()) return;
  const clock_alignment& ref = r.clocks.front();
  for (const clock_alignment& c : r.clocks) {
    if (!c.applied) continue;
    finding f;
    f.kind = "clock offset";
    f.cause = "clock offset: " + c.host;
    const std::uint64_t size = std::uint64_t(c.offset_ns < 0 ? -c.offset_ns : c.offset_ns);
    f.headline = host_text(c.host) + "'s clock is " + us_text(double(size)) + (c.offset_ns < 0 ? " behind " : " ahead of ") +
                 host_text(ref.host) + "'s, ±" + us_text(double(c.spread_ns)) + " from " + std::to_string(c.samples) +
                 " collectives";
    f.details.push_back(
        "a collective ends at nearly the same moment on every rank: the offset is the median of the kernels' end "
        "time differences against rank " +
        std::to_string(ref.ranks.empty() ? 0 : ref.ranks.front()) + ", the precision their median absolute deviation");
    f.details.push_back("subtracted from " + host_text(c.host) + "'s times (its ranks: " + [&] {
      std::string s;
      for (std::int64_t x : c.ranks) s += (s.empty() ? "" : ", ") + std::to_string(x);
      return s;
    }() + ") before the ranks' collectives are compared");
    f.where = host_text(c.host);
    add_rank_finding(r, std::move(f), 0);
  }
}

}  // namespace cuprof::detail::insight_rules
