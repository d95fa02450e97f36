// A trace with NCCL calls (model/collectives.hpp) written and read back: the
// collective kernels' args and distributedInfo as the analysis reader sees them.

#include <cuprof/cuprof.hpp>
#include <cuprof/analysis.hpp>

#include "support/files.hpp"

#include <doctest/doctest.h>

#include <map>
#include <string>

using namespace cuprof_test;

TEST_SUITE("analysis") {

TEST_CASE("NCCL collectives written and read back: kernels' collective args, distributedInfo's backend") {
  cuprof::trace t;
  t.meta.distributed_backend = "nccl";
  t.meta.nccl_version = "2.21.5";
  t.meta.communicator_count = 2;
  t.meta.rank = 1;
  t.meta.world_size = 2;
  t.meta.window_start_ns = 1700000000000000000ull;
  t.meta.window_end_ns = t.meta.window_start_ns + 10000000;
  const std::uint64_t t0 = t.meta.window_start_ns + 1000;
  cuprof::cpu_span range;
  range.start_ns = t0;
  range.end_ns = t0 + 5000;
  range.name = t.names.intern("ncclAllReduce");
  range.tid = 7;
  t.spans.push_back(range);
  cuprof::link_spans(t);
  cuprof::api_call launch;
  launch.start_ns = t0 + 100;
  launch.end_ns = t0 + 200;
  launch.tid = 7;
  launch.correlation = 5;
  launch.kind = std::uint16_t(t.add_call_kind({t.names.intern("cudaLaunchKernel"), 211, cuprof::api_domain::runtime, true}));
  t.api_calls.push_back(launch);
  cuprof::gpu_activity k;
  k.start_ns = t0 + 1000;
  k.end_ns = t0 + 4000;
  k.name = t.names.intern("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)");
  k.correlation = 5;
  k.lane = t.add_gpu_lane({0, 1, 13});
  t.gpu.push_back(k);
  cuprof::collective_call c;
  c.ts_ns = t0;
  c.tid = 7;
  c.kind = cuprof::collective_kind::all_reduce;
  c.comm = 0x5a3c;
  c.bytes = 8192;
  c.op = 4;
  c.group_size = 2;
  c.rank = 1;
  t.collectives.push_back(c);
  cuprof::attribute(t);
  REQUIRE(t.gpu_collectives.size() == 1);
  CHECK(t.gpu_collectives[0] == 0);

  temp_dir dir;
  const std::string path = dir.file("nccl.json");
  cuprof::export_chrome_trace(t, path);
  const cuprof::loaded_trace back = cuprof::read_trace_file(path);
  CHECK(back.t.meta.rank == 1);
  CHECK(back.t.meta.world_size == 2);
  CHECK(back.t.meta.distributed_backend == "nccl");
  CHECK(back.t.meta.nccl_version == "2.21.5");
  CHECK(back.t.meta.communicator_count == 2);
  REQUIRE(back.collectives.size() == 1);
  const cuprof::collective_args& a = back.collectives[0].second;
  CHECK(a.name == "allreduce");
  CHECK(a.dtype == "BFloat16");
  CHECK(a.in_nelems == 4096);
  CHECK(a.out_nelems == 4096);
  CHECK(a.group_size == 2);
  CHECK(a.bytes == 8192);
  CHECK(cuprof::collective_kind(back.t.names.str(back.t.gpu[back.collectives[0].first].name), &a) == "all-reduce");
}

}  // TEST_SUITE("analysis")
