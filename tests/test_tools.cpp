// The trace reader, kernel-name decoding, distributions, insights, diffs and the
// `cuprof` command (run in process). Inputs: the H200 traces in
// tests/fixtures/gpu/ and the torch.profiler traces with torch's own tables in
// tools/testdata/kineto/ (recorded with tests/gpu/torch_*.py, see its README).
#include <cuprof/cuprof.hpp>
#include <cuprof/analysis.hpp>
#include <cuprof/model/stats.hpp>

#include "../tools/cli/cli.hpp"
#include "trace_reader.hpp"  // the reader's internals (src/analysis)

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

namespace fs = std::filesystem;

namespace {

std::string source_dir() {
#ifdef CUPROF_TEST_SOURCE_DIR
  return CUPROF_TEST_SOURCE_DIR;
#else
  return ".";
#endif
}

std::string fixture(const std::string& name) { return source_dir() + "/tests/fixtures/gpu/" + name; }
std::string kineto(const std::string& name) { return source_dir() + "/tools/testdata/kineto/" + name; }

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "cannot open " << path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  REQUIRE(out.good());
}

void write_gzip(const std::string& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  REQUIRE(gzwrite(f, bytes.data(), unsigned(bytes.size())) == int(bytes.size()));
  REQUIRE(gzclose(f) == Z_OK);
}

struct temp_dir {
  fs::path path;
  temp_dir() {
    path = fs::temp_directory_path() / ("cuprof_test_tools_" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

struct cli_run {
  int rc = -1;
  std::string out, err;
};

cli_run cli(std::vector<std::string> args) {
  args.insert(args.begin(), "cuprof");
  cli_run r;
  r.rc = cuprof::cli::run(args, r.out, r.err);
  return r;
}

std::size_t lines(const std::string& s) {
  std::size_t n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

const char* const fixtures[] = {"matmul_add_64.json", "matmul_add_4096.json", "linear_addmm.json",
                                "mlp_unfused.json",   "mlp_fused.json",       "occupancy.json"};

}  // namespace

// ---- kernel names ---------------------------------------------------------------

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
  const cuprof::kernel_name_info a =
      cuprof::decode_kernel_name("ampere_bf16_s16816gemm_bf16_128x256_ldg8_f2f_stages_64x3_nn");
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
  const cuprof::kernel_name_info gate =
      cuprof::decode_kernel_name("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_tn");
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
      "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "ampere_bf16_s16816gemm_bf16_128x256_ldg8_f2f_stages_64x3_nn",
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

TEST_CASE("table: --stats columns give each row's per-call distribution") {
  const cuprof::loaded_trace lt = cuprof::read_trace_file(fixture("matmul_add_4096.json"));
  const cuprof::event_averages avg = cuprof::key_averages(lt.t);
  const cuprof::event_average* gemm =
      avg.find("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", cuprof::row_kind::gpu_work);
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

// ---- the reader -----------------------------------------------------------------

TEST_CASE("reader: a torch.profiler trace gives torch's own table, character for character") {
  for (const std::string size : {"64", "4096"}) {
    CAPTURE(size);
    const std::string base = std::string("torch_matmul_add_") + size;
    const cuprof::loaded_trace lt = cuprof::read_trace_file(kineto(base + ".json"));
    CHECK(lt.format == cuprof::trace_format::torch);
    CHECK(lt.unmatched_annotations == 0);
    const std::string ours = cuprof::key_averages(lt.t).table("cuda_time_total", 100);
    CHECK(ours == slurp(kineto(base + ".txt")));
    // The same through the command.
    const cli_run r = cli({"table", kineto(base + ".json"), "--sort", "cuda_time_total"});
    CHECK(r.rc == 0);
    CHECK(r.out == slurp(kineto(base + ".txt")));
    CHECK(r.err.empty());
  }
}

TEST_CASE("reader: rows of the torch tables, by name, count and times") {
  // The 4096 case row by row, as torch printed them (kineto-samples/torch_matmul_add_4096.txt).
  const cuprof::loaded_trace lt = cuprof::read_trace_file(kineto("torch_matmul_add_4096.json"));
  const cuprof::event_averages avg = cuprof::key_averages(lt.t);
  struct expected {
    const char* name;
    cuprof::row_kind kind;
    std::uint64_t self_cpu, cpu_total, self_cuda, cuda_total, count;
  };
  const expected rows[] = {
      {"matmul_add", cuprof::row_kind::gpu_annotation, 0, 0, 595328, 595328, 3},
      {"ProfilerStep*", cuprof::row_kind::cpu_scope, 41279, 232967, 0, 580896, 3},
      {"matmul_add", cuprof::row_kind::cpu_scope, 42861, 191688, 0, 580896, 3},
      {"aten::matmul", cuprof::row_kind::cpu_scope, 5917, 113787, 0, 513440, 3},
      {"aten::mm", cuprof::row_kind::cpu_scope, 74072, 107870, 513440, 513440, 3},
      {"nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", cuprof::row_kind::gpu_work, 0, 0, 511072, 511072, 3},
      {"aten::add", cuprof::row_kind::cpu_scope, 20154, 35040, 67456, 67456, 3},
      {"Memset (Device)", cuprof::row_kind::gpu_work, 0, 0, 2368, 2368, 3},
      {"cudaMemsetAsync", cuprof::row_kind::cuda_api, 15207, 15207, 0, 0, 3},
      {"cuLaunchKernelEx", cuprof::row_kind::cuda_api, 18591, 18591, 0, 0, 3},
      {"cudaLaunchKernel", cuprof::row_kind::cuda_api, 14886, 14886, 0, 0, 3},
      {"cudaDeviceSynchronize", cuprof::row_kind::cuda_api, 397362, 397362, 0, 0, 1},
  };
  for (const expected& e : rows) {
    CAPTURE(e.name);
    const cuprof::event_average* r = avg.find(e.name, e.kind);
    REQUIRE(r != nullptr);
    CHECK(r->self_cpu_ns == e.self_cpu);
    CHECK(r->cpu_total_ns == e.cpu_total);
    CHECK(r->self_cuda_ns == e.self_cuda);
    CHECK(r->cuda_total_ns == e.cuda_total);
    CHECK(r->count == e.count);
  }
  CHECK(avg.rows().size() == 13);
  CHECK(avg.self_cpu_time_total_ns() == 630329);
  CHECK(avg.self_cuda_time_total_ns() == 580896);
}

TEST_CASE("reader: cuprof traces; the file's GPU annotations equal the ones attribution derives") {
  for (const std::string name : fixtures) {
    CAPTURE(name);
    cuprof::loaded_trace lt = cuprof::read_trace_file(fixture(name));
    CHECK(lt.format == cuprof::trace_format::cuprof);
    CHECK(lt.base_ns % 1000000000ull == 0);
    CHECK(lt.t.meta.pid != 0);
    CHECK_FALSE(lt.t.meta.devices.empty());
    CHECK(lt.unmatched_annotations == 0);
    CHECK(lt.t.meta.unmatched_gpu_records == 0);
    for (const cuprof::gpu_activity& g : lt.t.gpu)
      if (g.kind != cuprof::gpu_kind::sync) CHECK(cuprof::launching_span(lt.t, g) == lt.t.api_calls[g.api].parent);
    const std::vector<cuprof::gpu_annotation> from_file = lt.t.gpu_annotations;
    lt.t.gpu_launch_spans.clear();  // attribution by thread and time only
    const std::vector<cuprof::gpu_annotation> derived = cuprof::derive_gpu_annotations(lt.t);
    REQUIRE(from_file.size() == derived.size());
    for (std::size_t i = 0; i < derived.size(); ++i) {
      CHECK(from_file[i].span == derived[i].span);
      CHECK(from_file[i].start_ns == derived[i].start_ns);
      CHECK(from_file[i].end_ns == derived[i].end_ns);
    }
  }
}

TEST_CASE("reader: a trace read, written again and read back gives the same table and the same flow arrows") {
  temp_dir dir;
  // Flow starts in a cuprof trace: one per GPU record a call launched or waited on, syncs
  // included; v1 "s" events (the GPU fixtures) or v2 "flow_out" members (the writer's now).
  const auto flow_starts = [](const std::string& text) {
    std::size_t n = 0;
    for (std::size_t at = text.find("\"ph\":"); at != std::string::npos; at = text.find("\"ph\":", at + 1)) {
      const std::size_t value = text.find_first_not_of(' ', at + 5);
      n += text.compare(value, 3, "\"s\"") == 0;
    }
    for (std::size_t at = text.find("\"flow_out\":"); at != std::string::npos; at = text.find("\"flow_out\":", at + 1))
      n += text.compare(text.find_first_not_of(' ', at + 11), 4, "true") == 0;
    return n;
  };
  // Every GPU fixture; written again, each is kept in CUPROF_TEST_KEEP_TRACES (as rewritten_NAME,
  // and lean as rewritten_lean_NAME) for validate_test_traces and for scripts/test-hta: today's
  // writer on work recorded on a GPU.
  const char* keep = std::getenv("CUPROF_TEST_KEEP_TRACES");
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(fixture("")))
    if (entry.path().extension() == ".json") names.push_back(entry.path().filename().string());
  REQUIRE(names.size() >= 6);
  for (const std::string& name : names) {
    CAPTURE(name);
    const cuprof::loaded_trace first = cuprof::read_trace_file(fixture(name));
    const std::string path = dir.file("again_" + name);
    cuprof::export_chrome_trace(first.t, path);
    const cuprof::loaded_trace second = cuprof::read_trace_file(path);
    CHECK(cuprof::key_averages(second.t).table("cuda_time_total", -1) ==
          cuprof::key_averages(first.t).table("cuda_time_total", -1));
    CHECK(second.t.overhead.size() == first.t.overhead.size());
    CHECK(flow_starts(cuprof::chrome_trace_json(first.t)) == flow_starts(slurp(fixture(name))));
    // Lean: the same table, CPU and GPU, and the same arrows.
    const std::string lean_path = dir.file("lean_" + name);
    cuprof::export_chrome_trace(first.t, lean_path, {cuprof::trace_detail::lean});
    const cuprof::loaded_trace lean = cuprof::read_trace_file(lean_path);
    for (const char* key : {"cuda_time_total", "cpu_time_total", "self_cuda_time_total"})
      CHECK(cuprof::key_averages(lean.t).table(key, -1) == cuprof::key_averages(first.t).table(key, -1));
    CHECK(flow_starts(slurp(lean_path)) == flow_starts(slurp(path)));
    CHECK(std::filesystem::file_size(lean_path) < std::filesystem::file_size(path));
    if (keep && *keep) {
      std::filesystem::create_directories(keep);
      std::filesystem::copy_file(path, std::filesystem::path(keep) / ("rewritten_" + name),
                                 std::filesystem::copy_options::overwrite_existing);
      std::filesystem::copy_file(lean_path, std::filesystem::path(keep) / ("rewritten_lean_" + name),
                                 std::filesystem::copy_options::overwrite_existing);
    }
  }
}

// A large trace's events are read in pieces on several threads
// (read_raw_trace_in_pieces); here with tiny pieces, so that small files cut too.
std::optional<cuprof::loaded_trace> read_in_pieces(const std::string& text, std::size_t piece_bytes) {
  std::string padded = text;
  cuprof::detail::pad_for_json(padded);
  std::optional<cuprof::detail::raw_trace> raw = cuprof::detail::read_raw_trace_in_pieces(padded, "t", {}, piece_bytes, 3);
  if (!raw) return std::nullopt;
  cuprof::loaded_trace out;
  out.source = "t";
  cuprof::detail::build_trace(*raw, out);
  return out;
}

TEST_CASE("reader: a trace read in pieces on several threads is the trace read serially") {
  std::vector<std::string> files;
  for (const char* name : {"matmul_add_4096.json", "mlp_fused.json", "occupancy.json", "linear_addmm.json"}) files.push_back(fixture(name));
  for (const char* name : {"torch_geglu_mlp.json", "torch_geglu_mlp_compiled.json", "torch_matmul_add_64.json"}) files.push_back(kineto(name));
  for (const std::string& file : files) {
    CAPTURE(file);
    const std::string text = slurp(file);
    const cuprof::loaded_trace serial = cuprof::parse_trace(text, "t");
    for (const std::size_t piece_bytes : {std::size_t(1), std::size_t(700), std::size_t(5000)}) {
      CAPTURE(piece_bytes);
      const std::optional<cuprof::loaded_trace> pieces = read_in_pieces(text, piece_bytes);
      REQUIRE(pieces);
      CHECK(cuprof::chrome_trace_json(pieces->t) == cuprof::chrome_trace_json(serial.t));
      CHECK(cuprof::key_averages(pieces->t).table("cuda_time_total", -1) == cuprof::key_averages(serial.t).table("cuda_time_total", -1));
      CHECK(pieces->events == serial.events);
      CHECK(pieces->used == serial.used);
      CHECK(pieces->format == serial.format);
      CHECK(pieces->unmatched_annotations == serial.unmatched_annotations);
      CHECK(pieces->t.names.size() == serial.t.names.size());
    }
  }
  // What looks like a place between events inside a string, or inside an
  // event, is no place to cut: the pieces do not parse, and the trace is read serially.
  const std::string head = R"({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": ")";
  const std::string tail = R"(", "pid": 1, "tid": 1, "ts": 1, "dur": 2}, {"ph": "X", "cat": "cpu_op", "name": "b", "pid": 1, "tid": 1, "ts": 1.5, "dur": 1}]})";
  CHECK(!read_in_pieces(head + "a}, {x" + tail, 1));
  const std::string nested = R"({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 2, "args": {"l": [{"k": 1}, {"k": 2}]}}]})";
  CHECK(!read_in_pieces(nested, 1));
  // An event in error: its piece fails, and the serial reader says what and where.
  std::string bad = slurp(kineto("torch_matmul_add_64.json"));
  bad.insert(bad.find("\"dur\": ", bad.rfind("\"cat\": \"kernel\"")) + 7, "-");
  CHECK_THROWS_WITH_AS((void)cuprof::parse_trace(bad, "t"), doctest::Contains("\"dur\" is negative"), cuprof::error);
  CHECK(!read_in_pieces(bad, 1));
}

TEST_CASE("reader: gzip-compressed traces, and the JSON Array Format") {
  temp_dir dir;
  const std::string json = slurp(kineto("torch_matmul_add_64.json"));
  write_gzip(dir.file("t.json.gz"), json);
  const cuprof::loaded_trace gz = cuprof::read_trace_file(dir.file("t.json.gz"));
  CHECK(cuprof::key_averages(gz.t).table("cuda_time_total", 100) == slurp(kineto("torch_matmul_add_64.txt")));
  // gzip data under another name is still recognised by its magic bytes.
  write_gzip(dir.file("t.json"), json);
  CHECK(cuprof::read_trace_file(dir.file("t.json")).t.gpu.size() == gz.t.gpu.size());
  // Two concatenated gzip members read as one stream.
  write_gzip(dir.file("a.gz"), json.substr(0, 1000));
  write_gzip(dir.file("b.gz"), json.substr(1000));
  write_file(dir.file("ab.json.gz"), slurp(dir.file("a.gz")) + slurp(dir.file("b.gz")));
  CHECK(cuprof::read_trace_file(dir.file("ab.json.gz")).t.gpu.size() == gz.t.gpu.size());

  const cuprof::loaded_trace arr = cuprof::parse_trace(
      R"([{"ph": "X", "cat": "user_annotation", "name": "step", "pid": 1, "tid": 1, "ts": 10, "dur": 5},
          {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 11, "dur": 1,
           "args": {"correlation": 3}},
          {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 12.5, "dur": 0.25,
           "args": {"correlation": 3, "stream": 7}}])",
      "array");
  REQUIRE(arr.t.gpu.size() == 1);
  // Older Kineto traces: capitalised categories and "external id".
  const cuprof::loaded_trace old = cuprof::parse_trace(
      R"({"traceEvents": [{"ph": "X", "cat": "Operator", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 5,
                           "args": {"External id": 4}},
                          {"ph": "X", "cat": "Runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 11, "dur": 1,
                           "args": {"correlation": 3, "external id": 4}},
                          {"ph": "X", "cat": "Kernel", "name": "k", "pid": 0, "tid": 7, "ts": 30, "dur": 2,
                           "args": {"correlation": 3, "external id": 4}}]})",
      "old");
  REQUIRE(old.t.gpu.size() == 1);
  CHECK(old.t.gpu_launch_spans == std::vector<std::uint32_t>{0});
  CHECK(cuprof::key_averages(old.t).find("aten::mm", cuprof::row_kind::cpu_scope)->self_cuda_ns == 2000);
  CHECK(arr.t.gpu[0].start_ns == 12500);
  CHECK(arr.t.gpu[0].end_ns == 12750);
  CHECK(cuprof::launching_span(arr.t, arr.t.gpu[0]) == 0);  // no External id: by the call's nesting
}

TEST_CASE("reader: timestamps convert from their decimal text without rounding error") {
  std::int64_t ns = 0;
  CHECK(cuprof::detail::us_to_ns("4448316261137.712", ns));
  CHECK(ns == 4448316261137712ll);
  CHECK(cuprof::detail::us_to_ns("1.5", ns));
  CHECK(ns == 1500);
  CHECK(cuprof::detail::us_to_ns("0.0004", ns));
  CHECK(ns == 0);
  CHECK(cuprof::detail::us_to_ns("0.0005", ns));
  CHECK(ns == 1);
  CHECK(cuprof::detail::us_to_ns("-2", ns));
  CHECK(ns == -2000);
  CHECK(cuprof::detail::us_to_ns("1.5e3", ns));
  CHECK(ns == 1500000);
  CHECK_FALSE(cuprof::detail::us_to_ns("1e300", ns));
  CHECK_FALSE(cuprof::detail::us_to_ns("99999999999999999999", ns));
}

TEST_CASE("reader: malformed input throws cuprof::error with the place; nothing else escapes") {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"", "empty input"},
      {"   ", "empty input"},
      {"hello", "expected a JSON object"},
      {"{}", "no \"traceEvents\""},
      {"{\"traceEvents\": 5}", "\"traceEvents\" is a number, expected an array"},
      {"{\"traceEvents\": [", "unexpected end of input"},
      {"{\"traceEvents\": [1]}", "traceEvents[0] is a number, expected an object"},
      {"{\"traceEvents\": []} x", "unexpected data after the end"},
      {"{\"traceEvents\": [], }", "expected a member (\"name\": value), ',' or '}', found '}'"},
      {"{\"traceEvents\": [{\"ph\" \"X\"}]}", "expected a member (\"name\": value), ',' or '}', found '\"'"},
      {"{\"traceEvents\": [{} {}]}", "expected a value, ',' or ']', found '{'"},
      {"{\"traceEvents\": [{\"ph\": 1}]}", "\"ph\" is a number, expected a string"},
      {R"({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": "1", "dur": 1, "pid": 0, "tid": 7}]})",
       "\"ts\" is a string, expected a number"},
      {R"({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "pid": 0, "tid": 7}]})", "has no \"dur\""},
      {R"({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1, "pid": "GPU", "tid": 7}]})",
       "\"pid\" is not an integer"},
      {R"({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1, "pid": 0, "tid": 7, "args": []}]})",
       "\"args\" is an array"},
      {R"({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1, "pid": 0, "tid": 7,
          "args": {"correlation": "x"}}]})",
       "args \"correlation\" is a string"},
      {R"({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1, "pid": 0, "tid": 7,
          "args": {"grid": [1, 2]}}]})",
       "args \"grid\" is not an array of 3 integers"},
      {R"({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1, "pid": 70000, "tid": 7}]})",
       "device is 70000, expected a device number (0 to 65535)"},
      {R"({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1, "pid": 0, "tid": 7,
          "args": {"device": -1}}]})",
       "device is -1, expected a device number"},
      {R"({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "k", "ts": -5, "dur": 1, "pid": 0, "tid": 7}]})",
       "before the epoch"},
      {R"({"baseTimeNanoseconds": "soon", "traceEvents": []})", "\"baseTimeNanoseconds\" is not"},
      {R"({"deviceProperties": {}, "traceEvents": []})", "\"deviceProperties\" is an object"},
      {R"({"traceEvents": [{"ph": "X", "name": "bad\q"}]})", "invalid escape"},
      {R"({"traceEvents": [{"ph": "X", "name": "\u12"}]})", "invalid \\u escape"},
      {R"({"traceEvents": [{"ph": 01}]})", "invalid number"},
      {R"({"traceEvents": [-]})", "invalid number"},
      {R"({"traceEvents": [tru]})", "expected a value"},
      {std::string("{\"traceEvents\": ") + std::string(100, '['), "nesting deeper than"},
  };
  for (const auto& b : bad) {
    CAPTURE(b.first);
    try {
      (void)cuprof::parse_trace(b.first, "input.json");
      FAIL("no error for this input");
    } catch (const cuprof::error& e) {
      const std::string what = e.what();
      CHECK(what.rfind("cuprof: input.json", 0) == 0);
      CHECK_MESSAGE(what.find(b.second) != std::string::npos, what);
    }
  }
}

TEST_CASE("reader: calls share a kind per name and cbid; a file with more than 65536 kinds is refused") {
  const auto calls = [](std::size_t names, std::size_t repeats) {
    std::string json = "{\"traceEvents\": [";
    for (std::size_t r = 0; r < repeats; ++r)
      for (std::size_t i = 0; i < names; ++i)
        json += std::string(r + i ? "," : "") + R"({"ph": "X", "cat": "cuda_runtime", "name": "cudaCall)" +
                std::to_string(i) + R"(", "ts": 1, "dur": 1, "pid": 1, "tid": 1, "args": {"cbid": 7}})";
    return json + "]}";
  };
  const cuprof::loaded_trace few = cuprof::parse_trace(calls(3, 4), "few.json");
  CHECK(few.t.api_calls.size() == 12);
  CHECK(few.t.call_kinds.size() == 3);
  CHECK(few.t.kind_of(few.t.api_calls[0]).cbid == 7);
  CHECK(cuprof::parse_trace(calls(65536, 1), "most.json").t.call_kinds.size() == 65536);
  try {
    (void)cuprof::parse_trace(calls(65537, 1), "many.json");
    FAIL("no error for 65537 kinds of call");
  } catch (const cuprof::error& e) {
    CHECK(std::string(e.what()).find("many.json: more than 65536 different CUDA calls") != std::string::npos);
  }
}

TEST_CASE("reader: every truncation and many corruptions of a real trace either read or throw cuprof::error") {
  for (const char* name : {"matmul_add_64.json", "occupancy.json"}) {
    const std::string json = slurp(fixture(name));
    std::size_t errors = 0, read = 0;
    for (std::size_t len = 0; len < json.size(); len += 13) {
      try {
        (void)cuprof::parse_trace(std::string_view(json).substr(0, len), name);
        ++read;
      } catch (const cuprof::error&) {
        ++errors;
      }
    }
    CHECK(read == 0);  // the document is only complete at its last byte
    CHECK(errors > 0);
    std::uint64_t state = 42;
    std::size_t corrupted_reads = 0;
    for (int i = 0; i < 1500; ++i) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      std::string copy = json;
      const std::size_t at = std::size_t(state >> 33) % copy.size();
      static const char replacements[] = {'"', '{', '}', '[', ']', ',', ':', '-', '0', '9', '.', 'e', '\\', '\0', 'x'};
      copy[at] = replacements[(state >> 20) % sizeof replacements];
      try {
        (void)cuprof::key_averages(cuprof::parse_trace(copy, name).t).table("cuda_time_total", -1);
        ++corrupted_reads;
      } catch (const cuprof::error&) {
      }
    }
    CHECK(corrupted_reads > 0);  // many single-byte changes (inside names, digits) still read
  }
}

TEST_CASE("reader: files that are not traces") {
  temp_dir dir;
  const auto fails = [](const std::string& path, const std::string& says) {
    CAPTURE(path);
    try {
      (void)cuprof::read_trace_file(path);
      FAIL("no error");
    } catch (const cuprof::error& e) {
      CHECK_MESSAGE(std::string(e.what()).find(says) != std::string::npos, e.what());
    }
  };
  fails(dir.file("missing.json"), "No such file or directory");
  fails(dir.path.string(), "it is a directory");
  fails("/dev/null", "not a regular file");
  write_file(dir.file("empty.json"), "");
  fails(dir.file("empty.json"), "is empty");
  write_file(dir.file("one.json.gz"), "\x1f");
  fails(dir.file("one.json.gz"), "ends in .gz but is not gzip data");
  write_file(dir.file("magic.json.gz"), "\x1f\x8b");
  fails(dir.file("magic.json.gz"), "truncated gzip data");
  write_gzip(dir.file("full.gz"), slurp(fixture("matmul_add_64.json")));
  write_file(dir.file("cut.json.gz"), slurp(dir.file("full.gz")).substr(0, 300));
  fails(dir.file("cut.json.gz"), "truncated gzip data");
  std::string damaged = slurp(dir.file("full.gz"));
  for (std::size_t i = 20; i < 60; ++i) damaged[i] = char(0xA5);
  write_file(dir.file("damaged.json.gz"), damaged);
  fails(dir.file("damaged.json.gz"), "gzip");
  write_gzip(dir.file("nothing.json.gz"), "");
  fails(dir.file("nothing.json.gz"), "decompresses to nothing");
}

namespace {

// A gzip stream of `pattern` repeated to `n` bytes, made in memory: a
// decompression bomb about a thousand times smaller than what it inflates to.
std::string gzip_bomb(const std::string& pattern, std::size_t n) {
  z_stream z{};
  REQUIRE(deflateInit2(&z, 9, Z_DEFLATED, 15 + 16, 9, Z_DEFAULT_STRATEGY) == Z_OK);
  std::string chunk;
  while (chunk.size() < (1u << 20)) chunk += pattern;
  std::string out;
  char buf[1 << 16];
  for (std::size_t done = 0; done < n; done += chunk.size()) {
    z.next_in = reinterpret_cast<Bytef*>(chunk.data());
    z.avail_in = uInt(chunk.size());
    const int flush = done + chunk.size() >= n ? Z_FINISH : Z_NO_FLUSH;
    do {
      z.next_out = reinterpret_cast<Bytef*>(buf);
      z.avail_out = sizeof buf;
      deflate(&z, flush);
      out.append(buf, sizeof buf - z.avail_out);
    } while (z.avail_out == 0);
  }
  deflateEnd(&z);
  return out;
}

// Reads `path` in a child; returns "" if it was refused with `says`, its peak
// memory growing less than `max_growth_mib` (how early it stopped; no time
// bound: a loaded or sanitized run is slow, and speed is a benchmark's), else
// what went wrong.
// Sanitizers' shadow memory counts in the peak RSS: the memory bound holds in plain builds only.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool peak_memory_is_the_readers = false;
#else
constexpr bool peak_memory_is_the_readers = true;
#endif

std::string refused_in_bounds(const std::string& path, const std::string& says, long max_growth_mib) {
  int pipe_fds[2];
  REQUIRE(::pipe(pipe_fds) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::close(pipe_fds[0]);
    rusage before{}, after{};
    ::getrusage(RUSAGE_SELF, &before);
    std::string problem;
    try {
      (void)cuprof::read_trace_file(path);
      problem = "not refused";
    } catch (const cuprof::error& e) {
      if (std::string(e.what()).find(says) == std::string::npos) problem = std::string("refused as: ") + e.what();
    } catch (const std::exception& e) {
      problem = std::string("threw ") + e.what();
    }
    ::getrusage(RUSAGE_SELF, &after);
    const long growth_mib = (after.ru_maxrss - before.ru_maxrss) / 1024;
    if (peak_memory_is_the_readers && growth_mib >= max_growth_mib) problem += " peak memory grew by " + std::to_string(growth_mib) + " MiB";
    (void)!::write(pipe_fds[1], problem.data(), problem.size());
    ::_exit(0);
  }
  ::close(pipe_fds[1]);
  std::string problem;
  char buf[512];
  ssize_t n;
  while ((n = ::read(pipe_fds[0], buf, sizeof buf)) > 0) problem.append(buf, std::size_t(n));
  ::close(pipe_fds[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  if (!WIFEXITED(status)) problem += " the child died (signal " + std::to_string(WTERMSIG(status)) + ")";
  return problem;
}

}  // namespace

TEST_CASE("reader: gzip bombs (zeros, whitespace, valid-looking JSON) are refused early, in bounded memory") {
  temp_dir dir;
  // 512 MiB each once inflated, about 0.5 MB on disk. Zeros and blanks stop
  // at their first bytes; JSON-looking text at the 100x ratio past 256 MiB.
  write_file(dir.file("zeros.json.gz"), gzip_bomb(std::string(1, '\0'), 512u << 20));
  write_file(dir.file("blanks.json.gz"), gzip_bomb(" \n\t", 512u << 20));
  write_file(dir.file("json.json.gz"), gzip_bomb("[0,", 512u << 20));
  CHECK(refused_in_bounds(dir.file("zeros.json.gz"), "NUL byte", 64) == "");
  CHECK(refused_in_bounds(dir.file("blanks.json.gz"), "1 MiB of whitespace in a row", 64) == "");
  CHECK(refused_in_bounds(dir.file("json.json.gz"), "100 times its compressed size", 512) == "");
  // The message says where and why.
  try {
    (void)cuprof::read_trace_file(dir.file("zeros.json.gz"));
  } catch (const cuprof::error& e) {
    CHECK(std::string(e.what()) == "cuprof: '" + dir.file("zeros.json.gz") +
                                       "': byte 0 of its decompressed data is a NUL byte: not JSON text (a "
                                       "zero-filled or sparse file, or binary data)");
  }
}

TEST_CASE("reader: NUL-filled, sparse and binary files say what they are, not \"empty input\"") {
  temp_dir dir;
  const auto refused_as = [](const std::string& path) -> std::string {
    try {
      (void)cuprof::read_trace_file(path);
      return "read";
    } catch (const cuprof::error& e) {
      return e.what();
    }
  };
  write_file(dir.file("zeros.json"), std::string(1 << 20, '\0'));
  CHECK(refused_as(dir.file("zeros.json")) ==
        "cuprof: '" + dir.file("zeros.json") + "': byte 0 is a NUL byte: not JSON text (a zero-filled or sparse file, or binary data)");
  // A sparse file of 64 GiB: refused at its first bytes, never held (nor reserved) whole.
  write_file(dir.file("sparse.json"), "");
  REQUIRE(::truncate(dir.file("sparse.json").c_str(), off_t(64) << 30) == 0);
  CHECK(refused_in_bounds(dir.file("sparse.json"), "byte 0 is a NUL byte", 64) == "");
  // A trace cut off by zeros (a crash, a disk that lost its tail): where the zeros start.
  write_file(dir.file("zero_tail.json"), "{\"traceEvents\": [" + std::string(4096, '\0'));
  CHECK(refused_as(dir.file("zero_tail.json")).find("byte 17 is a NUL byte") != std::string::npos);
  write_file(dir.file("binary.json"), std::string("\x7f" "ELF\x02\x01\x01", 7));
  CHECK(refused_as(dir.file("binary.json")).find("byte 4 is a control byte (0x02): not JSON text") != std::string::npos);
  // The same from bytes in memory, and from the parser given NULs directly.
  CHECK_THROWS_WITH(cuprof::read_trace_bytes(std::string(16, '\0'), "mem"), doctest::Contains("byte 0 is a NUL byte"));
  try {
    (void)cuprof::parse_trace(std::string_view("\0\0", 2), "mem");
    FAIL("no error");
  } catch (const cuprof::error& e) {
    CHECK(std::string(e.what()).find("empty input") == std::string::npos);
  }
  // Whitespace alone is empty of JSON, and said so.
  write_file(dir.file("blank.json"), "  \n\t ");
  CHECK(refused_as(dir.file("blank.json")).find("empty input") != std::string::npos);
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
  const cuprof::insights small = insights_of(fixture("matmul_add_64.json"));
  CHECK(small.verdict == cuprof::bound_verdict::overhead_bound);
  CHECK(small.self_cpu_ns > 5 * small.self_cuda_ns);
  CHECK(small.gpu_idle_share > 0.8);
  const cuprof::insights big = insights_of(fixture("matmul_add_4096.json"));
  CHECK(big.verdict == cuprof::bound_verdict::compute_bound);
  CHECK(big.self_cuda_ns > big.self_cpu_ns);
  CHECK(big.gpu_idle_share < 0.5);
  // The same on torch's traces of the same workload; there the final sync is CPU time that is waiting.
  const cuprof::insights torch_small = insights_of(kineto("torch_matmul_add_64.json"));
  CHECK(torch_small.verdict == cuprof::bound_verdict::overhead_bound);
  const cuprof::insights torch_big = insights_of(kineto("torch_matmul_add_4096.json"));
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
       {std::make_tuple(fixture("mlp_unfused.json"), std::string("void ex::map_kernel<gelu_op>"), std::string("void ex::map_kernel<mul_op>"),
                        std::string("mlp")),
        std::make_tuple(kineto("torch_geglu_mlp.json"), std::string("void at::native::vectorized_elementwise_kernel<8, at::native::GeluCUDAKernelImpl"),
                        std::string("void at::native::vectorized_elementwise_kernel<8, at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor"),
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
  const cuprof::insights unfused = insights_of(fixture("mlp_unfused.json"));
  CHECK(unfused.verdict == cuprof::bound_verdict::compute_bound);
  CHECK(kinds_of(unfused) == std::vector<std::string>{"elementwise chain", "memset before GEMM"});
  CHECK(unfused.findings[0].cause == "elementwise chain: gelu_op -> mul_op");
  CHECK(unfused.findings[0].cost_ns == 204064);
  CHECK(unfused.findings[0].saving_ns == 94624);
  CHECK(unfused.summary[0].find("; 29.4% of GPU time, could save ~94.624us") != std::string::npos);
  // Throughput per name, pooled over the records whose size is known: the memsets' bytes (no peak:
  // this trace predates the memory clock in deviceProperties); the GEMMs have no sizes (no scope args).
  {
    const cuprof::trace t = cuprof::read_trace_file(fixture("mlp_unfused.json")).t;
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
  const nlohmann::json doc = nlohmann::json::parse(cli({"insights", fixture("mlp_unfused.json"), "--format", "json"}).out);
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
  const cuprof::insights torch = insights_of(kineto("torch_geglu_mlp.json"));
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
    const cuprof::insights in = insights_of(std::string(fused).rfind("torch", 0) == 0 ? kineto(fused) : fixture(fused));
    check_ranking(in);
    CHECK(find_finding(in, "elementwise chain") == nullptr);
  }
  CHECK(gpu_time_by_name(cuprof::read_trace_file(kineto("torch_geglu_mlp_compiled.json")).t)["triton_poi_fused__unsafe_view_gelu_mul_0"] ==
        185411);
  CHECK(kinds_of(insights_of(fixture("mlp_fused.json"))) == std::vector<std::string>{"memset before GEMM"});
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
       {expected{fixture("matmul_add_64.json"), cuprof::bound_verdict::overhead_bound, {"launch to start"}},
        expected{kineto("torch_matmul_add_64.json"), cuprof::bound_verdict::overhead_bound, {"launch to start"}},
        expected{fixture("matmul_add_4096.json"), cuprof::bound_verdict::compute_bound, {"memset before GEMM"}},
        expected{kineto("torch_matmul_add_4096.json"), cuprof::bound_verdict::compute_bound, {"synchronization", "memset before GEMM"}},
        expected{fixture("linear_addmm.json"), cuprof::bound_verdict::overhead_bound, {"launch to start", "memcpy before GEMM"}}}) {
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
  const cuprof::insights torch_4096 = insights_of(kineto("torch_matmul_add_4096.json"));
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

TEST_CASE("docs: the insights output shown in docs/guide.md is the command's") {
  const std::string guide = slurp(source_dir() + "/docs/guide.md");
  const std::string intro = "(`cuprof insights tests/fixtures/gpu/mlp_unfused.json`):\n\n```\n";
  const std::size_t from = guide.find(intro);
  REQUIRE(from != std::string::npos);
  const std::size_t begin = from + intro.size(), end = guide.find("\n```\n", begin);
  REQUIRE(end != std::string::npos);
  const std::string shown = guide.substr(begin, end - begin + 1);
  const std::string out = cli({"insights", fixture("mlp_unfused.json")}).out;
  // The first line names the file as given; the rest is the same.
  CHECK(shown.substr(shown.find('\n')) == out.substr(out.find('\n')));
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
  const cuprof::insights big = insights_of(fixture("matmul_add_4096.json"));
  const cuprof::finding* memset = find_finding(big, "memset before GEMM");
  REQUIRE(memset != nullptr);
  CHECK(memset->headline ==
        "Memset (Device) of 4 bytes right before the GEMM nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT, 3 times");
  CHECK(memset->where == "ProfilerStep#2 > matmul_add > matmul, GPU 0 stream 7 at ts 510793.072us");
  const cuprof::insights addmm = insights_of(fixture("linear_addmm.json"));
  const cuprof::finding* copy = find_finding(addmm, "memcpy before GEMM");
  REQUIRE(copy != nullptr);
  CHECK(copy->headline.find("Memcpy DtoD (Device -> Device) of 128 KiB right before the GEMM "
                            "nvjet_sm90_tst_64x8_64x16_1x2_h_badd_TNT, 3 times") == 0);
  bool explained = false;
  for (const std::string& d : copy->details) explained |= d.find("beta=1 GEMM") != std::string::npos;
  CHECK(explained);
  // No copy before the 64 GEMM, and none in the fused MLP's elementwise kernels.
  CHECK(find_finding(insights_of(fixture("matmul_add_64.json")), "memset before GEMM") == nullptr);
}

TEST_CASE("insights: cold start only where CPU time matters and warmup was not used; occupancy queries, profiler overhead") {
  // Its first step is 2x the others, but the schedule's warmup ran before it (steps start at #2): no cold start.
  const cuprof::insights small = insights_of(fixture("matmul_add_64.json"));
  CHECK(small.first_step == 2);
  CHECK(small.cpu_time_matters());
  CHECK(find_finding(small, "cold start") == nullptr);
  // Compute-bound: CPU time is hidden behind the GPU.
  CHECK_FALSE(insights_of(fixture("matmul_add_4096.json")).cpu_time_matters());
  CHECK(find_finding(insights_of(fixture("matmul_add_4096.json")), "cold start") == nullptr);

  const cuprof::insights occ = insights_of(fixture("occupancy.json"));
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
  const cuprof::loaded_trace occ_trace = cuprof::read_trace_file(fixture("occupancy.json"));
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
  CHECK(cuprof::format_insights(cpu).find("Verdict: no GPU work\n  a CPU-only trace: no CUDA calls and no GPU work") != std::string::npos);
  temp_dir dir;
  write_file(dir.file("cpu.json"),
             R"({"traceEvents": [{"ph": "X", "cat": "user_annotation", "name": "work", "ts": 1.0, "dur": 0.05, "pid": 1, "tid": 1}]})");
  const cli_run table = cli({"table", dir.file("cpu.json")});
  CHECK(table.rc == 0);
  CHECK(table.out.find(std::string("Self CPU time total: 0.050us\nNote: ") + cuprof::cpu_only_note + "\n") != std::string::npos);
  CHECK(cli({"table", fixture("mlp_fused.json")}).out.find("Note: ") == std::string::npos);
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

TEST_CASE("api vocabulary: launches, copies, synchronizations and occupancy queries, by any name CUPTI gives") {
  using namespace cuprof::detail;
  // A stream waits on the GPU: a synchronization (a cuda_sync record, an arrow), but the CPU thread goes on.
  for (const char* name : {"cudaStreamWaitEvent", "cudaStreamWaitEvent_ptsz_v7000", "cuStreamWaitEvent",
                           "cuStreamWaitEvent_ptsz"}) {
    CAPTURE(name);
    CHECK(is_synchronization(name));
    CHECK_FALSE(is_cpu_blocking_synchronization(name));
    CHECK(draws_flow(name));
    CHECK_FALSE(enqueues_gpu_work(name));
  }
  for (const char* name : {"cudaDeviceSynchronize", "cudaDeviceSynchronize_v3020", "cudaStreamSynchronize_ptsz_v7000",
                           "cudaEventSynchronize", "cudaThreadSynchronize_v3020", "cuCtxSynchronize_v2",
                           "cuStreamSynchronize_ptsz", "cuEventSynchronize"}) {
    CAPTURE(name);
    CHECK(is_cpu_blocking_synchronization(name));
    CHECK(is_synchronization(name));
    CHECK(draws_flow(name));
    CHECK_FALSE(enqueues_gpu_work(name));
  }
  // The sync record each makes, numbered as CUPTI numbers its types (sync_kind_name); none for other calls.
  for (const auto& [name, kind] : std::vector<std::pair<const char*, int>>{
           {"cudaEventSynchronize_v3020", 1}, {"cuEventSynchronize", 1}, {"cudaStreamWaitEvent_ptsz_v7000", 2},
           {"cuStreamWaitEvent", 2}, {"cudaStreamSynchronize_v3020", 3}, {"cuStreamSynchronize_ptsz", 3},
           {"cudaDeviceSynchronize_v3020", 4}, {"cudaThreadSynchronize_v3020", 4}, {"cuCtxSynchronize_v2", 4},
           {"cudaLaunchKernel_v7000", 0}, {"cudaMemcpyAsync_v3020", 0}, {"cudaStreamQuery_v3020", 0}}) {
    CAPTURE(name);
    CHECK(int(synchronization_kind(name)) == kind);
  }
  // Kernel launches, runtime and driver, with CUPTI's suffixes and CUDA 13's <<<>>> path.
  for (const char* name : {"cudaLaunchKernel", "cudaLaunchKernel_ptsz_v7000", "___cudaLaunchKernel_v13000",
                           "cudaLaunchKernelExC_v11060", "cudaLaunchCooperativeKernel_v9000",
                           "cudaLaunchCooperativeKernelMultiDevice_v9000", "cudaLaunch_v3020", "cuLaunchKernel",
                           "cuLaunchKernelEx", "cuLaunchKernelEx_ptsz", "cuLaunchCooperativeKernel", "cuLaunchGridAsync"}) {
    CAPTURE(name);
    CHECK(is_kernel_launch(name));
    CHECK(enqueues_gpu_work(name));
    CHECK(draws_flow(name));
    CHECK_FALSE(is_synchronization(name));
    CHECK_FALSE(is_occupancy_query(name));
  }
  // Graph launches, copies and memsets put work on the GPU too, but no kernel launch of their own.
  for (const char* name : {"cudaGraphLaunch_v10000", "cuGraphLaunch_ptsz", "cudaMemcpyAsync_v3020",
                           "cudaMemcpy_ptds_v7000", "cuMemcpyHtoD_v2", "cudaMemsetAsync", "cuMemsetD8Async"}) {
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
  for (const char* name : {"cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags_v7000",
                           "cuOccupancyMaxPotentialBlockSize"}) {
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

// ---- diff -------------------------------------------------------------------------

TEST_CASE("diff: unfused vs fused MLP keeps the GEMMs and removes the two elementwise kernels") {
  const cuprof::loaded_trace a = cuprof::read_trace_file(fixture("mlp_unfused.json"));
  const cuprof::loaded_trace b = cuprof::read_trace_file(fixture("mlp_fused.json"));
  const cuprof::trace_diff d = cuprof::diff_traces(a.t, b.t);
  std::vector<std::string> same, removed, added;
  for (const cuprof::gpu_work_change& c : d.gpu)
    (c.status == cuprof::change_status::same ? same : c.status == cuprof::change_status::removed ? removed : added)
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

// ---- the command ------------------------------------------------------------------

TEST_CASE("cli: table, insights and diff on the acceptance traces") {
  const cli_run small = cli({"insights", fixture("matmul_add_64.json")});
  CHECK(small.rc == 0);
  CHECK(small.out.find("Verdict: overhead-bound") != std::string::npos);
  const cli_run big = cli({"insights", fixture("matmul_add_4096.json")});
  CHECK(big.out.find("Verdict: compute-bound") != std::string::npos);
  CHECK(big.out.find("[memset before GEMM] Memset (Device) of 4 bytes right before the GEMM "
                     "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT") != std::string::npos);
  const cli_run addmm = cli({"insights", fixture("linear_addmm.json")});
  CHECK(addmm.out.find("[memcpy before GEMM] Memcpy DtoD (Device -> Device)") != std::string::npos);
  const cli_run diff = cli({"diff", fixture("mlp_unfused.json"), fixture("mlp_fused.json")});
  CHECK(diff.rc == 0);
  CHECK(diff.out.find("removed") != std::string::npos);
  CHECK(diff.out.find("map_kernel<gelu_op>") != std::string::npos);
  CHECK(diff.out.find("map_kernel<mul_op>") != std::string::npos);
  const cli_run table = cli({"table", fixture("mlp_fused.json"), "--rows", "3", "--stats"});
  CHECK(table.rc == 0);
  CHECK(lines(table.out) == 3 + 3 + 1 + 2);  // separators and header, 3 rows, separator, footer
  CHECK(table.out.find("CUDA p95") != std::string::npos);
  const cli_run every = cli({"table", fixture("mlp_fused.json"), "--rows=all", "--sort=none"});
  CHECK(every.rc == 0);
  CHECK(every.out.find("ProfilerStep*") < every.out.find("cudaMemsetAsync"));  // first-occurrence order
  for (const char* f : fixtures) {
    CAPTURE(f);
    for (const char* cmd : {"table", "insights"}) CHECK(cli({cmd, fixture(f)}).rc == 0);
  }
}

TEST_CASE("cli: --help on every command, usage errors exit 2") {
  for (const char* cmd : {"table", "insights", "diff"}) {
    CAPTURE(cmd);
    const cli_run r = cli({cmd, "--help"});
    CHECK(r.rc == 0);
    CHECK(r.out.rfind(std::string("usage: cuprof ") + cmd, 0) == 0);
    CHECK(cli({"help", cmd}).out == r.out);
  }
  CHECK(cli({"--help"}).out.rfind("usage: cuprof <command>", 0) == 0);
  CHECK(cli({"--version"}).out == "cuprof " CUPROF_VERSION_STRING "\n");
  const std::vector<std::vector<std::string>> usage = {
      {},
      {"frobnicate"},
      {"table"},
      {"table", "a.json", "b.json"},
      {"table", "a.json", "--bogus"},
      {"table", "a.json", "--rows"},
      {"table", "a.json", "--rows", "-7"},
      {"table", "a.json", "--stats=yes"},
      {"table", fixture("matmul_add_64.json"), "--sort", "fastest"},
      {"insights"},
      {"insights", "a.json", "--kernels", "x"},
      {"diff", "a.json"},
      {"diff", "a.json", "b.json", "c.json"},
      {"help", "frobnicate"},
  };
  for (const auto& args : usage) {
    std::string shown;
    for (const auto& a : args) shown += a + " ";
    CAPTURE(shown);
    const cli_run r = cli(args);
    CHECK(r.rc == 2);
    CHECK(r.out.empty() == (args.empty() || args[0] != "help"));
    CHECK((r.err.find("usage") != std::string::npos || r.err.rfind("cuprof: ", 0) == 0));
  }
  CHECK(cli({"table", fixture("matmul_add_64.json"), "--sort", "fastest"}).err.find("valid keys: cpu_time") !=
        std::string::npos);
}

TEST_CASE("text output: escape sequences in names reach no terminal (table, insights, diff); cuts keep UTF-8 whole") {
  using cuprof::detail::terminal_safe;
  CHECK(terminal_safe("aten::mm") == "aten::mm");
  CHECK(terminal_safe("void k<float>(float*, int) [\xc3\xa9\xe2\x82\xac]") == "void k<float>(float*, int) [\xc3\xa9\xe2\x82\xac]");
  CHECK(terminal_safe(std::string("a\x1b]0;t\x07z\r\n\t\x7f\0b", 14)) == "a\\x1b]0;t\\x07z\\x0d\\x0a\\x09\\x7f\\x00b");
  CHECK(terminal_safe("c1 \xc2\x9b" "31m") == "c1 \\xc2\\x9b31m");  // U+009B, the one-byte CSI
  CHECK(cuprof::detail::shorten("short", 10) == "short");
  std::string accents;
  for (int i = 0; i < 20; ++i) accents += "\xc3\xa9";  // 20 characters, 40 bytes
  CHECK(cuprof::detail::shorten(accents, 20) == accents);
  CHECK(cuprof::detail::shorten(accents, 10) == accents.substr(0, 14) + "...");  // 7 whole characters

  // A real trace whose kernel and scope names carry a window-title OSC, a colour, CR, NUL and DEL.
  temp_dir dir;
  std::string hostile = slurp(fixture("matmul_add_4096.json"));
  const auto replace_all = [&](const std::string& from, const std::string& to) {
    std::size_t n = 0;
    for (std::size_t at = 0; (at = hostile.find(from, at)) != std::string::npos; at += to.size(), ++n)
      hostile.replace(at, from.size(), to);
    REQUIRE(n > 0);
  };
  replace_all("\"nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT\"",
              "\"nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT\\u001b]0;pwned\\u0007\"");
  replace_all("\"matmul_add\"", "\"matmul\\u001b[31m_add\\r\\u0000\\u007f\"");
  write_file(dir.file("hostile.json"), hostile);
  const std::vector<std::vector<std::string>> commands = {
      {"table", dir.file("hostile.json")},
      {"table", dir.file("hostile.json"), "--kernels", "--stats"},
      {"insights", dir.file("hostile.json")},
      {"diff", fixture("matmul_add_4096.json"), dir.file("hostile.json")}};
  for (const auto& args : commands) {
    CAPTURE(args[0]);
    const cli_run r = cli(args);
    REQUIRE(r.rc == 0);
    for (char c : r.out) {
      const unsigned char u = static_cast<unsigned char>(c);
      if ((u < 0x20 && c != '\n') || u == 0x7F) FAIL("a control byte " << int(u) << " in the output:\n" << r.out);
    }
    // The table cuts the long kernel name before its tail, insights names no scope.
    if (args[0] != "table") CHECK(r.out.find("\\x1b]0;pwned\\x07") != std::string::npos);
    if (args[0] != "insights") CHECK(r.out.find("matmul\\x1b[31m_add\\x0d\\x00\\x7f") != std::string::npos);
  }
}

TEST_CASE("cli: run refuses --delay/--duration that are not finite seconds, and an --inject that is not an injection library") {
  for (const char* option : {"--delay", "--duration"}) {
    for (const char* value : {"nan", "inf", "1e999", "-1", " 1", "0x10", "5s", "1e8"}) {
      CAPTURE(option);
      CAPTURE(value);
      const cli_run r = cli({"run", "--dry-run", option, value, "--", "prog"});
      CHECK(r.rc == 2);
      CHECK(r.err.rfind(std::string("cuprof: ") + option + " takes a number of seconds from 0 to 1e7, not '", 0) == 0);
    }
  }
  const cli_run passwd = cli({"run", "--dry-run", "--inject", "/etc/passwd", "--", "prog"});
  CHECK(passwd.rc == 1);
  CHECK(passwd.err.rfind("cuprof: cannot inject '/etc/passwd': not a shared library this process can load (", 0) == 0);
  CHECK(passwd.err.find("invalid ELF header") != std::string::npos);
  // A real shared library, but not an injection library: zlib, which this test links.
  Dl_info zlib{};
  REQUIRE(::dladdr(reinterpret_cast<void*>(&zlibVersion), &zlib) != 0);
  char resolved[4096];
  REQUIRE(::realpath(zlib.dli_fname, resolved) != nullptr);
  const cli_run not_injection = cli({"run", "--dry-run", "--inject", zlib.dli_fname, "--", "prog"});
  CHECK(not_injection.rc == 1);
  CHECK(not_injection.err == "cuprof: cannot inject '" + std::string(resolved) +
                                 "': a shared library, but it does not export InitializeInjection (not an injection library)\n");
}

TEST_CASE("cli: malformed input exits 1 with one error line, for every command") {
  temp_dir dir;
  write_file(dir.file("empty.json"), "");
  write_file(dir.file("truncated.json"), slurp(fixture("matmul_add_64.json")).substr(0, 4000));
  write_file(dir.file("types.json"),
             R"({"traceEvents": [{"ph": "X", "cat": "cuda_runtime", "name": "x", "ts": 1, "dur": 1, "pid": 1, "tid": [1]}]})");
  write_file(dir.file("one.json.gz"), "\x1f");
  const std::vector<std::string> inputs = {dir.file("empty.json"), dir.file("truncated.json"), dir.file("types.json"),
                                           dir.path.string(),       dir.file("missing.json"),   dir.file("one.json.gz")};
  for (const std::string& in : inputs) {
    CAPTURE(in);
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{"table", in}, std::vector<std::string>{"insights", in},
          std::vector<std::string>{"diff", fixture("mlp_fused.json"), in},
          std::vector<std::string>{"diff", in, fixture("mlp_fused.json")}}) {
      const cli_run r = cli(args);
      CHECK(r.rc == 1);
      CHECK(r.out.empty());
      CHECK(r.err.rfind("cuprof: ", 0) == 0);
      CHECK(lines(r.err) == 1);
    }
  }
  CHECK(cli({"table", dir.file("types.json")}).err.find("\"tid\" is not an integer") != std::string::npos);
}

// ---- report formats, standard input, help, terminal, the gate ---------------

namespace {

using json = nlohmann::json;

// RFC 4180 records: a quoted field may hold commas and doubled quotes.
std::vector<std::vector<std::string>> parse_csv(const std::string& text) {
  std::vector<std::vector<std::string>> records(1, std::vector<std::string>(1));
  bool quoted = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    std::string& field = records.back().back();
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') field += text[++i];
      else if (c == '"') quoted = false;
      else field += c;
    } else if (c == '"' && field.empty()) {
      quoted = true;
    } else if (c == ',') {
      records.back().emplace_back();
    } else if (c == '\n') {
      records.emplace_back(1);
    } else {
      field += c;
    }
  }
  REQUIRE_FALSE(quoted);
  REQUIRE(records.back() == std::vector<std::string>(1));  // the last record ends with a line break
  records.pop_back();
  return records;
}

cli_run cli_on(const cuprof::cli::terminal& term, std::vector<std::string> args) {
  args.insert(args.begin(), "cuprof");
  cli_run r;
  r.rc = cuprof::cli::run(args, r.out, r.err, term);
  return r;
}

std::int64_t ns_of(const json& us) { return std::llround(us.get<double>() * 1000.0); }

}  // namespace

TEST_CASE("cli: --format text is the default byte for byte; csv is a header and a row per item; json parses") {
  for (const char* f : fixtures) {
    CAPTURE(f);
    const std::string path = fixture(f);
    for (const std::vector<std::string>& args : {std::vector<std::string>{"table", path, "--stats", "--kernels"},
                                                 std::vector<std::string>{"insights", path},
                                                 std::vector<std::string>{"diff", fixture("mlp_fused.json"), path}}) {
      CAPTURE(args[0]);
      const cli_run text = cli(args);
      std::vector<std::string> with = args;
      with.insert(with.end(), {"--format", "text"});
      CHECK(cli(with).out == text.out);
      with.back() = "csv";
      const cli_run csv = cli(with);
      with.back() = "json";
      const cli_run js = cli(with);
      REQUIRE(csv.rc == 0);
      REQUIRE(js.rc == 0);
      const auto records = parse_csv(csv.out);
      REQUIRE(records.size() >= 1);
      for (const auto& r : records) CHECK(r.size() == records[0].size());
      json doc;
      REQUIRE_NOTHROW(doc = json::parse(js.out));
      // CSV gives the JSON's main list: the table's rows, the verdict and the findings, the GPU work.
      if (args[0] == "table") {
        CHECK(records.size() - 1 == doc["rows"].size());
        CHECK(lines(text.out) == records.size() - 1 + 6);  // rows + 3 separators, the header, 2 footer lines
        CHECK(records[1][0] == doc["rows"][0]["name"]);
      } else if (args[0] == "insights") {
        CHECK(records.size() - 1 == doc["findings"].size() + 1);
        CHECK(records[1][0] == "verdict");
        CHECK(records[1][1] == doc["verdict"]);
      } else {
        CHECK(records.size() - 1 == doc["gpu"].size());
      }
    }
  }
  // A kernel name with commas is one quoted CSV field; JSON carries it as it is.
  const cli_run csv = cli({"table", fixture("matmul_add_64.json"), "--format", "csv"});
  const std::string kernel = "void ex::map_kernel<add_op>(add_op, __nv_bfloat16*, __nv_bfloat16 const*, __nv_bfloat16 const*, unsigned long)";
  CHECK(csv.out.find("\n\"" + kernel + "\",gpu_work,3,") != std::string::npos);
  CHECK(cuprof::cli::csv_field(cuprof::cli::str("say \"hi\", twice")) == "\"say \"\"hi\"\", twice\"");
  CHECK(cuprof::cli::csv_field(cuprof::cli::str(" padded")) == "\" padded\"");
  CHECK(cuprof::cli::csv_field(cuprof::cli::str("line\nbreak")) == "line\\x0abreak");
  const json doc = json::parse(cli({"table", fixture("matmul_add_64.json"), "--format", "json", "--rows", "all"}).out);
  bool found = false;
  for (const json& row : doc["rows"]) found |= row["name"] == kernel && row["kind"] == "gpu_work" && row["calls"] == 3;
  CHECK(found);
  CHECK(cli({"table", fixture("matmul_add_64.json"), "--format", "yaml"}).rc == 2);

  // Names with escape sequences: JSON escapes them (the trace writer's escaping) and reads back the same.
  temp_dir dir;
  std::string hostile = slurp(fixture("matmul_add_4096.json"));
  const std::string from = "\"matmul_add\"";
  for (std::size_t at = 0; (at = hostile.find(from, at)) != std::string::npos; at += 20)
    hostile.replace(at, from.size(), "\"m\\u001b[31m,\\\"x\\\"\"");
  write_file(dir.file("hostile.json"), hostile);
  for (const char* cmd : {"table", "insights"}) {
    const cli_run r = cli({cmd, dir.file("hostile.json"), "--format", "json"});
    REQUIRE(r.rc == 0);
    CHECK(r.out.find('\x1b') == std::string::npos);
    CHECK(json::accept(r.out));
  }
  const json hostile_doc = json::parse(cli({"table", dir.file("hostile.json"), "--format", "json"}).out);
  found = false;
  for (const json& row : hostile_doc["rows"]) found |= row["name"] == "m\x1b[31m,\"x\"";
  CHECK(found);
  const cli_run hostile_csv = cli({"table", dir.file("hostile.json"), "--format", "csv"});
  CHECK(hostile_csv.out.find("\n\"m\\x1b[31m,\"\"x\"\"\",cpu_scope,") != std::string::npos);
}

TEST_CASE("cli: table, insights and diff agree on CPU, sync and GPU time (one definition: time_totals)") {
  for (const std::string& path :
       {fixture("matmul_add_4096.json"), fixture("occupancy.json"), kineto("torch_matmul_add_4096.json"),
        kineto("torch_geglu_mlp.json")}) {
    CAPTURE(path);
    const json table = json::parse(cli({"table", path, "--format", "json"}).out)["totals"];
    const json insights = json::parse(cli({"insights", path, "--format", "json"}).out)["totals"];
    const json diff = json::parse(cli({"diff", path, path, "--format", "json"}).out);
    CHECK(table == insights);
    CHECK(table == diff["a"]["totals"]);
    CHECK(table == diff["b"]["totals"]);
    CHECK(ns_of(table["cpu_us"]) + ns_of(table["sync_us"]) == ns_of(table["self_cpu_us"]));
    const cuprof::time_totals t = cuprof::key_averages(cuprof::read_trace_file(path).t).totals();
    CHECK(ns_of(table["sync_us"]) == std::int64_t(t.sync_ns));
    CHECK(ns_of(table["self_cuda_us"]) == std::int64_t(t.self_cuda_ns));
  }
  // torch's 4096 trace ends in a 397us cudaDeviceSynchronize: CPU time without it, sync time apart, in all three.
  const std::string path = kineto("torch_matmul_add_4096.json");
  CHECK(cli({"table", path}).out.find("Self CPU time total: 630.329us") != std::string::npos);  // torch's footer
  const std::string insights = cli({"insights", path}).out;
  CHECK(insights.find("Self CPU 232.967us (not counting 397.362us in synchronize calls)") != std::string::npos);
  const std::string diff = cli({"diff", path, path}).out;
  CHECK(diff.find("CPU time (Self CPU time total without synchronize calls): 232.967us -> 232.967us") != std::string::npos);
  CHECK(diff.find("Sync time (in synchronize calls: the CPU waiting for the GPU): 397.362us -> 397.362us") != std::string::npos);
}

TEST_CASE("cli: help, help COMMAND, help --help, and --help anywhere among a command's arguments exit 0") {
  const std::string main_help = cli({"--help"}).out;
  REQUIRE(main_help.rfind("usage: cuprof <command>", 0) == 0);
  for (const std::vector<std::string>& args : {std::vector<std::string>{"help"}, {"help", "--help"}, {"help", "-h"},
                                               {"help", "help"}, {"-h"}}) {
    const cli_run r = cli(args);
    CHECK(r.rc == 0);
    CHECK(r.out == main_help);
    CHECK(r.err.empty());
  }
  for (const char* cmd : {"table", "insights", "diff", "run"}) {
    CAPTURE(cmd);
    const cli_run help = cli({"help", cmd});
    CHECK(help.rc == 0);
    CHECK(help.out.rfind(std::string("usage: cuprof ") + cmd, 0) == 0);
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{cmd, "--help"}, {cmd, "-h"}, {cmd, "--bogus", "--help"}, {cmd, "x.json", "--rows", "--help"}}) {
      const cli_run r = cli(args);
      CHECK(r.rc == 0);
      CHECK(r.out == help.out);
    }
  }
  // After "--", --help is the traced program's.
  CHECK(cli({"run", "--dry-run", "--inject", "/nonexistent.so", "--", "prog", "--help"}).out.empty());
  CHECK(cli({"help", "frobnicate"}).rc == 2);
  // The documented exit status of the gate is in the help texts.
  CHECK(main_help.find("3 diff --fail-above") != std::string::npos);
  CHECK(cli({"help", "diff"}).out.find("exit 3") != std::string::npos);
}

TEST_CASE("cli: torch's memory sort keys are refused: traces carry no memory figures") {
  for (const char* key : {"self_cpu_memory_usage", "cpu_memory_usage", "cuda_memory_usage", "self_cuda_memory_usage",
                          "device_memory_usage", "self_device_memory_usage"}) {
    CAPTURE(key);
    const cli_run r = cli({"table", fixture("matmul_add_64.json"), "--sort", key});
    CHECK(r.rc == 2);
    CHECK(r.out.empty());
    CHECK(r.err.rfind("cuprof: cannot sort by '" + std::string(key) + "': traces carry no memory figures", 0) == 0);
    CHECK(r.err.find("valid keys: cpu_time, cuda_time, ") != std::string::npos);
  }
}

TEST_CASE("cli: on a terminal the table fits its width by narrowing Name; --wide and pipes keep torch's layout") {
  const std::string path = kineto("torch_matmul_add_4096.json");
  const std::string torch = slurp(kineto("torch_matmul_add_4096.txt"));
  cuprof::cli::terminal term;
  CHECK(cli_on(term, {"table", path}).out == torch);  // no terminal: as torch prints it
  term.stdout_columns = 170;
  const cli_run fitted = cli_on(term, {"table", path});
  CHECK(fitted.out != torch);
  std::istringstream in(fitted.out);
  std::size_t widest = 0;
  for (std::string line; std::getline(in, line);) widest = std::max(widest, cuprof::detail::utf8_length(line));
  CHECK(widest == 170);  // narrowed just enough: the Name column is all that changed
  CHECK(fitted.out.find("Self CPU time total: 630.329us") != std::string::npos);
  CHECK(cli_on(term, {"table", path, "--wide"}).out == torch);
  CHECK(cli_on(term, {"table", path, "--format", "csv"}).out == cli({"table", path, "--format", "csv"}).out);
  term.stdout_columns = 500;  // wide enough: torch's own layout
  CHECK(cli_on(term, {"table", path}).out == torch);
  term.stdout_columns = 155;  // Name at its narrowest: 12 characters
  CHECK(cli_on(term, {"table", path}).out.rfind(std::string(12, '-') + "  -", 0) == 0);
  term.stdout_columns = 120;  // too narrow for the numbers: the lines wrap anyway, Name is not cut for nothing
  CHECK(cli_on(term, {"table", path}).out == torch);

  // The cut is the table's own, UTF-8 safe: whole characters and "...".
  cuprof::trace t;
  cuprof::cpu_span s;
  s.start_ns = 1000;
  s.end_ns = 5000;
  std::string accents;
  for (int i = 0; i < 50; ++i) accents += "\xc3\xa9";
  s.name = t.names.intern(accents);
  t.spans.push_back(s);
  cuprof::table_options o;
  o.line_width = 100;
  const std::string table = cuprof::key_averages(t).table(o);
  std::istringstream lines_in(table);
  for (std::string line; std::getline(lines_in, line);) {
    CAPTURE(line);
    CHECK(cuprof::detail::utf8_length(line) <= 100);
    for (std::size_t i = 0; i < line.size(); i += cuprof::detail::utf8_sequence_length(line, i))
      REQUIRE(cuprof::detail::utf8_sequence_length(line, i) > 0);
  }
  CHECK(table.find(cuprof::detail::utf8_prefix(accents, 11) + "...  ") != std::string::npos);  // 100 - 6 * 14 - 2 - 3
}

TEST_CASE("terminal_columns: a terminal's size, else $COLUMNS; 0 for what is no terminal") {
  const char* saved = std::getenv("COLUMNS");
  const std::string saved_value = saved ? saved : "";
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  ::setenv("COLUMNS", "88", 1);
  CHECK(cuprof::cli::terminal_columns(fds[1]) == 0);
  ::close(fds[0]);
  ::close(fds[1]);
  const int master = ::posix_openpt(O_RDWR | O_NOCTTY);
  if (master < 0 || ::grantpt(master) != 0 || ::unlockpt(master) != 0) {
    MESSAGE("no pseudo-terminal here: the terminal half is not checked");
  } else {
    const int tty = ::open(::ptsname(master), O_RDWR | O_NOCTTY);
    REQUIRE(tty >= 0);
    winsize ws{};
    ws.ws_row = 30;
    ws.ws_col = 97;
    REQUIRE(::ioctl(master, TIOCSWINSZ, &ws) == 0);
    CHECK(cuprof::cli::terminal_columns(tty) == 97);
    ws.ws_col = 0;  // a terminal that does not say: $COLUMNS
    REQUIRE(::ioctl(master, TIOCSWINSZ, &ws) == 0);
    CHECK(cuprof::cli::terminal_columns(tty) == 88);
    ::unsetenv("COLUMNS");
    CHECK(cuprof::cli::terminal_columns(tty) == 0);
    ::close(tty);
  }
  if (master >= 0) ::close(master);
  if (saved) ::setenv("COLUMNS", saved_value.c_str(), 1);
  else ::unsetenv("COLUMNS");
}

TEST_CASE("progress line: only for reads past one second, at most ten times a second, erased when done") {
  using cuprof::read_stage;
  using clock = cuprof::cli::progress_line::clock;
  using std::chrono::milliseconds;
  const auto drain = [](int fd) {
    std::string s;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof buf)) > 0) s.append(buf, std::size_t(n));
    return s;
  };
  int fds[2];
  REQUIRE(::pipe2(fds, O_NONBLOCK) == 0);
  const clock::time_point t0 = clock::now();
  {
    cuprof::cli::progress_line quick(fds[1], "small.json", t0);
    quick.update(read_stage::reading, 1 << 20, 2 << 20, t0 + milliseconds(900));
  }
  CHECK(drain(fds[0]).empty());  // under a second: nothing shown, nothing erased
  {
    cuprof::cli::progress_line slow(fds[1], "big.json", t0);
    slow.update(read_stage::reading, 1 << 20, 3 << 20, t0 + milliseconds(500));
    slow.update(read_stage::reading, 1 << 20, 3 << 20, t0 + milliseconds(1500));
    slow.update(read_stage::parsing, 2 << 20, 3 << 20, t0 + milliseconds(1550));  // too soon after the last
    slow.update(read_stage::decompressing, 2 << 20, 3 << 20, t0 + milliseconds(1700));
    slow.update(read_stage::reading, 5 << 20, 0, t0 + milliseconds(2000));  // a pipe: no total
  }
  CHECK(drain(fds[0]) ==
        "\rcuprof: reading big.json: 1 of 3 MB\x1b[K\rcuprof: decompressing big.json: 2 of 3 MB\x1b[K"
        "\rcuprof: reading big.json: 5 MB\x1b[K\r\x1b[K");
  {
    // The reader's hook: a read that began two seconds ago shows its parse, then erases it.
    cuprof::cli::progress_line line(fds[1], "t.json", clock::now() - std::chrono::seconds(2));
    (void)cuprof::read_trace_file(fixture("matmul_add_4096.json"), line.hook());
  }
  const std::string shown = drain(fds[0]);
  CHECK(shown.rfind("\rcuprof: reading t.json: ", 0) == 0);
  CHECK(cuprof::detail::ends_with(shown, "\r\x1b[K"));
  ::close(fds[0]);
  ::close(fds[1]);
}

TEST_CASE("reader: JSON errors give the line and column, at a truncated end too; the command prints one line") {
  const auto message = [](const std::string& text) {
    try {
      (void)cuprof::parse_trace(text, "x.json");
    } catch (const cuprof::error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(message("{\n  \"traceEvents\": [\n    {\"ph\": 01}\n  ]\n}") == "cuprof: x.json: line 3, column 12: invalid number");
  CHECK(message("{\n  \"traceEvents\": [\n    {\"ph\": \"X\",\n     \"cat\" 1}\n  ]\n}") ==
        "cuprof: x.json: line 4, column 12: expected a member (\"name\": value), ',' or '}', found '1'");
  CHECK(message("{\"traceEvents\": [\n") == "cuprof: x.json: line 2, column 1: unexpected end of input (truncated?): expected a value");
  // Megabytes in, past text whose memory the reader has given back as it went: the place is still right.
  std::string big = "{\"traceEvents\": [\n";
  for (int i = 0; i < 40000; ++i)
    big += "{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"op\", \"pid\": 1, \"tid\": 1, \"ts\": 1, \"dur\": 1},\n";
  CHECK(message(big + "{\"ph\": 01}]}") == "cuprof: x.json: line 40002, column 8: invalid number");
  CHECK(cuprof::parse_trace(big + "{}]}", "big.json").t.spans.size() == 40000);
  // Raw tabs and line breaks inside strings are not JSON, but some torch traces have them: read as themselves.
  const cuprof::loaded_trace raw = cuprof::parse_trace(
      "{\"traceEvents\": [{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"a\tb\nc\", \"pid\": 1, \"tid\": 1, \"ts\": 1, \"dur\": 1}]}",
      "raw.json");
  REQUIRE(raw.t.spans.size() == 1);
  CHECK(raw.t.names.str(raw.t.spans[0].name) == "a\tb\nc");
  // Invalid UTF-8 (a name cut inside a character) reads, the byte replaced by U+FFFD as the writer does.
  const cuprof::loaded_trace cut = cuprof::parse_trace(
      "{\"traceEvents\": [{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"caf\xC3\", \"pid\": 1, \"tid\": 1, \"ts\": 1, \"dur\": 1}]}",
      "cut.json");
  REQUIRE(cut.t.spans.size() == 1);
  CHECK(cut.t.names.str(cut.t.spans[0].name) == "caf\xEF\xBF\xBD");
  CHECK(message("{\"traceEvents\": [{\"ph\": \"X\",\n \"name\": \"a\tb\", \"ts\": x}]}") ==
        "cuprof: x.json: line 2, column 23: expected a value, found 'x'");
  // A name from the trace in the message holds a line break and an escape: still one line on stderr.
  temp_dir dir;
  write_file(dir.file("bad.json"),
             R"({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "a\nb\u001b[2J", "ts": "1", "dur": 1, "pid": 0, "tid": 7}]})");
  const cli_run r = cli({"table", dir.file("bad.json")});
  CHECK(r.rc == 1);
  CHECK(lines(r.err) == 1);
  CHECK(r.err.find("(\"a\\x0ab\\x1b[2J\"): \"ts\" is a string, expected a number") != std::string::npos);
  CHECK(r.err.find("line 1, column ") != std::string::npos);
}

TEST_CASE("diff --fail-above: exit 3 when B's time per step grew by more than PCT, naming what grew most") {
  const auto kernels = [](std::uint64_t ns, int steps) {
    cuprof::trace t;
    for (int i = 0; i < steps; ++i) {
      cuprof::cpu_span s;
      s.start_ns = 1000000 * std::uint64_t(i + 1);
      s.end_ns = s.start_ns + 500000;
      s.name = t.names.intern("ProfilerStep#" + std::to_string(i));
      s.is_step = true;
      t.spans.push_back(s);
    }
    cuprof::gpu_activity g;
    g.start_ns = 1000;
    g.end_ns = 1000 + ns;
    g.name = t.names.intern("gemm");
    t.gpu.push_back(g);
    return t;
  };
  // Without steps in both: totals. Growth equal to the threshold passes; more fails.
  const cuprof::trace_diff ten = cuprof::diff_traces(kernels(1000, 0), kernels(1100, 0));
  CHECK_FALSE(ten.per_step());
  CHECK_FALSE(cuprof::check_growth(ten, cuprof::diff_metric::gpu, 10).failed);
  const cuprof::diff_gate tight = cuprof::check_growth(ten, cuprof::diff_metric::gpu, 9.99);
  CHECK(tight.failed);
  REQUIRE(tight.grew_most.size() == 1);
  CHECK(tight.grew_most[0].name == "gemm");
  CHECK(tight.grew_most[0].b_ns - tight.grew_most[0].a_ns == 100);
  // Per step when both have steps: 1000ns in 1 step vs 1800ns in 2 steps is less per step.
  const cuprof::trace_diff steps = cuprof::diff_traces(kernels(1000, 1), kernels(1800, 2));
  CHECK(steps.per_step());
  const cuprof::diff_gate per_step = cuprof::check_growth(steps, cuprof::diff_metric::gpu, 0);
  CHECK(per_step.a_ns == 1000);
  CHECK(per_step.b_ns == 900);
  CHECK_FALSE(per_step.failed);
  CHECK(per_step.grew_most.empty());
  // Nothing in A, something in B: infinite growth fails any threshold.
  const cuprof::diff_gate from_nothing =
      cuprof::check_growth(cuprof::diff_traces(cuprof::trace{}, kernels(5, 0)), cuprof::diff_metric::gpu, 1e6);
  CHECK(from_nothing.failed);

  // The command: exit 3, one line on stderr, the gate in every format.
  const std::string a = fixture("mlp_unfused.json"), b = fixture("mlp_fused.json");
  const cli_run gpu = cli({"diff", a, b, "--fail-above", "0"});
  CHECK(gpu.rc == 0);  // fusion made GPU time per step smaller
  CHECK(gpu.out.find("Gate: GPU time per step 231.668us -> 202.516us (-12.6%): passed, within 0%") != std::string::npos);
  const cli_run cpu = cli({"diff", a, b, "--fail-above", "25", "--metric", "cpu"});
  CHECK(cpu.rc == 3);
  CHECK(cpu.err == "cuprof: CPU time per step grew by more than --fail-above 25% from A to B (+28.2%)\n");
  CHECK(cpu.out.find("Gate: CPU time per step 51.148us -> 65.571us (+28.2%): FAILED, it grew by more than 25%") !=
        std::string::npos);
  CHECK(cli({"diff", a, b, "--fail-above", "30", "--metric", "cpu"}).rc == 0);
  const cli_run js = cli({"diff", a, b, "--fail-above=25%", "--metric=cpu", "--format", "json"});
  CHECK(js.rc == 3);
  const json gate = json::parse(js.out)["gate"];
  CHECK(gate["metric"] == "cpu");
  CHECK(gate["failed"] == true);
  CHECK(gate["threshold_pct"] == 25.0);
  CHECK(ns_of(gate["a_us"]) == 51148);
  CHECK_FALSE(gate["grew_most"].empty());
  // The CPU metric leaves synchronize calls out, and names no synchronize call.
  const cuprof::trace_diff occ = cuprof::diff_traces(cuprof::read_trace_file(fixture("matmul_add_64.json")).t,
                                                     cuprof::read_trace_file(fixture("occupancy.json")).t);
  for (const cuprof::growth& g : cuprof::check_growth(occ, cuprof::diff_metric::cpu, 0, 100).grew_most)
    CHECK_FALSE(cuprof::detail::is_cpu_blocking_synchronization(g.name));
  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{"diff", a, b, "--metric", "cpu"}, {"diff", a, b, "--fail-above", "-1"},
        {"diff", a, b, "--fail-above", "nan"}, {"diff", a, b, "--fail-above", "5", "--metric", "mem"},
        {"diff", "-", "-"}}) {
    const cli_run r = cli(bad);
    CHECK(r.rc == 2);
    CHECK(r.out.empty());
  }
}

// ---- scope arguments and throughput ---------------------------------------------

namespace {

// A cuprof trace with sizes: three GEMM scopes (two shapes) each launching one
// nvjet bf16 GEMM of 1 ms, a 1 MB DtoD copy of 1 us, a 4 KiB HtoD copy, and a
// scope with a double and a string argument. An H100-like device (sm_90, 132
// SMs, 1.98 GHz, HBM at 2.619 GHz x 5120 bits).
const char* const sized_trace = R"json({
  "deviceProperties": [{"id": 0, "name": "GPU", "computeMajor": 9, "computeMinor": 0, "numSms": 132,
                        "clockRate": 1980000, "memoryClockRate": 2619000, "memoryBusWidth": 5120}],
  "cuprof": {"version": "0.1.0"},
  "baseTimeNanoseconds": 1700000000000000000,
  "traceEvents": [
    {"ph": "X", "cat": "user_annotation", "name": "gemm", "pid": 1, "tid": 1, "ts": 0, "dur": 1500,
     "args": {"External id": 1, "M": 4096, "N": 4096, "K": 4096}},
    {"ph": "X", "cat": "user_annotation", "name": "gemm", "pid": 1, "tid": 1, "ts": 2000, "dur": 1500,
     "args": {"External id": 2, "M": 1024, "N": 1024, "K": 1024}},
    {"ph": "X", "cat": "user_annotation", "name": "gemm", "pid": 1, "tid": 1, "ts": 4000, "dur": 1500,
     "args": {"External id": 3, "M": 4096, "N": 4096, "K": 4096}},
    {"ph": "X", "cat": "user_annotation", "name": "scaled", "pid": 1, "tid": 1, "ts": 6000, "dur": 10,
     "args": {"External id": 4, "scale": 0.5, "tag": "x"}},
    {"ph": "X", "cat": "kernel", "name": "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "pid": 0, "tid": 7,
     "ts": 100, "dur": 1000, "args": {"External id": 1, "device": 0, "stream": 7, "correlation": 11}},
    {"ph": "X", "cat": "kernel", "name": "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "pid": 0, "tid": 7,
     "ts": 2100, "dur": 1000, "args": {"External id": 2, "device": 0, "stream": 7, "correlation": 12}},
    {"ph": "X", "cat": "kernel", "name": "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "pid": 0, "tid": 7,
     "ts": 4100, "dur": 1000, "args": {"External id": 3, "device": 0, "stream": 7, "correlation": 13}},
    {"ph": "X", "cat": "gpu_user_annotation", "name": "gemm", "pid": 0, "tid": 7, "ts": 99.999, "dur": 1000.002,
     "args": {"External id": 1}},
    {"ph": "X", "cat": "gpu_user_annotation", "name": "gemm", "pid": 0, "tid": 7, "ts": 2099.999, "dur": 1000.002,
     "args": {"External id": 2}},
    {"ph": "X", "cat": "gpu_user_annotation", "name": "gemm", "pid": 0, "tid": 7, "ts": 4099.999, "dur": 1000.002,
     "args": {"External id": 3}},
    {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD (Device -> Device)", "pid": 0, "tid": 7,
     "ts": 6002, "dur": 1, "args": {"External id": 4, "device": 0, "stream": 7, "correlation": 14, "bytes": 1000000}},
    {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": 7,
     "ts": 6004, "dur": 2, "args": {"External id": 4, "device": 0, "stream": 7, "correlation": 15, "bytes": 4096}}
  ]})json";

// A torch trace recorded with record_shapes=True: two shapes of aten::mm.
const char* const torch_shapes_trace = R"json({
  "traceEvents": [
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 10,
     "args": {"External id": 1, "Ev Idx": 0, "Input Dims": [[64, 64], [64, 64]], "Input type": ["float", "float"]}},
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 20, "dur": 10,
     "args": {"External id": 2, "Ev Idx": 1, "Input Dims": [[128, 128], [128, 128]]}},
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 40, "dur": 10,
     "args": {"External id": 3, "Ev Idx": 2, "Input Dims": [[64, 64], [64, 64]]}},
    {"ph": "X", "cat": "user_annotation", "name": "step", "pid": 1, "tid": 1, "ts": 60, "dur": 10,
     "args": {"External id": 4, "Record function id": 0, "Ev Idx": 3}}
  ]})json";

}  // namespace

TEST_CASE("reader: scope arguments of a cuprof trace, input shapes of a torch trace; group_by::args") {
  const cuprof::loaded_trace lt = cuprof::parse_trace(sized_trace, "sized");
  const cuprof::trace& t = lt.t;
  REQUIRE(t.spans.size() == 4);
  CHECK(cuprof::format_span_args(t, t.spans[0]) == "M=4096 N=4096 K=4096");
  CHECK(cuprof::format_span_args(t, t.spans[3]) == "scale=0.5 tag=x");
  REQUIRE(t.meta.devices.size() == 1);
  CHECK(t.meta.devices[0].clock_rate_khz == 1980000);
  CHECK(t.meta.devices[0].memory_clock_rate_khz == 2619000);
  CHECK(t.meta.devices[0].memory_bus_width == 5120);

  // By name (the default): one gemm row, no Args column.
  const cuprof::event_averages by_name = cuprof::key_averages(t);
  REQUIRE(by_name.find("gemm", cuprof::row_kind::cpu_scope));
  CHECK(by_name.find("gemm", cuprof::row_kind::cpu_scope)->count == 3);
  CHECK(by_name.table("", -1).find("Args") == std::string::npos);
  // By args: a row per shape, CPU and GPU extent alike.
  const cuprof::event_averages by_args = cuprof::key_averages(t, cuprof::group_by::args);
  std::map<std::string, std::uint64_t> gemm_rows, gpu_rows;
  for (const auto& r : by_args.rows()) {
    if (r.key != "gemm") continue;
    (r.kind == cuprof::row_kind::cpu_scope ? gemm_rows : gpu_rows)[r.args] = r.count;
  }
  CHECK(gemm_rows == std::map<std::string, std::uint64_t>{{"M=1024 N=1024 K=1024", 1}, {"M=4096 N=4096 K=4096", 2}});
  CHECK(gpu_rows == gemm_rows);
  const std::string table = by_args.table("", -1);
  REQUIRE(table.find(" Args  \n") != std::string::npos);  // the last column, after the calls
  CHECK(table.find("# of Calls") < table.find(" Args  \n"));
  CHECK(table.find("M=4096 N=4096 K=4096") != std::string::npos);

  // Torch: "Input Dims" is the argument; its bookkeeping args (Ev Idx, ...) are not.
  const cuprof::loaded_trace torch = cuprof::parse_trace(torch_shapes_trace, "torch");
  const cuprof::event_averages shapes = cuprof::key_averages(torch.t, cuprof::group_by::args);
  std::map<std::string, std::uint64_t> mm;
  for (const auto& r : shapes.rows())
    if (r.key == "aten::mm") mm[r.args] = r.count;
  CHECK(mm == std::map<std::string, std::uint64_t>{{"[[128, 128], [128, 128]]", 1}, {"[[64, 64], [64, 64]]", 2}});
  REQUIRE(shapes.find("step", cuprof::row_kind::cpu_scope));
  CHECK(shapes.find("step", cuprof::row_kind::cpu_scope)->args.empty());
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

TEST_CASE("cli: table --group-by args; a bad --group-by value is a usage error listing the valid ones") {
  temp_dir dir;
  const std::string path = dir.file("sized.json");
  write_file(path, sized_trace);
  const cli_run grouped = cli({"table", path, "--group-by", "args", "--wide"});
  CHECK(grouped.rc == 0);
  CHECK(grouped.out.find("Args") != std::string::npos);
  CHECK(grouped.out.find("M=1024 N=1024 K=1024") != std::string::npos);
  const cli_run by_name = cli({"table", path, "--group-by=name", "--wide"});
  CHECK(by_name.out == cli({"table", path, "--wide"}).out);
  CHECK(by_name.out.find("Args") == std::string::npos);
  const cli_run csv = cli({"table", path, "--group-by", "args", "--format", "csv"});
  CHECK(csv.out.rfind("name,kind,calls,args,", 0) == 0);
  CHECK(csv.out.find("gemm,cpu_scope,2,M=4096 N=4096 K=4096,") != std::string::npos);
  const cli_run bad = cli({"table", path, "--group-by", "shape"});
  CHECK(bad.rc == 2);
  CHECK(bad.out.empty());
  CHECK(bad.err.find("--group-by takes name or args, not 'shape'") != std::string::npos);
  // The torch tables stay torch's, byte for byte, with --group-by name.
  for (const char* size : {"64", "4096"}) {
    const std::string base = std::string("torch_matmul_add_") + size;
    CHECK(cli({"table", kineto(base + ".json"), "--group-by", "name", "--sort", "cuda_time_total", "--wide"}).out ==
          cli({"table", kineto(base + ".json"), "--sort", "cuda_time_total", "--wide"}).out);
  }
}
