// The `cuprof` command, run in process: table, insights and diff on the
// acceptance traces (tests/data/), report formats, help and usage errors, the
// terminal, the diff gate, `cuprof run`; and the command against hostile input:
// spreadsheet formulas in CSV, escape sequences in names and paths, one
// "cuprof: " prefix a line. tests/cli/CMakeLists.txt runs the built executable.

#include <cuprof/cuprof.hpp>
#include <cuprof/analysis.hpp>
#include <cuprof/output/file_sink.hpp>

#include "support/cli.hpp"
#include "support/files.hpp"
#include "support/stderr_capture.hpp"
#include "support/trace_contract.hpp"
#include "support/traces.hpp"
#include "trace_reader.hpp"  // the reader's internals (src/analysis)

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace cuprof_test;

namespace {

bool has_control_byte(const std::string& s, bool newline_allowed) {
  for (char c : s) {
    const unsigned char u = static_cast<unsigned char>(c);
    if ((u < 0x20 && !(newline_allowed && c == '\n')) || u == 0x7F) return true;
  }
  return false;
}

const char* const cpu_only_json =
    R"({"traceEvents": [{"ph": "X", "cat": "user_annotation", "name": "work", "ts": 1.0, "dur": 5, "pid": 1, "tid": 1}]})";

}  // namespace

TEST_SUITE("cli") {

TEST_CASE("docs: the insights output shown in docs/guide.md is the command's") {
  const std::string guide = slurp(source_dir() / "docs/guide.md");
  const std::string intro = "(`cuprof insights tests/data/gpu/mlp_unfused.json`):\n\n```\n";
  const std::size_t from = guide.find(intro);
  REQUIRE(from != std::string::npos);
  const std::size_t begin = from + intro.size(), end = guide.find("\n```\n", begin);
  REQUIRE(end != std::string::npos);
  const std::string shown = guide.substr(begin, end - begin + 1);
  const std::string out = cli({"insights", gpu_trace("mlp_unfused.json")}).out;
  // The first line names the file as given; the rest is the same.
  CHECK(shown.substr(shown.find('\n')) == out.substr(out.find('\n')));
}

// ---- the command ------------------------------------------------------------------

TEST_CASE("cli: table, insights and diff on the acceptance traces") {
  const cli_run small = cli({"insights", gpu_trace("matmul_add_64.json")});
  CHECK(small.rc == 0);
  CHECK(small.out.find("Verdict: overhead-bound") != std::string::npos);
  const cli_run big = cli({"insights", gpu_trace("matmul_add_4096.json")});
  CHECK(big.out.find("Verdict: compute-bound") != std::string::npos);
  CHECK(big.out.find("[memset before GEMM] Memset (Device) of 4 bytes right before the GEMM "
                     "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT") != std::string::npos);
  const cli_run addmm = cli({"insights", gpu_trace("linear_addmm.json")});
  CHECK(addmm.out.find("[memcpy before GEMM] Memcpy DtoD (Device -> Device)") != std::string::npos);
  const cli_run diff = cli({"diff", gpu_trace("mlp_unfused.json"), gpu_trace("mlp_fused.json")});
  CHECK(diff.rc == 0);
  CHECK(diff.out.find("removed") != std::string::npos);
  CHECK(diff.out.find("map_kernel<gelu_op>") != std::string::npos);
  CHECK(diff.out.find("map_kernel<mul_op>") != std::string::npos);
  const cli_run table = cli({"table", gpu_trace("mlp_fused.json"), "--rows", "3", "--stats"});
  CHECK(table.rc == 0);
  CHECK(lines(table.out) == 3 + 3 + 1 + 2);  // separators and header, 3 rows, separator, footer
  CHECK(table.out.find("CUDA p95") != std::string::npos);
  const cli_run every = cli({"table", gpu_trace("mlp_fused.json"), "--rows=all", "--sort=none"});
  CHECK(every.rc == 0);
  CHECK(every.out.find("ProfilerStep*") < every.out.find("cudaMemsetAsync"));  // first-occurrence order
  for (const char* f : gpu_traces) {
    CAPTURE(f);
    for (const char* cmd : {"table", "insights"}) CHECK(cli({cmd, gpu_trace(f)}).rc == 0);
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
      {"table", "a.json", "--bogus"},
      {"table", "a.json", "--rows"},
      {"table", "a.json", "--rows", "-7"},
      {"table", "a.json", "--stats=yes"},
      {"table", gpu_trace("matmul_add_64.json"), "--sort", "fastest"},
      {"insights"},
      {"insights", "a.json", "--kernels", "x"},
      {"diff", "a.json"},
      {"diff", "a.json", "b.json", "c.json"},
      {"trigger"},
      {"trigger", "1", "--duration", "2", "--steps", "3"},
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
  CHECK(cli({"table", gpu_trace("matmul_add_64.json"), "--sort", "fastest"}).err.find("valid keys: cpu_time") !=
        std::string::npos);
}

TEST_CASE("text output: escape sequences in names reach no terminal (table, insights, diff); cuts keep UTF-8 whole") {
  using cuprof::detail::terminal_safe;
  CHECK(terminal_safe("aten::mm") == "aten::mm");
  CHECK(terminal_safe("void k<float>(float*, int) [\xc3\xa9\xe2\x82\xac]") ==
        "void k<float>(float*, int) [\xc3\xa9\xe2\x82\xac]");
  CHECK(terminal_safe(std::string("a\x1b]0;t\x07z\r\n\t\x7f\0b", 14)) == "a\\x1b]0;t\\x07z\\x0d\\x0a\\x09\\x7f\\x00b");
  CHECK(terminal_safe("c1 \xc2\x9b"
                      "31m") == "c1 \\xc2\\x9b31m");  // U+009B, the one-byte CSI
  CHECK(cuprof::detail::shorten("short", 10) == "short");
  std::string accents;
  for (int i = 0; i < 20; ++i) accents += "\xc3\xa9";  // 20 characters, 40 bytes
  CHECK(cuprof::detail::shorten(accents, 20) == accents);
  CHECK(cuprof::detail::shorten(accents, 10) == accents.substr(0, 14) + "...");  // 7 whole characters

  // A real trace whose kernel and scope names carry a window-title OSC, a colour, CR, NUL and DEL.
  temp_dir dir;
  std::string hostile = slurp(gpu_trace("matmul_add_4096.json"));
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
  const std::vector<std::vector<std::string>> commands = {{"table", dir.file("hostile.json")},
                                                          {"table", dir.file("hostile.json"), "--kernels", "--stats"},
                                                          {"insights", dir.file("hostile.json")},
                                                          {"diff", gpu_trace("matmul_add_4096.json"), dir.file("hostile.json")}};
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
      CHECK(r.err.rfind(std::string("cuprof: ") + option + "=", 0) == 0);
      CHECK(r.err.find(" is not a number of seconds from 0 to 1e7\n") != std::string::npos);
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
  write_file(dir.file("truncated.json"), slurp(gpu_trace("matmul_add_64.json")).substr(0, 4000));
  write_file(dir.file("types.json"),
             R"({"traceEvents": [{"ph": "X", "cat": "cuda_runtime", "name": "x", "ts": 1, "dur": 1, "pid": 1, "tid": [1]}]})");
  write_file(dir.file("one.json.gz"), "\x1f");
  const std::vector<std::string> inputs = {dir.file("empty.json"), dir.file("truncated.json"), dir.file("types.json"),
                                           dir.path.string(),      dir.file("missing.json"),   dir.file("one.json.gz")};
  for (const std::string& in : inputs) {
    CAPTURE(in);
    for (const std::vector<std::string>& args : {std::vector<std::string>{"table", in}, std::vector<std::string>{"insights", in},
                                                 std::vector<std::string>{"diff", gpu_trace("mlp_fused.json"), in},
                                                 std::vector<std::string>{"diff", in, gpu_trace("mlp_fused.json")}}) {
      const cli_run r = cli(args);
      CHECK(r.rc == 1);
      CHECK(r.out.empty());
      CHECK(r.err.rfind("cuprof: ", 0) == 0);
      // table and insights read a directory's traces: a line for each file skipped, then that there is none.
      const bool directory = in == dir.path.string() && args[0] != "diff";
      CHECK(lines(r.err) == (directory ? 5 : 1));
      if (directory) CHECK(r.err.find(": no trace in the directory") != std::string::npos);
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

}  // namespace

TEST_CASE("cli: --format text is the default byte for byte; csv is a header and a row per item; json parses") {
  for (const char* f : gpu_traces) {
    CAPTURE(f);
    const std::string path = gpu_trace(f);
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{"table", path, "--stats", "--kernels"}, std::vector<std::string>{"insights", path},
          std::vector<std::string>{"diff", gpu_trace("mlp_fused.json"), path}}) {
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
  const cli_run csv = cli({"table", gpu_trace("matmul_add_64.json"), "--format", "csv"});
  const std::string kernel =
      "void ex::map_kernel<add_op>(add_op, __nv_bfloat16*, __nv_bfloat16 const*, __nv_bfloat16 const*, unsigned long)";
  CHECK(csv.out.find("\n\"" + kernel + "\",gpu_work,3,") != std::string::npos);
  CHECK(cuprof::cli::csv_field(cuprof::cli::str("say \"hi\", twice")) == "\"say \"\"hi\"\", twice\"");
  CHECK(cuprof::cli::csv_field(cuprof::cli::str(" padded")) == "\" padded\"");
  CHECK(cuprof::cli::csv_field(cuprof::cli::str("line\nbreak")) == "line\\x0abreak");
  const json doc = json::parse(cli({"table", gpu_trace("matmul_add_64.json"), "--format", "json", "--rows", "all"}).out);
  bool found = false;
  for (const json& row : doc["rows"]) found |= row["name"] == kernel && row["kind"] == "gpu_work" && row["calls"] == 3;
  CHECK(found);
  CHECK(cli({"table", gpu_trace("matmul_add_64.json"), "--format", "yaml"}).rc == 2);

  // Names with escape sequences: JSON escapes them (the trace writer's escaping) and reads back the same.
  temp_dir dir;
  std::string hostile = slurp(gpu_trace("matmul_add_4096.json"));
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
  for (const std::string& path : {gpu_trace("matmul_add_4096.json"), gpu_trace("occupancy.json"),
                                  kineto_trace("torch_matmul_add_4096.json"), kineto_trace("torch_geglu_mlp.json")}) {
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
  const std::string path = kineto_trace("torch_matmul_add_4096.json");
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
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"help"}, {"help", "--help"}, {"help", "-h"}, {"help", "help"}, {"-h"}}) {
    const cli_run r = cli(args);
    CHECK(r.rc == 0);
    CHECK(r.out == main_help);
    CHECK(r.err.empty());
  }
  for (const char* cmd : {"table", "insights", "diff", "run", "trigger"}) {
    CAPTURE(cmd);
    const cli_run help = cli({"help", cmd});
    CHECK(help.rc == 0);
    CHECK(help.out.rfind(std::string("usage: cuprof ") + cmd, 0) == 0);
    for (const std::vector<std::string>& args : {std::vector<std::string>{cmd, "--help"},
                                                 {cmd, "-h"},
                                                 {cmd, "--bogus", "--help"},
                                                 {cmd, "x.json", "--rows", "--help"}}) {
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

TEST_CASE("cli: each command's options list is what its parser takes and what its help lists") {
  for (const cuprof::cli::command& c : cuprof::cli::commands) {
    CAPTURE(c.name);
    const std::string help = cli({c.name, "--help"}).out;
    REQUIRE(!c.options.empty());
    for (const cuprof::cli::command_option& o : c.options) {
      const std::string option = "--" + std::string(o.name);
      CAPTURE(option);
      // A second spelling (no help of its own) is taken but not listed.
      const std::string listed = "\n  " + option + (o.value.empty() || o.value[0] == '[' ? "" : " ") + std::string(o.value);
      CHECK((help.find(listed) != std::string::npos) == !o.help.empty());
      if (std::string(c.name) == "run") continue;  // run's parser: the settings test below
      const std::vector<std::string> given = {"cuprof", c.name, option, "v"};
      if (o.value.empty()) {
        CHECK(cuprof::cli::parse(given, 2, c.options, c.name).options.front().first == o.name);
        CHECK_THROWS_AS(cuprof::cli::parse({"cuprof", c.name, option + "=v"}, 2, c.options, c.name), cuprof::cli::usage_error);
      } else {
        const cuprof::cli::parsed p = cuprof::cli::parse(given, 2, c.options, c.name);
        REQUIRE(p.options.size() == 1);
        CHECK(p.options[0].second == "v");
        CHECK(cuprof::cli::parse({"cuprof", c.name, option + "=w"}, 2, c.options, c.name).options[0].second == "w");
        CHECK_THROWS_AS(cuprof::cli::parse({"cuprof", c.name, option}, 2, c.options, c.name), cuprof::cli::usage_error);
      }
    }
    CHECK_THROWS_AS(cuprof::cli::parse({"cuprof", c.name, "--bogus"}, 2, c.options, c.name), cuprof::cli::usage_error);
  }
}

TEST_CASE("cli: a help entry wraps its text at its spaces by column 96, breaks at its newlines, aligns it at column 22") {
  const std::string text =
      "the quick brown fox jumps over the lazy dog and keeps on running past the farm, the river and the hills\n"
      "sm__warps_active_realtime.avg.pct_of_peak_sustained_active_and_a_word_longer_than_any_line_of_help ok";
  std::string out;
  cuprof::cli::append_help_entry(out, "--opt V", text);
  std::vector<std::string> lines;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  REQUIRE(lines.size() == 4);
  CHECK(lines[0].rfind("  --opt V" + std::string(13, ' ') + "the quick", 0) == 0);
  std::string words;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const std::string line = lines[i];
    if (i > 0) CHECK(line.rfind(std::string(22, ' '), 0) == 0);
    CHECK(line.find_first_not_of(' ', 22) == 22);
    if (line.find("_and_a_word_longer") == std::string::npos) CHECK(line.size() <= 96);
    words += (words.empty() ? "" : " ") + line.substr(22);
  }
  // The first paragraph fills its lines: the next word would not have fit.
  CHECK(lines[0].size() + 1 + lines[1].substr(22, lines[1].find(' ', 22) - 22).size() > 96);
  CHECK(lines[2].rfind(std::string(22, ' ') + "sm__warps", 0) == 0);  // the newline broke the line
  CHECK(lines[3] == std::string(22, ' ') + "ok");                     // the long word stood alone
  std::string expected = text;
  std::replace(expected.begin(), expected.end(), '\n', ' ');
  CHECK(words == expected);
  // A head wider than the column puts the text on the next line.
  out.clear();
  cuprof::cli::append_help_entry(out, "--a-very-long-option VALUE", "text");
  CHECK(out == "  --a-very-long-option VALUE\n" + std::string(22, ' ') + "text\n");
}

TEST_CASE("cli: torch's memory sort keys are refused on a trace without memory figures, saying how to record them") {
  for (const char* key : {"self_cpu_memory_usage", "cpu_memory_usage", "cuda_memory_usage", "self_cuda_memory_usage",
                          "device_memory_usage", "self_device_memory_usage"}) {
    CAPTURE(key);
    const cli_run r = cli({"table", gpu_trace("matmul_add_64.json"), "--sort", key});
    CHECK(r.rc == 1);  // a valid key this trace cannot honour: an error, not a usage error
    CHECK(r.out.empty());
    CHECK(r.err.rfind("cuprof: cannot sort by '" + std::string(key) + "': this trace has no memory figures", 0) == 0);
    CHECK(r.err.find("cuprof run --memory") != std::string::npos);
  }
}

TEST_CASE("cli: on a terminal the table fits its width by narrowing Name; --wide and pipes keep torch's layout") {
  const std::string path = kineto_trace("torch_matmul_add_4096.json");
  const std::string torch = slurp(kineto_trace("torch_matmul_add_4096.txt"));
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
    (void)cuprof::read_trace_file(gpu_trace("matmul_add_4096.json"), line.hook());
  }
  const std::string shown = drain(fds[0]);
  CHECK(shown.rfind("\rcuprof: reading t.json: ", 0) == 0);
  CHECK(cuprof::detail::ends_with(shown, "\r\x1b[K"));
  ::close(fds[0]);
  ::close(fds[1]);
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
  const std::string a = gpu_trace("mlp_unfused.json"), b = gpu_trace("mlp_fused.json");
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
  const cuprof::trace_diff occ = cuprof::diff_traces(cuprof::read_trace_file(gpu_trace("matmul_add_64.json")).t,
                                                     cuprof::read_trace_file(gpu_trace("occupancy.json")).t);
  for (const cuprof::growth& g : cuprof::check_growth(occ, cuprof::diff_metric::cpu, 0, 100).grew_most)
    CHECK_FALSE(cuprof::detail::is_cpu_blocking_synchronization(g.name));
  for (const std::vector<std::string>& bad : {std::vector<std::string>{"diff", a, b, "--metric", "cpu"},
                                              {"diff", a, b, "--fail-above", "-1"},
                                              {"diff", a, b, "--fail-above", "nan"},
                                              {"diff", a, b, "--fail-above", "5", "--metric", "mem"},
                                              {"diff", "-", "-"}}) {
    const cli_run r = cli(bad);
    CHECK(r.rc == 2);
    CHECK(r.out.empty());
  }
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
    CHECK(cli({"table", kineto_trace(base + ".json"), "--group-by", "name", "--sort", "cuda_time_total", "--wide"}).out ==
          cli({"table", kineto_trace(base + ".json"), "--sort", "cuda_time_total", "--wide"}).out);
  }
}

TEST_CASE("cli: table --metrics on a trace with GPU metrics says nothing on stderr; --help and insights name the counters") {
  const cli_run with = cli({"table", metrics_trace("gpu_metrics.json"), "--metrics", "--wide"});
  CHECK(with.rc == 0);
  CHECK(with.err.empty());
  CHECK(with.out.find("tiny_kernel()") != std::string::npos);
  const cli_run without = cli({"table", gpu_trace("mlp_unfused.json"), "--metrics", "--wide"});
  CHECK(without.rc == 0);
  CHECK(without.err == "cuprof: " + gpu_trace("mlp_unfused.json") +
                           ": no GPU hardware metrics in the trace (recorded without metric sampling): no metric columns\n");
  CHECK(cli({"table", metrics_trace("gpu_metrics.json"), "--wide"}).err.empty());
  CHECK(cli({"table", "--help"}).out.find("  --metrics           add the GPU hardware metrics' averages") != std::string::npos);
  const std::string insights = cli({"insights", metrics_trace("gpu_metrics.json")}).out;
  CHECK(insights.find("[tensor-bound kernel] nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT: tensor pipe 72% of peak, SM "
                      "85%, DRAM 20%, 10 samples; 1 call: 200.000us\n") != std::string::npos);
}

TEST_CASE("diff --fail-above: a side without GPU time, or whose CUDA tracing was off, cannot be compared (exit 2)") {
  temp_dir dir;
  const std::string gpu = gpu_trace("matmul_add_64.json");
  write_file(dir.file("cpu.json"), cpu_only_json);
  write_file(dir.file("empty.json"), R"({"traceEvents": []})");
  // A cuprof trace whose metadata says CUDA tracing was off.
  std::string off = slurp(gpu);
  const std::string on = "\"cuda_status\": \"on\"";
  REQUIRE(off.find(on) != std::string::npos);
  off.replace(off.find(on), on.size(), "\"cuda_status\": \"no CUDA driver (libcuda.so.1 not found)\"");
  write_file(dir.file("off.json"), off);

  for (const auto& [a, b, side] : {std::tuple{gpu, dir.file("cpu.json"), "B"}, std::tuple{dir.file("cpu.json"), gpu, "A"},
                                   std::tuple{gpu, dir.file("empty.json"), "B"}, std::tuple{gpu, dir.file("off.json"), "B"},
                                   std::tuple{dir.file("off.json"), gpu, "A"}}) {
    CAPTURE(a);
    CAPTURE(b);
    for (const char* format : {"text", "json", "csv"}) {
      CAPTURE(format);
      const cli_run r = cli({"diff", a, b, "--fail-above", "5", "--format", format});
      CHECK(r.rc == 2);
      CHECK(r.out.empty());
      CHECK(r.err.rfind(std::string("cuprof: --fail-above cannot compare GPU time: ") + side + " ", 0) == 0);
      CHECK(r.out.find("passed") == std::string::npos);
    }
  }
  const cli_run off_said = cli({"diff", gpu, dir.file("off.json"), "--fail-above", "5"});
  CHECK(off_said.err.find("CUDA tracing was off (no CUDA driver (libcuda.so.1 not found))") != std::string::npos);
  CHECK(cli({"diff", gpu, dir.file("empty.json"), "--fail-above", "5"}).err.find("B has no GPU time") != std::string::npos);

  // The CPU metric: both sides need CPU time, and CUDA tracing alike on both (synchronize
  // calls leave CPU time only where CUDA calls were recorded).
  CHECK(cli({"diff", gpu, dir.file("empty.json"), "--fail-above", "5", "--metric", "cpu"}).rc == 2);
  const cli_run mixed = cli({"diff", gpu, dir.file("off.json"), "--fail-above", "5", "--metric", "cpu"});
  CHECK(mixed.rc == 2);
  CHECK(mixed.err.rfind("cuprof: --fail-above cannot compare CPU time: ", 0) == 0);
  CHECK(cli({"diff", dir.file("cpu.json"), dir.file("cpu.json"), "--fail-above", "5", "--metric", "cpu"}).rc == 0);
  CHECK(cli({"diff", dir.file("off.json"), dir.file("off.json"), "--fail-above", "5", "--metric", "cpu"}).rc == 0);
  // Without the gate, such traces still diff; with GPU time on both sides the gate runs as before.
  CHECK(cli({"diff", gpu, dir.file("cpu.json")}).rc == 0);
  CHECK(cli({"diff", gpu, gpu_trace("matmul_add_4096.json"), "--fail-above", "5"}).rc == 3);
  CHECK(cli({"diff", "--help"}).out.find("exit 2 when either trace lacks") != std::string::npos);
}

// ---- CSV cells that a spreadsheet would run as formulas --------------------------

TEST_CASE("csv: names starting with = + - @ tab or CR are written as text, quoted, after a single quote") {
  using cuprof::cli::csv_field;
  using cuprof::cli::str;
  CHECK(csv_field(str("=HYPERLINK(\"http://x\",\"y\")")) == "\"'=HYPERLINK(\"\"http://x\"\",\"\"y\"\")\"");
  CHECK(csv_field(str("+1+2")) == "\"'+1+2\"");
  CHECK(csv_field(str("-2+3")) == "\"'-2+3\"");
  CHECK(csv_field(str("@SUM(A1)")) == "\"'@SUM(A1)\"");
  CHECK(csv_field(str("\t=1")) == "\"'\\x09=1\"");
  CHECK(csv_field(str("\r=1")) == "\"'\\x0d=1\"");
  CHECK(csv_field(str("a=b")) == "a=b");  // only a leading character starts a formula
  CHECK(csv_field(str("aten::mm")) == "aten::mm");
  CHECK(csv_field(cuprof::cli::real(-1.5)) == "-1.500");  // numbers stay numbers

  temp_dir dir;
  write_file(dir.file("formula.json"), R"json({"traceEvents": [
    {"ph": "X", "cat": "user_annotation", "name": "=cmd|' /C calc'!A0", "ts": 1, "dur": 5, "pid": 1, "tid": 1},
    {"ph": "X", "cat": "user_annotation", "name": "@SUM(1,2)", "ts": 10, "dur": 5, "pid": 1, "tid": 1}]})json");
  const cli_run r = cli({"table", dir.file("formula.json"), "--format", "csv"});
  REQUIRE(r.rc == 0);
  CHECK(r.out.find("\n\"'=cmd|' /C calc'!A0\",cpu_scope,1,") != std::string::npos);
  CHECK(r.out.find("\n\"'@SUM(1,2)\",cpu_scope,1,") != std::string::npos);
  CHECK(r.out.find("\n=") == std::string::npos);
  CHECK(r.out.find("\n@") == std::string::npos);
}

// ---- paths in messages ------------------------------------------------------------

TEST_CASE("messages: paths with escape sequences or line breaks are printed terminal-safe") {
  temp_dir dir;
  const std::string hostile = "t\x1b]0;owned\x07\n\x1b[2J";
  // The file sink's errors name the path.
  try {
    cuprof::detail::atomic_file file(dir.file("no/such/dir/" + hostile + ".json"));
    FAIL("created a file in a directory that does not exist");
  } catch (const cuprof::error& e) {
    const std::string what = e.what();
    CHECK(what.find("cannot create '") != std::string::npos);
    CHECK_FALSE(has_control_byte(what, false));
    CHECK(what.find("t\\x1b]0;owned\\x07\\x0a\\x1b[2J.json") != std::string::npos);
  }
  // "trace written to PATH".
  {
    cuprof::trace t;
    const std::string path = dir.file(hostile + ".json");
    cuprof_test::stderr_capture err;
    cuprof::export_chrome_trace(t, path);
    const std::string said = err.finish();
    CHECK(fs::exists(path));
    CHECK(said.find("trace written to ") != std::string::npos);
    CHECK_FALSE(has_control_byte(said.substr(0, said.size() - 1), false));  // one line
    CHECK(said.back() == '\n');
  }
  // The command's own lines naming a file, on stderr and stdout.
  write_file(dir.file(hostile + "empty.json"), R"({"traceEvents": []})");
  const cli_run table = cli({"table", dir.file(hostile + "empty.json")});
  CHECK(table.rc == 0);
  CHECK(table.err.find("no scopes, CUDA calls or GPU work in the trace") != std::string::npos);
  CHECK_FALSE(has_control_byte(table.err, true));
  CHECK(std::count(table.err.begin(), table.err.end(), '\n') == 1);
  write_file(dir.file(hostile + "cpu.json"), cpu_only_json);
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"insights", dir.file(hostile + "cpu.json")},
        std::vector<std::string>{"diff", dir.file(hostile + "cpu.json"), dir.file(hostile + "cpu.json")}}) {
    const cli_run r = cli(args);
    CHECK(r.rc == 0);
    CHECK(r.out.find("t\\x1b]0;owned\\x07\\x0a\\x1b[2Jcpu.json") != std::string::npos);
    CHECK_FALSE(has_control_byte(r.out, true));
  }
  const cli_run missing = cli({"table", dir.file(hostile + "missing.json")});
  CHECK(missing.rc == 1);
  CHECK_FALSE(has_control_byte(missing.err, true));
}

// ---- one prefix a line --------------------------------------------------------------

TEST_CASE("messages: an exception's message printed in a log line or by the command has one \"cuprof: \" prefix") {
  CHECK(cuprof::detail::message_of(cuprof::error("cannot create 'x'")) == "cannot create 'x'");
  CHECK(cuprof::detail::message_of(std::runtime_error("plain")) == "plain");
  CHECK(cuprof::detail::message_of(std::runtime_error("cuprof: cuprof: twice")) == "twice");
  const cli_run r = cli({"table", "/no/such/trace.json"});
  CHECK(r.err == "cuprof: cannot read '/no/such/trace.json': No such file or directory\n");
}

// ---- cuprof run's exit status when the program cannot run --------------------------

TEST_CASE("cli: run exits 126 for a program found but not executable (a directory), 127 for none") {
  temp_dir dir;
  write_file(dir.file("script.sh"), "#!/bin/sh\nexit 0\n");  // not executable: mode 0644
  ::chmod(dir.file("script.sh").c_str(), 0644);
  const std::string hostile = dir.file("no\x1b[2Jsuch");
  struct expectation {
    std::string program;
    int rc;
    const char* says;
  };
  for (const expectation& e :
       {expectation{dir.path.string(), 126, "Permission denied"}, expectation{dir.file("script.sh"), 126, "Permission denied"},
        expectation{dir.file("missing"), 127, "No such file or directory"},
        expectation{"cuprof-no-such-program-anywhere", 127, "No such file or directory"},
        expectation{hostile, 127, "No such file or directory"}}) {
    CAPTURE(e.program);
    cuprof::cli::launch_plan plan;
    plan.command = {e.program, "arg"};
    cuprof_test::stderr_capture err;
    const int rc = cuprof::cli::exec_plan(plan);  // returns only when the exec failed
    const std::string said = err.finish();
    CHECK(rc == e.rc);
    CHECK(said.rfind("cuprof: cannot run ", 0) == 0);
    CHECK(said.find(e.says) != std::string::npos);
    CHECK_FALSE(has_control_byte(said.substr(0, said.size() - 1), false));
  }
}

}  // TEST_SUITE("cli")

// The settings' one table (include/cuprof/runtime/settings.hpp) against everything that names them.
TEST_CASE("settings: cuprof run's help and options, the guide's variable table and the readers name the same settings") {
  using cuprof::detail::settings;
  std::set<std::string> table;
  for (const auto& s : settings) table.insert(std::string(s.variable));
  // cuprof run: each option in its help, and accepted (a flag alone, a value after it).
  const std::string help = cli({"run", "--help"}).out;
  for (const auto& s : settings) {
    if (s.option.empty()) continue;
    CAPTURE(s.option);
    CHECK(help.find("  " + std::string(s.option)) != std::string::npos);
    std::vector<std::string> args{"run", "--dry-run", "--inject", "/nonexistent.so", std::string(s.option)};
    if (!s.value.empty() && s.value[0] != '[') args.push_back("1");
    args.insert(args.end(), {"--", "prog"});
    CHECK(cli(args).err.find("unknown option") == std::string::npos);
  }
  // The guide's variable table (docs/guide.md, section 4) lists each one, and no other.
  std::ifstream guide(source_dir() / "docs/guide.md");
  std::set<std::string> documented;
  bool in_table = false;
  for (std::string line; std::getline(guide, line);) {
    if (line.rfind("## 4. Environment variables", 0) == 0) in_table = true;
    else if (in_table && line.rfind("## ", 0) == 0) break;
    if (!in_table || line.rfind("| `CUPROF_", 0) != 0) continue;
    const std::string first = line.substr(0, line.find(" | ", 2));  // the row's first cell
    for (std::size_t at = first.find("`CUPROF_"); at != std::string::npos; at = first.find("`CUPROF_", at + 1)) {
      const std::size_t end = first.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_", at + 8);
      documented.insert(first.substr(at + 1, end - at - 1));
    }
  }
  CHECK(documented == table);
  // The readers: read_settings asks for each setting with an option but the two the runtime reads
  // where they act, and every getenv("CUPROF_...") of the sources is a setting or one of cuprof's
  // own hand-offs between processes.
  std::set<std::string> asked;
  cuprof::detail::read_settings([&](const char* name) -> const char* {
    asked.insert(name);
    return nullptr;
  });
  std::set<std::string> with_option;
  for (const auto& s : settings)
    if (!s.option.empty() && s.variable != "CUPROF_TRACE" && s.variable != "CUPROF_TRACE_LAUNCHER")
      with_option.insert(std::string(s.variable));
  CHECK(asked == with_option);
  const std::set<std::string> hand_offs = {"CUPROF_ROOT_PID", "CUPROF_STARTED_PID", "CUPROF_RUN_DIR", "CUPROF_INJECT_LIBRARY"};
  const std::regex getenv_call(R"re(getenv\("(CUPROF_[A-Z0-9_]+)"\))re");
  for (const char* dir : {"include", "tools", "src"})
    for (const auto& entry : fs::recursive_directory_iterator(source_dir() / dir)) {
      if (!entry.is_regular_file()) continue;
      std::ifstream in(entry.path());
      const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      for (std::sregex_iterator m(text.begin(), text.end(), getenv_call), end; m != end; ++m) {
        CAPTURE(entry.path().string());
        const std::string name = (*m)[1];
        CHECK_MESSAGE((table.count(name) || hand_offs.count(name)), name);
      }
    }
}

TEST_CASE(
    "settings: every conflict gets the same answer from the environment (a warning, a fallback) and from cuprof run (refused)") {
  using variables = std::vector<std::pair<std::string, std::string>>;
  const std::vector<variables> conflicts = {
      {{"CUPROF_DELAY", "2"}, {"CUPROF_START_STEP", "3"}},
      {{"CUPROF_SLOW_STEPS", "2x"}, {"CUPROF_START_STEP", "3"}},
      {{"CUPROF_SLOW_STEPS", "2x"}, {"CUPROF_DELAY", "2"}},
      {{"CUPROF_CAPTURE_RANGE", "cuda"}, {"CUPROF_DELAY", "2"}},
      {{"CUPROF_CAPTURE_RANGE", "cuda"}, {"CUPROF_DURATION", "2"}},
      {{"CUPROF_CAPTURE_RANGE", "cuda"}, {"CUPROF_START_STEP", "3"}},
      {{"CUPROF_CAPTURE_RANGE", "nvtx:train"}, {"CUPROF_SLOW_STEPS", "2x"}},
      {{"CUPROF_STEPS", "3"}},
      {{"CUPROF_STEP_RANGE", "iter"}},
      {{"CUPROF_CAPTURE_RANGE_END", "repeat"}},
      {{"CUPROF_GPU_METRICS_INTERVAL", "50us"}},
      {{"CUPROF_GPU_METRICS_INTERVAL", "2s"}},  // needs the metrics: its value is not read
      {{"CUPROF_GPU_METRICS", "0"}, {"CUPROF_GPU_METRICS_INTERVAL", "2s"}},
      {{"CUPROF_GPU_METRICS", "1"}, {"CUPROF_GPU_METRICS_INTERVAL", "2s"}},
      {{"CUPROF_CAPTURE_RANGE", "nvtx:"}, {"CUPROF_CAPTURE_RANGE_END", "again"}},  // refused: the end is not read
      {{"CUPROF_CAPTURE_RANGE", "cuda"}, {"CUPROF_CAPTURE_RANGE_END", "again"}},
      {{"CUPROF_ACTIVITIES", "gpu"}},
      {{"CUPROF_DELAY", "soon"}},
      {{"CUPROF_TRACE_DETAIL", "full"}},
      {{"CUPROF_GPU_METRICS", "a/b"}},
      {{"CUPROF_CAPTURE_RANGE", "nvtx:"}},
  };
  for (const variables& vars : conflicts) {
    std::string names;
    std::vector<std::string> args{"run", "--dry-run", "--inject", "/nonexistent.so"};
    for (const auto& [name, value] : vars) {
      names += name + "=" + value + " ";
      const cuprof::detail::setting* s = cuprof::detail::find_setting(name);
      REQUIRE(s);
      args.push_back(std::string(s->option) + (s->value[0] == '[' ? "=" + value : ""));
      if (s->value[0] != '[') args.push_back(value);
    }
    CAPTURE(names);
    args.insert(args.end(), {"--", "prog"});
    const cuprof::detail::environment_config env = cuprof::detail::read_settings([&](const char* name) -> const char* {
      for (const auto& v : vars)
        if (v.first == name) return v.second.c_str();
      return nullptr;
    });
    REQUIRE(env.problems.size() == 1);
    CHECK(env.problems[0].find("; ") != std::string::npos);  // what, then what is done instead
    const cli_run r = cli(args);
    CHECK(r.rc == 2);
    CHECK(r.err.rfind("cuprof: " + cuprof::detail::as_options(env.problems[0]) + "\n", 0) == 0);
    CHECK(r.err.find("CUPROF_") == std::string::npos);
  }
}
