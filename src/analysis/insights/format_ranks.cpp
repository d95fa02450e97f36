// Several ranks as text: `cuprof insights DIR` (summary, ranks, clocks,
// steps, findings) and `cuprof table DIR` (a row per rank, its collectives by
// kind). Names from the traces (hosts, paths, step names) are printed
// terminal-safe.
#include "rank_rules.hpp"

#include <cuprof/base/text.hpp>

#include <algorithm>
#include <cstdio>

namespace cuprof {

namespace detail::insight_rules {

std::string host_text(const std::string& host) { return host.empty() ? "the host with no name" : "host " + host; }

void add_rank_finding(rank_report& r, finding f, std::uint64_t base_ns) {
  f.cost_share = base_ns ? double(f.cost_ns) / double(base_ns) : 0.0;
  if (f.cause.empty()) f.cause = f.kind;
  r.findings.push_back(std::move(f));
}

void rank_rules(rank_report& r, const rank_options& o) {
  stragglers(r, o);
  exposed_communication(r, o);
  clock_offsets(r, o);
  std::stable_sort(r.findings.begin(), r.findings.end(), [](const finding& a, const finding& b) {
    return a.saving_ns != b.saving_ns ? a.saving_ns > b.saving_ns : a.cost_ns > b.cost_ns;
  });
  for (const finding& f : r.findings)
    if (f.saving_ns > 0 && r.summary.size() < 3) r.summary.push_back(summary_line(f));
}

}  // namespace detail::insight_rules

namespace {

using detail::fixed_text;
using detail::percent_text;
using detail::terminal_safe;
using detail::us_text;
using detail::insight_rules::host_text;

std::string host_cell(const std::string& host) { return host.empty() ? "-" : detail::display_name(host, 16); }

std::string rank_rows(const rank_report& r) {
  std::string out;
  char line[240];
  std::snprintf(line, sizeof line, "  %6s  %-16s %12s %12s %12s %12s %8s %12s %9s\n", "rank", "host", "GPU time", "compute",
                "collectives", "exposed", "overlap", "waiting", "last in");
  out += line;
  for (const rank_summary& s : r.ranks) {
    const std::string last = s.matched ? std::to_string(s.last) + "/" + std::to_string(s.matched) : "-";
    std::snprintf(line, sizeof line, "  %6lld  %-16s %12s %12s %12s %12s %7s%% %12s %9s\n", static_cast<long long>(s.rank),
                  host_cell(s.host).c_str(), us_text(double(s.gpu_ns)).c_str(), us_text(double(s.compute_ns)).c_str(),
                  us_text(double(s.collective_ns)).c_str(), us_text(double(s.exposed_after_wait_ns)).c_str(),
                  s.comm_ns ? fixed_text(s.overlap_pct(), 1).c_str() : "-", us_text(double(s.wait_ns)).c_str(), last.c_str());
    out += line;
  }
  return out;
}

std::string kind_rows(const rank_report& r) {
  std::string out;
  for (const rank_summary& s : r.ranks) {
    out += "  rank " + std::to_string(s.rank) + ":";
    if (s.kinds.empty()) out += " none";
    for (const collective_total& k : s.kinds)
      out += " " + k.kind + " " + std::to_string(k.count) + "x " + us_text(double(k.total_ns)) +
             (k.bytes ? " (" + detail::bytes_text(k.bytes) + ")" : "") + (&k == &s.kinds.back() ? "" : ";");
    out += "\n";
  }
  return out;
}

std::string list_ranks(const std::vector<std::int64_t>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

std::string clock_lines(const rank_report& r) {
  std::string out;
  const std::string ref_host = r.clocks.empty() ? std::string() : r.clocks.front().host;
  for (const clock_alignment& c : r.clocks) {
    out += "  " + terminal_safe(host_text(c.host)) + " (" + list_ranks(c.ranks) + "): ";
    if (c.reference) {
      if (c.samples == 0) out += "the reference clock\n";
      else
        out += "one clock, the reference; collective ends differ from rank " + std::to_string(r.ranks.front().rank) +
               "'s by a median of " + us_text(double(c.offset_ns)) + ", ±" + us_text(double(c.spread_ns)) + " over " +
               std::to_string(c.samples) + " collectives (no offset applied)\n";
    } else if (!c.applied) {
      out += "no collective to compare with the reference: no offset applied\n";
    } else {
      const std::uint64_t size = std::uint64_t(c.offset_ns < 0 ? -c.offset_ns : c.offset_ns);
      out += us_text(double(size)) + (c.offset_ns < 0 ? " behind " : " ahead of ") + terminal_safe(host_text(ref_host)) + ", ±" +
             us_text(double(c.spread_ns)) + " from " + std::to_string(c.samples) + " collectives (subtracted before matching)\n";
    }
  }
  return out;
}

}  // namespace

std::string format_rank_insights(const rank_report& r) {
  std::string out = detail::insight_rules::summary_block(r.summary);
  out += "Ranks: " + std::to_string(r.ranks.size()) + " (" + std::to_string(r.traces) + " traces, " + std::to_string(r.hosts) +
         (r.hosts == 1 ? " host" : " hosts") +
         "); collectives: NCCL kernels; exposed: with no compute kernel on the GPU once the last rank reached it "
         "(the wait before is in waiting); "
         "overlap: HTA's comm/comp overlap\n";
  out += rank_rows(r);
  out += "\nCollectives by kind\n" + kind_rows(r);
  out += "\nClocks (from " + std::to_string(r.matched) + " matched collectives' end times)\n" + clock_lines(r);
  if (!r.groups.empty()) {
    out += r.by_step ? "\nSteps: the rank that reached the step's collectives last, its lateness, the others' waiting\n"
                     : "\nCollectives: the rank that reached them last, its lateness, the others' waiting\n";
    const bool windows = std::any_of(r.ranks.begin(), r.ranks.end(), [](const rank_summary& s) { return s.sources.size() > 1; });
    for (const straggler_group& g : r.groups) {
      out += "  " + detail::display_name(g.name, 60) + (windows ? " (window " + std::to_string(g.window) + ")" : "") + ": ";
      if (g.slowest < 0) out += "no rank late in " + std::to_string(g.collectives) + " collectives";
      else
        out += "rank " + std::to_string(g.slowest) + " last in " + std::to_string(g.last) + " of " +
               std::to_string(g.collectives) + ", " + us_text(double(g.late_ns)) + " late";
      for (const straggler_group::rank_part& p : g.ranks) {
        if (p.rank == g.slowest) continue;
        out += "; rank " + std::to_string(p.rank) + " waited " + us_text(double(p.wait_ns));
        if (p.basis_ns)
          out += " (" + percent_text(double(p.wait_ns) / double(p.basis_ns)) + " of its " + (r.by_step ? "step)" : "window)");
      }
      out += "\n";
    }
  }
  if (!r.notes.empty()) {
    out += "\nNotes\n";
    for (const std::string& n : r.notes) out += "  " + terminal_safe(n) + "\n";
  }
  out += "\nFindings";
  out += r.findings.empty() ? ": none\n" : ", by estimated saving\n";
  for (std::size_t i = 0; i < r.findings.size(); ++i) {
    const finding& f = r.findings[i];
    out += "  " + std::to_string(i + 1) + ". [" + f.kind + "] " + terminal_safe(f.headline) + "\n";
    if (f.cost_of != cost_base::none)
      out += "       costs " + us_text(double(f.cost_ns)) + " (" + percent_text(f.cost_share) + " of " +
             cost_base_name(f.cost_of) + "); could save " +
             (f.saving_ns ? "~" + us_text(double(f.saving_ns)) : std::string("nothing")) + ": " + f.estimate + "\n";
    for (const std::string& d : f.details) out += "       " + terminal_safe(d) + "\n";
    if (!f.where.empty()) out += "       where: " + terminal_safe(f.where) + "\n";
  }
  return out;
}

std::string format_rank_table(const rank_report& r) {
  std::string out = rank_rows(r);
  out += "\nCollectives by kind\n" + kind_rows(r);
  for (const std::string& n : r.notes) out += "Note: " + terminal_safe(n) + "\n";
  return out;
}

}  // namespace cuprof
