// `cuprof insights DIR` and `cuprof table DIR` on several ranks' traces, in
// process: the fixtures of tests/data/ranks, several files named, a directory
// of one trace, and hostile directories (a symlink loop, files that are not
// traces, a huge rank number, names with escape sequences and formulas).

#include <cuprof/analysis.hpp>

#include "support/cli.hpp"
#include "support/files.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <filesystem>
#include <string>

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace cuprof_test;

namespace {

std::string ranks_dir(const std::string& name) { return (source_dir() / "tests/data/ranks" / name).string(); }

std::string replaced(std::string s, const std::string& from, const std::string& to) {
  const std::size_t at = s.find(from);
  REQUIRE(at != std::string::npos);
  return s.replace(at, from.size(), to);
}

std::size_t count_of(const std::string& s, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_SUITE("cli") {

TEST_CASE("insights DIR: the ranks, the straggler per step and the exposed communication of the fixtures") {
  const cli_run r = cli({"insights", ranks_dir("same_host")});
  CHECK(r.rc == 0);
  CHECK(r.err.empty());
  CHECK(r.out.find("cuprof insights: 2 traces of 2 ranks on 1 host\n") == 0);
  CHECK(r.out.find("[straggler] rank 1 is the straggler: it reaches 6 of 6 all-reduces last, 160.000us late per step on average; "
                   "rank 0 waits 16.0% of the step") != std::string::npos);
  CHECK(r.out.find("  ProfilerStep#2: rank 1 last in 2 of 2, 160.000us late; rank 0 waited 160.000us (16.0% of its step)\n") !=
        std::string::npos);
  CHECK(r.out.find("       0  node-a                2.250ms      1.200ms      1.050ms    570.000us    28.6%") !=
        std::string::npos);
  CHECK(r.out.find("one clock, the reference; collective ends differ from rank 0's by a median of 0.000us, ±0.000us over 6 "
                   "collectives (no offset applied)") != std::string::npos);
  // The same from the two files named.
  const cli_run files = cli({"insights", ranks_dir("same_host") + "/rank0.json", ranks_dir("same_host") + "/rank1.json"});
  CHECK(files.rc == 0);
  CHECK(files.out == r.out);
  const cli_run hosts = cli({"insights", ranks_dir("two_hosts")});
  CHECK(hosts.rc == 0);
  CHECK(hosts.out.find("[clock offset] host node-b's clock is 3.201ms ahead of host node-a's, ±3.000us from 6 collectives") !=
        std::string::npos);
  CHECK(hosts.out.find("158.000us late per step on average") != std::string::npos);
}

TEST_CASE("table DIR: a row per rank; csv and json carry the same figures") {
  const cli_run t = cli({"table", ranks_dir("same_host")});
  CHECK(t.rc == 0);
  CHECK(t.out.find("  rank 0: all-reduce 6x 1.050ms (24 MiB)\n  rank 1: all-reduce 6x 570.000us\n") != std::string::npos);
  const cli_run csv = cli({"table", ranks_dir("same_host"), "--format", "csv"});
  CHECK(csv.rc == 0);
  CHECK(csv.out ==
        "rank,host,traces,steps,gpu_us,compute_us,collective_us,comm_us,exposed_us,exposed_after_wait_us,overlap_pct,waiting_us,"
        "last_in,matched,late_us,clock_offset_us\n"
        "0,node-a,1,3,2250,1200,1050,1050,750,570,28.571,480,0,6,0,0.000\n"
        "1,node-a,1,3,2070,1500,570,570,420,420,26.316,0,6,6,480,0.000\n");
  const json j = json::parse(cli({"table", ranks_dir("two_hosts"), "--format", "json"}).out);
  CHECK(j["hosts"] == 2);
  CHECK(j["ranks"][1]["clock_offset_us"] == 3201.0);
  CHECK(j["clocks"][1]["spread_us"] == 3.0);
  const json i = json::parse(cli({"insights", ranks_dir("two_hosts"), "--format", "json"}).out);
  CHECK(i["straggler"] == 1);
  CHECK(i["groups"].size() == 6);  // 3 steps x 2 ranks
  CHECK(i["findings"].size() == 3);
  const cli_run icsv = cli({"insights", ranks_dir("two_hosts"), "--format", "csv"});
  CHECK(icsv.out.find("kind,headline,details,where,cause,cost_us") == 0);
  CHECK(lines(icsv.out) == 4);
}

TEST_CASE("insights DIR: one trace in a directory is the single-trace report; no trace is an error") {
  temp_dir d;
  fs::copy_file(ranks_dir("same_host") + "/rank0.json", d.file("rank0.json"));
  const cli_run one = cli({"insights", d.path.string()});
  const cli_run file = cli({"insights", d.file("rank0.json")});
  CHECK(one.rc == 0);
  CHECK(one.out == file.out);
  temp_dir empty;
  write_file(empty.file("notes.txt"), "not a trace\n");
  for (const char* command : {"insights", "table"}) {
    const cli_run none = cli({command, empty.path.string()});
    CHECK(none.rc == 1);
    CHECK(none.err.find("notes.txt: skipped: not a .json or .json.gz file\n") != std::string::npos);
    CHECK(none.err.find(": no trace in the directory (a .json or .json.gz Chrome trace, one per rank)\n") != std::string::npos);
  }
}

TEST_CASE("insights DIR: a symlink loop, a link to itself, a subdirectory and files that are no trace are skipped, a line each") {
  temp_dir d;
  fs::copy_file(ranks_dir("same_host") + "/rank0.json", d.file("rank0.json"));
  fs::copy_file(ranks_dir("same_host") + "/rank1.json", d.file("rank1.json"));
  fs::create_symlink("loop.json", d.file("loop.json"));  // ELOOP
  fs::create_directory_symlink(".", d.file("self"));
  fs::create_directory(d.file("sub"));
  write_file(d.file("README"), "about these traces\n");
  write_file(d.file("bad.json"), "{\"traceEvents\": [1, 2]}");
  write_file(d.file("zeros.json"), std::string(4096, '\0'));
  for (const char* command : {"insights", "table"}) {
    const cli_run r = cli({command, d.path.string()});
    CHECK(r.rc == 0);
    CHECK(r.out.find("2 traces of 2 ranks on 1 host") != std::string::npos);
    CHECK(lines(r.err) == 6);
    CHECK(count_of(r.err, "cuprof: ") == 6);
    CHECK(r.err.find("loop.json: skipped: ") != std::string::npos);
    CHECK(r.err.find("self: skipped: a directory") != std::string::npos);
    CHECK(r.err.find("README: skipped: not a .json or .json.gz file") != std::string::npos);
    CHECK(r.err.find("skipped: " + d.file("bad.json")) != std::string::npos);
  }
}

TEST_CASE("insights DIR: a huge rank number, two hosts with one rank each, hostile host names stay data") {
  temp_dir d;
  const std::string r0 = slurp(ranks_dir("two_hosts") + "/rank0.json");
  const std::string r1 = slurp(ranks_dir("two_hosts") + "/rank1.json");
  write_file(d.file("rank0.json"),
             replaced(r0, "\"hostName\": \"node-a\"", "\"hostName\": \"=HYPERLINK(\\\"x\\\")\\u001b[31m\""));
  write_file(d.file("rank1.json"), replaced(r1, "\"rank\": 1,", "\"rank\": 1099511627776,"));
  const cli_run r = cli({"insights", d.path.string()});
  CHECK(r.rc == 0);
  CHECK(r.out.find("rank 1099511627776 is the straggler") != std::string::npos);
  CHECK(r.out.find('\x1b') == std::string::npos);
  CHECK(r.out.find("host node-b's clock is 3.201ms ahead of host =HYPERLINK") != std::string::npos);
  const cli_run csv = cli({"table", d.path.string(), "--format", "csv"});
  CHECK(csv.rc == 0);
  CHECK(csv.out.find("\n0,\"'=HYPERLINK(\"\"x\"\")\\x1b[31m\",") != std::string::npos);
  CHECK(csv.out.find("\n1099511627776,node-b,") != std::string::npos);
  CHECK(json::parse(cli({"insights", d.path.string(), "--format", "json"}).out)["straggler"] == 1099511627776ll);
}

}  // TEST_SUITE("cli")
