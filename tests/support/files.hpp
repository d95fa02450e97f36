// Files for the tests: the repository's test data (tests/data/), reading and
// writing files whole, gzip, and temporary directories.
#pragma once

#include <doctest/doctest.h>

#include <stdlib.h>
#include <zlib.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

namespace cuprof_test {

namespace fs = std::filesystem;

// The repository's root, where the tests find tests/data/ and docs/.
inline fs::path source_dir() { return CUPROF_TEST_SOURCE_DIR; }

// A trace recorded by cuprof on a GPU (tests/data/gpu/).
inline std::string gpu_trace(const std::string& name) { return (source_dir() / "tests/data/gpu" / name).string(); }
// A torch.profiler trace, or the table torch printed for it (tests/data/kineto/).
inline std::string kineto_trace(const std::string& name) { return (source_dir() / "tests/data/kineto" / name).string(); }

// A hand-made trace with GPU hardware metric samples (tests/data/metrics/).
inline std::string metrics_trace(const std::string& name) { return (source_dir() / "tests/data/metrics" / name).string(); }
// Every trace in tests/data/gpu.
inline const char* const gpu_traces[] = {"matmul_add_64.json", "matmul_add_4096.json", "linear_addmm.json",
                                         "mlp_unfused.json",   "mlp_fused.json",       "occupancy.json"};

// The file's bytes; empty when it cannot be read.
inline std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  REQUIRE(out.good());
}

// One gzip member of `bytes` (zlib, fastest level).
inline std::string gzip_of(const std::string& bytes) {
  uLongf size = compressBound(uLong(bytes.size())) + 32;
  std::string out(size, '\0');
  z_stream z{};
  REQUIRE(deflateInit2(&z, 1, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  z.avail_in = uInt(bytes.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = uInt(out.size());
  REQUIRE(deflate(&z, Z_FINISH) == Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

inline void write_gzip(const std::string& path, const std::string& bytes) { write_file(path, gzip_of(bytes)); }

// A gzip file's content, every member of it.
inline std::string gunzip_file(const fs::path& p) {
  gzFile f = gzopen(p.c_str(), "rb");
  REQUIRE(f != nullptr);
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) out.append(buf, std::size_t(n));
  CHECK(n == 0);
  gzclose(f);
  return out;
}

// The regular files in a directory, sorted; none when it is no directory.
inline std::vector<fs::path> files_in(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  for (auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file()) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

// A fresh directory, removed with everything in it (read-only parts included) at the end.
struct temp_dir {
  fs::path path;
  temp_dir() {
    std::string tmpl = (fs::temp_directory_path() / "cuprof-test-XXXXXX").string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~temp_dir() {
    std::error_code ec;
    fs::permissions(path, fs::perms::owner_all, fs::perm_options::add, ec);
    for (auto& e : fs::recursive_directory_iterator(path, ec))
      if (e.is_directory(ec)) fs::permissions(e.path(), fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(path, ec);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  std::string file(const std::string& name) const { return (path / name).string(); }
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    for (auto& e : fs::directory_iterator(path)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
};

// Keeps a document the writer made in CUPROF_TEST_KEEP_TRACES, where ctest's
// validate_kept_traces runs tests/validate_trace.py on it after this suite.
inline void keep_trace(const std::string& name, const std::string& text) {
  const char* dir = std::getenv("CUPROF_TEST_KEEP_TRACES");
  if (!dir || !*dir) return;
  fs::create_directories(dir);
  std::ofstream(fs::path(dir) / name, std::ios::binary) << text;
}

}  // namespace cuprof_test
