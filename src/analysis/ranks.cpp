// Several ranks' traces of one job: each rank's time in collectives and how
// much of it no compute hides, the hosts' clock offsets from the collectives'
// end times, and the collectives matched across ranks in order (who reached
// each one last). The findings are worded by the rules in insights/
// (rank_rules.hpp); the text by insights/format_ranks.cpp.
#include "insights/rank_rules.hpp"

#include <cuprof/model/attribution.hpp>

#include <algorithm>
#include <cctype>
#include <limits>
#include <map>
#include <set>
#include <utility>

namespace cuprof {

namespace {

// Lower case, letters and digits only: "_allgather_base" -> "allgatherbase".
std::string squeezed(std::string_view s) {
  std::string out;
  for (char c : s)
    if (std::isalnum(static_cast<unsigned char>(c))) out += char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

// A squeezed collective name (torch's, or the kernel name's word after the prefix) to its kind.
const char* kind_of_word(std::string_view w) {
  if (starts_with(w, "allreduce")) return "all-reduce";
  if (starts_with(w, "allgather")) return "all-gather";
  if (starts_with(w, "reducescatter")) return "reduce-scatter";
  if (starts_with(w, "alltoall")) return "all-to-all";
  if (starts_with(w, "broadcast")) return "broadcast";
  if (starts_with(w, "sendrecv") || starts_with(w, "send") || starts_with(w, "recv")) return "send/recv";
  if (starts_with(w, "barrier")) return "barrier";
  if (starts_with(w, "reduce")) return "reduce";
  return nullptr;
}

std::uint64_t median_of(std::vector<std::uint64_t> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + std::ptrdiff_t(v.size() / 2), v.end());
  return v[v.size() / 2];
}

std::int64_t median_of(std::vector<std::int64_t> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + std::ptrdiff_t(v.size() / 2), v.end());
  return v[v.size() / 2];
}

using intervals = std::vector<std::pair<std::uint64_t, std::uint64_t>>;

intervals merged(intervals v) {
  std::sort(v.begin(), v.end());
  intervals out;
  for (const auto& [a, b] : v) {
    if (b <= a) continue;
    if (!out.empty() && a <= out.back().second) out.back().second = std::max(out.back().second, b);
    else out.emplace_back(a, b);
  }
  return out;
}

std::uint64_t length(const intervals& v) {
  std::uint64_t n = 0;
  for (const auto& [a, b] : v) n += b - a;
  return n;
}

// Of merged `a`, the time no interval of merged `b` covers.
std::uint64_t uncovered(const intervals& a, const intervals& b) {
  std::uint64_t out = 0;
  std::size_t j = 0;
  for (const auto& [start, end] : a) {
    std::uint64_t at = start;
    while (j < b.size() && b[j].second <= at) ++j;
    for (std::size_t k = j; k < b.size() && b[k].first < end && at < end; ++k) {
      if (b[k].first > at) out += b[k].first - at;
      at = std::max(at, b[k].second);
    }
    if (at < end) out += end - at;
  }
  return out;
}

struct collective {
  std::uint64_t start = 0, end = 0;  // the trace's clock
  std::uint32_t device = 0;
  std::string kind;
  std::uint64_t bytes = 0;
  std::uint32_t step = no_index;  // span index of its ProfilerStep
};

// One trace: a rank's window.
struct window {
  const loaded_trace* lt = nullptr;
  std::int64_t rank = 0;
  std::string host;
  std::size_t index = 0;  // its order among its rank's windows
  std::vector<collective> collectives;
  std::map<std::string, std::vector<std::size_t>> by_kind;  // indices into collectives, by start
  std::vector<std::uint32_t> steps;                         // step spans by start
  std::uint64_t first_ns = 0, last_ns = 0;                  // its GPU work's extent
  std::int64_t offset_ns = 0;
  // Per device, its kernels' time merged: compute, and collectives (add_times); and the parts of its
  // collectives spent waiting for the last rank to reach them (match).
  struct device_time {
    intervals compute, comm, waits;
  };
  std::map<std::uint32_t, device_time> devices;
};

std::uint32_t step_of_span(const trace& t, std::uint32_t s) {
  for (std::size_t depth = 0; s != no_index && depth < t.spans.size(); s = t.spans[s].parent, ++depth)
    if (t.spans[s].is_step) return s;
  return no_index;
}

// The ProfilerStep a GPU record belongs to: its launching scope's, else the
// step open on its launching call's thread, else the step whose GPU extent
// (the file's gpu_user_annotation) holds it, else the step running on any
// thread when its call started.
std::uint32_t step_of(const window& w, const gpu_activity& g) {
  const trace& t = w.lt->t;
  std::uint32_t s = step_of_span(t, launching_span(t, g));
  if (s != no_index) return s;
  if (g.api != no_index) {
    const api_call& a = t.api_calls[g.api];
    for (std::uint32_t st : w.steps)
      if (t.spans[st].tid == a.tid && t.spans[st].start_ns <= a.start_ns && a.start_ns < t.spans[st].end_ns) return st;
  }
  const gpu_lane& lane = t.lane_of(g);
  for (const gpu_annotation& a : t.gpu_annotations)
    if (a.span != no_index && t.spans[a.span].is_step && a.device == lane.device && a.start_ns <= g.start_ns &&
        g.start_ns < a.end_ns)
      return a.span;
  // Launched from a thread the steps are not on (DDP's all-reduces come from autograd's thread): the
  // step that was running when its call started.
  const std::uint64_t at = g.api != no_index ? t.api_calls[g.api].start_ns : g.start_ns;
  for (std::uint32_t st : w.steps)
    if (t.spans[st].start_ns <= at && at < t.spans[st].end_ns) return st;
  return no_index;
}

window window_of(const loaded_trace& lt) {
  window w;
  w.lt = &lt;
  w.rank = lt.rank < 0 ? 0 : lt.rank;
  w.host = lt.t.meta.host_name;
  const trace& t = lt.t;
  for (std::uint32_t i = 0; i < t.spans.size(); ++i)
    if (t.spans[i].is_step) w.steps.push_back(i);
  std::sort(w.steps.begin(), w.steps.end(),
            [&](std::uint32_t a, std::uint32_t b) { return t.spans[a].start_ns < t.spans[b].start_ns; });
  std::size_t next_args = 0;
  bool any = false;
  for (std::uint32_t i = 0; i < t.gpu.size(); ++i) {
    const gpu_activity& g = t.gpu[i];
    while (next_args < lt.collectives.size() && lt.collectives[next_args].first < i) ++next_args;
    const collective_args* args =
        next_args < lt.collectives.size() && lt.collectives[next_args].first == i ? &lt.collectives[next_args].second : nullptr;
    if (g.kind == gpu_kind::sync) continue;
    w.first_ns = any ? std::min(w.first_ns, g.start_ns) : g.start_ns;
    w.last_ns = any ? std::max(w.last_ns, g.end_ns) : g.end_ns;
    any = true;
    if (g.kind != gpu_kind::kernel || !is_collective_kernel(t.names.str(g.name))) continue;
    collective c;
    c.start = g.start_ns;
    c.end = g.end_ns;
    c.device = t.lane_of(g).device;
    c.kind = collective_kind(t.names.str(g.name), args);
    c.bytes = args ? args->bytes : 0;
    c.step = step_of(w, g);
    w.collectives.push_back(std::move(c));
  }
  std::stable_sort(w.collectives.begin(), w.collectives.end(),
                   [](const collective& a, const collective& b) { return a.start < b.start; });
  for (std::size_t k = 0; k < w.collectives.size(); ++k) w.by_kind[w.collectives[k].kind].push_back(k);
  return w;
}

// GPU time, compute and collectives, into the rank's summary; the window keeps each device's
// merged intervals for add_exposed, once the matching has found the waits.
void add_times(window& w, rank_summary& r) {
  const trace& t = w.lt->t;
  for (const gpu_activity& g : t.gpu) {
    if (g.kind == gpu_kind::sync) continue;
    r.gpu_ns += g.end_ns - g.start_ns;
    if (g.kind != gpu_kind::kernel) continue;
    window::device_time& d = w.devices[t.lane_of(g).device];
    (is_collective_kernel(t.names.str(g.name)) ? d.comm : d.compute).emplace_back(g.start_ns, g.end_ns);
  }
  for (auto& [device, d] : w.devices) {
    d.compute = merged(std::move(d.compute));
    d.comm = merged(std::move(d.comm));
    r.compute_ns += length(d.compute);
    r.comm_ns += length(d.comm);
  }
  for (const collective& c : w.collectives) {
    r.collective_ns += c.end - c.start;
    auto it = std::find_if(r.kinds.begin(), r.kinds.end(), [&](const collective_total& k) { return k.kind == c.kind; });
    if (it == r.kinds.end()) it = r.kinds.insert(r.kinds.end(), collective_total{c.kind, 0, 0, 0});
    ++it->count;
    it->total_ns += c.end - c.start;
    it->bytes += c.bytes;
  }
  for (std::uint32_t s : w.steps) r.step_ns += t.spans[s].end_ns - t.spans[s].start_ns;
  r.steps += w.steps.size();
  r.span_ns += w.last_ns - w.first_ns;
}

// What no compute hides of the collectives (HTA's), and of it what follows the last rank's
// arrival: the rest is waiting for that rank (match()), the straggler's cost.
void add_exposed(const window& w, rank_summary& r) {
  for (const auto& [device, d] : w.devices) {
    r.exposed_ns += uncovered(d.comm, d.compute);
    intervals covered = d.compute;
    covered.insert(covered.end(), d.waits.begin(), d.waits.end());
    r.exposed_after_wait_ns += uncovered(d.comm, merged(std::move(covered)));
  }
}

std::string plural(const std::string& kind, std::size_t n) {
  if (n == 1) return kind;
  if (kind == "send/recv") return "sends/recvs";
  return kind + "s";
}

// The hosts' clocks against the reference rank's, from matched collectives' ends.
void align_clocks(std::vector<window>& windows, rank_report& r) {
  const std::int64_t reference_rank = r.ranks.front().rank;
  const std::string reference_host = r.ranks.front().host;
  std::map<std::string, std::vector<std::int64_t>> diffs;  // per host
  std::map<std::string, std::set<std::int64_t>> ranks_of;
  for (const rank_summary& s : r.ranks) ranks_of[s.host].insert(s.rank);
  for (const window& ref : windows) {
    if (ref.rank != reference_rank) continue;
    for (const window& w : windows) {
      if (w.rank == reference_rank || w.index != ref.index) continue;
      for (const auto& [kind, list] : w.by_kind) {
        const auto it = ref.by_kind.find(kind);
        if (it == ref.by_kind.end()) continue;
        for (std::size_t k = 0; k < list.size() && k < it->second.size(); ++k)
          diffs[w.host].push_back(std::int64_t(w.collectives[list[k]].end - ref.collectives[it->second[k]].end));
      }
    }
  }
  const auto add = [&](const std::string& host) {
    clock_alignment c;
    c.host = host;
    c.ranks.assign(ranks_of[host].begin(), ranks_of[host].end());
    c.reference = host == reference_host;
    std::vector<std::int64_t>& d = diffs[host];
    c.samples = d.size();
    c.offset_ns = median_of(d);
    std::vector<std::uint64_t> deviations;
    for (std::int64_t x : d) deviations.push_back(std::uint64_t(x > c.offset_ns ? x - c.offset_ns : c.offset_ns - x));
    c.spread_ns = median_of(std::move(deviations));
    c.applied = !c.reference && c.samples > 0;
    if (c.applied)
      for (window& w : windows)
        if (w.host == host) w.offset_ns = c.offset_ns;
    r.clocks.push_back(std::move(c));
  };
  add(reference_host);
  for (const auto& [host, ranks] : ranks_of)
    if (host != reference_host) add(host);
  for (rank_summary& s : r.ranks)
    for (const clock_alignment& c : r.clocks)
      if (c.host == s.host && c.applied) s.clock_offset_ns = c.offset_ns;
}

// The summary of a window's rank (every window's rank has one: analyze_ranks makes them first).
rank_summary& summary_of(rank_report& r, const window& w) {
  return *std::find_if(r.ranks.begin(), r.ranks.end(), [&](const rank_summary& x) { return x.rank == w.rank; });
}

// The windows of one window index matched collective by collective: who was last, how late, who waited.
void match(const std::vector<window*>& group, rank_report& r, bool by_step,
           std::map<std::pair<std::size_t, std::string>, std::size_t>& group_of, std::set<std::string>& kinds) {
  const window& ref = *group.front();
  std::set<std::string> all_kinds;
  for (const window* w : group)
    for (const auto& kv : w->by_kind) all_kinds.insert(kv.first);
  for (const std::string& kind : all_kinds) {
    std::size_t n = std::size_t(-1), most = 0;
    for (const window* w : group) {
      const auto it = w->by_kind.find(kind);
      const std::size_t count = it == w->by_kind.end() ? 0 : it->second.size();
      n = std::min(n, count);
      most = std::max(most, count);
    }
    if (n != most) {
      std::string counts;
      for (const window* w : group) {
        const auto it = w->by_kind.find(kind);
        counts += (counts.empty() ? "" : ", ") + std::string("rank ") + std::to_string(w->rank) + " " +
                  std::to_string(it == w->by_kind.end() ? 0 : it->second.size());
      }
      r.notes.push_back("window " + std::to_string(ref.index) + ": the ranks have different numbers of " + plural(kind, 2) +
                        " (" + counts + "): the first " + std::to_string(n) + " matched");
    }
    if (n == 0) continue;
    kinds.insert(kind);
    for (std::size_t k = 0; k < n; ++k) {
      std::vector<std::pair<std::int64_t, window*>> starts;  // aligned start, window
      for (window* w : group) {
        const collective& c = w->collectives[w->by_kind.at(kind)[k]];
        starts.emplace_back(std::int64_t(c.start) - w->offset_ns, w);
      }
      // The last to start, the earlier rank on a tie; its lateness: over the next-to-last.
      std::size_t last = 0;
      for (std::size_t i = 1; i < starts.size(); ++i)
        if (starts[i].first > starts[last].first) last = i;
      std::int64_t next = std::numeric_limits<std::int64_t>::min();
      for (std::size_t i = 0; i < starts.size(); ++i)
        if (i != last) next = std::max(next, starts[i].first);
      const std::uint64_t late = starts.size() > 1 ? std::uint64_t(starts[last].first - next) : 0;
      ++r.matched;
      // Its group: the reference window's step (by name), else its kind.
      std::string name = kind;
      if (by_step) {
        const collective& c = ref.collectives[ref.by_kind.at(kind)[k]];
        if (c.step == no_index) continue;
        name = ref.lt->t.names.str(ref.lt->t.spans[c.step].name);
      }
      auto [at, added] = group_of.try_emplace({ref.index, name}, r.groups.size());
      if (added) {
        straggler_group g;
        g.name = name;
        g.window = ref.index;
        r.groups.push_back(std::move(g));
      }
      straggler_group& g = r.groups[at->second];
      ++g.collectives;
      for (std::size_t i = 0; i < starts.size(); ++i) {
        const window& w = *starts[i].second;
        rank_summary& s = summary_of(r, w);
        ++s.matched;
        auto part =
            std::find_if(g.ranks.begin(), g.ranks.end(), [&](const straggler_group::rank_part& x) { return x.rank == w.rank; });
        if (part == g.ranks.end()) {
          straggler_group::rank_part x;
          x.rank = w.rank;
          if (by_step) {
            for (std::uint32_t st : w.steps)
              if (w.lt->t.names.str(w.lt->t.spans[st].name) == name)
                x.basis_ns = w.lt->t.spans[st].end_ns - w.lt->t.spans[st].start_ns;
          } else {
            x.basis_ns = w.last_ns - w.first_ns;
          }
          part = g.ranks.insert(std::upper_bound(g.ranks.begin(), g.ranks.end(), x.rank,
                                                 [](std::int64_t v, const straggler_group::rank_part& y) { return v < y.rank; }),
                                x);
        }
        if (i == last && late > 0) {
          ++s.last, ++part->last;
          s.late_ns += late, part->late_ns += late;
        } else {
          const std::uint64_t wait = std::uint64_t(starts[last].first - starts[i].first);
          s.wait_ns += wait, part->wait_ns += wait;
          const collective& c = w.collectives[w.by_kind.at(kind)[k]];
          starts[i].second->devices[c.device].waits.emplace_back(c.start, std::min(c.end, c.start + wait));
        }
      }
    }
  }
}

}  // namespace

bool is_collective_kernel(std::string_view name) {
  for (std::size_t i = 0; i + 4 <= name.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(name[i])) == 'n' &&
        std::tolower(static_cast<unsigned char>(name[i + 1])) == 'c' &&
        std::tolower(static_cast<unsigned char>(name[i + 2])) == 'c' &&
        std::tolower(static_cast<unsigned char>(name[i + 3])) == 'l')
      return true;
  return false;
}

std::string collective_kind(std::string_view kernel_name, const collective_args* args) {
  if (args && !args->name.empty()) {
    std::string w = squeezed(args->name);
    if (const char* k = kind_of_word(w)) return k;
  }
  // ncclDevKernel_AllReduce_Sum_f32_RING_LL, ncclKernel_AllReduce_RING_LL_Sum_float: the word after the prefix.
  const std::size_t at = kernel_name.find("Kernel_");
  if (at != std::string_view::npos) {
    std::string_view rest = kernel_name.substr(at + 7);
    rest = rest.substr(0, rest.find_first_of("_("));
    if (const char* k = kind_of_word(squeezed(rest))) return k;
  }
  return "collective";
}

rank_report analyze_ranks(const std::vector<loaded_trace>& traces, const rank_options& options) {
  rank_report r;
  // The job is the world size most ranked traces give. Where there is one (over one rank), a trace
  // without distributedInfo, or of another world size, is not one of its ranks: left out, said.
  std::map<int, std::size_t> worlds;
  for (const loaded_trace& lt : traces)
    if (lt.rank >= 0 && lt.t.meta.world_size > 1) ++worlds[lt.t.meta.world_size];
  int job_world = 0;
  std::size_t most = 0;
  for (const auto& [world, n] : worlds)
    if (n > most) job_world = world, most = n;
  std::vector<window> windows;
  windows.reserve(traces.size());
  for (const loaded_trace& lt : traces) {
    if (job_world > 0 && (lt.rank < 0 || lt.t.meta.world_size != job_world)) {
      r.notes.push_back("'" + lt.source + "' left out: " +
                        (lt.rank < 0 ? std::string("it has no distributedInfo (a process of no job)")
                                     : "its world size is " + std::to_string(lt.t.meta.world_size) + ", the job's " +
                                           std::to_string(job_world)) +
                        ", not one of the job's ranks");
      continue;
    }
    windows.push_back(window_of(lt));
  }
  r.traces = windows.size();
  // Windows of one rank in time order.
  std::stable_sort(windows.begin(), windows.end(),
                   [](const window& a, const window& b) { return a.rank != b.rank ? a.rank < b.rank : a.first_ns < b.first_ns; });
  std::set<std::string> hosts;
  for (std::size_t i = 0; i < windows.size(); ++i) {
    window& w = windows[i];
    if (r.ranks.empty() || r.ranks.back().rank != w.rank) {
      rank_summary s;
      s.rank = w.rank;
      s.host = w.host;
      r.ranks.push_back(std::move(s));
    }
    rank_summary& s = r.ranks.back();
    w.index = s.sources.size();
    if (w.host != s.host) w.host = s.host;  // one rank, one host: its first window's
    s.sources.push_back(w.lt->source);
    hosts.insert(w.host);
    add_times(w, s);
  }
  r.hosts = hosts.size();
  for (const rank_summary& s : r.ranks)
    if (s.sources.size() > 1)
      r.notes.push_back("rank " + std::to_string(s.rank) + " has " + std::to_string(s.sources.size()) +
                        " traces: each is a window of its own, matched with the other ranks' window of the same order "
                        "(by time); its figures add them up");
  if (r.ranks.empty()) return r;
  align_clocks(windows, r);

  r.by_step = std::all_of(windows.begin(), windows.end(), [](const window& w) { return !w.steps.empty(); });
  std::size_t most_windows = 0;
  for (const rank_summary& s : r.ranks) most_windows = std::max(most_windows, s.sources.size());
  std::map<std::pair<std::size_t, std::string>, std::size_t> group_of;
  std::set<std::string> kinds;
  for (std::size_t index = 0; index < most_windows; ++index) {
    std::vector<window*> group;
    for (window& w : windows)
      if (w.index == index) group.push_back(&w);
    if (group.size() >= 2) match(group, r, r.by_step, group_of, kinds);
  }
  for (const window& w : windows) add_exposed(w, summary_of(r, w));
  for (straggler_group& g : r.groups)
    for (const straggler_group::rank_part& p : g.ranks)
      if (p.late_ns > g.late_ns) g.slowest = p.rank, g.late_ns = p.late_ns, g.last = p.last;
  r.matched_kinds = kinds.size() == 1 ? plural(*kinds.begin(), 2) : "collectives";
  detail::insight_rules::rank_rules(r, options);
  return r;
}

}  // namespace cuprof
