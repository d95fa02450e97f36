// The rules over several ranks' traces (analyze_ranks, ranks.cpp): each reads
// the rank report's figures and adds its findings, one file each.
#pragma once

#include "context.hpp"

#include <cuprof/analysis.hpp>

#include <string>

namespace cuprof::detail::insight_rules {

void clock_offsets(rank_report& r, const rank_options& o);          // clock_offset.cpp
void exposed_communication(rank_report& r, const rank_options& o);  // exposed_communication.cpp
void stragglers(rank_report& r, const rank_options& o);             // straggler.cpp

// Runs the three, ranks the findings by estimated saving, and makes the summary (format_ranks.cpp).
void rank_rules(rank_report& r, const rank_options& o);

// "host node-a", or "the host with no name" for traces that name none.
std::string host_text(const std::string& host);

// Sets a finding's cost share of `base_ns` and its cause (its kind when empty), and adds it.
void add_rank_finding(rank_report& r, finding f, std::uint64_t base_ns);

}  // namespace cuprof::detail::insight_rules
