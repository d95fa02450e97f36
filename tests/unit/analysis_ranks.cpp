// Several ranks' traces (analyze_ranks, src/analysis/ranks.cpp): collective
// kinds from args and kernel names, each rank's time in collectives and what
// no compute hides, the straggler per step, and the clock offset between
// hosts. Inputs: tests/data/ranks (make_ranks.py says what they hold).

#include <cuprof/analysis.hpp>

#include "support/files.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

using namespace cuprof_test;

namespace {

std::string rank_trace(const std::string& dir, int rank) {
  return (source_dir() / "tests/data/ranks" / dir / ("rank" + std::to_string(rank) + ".json")).string();
}

std::vector<cuprof::loaded_trace> ranks_of(const std::string& dir) {
  std::vector<cuprof::loaded_trace> v;
  v.push_back(cuprof::read_trace_file(rank_trace(dir, 0)));
  v.push_back(cuprof::read_trace_file(rank_trace(dir, 1)));
  return v;
}

const cuprof::finding* finding_of(const cuprof::rank_report& r, const std::string& kind) {
  for (const cuprof::finding& f : r.findings)
    if (f.kind == kind) return &f;
  return nullptr;
}

}  // namespace

TEST_SUITE("analysis_ranks") {

TEST_CASE("collective kinds: torch's collective names first, else the NCCL kernel's name, new and old spellings") {
  using cuprof::collective_kind;
  CHECK(cuprof::is_collective_kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"));
  CHECK(cuprof::is_collective_kernel("NCCL_thing"));
  CHECK_FALSE(cuprof::is_collective_kernel("ampere_sgemm_128x64_nn"));
  CHECK(collective_kind("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)") == "all-reduce");
  CHECK(collective_kind("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)") == "all-reduce");
  CHECK(collective_kind("ncclDevKernel_AllGather_RING_LL(x)") == "all-gather");
  CHECK(collective_kind("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(x)") == "reduce-scatter");
  CHECK(collective_kind("ncclDevKernel_Reduce_Sum_f32_RING_LL(x)") == "reduce");
  CHECK(collective_kind("ncclDevKernel_Broadcast_RING_LL(x)") == "broadcast");
  CHECK(collective_kind("ncclDevKernel_SendRecv(x)") == "send/recv");
  CHECK(collective_kind("ncclDevKernel_Something") == "collective");
  cuprof::collective_args a;
  for (const auto& [name, kind] : std::vector<std::pair<std::string, std::string>>{{"allreduce", "all-reduce"},
                                                                                   {"_allgather_base", "all-gather"},
                                                                                   {"all_gather_into_tensor", "all-gather"},
                                                                                   {"reduce_scatter_tensor", "reduce-scatter"},
                                                                                   {"all_to_all", "all-to-all"},
                                                                                   {"barrier", "barrier"},
                                                                                   {"send", "send/recv"}}) {
    a.name = name;
    CHECK(collective_kind("ncclDevKernel_AllReduce_Sum_f32_RING_LL", &a) == kind);
  }
}

TEST_CASE("reader: a kernel's collective args and distributedInfo's rank, hostName read back") {
  const cuprof::loaded_trace r0 = cuprof::read_trace_file(rank_trace("same_host", 0));
  CHECK(r0.rank == 0);
  CHECK(r0.t.meta.host_name == "node-a");
  REQUIRE(r0.collectives.size() == 6);
  const auto& [gpu, args] = r0.collectives.front();
  CHECK(r0.t.names.str(r0.t.gpu[gpu].name).rfind("ncclDevKernel_AllReduce", 0) == 0);
  CHECK(args.name == "allreduce");
  CHECK(args.dtype == "Float");
  CHECK(args.in_nelems == 1048576);
  CHECK(args.out_nelems == 1048576);
  CHECK(args.group_size == 2);
  CHECK(args.bytes == 4194304);
  const cuprof::loaded_trace r1 = cuprof::read_trace_file(rank_trace("same_host", 1));
  CHECK(r1.rank == 1);
  CHECK(r1.collectives.empty());  // the old kernel names, no args
  // A rank beyond int: kept as written, the model's int rank left alone.
  const cuprof::loaded_trace huge = cuprof::parse_trace(
      R"({"distributedInfo": {"rank": 1099511627776, "world_size": 99999999999}, "traceEvents": []})", "huge");
  CHECK(huge.rank == 1099511627776);
  CHECK(huge.t.meta.rank == 0);
  CHECK(huge.t.meta.world_size == 1);
}

TEST_CASE("ranks on one host: collective time, exposed time and overlap per rank; rank 1 the straggler, 160 us a step") {
  const std::vector<cuprof::loaded_trace> traces = ranks_of("same_host");
  const cuprof::rank_report r = cuprof::analyze_ranks(traces);
  REQUIRE(r.ranks.size() == 2);
  CHECK(r.hosts == 1);
  CHECK(r.by_step);
  CHECK(r.matched == 6);
  CHECK(r.matched_kinds == "all-reduces");
  const cuprof::rank_summary& a = r.ranks[0];
  const cuprof::rank_summary& b = r.ranks[1];
  CHECK(a.rank == 0);
  CHECK(b.rank == 1);
  // Per step, rank 0: GEMM [100, 500), all-reduces [400, 700) and [750, 800); rank 1: GEMM [100, 600), [550, 700), [760, 800).
  CHECK(a.collective_ns == 3 * 350000);
  CHECK(a.comm_ns == 3 * 350000);
  CHECK(a.exposed_ns == 3 * 250000);
  CHECK(a.compute_ns == 3 * 400000);
  CHECK(a.gpu_ns == 3 * 750000);
  CHECK(a.overlap_pct() == doctest::Approx(100.0 * 100 / 350));
  CHECK(b.collective_ns == 3 * 190000);
  CHECK(b.exposed_ns == 3 * 140000);
  CHECK(b.compute_ns == 3 * 500000);
  CHECK(b.overlap_pct() == doctest::Approx(100.0 * 50 / 190));
  REQUIRE(a.kinds.size() == 1);
  CHECK(a.kinds[0].kind == "all-reduce");  // from the args
  CHECK(a.kinds[0].count == 6);
  CHECK(a.kinds[0].bytes == 6 * 4194304ull);
  REQUIRE(b.kinds.size() == 1);
  CHECK(b.kinds[0].kind == "all-reduce");  // from the old kernel names
  // The straggler: rank 1 starts 150 us and 10 us after rank 0, every step.
  CHECK(r.straggler == 1);
  CHECK(b.last == 6);
  CHECK(b.matched == 6);
  CHECK(b.late_ns == 3 * 160000);
  CHECK(a.wait_ns == 3 * 160000);
  CHECK(a.last == 0);
  REQUIRE(r.groups.size() == 3);
  for (const cuprof::straggler_group& g : r.groups) {
    CHECK(g.slowest == 1);
    CHECK(g.collectives == 2);
    CHECK(g.last == 2);
    CHECK(g.late_ns == 160000);
    REQUIRE(g.ranks.size() == 2);
    CHECK(g.ranks[0].rank == 0);
    CHECK(g.ranks[0].wait_ns == 160000);
    CHECK(g.ranks[0].basis_ns == 999000);  // the step's span
  }
  CHECK(r.groups[0].name == "ProfilerStep#1");
  CHECK(r.groups[2].name == "ProfilerStep#3");
  // One clock: the ends agree exactly, no offset applied.
  REQUIRE(r.clocks.size() == 1);
  CHECK(r.clocks[0].reference);
  CHECK(r.clocks[0].samples == 6);
  CHECK(r.clocks[0].offset_ns == 0);
  CHECK(r.clocks[0].spread_ns == 0);
  CHECK_FALSE(r.clocks[0].applied);
  // The findings name their numbers.
  const cuprof::finding* s = finding_of(r, "straggler");
  REQUIRE(s);
  CHECK(s->headline ==
        "rank 1 is the straggler: it reaches 6 of 6 all-reduces last, 160.000us late per step on average; rank 0 waits 16.0% of "
        "the "
        "step");
  CHECK(s->saving_ns == 480000);
  CHECK(s->cost_ns == 480000);
  // Exposed once every rank has arrived: rank 0 waited [400, 550) and [750, 760) a step, of which the GEMM hides
  // [400, 500); what is left exposed is [550, 700) and [760, 800). Rank 1, last to both, waited for none.
  CHECK(a.exposed_after_wait_ns == 3 * 190000);
  CHECK(b.exposed_after_wait_ns == 3 * 140000);
  const cuprof::finding* e = finding_of(r, "exposed communication");
  REQUIRE(e);
  CHECK(e->cost_ns == 3 * (190000 + 140000));
  CHECK(e->saving_ns == e->cost_ns);
  CHECK(e->headline.find("990.000us of 1.620ms in collectives runs with no compute kernel on its GPU once every rank has "
                         "reached it (180.000us more waits for the last rank: the straggler's)") == 0);
  CHECK_FALSE(finding_of(r, "clock offset"));
}

TEST_CASE(
    "a DDP job with a slowed rank (2 H200s): the straggler first, the communication exposed without the wait, "
    "no time saved twice") {
  std::vector<cuprof::loaded_trace> traces;
  for (int rank = 0; rank < 2; ++rank)
    traces.push_back(cuprof::read_trace_file(
        (source_dir() / "tests/data/ranks/ddp/cuprof" / ("rank" + std::to_string(rank) + ".json.gz")).string()));
  const cuprof::rank_report r = cuprof::analyze_ranks(traces);
  REQUIRE(r.ranks.size() == 2);
  REQUIRE_FALSE(r.findings.empty());
  CHECK(r.findings.front().kind == "straggler");
  const cuprof::finding* s = finding_of(r, "straggler");
  const cuprof::finding* e = finding_of(r, "exposed communication");
  REQUIRE(s);
  REQUIRE(e);
  CHECK(s->saving_ns > e->saving_ns);
  // Rank 0's all-reduces (49.5 ms) are almost all waiting for rank 1 (48.6 ms): the communication itself is short.
  const cuprof::rank_summary& a = r.ranks[0];
  CHECK(a.comm_ns > 45000000);
  CHECK(a.wait_ns > 45000000);
  CHECK(a.exposed_after_wait_ns < 3000000);
  CHECK(a.exposed_after_wait_ns + a.wait_ns <= a.comm_ns + 1000);
  // The two findings save different time: together no more than the collectives took.
  std::uint64_t collectives = 0;
  for (const cuprof::rank_summary& x : r.ranks) collectives += x.collective_ns;
  CHECK(s->saving_ns + e->saving_ns <= collectives);
}

TEST_CASE("ranks on two hosts: the offset recovered from the collectives' ends (3.2 ms, within its precision) and applied") {
  const std::vector<cuprof::loaded_trace> traces = ranks_of("two_hosts");
  CHECK(traces[0].base_ns != traces[1].base_ns);  // absolute times: each file's base added
  const cuprof::rank_report r = cuprof::analyze_ranks(traces);
  CHECK(r.hosts == 2);
  REQUIRE(r.clocks.size() == 2);
  CHECK(r.clocks[0].host == "node-a");
  CHECK(r.clocks[0].reference);
  const cuprof::clock_alignment& b = r.clocks[1];
  CHECK(b.host == "node-b");
  CHECK(b.applied);
  CHECK(b.samples == 6);
  // Rank 1's ends: 3200 us ahead, jittered by 0, 2, -2, 4, -2, 1 us: median 3201 us, deviations 1, 1, 3, 3, 3, 0 us.
  CHECK(b.offset_ns == 3201000);
  CHECK(b.spread_ns == 3000);
  CHECK(std::llabs(b.offset_ns - 3200000) <= std::int64_t(b.spread_ns));
  CHECK(r.ranks[1].clock_offset_ns == 3201000);
  // Aligned 1 us too far: rank 1 is 158 us late a step, not 160.
  CHECK(r.straggler == 1);
  CHECK(r.ranks[1].late_ns == 3 * 158000);
  const cuprof::finding* c = finding_of(r, "clock offset");
  REQUIRE(c);
  CHECK(c->headline == "host node-b's clock is 3.201ms ahead of host node-a's, ±3.000us from 6 collectives");
  // Without the offset, rank 1's collectives would look 3.2 ms late: the text says it was subtracted.
  CHECK(cuprof::format_rank_insights(r).find(
            "3.201ms ahead of host node-a, ±3.000us from 6 collectives (subtracted before matching)") != std::string::npos);
}

TEST_CASE("ranks: repeat windows of a rank are matched window by window; differing counts are matched up to the fewer") {
  std::vector<cuprof::loaded_trace> traces;
  for (int i = 0; i < 2; ++i) {
    traces.push_back(cuprof::read_trace_file(rank_trace("same_host", 0)));
    traces.push_back(cuprof::read_trace_file(rank_trace("same_host", 1)));
  }
  const cuprof::rank_report r = cuprof::analyze_ranks(traces);
  REQUIRE(r.ranks.size() == 2);
  CHECK(r.ranks[0].sources.size() == 2);
  CHECK(r.matched == 12);
  CHECK(r.ranks[1].late_ns == 6 * 160000);
  CHECK(r.notes.size() == 2);  // one per rank: two windows each
  // A rank with one collective fewer: the first five matched, a note says so.
  std::vector<cuprof::loaded_trace> fewer = ranks_of("same_host");
  fewer[1].t.gpu.pop_back();
  const cuprof::rank_report f = cuprof::analyze_ranks(fewer);
  CHECK(f.matched == 5);
  REQUIRE(f.notes.size() == 1);
  CHECK(f.notes[0] == "window 0: the ranks have different numbers of all-reduces (rank 0 6, rank 1 5): the first 5 matched");
}

TEST_CASE("ranks: without steps, the collectives are grouped by kind; one rank alone has nothing to match") {
  std::vector<cuprof::loaded_trace> traces = ranks_of("same_host");
  for (cuprof::loaded_trace& lt : traces)
    for (cuprof::cpu_span& s : lt.t.spans) s.is_step = false;
  const cuprof::rank_report r = cuprof::analyze_ranks(traces);
  CHECK_FALSE(r.by_step);
  REQUIRE(r.groups.size() == 1);
  CHECK(r.groups[0].name == "all-reduce");
  CHECK(r.groups[0].collectives == 6);
  const cuprof::finding* s = finding_of(r, "straggler");
  REQUIRE(s);
  CHECK(s->headline.find("rank 1 is the straggler: it reaches 6 of 6 all-reduces last, 80.000us late each time on average") == 0);
  traces.pop_back();
  const cuprof::rank_report one = cuprof::analyze_ranks(traces);
  CHECK(one.matched == 0);
  CHECK_FALSE(finding_of(one, "straggler"));
}

TEST_CASE("ranks: a trace that is not one of the job's ranks (no distributedInfo, another world size) is left out, said") {
  std::vector<cuprof::loaded_trace> traces = ranks_of("same_host");
  const cuprof::rank_report job = cuprof::analyze_ranks(traces);
  cuprof::loaded_trace single = cuprof::read_trace_file(rank_trace("same_host", 0));  // the same process, unranked
  single.source = "single.json";
  single.rank = -1;
  single.t.meta.world_size = 1;
  cuprof::loaded_trace other = cuprof::read_trace_file(rank_trace("same_host", 1));
  other.source = "other_job.json";
  other.t.meta.world_size = 8;
  traces.push_back(std::move(single));
  traces.push_back(std::move(other));
  const cuprof::rank_report r = cuprof::analyze_ranks(traces);
  CHECK(r.traces == 2);
  REQUIRE(r.ranks.size() == 2);
  CHECK(r.ranks[0].sources == std::vector<std::string>{rank_trace("same_host", 0)});  // not folded into rank 0
  CHECK(r.ranks[0].gpu_ns == job.ranks[0].gpu_ns);
  CHECK(r.matched == job.matched);
  REQUIRE(r.notes.size() >= 2);
  CHECK(r.notes[0] == "'single.json' left out: it has no distributedInfo (a process of no job), not one of the job's ranks");
  CHECK(r.notes[1] == "'other_job.json' left out: its world size is 8, the job's 2, not one of the job's ranks");
}

}  // TEST_SUITE("analysis_ranks")
