// `cuprof table` and `cuprof insights` on several ranks' traces: a directory
// of them (one trace per rank, repeat windows as more traces of a rank), or
// several files. Which files are traces, and the rank report in text, CSV and
// JSON. Included by cli.hpp, after its helpers.
#pragma once

#include <cuprof/analysis.hpp>
#include <cuprof/base/error.hpp>
#include <cuprof/base/text.hpp>

#include "report.hpp"

#include <algorithm>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

namespace cuprof::cli {

// What the command was given: files, and the directories' entries that may be traces.
struct trace_inputs {
  std::vector<std::string> paths;
  std::vector<bool> from_directory;  // parallel: found in a directory (skipped when unreadable), or named
  bool any_directory = false;
};

inline bool has_trace_suffix(const std::string& name) {
  const auto ends = [&](const char* suffix) {
    const std::string s = suffix;
    return name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  return ends(".json") || ends(".json.gz");
}

// The positional arguments with each directory replaced by its files (not its
// subdirectories: a link back up is never followed), sorted by name. Entries
// that cannot be traces are skipped with a line each on `err`.
inline trace_inputs expand_inputs(const std::vector<std::string>& positional, std::string& err) {
  namespace fs = std::filesystem;
  trace_inputs in;
  for (const std::string& p : positional) {
    std::error_code ec;
    if (p == "-" || !fs::is_directory(p, ec)) {
      in.paths.push_back(p);
      in.from_directory.push_back(false);
      continue;
    }
    in.any_directory = true;
    std::vector<fs::path> entries;
    fs::directory_iterator it(p, ec), end;
    if (ec) throw error(p + ": cannot list the directory: " + ec.message());
    for (; it != end; it.increment(ec)) {
      if (ec) break;
      entries.push_back(it->path());
    }
    if (ec) throw error(p + ": cannot list the directory: " + ec.message());
    std::sort(entries.begin(), entries.end());
    for (const fs::path& e : entries) {
      const std::string name = e.string();
      std::error_code kind;
      const fs::file_status st = fs::status(e, kind);  // follows links: a loop or a dangling link fails
      if (kind) {
        err += "cuprof: " + detail::terminal_safe(name) + ": skipped: " + kind.message() + "\n";
      } else if (fs::is_directory(st)) {
        err +=
            "cuprof: " + detail::terminal_safe(name) + ": skipped: a directory (traces are read from the directory named only)\n";
      } else if (!has_trace_suffix(e.filename().string())) {
        err += "cuprof: " + detail::terminal_safe(name) + ": skipped: not a .json or .json.gz file\n";
      } else {
        in.paths.push_back(name);
        in.from_directory.push_back(true);
      }
    }
  }
  return in;
}

// "DIR: 2 traces of 2 ranks on 1 host" and what each trace is.
inline std::string describe_ranks(const std::vector<loaded_trace>& traces, const rank_report& r) {
  std::string s = std::to_string(traces.size()) + " traces of " + std::to_string(r.ranks.size()) +
                  (r.ranks.size() == 1 ? " rank" : " ranks") + " on " + std::to_string(r.hosts) +
                  (r.hosts == 1 ? " host" : " hosts") + "\n";
  for (const rank_summary& rs : r.ranks)
    for (std::size_t w = 0; w < rs.sources.size(); ++w)
      s += "  rank " + std::to_string(rs.rank) + (rs.sources.size() > 1 ? " window " + std::to_string(w) : std::string()) + ": " +
           detail::terminal_safe(rs.sources[w]) +
           (rs.host.empty() ? std::string() : " (" + detail::terminal_safe(rs.host) + ")") + "\n";
  return s;
}

inline record_table rank_records(const rank_report& r) {
  record_table t;
  t.columns = {"rank",           "host",          "traces",  "steps",      "gpu_us",
               "compute_us",     "collective_us", "comm_us", "exposed_us", "exposed_after_wait_us",
               "overlap_pct",    "waiting_us",    "last_in", "matched",    "late_us",
               "clock_offset_us"};
  for (const rank_summary& s : r.ranks)
    t.rows.push_back({signed_num(s.rank), str(s.host), num(s.sources.size()), num(s.steps), us(s.gpu_ns), us(s.compute_ns),
                      us(s.collective_ns), us(s.comm_ns), us(s.exposed_ns), us(s.exposed_after_wait_ns),
                      real(s.comm_ns ? s.overlap_pct() : NAN), us(s.wait_ns), num(s.last), num(s.matched), us(s.late_ns),
                      real(double(s.clock_offset_ns) / 1000.0)});
  return t;
}

inline record_table kind_records(const rank_report& r) {
  record_table t;
  t.columns = {"rank", "kind", "count", "total_us", "bytes"};
  for (const rank_summary& s : r.ranks)
    for (const collective_total& k : s.kinds)
      t.rows.push_back({signed_num(s.rank), str(k.kind), num(k.count), us(k.total_ns), num(k.bytes)});
  return t;
}

inline record_table clock_records(const rank_report& r) {
  record_table t;
  t.columns = {"host", "ranks", "reference", "offset_us", "spread_us", "samples", "applied"};
  for (const clock_alignment& c : r.clocks) {
    std::string ranks;
    for (std::int64_t x : c.ranks) ranks += (ranks.empty() ? "" : " ") + std::to_string(x);
    t.rows.push_back({str(c.host), str(ranks), flag(c.reference), real(double(c.offset_ns) / 1000.0), us(c.spread_ns),
                      num(c.samples), flag(c.applied)});
  }
  return t;
}

inline record_table group_records(const rank_report& r) {
  record_table t;
  t.columns = {"group", "window", "collectives", "slowest_rank", "last_in", "late_us", "rank", "wait_us", "basis_us"};
  for (const straggler_group& g : r.groups)
    for (const straggler_group::rank_part& p : g.ranks)
      t.rows.push_back({str(g.name), num(g.window), num(g.collectives), g.slowest < 0 ? real(NAN) : signed_num(g.slowest),
                        num(g.last), us(g.late_ns), signed_num(p.rank), us(p.wait_ns), us(p.basis_ns)});
  return t;
}

inline void write_rank_sources(json_writer& j, const rank_report& r) {
  std::vector<std::string> sources;
  for (const rank_summary& s : r.ranks)
    for (const std::string& src : s.sources) sources.push_back(src);
  j.field("sources", sources).field("hosts", num(r.hosts)).field("by_step", flag(r.by_step)).field("matched", num(r.matched));
}

}  // namespace cuprof::cli

namespace cuprof::cli {

// `cuprof table DIR`: a row per rank, then the collectives by kind.
inline void rank_table_output(const std::vector<loaded_trace>& traces, const rank_report& r, output_format format,
                              std::string& out) {
  if (format == output_format::text) {
    out += "cuprof table: " + describe_ranks(traces, r) + "\n";
    out += format_rank_table(r);
  } else if (format == output_format::csv) {
    out += to_csv(rank_records(r));
  } else {
    json_writer j;
    write_rank_sources(j, r);
    j.field("ranks", rank_records(r))
        .field("collectives", kind_records(r))
        .field("clocks", clock_records(r))
        .field("notes", r.notes);
    out += j.text();
  }
}

// `cuprof insights DIR`: the findings (CSV), or everything (JSON).
inline void rank_insights_output(const std::vector<loaded_trace>& traces, const rank_report& r, output_format format,
                                 std::string& out) {
  if (format == output_format::text) {
    out += "cuprof insights: " + describe_ranks(traces, r) + "\n";
    out += format_rank_insights(r);
    return;
  }
  record_table findings;
  findings.columns = {"kind", "headline", "details", "where", "cause", "cost_us", "cost_of", "cost_pct", "saving_us", "estimate"};
  for (const finding& f : r.findings) {
    std::string details;
    for (const std::string& d : f.details) details += (details.empty() ? "" : "; ") + d;
    findings.rows.push_back({str(f.kind), str(f.headline), str(details), str(f.where), str(f.cause), us(f.cost_ns),
                             str(cost_base_name(f.cost_of)), real(f.cost_share * 100.0), us(f.saving_ns), str(f.estimate)});
  }
  if (format == output_format::csv) {
    out += to_csv(findings);
    return;
  }
  json_writer j;
  write_rank_sources(j, r);
  j.field("straggler", r.straggler < 0 ? real(NAN) : signed_num(r.straggler))
      .field("ranks", rank_records(r))
      .field("collectives", kind_records(r))
      .field("clocks", clock_records(r))
      .field("groups", group_records(r))
      .field("notes", r.notes)
      .field("summary", r.summary)
      .field("findings", findings);
  out += j.text();
}

}  // namespace cuprof::cli
