// The output layer's writer (include/cuprof/output/): the JSON text helpers, the
// Chrome trace against the contract of docs/trace-format.md, the traces recorded
// on a GPU (tests/data/gpu), key_averages() and the table.

#include <cuprof/cuprof.hpp>
#include <cuprof/output/json_text.hpp>
#include <cuprof/output/trace_schema.hpp>
#include <cuprof/analysis.hpp>

#include "support/files.hpp"
#include "support/flow_arrows.hpp"
#include "support/trace_contract.hpp"
#include "support/traces.hpp"
#include "trace_reader.hpp"  // the reader's internals (src/analysis)

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace cuprof_test;

namespace {

using cuprof::no_index;

const char* const vectorized_kernel =
    "void at::native::vectorized_elementwise_kernel<8, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul> "
    ">(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)";

// torch_matmul_add_4096.txt rebuilt event by event: three ProfilerStep#N, each
//   matmul_add { aten::matmul { aten::mm { cudaMemsetAsync, cuLaunchKernelEx } }, aten::add { cudaLaunchKernel } }
// then one cudaDeviceSynchronize. Durations split the torch totals over the 3 steps.
cuprof::trace matmul_add_4096() {
  builder b;
  const std::uint64_t step_self[3] = {13760, 13760, 13759};                 // 41.279us
  const std::uint64_t matmul_add_self[3] = {14287, 14287, 14287};           // 42.861us
  const std::uint64_t matmul_self[3] = {1972, 1972, 1973};                  // 5.917us
  const std::uint64_t mm_self[3] = {24691, 24691, 24690};                   // 74.072us
  const std::uint64_t add_self[3] = {6718, 6718, 6718};                     // 20.154us
  const std::uint64_t memset_call = 5069, launch_ex = 6197, launch = 4962;  // x3: 15.207, 18.591, 14.886us
  const std::uint64_t memset_gpu[3] = {789, 789, 790};                      // 2.368us
  const std::uint64_t gemm_gpu[3] = {170357, 170357, 170358};               // 511.072us
  const std::uint64_t add_gpu[3] = {22485, 22485, 22486};                   // 67.456us
  const std::uint64_t gap2[3] = {2811, 2811, 2810};                         // annotation gaps: 595.328us in all

  std::uint64_t t = 1000000;
  std::uint32_t corr = 100;
  for (int k = 0; k < 3; ++k) {
    const std::uint64_t mm = mm_self[k] + memset_call + launch_ex;
    const std::uint64_t matmul = matmul_self[k] + mm;
    const std::uint64_t add = add_self[k] + launch;
    const std::uint64_t ma = matmul_add_self[k] + matmul + add;
    const std::uint64_t step = step_self[k] + ma;
    const std::uint64_t s = t;
    const std::uint32_t st = b.span("ProfilerStep#" + std::to_string(k), s, s + step, no_index, 1, true);
    const std::uint64_t ma_start = s + 1000;
    const std::uint32_t sma = b.span("matmul_add", ma_start, ma_start + ma, st);
    const std::uint64_t matmul_start = ma_start + 1000;
    const std::uint32_t smatmul = b.span("aten::matmul", matmul_start, matmul_start + matmul, sma);
    const std::uint64_t mm_start = matmul_start + 500;
    b.span("aten::mm", mm_start, mm_start + mm, smatmul);
    const std::uint64_t memset_start = mm_start + 1000;
    const std::uint32_t c_memset = ++corr;
    b.call("cudaMemsetAsync", memset_start, memset_start + memset_call, c_memset);
    const std::uint64_t lex_start = memset_start + memset_call + 1000;
    const std::uint32_t c_gemm = ++corr;
    b.call("cuLaunchKernelEx", lex_start, lex_start + launch_ex, c_gemm, 1, cuprof::api_domain::driver);
    const std::uint64_t add_start = matmul_start + matmul + 1000;
    b.span("aten::add", add_start, add_start + add, sma);
    const std::uint32_t c_add = ++corr;
    b.call("cudaLaunchKernel", add_start + 1000, add_start + 1000 + launch, c_add);

    const std::uint64_t g = s + 60000;
    b.gpu("Memset (Device)", g, g + memset_gpu[k], c_memset, cuprof::gpu_kind::memset);
    const std::uint64_t g2 = g + memset_gpu[k] + 2000;
    b.gpu("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", g2, g2 + gemm_gpu[k], c_gemm);
    const std::uint64_t g3 = g2 + gemm_gpu[k] + gap2[k];
    b.gpu(vectorized_kernel, g3, g3 + add_gpu[k], c_add);
    t = s + 400000;
  }
  b.call("cudaDeviceSynchronize", t, t + 397362, ++corr);
  cuprof::attribute(b.t);
  return b.t;
}

// The golden tables below come from a re-typing of torch's _build_table
// (profiler_util.py) fed with the per-row totals worked out by hand; every row
// that also exists in kineto-samples/torch_matmul_add_4096.txt is
// byte-identical to torch's. cuprof adds gpu_user_annotation rows for the
// aten::* scopes too (they are record_function scopes here).
const char* const golden_4096_by_cuda_time_total =
    "-------------------------------------------------------  ------------  ------------  ------------  ------------  "
    "------------  ------------  ------------  ------------  ------------  ------------  \n"
    "                                                   Name    Self CPU %      Self CPU   CPU total %     CPU total  CPU time "
    "avg     Self CUDA   Self CUDA %    CUDA total  CUDA time avg    # of Calls  \n"
    "-------------------------------------------------------  ------------  ------------  ------------  ------------  "
    "------------  ------------  ------------  ------------  ------------  ------------  \n"
    "                                             matmul_add         0.00%       0.000us         0.00%       0.000us       "
    "0.000us     595.328us       102.48%     595.328us     198.443us             3  \n"
    "                                          ProfilerStep*         6.55%      41.279us        36.96%     232.967us      "
    "77.656us       0.000us         0.00%     580.896us     193.632us             3  \n"
    "                                             matmul_add         6.80%      42.861us        30.41%     191.688us      "
    "63.896us       0.000us         0.00%     580.896us     193.632us             3  \n"
    "                                           aten::matmul         0.00%       0.000us         0.00%       0.000us       "
    "0.000us     519.440us        89.42%     519.440us     173.147us             3  \n"
    "                                               aten::mm         0.00%       0.000us         0.00%       0.000us       "
    "0.000us     519.440us        89.42%     519.440us     173.147us             3  \n"
    "                                           aten::matmul         0.94%       5.917us        18.05%     113.787us      "
    "37.929us       0.000us         0.00%     513.440us     171.147us             3  \n"
    "                                               aten::mm        11.75%      74.072us        17.11%     107.870us      "
    "35.957us     513.440us        88.39%     513.440us     171.147us             3  \n"
    "         nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT         0.00%       0.000us         0.00%       0.000us       "
    "0.000us     511.072us        87.98%     511.072us     170.357us             3  \n"
    "                                              aten::add         3.20%      20.154us         5.56%      35.040us      "
    "11.680us      67.456us        11.61%      67.456us      22.485us             3  \n"
    "void at::native::vectorized_elementwise_kernel<8, at...         0.00%       0.000us         0.00%       0.000us       "
    "0.000us      67.456us        11.61%      67.456us      22.485us             3  \n"
    "                                              aten::add         0.00%       0.000us         0.00%       0.000us       "
    "0.000us      67.456us        11.61%      67.456us      22.485us             3  \n"
    "                                        Memset (Device)         0.00%       0.000us         0.00%       0.000us       "
    "0.000us       2.368us         0.41%       2.368us       0.789us             3  \n"
    "                                        cudaMemsetAsync         2.41%      15.207us         2.41%      15.207us       "
    "5.069us       0.000us         0.00%       0.000us       0.000us             3  \n"
    "                                       cuLaunchKernelEx         2.95%      18.591us         2.95%      18.591us       "
    "6.197us       0.000us         0.00%       0.000us       0.000us             3  \n"
    "                                       cudaLaunchKernel         2.36%      14.886us         2.36%      14.886us       "
    "4.962us       0.000us         0.00%       0.000us       0.000us             3  \n"
    "                                  cudaDeviceSynchronize        63.04%     397.362us        63.04%     397.362us     "
    "397.362us       0.000us         0.00%       0.000us       0.000us             1  \n"
    "-------------------------------------------------------  ------------  ------------  ------------  ------------  "
    "------------  ------------  ------------  ------------  ------------  ------------  \n"
    "Self CPU time total: 630.329us\n"
    "Self CUDA time total: 580.896us\n";

const char* const golden_4096_unsorted =
    "-------------------------------------------------------  ------------  ------------  ------------  ------------  "
    "------------  ------------  ------------  ------------  ------------  ------------  \n"
    "                                                   Name    Self CPU %      Self CPU   CPU total %     CPU total  CPU time "
    "avg     Self CUDA   Self CUDA %    CUDA total  CUDA time avg    # of Calls  \n"
    "-------------------------------------------------------  ------------  ------------  ------------  ------------  "
    "------------  ------------  ------------  ------------  ------------  ------------  \n"
    "                                          ProfilerStep*         6.55%      41.279us        36.96%     232.967us      "
    "77.656us       0.000us         0.00%     580.896us     193.632us             3  \n"
    "                                             matmul_add         6.80%      42.861us        30.41%     191.688us      "
    "63.896us       0.000us         0.00%     580.896us     193.632us             3  \n"
    "                                           aten::matmul         0.94%       5.917us        18.05%     113.787us      "
    "37.929us       0.000us         0.00%     513.440us     171.147us             3  \n"
    "                                               aten::mm        11.75%      74.072us        17.11%     107.870us      "
    "35.957us     513.440us        88.39%     513.440us     171.147us             3  \n"
    "                                        cudaMemsetAsync         2.41%      15.207us         2.41%      15.207us       "
    "5.069us       0.000us         0.00%       0.000us       0.000us             3  \n"
    "                                       cuLaunchKernelEx         2.95%      18.591us         2.95%      18.591us       "
    "6.197us       0.000us         0.00%       0.000us       0.000us             3  \n"
    "                                              aten::add         3.20%      20.154us         5.56%      35.040us      "
    "11.680us      67.456us        11.61%      67.456us      22.485us             3  \n"
    "                                       cudaLaunchKernel         2.36%      14.886us         2.36%      14.886us       "
    "4.962us       0.000us         0.00%       0.000us       0.000us             3  \n"
    "                                             matmul_add         0.00%       0.000us         0.00%       0.000us       "
    "0.000us     595.328us       102.48%     595.328us     198.443us             3  \n"
    "                                           aten::matmul         0.00%       0.000us         0.00%       0.000us       "
    "0.000us     519.440us        89.42%     519.440us     173.147us             3  \n"
    "                                               aten::mm         0.00%       0.000us         0.00%       0.000us       "
    "0.000us     519.440us        89.42%     519.440us     173.147us             3  \n"
    "                                        Memset (Device)         0.00%       0.000us         0.00%       0.000us       "
    "0.000us       2.368us         0.41%       2.368us       0.789us             3  \n"
    "         nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT         0.00%       0.000us         0.00%       0.000us       "
    "0.000us     511.072us        87.98%     511.072us     170.357us             3  \n"
    "void at::native::vectorized_elementwise_kernel<8, at...         0.00%       0.000us         0.00%       0.000us       "
    "0.000us      67.456us        11.61%      67.456us      22.485us             3  \n"
    "                                              aten::add         0.00%       0.000us         0.00%       0.000us       "
    "0.000us      67.456us        11.61%      67.456us      22.485us             3  \n"
    "                                  cudaDeviceSynchronize        63.04%     397.362us        63.04%     397.362us     "
    "397.362us       0.000us         0.00%       0.000us       0.000us             1  \n"
    "-------------------------------------------------------  ------------  ------------  ------------  ------------  "
    "------------  ------------  ------------  ------------  ------------  ------------  \n"
    "Self CPU time total: 630.329us\n"
    "Self CUDA time total: 580.896us\n";

const char* const golden_4096_self_cuda_top5 =
    "-------------------------------------------------------  ------------  ------------  ------------  ------------  "
    "------------  ------------  ------------  ------------  ------------  ------------  \n"
    "                                                   Name    Self CPU %      Self CPU   CPU total %     CPU total  CPU time "
    "avg     Self CUDA   Self CUDA %    CUDA total  CUDA time avg    # of Calls  \n"
    "-------------------------------------------------------  ------------  ------------  ------------  ------------  "
    "------------  ------------  ------------  ------------  ------------  ------------  \n"
    "                                             matmul_add         0.00%       0.000us         0.00%       0.000us       "
    "0.000us     595.328us       102.48%     595.328us     198.443us             3  \n"
    "                                           aten::matmul         0.00%       0.000us         0.00%       0.000us       "
    "0.000us     519.440us        89.42%     519.440us     173.147us             3  \n"
    "                                               aten::mm         0.00%       0.000us         0.00%       0.000us       "
    "0.000us     519.440us        89.42%     519.440us     173.147us             3  \n"
    "                                               aten::mm        11.75%      74.072us        17.11%     107.870us      "
    "35.957us     513.440us        88.39%     513.440us     171.147us             3  \n"
    "         nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT         0.00%       0.000us         0.00%       0.000us       "
    "0.000us     511.072us        87.98%     511.072us     170.357us             3  \n"
    "-------------------------------------------------------  ------------  ------------  ------------  ------------  "
    "------------  ------------  ------------  ------------  ------------  ------------  \n"
    "Self CPU time total: 630.329us\n"
    "Self CUDA time total: 580.896us\n";

// forward { linear, linear }, x { cudaMalloc }: CPU only, units us/ms/s.
cuprof::trace cpu_only_trace() {
  builder b;
  const std::uint32_t fwd = b.span("forward", 1000, 2501000);
  b.span("linear", 2000, 1002000, fwd);
  b.span("linear", 1500000, 1500750, fwd);
  b.span("x", 3000000, 3000000 + 1500123456ull);
  b.call("cudaMalloc", 3001000, 3001000 + 2000000, 1, 1, cuprof::api_domain::runtime, false);
  cuprof::attribute(b.t);
  return b.t;
}

const char* const golden_cpu_only =
    "--------------  ------------  ------------  ------------  ------------  ------------  ------------  \n"
    "          Name    Self CPU %      Self CPU   CPU total %     CPU total  CPU time avg    # of Calls  \n"
    "--------------  ------------  ------------  ------------  ------------  ------------  ------------  \n"
    "       forward         0.10%       1.499ms         0.17%       2.500ms       2.500ms             1  \n"
    "        linear         0.07%       1.001ms         0.07%       1.001ms     500.375us             2  \n"
    "             x        99.70%        1.498s        99.83%        1.500s        1.500s             1  \n"
    "    cudaMalloc         0.13%       2.000ms         0.13%       2.000ms       2.000ms             1  \n"
    "--------------  ------------  ------------  ------------  ------------  ------------  ------------  \n"
    "Self CPU time total: 1.503s\n";

const char* const golden_cpu_only_header_top2 =
    "==================================================================================================\n"
    "cuprof test\n"
    "--------------  ------------  ------------  ------------  ------------  ------------  ------------  \n"
    "          Name    Self CPU %      Self CPU   CPU total %     CPU total  CPU time avg    # of Calls  \n"
    "--------------  ------------  ------------  ------------  ------------  ------------  ------------  \n"
    "             x        99.70%        1.498s        99.83%        1.500s        1.500s             1  \n"
    "    cudaMalloc         0.13%       2.000ms         0.13%       2.000ms       2.000ms             1  \n"
    "--------------  ------------  ------------  ------------  ------------  ------------  ------------  \n"
    "Self CPU time total: 1.503s\n";

const char* const golden_nan =
    "-----  ------------  ------------  ------------  ------------  ------------  ------------  ------------  ------------  "
    "------------  ------------  \n"
    " Name    Self CPU %      Self CPU   CPU total %     CPU total  CPU time avg     Self CUDA   Self CUDA %    CUDA total  CUDA "
    "time avg    # of Calls  \n"
    "-----  ------------  ------------  ------------  ------------  ------------  ------------  ------------  ------------  "
    "------------  ------------  \n"
    "    k           NaN       0.000us           NaN       0.000us       0.000us       1.500us       100.00%       1.500us       "
    "1.500us             1  \n"
    "-----  ------------  ------------  ------------  ------------  ------------  ------------  ------------  ------------  "
    "------------  ------------  \n"
    "Self CPU time total: 0.000us\n"
    "Self CUDA time total: 1.500us\n";

const char* const golden_truncation =
    "-------------------------------------------------------  ------------  ------------  ------------  ------------  "
    "------------  ------------  \n"
    "                                                   Name    Self CPU %      Self CPU   CPU total %     CPU total  CPU time "
    "avg    # of Calls  \n"
    "-------------------------------------------------------  ------------  ------------  ------------  ------------  "
    "------------  ------------  \n"
    "    aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa        33.33%       1.000us        33.33%       1.000us       "
    "1.000us             1  \n"
    "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb...        33.33%       1.000us        33.33%       1.000us       "
    "1.000us             1  \n"
    "cccccccccccccccccccccccccccccccccccccccccccccccccccc...        33.33%       1.000us        33.33%       1.000us       "
    "1.000us             1  \n"
    "-------------------------------------------------------  ------------  ------------  ------------  ------------  "
    "------------  ------------  \n"
    "Self CPU time total: 3.000us\n";

const char* const golden_truncation_width_20 =
    "--------------------  ------------  ------------  ------------  ------------  ------------  ------------  \n"
    "                Name    Self CPU %      Self CPU   CPU total %     CPU total  CPU time avg    # of Calls  \n"
    "--------------------  ------------  ------------  ------------  ------------  ------------  ------------  \n"
    "aaaaaaaaaaaaaaaaa...        33.33%       1.000us        33.33%       1.000us       1.000us             1  \n"
    "bbbbbbbbbbbbbbbbb...        33.33%       1.000us        33.33%       1.000us       1.000us             1  \n"
    "ccccccccccccccccc...        33.33%       1.000us        33.33%       1.000us       1.000us             1  \n"
    "--------------------  ------------  ------------  ------------  ------------  ------------  ------------  \n"
    "Self CPU time total: 3.000us\n";

// The aten::matmul and aten::mm annotation rows are equal in every column
// (same GPU extent): the golden puts the enclosing scope first, as
// derive_gpu_annotations() promises; this accepts either order so that the layout
// checks do not hinge on that tie (a test of its own covers it).
bool matches_golden(const std::string& table, const std::string& golden) {
  if (table == golden) return true;
  const std::string mt =
      "                                           aten::matmul         0.00%       0.000us         0.00%       0.000us       "
      "0.000us     519.440us";
  const std::string mm =
      "                                               aten::mm         0.00%       0.000us         0.00%       0.000us       "
      "0.000us     519.440us";
  const std::size_t a = golden.find(mt), b = golden.find(mm);
  if (a == std::string::npos || b == std::string::npos) return false;
  const std::size_t a_end = golden.find('\n', a) + 1, b_end = golden.find('\n', b) + 1;
  if (a_end != b) return false;  // adjacent, matmul first
  const std::string swapped =
      golden.substr(0, a) + golden.substr(b, b_end - b) + golden.substr(a, a_end - a) + golden.substr(b_end);
  return table == swapped;
}

std::vector<fs::path> gpu_fixtures() {
  std::vector<fs::path> out;
  const fs::path dir = source_dir() / "tests" / "data" / "gpu";
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".json") out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_SUITE("output_writer") {

TEST_CASE("key_averages rows of the matmul_add 4096 reproduction") {
  const cuprof::trace t = matmul_add_4096();
  const cuprof::event_averages avg = cuprof::key_averages(t);
  CHECK(avg.rows().size() == 16);
  CHECK(avg.self_cpu_time_total_ns() == 630329);
  CHECK(avg.self_cuda_time_total_ns() == 580896);
  const auto* mm = avg.find("aten::mm", cuprof::row_kind::cpu_scope);
  REQUIRE(mm);
  CHECK(mm->count == 3);
  CHECK(mm->self_cpu_ns == 74072);
  CHECK(mm->cpu_total_ns == 107870);
  CHECK(mm->self_cuda_ns == 513440);
  const auto* step = avg.find("ProfilerStep*", cuprof::row_kind::cpu_scope);
  REQUIRE(step);
  CHECK(step->cuda_total_ns == 580896);
  const auto* ann = avg.find("matmul_add", cuprof::row_kind::gpu_annotation);
  REQUIRE(ann);
  CHECK(ann->self_cuda_ns == 595328);
  CHECK(ann->self_cpu_ns == 0);
  const auto* launch = avg.find("cudaLaunchKernel", cuprof::row_kind::cuda_api);
  REQUIRE(launch);
  CHECK(launch->self_cpu_ns == 14886);
  CHECK(launch->self_cuda_ns == 0);
  CHECK(avg.find("cudaLaunchKernel", cuprof::row_kind::cpu_scope) == nullptr);
  CHECK(avg.find(vectorized_kernel, cuprof::row_kind::gpu_work) != nullptr);
}

TEST_CASE("table reproduces torch's layout (matmul_add 4096, sorted by cuda_time_total)") {
  const cuprof::event_averages avg = cuprof::key_averages(matmul_add_4096());
  CHECK(matches_golden(avg.table("cuda_time_total", 100), golden_4096_by_cuda_time_total));
  CHECK(matches_golden(avg.table("device_time_total", -1), golden_4096_by_cuda_time_total));
}

// torch's order of first occurrence: events by start, the longer first at the
// same start (the GPU extent of matmul_add before the memset it begins with).
TEST_CASE("table without sort keeps first-occurrence order") {
  const cuprof::event_averages avg = cuprof::key_averages(matmul_add_4096());
  CHECK(matches_golden(avg.table(), golden_4096_unsorted));
  CHECK(matches_golden(avg.table("", -1), golden_4096_unsorted));
}

TEST_CASE("table row_limit cuts rows, not totals") {
  const cuprof::event_averages avg = cuprof::key_averages(matmul_add_4096());
  CHECK(matches_golden(avg.table("self_cuda_time_total", 5), golden_4096_self_cuda_top5));
  CHECK(matches_golden(avg.table("self_device_time_total", 5), golden_4096_self_cuda_top5));
  CHECK(row_names(avg.table("self_cuda_time_total", 0)).empty());
  CHECK(row_names(avg.table("count", -1)).size() == 16);
  CHECK(row_names(avg.table("count", 100)).size() == 16);
}

TEST_CASE("CPU-only table: no CUDA columns, us/ms/s units, header, row_limit") {
  const cuprof::event_averages avg = cuprof::key_averages(cpu_only_trace());
  CHECK(avg.table() == golden_cpu_only);
  cuprof::table_options o;
  o.sort_by = "self_cpu_time_total";
  o.row_limit = 2;
  o.header = "cuprof test";
  CHECK(avg.table(o) == golden_cpu_only_header_top2);
}

TEST_CASE("NaN percentages when the CPU total is 0") {
  builder b;
  b.gpu("k", 5000, 6500, 1);  // no launch recorded: GPU time only
  cuprof::attribute(b.t);
  CHECK(cuprof::key_averages(b.t).table() == golden_nan);
}

TEST_CASE("name truncation at max_name_column_width - 3, plus ...") {
  builder b;
  b.span(std::string(51, 'a'), 0, 1000);
  b.span(std::string(52, 'b'), 2000, 3000);
  b.span(std::string(60, 'c'), 4000, 5000);
  const cuprof::event_averages avg = cuprof::key_averages(b.t);
  CHECK(avg.table() == golden_truncation);
  cuprof::table_options o;
  o.max_name_column_width = 20;
  CHECK(avg.table(o) == golden_truncation_width_20);
}

TEST_CASE("truncated names stay valid UTF-8") {
  builder b;
  std::string name;
  for (int i = 0; i < 40; ++i) name += "\xE2\x82\xAC";  // 40 x U+20AC, 120 bytes: byte 52 is inside a character
  b.span(name, 0, 1000);
  const std::string table = cuprof::key_averages(b.t).table();
  for (std::size_t i = 0; i < table.size();) {
    const std::size_t n = cuprof::detail::utf8_sequence_length(table, i);
    if (n == 0) {
      FAIL_CHECK("invalid UTF-8 at byte " << i << " of the table");
      break;
    }
    i += n;
  }
}

TEST_CASE("sort keys: averages vs totals, counts, stable order of ties") {
  builder b;
  // "one": 1 call of 100us. "three": 3 calls of 50us (150us). "tie_a"/"tie_b": equal, tie_a first.
  b.span("one", 0, 100000);
  for (int i = 0; i < 3; ++i) b.span("three", 200000 + i * 100000, 250000 + i * 100000);
  b.span("tie_a", 600000, 610000);
  b.span("tie_b", 700000, 710000);
  b.span("tie_a", 800000, 810000);
  b.span("tie_b", 900000, 910000);
  const cuprof::event_averages avg = cuprof::key_averages(b.t);
  using names = std::vector<std::string>;
  CHECK(row_names(avg.table()) == names{"one", "three", "tie_a", "tie_b"});
  CHECK(row_names(avg.table("cpu_time")) == names{"one", "three", "tie_a", "tie_b"});
  CHECK(row_names(avg.table("cpu_time_total")) == names{"three", "one", "tie_a", "tie_b"});
  CHECK(row_names(avg.table("self_cpu_time_total")) == names{"three", "one", "tie_a", "tie_b"});
  CHECK(row_names(avg.table("count")) == names{"three", "tie_a", "tie_b", "one"});
  // Every key with nothing to sort on keeps the original order.
  for (const char* key :
       {"cuda_time", "device_time", "cuda_time_total", "device_time_total", "self_cuda_time_total", "self_device_time_total"}) {
    CAPTURE(key);
    CHECK(row_names(avg.table(key)) == names{"one", "three", "tie_a", "tie_b"});
  }
  // Ties among the CUDA keys: first occurrence order again.
  const cuprof::event_averages gpu = cuprof::key_averages(matmul_add_4096());
  const names by_cuda = row_names(gpu.table("cuda_time"));
  REQUIRE(by_cuda.size() == 16);
  CHECK(by_cuda[0] == "matmul_add");
  CHECK(by_cuda.back() == "cudaDeviceSynchronize");
}

TEST_CASE("unknown sort key throws cuprof::error listing the valid keys") {
  const cuprof::event_averages avg = cuprof::key_averages(cpu_only_trace());
  CHECK_THROWS_AS(avg.table("bogus"), cuprof::error);
  // A "device" spelling is a "cuda" key's twin, nothing more.
  for (const char* key : {"device", "device_time_totals", "self_device_time", "device_count"}) {
    CAPTURE(key);
    CHECK_THROWS_AS(avg.table(key), cuprof::error);
  }
  try {
    (void)avg.table("self_cpu_time");
    FAIL("no throw");
  } catch (const cuprof::error& e) {
    const std::string m = e.what();
    CHECK(m.rfind("cuprof: ", 0) == 0);
    CHECK(m.find("'self_cpu_time'") != std::string::npos);
    for (const char* key : {"cpu_time", "cuda_time", "cpu_time_total", "cuda_time_total", "self_cpu_time_total",
                            "self_cuda_time_total", "device_time_total", "self_device_time_total", "count"})
      CHECK(m.find(key) != std::string::npos);
  }
  // torch's memory keys, on a trace without memory figures: refused, not ignored.
  for (const char* key : {"cpu_memory_usage", "cuda_memory_usage", "device_memory_usage", "self_cpu_memory_usage",
                          "self_cuda_memory_usage", "self_device_memory_usage"}) {
    CAPTURE(key);
    try {
      (void)avg.table(key);
      FAIL("no throw");
    } catch (const cuprof::error& e) {
      CHECK(std::string(e.what()) == "cuprof: cannot sort by '" + std::string(key) +
                                         "': this trace has no memory figures (record them with "
                                         "profile_options::profile_memory, CUPROF_MEMORY=1 or `cuprof run --memory`)");
    }
  }
}

TEST_CASE("format helpers: time units with 3 decimals, percent with 2, NaN") {
  using cuprof::detail::format_share;
  using cuprof::detail::format_time_us;
  CHECK(format_time_us(0) == "0.000us");
  CHECK(format_time_us(0.0015) == "0.002us");
  CHECK(format_time_us(999.999) == "999.999us");
  CHECK(format_time_us(1000) == "1.000ms");
  CHECK(format_time_us(12345.678) == "12.346ms");
  CHECK(format_time_us(999999.0) == "999.999ms");
  CHECK(format_time_us(1e6) == "1.000s");
  CHECK(format_time_us(3723.5e6) == "3723.500s");
  CHECK(format_share(0, 0) == "NaN");
  CHECK(format_share(1, 3) == "33.33%");
  CHECK(format_share(2, 1) == "200.00%");
  CHECK(format_share(0, 5) == "0.00%");
}

TEST_CASE("an empty trace gives an empty set of rows") {
  const cuprof::trace empty;
  const cuprof::event_averages avg = cuprof::key_averages(empty);
  CHECK(avg.rows().empty());
  CHECK(avg.self_cpu_time_total_ns() == 0);
  CHECK(row_names(avg.table()).empty());
}

TEST_CASE("table: --stats columns give each row's per-call distribution") {
  const cuprof::loaded_trace lt = cuprof::read_trace_file(gpu_trace("matmul_add_4096.json"));
  const cuprof::event_averages avg = cuprof::key_averages(lt.t);
  const cuprof::event_average* gemm = avg.find("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", cuprof::row_kind::gpu_work);
  REQUIRE(gemm != nullptr);
  const cuprof::distribution d = gemm->cuda_distribution();
  CHECK(d.count == 3);
  CHECK(d.min_ns == 165952);
  CHECK(d.median_ns == 166656);
  CHECK(d.max_ns == 166752);
  const cuprof::event_average* matmul = avg.find("matmul", cuprof::row_kind::cpu_scope);
  REQUIRE(matmul != nullptr);
  CHECK(matmul->cpu_distribution().min_ns == 21460);
  CHECK(matmul->cpu_distribution().max_ns == 31518);

  cuprof::table_options o;
  o.sort_by = "cuda_time_total";
  o.stats = true;
  o.describe_kernel = cuprof::compact_kernel_name;
  const std::string table = avg.table(o);
  CHECK(table.find("  CUDA median  ") != std::string::npos);
  CHECK(table.find("GEMM sm90 bf16 256x128x64 4 stages cluster 1x2 coopA beta=0 NNT") != std::string::npos);
  // Without the options, the table is torch's, unchanged.
  CHECK(avg.table("cuda_time_total").find("CUDA median") == std::string::npos);
}

TEST_CASE("append_us: integer ns as us with the decimals needed, no trailing zero") {
  const auto us = [](std::uint64_t ns) {
    std::string s;
    cuprof::detail::append_us(s, ns);
    return s;
  };
  CHECK(us(0) == "0");
  CHECK(us(5) == "0.005");
  CHECK(us(50) == "0.05");
  CHECK(us(500) == "0.5");
  CHECK(us(999) == "0.999");
  CHECK(us(1000) == "1");
  CHECK(us(1010) == "1.01");
  CHECK(us(1234567) == "1234.567");
  CHECK(us(1000000000) == "1000000");
  for (std::uint64_t ns : {0ull, 1ull, 10ull, 100ull, 1001ull, 123456789ull, 999999999999ull}) {
    std::int64_t back = -1;  // what the reader makes of it
    REQUIRE(cuprof::detail::us_to_ns(us(ns), back));
    CHECK(back == std::int64_t(ns));
  }
  CHECK(us(18446744073709551615ull) == "18446744073709551.615");
  std::string s = "x=";
  cuprof::detail::append_us(s, 42);
  CHECK(s == "x=0.042");
}

TEST_CASE("append_int and append_double") {
  std::string s;
  cuprof::detail::append_int(s, 0);
  s += ',';
  cuprof::detail::append_int(s, -12);
  s += ',';
  cuprof::detail::append_int(s, std::uint64_t(18446744073709551615ull));
  CHECK(s == "0,-12,18446744073709551615");
  // The trace writer's own digits (text_buffer): every length of 32 and 64 bits, each side of it.
  const auto text = [](const cuprof::detail::text_buffer& b) { return std::string(b.data(), b.size()); };
  std::uint64_t power = 1;
  for (int digits = 1; digits <= 20; ++digits, power *= 10)
    for (std::uint64_t v : {power - 1, power, power + 1, power * 2 - 1, std::uint64_t(4294967295u), std::uint64_t(4294967296u)}) {
      CAPTURE(v);
      cuprof::detail::text_buffer b(1);
      cuprof::detail::append_int(b, v);
      b += ',';
      cuprof::detail::append_int(b, std::uint32_t(v));
      b += ',';
      cuprof::detail::append_us(b, v);
      std::string us;
      cuprof::detail::append_us(us, v);
      CHECK(text(b) == std::to_string(v) + ',' + std::to_string(std::uint32_t(v)) + ',' + us);
    }
  // Fixed notation, never an exponent, at least millesimal precision.
  for (double v : {2.0, 1048.576, 0.008, 123456789.125, 1e-9}) {
    CAPTURE(v);
    s.clear();
    cuprof::detail::append_double(s, v);
    CHECK(s.find_first_of("eE") == std::string::npos);
    CHECK(s.find('.') != std::string::npos);
    CHECK(std::fabs(std::stod(s) - v) <= 0.0005 + 1e-12 * v);
  }
}

TEST_CASE("utf8_sequence_length: valid lengths and every kind of invalid sequence") {
  const auto len = [](const std::string& s) { return cuprof::detail::utf8_sequence_length(s, 0); };
  CHECK(len("a") == 1);
  CHECK(len(std::string(1, '\0')) == 1);
  CHECK(len("\x7f") == 1);
  CHECK(len("\xC2\x80") == 2);          // U+0080, smallest 2-byte
  CHECK(len("\xC3\xA9") == 2);          // U+00E9
  CHECK(len("\xDF\xBF") == 2);          // U+07FF
  CHECK(len("\xE0\xA0\x80") == 3);      // U+0800, smallest 3-byte
  CHECK(len("\xE2\x82\xAC") == 3);      // U+20AC
  CHECK(len("\xED\x9F\xBF") == 3);      // U+D7FF, just below the surrogates
  CHECK(len("\xEE\x80\x80") == 3);      // U+E000, just above
  CHECK(len("\xEF\xBF\xBD") == 3);      // U+FFFD
  CHECK(len("\xF0\x90\x80\x80") == 4);  // U+10000
  CHECK(len("\xF0\x9F\x98\x80") == 4);  // U+1F600
  CHECK(len("\xF4\x8F\xBF\xBF") == 4);  // U+10FFFF
  CHECK(len("\x80") == 0);              // lone continuation
  CHECK(len("\xBF") == 0);
  CHECK(len("\xFF") == 0);
  CHECK(len("\xFE") == 0);
  CHECK(len("\xF8\x88\x80\x80\x80") == 0);  // 5-byte form
  CHECK(len("\xC0\x80") == 0);              // overlong NUL
  CHECK(len("\xC1\xBF") == 0);              // overlong
  CHECK(len("\xE0\x80\x80") == 0);          // overlong 3-byte
  CHECK(len("\xE0\x9F\xBF") == 0);          // overlong U+07FF
  CHECK(len("\xF0\x80\x80\x80") == 0);      // overlong 4-byte
  CHECK(len("\xF0\x8F\xBF\xBF") == 0);      // overlong U+FFFF
  CHECK(len("\xED\xA0\x80") == 0);          // U+D800
  CHECK(len("\xED\xBF\xBF") == 0);          // U+DFFF
  CHECK(len("\xF4\x90\x80\x80") == 0);      // U+110000
  CHECK(len("\xF5\x80\x80\x80") == 0);
  CHECK(len("\xE2\x82") == 0);   // truncated at the end
  CHECK(len("\xE2\x82x") == 0);  // truncated, followed by ASCII
  CHECK(len("\xF0\x9F\x98") == 0);
  CHECK(len("\xC3") == 0);
  // In the middle of a string.
  const std::string mid = "ab\xE2\x82\xAC";
  CHECK(cuprof::detail::utf8_sequence_length(mid, 2) == 3);
  CHECK(cuprof::detail::utf8_sequence_length(mid, 3) == 0);
}

TEST_CASE("json_escaped: escapes, U+FFFD for invalid bytes, raw multi-byte characters") {
  using cuprof::detail::json_escaped;
  CHECK(json_escaped("plain") == "plain");
  CHECK(json_escaped("a\"b") == "a\\\"b");
  CHECK(json_escaped("a\\b") == "a\\\\b");
  CHECK(json_escaped("\n\t\r") == "\\n\\t\\r");
  CHECK(json_escaped("\x01") == "\\u0001");
  CHECK(json_escaped("\x1f") == "\\u001f");
  CHECK(json_escaped(std::string(1, '\0')) == "\\u0000");
  CHECK(json_escaped("\b\f") == "\\u0008\\u000c");
  CHECK(json_escaped("\xFF") == "\xEF\xBF\xBD");
  CHECK(json_escaped("\xC0\x80") == "\xEF\xBF\xBD\xEF\xBF\xBD");
  CHECK(json_escaped("\xED\xA0\x80") == "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  CHECK(json_escaped("x\xE2\x82") == "x\xEF\xBF\xBD\xEF\xBF\xBD");
  CHECK(json_escaped("\xE2\x82y") == "\xEF\xBF\xBD\xEF\xBF\xBDy");
  CHECK(json_escaped("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80") == "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80");
  // Whatever goes in, nlohmann reads a valid string back.
  std::string all;
  for (int c = 0; c < 256; ++c) all.push_back(char(c));
  const std::string doc = "\"" + json_escaped(all) + "\"";
  json v;
  REQUIRE_NOTHROW(v = json::parse(doc));
  const std::string back = v.get<std::string>();
  CHECK(back.substr(0, 128) == all.substr(0, 128));  // ASCII round-trips exactly
  std::size_t replacements = 0;
  for (std::size_t p = 0; (p = back.find("\xEF\xBF\xBD", p)) != std::string::npos; p += 3) ++replacements;
  CHECK(replacements == 128);  // each byte 0x80..0xFF alone is invalid
}

TEST_CASE("chrome_trace_json: header, metadata and every event of a hand-made trace") {
  fixture f;
  const std::string text = cuprof::chrome_trace_json(f.t, "my \"trace\"");
  keep_trace("writer_fixture.json", text);
  const json doc = check_contract(text);
  const json& ev = doc["traceEvents"];

  // Header.
  CHECK(doc["baseTimeNanoseconds"].get<std::uint64_t>() == base);
  CHECK(doc["distributedInfo"]["rank"] == 3);
  CHECK(doc["distributedInfo"]["world_size"] == 4);
  CHECK(doc["traceName"] == "my \"trace\"");
  CHECK(doc["host_name"] == "host");
  CHECK(doc["cupti_version"] == 130001);
  CHECK(doc["cuprof"]["dropped_gpu_records"] == 5);
  CHECK(doc["cuprof"]["dropped_cpu_events"] == 6);
  CHECK(doc["cuprof"]["unmatched_gpu_records"] == 1);
  CHECK(doc["cuprof"]["cuda_status"] == "on");
  const json& edges = doc["cuprof"]["window_edges"];
  CHECK(edges["calls_without_gpu_work"] == json{{"kernel", 2}, {"memcpy", 0}, {"memset", 1}});
  CHECK(edges["gpu_work_without_call"] == json{{"kernel", 0}, {"memcpy", 3}, {"memset", 0}});
  CHECK(edges["launched_before"] == json{{"kernel", 7}, {"memcpy", 0}, {"memset", 0}});
  CHECK(edges["calls_running_at_end"] == 4);
  REQUIRE(doc["deviceProperties"].size() == 1);
  CHECK(doc["deviceProperties"][0]["name"] == "NVIDIA Test GPU");
  CHECK(doc["deviceProperties"][0]["numSms"] == 132);
  CHECK(std::regex_search(text, std::regex("^\\{\\s*\"schemaVersion\":\\s*1,")));  // first key

  // CPU process and threads.
  const json* m = find_meta(ev, "process_name", pid, 0);
  REQUIRE(m);
  CHECK((*m)["args"]["name"] == "proc");
  REQUIRE(find_meta(ev, "process_labels", pid, 0));
  CHECK((*find_meta(ev, "process_labels", pid, 0))["args"]["labels"] == "CPU");
  REQUIRE(find_meta(ev, "process_sort_index", pid, 0));
  CHECK((*find_meta(ev, "process_sort_index", pid, 0))["args"]["sort_index"] == pid);
  REQUIRE(find_meta(ev, "thread_name", pid, tid_main));
  CHECK((*find_meta(ev, "thread_name", pid, tid_main))["args"]["name"] == "thread 4242 (main)");
  REQUIRE(find_meta(ev, "thread_name", pid, tid_worker));
  CHECK((*find_meta(ev, "thread_name", pid, tid_worker))["args"]["name"] == "thread 4243 (proc)");
  REQUIRE(find_meta(ev, "thread_sort_index", pid, tid_worker));
  CHECK((*find_meta(ev, "thread_sort_index", pid, tid_worker))["args"]["sort_index"] == tid_worker);

  // GPU process and stream lanes.
  REQUIRE(find_meta(ev, "process_name", 0, 0));
  CHECK((*find_meta(ev, "process_labels", 0, 0))["args"]["labels"] == "GPU 0");
  CHECK((*find_meta(ev, "process_sort_index", 0, 0))["args"]["sort_index"] == 5000000);
  REQUIRE(find_meta(ev, "thread_name", 0, 7));
  CHECK((*find_meta(ev, "thread_name", 0, 7))["args"]["name"] == "stream 7");
  REQUIRE(find_meta(ev, "thread_name", 0, 9));
  CHECK((*find_meta(ev, "thread_name", 0, 9))["args"]["name"] == "stream 9");
  REQUIRE(find_meta(ev, "thread_name", 0, 1000007));
  CHECK((*find_meta(ev, "thread_name", 0, 1000007))["args"]["name"] == "stream 7 (sync)");
  REQUIRE(find_meta(ev, "thread_name", 0, 1000000));
  CHECK((*find_meta(ev, "thread_name", 0, 1000000))["args"]["name"] == "stream 0 (sync)");
  CHECK(find_meta(ev, "process_name", 1, 0) == nullptr);  // no GPU 1

  // CPU spans: user_annotation, External id = span id, ts/dur exact.
  const json* step = find_event(ev, "X", "ProfilerStep#5");
  REQUIRE(step);
  CHECK((*step)["cat"] == "user_annotation");
  CHECK((*step)["pid"] == pid);
  CHECK((*step)["tid"] == tid_main);
  CHECK(ns_of((*step)["ts"]) == std::int64_t(epoch + 1000 - base));
  CHECK(ns_of((*step)["dur"]) == 899000);
  CHECK((*step)["args"]["External id"] == 1);
  const json* linear = find_event(ev, "X", "linear");
  REQUIRE(linear);
  CHECK((*linear)["args"]["External id"] == 3);
  CHECK(std::regex_search(text, std::regex("\"ts\":\\s*500003[,}]")));  // linear's start, raw

  // Runtime and driver calls.
  const auto launches = find_events(ev, "X", "cudaLaunchKernel");
  REQUIRE(launches.size() == 2);
  const json& launch = *launches[0];
  CHECK(launch["cat"] == "cuda_runtime");
  CHECK(launch["args"]["External id"] == 3);  // linear
  CHECK(launch["args"]["correlation"] == 11);
  CHECK_FALSE(launch["args"].contains("cbid"));  // the name says it; no consumer reads it
  CHECK(launch["tid"] == tid_main);
  CHECK((*launches[1])["tid"] == tid_worker);
  CHECK((*launches[1])["args"]["External id"] == 4);  // worker
  const json* ex = find_event(ev, "X", "cuLaunchKernelEx");
  REQUIRE(ex);
  CHECK((*ex)["cat"] == "cuda_driver");
  CHECK((*ex)["args"]["External id"] == 2);  // forward
  const json* malloc_call = find_event(ev, "X", "cudaMalloc");
  REQUIRE(malloc_call);
  CHECK_FALSE((*malloc_call)["args"].contains("External id"));  // no scope open on its thread
  CHECK_FALSE((*malloc_call)["args"].contains("stream"));       // CPU events carry no stream (HTA)

  // Kernel and its launch parameters.
  const json* gemm = find_event(ev, "X", "gemm");
  REQUIRE(gemm);
  CHECK((*gemm)["cat"] == "kernel");
  CHECK((*gemm)["pid"] == 0);
  CHECK((*gemm)["tid"] == 7);
  CHECK(ns_of((*gemm)["ts"]) == std::int64_t(epoch + 20000 - base));
  CHECK(ns_of((*gemm)["dur"]) == 20000);
  const json& ka = (*gemm)["args"];
  CHECK(ka["External id"] == 3);
  CHECK(ka["device"] == 0);
  CHECK_FALSE(ka.contains("context"));  // one context per device: written only when there are several
  CHECK(ka["stream"] == 7);
  CHECK(ka["correlation"] == 11);
  CHECK(ka["grid"] == json::array({264, 1, 1}));
  CHECK(ka["block"] == json::array({256, 1, 1}));
  CHECK(ka["registers per thread"] == 64);
  CHECK(ka["shared memory"] == 16384);
  CHECK_FALSE(ka.contains("blocks per SM"));  // derived from grid and numSms; no consumer reads it
  CHECK_FALSE(ka.contains("warps per SM"));
  // 8 warps per block; limits: threads 8, registers 65536/(64*256) = 4, smem 14: 2 blocks resident of 64 warps.
  CHECK(ka["est. achieved occupancy %"] == 25);
  CHECK_FALSE(ka.contains("graph id"));
  const json* node = find_event(ev, "X", "graph_node_b");
  REQUIRE(node);
  CHECK((*node)["args"]["graph id"] == 2);
  CHECK((*node)["args"]["graph node id"] == 77);
  CHECK((*node)["args"]["correlation"] == 17);
  const json* orphan = find_event(ev, "X", "orphan");
  REQUIRE(orphan);
  CHECK_FALSE((*orphan)["args"].contains("External id"));

  // Memcpy, memset, syncs.
  const json* cp = find_event(ev, "X", "Memcpy DtoD (Device -> Device)");
  REQUIRE(cp);
  CHECK((*cp)["cat"] == "gpu_memcpy");
  CHECK((*cp)["args"]["bytes"] == 1048576);
  CHECK((*cp)["args"]["memory bandwidth (GB/s)"].get<double>() == doctest::Approx(1048.576));
  CHECK((*cp)["args"]["stream"] == 7);
  CHECK((*cp)["args"]["correlation"] == 12);
  const json* ms = find_event(ev, "X", "Memset (Device)");
  REQUIRE(ms);
  CHECK((*ms)["cat"] == "gpu_memset");
  CHECK((*ms)["args"]["bytes"] == 4);
  CHECK((*ms)["args"]["memory bandwidth (GB/s)"].get<double>() == doctest::Approx(0.04));
  const json* ss = find_event(ev, "X", "Stream Sync");
  REQUIRE(ss);
  CHECK((*ss)["cat"] == "cuda_sync");
  CHECK((*ss)["pid"] == 0);
  CHECK((*ss)["tid"] == 1000007);
  CHECK((*ss)["args"]["cuda_sync_kind"] == "Stream Sync");
  CHECK((*ss)["args"]["stream"] == 7);
  const json* cs = find_event(ev, "X", "Context Sync");
  REQUIRE(cs);
  CHECK((*cs)["tid"] == 1000000);
  CHECK((*cs)["args"]["cuda_sync_kind"] == "Context Sync");
  CHECK((*cs)["args"]["stream"] == -1);

  // GPU user annotations: 1 ns earlier, 2 ns longer than the work they cover; steps have none.
  const auto fwd_ann = find_events(ev, "X", "forward");
  const json* fwd_gpu = nullptr;
  for (const json* e : fwd_ann)
    if ((*e)["cat"] == "gpu_user_annotation") fwd_gpu = e;
  REQUIRE(fwd_gpu);
  CHECK((*fwd_gpu)["pid"] == 0);
  CHECK((*fwd_gpu)["tid"] == 7);
  CHECK(ns_of((*fwd_gpu)["ts"]) == std::int64_t(epoch + 20000 - 1 - base));
  CHECK(ns_of((*fwd_gpu)["dur"]) == 312000 - 20000 + 2);
  CHECK((*fwd_gpu)["args"]["External id"] == 2);
  for (const json& e : ev)
    if (e.value("cat", "") == "gpu_user_annotation") CHECK(e["name"] != "ProfilerStep#5");

  // Overhead on its own labelled process; clamped to the trace base, never negative.
  const json* oh = find_event(ev, "X", "Activity Buffer Request");
  REQUIRE(oh);
  CHECK((*oh)["cat"] == "overhead");
  CHECK((*oh)["pid"] == cuprof::overhead_pid);
  CHECK((*oh)["tid"] == 0);
  CHECK(ns_of((*oh)["dur"]) == 5500);
  REQUIRE(find_meta(ev, "process_name", cuprof::overhead_pid, 0));
  CHECK((*find_meta(ev, "process_name", cuprof::overhead_pid, 0))["args"]["name"] == "CUPTI Overhead");

  // Flows. A call's first GPU record: flow v2, "bind_id" after "dur" with
  // "flow_out" on the call's slice and "flow_in" on the record's, no s/f event.
  // The fixture has a graph launch (a v1 flow), so the bind_id is 2^32 + correlation.
  const std::uint64_t v2_base = std::uint64_t(1) << 32;
  std::map<std::uint64_t, const json*> s_by_id, f_by_id, out_by_id, in_by_id;
  for (const json& e : ev) {
    if (e["ph"] == "s") s_by_id[e["id"].get<std::uint64_t>()] = &e;
    if (e["ph"] == "f") f_by_id[e["id"].get<std::uint64_t>()] = &e;
    if (e.contains("flow_out")) out_by_id[e["bind_id"].get<std::uint64_t>()] = &e;
    if (e.contains("flow_in")) in_by_id[e["bind_id"].get<std::uint64_t>()] = &e;
  }
  // gemm, memcpy, memset, stream sync, nvjet, the first graph node, worker kernel, ctx sync
  CHECK(in_by_id.size() == 8);
  CHECK(out_by_id.size() == 8);
  for (std::uint64_t corr : {11, 12, 13, 14, 15, 17, 18, 19}) {
    CAPTURE(corr);
    REQUIRE(out_by_id.count(v2_base | corr));
    REQUIRE(in_by_id.count(v2_base | corr));
    CHECK((*out_by_id[v2_base | corr])["args"]["correlation"] == corr);
    CHECK((*in_by_id[v2_base | corr])["args"]["correlation"] == corr);
    CHECK(s_by_id.count(corr) == 0);  // no v1 pair beside the v2 flow
    CHECK(f_by_id.count(corr) == 0);
  }
  const json& launch_call = *out_by_id[v2_base | 11];
  CHECK(launch_call["ph"] == "X");
  CHECK(launch_call["name"] == "cudaLaunchKernel");
  CHECK(launch_call["pid"] == pid);
  CHECK(launch_call["tid"] == tid_main);
  CHECK(ns_of(launch_call["ts"]) == std::int64_t(epoch + 4000 - base));
  CHECK(launch_call["flow_out"] == true);
  CHECK_FALSE(launch_call.contains("flow_in"));
  const json& gemm_record = *in_by_id[v2_base | 11];
  CHECK(gemm_record["name"] == "gemm");
  CHECK(gemm_record["pid"] == 0);
  CHECK(gemm_record["tid"] == 7);
  CHECK(ns_of(gemm_record["ts"]) == std::int64_t(epoch + 20000 - base));
  CHECK(gemm_record["flow_in"] == true);
  CHECK_FALSE(gemm_record.contains("flow_out"));
  CHECK((*in_by_id[v2_base | 14])["tid"] == 1000007);  // the sync's own lane
  CHECK(out_by_id.count(v2_base | 16) == 0);           // the occupancy query has no flow
  CHECK(in_by_id.count(v2_base | 999) == 0);           // nor the orphan kernel
  // The members sit right after "dur", before "args", the rest of the event as before.
  const std::regex launch_line(R"(\{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":\d+,"tid":\d+,)"
                               R"("ts":[0-9.]+,"dur":[0-9.]+,"bind_id":4294967307,"flow_out":true,"args":\{)");
  const std::regex gemm_line(R"(\{"ph":"X","cat":"kernel","name":"gemm","pid":0,"tid":7,)"
                             R"("ts":[0-9.]+,"dur":[0-9.]+,"bind_id":4294967307,"flow_in":true,"args":\{)");
  CHECK(std::regex_search(text, launch_line));
  CHECK(std::regex_search(text, gemm_line));
  // The graph launch's two kernels: the first by v2, the second by a v1 s/f pair
  // (a slice carries one bind_id), id 1 << 32 | correlation, starting on the launch.
  CHECK((*in_by_id[v2_base | 17])["name"] == "graph_node_a");
  CHECK((*out_by_id[v2_base | 17])["name"] == "cudaGraphLaunch");
  CHECK(s_by_id.size() == 1);
  CHECK(f_by_id.size() == 1);
  const std::uint64_t second = std::uint64_t(1) << 32 | 17;
  REQUIRE(s_by_id.count(second));
  REQUIRE(f_by_id.count(second));
  CHECK((*s_by_id[second])["tid"] == tid_main);
  CHECK(ns_of((*s_by_id[second])["ts"]) == std::int64_t(epoch + 300000 - base));
  CHECK(ns_of((*f_by_id[second])["ts"]) == std::int64_t(epoch + 311500 - base));
  CHECK((*f_by_id[second])["bp"] == "e");
  const flow_test::arrows arrows(ev);
  CHECK(arrows.v2 == 8);
  CHECK(arrows.v1 == 1);
  CHECK(arrows.out_of(ev, 17).size() == 2);
}

TEST_CASE("chrome_trace_json: flow v2 for a call's first GPU record, bind_id its correlation id without v1 flows") {
  fixture f;
  // No graph launch: every arrow is v2, no s/f event, bind_id = correlation.
  cuprof::trace& t = f.t;
  t.gpu.erase(std::remove_if(t.gpu.begin(), t.gpu.end(),
                             [&](const cuprof::gpu_activity& g) { return t.names.str(g.name) == "graph_node_b"; }),
              t.gpu.end());
  cuprof::attribute(t);
  const std::string text = cuprof::chrome_trace_json(t);
  const json doc = check_contract(text);
  const json& ev = doc["traceEvents"];
  CHECK(text.find("\"ph\":\"s\"") == std::string::npos);
  CHECK(text.find("\"ph\":\"f\"") == std::string::npos);
  const flow_test::arrows arrows(ev);
  CHECK(arrows.v1 == 0);
  CHECK(arrows.v2 == 8);
  for (const flow_test::arrow& a : arrows.all) {
    CAPTURE(a.id);
    CHECK((*a.from)["args"]["correlation"] == a.id);
    CHECK((*a.to)["args"]["correlation"] == a.id);
  }
  CHECK(text.find(R"("dur":5,"bind_id":11,"flow_out":true,"args":{)") != std::string::npos);
  // A call without a flow, or whose record is lost, gets no member.
  for (const json& e : ev)
    if (e.value("ph", "") == "X" && (e["name"] == "cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags" ||
                                     e["name"] == "orphan" || e["name"] == "cudaMalloc"))
      CHECK_FALSE(e.contains("bind_id"));
}

TEST_CASE("chrome_trace_json: every category the writer emits is one the reader reads back") {
  namespace schema = cuprof::detail::schema;
  using cuprof::detail::event_category;
  fixture f;
  const std::string text = cuprof::chrome_trace_json(f.t);
  const json doc = json::parse(text);
  std::set<std::string> written;
  std::size_t complete = 0;
  for (const json& e : doc["traceEvents"]) {
    if (e.contains("cat")) written.insert(e["cat"].get<std::string>());
    complete += e["ph"] == "X";
  }
  // The fixture has an event of every category the writer knows.
  std::set<std::string> all;
  for (std::string_view cat : {schema::cat_user_annotation, schema::cat_cuda_runtime, schema::cat_cuda_driver, schema::cat_kernel,
                               schema::cat_gpu_memcpy, schema::cat_gpu_memset, schema::cat_cuda_sync,
                               schema::cat_gpu_user_annotation, schema::cat_overhead, schema::cat_flow})
    all.insert(std::string(cat));
  CHECK(written == all);
  for (const std::string& cat : written) {
    CAPTURE(cat);
    // Flow arrows are "s"/"f" events: the reader links work to calls by correlation instead.
    if (cat != schema::cat_flow) CHECK(cuprof::detail::category_of(cat) != event_category::skip);
  }
  const cuprof::loaded_trace back = cuprof::parse_trace(text, "fixture");
  CHECK(back.used == complete);  // no complete event skipped
  CHECK(back.t.meta.process_name == f.t.meta.process_name);
  CHECK(back.t.meta.threads.size() == f.t.meta.threads.size());
}

TEST_CASE("chrome_trace_json: a scope's arguments in its args; non-finite numbers as strings, no second External id") {
  cuprof::trace t;
  cuprof::cpu_span s;
  s.start_ns = 1000;
  s.end_ns = 2000;
  s.name = t.names.intern("scope");
  s.id = 7;
  s.arg_count = 6;
  const auto arg = [&](const char* key, cuprof::span_arg::type kind, double real, std::int64_t integer = 0,
                       const char* text = "") {
    cuprof::span_arg a;
    a.key = t.names.intern(key);
    a.kind = kind;
    a.real = real;
    a.integer = integer;
    a.text = t.names.intern(text);
    t.span_args.push_back(a);
  };
  using type = cuprof::span_arg::type;
  arg("big", type::integer, 0, std::numeric_limits<std::int64_t>::min());
  arg("tiny", type::real, 1e-300);
  arg("nan", type::real, std::nan(""));
  arg("inf", type::real, -HUGE_VAL);
  arg("External id", type::integer, 0, 99);
  arg("line\nbreak", type::text, 0, 0, "say \"hi\"");
  t.spans.push_back(s);
  t.meta.devices.push_back({});
  t.meta.devices[0].clock_rate_khz = 1980000;
  const std::string text = cuprof::chrome_trace_json(t);
  json doc;
  REQUIRE_NOTHROW(doc = json::parse(text));
  CHECK(doc["deviceProperties"][0]["clockRate"] == 1980000);
  CHECK(!doc["deviceProperties"][0].contains("memoryClockRate"));  // 0: unknown, left out
  for (const json& e : doc["traceEvents"]) {
    if (e["ph"] != "X") continue;
    const json& args = e["args"];
    CHECK(args.size() == 6);
    CHECK(args["External id"] == 7);
    CHECK(args["big"] == std::numeric_limits<std::int64_t>::min());
    CHECK(args["tiny"] == 1e-300);
    CHECK(args["nan"] == "NaN");
    CHECK(args["inf"] == "-Infinity");
    CHECK(args["line\nbreak"] == "say \"hi\"");
  }
}

TEST_CASE("chrome_trace_json: an event sync and a stream's wait carry Kineto's wait_on_* args, read back") {
  cuprof::trace t;
  const auto sync = [&](const char* name, std::uint8_t kind, std::uint32_t stream, std::uint32_t correlation) {
    cuprof::gpu_activity g;
    g.start_ns = 1000000 + correlation * 1000;
    g.end_ns = g.start_ns + 500;
    g.name = t.names.intern(name);
    g.kind = cuprof::gpu_kind::sync;
    g.subkind = kind;
    g.correlation = correlation;
    g.lane = t.add_gpu_lane({0, 1, stream});
    t.gpu.push_back(g);
    return &t.gpu.back();
  };
  t.gpu.reserve(4);
  t.set_wait(*sync("Stream Wait Event", 2, 14, 21), {13, 20, 1});  // stream 14 waits for the record on 13
  t.set_wait(*sync("Event Sync", 1, 0, 22), {13, 20, 1});
  t.set_wait(*sync("Stream Wait Event", 2, 14, 23), {});  // recorded before the window: not known
  sync("Stream Sync", 3, 13, 24);
  const std::string text = cuprof::chrome_trace_json(t);
  keep_trace("writer_event_waits.json", text);
  const json doc = check_contract(text);
  const json& ev = doc["traceEvents"];
  std::map<int, const json*> by_correlation;
  for (const json& e : ev)
    if (e.value("cat", "") == "cuda_sync") by_correlation[e["args"]["correlation"].get<int>()] = &e;
  REQUIRE(by_correlation.size() == 4);
  const json& wait = (*by_correlation[21])["args"];
  CHECK(wait["stream"] == 14);  // the stream that waits, as Kineto writes it
  CHECK(wait["wait_on_stream"] == 13);
  CHECK(wait["wait_on_cuda_event_record_corr_id"] == 20);
  CHECK(wait["wait_on_cuda_event_id"] == 1);
  CHECK((*by_correlation[22])["args"]["wait_on_stream"] == 13);
  CHECK((*by_correlation[22])["args"]["wait_on_cuda_event_record_corr_id"] == 20);
  const json& unknown = (*by_correlation[23])["args"];
  CHECK(unknown["wait_on_stream"] == -1);
  CHECK(unknown["wait_on_cuda_event_record_corr_id"] == -1);
  CHECK(unknown["wait_on_cuda_event_id"] == -1);
  CHECK_FALSE((*by_correlation[24])["args"].contains("wait_on_stream"));  // no event: none of them

  const cuprof::loaded_trace back = cuprof::parse_trace(text, "event waits");
  std::map<std::uint32_t, const cuprof::gpu_activity*> read;
  for (const cuprof::gpu_activity& g : back.t.gpu) read[g.correlation] = &g;
  REQUIRE(read.size() == 4);
  const cuprof::event_wait* w = back.t.wait_of(*read[21]);
  REQUIRE(w);
  CHECK(w->stream == 13);
  CHECK(w->record_correlation == 20);
  CHECK(w->event == 1);
  REQUIRE(back.t.wait_of(*read[23]));
  CHECK(back.t.wait_of(*read[23])->stream == cuprof::no_index);
  CHECK(back.t.wait_of(*read[23])->record_correlation == cuprof::no_index);
  CHECK_FALSE(back.t.wait_of(*read[24]));
  CHECK(cuprof::chrome_trace_json(back.t).find("\"wait_on_cuda_event_record_corr_id\":20") != std::string::npos);
}

TEST_CASE("chrome_trace_json: an empty trace is a valid document") {
  cuprof::trace t;
  const std::string text = cuprof::chrome_trace_json(t);
  json doc;
  REQUIRE_NOTHROW(doc = json::parse(text));
  CHECK(doc["schemaVersion"] == 1);
  CHECK(doc["baseTimeNanoseconds"] == 0);
  CHECK(doc["traceName"] == "cuprof");
  // Only the CPU process metadata.
  for (const json& e : doc["traceEvents"]) CHECK(e["ph"] == "M");
}

TEST_CASE("chrome_trace_json: the ranks of a job share one base; a lone process keeps whole seconds") {
  constexpr std::uint64_t day = 86400ull * 1000000000ull;
  // Two ranks whose windows start 1.2 s apart, across a second boundary.
  const std::uint64_t start0 = 20000 * day + 3600ull * 1000000000ull + 900000000ull;
  const std::uint64_t start1 = start0 + 1200000000ull;
  auto written = [](std::uint64_t start, int rank, int world) {
    cuprof::trace t;
    t.meta.window_start_ns = start;
    t.meta.rank = rank;
    t.meta.world_size = world;
    cuprof::cpu_span s;
    s.start_ns = start + 1000;
    s.end_ns = start + 5000;
    s.name = t.names.intern("step");
    t.spans.push_back(s);
    return json::parse(cuprof::chrome_trace_json(t));
  };
  const json r0 = written(start0, 0, 2), r1 = written(start1, 1, 2);
  CHECK(r0["baseTimeNanoseconds"].get<std::uint64_t>() == 20000 * day);
  CHECK(r1["baseTimeNanoseconds"] == r0["baseTimeNanoseconds"]);
  // So the gap between the ranks' first events is the gap between their ts.
  const auto first_ts = [](const json& doc) {
    for (const json& e : doc["traceEvents"])
      if (e["ph"] == "X") return e["ts"].get<double>();
    return -1.0;
  };
  CHECK(first_ts(r1) - first_ts(r0) == doctest::Approx(1200000.0));
  // One process alone: the whole second below its first event, as Kineto rounds.
  const json alone = written(start0, 0, 1);
  CHECK(alone["baseTimeNanoseconds"].get<std::uint64_t>() == start0 - 900000000ull);
}

TEST_CASE("names with quotes, backslashes, control characters, invalid UTF-8 and 64 KiB") {
  struct named {
    std::string raw, expected;
  };
  const std::string fffd = "\xEF\xBF\xBD";
  const std::vector<named> names = {
      {"quote\"d", "quote\"d"},
      {"back\\slash", "back\\slash"},
      {"ctl\x01\n\t\r\x1f end", "ctl\x01\n\t\r\x1f end"},
      {"lone \xFF byte", "lone " + fffd + " byte"},
      {"truncated \xE2\x82", "truncated " + fffd + fffd},
      {"overlong \xC0\x80", "overlong " + fffd + fffd},
      {"surrogate \xED\xA0\x80", "surrogate " + fffd + fffd + fffd},
      {"too big \xF4\x90\x80\x80", "too big " + fffd + fffd + fffd + fffd},
      {"valid caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80", "valid caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"},
      {std::string(65536, 'n') + "\xF0\x9F\x98\x80", std::string(65536, 'n') + "\xF0\x9F\x98\x80"},
      {std::string("nul\0in", 6), std::string("nul\0in", 6)},
  };
  cuprof::trace t;
  t.meta.pid = 7;
  t.meta.process_name = "proc\"ess\x02\xFF";
  t.meta.host_name = "h\\o\nst";
  t.meta.threads = {{7, "th\"read\t\xC0"}};
  t.meta.window_start_ns = epoch;
  cuprof::device_info d;
  d.name = "dev\x01\xFE";
  t.meta.devices = {d};
  t.meta.cuda_status = "off: \"no\" driver\n";
  std::uint64_t at = epoch;
  for (const named& n : names) {
    cuprof::cpu_span s;
    s.start_ns = at;
    s.end_ns = at + 10;
    at += 100;
    s.name = t.names.intern(n.raw);
    s.tid = 7;
    t.spans.push_back(s);
  }
  const std::string text = cuprof::chrome_trace_json(t, "name\x7f\x80");
  const json doc = check_contract(text);
  std::vector<std::string> got;
  for (const json& e : doc["traceEvents"])
    if (e["ph"] == "X") got.push_back(e["name"]);
  REQUIRE(got.size() == names.size());
  for (std::size_t i = 0; i < names.size(); ++i) {
    CAPTURE(i);
    CHECK(got[i] == names[i].expected);
  }
  // Characters beyond the BMP stay raw: no surrogate escapes (Perfetto rejects them).
  CHECK(text.find("\xF0\x9F\x98\x80") != std::string::npos);
  CHECK(text.find("\\ud83d") == std::string::npos);
  CHECK(text.find("\\uD83D") == std::string::npos);
  CHECK((*find_meta(doc["traceEvents"], "process_name", 7, 0))["args"]["name"] == "proc\"ess\x02" + fffd);
  CHECK((*find_meta(doc["traceEvents"], "thread_name", 7, 7))["args"]["name"] == "thread 7 (th\"read\t" + fffd + ")");
  CHECK(doc["host_name"] == "h\\o\nst");
  CHECK(doc["deviceProperties"][0]["name"] == "dev\x01" + fffd);
  CHECK(doc["cuprof"]["cuda_status"] == "off: \"no\" driver\n");
  CHECK(doc["traceName"] == "name\x7f" + fffd);
}

TEST_CASE("traces written on a GPU (tests/data/gpu) satisfy the contract") {
  const std::vector<fs::path> files = gpu_fixtures();
  REQUIRE(files.size() >= 6);
  for (const fs::path& file : files) {
    CAPTURE(file.string());
    const std::string text = slurp(file);
    const json doc = check_contract(text);
    const json& ev = doc["traceEvents"];
    const flow_test::arrows arrows(ev);  // v1 (recorded before flow v2) or v2
    std::size_t kernels = 0;
    for (const json& e : ev) {
      if (e["ph"] != "X") continue;
      const std::string cat = e["cat"];
      if (cat == "cuda_runtime" || cat == "cuda_driver") {
        const std::string name = e["name"];
        CHECK_MESSAGE(!std::regex_search(name, std::regex("_v[0-9]+$")), name);
        CHECK(name[0] != '_');
        CHECK(e["pid"] == doc["traceEvents"][0]["pid"]);
        CHECK(e["args"].contains("correlation"));
      }
      if (cat == "kernel") {
        ++kernels;
        const json& a = e["args"];
        // Recorded by an earlier cuprof, these also carry "blocks per SM", "warps per SM", a "shared memory" of 0.
        for (const char* key :
             {"device", "stream", "correlation", "grid", "block", "registers per thread", "est. achieved occupancy %"})
          CHECK_MESSAGE(a.contains(key), key);
        CHECK(e["pid"] == a["device"]);
        CHECK(e["tid"] == a["stream"]);
      }
      if (cat == "kernel" || cat == "gpu_memcpy" || cat == "gpu_memset") {
        // Every launch, copy and memset is linked to its call by a flow.
        const std::uint64_t corr = e["args"]["correlation"];
        CAPTURE(corr);
        const flow_test::arrow* in = arrows.into(e);
        REQUIRE(in);
        CHECK((*in->to)["ts"] == e["ts"]);
        std::size_t from_call = 0;
        for (const flow_test::arrow* a : arrows.out_of(ev, corr)) from_call += a == in;
        CHECK(from_call == 1);
        CHECK(e["args"].contains("External id"));  // the examples launch everything inside scopes
      }
    }
    CHECK(kernels > 0);
    CHECK(doc["cuprof"]["cuda_status"] == "on");
    CHECK(doc["cuprof"]["dropped_gpu_records"] == 0);
  }
}

TEST_CASE("trace_reader reads the writer's output back to the same table (analysis_reader.cpp covers the reader itself)") {
  fixture f;
  const cuprof::loaded_trace back = cuprof::parse_trace(cuprof::chrome_trace_json(f.t), "fixture");
  CHECK(back.format == cuprof::trace_format::cuprof);
  CHECK(back.base_ns == base);
  CHECK(back.unmatched_annotations == 0);
  for (const char* key : {"cuda_time_total", "cpu_time_total", "count"}) {
    CAPTURE(key);
    CHECK(cuprof::key_averages(back.t).table(key, -1) == cuprof::key_averages(f.t).table(key, -1));
  }
  CHECK(back.t.spans.size() == f.t.spans.size());
  CHECK(back.t.api_calls.size() == f.t.api_calls.size());
  CHECK(back.t.gpu.size() == f.t.gpu.size());
}

}  // TEST_SUITE("output_writer")
