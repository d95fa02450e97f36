// Atomic file output: bytes go to a temporary file beside the target, which is
// renamed over the target only once everything was written and flushed. A
// failure at any point removes the temporary file and leaves an existing
// target as it was. Paths ending in ".gz" are gzip-compressed.
#pragma once

#include "../error.hpp"

#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>

namespace cuprof::detail {

inline bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

class atomic_file {
 public:
  explicit atomic_file(std::string path) : path_(std::move(path)), gzip_(ends_with(path_, ".gz")) {
    if (path_.empty()) throw error("cannot write a trace to an empty path");
    struct stat st;
    if (::stat(path_.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
      throw error("cannot write '" + path_ + "': it exists and is not a regular file");
    // Unique per export, so concurrent exports to one path each write their own file.
    static std::atomic<unsigned> exports{0};
    tmp_path_ = path_ + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(exports.fetch_add(1));
    errno = 0;
    if (gzip_) {
      gz_ = gzopen(tmp_path_.c_str(), "wb1");
      if (!gz_) fail("cannot create");
    } else {
      file_ = std::fopen(tmp_path_.c_str(), "wb");
      if (!file_) fail("cannot create");
    }
  }
  atomic_file(const atomic_file&) = delete;
  atomic_file& operator=(const atomic_file&) = delete;
  ~atomic_file() { discard(); }

  void write(const char* data, std::size_t n) {
    if (n == 0) return;
    errno = 0;
    if (gzip_) {
      if (gzwrite(gz_, data, unsigned(n)) != int(n)) fail("cannot write");
    } else if (std::fwrite(data, 1, n, file_) != n) {
      fail("cannot write");
    }
  }

  // Flushes, closes and renames into place. Throws, leaving the target intact, on failure.
  void commit() {
    errno = 0;
    if (gzip_) {
      const int rc = gzclose(gz_);
      gz_ = nullptr;
      if (rc != Z_OK) fail("cannot write");
    } else {
      const bool ok = std::fflush(file_) == 0;
      const int saved = errno;
      const bool closed = std::fclose(file_) == 0;
      file_ = nullptr;
      errno = saved ? saved : errno;
      if (!ok || !closed) fail("cannot write");
    }
    if (std::rename(tmp_path_.c_str(), path_.c_str()) != 0) fail("cannot rename the temporary file onto");
    tmp_path_.clear();
  }

  const std::string& path() const noexcept { return path_; }

 private:
  [[noreturn]] void fail(const char* what) {
    const int saved = errno;
    discard();
    std::string msg = std::string(what) + " '" + path_ + "'";
    if (saved) msg += std::string(": ") + std::strerror(saved);
    throw error(msg);
  }
  void discard() noexcept {
    if (gz_) gzclose(gz_);
    if (file_) std::fclose(file_);
    gz_ = nullptr;
    file_ = nullptr;
    if (!tmp_path_.empty()) ::unlink(tmp_path_.c_str());
    tmp_path_.clear();
  }

  std::string path_;
  std::string tmp_path_;
  bool gzip_;
  std::FILE* file_ = nullptr;
  gzFile gz_ = nullptr;
};

}  // namespace cuprof::detail
