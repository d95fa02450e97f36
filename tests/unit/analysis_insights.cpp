// What the analysis library says about a trace (src/analysis/): kernel names
// decoded, insights and their verdicts, diffs, and throughput against the GPU's
// peaks. Inputs: tests/data/gpu (H200) and tests/data/kineto (torch.profiler).

#include <cuprof/cuprof.hpp>
#include <cuprof/analysis.hpp>
#include <cuprof/model/stats.hpp>

#include "support/cli.hpp"
#include "support/files.hpp"
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
#include <vector>

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace cuprof_test;

TEST_SUITE("analysis_insights") {

TEST_CASE("kernel names: nvjet names from the H200 traces (cuBLAS 13 on Hopper)") {
  const cuprof::kernel_name_info k = cuprof::decode_kernel_name("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT");
  CHECK(k.library == "cuBLAS (nvjet)");
  CHECK(k.category == cuprof::kernel_category::gemm);
  CHECK(k.is_gemm());
  CHECK(k.arch == "sm90");
  CHECK(k.dtype() == "bf16");
  CHECK(k.accumulate == "fp32");
  CHECK(k.output == "bf16");
  CHECK(k.tile_m == 256);
  CHECK(k.tile_n == 128);
  CHECK(k.tile_k == 64);
  CHECK(k.stages == 4);
  CHECK(k.cluster == "1x2");
  CHECK(k.schedule == "cooperative (coopA)");
  CHECK(k.epilogue == "beta=0 (no C)");
  CHECK(k.layout == "NNT");
  CHECK(k.split_k.empty());
  CHECK(k.summary() ==
        "cuBLAS (nvjet) GEMM sm90 bf16 (acc fp32) tile 256x128x64 4 stages cluster 1x2 cooperative (coopA) beta=0 (no C) "
        "layout NNT");

  const cuprof::kernel_name_info small = cuprof::decode_kernel_name("nvjet_sm90_tst_64x8_64x16_1x4_h_bz_NNT");
  CHECK(small.tile() == "64x8x64");
  CHECK(small.stages == 16);
  CHECK(small.cluster == "1x4");
  CHECK(small.schedule.empty());

  // linear --variant addmm: the beta=1 epilogue and the transposed A.
  const cuprof::kernel_name_info addmm = cuprof::decode_kernel_name("nvjet_sm90_tst_64x8_64x16_1x2_h_badd_TNT");
  CHECK(addmm.epilogue == "beta=1 (C added)");
  CHECK(addmm.layout == "TNT");

  const cuprof::kernel_name_info down = cuprof::decode_kernel_name("nvjet_sm90_tst_192x128_64x5_1x2_h_bz_coopB_TNT");
  CHECK(down.tile() == "192x128x64");
  CHECK(down.stages == 5);
  CHECK(down.schedule == "cooperative (coopB)");
  CHECK(down.compact() == "GEMM sm90 bf16 192x128x64 5 stages cluster 1x2 coopB beta=0 TNT");
}

TEST_CASE("kernel names: cuBLAS and CUTLASS names from the profiling articles (A100)") {
  // Part 1: the GEMM eager and compiled matmul+add run.
  const cuprof::kernel_name_info a = cuprof::decode_kernel_name("ampere_bf16_s16816gemm_bf16_128x256_ldg8_f2f_stages_64x3_nn");
  CHECK(a.library == "cuBLAS");
  CHECK(a.is_gemm());
  CHECK(a.arch == "sm80");
  CHECK(a.dtype() == "bf16");
  CHECK(a.accumulate == "fp32");
  CHECK(a.instruction == "m16n8k16");
  CHECK(a.tile() == "128x256x64");
  CHECK(a.stages == 3);
  CHECK(a.alignment == 8);
  CHECK(a.layout == "nn");
  CHECK(a.unknown.empty());

  // Part 2: the single nn.Linear, eager and compiled; "tn" is the layout the article points at.
  const cuprof::kernel_name_info c =
      cuprof::decode_kernel_name("cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_32x1_tn_align8");
  CHECK(c.library == "CUTLASS");
  CHECK(c.is_gemm());
  CHECK(c.arch == "sm80");
  CHECK(c.op_class == "wmma tensorop");
  CHECK(c.dtype() == "bf16");
  CHECK(c.instruction == "m16n16k16");
  CHECK(c.tile() == "32x32x32");
  CHECK(c.stages == 1);
  CHECK(c.layout == "tn");
  CHECK(c.alignment == 8);
  CHECK(c.unknown.empty());
  // The same name as torch traces show it, wrapped in CUTLASS's kernel template.
  const cuprof::kernel_name_info wrapped = cuprof::decode_kernel_name(
      "void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_32x1_tn_align8>("
      "cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_32x1_tn_align8::Params)");
  CHECK(wrapped.summary() == c.summary());

  // Part 2: the two GEMM tiles of the MLP (names as the article abbreviates them, completed).
  const cuprof::kernel_name_info gate = cuprof::decode_kernel_name("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_tn");
  CHECK(gate.tile() == "128x128x32");
  CHECK(gate.stages == 5);
  CHECK(gate.layout == "tn");

  // Part 2: Inductor's fused pointwise kernel.
  const cuprof::kernel_name_info t = cuprof::decode_kernel_name("triton_poi_fused__unsafe_view_gelu_mul_0");
  CHECK(t.library == "Triton (Inductor)");
  CHECK(t.category == cuprof::kernel_category::elementwise);
  CHECK(t.op == "_unsafe_view_gelu_mul");
  CHECK_FALSE(t.is_gemm());
}

TEST_CASE("kernel names: elementwise kernels, copies, and names that are not GEMMs") {
  const cuprof::kernel_name_info add = cuprof::decode_kernel_name(
      "void at::native::vectorized_elementwise_kernel<8, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, "
      "3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)");
  CHECK(add.library == "ATen");
  CHECK(add.category == cuprof::kernel_category::elementwise);
  CHECK(add.op == "add");
  CHECK_FALSE(add.is_gemm());
  const cuprof::kernel_name_info map = cuprof::decode_kernel_name(
      "void ex::map_kernel<gelu_op>(gelu_op, __nv_bfloat16*, __nv_bfloat16 const*, __nv_bfloat16 const*, unsigned long)");
  CHECK(map.category == cuprof::kernel_category::elementwise);
  CHECK(map.op == "gelu_op");
  CHECK_FALSE(cuprof::decode_kernel_name("Memset (Device)").recognised());
  CHECK_FALSE(cuprof::decode_kernel_name("Memcpy DtoD (Device -> Device)").is_gemm());
  CHECK_FALSE(cuprof::decode_kernel_name("axpy_kernel(float, float const*, float*, unsigned long)").is_gemm());
}

TEST_CASE("kernel names: cuBLASLt, CUTLASS 3 and split-K spellings") {
  const cuprof::kernel_name_info x = cuprof::decode_kernel_name(
      "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas");
  CHECK(x.library == "cuBLASLt");
  CHECK(x.arch == "sm90");
  CHECK(x.dtype() == "bf16");
  CHECK(x.accumulate == "fp32");
  CHECK(x.tile() == "128x128x64");
  CHECK(x.layout == "tn (C n)");
  CHECK(x.split_k == "segment-K off");
  const cuprof::kernel_name_info c3 = cuprof::decode_kernel_name(
      "cutlass3x_sm90_tensorop_gemm_bf16_bf16_f32_bf16_bf16_128x256x64_1x2x1_0_tnn_align8_warpspecialized_cooperative_epi_tma");
  CHECK(c3.library == "CUTLASS 3");
  CHECK(c3.dtype() == "bf16");
  CHECK(c3.accumulate == "fp32");
  CHECK(c3.tile() == "128x256x64");
  CHECK(c3.cluster == "1x2x1");
  CHECK(c3.layout == "tnn");
  CHECK(c3.alignment == 8);
  CHECK(c3.schedule == "warp-specialized cooperative");
  // Spelled as cuBLAS spells a split-K nvjet variant (constructed, not from a trace).
  CHECK(cuprof::decode_kernel_name("nvjet_sm90_tst_128x64_64x8_2x1_v_bz_splitK_TNT").split_k == "split-K");
  const cuprof::kernel_name_info r = cuprof::decode_kernel_name(
      "void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float, __nv_bfloat16, false, false, false>("
      "cublasLt::cublasSplitKParams<float>, __nv_bfloat16 const*, float const*, float const*, float const*, float const*)");
  CHECK(r.category == cuprof::kernel_category::gemm_reduction);
}

TEST_CASE("kernel names: decoding any prefix or mangled variant of a real name does not fail") {
  const std::vector<std::string> names = {
      "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT",
      "ampere_bf16_s16816gemm_bf16_128x256_ldg8_f2f_stages_64x3_nn",
      "cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_32x1_tn_align8",
      "cutlass3x_sm90_tensorop_gemm_bf16_bf16_f32_bf16_bf16_128x256x64_1x2x1_0_tnn_align8_warpspecialized",
      "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_execute_segment_k_off_kernel__5x_cublas",
      "triton_poi_fused__unsafe_view_gelu_mul_0"};
  std::size_t decoded = 0;
  for (const std::string& n : names) {
    for (std::size_t len = 0; len <= n.size(); ++len) {
      const std::string p = n.substr(0, len);
      decoded += cuprof::decode_kernel_name(p).summary().size() > 0;
      std::string doubled = p;
      for (char& c : doubled)
        if (c == 'x') c = '_';
      (void)cuprof::decode_kernel_name(doubled).summary();
      (void)cuprof::decode_kernel_name(p + "_99999999999999999999x99999999999999999999").summary();
    }
  }
  CHECK(decoded > 0);
  CHECK(cuprof::decode_kernel_name("").summary().empty());
  CHECK(cuprof::decode_kernel_name("____").summary().empty());
}

// ---- insights -------------------------------------------------------------------

namespace {

cuprof::insights insights_of(const std::string& path) {
  const cuprof::loaded_trace lt = cuprof::read_trace_file(path);
  cuprof::insights_options o;
  o.base_ns = lt.base_ns;
  return cuprof::analyze(lt.t, o);
}

const cuprof::finding* find_finding(const cuprof::insights& in, const std::string& kind) {
  for (const cuprof::finding& f : in.findings)
    if (f.kind == kind) return &f;
  return nullptr;
}

}  // namespace

TEST_CASE("insights: matmul_add 64 is overhead-bound, 4096 compute-bound") {
  const cuprof::insights small = insights_of(gpu_trace("matmul_add_64.json"));
  CHECK(small.verdict == cuprof::bound_verdict::overhead_bound);
  CHECK(small.self_cpu_ns > 5 * small.self_cuda_ns);
  CHECK(small.gpu_idle_share > 0.8);
  const cuprof::insights big = insights_of(gpu_trace("matmul_add_4096.json"));
  CHECK(big.verdict == cuprof::bound_verdict::compute_bound);
  CHECK(big.self_cuda_ns > big.self_cpu_ns);
  CHECK(big.gpu_idle_share < 0.5);
  // The same on torch's traces of the same workload; there the final sync is CPU time that is waiting.
  const cuprof::insights torch_small = insights_of(kineto_trace("torch_matmul_add_64.json"));
  CHECK(torch_small.verdict == cuprof::bound_verdict::overhead_bound);
  const cuprof::insights torch_big = insights_of(kineto_trace("torch_matmul_add_4096.json"));
  CHECK(torch_big.verdict == cuprof::bound_verdict::compute_bound);
  CHECK(torch_big.sync_cpu_ns == 397362);
  const cuprof::finding* sync = find_finding(torch_big, "synchronization");
  REQUIRE(sync != nullptr);
  CHECK(sync->headline.find("cudaDeviceSynchronize: 397.362us in 1 call, 63.0% of Self CPU time") != std::string::npos);
}

namespace {

// The GPU time of each kernel name in a trace.
std::map<std::string, std::uint64_t> gpu_time_by_name(const cuprof::trace& t) {
  std::map<std::string, std::uint64_t> out;
  for (const cuprof::gpu_activity& g : t.gpu)
    if (g.kind != cuprof::gpu_kind::sync) out[t.names.str(g.name)] += g.end_ns - g.start_ns;
  return out;
}

std::vector<std::string> kinds_of(const cuprof::insights& in) {
  std::vector<std::string> kinds;
  for (const cuprof::finding& f : in.findings) kinds.push_back(f.kind);
  return kinds;
}

// Ranked by estimated saving, one finding per cause, the summary the top ones with a saving.
void check_ranking(const cuprof::insights& in) {
  std::set<std::string> causes;
  for (std::size_t i = 0; i < in.findings.size(); ++i) {
    CAPTURE(in.findings[i].cause);
    CHECK(causes.insert(in.findings[i].cause).second);
    if (i) CHECK(in.findings[i - 1].saving_ns >= in.findings[i].saving_ns);
    CHECK(in.findings[i].saving_ns <= in.findings[i].cost_ns);
  }
  std::size_t with_saving = 0;
  for (const cuprof::finding& f : in.findings) with_saving += f.saving_ns > 0;
  REQUIRE(in.summary.size() == std::min<std::size_t>(3, with_saving));
  for (std::size_t i = 0; i < in.summary.size(); ++i)
    CHECK(in.summary[i].rfind("[" + in.findings[i].kind + "] " + in.findings[i].headline + "; ", 0) == 0);
}

}  // namespace

TEST_CASE("insights: the unfused MLP's GeLU and mul are the top finding, with their share; the fused MLP has none") {
  for (const auto& [file, gelu, mul, scope] :
       {std::make_tuple(gpu_trace("mlp_unfused.json"), std::string("void ex::map_kernel<gelu_op>"),
                        std::string("void ex::map_kernel<mul_op>"), std::string("mlp")),
        std::make_tuple(kineto_trace("torch_geglu_mlp.json"),
                        std::string("void at::native::vectorized_elementwise_kernel<8, at::native::GeluCUDAKernelImpl"),
                        std::string("void at::native::vectorized_elementwise_kernel<8, at::native::BinaryFunctor<c10::BFloat16, "
                                    "c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor"),
                        std::string("mlp_fwd"))}) {
    CAPTURE(file);
    const cuprof::loaded_trace lt = cuprof::read_trace_file(file);
    const cuprof::insights in = insights_of(file);
    check_ranking(in);
    REQUIRE_FALSE(in.findings.empty());
    const cuprof::finding& chain = in.findings[0];
    CHECK(chain.kind == "elementwise chain");
    CHECK(chain.headline.find("2 elementwise kernels, ") == 0);
    CHECK(chain.headline.find(", in one " + scope + " call, 3 times: ") != std::string::npos);
    // Its cost: the two kernels' GPU time; its share: of Self CUDA; its saving: each step's pair less its longer kernel.
    std::uint64_t gelu_ns = 0, mul_ns = 0, saving = 0;
    for (const auto& [name, ns] : gpu_time_by_name(lt.t)) {
      if (name.rfind(gelu, 0) == 0) gelu_ns += ns;
      if (name.rfind(mul, 0) == 0) mul_ns += ns;
    }
    REQUIRE(gelu_ns > 0);
    REQUIRE(mul_ns > 0);
    std::map<std::uint64_t, std::vector<std::uint64_t>> per_step;  // step start -> the pair's durations
    for (const cuprof::gpu_activity& g : lt.t.gpu) {
      const std::string& name = lt.t.names.str(g.name);
      if (name.rfind(gelu, 0) != 0 && name.rfind(mul, 0) != 0) continue;
      for (const cuprof::cpu_span& st : lt.t.spans)
        if (st.is_step && st.start_ns <= lt.t.api_calls[g.api].start_ns && lt.t.api_calls[g.api].start_ns < st.end_ns)
          per_step[st.start_ns].push_back(g.end_ns - g.start_ns);
    }
    REQUIRE(per_step.size() == 3);
    for (const auto& [step, durations] : per_step) {
      REQUIRE(durations.size() == 2);
      saving += std::min(durations[0], durations[1]);
    }
    CHECK(chain.cost_ns == gelu_ns + mul_ns);
    CHECK(chain.cost_of == cuprof::cost_base::gpu_time);
    CHECK(chain.cost_share == doctest::Approx(double(gelu_ns + mul_ns) / double(in.self_cuda_ns)));
    CHECK(chain.saving_ns == saving);
    CHECK(chain.estimate.find("the chain's time minus its longest kernel") != std::string::npos);
    REQUIRE_FALSE(in.summary.empty());
    CHECK(in.summary[0].find("elementwise chain") != std::string::npos);
  }
  // cuprof's MLP: 204.064us, 29.4% of GPU time; torch's (the articles' shapes on an H100): 257.252us, 33.8%.
  const cuprof::insights unfused = insights_of(gpu_trace("mlp_unfused.json"));
  CHECK(unfused.verdict == cuprof::bound_verdict::compute_bound);
  CHECK(kinds_of(unfused) == std::vector<std::string>{"elementwise chain", "memset before GEMM"});
  CHECK(unfused.findings[0].cause == "elementwise chain: gelu_op -> mul_op");
  CHECK(unfused.findings[0].cost_ns == 204064);
  CHECK(unfused.findings[0].saving_ns == 94624);
  CHECK(unfused.summary[0].find("; 29.4% of GPU time, could save ~94.624us") != std::string::npos);
  // Throughput per name, pooled over the records whose size is known: the memsets' bytes (no peak:
  // this trace predates the memory clock in deviceProperties); the GEMMs have no sizes (no scope args).
  {
    const cuprof::trace t = cuprof::read_trace_file(gpu_trace("mlp_unfused.json")).t;
    double bytes = 0, seconds = 0;
    for (const cuprof::gpu_activity& g : t.gpu)
      if (g.kind == cuprof::gpu_kind::memset) bytes += double(t.bytes_of(g)), seconds += double(g.end_ns - g.start_ns) / 1e9;
    REQUIRE(bytes > 0);
    for (const cuprof::kernel_summary& k : unfused.kernels) {
      if (k.kind == cuprof::gpu_kind::memset) {
        CHECK(k.throughput.amount == doctest::Approx(bytes));
        CHECK(k.throughput.seconds == doctest::Approx(seconds));
        CHECK(k.throughput.peak.value == 0);
      } else {
        CHECK(k.throughput.amount == 0);
      }
    }
  }
  // JSON and CSV carry the same figures.
  const nlohmann::json doc = nlohmann::json::parse(cli({"insights", gpu_trace("mlp_unfused.json"), "--format", "json"}).out);
  CHECK(doc["verdict"] == "compute-bound");
  CHECK(doc["rule"] == unfused.verdict_rule);
  CHECK(doc["signals"] == unfused.verdict_signals);
  CHECK(doc["summary"] == unfused.summary);
  REQUIRE(doc["findings"].size() == 2);
  CHECK(doc["findings"][0]["cause"] == "elementwise chain: gelu_op -> mul_op");
  CHECK(doc["findings"][0]["cost_us"] == 204.064);
  CHECK(doc["findings"][0]["cost_of"] == "GPU time");
  CHECK(doc["findings"][0]["saving_us"] == 94.624);
  CHECK(doc["findings"][0]["estimate"] == unfused.findings[0].estimate);
  CHECK(doc["launch_to_start_median_us"] == 392.32);
  const cuprof::insights torch = insights_of(kineto_trace("torch_geglu_mlp.json"));
  CHECK(torch.verdict == cuprof::bound_verdict::mixed);
  CHECK(kinds_of(torch) == std::vector<std::string>{"elementwise chain", "memset before GEMM", "launch to start"});
  CHECK(torch.findings[0].cause == "elementwise chain: Gelu -> Mul");
  CHECK(torch.findings[0].cost_ns == 257252);
  CHECK(torch.findings[0].saving_ns == 103650);
  CHECK(torch.findings[0].details[2] == "other kernels between them: nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT");
  // torch compiles in the GeLU and the mul into one Triton kernel: no chain left; the estimate was 103.650us,
  // the measured saving 257.252us - 185.411us = 71.841us (the fused kernel is not as short as the longer one).
  for (const char* fused : {"mlp_fused.json", "torch_geglu_mlp_compiled.json"}) {
    CAPTURE(fused);
    const cuprof::insights in = insights_of(std::string(fused).rfind("torch", 0) == 0 ? kineto_trace(fused) : gpu_trace(fused));
    check_ranking(in);
    CHECK(find_finding(in, "elementwise chain") == nullptr);
  }
  CHECK(gpu_time_by_name(cuprof::read_trace_file(kineto_trace("torch_geglu_mlp_compiled.json"))
                             .t)["triton_poi_fused__unsafe_view_gelu_mul_0"] == 185411);
  CHECK(kinds_of(insights_of(gpu_trace("mlp_fused.json"))) == std::vector<std::string>{"memset before GEMM"});
  // In a compute-bound run the cuBLAS flag clear costs its GPU time and saves nothing; where CPU time matters, its launches.
  CHECK(unfused.findings[1].cost_of == cuprof::cost_base::gpu_time);
  CHECK(unfused.findings[1].saving_ns == 0);
  CHECK(torch.findings[1].cost_of == cuprof::cost_base::cpu_time);
  CHECK(torch.findings[1].saving_ns == torch.findings[1].cost_ns);
  // Mixed because the launch queue is deep: launch-to-start is a finding, with nothing to save from launches.
  CHECK(torch.verdict_reason.find("towards compute: work queues behind earlier work") != std::string::npos);
  CHECK(torch.findings[2].saving_ns == 0);
  CHECK(torch.findings[2].cost_ns == torch.window_ns() - torch.gpu_busy_ns);
  // The warmup ran before ProfilerStep#2: no cold start, although the first step is 1.8x the others.
  CHECK(torch.first_step == 2);
  CHECK(find_finding(torch, "cold start") == nullptr);
}

TEST_CASE("insights: the ranked findings and the verdicts' signals on the matmul_add traces, cuprof's and torch's") {
  struct expected {
    std::string path;
    cuprof::bound_verdict verdict;
    std::vector<std::string> kinds;
  };
  for (const expected& e :
       {expected{gpu_trace("matmul_add_64.json"), cuprof::bound_verdict::overhead_bound, {"launch to start"}},
        expected{kineto_trace("torch_matmul_add_64.json"), cuprof::bound_verdict::overhead_bound, {"launch to start"}},
        expected{gpu_trace("matmul_add_4096.json"), cuprof::bound_verdict::compute_bound, {"memset before GEMM"}},
        expected{kineto_trace("torch_matmul_add_4096.json"),
                 cuprof::bound_verdict::compute_bound,
                 {"synchronization", "memset before GEMM"}},
        expected{
            gpu_trace("linear_addmm.json"), cuprof::bound_verdict::overhead_bound, {"launch to start", "memcpy before GEMM"}}}) {
    CAPTURE(e.path);
    const cuprof::insights in = insights_of(e.path);
    check_ranking(in);
    CHECK(in.verdict == e.verdict);
    CHECK(kinds_of(in) == e.kinds);
    // The signals, recomputed from the trace: the launch-to-start median and the launch calls' median.
    const cuprof::trace t = cuprof::read_trace_file(e.path).t;
    std::vector<std::uint64_t> waits, calls;
    for (const cuprof::gpu_activity& g : t.gpu) {
      if (g.kind == cuprof::gpu_kind::sync || g.api == cuprof::no_index) continue;
      waits.push_back(g.start_ns - t.api_calls[g.api].start_ns);
      calls.push_back(t.api_calls[g.api].end_ns - t.api_calls[g.api].start_ns);
    }
    CHECK(in.launch_to_start.median_ns == cuprof::median_of(waits));
    CHECK(in.launch_call_median_ns == cuprof::median_of(calls));
    const bool cpu_heavy = in.cpu_work_ns() > in.self_cuda_ns, idle = in.gpu_idle_share >= 0.3,
               short_queue = in.launch_to_start.median_ns < std::max<std::uint64_t>(20000, 3 * in.launch_call_median_ns);
    CHECK((e.verdict == cuprof::bound_verdict::overhead_bound) == (cpu_heavy && idle && short_queue));
    CHECK((e.verdict == cuprof::bound_verdict::compute_bound) == (!cpu_heavy && !idle && !short_queue));
    // Compute-bound: launch-to-start is queue depth, not a finding.
    if (e.verdict == cuprof::bound_verdict::compute_bound) CHECK(find_finding(in, "launch to start") == nullptr);
  }
  // torch's 4096 run ends in a 397us cudaDeviceSynchronize during which the GPU worked all but 13.152us.
  const cuprof::insights torch_4096 = insights_of(kineto_trace("torch_matmul_add_4096.json"));
  const cuprof::finding* sync = find_finding(torch_4096, "synchronization");
  REQUIRE(sync != nullptr);
  CHECK(sync->cost_ns == 397362);
  CHECK(sync->saving_ns == 13152);
}

TEST_CASE("insights: elementwise kernels of one scope call chain across one other kernel, not two") {
  // One call of a scope "block" launches these kernels in order, each from an op scope of its own, on one stream.
  const auto analyze_block = [](const std::vector<std::string>& kernels) {
    cuprof::trace t;
    const std::uint64_t t0 = 1700000000000000000ull;
    cuprof::cpu_span block;
    block.start_ns = t0;
    block.end_ns = t0 + 1000000;
    block.name = t.names.intern("block");
    block.tid = 1;
    block.id = 1;
    t.spans.push_back(block);
    for (std::uint32_t i = 0; i < kernels.size(); ++i) {
      cuprof::cpu_span op;
      op.start_ns = t0 + 1000 + i * 10000;
      op.end_ns = op.start_ns + 5000;
      op.name = t.names.intern("op" + std::to_string(i));
      op.tid = 1;
      op.parent = 0;
      op.id = i + 2;
      t.spans.push_back(op);
      cuprof::api_call a;
      a.start_ns = op.start_ns + 1000;
      a.end_ns = a.start_ns + 2000;
      a.kind = std::uint16_t(t.add_call_kind({t.names.intern("cudaLaunchKernel"), 0, cuprof::api_domain::runtime, true}));
      a.tid = 1;
      a.correlation = i + 1;
      t.api_calls.push_back(a);
      cuprof::gpu_activity g;
      g.start_ns = t0 + 500000 + i * 20000;
      g.end_ns = g.start_ns + (i + 1) * 1000;
      g.name = t.names.intern(kernels[i]);
      g.correlation = i + 1;
      g.lane = t.add_gpu_lane({0, 0, 7});
      t.gpu.push_back(g);
    }
    cuprof::attribute(t);
    return cuprof::analyze(t);
  };
  const std::string gelu = "void ex::map_kernel<gelu_op>(gelu_op)", mul = "void ex::map_kernel<mul_op>(mul_op)",
                    gemm = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT";
  const cuprof::insights one = analyze_block({gelu, gemm, mul});
  const cuprof::finding* chain = find_finding(one, "elementwise chain");
  REQUIRE(chain != nullptr);
  CHECK(chain->headline == "2 elementwise kernels, gelu_op -> mul_op, in one block call, 1 time: 4.000us");
  CHECK(chain->cost_ns == 1000 + 3000);
  CHECK(chain->saving_ns == 1000);
  CHECK(find_finding(analyze_block({gelu, gemm, gemm, mul}), "elementwise chain") == nullptr);
  CHECK(find_finding(analyze_block({gelu, mul}), "elementwise chain") != nullptr);
  CHECK(find_finding(analyze_block({gelu, gemm}), "elementwise chain") == nullptr);
}

TEST_CASE("insights: a synthetic 1 M-event overhead-bound trace: the verdict, its rule and the ranked findings") {
  // Built as the model, not as JSON, to stay quick under the sanitizers: 10 steps of 33,334 ops each, an op
  // a scope around a 5us launch call whose 2us kernel starts 1us after the call returns; step 0 is cold.
  cuprof::trace t;
  const cuprof::name_id op = t.names.intern("aten::foo"), launch = t.names.intern("cudaLaunchKernel"),
                        kernel = t.names.intern("foo_kernel");
  const std::uint64_t origin = 1700000000000000000ull;
  constexpr std::uint32_t steps = 10, ops = 33334;
  std::uint64_t now = origin, kernel_ns = 0;
  std::uint32_t correlation = 1;
  t.spans.reserve(steps * (ops + 1));
  t.api_calls.reserve(steps * ops);
  t.gpu.reserve(steps * ops);
  for (std::uint32_t s = 0; s < steps; ++s) {
    const std::uint32_t step = std::uint32_t(t.spans.size());
    cuprof::cpu_span st;
    st.start_ns = now;
    st.name = t.names.intern("ProfilerStep#" + std::to_string(s));
    st.tid = 1;
    st.id = step + 1;
    st.is_step = true;
    t.spans.push_back(st);
    const std::uint64_t op_ns = s == 0 ? 20000 : 10000;  // the cold step's ops take twice as long
    for (std::uint32_t i = 0; i < ops; ++i) {
      cuprof::cpu_span o;
      o.start_ns = now;
      o.end_ns = now + op_ns;
      o.name = op;
      o.tid = 1;
      o.parent = step;
      o.id = std::uint32_t(t.spans.size()) + 1;
      t.spans.push_back(o);
      cuprof::api_call a;
      a.start_ns = now + 2000;
      a.end_ns = a.start_ns + 5000;
      a.kind = std::uint16_t(t.add_call_kind({launch, 0, cuprof::api_domain::runtime, true}));
      a.tid = 1;
      a.correlation = correlation;
      t.api_calls.push_back(a);
      cuprof::gpu_activity g;
      g.start_ns = a.end_ns + 1000;
      g.end_ns = g.start_ns + 2000;
      g.name = kernel;
      g.correlation = correlation++;
      g.lane = t.add_gpu_lane({0, 0, 7});
      t.gpu.push_back(g);
      kernel_ns += 2000;
      now = o.end_ns;
    }
    t.spans[step].end_ns = now;
  }
  REQUIRE(t.spans.size() + t.api_calls.size() + t.gpu.size() >= 1000000);
  cuprof::attribute(t);
  const cuprof::insights in = cuprof::analyze(t);
  CHECK(in.verdict == cuprof::bound_verdict::overhead_bound);
  CHECK(in.self_cuda_ns == kernel_ns);
  CHECK(in.gpu_busy_ns == kernel_ns);
  CHECK(in.window_ns() == now - origin);
  CHECK(in.launch_to_start.median_ns == 6000);
  CHECK(in.launch_call_median_ns == 5000);
  CHECK(in.verdict_rule ==
        "overhead-bound when Self CPU (without synchronize calls) > Self CUDA, the GPU is idle >= 30.0% of the window and "
        "the median launch-to-start is under 20.000us (3x the median launch call, at least 20.000us); compute-bound when "
        "none of the three holds; mixed otherwise");
  CHECK(in.verdict_signals.find("Self CPU " + cuprof::detail::us_text(double(in.self_cpu_ns)) + " vs Self CUDA " +
                                cuprof::detail::us_text(double(kernel_ns))) == 0);
  CHECK(in.verdict_signals.find("; launch-to-start median 6.000us (launch calls 5.000us median)") != std::string::npos);
  check_ranking(in);
  CHECK(kinds_of(in) == std::vector<std::string>{"launch to start", "cold start"});
  const cuprof::finding& idle = in.findings[0];
  CHECK(idle.cost_ns == now - origin - kernel_ns);
  CHECK(idle.cost_of == cuprof::cost_base::window);
  CHECK(idle.saving_ns == idle.cost_ns);
  CHECK(idle.cost_share == doctest::Approx(in.gpu_idle_share));
  // The first step: 33,334 ops of 20us against 10us: its extra time, paid once.
  const cuprof::finding& cold = in.findings[1];
  CHECK(cold.headline.find("ProfilerStep#0 took 666.680ms, 2.0x the median of the other steps (333.340ms)") == 0);
  CHECK(cold.cost_ns == std::uint64_t(ops) * 10000);
  const std::string text = cuprof::format_insights(in);
  CHECK(text.find("Summary (the largest estimated savings)\n  1. [launch to start] ") == 0);
  CHECK(text.find("\nVerdict: overhead-bound\n  signals: Self CPU ") != std::string::npos);
  CHECK(text.find("\n  rule: overhead-bound when ") != std::string::npos);
}

TEST_CASE("insights: the memset before the 4096 GEMM and the DtoD copy before the addmm GEMM") {
  const cuprof::insights big = insights_of(gpu_trace("matmul_add_4096.json"));
  const cuprof::finding* memset = find_finding(big, "memset before GEMM");
  REQUIRE(memset != nullptr);
  CHECK(memset->headline ==
        "Memset (Device) of 4 bytes right before the GEMM nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT, 3 times");
  CHECK(memset->where == "ProfilerStep#2 > matmul_add > matmul, GPU 0 stream 7 at ts 510793.072us");
  const cuprof::insights addmm = insights_of(gpu_trace("linear_addmm.json"));
  const cuprof::finding* copy = find_finding(addmm, "memcpy before GEMM");
  REQUIRE(copy != nullptr);
  CHECK(copy->headline.find("Memcpy DtoD (Device -> Device) of 128 KiB right before the GEMM "
                            "nvjet_sm90_tst_64x8_64x16_1x2_h_badd_TNT, 3 times") == 0);
  bool explained = false;
  for (const std::string& d : copy->details) explained |= d.find("beta=1 GEMM") != std::string::npos;
  CHECK(explained);
  // No copy before the 64 GEMM, and none in the fused MLP's elementwise kernels.
  CHECK(find_finding(insights_of(gpu_trace("matmul_add_64.json")), "memset before GEMM") == nullptr);
}

TEST_CASE("insights: cold start only where CPU time matters and warmup was not used; occupancy queries, profiler overhead") {
  // Its first step is 2x the others, but the schedule's warmup ran before it (steps start at #2): no cold start.
  const cuprof::insights small = insights_of(gpu_trace("matmul_add_64.json"));
  CHECK(small.first_step == 2);
  CHECK(small.cpu_time_matters());
  CHECK(find_finding(small, "cold start") == nullptr);
  // Compute-bound: CPU time is hidden behind the GPU.
  CHECK_FALSE(insights_of(gpu_trace("matmul_add_4096.json")).cpu_time_matters());
  CHECK(find_finding(insights_of(gpu_trace("matmul_add_4096.json")), "cold start") == nullptr);

  const cuprof::insights occ = insights_of(gpu_trace("occupancy.json"));
  const cuprof::finding* query = find_finding(occ, "occupancy query");
  REQUIRE(query != nullptr);
  CHECK(query->headline ==
        "axpy_kernel(float, float const*, float*, unsigned long): cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags x2 "
        "before 5 of 5 launches");
  // No steps, CPU time over GPU time: the first call's extra time is the top finding.
  CHECK(occ.verdict == cuprof::bound_verdict::mixed);
  CHECK(occ.cpu_time_matters());
  const cuprof::finding* first_call = find_finding(occ, "cold start");
  REQUIRE(first_call != nullptr);
  CHECK(first_call->headline.find("plan_and_launch took 2.609ms") == 0);
  CHECK(&occ.findings[0] == first_call);
  // Its cost: the first call's time over the median of the others, recomputed from the trace.
  const cuprof::loaded_trace occ_trace = cuprof::read_trace_file(gpu_trace("occupancy.json"));
  std::vector<std::pair<std::uint64_t, std::uint64_t>> calls;  // start, duration
  for (const cuprof::cpu_span& sp : occ_trace.t.spans)
    if (sp.parent == cuprof::no_index && occ_trace.t.names.str(sp.name) == "plan_and_launch")
      calls.emplace_back(sp.start_ns, sp.end_ns - sp.start_ns);
  std::sort(calls.begin(), calls.end());
  REQUIRE(calls.size() >= 3);
  std::vector<std::uint64_t> others;
  for (std::size_t i = 1; i < calls.size(); ++i) others.push_back(calls[i].second);
  CHECK(first_call->cost_ns == calls[0].second - cuprof::median_of(others));
  CHECK(first_call->saving_ns == first_call->cost_ns);
  CHECK(first_call->cost_of == cuprof::cost_base::window);
  CHECK(first_call->cost_share == doctest::Approx(double(first_call->cost_ns) / double(occ.window_ns())));
  // The queries' CPU time: the durations of the cudaOccupancy* calls before the launches.
  std::uint64_t query_ns = 0;
  for (const cuprof::api_call& a : occ_trace.t.api_calls)
    if (cuprof::detail::is_occupancy_query(occ_trace.t.names.str(occ_trace.t.name_of(a)))) query_ns += a.end_ns - a.start_ns;
  CHECK(query->cost_ns == query_ns);
  CHECK(query->cost_of == cuprof::cost_base::cpu_time);
  CHECK(query->cost_share == doctest::Approx(double(query_ns) / double(occ.self_cpu_ns)));
  REQUIRE(find_finding(occ, "profiler overhead") != nullptr);
  CHECK(find_finding(occ, "profiler overhead")->headline.find("Activity Buffer Request 2.371ms") != std::string::npos);
  CHECK(find_finding(small, "occupancy query") == nullptr);
}

TEST_CASE("insights: a kernel that varies step to step is one finding with its distribution; launch-to-start per kernel name") {
  cuprof::trace t;
  const cuprof::name_id step_names[4] = {t.names.intern("ProfilerStep#0"), t.names.intern("ProfilerStep#1"),
                                         t.names.intern("ProfilerStep#2"), t.names.intern("ProfilerStep#3")};
  const cuprof::name_id launch = t.names.intern("cudaLaunchKernel"), kernel = t.names.intern("my_kernel");
  const std::uint64_t base = 1700000000000000000ull, start = base + 500000000ull;
  const std::uint64_t durations[4] = {100000, 100000, 400000, 100000};
  for (std::uint32_t i = 0; i < 4; ++i) {
    cuprof::cpu_span s;
    s.start_ns = start + i * 1000000;
    s.end_ns = s.start_ns + 50000;
    s.name = step_names[i];
    s.tid = 1;
    s.id = i + 1;
    s.is_step = true;
    t.spans.push_back(s);
    cuprof::api_call a;
    a.start_ns = s.start_ns + 1000;
    a.end_ns = a.start_ns + 5000;
    a.kind = std::uint16_t(t.add_call_kind({launch, 0, cuprof::api_domain::runtime, true}));
    a.tid = 1;
    a.correlation = i + 10;
    t.api_calls.push_back(a);
    cuprof::gpu_activity g;
    g.start_ns = a.start_ns + 8000 + i * 1000;
    g.end_ns = g.start_ns + durations[i];
    g.name = kernel;
    g.correlation = i + 10;
    g.lane = t.add_gpu_lane({0, 0, 7});
    t.gpu.push_back(g);
  }
  cuprof::attribute(t);
  const cuprof::insights in = cuprof::analyze(t);
  CHECK(in.base_ns == base);
  // One finding for the kernel: its distribution over the steps, costed by the time above the median step.
  const cuprof::finding* varies = find_finding(in, "varies step to step");
  REQUIRE(varies != nullptr);
  CHECK(varies->headline == "my_kernel per step: min 100.000us, median 100.000us, p95 400.000us, max 400.000us over 4 steps");
  CHECK(varies->details[0] == "at least 1.25x the median: ProfilerStep#2 400.000us (4.0x)");
  CHECK(varies->where == "slowest: ProfilerStep#2, GPU 0 stream 7 at ts 502011.000us");
  CHECK(varies->cost_ns == 300000);
  CHECK(varies->saving_ns == 300000);
  CHECK(varies->cause == "varies step to step: my_kernel");
  // The GPU waits (the queue is short) but does more than the CPU: mixed, and launch-to-start is a finding.
  CHECK(in.verdict == cuprof::bound_verdict::mixed);
  CHECK(in.verdict_reason.find("towards compute: the GPU's work exceeds the CPU's") != std::string::npos);
  REQUIRE(in.kernels.size() == 1);
  CHECK(in.kernels[0].launch_to_start.min_ns == 8000);
  CHECK(in.kernels[0].launch_to_start.max_ns == 11000);
  const cuprof::finding* latency = find_finding(in, "launch to start");
  REQUIRE(latency != nullptr);
  CHECK(latency->details[0] == "my_kernel: median 9.500us, max 11.000us (4)");
}

TEST_CASE("insights: a trace without GPU work, and an empty one") {
  cuprof::trace t;
  cuprof::cpu_span s;
  s.start_ns = 1000;
  s.end_ns = 5000;
  s.name = t.names.intern("work");
  t.spans.push_back(s);
  const cuprof::insights cpu = cuprof::analyze(t);
  CHECK(cpu.verdict == cuprof::bound_verdict::no_gpu_work);
  // A CPU-only trace says what its (tiny) figures are, in insights and under the table.
  CHECK(cpu.cpu_only);
  CHECK(cpu.verdict_reason == cuprof::cpu_only_note);
  CHECK(cpu.findings.empty());
  CHECK(cuprof::format_insights(cpu).find("Verdict: no GPU work\n  a CPU-only trace: no CUDA calls and no GPU work") !=
        std::string::npos);
  temp_dir dir;
  write_file(
      dir.file("cpu.json"),
      R"({"traceEvents": [{"ph": "X", "cat": "user_annotation", "name": "work", "ts": 1.0, "dur": 0.05, "pid": 1, "tid": 1}]})");
  const cli_run table = cli({"table", dir.file("cpu.json")});
  CHECK(table.rc == 0);
  CHECK(table.out.find(std::string("Self CPU time total: 0.050us\nNote: ") + cuprof::cpu_only_note + "\n") != std::string::npos);
  CHECK(cli({"table", gpu_trace("mlp_fused.json")}).out.find("Note: ") == std::string::npos);
  CHECK(cuprof::analyze(cuprof::trace{}).verdict == cuprof::bound_verdict::no_gpu_work);
  CHECK_FALSE(cuprof::analyze(cuprof::trace{}).cpu_only);
  CHECK_FALSE(cuprof::format_insights(cuprof::analyze(cuprof::trace{})).empty());
}

TEST_CASE("insights: only calls that block the CPU thread count as waiting; CUPTI's suffixed names are known") {
  cuprof::trace t;
  cuprof::cpu_span s;
  s.start_ns = 1700000000500000000ull;
  s.end_ns = s.start_ns + 1000000;
  s.name = t.names.intern("work");
  s.tid = 1;
  s.id = 1;
  t.spans.push_back(s);
  const auto call = [&](const char* name, std::uint64_t from_us, std::uint64_t to_us, std::uint32_t correlation) {
    cuprof::api_call a;
    a.start_ns = s.start_ns + from_us * 1000;
    a.end_ns = s.start_ns + to_us * 1000;
    a.kind = std::uint16_t(t.add_call_kind({t.names.intern(name), 0, cuprof::api_domain::runtime, false}));
    a.tid = 1;
    a.correlation = correlation;
    t.api_calls.push_back(a);
  };
  // 40% of Self CPU in cudaStreamWaitEvent, which makes a stream wait and returns: not a CPU wait.
  call("cudaStreamWaitEvent_ptsz_v7000", 10, 410, 1);
  call("cuOccupancyMaxPotentialBlockSize", 420, 430, 2);
  call("cuLaunchKernelEx_ptsz", 440, 450, 3);
  call("cudaStreamSynchronize_ptsz_v7000", 500, 800, 4);
  cuprof::gpu_activity g;
  g.start_ns = s.start_ns + 460000;
  g.end_ns = s.start_ns + 790000;
  g.name = t.names.intern("my_kernel");
  g.correlation = 3;
  g.lane = t.add_gpu_lane({0, 0, 7});
  t.gpu.push_back(g);
  cuprof::attribute(t);
  const cuprof::insights in = cuprof::analyze(t);
  CHECK(in.self_cpu_ns == 1000000);
  CHECK(in.sync_cpu_ns == 300000);
  std::vector<std::string> syncs;
  for (const cuprof::finding& f : in.findings)
    if (f.kind == "synchronization") syncs.push_back(f.headline.substr(0, f.headline.find(':')));
  CHECK(syncs == std::vector<std::string>{"cudaStreamSynchronize_ptsz_v7000"});
  const cuprof::finding* query = find_finding(in, "occupancy query");
  REQUIRE(query != nullptr);
  CHECK(query->headline == "my_kernel: cuOccupancyMaxPotentialBlockSize before 1 of 1 launches");
}

// ---- memory ----------------------------------------------------------------------

namespace {

constexpr std::uint64_t memory_base = 1700000000000000000ull;
constexpr std::uint64_t MiB = std::uint64_t(1) << 20;

// Four 1 ms steps. forward allocates 8 MiB at the same address every step and
// frees it; cache_append keeps 1 MiB a step (and 2 MiB more in the last, at the
// address of that step's 1 MiB: its free was not recorded); small keeps 4 KiB a
// step; pin_buffer keeps 2 MiB of host memory in the last step. 2 MiB from
// before the window is freed in the first step. GPU 0 holds 100 MiB in use and
// 128 MiB reserved before the window, of its 80 GiB.
cuprof::trace memory_steps_trace() {
  builder b;
  b.memory_before(0, 100 * MiB, 128 * MiB);
  cuprof::device_info gpu;
  gpu.total_global_mem = 80ull << 30;
  b.t.meta.devices.push_back(gpu);
  for (std::uint32_t k = 0; k < 4; ++k) {
    const std::uint64_t s = memory_base + k * 1000000;
    const std::uint32_t step = b.span("ProfilerStep#" + std::to_string(k), s, s + 900000, cuprof::no_index, 1, true);
    if (k == 0) b.memory(s + 500, -2 * std::int64_t(MiB), 0x6000000000);
    const std::uint32_t forward = b.span("forward", s + 1000, s + 800000, step);
    b.memory(s + 1500, 8 * MiB, 0x7000000000);
    b.span("cache_append", s + 2000, s + 3000, forward);
    b.memory(s + 2500, MiB, 0x7100000000 + k * MiB);
    if (k == 3) b.memory(s + 2600, 2 * MiB, 0x7100000000 + k * MiB);
    b.span("small", s + 4000, s + 5000, forward);
    b.memory(s + 4500, 4096, 0x7200000000 + k * 4096);
    if (k == 3) {
      b.span("pin_buffer", s + 6000, s + 7000, forward);
      b.memory(s + 6500, 2 * MiB, 0x5000, -1);
    }
    b.memory(s + 700000, -8 * std::int64_t(MiB), 0x7000000000);
  }
  cuprof::attribute(b.t);
  return std::move(b.t);
}

cuprof::insights memory_insights(const cuprof::trace& t, cuprof::insights_options o = {}) {
  o.base_ns = memory_base;
  return cuprof::analyze(t, o);
}

std::vector<const cuprof::finding*> findings_of(const cuprof::insights& in, const std::string& kind) {
  std::vector<const cuprof::finding*> out;
  for (const cuprof::finding& f : in.findings)
    if (f.kind == kind) out.push_back(&f);
  return out;
}

}  // namespace

TEST_CASE("insights: memory still allocated at the end of the window, per scope, above a floor; silent without memory events") {
  const cuprof::trace t = memory_steps_trace();
  const cuprof::insights in = memory_insights(t);
  const std::vector<const cuprof::finding*> kept = findings_of(in, "memory not freed");
  // forward's activations are freed (matched by address, reused every step); small's 16 KiB is under the floor.
  REQUIRE(kept.size() == 2);
  CHECK(kept[0]->headline ==
        "forward > cache_append: 5 MiB on GPU 0 still allocated at the end of the window, 4 allocations made in it");
  CHECK(kept[0]->details[0] ==
        "left by 4 of the 4 steps, median 1 MiB a step: memory growing step by step is what a leak looks like");
  CHECK(kept[0]->where == "largest: 2 MiB in ProfilerStep#3 > forward > cache_append, thread 1 at ts 3002.600us");
  CHECK(kept[0]->cause == "memory not freed: forward > cache_append");
  CHECK(kept[0]->cost_of == cuprof::cost_base::none);
  CHECK(kept[0]->saving_ns == 0);
  CHECK(kept[1]->headline ==
        "forward > pin_buffer: 2 MiB in host memory still allocated at the end of the window, 1 allocation made in it");
  CHECK(kept[1]->details[0] == "left by 1 of the 4 steps, median 2 MiB a step: in one step only, not growing");
  // Memory, not time: nothing for the summary, and the report prints no cost line.
  CHECK(in.summary.empty());
  const std::string report = cuprof::format_insights(in);
  CHECK(report.find("[memory not freed] forward > cache_append: 5 MiB on GPU 0") != std::string::npos);

  // The floor: 6 MiB leaves neither.
  cuprof::insights_options high;
  high.unfreed_min_bytes = 6 * MiB;
  CHECK(findings_of(memory_insights(t, high), "memory not freed").empty());
  // 16 KiB in small is reported once the floor is below it.
  cuprof::insights_options low;
  low.unfreed_min_bytes = 16 * 1024;
  const cuprof::insights with_small = memory_insights(t, low);
  const std::vector<const cuprof::finding*> all = findings_of(with_small, "memory not freed");
  REQUIRE(all.size() == 3);
  CHECK(all[2]->headline ==
        "forward > small: 16 KiB on GPU 0 still allocated at the end of the window, 4 allocations made in it");

  // The frees that follow in a longer window match them: nothing is left.
  cuprof::trace freed = t;
  std::uint64_t at = memory_base + 4000000;
  for (const cuprof::memory_event& m : t.memory) {
    if (m.bytes <= 0) continue;
    cuprof::memory_event f = m;
    f.ts_ns = at++;
    f.bytes = -m.bytes;
    freed.memory.push_back(f);
  }
  CHECK(findings_of(memory_insights(freed, low), "memory not freed").empty());

  cuprof::trace none = t;
  none.memory.clear();
  none.meta.memory_recorded = false;
  const cuprof::insights silent = memory_insights(none);
  CHECK(findings_of(silent, "memory not freed").empty());
  CHECK(findings_of(silent, "memory peak").empty());
}

TEST_CASE("insights: each device's memory peak, when, and the allocation and scope that reached it") {
  const cuprof::insights in = memory_insights(memory_steps_trace());
  const std::vector<const cuprof::finding*> peaks = findings_of(in, "memory peak");
  REQUIRE(peaks.size() == 2);  // host memory first (device -1), then GPU 0
  CHECK(peaks[0]->headline ==
        "host memory: at most 2 MiB in use, at ts 3006.500us, reached by an allocation of 2 MiB in ProfilerStep#3 > forward > "
        "pin_buffer");
  CHECK(peaks[0]->details[0] == "reserved then: 2 MiB");
  // 100 MiB before the window, -2, then 1 MiB + 4 KiB kept a step, 8 + 1 + 2 MiB + 4 KiB in the last: the 4 KiB reaches it.
  CHECK(peaks[1]->headline ==
        "GPU 0: at most 112 MiB in use, at ts 3004.500us, reached by an allocation of 4 KiB in ProfilerStep#3 > forward > small");
  CHECK(peaks[1]->details[0] ==
        "reserved then: 128 MiB (16 MiB held by the allocator beyond what is in use); the device has 80 GiB, 0.2% of it taken");
  CHECK(peaks[1]->where == "ProfilerStep#3 > forward > small, thread 1 at ts 3004.500us");
  CHECK(peaks[1]->cause == "memory peak: GPU 0");
  CHECK(peaks[1]->cost_of == cuprof::cost_base::none);
}

TEST_CASE("insights: cudaMalloc, cudaFree and their kin in steps after the first, not the stream-ordered ones") {
  builder b;
  for (std::uint32_t k = 0; k < 3; ++k) {
    const std::uint64_t s = memory_base + k * 1000000;
    b.span("ProfilerStep#" + std::to_string(k), s, s + 900000, cuprof::no_index, 1, true);
    if (k == 0) b.call("cudaMalloc_v3020", s + 10000, s + 110000, 1);  // the first step sets up: not counted
    if (k == 1) b.call("cuMemAlloc_v2", s + 10000, s + 30000, 2);
    if (k >= 1) b.call("cudaFree", s + 200000, s + 250000, 3 + k);
    if (k == 2) b.call("cudaMallocAsync_v11020", s + 300000, s + 302000, 6);
  }
  b.call("cudaMallocHost", memory_base + 3000000, memory_base + 3100000, 7);  // after the steps
  cuprof::attribute(b.t);
  const cuprof::insights in = memory_insights(b.t);
  const std::vector<const cuprof::finding*> found = findings_of(in, "allocation in the loop");
  REQUIRE(found.size() == 2);  // by call name
  CHECK(found[0]->headline == "cudaFree: 2 calls in 2 of the 2 steps after the first, 100.000us of CPU time");
  CHECK(found[0]->cost_ns == 100000);
  CHECK(found[0]->cost_of == cuprof::cost_base::cpu_time);
  CHECK(found[0]->saving_ns == 100000);
  CHECK(found[0]->where == "first: ProfilerStep#1, thread 1 at ts 1200.000us");
  CHECK(found[1]->headline == "cuMemAlloc_v2: 1 call in 1 of the 2 steps after the first, 20.000us of CPU time");
  CHECK(found[1]->cause == "allocation in the loop: cuMemAlloc_v2");

  // One step: no loop.
  builder one;
  one.span("ProfilerStep#0", memory_base, memory_base + 900000, cuprof::no_index, 1, true);
  one.call("cudaFree", memory_base + 1000, memory_base + 50000, 1);
  cuprof::attribute(one.t);
  CHECK(findings_of(memory_insights(one.t), "allocation in the loop").empty());
}

TEST_CASE("insights: copies with pageable host memory, estimated from the trace's pinned copies of the same direction") {
  builder b;
  const std::uint64_t s = memory_base;
  b.transfer(b.gpu("Memcpy HtoD (Pageable -> Device)", s, s + 640000, 1, cuprof::gpu_kind::memcpy), 8 * MiB, 1);
  b.transfer(b.gpu("Memcpy HtoD (Pinned -> Device)", s + 700000, s + 1020000, 2, cuprof::gpu_kind::memcpy), 8 * MiB, 1);
  b.transfer(b.gpu("Memcpy HtoD (Pageable -> Device)", s + 1100000, s + 1740000, 3, cuprof::gpu_kind::memcpy), 8 * MiB, 1);
  b.transfer(b.gpu("Memcpy DtoH (Device -> Pageable)", s + 1800000, s + 2200000, 4, cuprof::gpu_kind::memcpy), 4 * MiB, 2);
  b.transfer(b.gpu("Memcpy DtoD (Device -> Device)", s + 2300000, s + 2310000, 5, cuprof::gpu_kind::memcpy), 64 * MiB, 8);
  cuprof::attribute(b.t);
  const cuprof::insights in = memory_insights(b.t);
  const std::vector<const cuprof::finding*> found = findings_of(in, "pageable memcpy");
  REQUIRE(found.size() == 2);
  // Ranked by saving: HtoD, whose pinned copy ran twice as fast, first.
  CHECK(found[0]->headline == "Memcpy HtoD with pageable host memory: 2 copies, 16 MiB in 1.280ms (13.1 GB/s)");
  CHECK(found[0]->details[0] ==
        "the trace's 1 pinned HtoD copy (8 MiB) ran at 26.2 GB/s: from pinned memory these would take ~640.000us");
  CHECK(found[0]->cost_ns == 1280000);
  CHECK(found[0]->cost_of == cuprof::cost_base::gpu_time);
  CHECK(found[0]->saving_ns == 640000);
  CHECK(found[0]->where == "largest: GPU 0 stream 7 at ts 0.000us");
  // No pinned DtoH copy: the bytes and time, no estimate.
  CHECK(found[1]->headline == "Memcpy DtoH with pageable host memory: 1 copy, 4 MiB in 400.000us (10.5 GB/s)");
  CHECK(found[1]->details[0] == "the trace has no pinned DtoH copies to measure what pinned memory would give here");
  CHECK(found[1]->saving_ns == 0);
  CHECK(found[1]->estimate.rfind("not estimated", 0) == 0);
  REQUIRE_FALSE(in.summary.empty());
  CHECK(in.summary[0].rfind("[pageable memcpy] Memcpy HtoD", 0) == 0);

  // Under the floor: one small copy says nothing.
  builder tiny;
  tiny.transfer(tiny.gpu("Memcpy HtoD (Pageable -> Device)", s, s + 5000, 1, cuprof::gpu_kind::memcpy), 4096, 1);
  CHECK(findings_of(memory_insights(tiny.t), "pageable memcpy").empty());
  cuprof::insights_options high;
  high.pageable_copy_min_bytes = 32 * MiB;
  CHECK(findings_of(memory_insights(b.t, high), "pageable memcpy").empty());
}

// ---- diff -------------------------------------------------------------------------

TEST_CASE("diff: unfused vs fused MLP keeps the GEMMs and removes the two elementwise kernels") {
  const cuprof::loaded_trace a = cuprof::read_trace_file(gpu_trace("mlp_unfused.json"));
  const cuprof::loaded_trace b = cuprof::read_trace_file(gpu_trace("mlp_fused.json"));
  const cuprof::trace_diff d = cuprof::diff_traces(a.t, b.t);
  std::vector<std::string> same, removed, added;
  for (const cuprof::gpu_work_change& c : d.gpu)
    (c.status == cuprof::change_status::same      ? same
     : c.status == cuprof::change_status::removed ? removed
                                                  : added)
        .push_back(c.name);
  CHECK(same == std::vector<std::string>{"nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT",
                                         "nvjet_sm90_tst_192x128_64x5_1x2_h_bz_coopB_TNT", "Memset (Device)"});
  REQUIRE(removed.size() == 2);
  CHECK(removed[0].rfind("void ex::map_kernel<mul_op>", 0) == 0);
  CHECK(removed[1].rfind("void ex::map_kernel<gelu_op>", 0) == 0);
  REQUIRE(added.size() == 1);
  CHECK(added[0].rfind("void ex::map_kernel<gelu_mul_op>", 0) == 0);
  CHECK(d.count(cuprof::change_status::same, true) == 2);
  CHECK(d.scopes_only_a == std::vector<std::string>{"gelu", "mul"});
  CHECK(d.scopes_only_b == std::vector<std::string>{"gelu_mul"});
  const std::string text = cuprof::format_diff(d);
  CHECK(text.find("the GEMMs are unchanged (2 GEMM kernel names in both") != std::string::npos);
  CHECK(text.find("2 other kernels removed and 1 added (fewer launches: fusion)") != std::string::npos);
  CHECK(text.find("6 -> 3 calls, 27.220us -> 20.298us") != std::string::npos);  // cudaLaunchKernel
}

TEST_CASE("diff: a GEMM whose name changed says what changed") {
  const auto one_kernel = [](const std::string& name) {
    cuprof::trace t;
    cuprof::gpu_activity g;
    g.start_ns = 1000;
    g.end_ns = 2000;
    g.name = t.names.intern(name);
    t.gpu.push_back(g);
    return t;
  };
  const cuprof::trace_diff d = cuprof::diff_traces(one_kernel("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"),
                                                   one_kernel("nvjet_sm90_tst_192x128_64x5_1x2_h_bz_coopB_TNT"));
  REQUIRE(d.swaps.size() == 1);
  const std::vector<std::string>& x = d.swaps[0].differences;
  CHECK(x == std::vector<std::string>{"tile 256x128x64 -> 192x128x64", "stages 4 -> 5",
                                      "schedule cooperative (coopA) -> cooperative (coopB)", "layout NNT -> TNT"});
  CHECK(cuprof::format_diff(d).find("dispatcher picked different GEMMs") != std::string::npos);
}

TEST_CASE("throughput: GEMM FLOP/s from scope sizes, copy bytes/s, against the device's peaks") {
  const cuprof::loaded_trace lt = cuprof::parse_trace(sized_trace, "sized");
  const std::vector<cuprof::activity_throughput> all = cuprof::gpu_throughput(lt.t);
  REQUIRE(all.size() == 5);
  using measure = cuprof::activity_throughput::measure;
  // 2 x 4096^3 FLOPs in 1 ms; bf16 on sm_90: 4096 FLOP/clock/SM x 132 SMs x 1.98 GHz.
  CHECK(cuprof::decode_kernel_name(lt.t.names.str(lt.t.gpu[all[0].gpu].name)).a_type == "bf16");
  CHECK(all[0].what == measure::flops);
  CHECK(all[0].amount == doctest::Approx(2.0 * 4096 * 4096 * 4096));
  CHECK(all[0].per_second() == doctest::Approx(2.0 * 4096 * 4096 * 4096 / 1e-3));
  CHECK(all[0].peak.value == doctest::Approx(4096.0 * 132 * 1.98e9));
  CHECK(all[0].percent_of_peak() == doctest::Approx(100.0 * 137.438953472e12 / (4096.0 * 132 * 1.98e9)));
  CHECK(all[0].peak.basis.find("sm_90 bf16 dense tensor: 4096 FLOP/clock/SM x 132 SMs x 1.980 GHz") == 0);
  CHECK(all[1].amount == doctest::Approx(2.0 * 1024 * 1024 * 1024));
  // DtoD: 1 MB in 1 us = 1e12 B/s, against half the DRAM peak (2 x 2.619 GHz x 640 bytes).
  CHECK(all[3].what == measure::bytes);
  CHECK(all[3].per_second() == doctest::Approx(1e12));
  CHECK(all[3].peak.value == doctest::Approx(2.0 * 2.619e9 * 640 / 2));
  CHECK(all[3].percent_of_peak() == doctest::Approx(100.0 * 1e12 / (2.619e9 * 640)));
  CHECK(cuprof::above_peak_note(all[3]).empty());
  CHECK(cuprof::throughput_text(all[3]).find("above") == std::string::npos);
  // Twice as fast: 119% of the halved DRAM peak, which only an L2-resident source allows.
  cuprof::activity_throughput fast_copy = all[3];
  fast_copy.seconds /= 2;
  CHECK(fast_copy.percent_of_peak() > 100);
  CHECK(cuprof::above_peak_note(fast_copy).find("L2 cache") != std::string::npos);
  CHECK(cuprof::throughput_text(fast_copy).find("% of the peak (DRAM: ") != std::string::npos);
  CHECK(cuprof::throughput_text(fast_copy).find("; above the DRAM peak: ") != std::string::npos);
  // A GEMM above the tensor cores' peak: its scope's sizes are not its own.
  cuprof::activity_throughput fast_gemm = all[0];
  fast_gemm.seconds = fast_gemm.amount / fast_gemm.peak.value / 1.5;
  CHECK(fast_gemm.percent_of_peak() == doctest::Approx(150));
  CHECK(cuprof::above_peak_note(fast_gemm).find("M, N and K describe more work") != std::string::npos);
  // HtoD: the rate, but no peak.
  CHECK(cuprof::above_peak_note(all[4]).empty());
  CHECK(all[4].per_second() == doctest::Approx(4096 / 2e-6));
  CHECK(std::isnan(all[4].percent_of_peak()));
  CHECK(all[4].peak.basis.find("unknown peak") == 0);

  // Peaks: an architecture or type without a figure is unknown, not guessed.
  cuprof::device_info d;
  d.compute_major = 8, d.compute_minor = 6, d.num_sms = 82, d.clock_rate_khz = 1695000;
  CHECK(cuprof::peak_flops(&d, "fp16").value == 0);
  CHECK(cuprof::peak_flops(&d, "fp16").basis == "unknown peak: no figure for fp16 on sm_86");
  CHECK(cuprof::peak_flops(&d, "fp32").value == doctest::Approx(256.0 * 82 * 1.695e9));
  d.compute_major = 8, d.compute_minor = 0, d.num_sms = 108, d.clock_rate_khz = 1410000;
  CHECK(cuprof::peak_flops(&d, "bf16").value == doctest::Approx(312e12).epsilon(0.001));  // A100's published figure
  d.clock_rate_khz = 0;
  CHECK(cuprof::peak_flops(&d, "bf16").value == 0);
  CHECK(cuprof::peak_flops(nullptr, "bf16").basis.find("no deviceProperties") != std::string::npos);
  CHECK(cuprof::peak_dram_bandwidth(&d).value == 0);

  // Without sizes (no M/N/K on the launching scope) a GEMM has no figure.
  cuprof::loaded_trace plain = cuprof::parse_trace(sized_trace, "sized");
  for (auto& s : plain.t.spans) s.arg_count = 0;
  for (const auto& r : cuprof::gpu_throughput(plain.t)) CHECK(r.what == measure::bytes);
}

namespace {

const cuprof::kernel_summary* kernel_named(const cuprof::insights& in, const std::string& prefix) {
  for (const cuprof::kernel_summary& k : in.kernels)
    if (k.name.rfind(prefix, 0) == 0) return &k;
  return nullptr;
}

// A GPU busy for `us` microseconds with one kernel, and a sample every 20 us
// over it of (SM, DRAM, tensor, occupancy).
cuprof::trace sampled_kernel(const std::string& name, std::uint64_t us, std::vector<double> values) {
  builder b;
  const std::uint64_t t0 = 1700000000000000000ull;
  b.gpu(name, t0, t0 + us * 1000, 1);
  cuprof::detail::gpu_metric_series s;
  s.interval_ns = 20000;
  s.metrics = cuprof::detail::labelled_gpu_metrics();
  for (std::uint64_t at = t0; at + 20000 <= t0 + us * 1000; at += 20000) s.add(at, at + 20000, values.data());
  b.t.gpu_metrics.push_back(s);
  return b.t;
}

}  // namespace

TEST_CASE("insights: GPU counters judge kernels: a tensor-bound GEMM, memory-bound elementwise kernels, a latency-bound one") {
  const cuprof::insights in = insights_of(metrics_trace("gpu_metrics.json"));
  check_ranking(in);
  CHECK(kinds_of(in) == std::vector<std::string>{"elementwise chain", "tensor-bound kernel", "memory-bound kernel",
                                                 "latency-bound kernel", "memory-bound kernel", "incomplete trace"});
  // Each kernel's counters, over the samples inside its runs; the 5 us kernel has none.
  const cuprof::kernel_summary* gemm = kernel_named(in, "nvjet_");
  REQUIRE(gemm != nullptr);
  CHECK(gemm->counters.samples == 10);
  CHECK(gemm->counters.sm == doctest::Approx(85));
  CHECK(gemm->counters.dram == doctest::Approx(20));
  CHECK(gemm->counters.tensor == doctest::Approx(72));
  CHECK(gemm->counters.occupancy == doctest::Approx(40));
  const cuprof::kernel_summary* tiny = kernel_named(in, "tiny_kernel");
  REQUIRE(tiny != nullptr);
  CHECK(tiny->counters.samples == 0);
  CHECK(tiny->counters.too_short == 1);

  const cuprof::finding* tensor = find_finding(in, "tensor-bound kernel");
  REQUIRE(tensor != nullptr);
  CHECK(tensor->headline ==
        "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT: tensor pipe 72% of peak, SM 85%, DRAM 20%, 10 samples; 1 call: "
        "200.000us");
  CHECK(tensor->cost_ns == 200000);
  CHECK(tensor->saving_ns == 0);
  CHECK(tensor->details[1].find("its counters: tensor pipe 72% of peak, SM 85%, DRAM 20%, achieved occupancy 40%, 10 samples, "
                                "sampled every 20.000us") == 0);
  const std::vector<const cuprof::finding*> memory = findings_of(in, "memory-bound kernel");
  REQUIRE(memory.size() == 2);
  CHECK(memory[0]->headline.rfind("void ex::map_kernel<gelu_op>", 0) == 0);
  CHECK(memory[0]->headline.find(": DRAM 70% of peak, SM 8%, 5 samples; 1 call: 100.000us") != std::string::npos);
  CHECK(memory[1]->headline.find(": DRAM 92% of peak, SM 10%, 3 samples; 1 call: 60.000us") != std::string::npos);
  const cuprof::finding* latency = find_finding(in, "latency-bound kernel");
  REQUIRE(latency != nullptr);
  CHECK(latency->headline == "small_kernel(int): achieved occupancy 10%, SM 5% of peak, DRAM 3%, 4 samples; 1 call: 80.000us");
  REQUIRE(latency->details.size() == 3);
  CHECK(latency->details[2] ==
        "its launch: grid 4x1x1, block 128x1x1: 0.03 blocks per SM on 132 SMs, estimated occupancy 6% (from the launch "
        "configuration)");
  CHECK(find_finding(in, "compute-bound kernel") == nullptr);

  // The chain's saving by bytes: GeLU moves 100us x 70% of DRAM's peak, the mul 60us x 92%; fused, the
  // GeLU's bytes at 92%: 76.087us, so 160us - 76.087us. By time alone it would be 60us.
  const cuprof::finding* chain = find_finding(in, "elementwise chain");
  REQUIRE(chain != nullptr);
  CHECK(chain->headline ==
        "2 elementwise kernels, gelu_op -> mul_op, back to back, 1 time: 160.000us; DRAM 78% of peak, SM 9%, 8 samples");
  CHECK(chain->saving_ns == 160000 - 76086);
  CHECK(chain->estimate ==
        "fused, the chain moves about its largest member's bytes (time x DRAM share: 70.000us at DRAM's peak) at the best "
        "DRAM share among them (92%): the chain's time minus 76.087us");
  CHECK(chain->details[1].find(": 60.000us; DRAM 92% of peak, SM 10%, 3 samples") != std::string::npos);

  // The verdict shows the GPU's counters over its busy time; the mix says no one bound, so its reason is as without them.
  CHECK(in.verdict == cuprof::bound_verdict::compute_bound);
  CHECK(in.verdict_signals.find("; GPU counters while busy: SM 43% of peak, DRAM 38%, tensor pipe 33%, achieved occupancy "
                                "42%, 22 samples") != std::string::npos);
  CHECK(in.gpu_counters.too_short == 1);
  const std::string text = cuprof::format_insights(in);
  CHECK(text.find("= SM 85% of peak, DRAM 20%, tensor pipe 72%, achieved occupancy 40%, 10 samples\n") != std::string::npos);

  // The same trace without its counters: the findings and the verdict as they always were.
  json doc = json::parse(slurp(metrics_trace("gpu_metrics.json")));
  doc.erase("cuprof");
  json events = json::array();
  for (const json& e : doc["traceEvents"])
    if (e["ph"] != "C") events.push_back(e);
  doc["traceEvents"] = events;
  const cuprof::loaded_trace plain_trace = cuprof::parse_trace(doc.dump(), "t");
  REQUIRE(plain_trace.t.gpu_metrics.empty());
  cuprof::insights_options o;
  o.base_ns = plain_trace.base_ns;
  const cuprof::insights plain = cuprof::analyze(plain_trace.t, o);
  CHECK(kinds_of(plain) == std::vector<std::string>{"elementwise chain", "incomplete trace"});
  CHECK(plain.findings[0].headline == "2 elementwise kernels, gelu_op -> mul_op, back to back, 1 time: 160.000us");
  CHECK(plain.findings[0].saving_ns == 60000);
  CHECK(plain.findings[0].estimate ==
        "fused, memory-bound elementwise kernels cost about the longest of them: the chain's time minus its longest "
        "kernel, per occurrence");
  CHECK(plain.findings[0].details.size() == 3);
  CHECK(plain.verdict_signals.find("counters") == std::string::npos);
  CHECK(plain.verdict_reason == in.verdict_reason);
  for (const cuprof::kernel_summary& k : plain.kernels) CHECK(k.counters.samples == 0);
  CHECK(cuprof::format_insights(plain).find("samples") == std::string::npos);
}

TEST_CASE("insights: the verdict's reason names the counters; thresholds and too few samples") {
  const std::string gemm = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT";
  const cuprof::insights tensor = cuprof::analyze(sampled_kernel(gemm, 1000, {90, 10, 80, 30}));
  CHECK(tensor.verdict == cuprof::bound_verdict::compute_bound);
  CHECK(tensor.verdict_reason.find(" Its counters while busy (tensor pipe 80% of peak, SM 90%, DRAM 10%, 50 samples) agree: "
                                   "the tensor cores limit the kernels.") != std::string::npos);
  REQUIRE(find_finding(tensor, "tensor-bound kernel") != nullptr);
  // SM busy, the tensor pipe not: compute-bound.
  const cuprof::insights compute = cuprof::analyze(sampled_kernel(gemm, 1000, {70, 10, 5, 30}));
  CHECK(compute.verdict_reason.find("(SM 70% of peak, DRAM 10%, 50 samples) agree: the SMs' arithmetic limits the kernels.") !=
        std::string::npos);
  const cuprof::finding* c = find_finding(compute, "compute-bound kernel");
  REQUIRE(c != nullptr);
  CHECK(c->headline == gemm + ": SM 70% of peak, DRAM 10%, 50 samples; 1 call: 1.000ms");
  const cuprof::insights memory = cuprof::analyze(sampled_kernel("copy_kernel", 1000, {20, 85, 0, 60}));
  CHECK(memory.verdict_reason.find("(DRAM 85% of peak, SM 20%, 50 samples) say memory bandwidth, not arithmetic, limits the "
                                   "kernels.") != std::string::npos);
  CHECK(find_finding(memory, "memory-bound kernel") != nullptr);
  const cuprof::insights latency = cuprof::analyze(sampled_kernel("wait_kernel", 1000, {5, 5, 0, 10}));
  CHECK(latency.verdict_reason.find("(achieved occupancy 10%, SM 5% of peak, DRAM 5%, 50 samples) say the kernels are "
                                    "latency-bound") != std::string::npos);
  CHECK(find_finding(latency, "latency-bound kernel") != nullptr);
  // Just under each threshold: nothing is judged, and the reason is the one without counters.
  for (const std::vector<double>& v :
       std::vector<std::vector<double>>{{59, 10, 49, 30}, {20, 59, 0, 60}, {5, 5, 0, 25}, {30, 5, 0, 10}}) {
    const cuprof::insights in = cuprof::analyze(sampled_kernel(gemm, 1000, v));
    CAPTURE(in.verdict_reason);
    CHECK(in.verdict_reason.find("counters") == std::string::npos);
    CHECK(in.findings.empty());
  }
  // Both near their peaks, SM within memory_tie_pct above DRAM: memory-bound (the H200's bf16 GeLU);
  // SM further above: compute-bound.
  CHECK(find_finding(cuprof::analyze(sampled_kernel("gelu_kernel", 1000, {84, 83, 0, 95})), "memory-bound kernel") != nullptr);
  CHECK(find_finding(cuprof::analyze(sampled_kernel("gelu_kernel", 1000, {90, 83, 0, 95})), "compute-bound kernel") != nullptr);
  // Two samples are too few to judge a kernel by; DRAM above SM but the tensor pipe higher still: tensor-bound.
  CHECK(cuprof::analyze(sampled_kernel(gemm, 40, {90, 10, 80, 30})).findings.empty());
  CHECK(find_finding(cuprof::analyze(sampled_kernel(gemm, 1000, {50, 65, 80, 30})), "tensor-bound kernel") != nullptr);
}

}  // TEST_SUITE("analysis_insights")
