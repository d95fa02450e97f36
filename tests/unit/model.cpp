// The model layer (include/cuprof/model/): interval nesting and attribution,
// GPU annotations, the correlation index, distributions, what an API call does
// by its name and whether it is shown, the memory in use, what an event wait
// waited for, estimated occupancy, and traces copied by value.

#include <cuprof/cuprof.hpp>
#include <cuprof/analysis.hpp>
#include <cuprof/collect/cpu_collect.hpp>
#include <cuprof/model/api_vocabulary.hpp>
#include <cuprof/model/event_waits.hpp>
#include <cuprof/model/memory_ledger.hpp>
#include <cuprof/model/occupancy.hpp>
#include <cuprof/model/stats.hpp>
#include <cuprof/output/json_text.hpp>

#include "support/traces.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace cuprof_test;

namespace {

using cuprof::no_index;

// "child<parent" for every span and call ("-": none), sorted: the parents
// whatever order the spans and calls are in.
std::string parents(const cuprof::trace& t) {
  const auto name = [&](std::uint32_t s) { return s == no_index ? std::string("-") : t.names.str(t.spans[s].name); };
  std::set<std::string> links;
  for (const auto& s : t.spans) links.insert(t.names.str(s.name) + '<' + name(s.parent));
  for (const auto& c : t.api_calls) links.insert(t.names.str(t.name_of(c)) + '<' + name(c.parent));
  std::string out;
  for (const std::string& l : links) out += (out.empty() ? "" : " ") + l;
  return out;
}

// Links a hand-made trace as the profiler does (link_spans, attribute), checks
// that the trace read back from its JSON links the same, and returns parents().
std::string linked(builder& b) {
  cuprof::link_spans(b.t);
  cuprof::attribute(b.t);
  const std::string live = parents(b.t);
  CHECK(parents(cuprof::parse_trace(cuprof::chrome_trace_json(b.t), "nesting").t) == live);
  return live;
}

}  // namespace

TEST_SUITE("model") {

TEST_CASE("attribute: API calls go to the innermost open scope on their own thread") {
  builder b;
  const std::uint32_t outer = b.span("outer", 100, 1000);
  const std::uint32_t inner = b.span("inner", 200, 500, outer);
  const std::uint32_t sibling = b.span("sibling", 600, 900, outer);
  const std::uint32_t other = b.span("other_thread", 100, 1000, no_index, 2);
  const std::uint32_t c_inner = b.call("cudaLaunchKernel", 300, 310, 11);
  const std::uint32_t c_inner_start = b.call("cudaLaunchKernel", 200, 205, 12);  // at the scope's start
  const std::uint32_t c_outer = b.call("cudaLaunchKernel", 550, 560, 13);        // between the children
  const std::uint32_t c_sibling = b.call("cudaLaunchKernel", 700, 710, 14);
  const std::uint32_t c_none = b.call("cudaLaunchKernel", 1500, 1510, 15);  // after every scope
  const std::uint32_t c_before = b.call("cudaLaunchKernel", 50, 60, 16);    // before every scope
  const std::uint32_t c_other = b.call("cudaLaunchKernel", 300, 310, 17, 2);
  const std::uint32_t c_lonely = b.call("cudaLaunchKernel", 300, 310, 18, 3);  // a thread with no scopes
  b.gpu("k_inner", 2000, 2100, 11);
  b.gpu("k_orphan", 2200, 2300, 999);  // its launch was not recorded
  cuprof::attribute(b.t);
  const auto& calls = b.t.api_calls;
  CHECK(calls[c_inner].parent == inner);
  CHECK(calls[c_inner_start].parent == inner);
  CHECK(calls[c_outer].parent == outer);
  CHECK(calls[c_sibling].parent == sibling);
  CHECK(calls[c_none].parent == no_index);
  CHECK(calls[c_before].parent == no_index);
  CHECK(calls[c_other].parent == other);
  CHECK(calls[c_lonely].parent == no_index);
  CHECK(b.t.gpu[0].api == c_inner);
  CHECK(cuprof::launching_span(b.t, b.t.gpu[0]) == inner);
  CHECK(b.t.gpu[1].api == no_index);
  CHECK(cuprof::launching_span(b.t, b.t.gpu[1]) == no_index);
  CHECK(b.t.meta.unmatched_gpu_records == 1);
}

TEST_CASE("nesting: identical extents: the first span is the parent, spans contain calls") {
  builder b;
  b.span("first", 100, 200);
  b.span("second", 100, 200);
  b.call("same", 100, 200, 1);
  b.call("inside", 150, 160, 2);
  CHECK(linked(b) == "first<- inside<second same<second second<first");
}

TEST_CASE("nesting: a call starting exactly at a span's end is not its child, unless it has no length") {
  builder b;
  b.span("outer", 0, 1000);
  b.span("s", 100, 200);
  b.call("at_start", 100, 110, 1);
  b.call("at_end", 200, 210, 2);
  b.call("zero_at_end", 200, 200, 3);
  CHECK(linked(b) == "at_end<outer at_start<s outer<- s<outer zero_at_end<s");
}

TEST_CASE("nesting: zero-length spans are contained by spans that start or end with them") {
  builder b;
  b.span("outer", 100, 200);
  b.span("z_end", 200, 200);
  b.span("z1", 100, 100);
  b.span("z2", 100, 100);
  b.span("inner", 100, 150);
  b.call("zero_call", 100, 100, 1);
  b.call("call", 100, 105, 2);  // starts where z1 and z2 end: not theirs
  CHECK(linked(b) == "call<inner inner<outer outer<- z1<inner z2<z1 z_end<outer zero_call<z2");
}

TEST_CASE("nesting: partial overlap: a span goes to a span containing it, a call stays with the one it started in") {
  builder b;
  b.span("outer", 0, 1000);  // cut at the window's end
  b.span("a", 100, 200);
  b.span("b", 150, 300);  // starts in a, ends after it
  b.span("short", 600, 650);
  b.call("over_a", 110, 250, 1);
  b.call("in_b", 180, 190, 2);
  b.call("long", 600, 700, 3);       // starts with a shorter span
  b.call("past_end", 900, 1100, 4);  // still running at the window's end
  CHECK(linked(b) == "a<outer b<outer in_b<b long<short outer<- over_a<a past_end<outer short<outer");
}

TEST_CASE("nesting: two threads interleaved, each linked within itself") {
  builder b;
  b.span("A2", 10, 90, no_index, 2);
  b.span("B1", 20, 80, no_index, 1);
  b.span("A1", 0, 100, no_index, 1);
  b.span("B2", 20, 80, no_index, 2);
  b.call("c2", 30, 40, 1, 2);
  b.call("c1", 30, 40, 2, 1);
  b.call("c1_late", 85, 95, 3, 1);
  b.call("c2_late", 95, 99, 4, 2);
  b.call("c3", 30, 40, 5, 3);  // a thread with no spans
  CHECK(linked(b) == "A1<- A2<- B1<A1 B2<A2 c1<B1 c1_late<A1 c2<B2 c2_late<- c3<-");
}

TEST_CASE("nesting: span_builder makes the outer of two scopes with one extent the parent") {
  cuprof::trace t;
  static const char* outer = "outer";
  static const char* inner = "inner";
  using cuprof::detail::make_head;
  using cuprof::detail::slot_kind;
  const cuprof::detail::slot slots[] = {
      {make_head(slot_kind::enter_static, 10), std::uint64_t(reinterpret_cast<std::uintptr_t>(outer))},
      {make_head(slot_kind::enter_static, 10), std::uint64_t(reinterpret_cast<std::uintptr_t>(inner))},
      {make_head(slot_kind::exit, 20), 0},
      {make_head(slot_kind::exit, 20), 0},
  };
  const cuprof::detail::tick_converter identity;
  cuprof::detail::span_builder builder(t, identity, 1, 0, 100);
  CHECK(builder.consume(slots, 4) == 4);
  builder.finish();
  CHECK(parents(t) == "inner<outer outer<-");
}

TEST_CASE("derive_gpu_annotations: one per (scope, stream), over nested scopes, steps and syncs excluded") {
  builder b;
  const std::uint32_t step = b.span("ProfilerStep#0", 0, 10000, no_index, 1, true);
  const std::uint32_t outer = b.span("outer", 100, 5000, step);
  const std::uint32_t inner = b.span("inner", 200, 1000, outer);
  b.call("cudaLaunchKernel", 300, 310, 1);
  b.call("cudaLaunchKernel", 400, 410, 2);
  b.call("cudaLaunchKernel", 2000, 2010, 3);
  b.call("cudaStreamSynchronize", 3000, 3500, 4);
  b.gpu("k1", 6000, 6100, 1);
  b.gpu("k2", 6200, 6300, 2, cuprof::gpu_kind::kernel, 0, 9);  // another stream
  b.gpu("k3", 7000, 7400, 3);
  b.gpu("Stream Sync", 3100, 3400, 4, cuprof::gpu_kind::sync);
  cuprof::attribute(b.t);
  const std::vector<cuprof::gpu_annotation> a = b.t.gpu_annotations;
  std::map<std::pair<std::uint32_t, std::uint32_t>, cuprof::gpu_annotation> by;
  for (const auto& x : a) {
    CHECK(x.span != step);
    CHECK(by.emplace(std::make_pair(x.span, x.stream), x).second);
  }
  REQUIRE(a.size() == 4);
  REQUIRE(by.count({inner, 7}));
  REQUIRE(by.count({inner, 9}));
  REQUIRE(by.count({outer, 7}));
  REQUIRE(by.count({outer, 9}));
  CHECK(by[{inner, 7}].start_ns == 6000);
  CHECK(by[{inner, 7}].end_ns == 6100);
  CHECK(by[{inner, 9}].start_ns == 6200);
  CHECK(by[{outer, 7}].start_ns == 6000);
  CHECK(by[{outer, 7}].end_ns == 7400);  // k3 launched by outer itself
  CHECK(by[{outer, 9}].end_ns == 6300);

  // Per lane, in start order, the longer (enclosing) one first on equal starts.
  for (std::size_t i = 1; i < a.size(); ++i) {
    const auto& p = a[i - 1];
    const auto& q = a[i];
    if (p.device != q.device || p.stream != q.stream) continue;
    CHECK(p.start_ns <= q.start_ns);
    if (p.start_ns == q.start_ns) CHECK(p.end_ns >= q.end_ns);
  }

  const cuprof::event_averages avg = cuprof::key_averages(b.t);
  const auto* r_outer = avg.find("outer", cuprof::row_kind::cpu_scope);
  const auto* r_inner = avg.find("inner", cuprof::row_kind::cpu_scope);
  const auto* r_step = avg.find("ProfilerStep*", cuprof::row_kind::cpu_scope);
  REQUIRE(r_outer);
  REQUIRE(r_inner);
  REQUIRE(r_step);
  CHECK(r_inner->self_cuda_ns == 200);  // k1 + k2
  CHECK(r_inner->cuda_total_ns == 200);
  CHECK(r_outer->self_cuda_ns == 400);   // k3
  CHECK(r_outer->cuda_total_ns == 600);  // k3 + inner's
  CHECK(r_step->self_cuda_ns == 0);
  CHECK(r_step->cuda_total_ns == 600);
  CHECK(avg.find("Stream Sync", cuprof::row_kind::gpu_work) == nullptr);  // syncs are not work
  CHECK(avg.find("ProfilerStep#0", cuprof::row_kind::gpu_annotation) == nullptr);
  const auto* ann_outer = avg.find("outer", cuprof::row_kind::gpu_annotation);
  REQUIRE(ann_outer);
  CHECK(ann_outer->count == 2);                  // two streams
  CHECK(ann_outer->self_cuda_ns == 1400 + 100);  // [6000,7400] + [6200,6300]
  CHECK(avg.self_cuda_time_total_ns() == 600);   // work only, annotations excluded
  const auto* sync_call = avg.find("cudaStreamSynchronize", cuprof::row_kind::cuda_api);
  REQUIRE(sync_call);
  CHECK(sync_call->cpu_total_ns == 500);
  CHECK(r_outer->self_cpu_ns == (5000 - 100) - (1000 - 200) - 10 - 500);  // minus inner, the launch, the sync
}

TEST_CASE("derive_gpu_annotations: a scope whose GPU extent equals its child's still comes first") {
  // outer launches nothing itself: its extent on the stream is exactly inner's.
  // Viewers that break ties by file order (catapult) need the enclosing one first.
  builder b;
  const std::uint32_t outer = b.span("outer", 100, 5000);
  const std::uint32_t middle = b.span("middle", 150, 4000, outer);
  const std::uint32_t inner = b.span("inner", 200, 1000, middle);
  b.call("cudaLaunchKernel", 300, 310, 1);
  b.gpu("k", 6000, 6100, 1);
  cuprof::attribute(b.t);
  const std::vector<cuprof::gpu_annotation> a = b.t.gpu_annotations;
  REQUIRE(a.size() == 3);
  for (const auto& x : a) {
    CHECK(x.start_ns == 6000);
    CHECK(x.end_ns == 6100);
  }
  CHECK(a[0].span == outer);
  CHECK(a[1].span == middle);
  CHECK(a[2].span == inner);
}

TEST_CASE("correlation_index: dense ids take a byte each where values grow with them, else a word; the first entry wins") {
  cuprof::detail::correlation_index index;
  // A thread's launches: the runtime call's id and its driver call's, both to the launch's position.
  std::vector<std::pair<std::uint32_t, std::uint32_t>> launches;
  for (std::uint32_t i = 0; i < 100000; ++i) launches.push_back({1000 + 2 * i + 1, i}), launches.push_back({1000 + 2 * i, i});
  launches.push_back({1001, 77});  // an id given twice: the first entry wins
  index.build(launches);
  CHECK(index.compact());
  for (std::uint32_t i = 0; i < 100000; i += 997) {
    CHECK(index.find(1000 + 2 * i) == i);
    CHECK(index.find(1000 + 2 * i + 1) == i);
  }
  CHECK(index.find(1001) == 0);
  CHECK(index.find(999) == cuprof::no_index);
  CHECK(index.find(1000 + 200000) == cuprof::no_index);

  // Every other id: the gaps find nothing.
  index.build({{10, 5}, {12, 6}, {14, 7}, {400, 300}});
  CHECK(index.compact());
  CHECK(index.find(12) == 6);
  CHECK(index.find(11) == cuprof::no_index);
  CHECK(index.find(400) == 300);
  CHECK(index.find(401) == cuprof::no_index);

  // Two threads' calls, numbered thread by thread: values far apart within a block of ids.
  std::vector<std::pair<std::uint32_t, std::uint32_t>> threads;
  for (std::uint32_t i = 0; i < 1000; ++i) threads.push_back({2 * i, i}), threads.push_back({2 * i + 1, 1000 + i});
  index.build(threads);
  CHECK_FALSE(index.compact());
  CHECK(index.find(0) == 0);
  CHECK(index.find(1) == 1000);
  CHECK(index.find(1999) == 1999);

  // Sparse ids: a map.
  index.build({{5, 1}, {4000000000u, 2}});
  CHECK_FALSE(index.compact());
  CHECK(index.find(4000000000u) == 2);
  CHECK(index.find(6) == cuprof::no_index);
  index.build({});
  CHECK(index.empty());
  CHECK(index.find(5) == cuprof::no_index);
}

TEST_CASE("a copied trace is independent of the profile and trace it was copied from") {
  cuprof::trace copy;
  {
    cuprof::profile p(cpu_only());
    p.start();
    for (int i = 0; i < 100; ++i) cuprof::record_function r("copied name " + std::to_string(i));
    p.stop();
    copy = p.last_trace();
    p.start();  // the next window replaces the one copied
    p.stop();
  }
  const cuprof::trace second = copy;  // copy of a copy
  for (const cuprof::trace* t : {static_cast<const cuprof::trace*>(&copy), &second}) {
    REQUIRE(t->spans.size() == 100);
    CHECK(t->names.str(t->spans[7].name) == "copied name 7");
  }
  // Interning looks names up through the table's index, which must view the copy's own strings.
  cuprof::trace& c = copy;
  CHECK(c.names.intern("copied name 7") == c.spans[7].name);
  const cuprof::name_id fresh = c.names.intern("a new name");
  CHECK(c.names.str(fresh) == "a new name");
  CHECK(c.names.intern("a new name") == fresh);
  CHECK(json::parse(cuprof::chrome_trace_json(second))["traceEvents"].size() > 100);
}

// ---- distributions --------------------------------------------------------------

TEST_CASE("stats: min, median, p95 and max") {
  const cuprof::distribution d = cuprof::summarize({5, 1, 3});
  CHECK(d.count == 3);
  CHECK(d.min_ns == 1);
  CHECK(d.median_ns == 3);
  CHECK(d.p95_ns == 5);
  CHECK(d.max_ns == 5);
  CHECK(d.total_ns == 9);
  CHECK(cuprof::summarize({10, 20, 30, 40}).median_ns == 25);
  std::vector<std::uint64_t> hundred;
  for (std::uint64_t i = 1; i <= 100; ++i) hundred.push_back(i);
  CHECK(cuprof::summarize(hundred).p95_ns == 95);
  CHECK(cuprof::summarize({7}).p95_ns == 7);
  CHECK(cuprof::summarize({}).count == 0);
}

TEST_CASE("api vocabulary: launches, copies, synchronizations and occupancy queries, by any name CUPTI gives") {
  using namespace cuprof::detail;
  // A stream waits on the GPU: a synchronization (a cuda_sync record, an arrow), but the CPU thread goes on.
  for (const char* name :
       {"cudaStreamWaitEvent", "cudaStreamWaitEvent_ptsz_v7000", "cuStreamWaitEvent", "cuStreamWaitEvent_ptsz"}) {
    CAPTURE(name);
    CHECK(is_synchronization(name));
    CHECK_FALSE(is_cpu_blocking_synchronization(name));
    CHECK(draws_flow(name));
    CHECK_FALSE(enqueues_gpu_work(name));
  }
  for (const char* name :
       {"cudaDeviceSynchronize", "cudaDeviceSynchronize_v3020", "cudaStreamSynchronize_ptsz_v7000", "cudaEventSynchronize",
        "cudaThreadSynchronize_v3020", "cuCtxSynchronize_v2", "cuStreamSynchronize_ptsz", "cuEventSynchronize"}) {
    CAPTURE(name);
    CHECK(is_cpu_blocking_synchronization(name));
    CHECK(is_synchronization(name));
    CHECK(draws_flow(name));
    CHECK_FALSE(enqueues_gpu_work(name));
  }
  // The sync record each makes, numbered as CUPTI numbers its types (sync_kind_name); none for other calls.
  for (const auto& [name, kind] : std::vector<std::pair<const char*, int>>{{"cudaEventSynchronize_v3020", 1},
                                                                           {"cuEventSynchronize", 1},
                                                                           {"cudaStreamWaitEvent_ptsz_v7000", 2},
                                                                           {"cuStreamWaitEvent", 2},
                                                                           {"cudaStreamSynchronize_v3020", 3},
                                                                           {"cuStreamSynchronize_ptsz", 3},
                                                                           {"cudaDeviceSynchronize_v3020", 4},
                                                                           {"cudaThreadSynchronize_v3020", 4},
                                                                           {"cuCtxSynchronize_v2", 4},
                                                                           {"cudaLaunchKernel_v7000", 0},
                                                                           {"cudaMemcpyAsync_v3020", 0},
                                                                           {"cudaStreamQuery_v3020", 0}}) {
    CAPTURE(name);
    CHECK(int(synchronization_kind(name)) == kind);
  }
  // Kernel launches, runtime and driver, with CUPTI's suffixes and CUDA 13's <<<>>> path.
  for (const char* name :
       {"cudaLaunchKernel", "cudaLaunchKernel_ptsz_v7000", "___cudaLaunchKernel_v13000", "cudaLaunchKernelExC_v11060",
        "cudaLaunchCooperativeKernel_v9000", "cudaLaunchCooperativeKernelMultiDevice_v9000", "cudaLaunch_v3020", "cuLaunchKernel",
        "cuLaunchKernelEx", "cuLaunchKernelEx_ptsz", "cuLaunchCooperativeKernel", "cuLaunchGridAsync"}) {
    CAPTURE(name);
    CHECK(is_kernel_launch(name));
    CHECK(enqueues_gpu_work(name));
    CHECK(draws_flow(name));
    CHECK_FALSE(is_synchronization(name));
    CHECK_FALSE(is_occupancy_query(name));
  }
  // Graph launches, copies and memsets put work on the GPU too, but no kernel launch of their own.
  for (const char* name : {"cudaGraphLaunch_v10000", "cuGraphLaunch_ptsz", "cudaMemcpyAsync_v3020", "cudaMemcpy_ptds_v7000",
                           "cuMemcpyHtoD_v2", "cudaMemsetAsync", "cuMemsetD8Async"}) {
    CAPTURE(name);
    CHECK(enqueues_gpu_work(name));
    CHECK(draws_flow(name));
    CHECK_FALSE(is_kernel_launch(name));
  }
  // A host function is a CPU callback in stream order: no GPU record to wait for or point at.
  for (const char* name : {"cudaLaunchHostFunc_v10000", "cudaLaunchHostFunc_ptsz_v10000", "cuLaunchHostFunc"}) {
    CAPTURE(name);
    CHECK(is_host_function_launch(name));
    CHECK_FALSE(is_kernel_launch(name));
    CHECK_FALSE(enqueues_gpu_work(name));
    CHECK_FALSE(draws_flow(name));
  }
  for (const char* name : {"cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags_v7000", "cuOccupancyMaxPotentialBlockSize"}) {
    CAPTURE(name);
    CHECK(is_occupancy_query(name));
    CHECK_FALSE(enqueues_gpu_work(name));
    CHECK_FALSE(draws_flow(name));
  }
  for (const char* name : {"cudaMalloc", "cudaEventRecord", "cudaStreamQuery", "cudaFuncGetAttributes", "cuMemCreate"}) {
    CAPTURE(name);
    CHECK_FALSE(enqueues_gpu_work(name));
    CHECK_FALSE(is_synchronization(name));
    CHECK_FALSE(is_occupancy_query(name));
    CHECK_FALSE(is_host_function_launch(name));
  }
}

TEST_CASE("api vocabulary: allocations and frees outside stream order, not the stream-ordered ones") {
  using namespace cuprof::detail;
  for (const char* name :
       {"cudaMalloc", "cudaMalloc_v3020", "cudaMallocPitch", "cudaMallocManaged_v6000", "cudaFree_v3020", "cudaMallocHost_v3020",
        "cudaHostAlloc_v3020", "cudaFreeHost_v3020", "cudaMallocArray", "cudaFreeArray", "cuMemAlloc_v2", "cuMemFree_v2",
        "cuMemAllocManaged", "cuMemAllocHost_v2", "cuMemHostAlloc", "cuMemFreeHost"}) {
    CAPTURE(name);
    CHECK(is_synchronous_allocation(name));
    CHECK_FALSE(enqueues_gpu_work(name));
  }
  for (const char* name : {"cudaMallocAsync", "cudaMallocAsync_ptsz_v11020", "cudaFreeAsync_v11020", "cudaMallocFromPoolAsync",
                           "cuMemAllocAsync", "cuMemFreeAsync_ptsz", "cuMemAllocFromPoolAsync", "cudaMemcpy", "cudaMemset",
                           "cuMemCreate", "cuMemMap", "cudaHostRegister", "cudaMallocX"}) {
    CAPTURE(name);
    CHECK_FALSE(is_synchronous_allocation(name));
  }
}

TEST_CASE("classify_api keeps what Kineto keeps, flags launches and syncs") {
  using cuprof::api_domain;
  using cuprof::detail::classify_api;
  const auto kept = [](api_domain d, const char* n) { return classify_api(d, n).display_name != nullptr; };
  CHECK_FALSE(kept(api_domain::runtime, "cudaGetDevice"));
  CHECK_FALSE(kept(api_domain::runtime, "cudaSetDevice"));
  CHECK_FALSE(kept(api_domain::runtime, "cudaGetLastError"));
  CHECK_FALSE(kept(api_domain::runtime, "cudaEventCreate"));
  CHECK_FALSE(kept(api_domain::runtime, "cudaEventDestroy"));
  CHECK(kept(api_domain::runtime, "cudaMalloc"));
  CHECK(kept(api_domain::runtime, "cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags"));
  CHECK_FALSE(kept(api_domain::driver, "cuKernelGetName"));
  CHECK_FALSE(kept(api_domain::driver, "cuCtxGetCurrent"));
  CHECK_FALSE(kept(api_domain::driver, "cuDevicePrimaryCtxGetState"));
  CHECK(kept(api_domain::driver, "cuLaunchKernel"));
  CHECK(kept(api_domain::driver, "cuLaunchKernelEx"));
  CHECK(kept(api_domain::driver, "cuMemCreate"));
  CHECK(kept(api_domain::driver, "cuMemMap"));
  CHECK(kept(api_domain::driver, "cuMemAlloc_v2"));
  CHECK(kept(api_domain::driver, "cuMemFreeAsync"));
  CHECK_FALSE(kept(api_domain::driver, "cuMemGetInfo"));
  CHECK(kept(api_domain::driver, "cuMemsetD8Async"));

  // Per call: an arrow to its GPU record or sync (has_flow), whether a window waits for a GPU record
  // (expects_gpu_record), and the GPU work it makes.
  struct expected_kind {
    api_domain domain;
    const char* name;
    bool has_flow, expects_gpu_record;
    cuprof::gpu_kind work;
  };
  using cuprof::gpu_kind;
  const expected_kind kinds[] = {
      {api_domain::runtime, "cudaLaunchKernel", true, true, gpu_kind::kernel},
      {api_domain::driver, "cuLaunchKernelEx", true, true, gpu_kind::kernel},
      {api_domain::runtime, "cudaGraphLaunch", true, true, gpu_kind::kernel},
      {api_domain::runtime, "cudaMemcpyAsync", true, true, gpu_kind::memcpy},
      {api_domain::driver, "cuMemsetD8Async", true, true, gpu_kind::memset},
      {api_domain::runtime, "cudaStreamSynchronize", true, false, gpu_kind::sync},
      {api_domain::runtime, "cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", false, false, gpu_kind::kernel},
      {api_domain::driver, "cuMemCreate", false, false, gpu_kind::kernel},
      {api_domain::driver, "cuStreamWaitEvent", true, false, gpu_kind::sync},  // its Stream Wait Event record
      // A host function gets no GPU record: the window does not wait for one.
      {api_domain::driver, "cuLaunchHostFunc", false, false, gpu_kind::kernel},
  };
  for (const expected_kind& k : kinds) {
    CAPTURE(k.name);
    const auto c = classify_api(k.domain, k.name);
    CHECK(c.display_name != nullptr);
    CHECK(c.has_flow == k.has_flow);
    CHECK(c.expects_gpu_record == k.expects_gpu_record);
    if (k.expects_gpu_record) CHECK(c.work == k.work);
  }
}

TEST_CASE("memory ledger: the memory in use by device and on the host, pools' reserve, frees of memory allocated before") {
  using cuprof::detail::memory_ledger;
  using cuprof::detail::staged_memory;
  constexpr std::uint64_t MiB = 1 << 20;
  memory_ledger ledger;
  const auto apply = [&](staged_memory::op what, std::uint64_t address, std::uint64_t bytes, std::uint8_t kind,
                         std::uint64_t pool = 0, std::uint64_t pool_size = 0) {
    staged_memory r;
    r.what = what, r.address = address, r.bytes = bytes, r.device = 1, r.memory_kind = kind, r.pool = pool;
    r.pool_size = pool_size;
    cuprof::memory_event e;
    const bool is_event = ledger.apply(r, e);
    return std::make_pair(is_event, e);
  };
  auto [event, e] = apply(staged_memory::op::allocate, 0x1000, 4 * MiB, cuprof::memory_kind_device);
  CHECK(event);
  CHECK(e.device == 1);
  CHECK(e.bytes == std::int64_t(4 * MiB));
  CHECK(e.total_allocated == 4 * MiB);
  CHECK(e.total_reserved == 4 * MiB);
  // From a pool of 32 MiB: the pool's size is reserved, not the allocation again.
  std::tie(event, e) = apply(staged_memory::op::allocate, 0x9000, 2 * MiB, cuprof::memory_kind_device, 0x70, 32 * MiB);
  CHECK(e.flags == cuprof::memory_from_pool);
  CHECK(e.total_allocated == 6 * MiB);
  CHECK(e.total_reserved == 4 * MiB + 32 * MiB);
  // Pinned memory is the host's, counted apart.
  std::tie(event, e) = apply(staged_memory::op::allocate, 0x5000, MiB, cuprof::memory_kind_pinned);
  CHECK(e.device == -1);
  CHECK(e.total_allocated == MiB);
  std::tie(event, e) = apply(staged_memory::op::release, 0x1000, 0, cuprof::memory_kind_device);
  CHECK(e.bytes == -std::int64_t(4 * MiB));
  CHECK(e.total_allocated == 2 * MiB);
  CHECK(e.total_reserved == 32 * MiB);
  // Freed, allocated before recording began: what CUPTI says it freed, the totals never below 0.
  std::tie(event, e) = apply(staged_memory::op::release, 0xdead, 8 * MiB, cuprof::memory_kind_device);
  CHECK(event);
  CHECK(e.bytes == -std::int64_t(8 * MiB));
  CHECK(e.total_allocated == 0);
  // A pool change that changes nothing is no event; a trimmed pool is.
  CHECK_FALSE(apply(staged_memory::op::pool_size, 0, 0, cuprof::memory_kind_device, 0x70, 32 * MiB).first);
  std::tie(event, e) = apply(staged_memory::op::pool_size, 0, 0, cuprof::memory_kind_device, 0x70, 8 * MiB);
  CHECK(event);
  CHECK(e.total_reserved == 8 * MiB);
}

TEST_CASE("event waits: a wait resolves to its event's latest record in the window before it; handles numbered once") {
  using cuprof::detail::event_wait_resolver;
  using cuprof::detail::staged_event_record;
  std::unordered_map<std::uint64_t, std::uint32_t> ids;
  std::vector<staged_event_record> records = {
      {300, 0xe1, 12, 7},  // out of order: sorted by start
      {100, 0xe1, 10, 5},
      {50, 0xe2, 9, 5},  // before the window: its call is not in the trace
  };
  event_wait_resolver resolve(ids);
  resolve.add_window_records(records, 100, 1000, [](std::uint32_t id) { return id == 12 ? 11u : id; });  // 12 folded into 11
  CHECK(records.front().start == 50);
  const cuprof::event_wait at_200 = resolve(0xe1, 200);
  CHECK(at_200.event == 1);
  CHECK(at_200.stream == 5);
  CHECK(at_200.record_correlation == 10);
  const cuprof::event_wait at_400 = resolve(0xe1, 400);
  CHECK(at_400.event == 1);
  CHECK(at_400.record_correlation == 11);
  CHECK(at_400.stream == 7);
  const cuprof::event_wait before_any = resolve(0xe1, 100);  // a record at the wait's start is not before it
  CHECK(before_any.record_correlation == no_index);
  const cuprof::event_wait unresolved = resolve(0xe2, 500);
  CHECK(unresolved.event == 2);
  CHECK(unresolved.record_correlation == no_index);
  CHECK(unresolved.stream == no_index);
}

TEST_CASE("occupancy estimate: limits by threads, registers, shared memory and grid size") {
  cuprof::device_info d;
  d.num_sms = 100;
  d.warp_size = 32;
  d.max_threads_per_multiprocessor = 2048;
  d.max_blocks_per_multiprocessor = 32;
  d.regs_per_multiprocessor = 65536;
  d.shared_mem_per_multiprocessor = 100000;
  cuprof::kernel_details k;
  k.grid[0] = 1000, k.grid[1] = 1, k.grid[2] = 1;
  k.block[0] = 128, k.block[1] = 1, k.block[2] = 1;  // 4 warps
  SUBCASE("no device: zeros") {
    const auto e = cuprof::detail::estimate_occupancy(k, nullptr);
    CHECK(e.percent == 0);
    CHECK(e.blocks_per_sm == 0.0);
  }
  SUBCASE("grid-limited: 10 blocks per SM of 4 warps") {
    const auto e = cuprof::detail::estimate_occupancy(k, &d);
    CHECK(e.blocks_per_sm == doctest::Approx(10.0));
    CHECK(e.warps_per_sm == doctest::Approx(40.0));
    CHECK(e.percent == 62);  // 10 resident blocks (grid-limited) * 4 / 64 = 62.5
  }
  SUBCASE("register-limited") {
    k.grid[0] = 100000;
    k.registers_per_thread = 255;                                    // 65536 / (255 * 128) = 2 blocks
    CHECK(cuprof::detail::estimate_occupancy(k, &d).percent == 12);  // 8 / 64
  }
  SUBCASE("shared-memory-limited") {
    k.grid[0] = 100000;
    k.static_shared_memory = 40000;  // 2 blocks
    k.dynamic_shared_memory = 10000;
    CHECK(cuprof::detail::estimate_occupancy(k, &d).percent == 12);
  }
  SUBCASE("a single block on a big device") {
    k.grid[0] = 1;
    const auto e = cuprof::detail::estimate_occupancy(k, &d);
    CHECK(e.blocks_per_sm == doctest::Approx(0.01));
    CHECK(e.percent == 6);  // 1 block of 4 warps / 64
  }
}

}  // TEST_SUITE("model")
