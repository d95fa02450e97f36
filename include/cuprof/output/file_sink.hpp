// Atomic file output: bytes go to a temporary file beside the target, which is
// renamed over the target only once everything was written. A
// failure at any point removes the temporary file and leaves an existing
// target as it was. Paths ending in ".gz" are for gzip data: the writer
// compresses it in independent blocks (gzip_compressor), each a complete gzip
// member; members concatenated are one valid gzip file (RFC 1952), which
// gzip, zlib's gzread, Python's gzip module and cuprof's reader read whole.
//
// The temporary file is created, never opened: O_CREAT|O_EXCL|O_NOFOLLOW with
// an unpredictable name, so a symlink or FIFO planted beside the target (say
// by another user in a shared directory, against a program run as root) is
// never followed or opened. It gets the mode of the file it replaces, or what
// fopen would give a new one (0666 less the umask).
//
// The directory is the one the path named when it was given (trace_directory):
// held open, the file is created, renamed and removed relative to it, never
// looked up by name again. Whoever can write the directory's parent cannot
// redirect the write elsewhere by renaming the directory away and putting a
// symlink in its place, against a program run as root.
#pragma once

#include "../base/dynamic_library.hpp"
#include "../base/log.hpp"
#include "../base/text.hpp"
#include "../base/error.hpp"

#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <climits>
#include <ctime>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <utility>

namespace cuprof::detail {

// What a target's temporary files' names start with, before "<pid>.<16 hex
// digits>": "<target name>.tmp.", or, where that would make a name longer than
// NAME_MAX with the widest pid, the target name's first 200 bytes, '~' and a
// hash of the whole name: a target name of 255 bytes is a valid file name, its
// temporary file's must be one too.
inline std::string temporary_file_prefix(std::string_view target_name) {
  constexpr std::size_t pid_and_random = 10 + 1 + 16;  // the widest pid_t, '.', the random part
  if (target_name.size() + 5 + pid_and_random <= NAME_MAX) return std::string(target_name) + ".tmp.";
  std::uint64_t hash = 1469598103934665603ull;  // FNV-1a
  for (const char c : target_name) hash = (hash ^ std::uint8_t(c)) * 1099511628211ull;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(hash));
  return std::string(target_name.substr(0, 200)) + "~" + hex + ".tmp.";
}

// The pid in a temporary file's name "<prefix><pid>.<anything>" when `name`
// is one of the target's (`prefix`: temporary_file_prefix()), else 0.
inline pid_t temporary_file_writer(std::string_view name, std::string_view prefix) {
  if (name.substr(0, prefix.size()) != prefix) return 0;
  long pid = 0;
  std::size_t i = prefix.size();
  for (; i < name.size() && name[i] >= '0' && name[i] <= '9' && pid < (1L << 30); ++i) pid = pid * 10 + (name[i] - '0');
  return i > prefix.size() && i + 1 < name.size() && name[i] == '.' ? pid_t(pid) : 0;
}

// Removes the temporary files that earlier writes of the target left when they
// were killed. Only what is safe to know is a leftover: a regular file (a
// symlink is not followed, nor removed), ours, named by a writer whose pid no
// longer exists, and untouched for a minute (a writer in another pid namespace
// or on another host sharing the directory looks dead here, but keeps writing).
// `dir_fd`: the directory (O_PATH will do), left open.
inline void remove_dead_writers_files(int dir_fd, std::string_view target_name) {
  const int listing = ::openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (listing < 0) return;
  DIR* d = ::fdopendir(listing);
  if (!d) {
    ::close(listing);
    return;
  }
  const int fd = ::dirfd(d);
  const std::string prefix = temporary_file_prefix(target_name);
  const std::time_t a_minute_ago = std::time(nullptr) - 60;
  while (const dirent* e = ::readdir(d)) {
    const pid_t writer = temporary_file_writer(e->d_name, prefix);
    if (writer <= 0 || writer == ::getpid() || ::kill(writer, 0) == 0 || errno != ESRCH) continue;
    struct stat st;
    if (::fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid() &&
        st.st_mtime < a_minute_ago)
      ::unlinkat(fd, e->d_name, 0);
  }
  ::closedir(d);
}

// A path's directory ("." for a bare name) and the file's name in it (empty
// for a path ending in '/').
inline std::pair<std::string, std::string> split_path(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  if (slash == std::string::npos) return {".", path};
  return {slash == 0 ? "/" : path.substr(0, slash), path.substr(slash + 1)};
}

// `path` with `tag` before its file name's first '.' ("t.json", ".7" -> "t.7.json"),
// or at its end: the names of the traces that share a path pattern.
inline std::string with_tag_before_extension(std::string path, const std::string& tag) {
  const std::size_t slash = path.rfind('/');
  const std::size_t dot = path.find('.', slash == std::string::npos ? 0 : slash + 1);
  return path.insert(dot == std::string::npos ? path.size() : dot, tag);
}

// Why a trace cannot be written to `path`, checked without writing: its
// directory is missing or closed to this process, or the path is there and
// not a regular file. Empty when it looks writable (the write may still
// fail: a full disk). A window asked for by another process is refused on
// this before it opens, not after it was recorded.
inline std::string why_unwritable(const std::string& path) {
  const std::string dir = split_path(path).first;
  if (::faccessat(AT_FDCWD, dir.empty() ? "." : dir.c_str(), W_OK | X_OK, AT_EACCESS) != 0)
    return "cannot write into '" + terminal_safe(dir) + "': " + std::strerror(errno);
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    return "cannot write '" + terminal_safe(path) + "': it exists and is not a regular file";
  return {};
}

// The directory of a trace's path, opened when the path is given and held
// (O_PATH: search permission is enough): the file is written there however the
// name resolves later. A profile that writes at exit binds it at start (CUPROF_TRACE).
class trace_directory {
 public:
  // The directory of `path`. Throws cuprof::error when it cannot be opened.
  explicit trace_directory(const std::string& path) : path_(path), dir_(split_path(path).first) {
    if (path.empty()) throw error("cannot write a trace to an empty path");
    fd_ = ::open(dir_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    struct stat st;
    if (fd_ < 0 || ::fstat(fd_, &st) != 0) {
      const int saved = errno;
      if (fd_ >= 0) ::close(fd_);
      throw error("cannot create '" + terminal_safe(path_) + "': " + std::strerror(saved));
    }
    dev_ = st.st_dev;
    ino_ = st.st_ino;
  }
  trace_directory(const trace_directory&) = delete;
  trace_directory& operator=(const trace_directory&) = delete;
  ~trace_directory() { ::close(fd_); }

  // Whether `path` names a file in this directory, spelled as the bound path
  // spelled it (the same text before the last '/').
  bool holds(const std::string& path) const { return !path.empty() && split_path(path).first == dir_; }

  // A new descriptor of the directory, for one write (close it). A program may
  // close descriptors it did not open (a daemon closing all, say): then the
  // directory is opened by its name again and used only if it is still the
  // one bound. Throws cuprof::error if not.
  int open_again() const {
    struct stat st;
    if (::fstat(fd_, &st) == 0 && st.st_dev == dev_ && st.st_ino == ino_) {
      const int fd = ::fcntl(fd_, F_DUPFD_CLOEXEC, 0);
      if (fd >= 0) return fd;
    }
    const int fd = ::open(dir_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) throw error("cannot create '" + terminal_safe(path_) + "': " + std::strerror(errno));
    if (::fstat(fd, &st) != 0 || st.st_dev != dev_ || st.st_ino != ino_) {
      ::close(fd);
      throw error("cannot write into '" + terminal_safe(dir_) + "': the directory was replaced since the trace's path was given");
    }
    return fd;
  }

 private:
  std::string path_, dir_;
  int fd_ = -1;
  dev_t dev_ = 0;
  ino_t ino_ = 0;
};

class atomic_file {
 public:
  // `path` in its directory as it is now.
  explicit atomic_file(std::string path) : atomic_file(trace_directory(path), path) {}
  // `path` in the directory bound by `where` (where.holds(path)), which may go before this does.
  atomic_file(const trace_directory& where, std::string path)
      : path_(std::move(path)), name_(split_path(path_).second), gzip_(ends_with(path_, ".gz")) {
    if (!where.holds(path_)) throw error("cannot write '" + terminal_safe(path_) + "': not in the directory bound for it");
    dir_fd_ = where.open_again();
    struct stat target;
    const bool replacing = !name_.empty() && ::fstatat(dir_fd_, name_.c_str(), &target, 0) == 0;
    if (name_.empty() || (replacing && !S_ISREG(target.st_mode))) {
      ::close(dir_fd_);
      throw error("cannot write '" + terminal_safe(path_) + "': it exists and is not a regular file");
    }
    remove_dead_writers_files(dir_fd_, name_);
    try {
      fd_ = create_temporary_file(replacing ? &target : nullptr);
    } catch (...) {
      ::close(dir_fd_);
      throw;
    }
    struct statfs fs;
    ext4_ = ::fstatfs(fd_, &fs) == 0 && fs.f_type == EXT4_SUPER_MAGIC;
  }
  atomic_file(const atomic_file&) = delete;
  atomic_file& operator=(const atomic_file&) = delete;
  ~atomic_file() {
    discard();
    ::close(dir_fd_);
  }

  // Writes bytes as they are (gzip members for a ".gz" path: gzip()), with one
  // write call for a block unless the system splits it.
  void write(const char* data, std::size_t n) {
    if (n == 0) return;
    // On ext4, renaming a file whose disk space is not yet allocated (delayed
    // allocation) over an existing one makes the rename start writing the
    // whole file out before it returns (auto_da_alloc): 0.3-0.5 s of a 2-core
    // machine for the 600 MB of a 1 M-launch trace. Space reserved as the
    // bytes come spares it. A reservation that fails (a full disk) is left
    // for the write to report. What the flush bought, a crash soon after the
    // rename finding the new bytes on disk, was never promised (no fsync).
    // Only on ext4: elsewhere (NFS) a reservation can cost a round trip.
    const signal_held size_limit(SIGXFSZ);  // past ulimit -f: EFBIG, said, and the program goes on
    if (ext4_) ::fallocate(fd_, FALLOC_FL_KEEP_SIZE, off_t(written_), off_t(n));
    while (n > 0) {
      errno = 0;
      const ssize_t done = ::write(fd_, data, n);
      if (done < 0 && errno == EINTR) continue;
      if (done <= 0) fail("cannot write");
      data += done;
      n -= std::size_t(done);
      written_ += std::uint64_t(done);
    }
  }

  // Closes and renames into place. Throws, leaving the target intact, on failure.
  void commit() {
    errno = 0;
    const bool closed = ::close(fd_) == 0;
    fd_ = -1;
    if (!closed) fail("cannot write");
    if (::renameat(dir_fd_, tmp_name_.c_str(), dir_fd_, name_.c_str()) != 0) fail("cannot rename the temporary file onto");
    tmp_name_.clear();
  }

  const std::string& path() const noexcept { return path_; }
  // Bytes written so far: the file's size once committed.
  std::uint64_t size() const noexcept { return written_; }
  // Whether the path asks for gzip data (".gz").
  bool gzip() const noexcept { return gzip_; }

 private:
  // "<name>.tmp.<pid>.<16 random hex digits>" beside the target
  // (temporary_file_prefix() for a long name), created with the mode of the
  // file it replaces (null: a new file's) and opened for writing. The pid lets
  // a later write of the same path know the file for a leftover once its
  // writer is gone.
  int create_temporary_file(const struct stat* replaced) {
    std::random_device random;
    const std::string prefix = temporary_file_prefix(name_) + std::to_string(::getpid()) + ".";
    for (int attempt = 0; attempt < 100; ++attempt) {
      char suffix[17];
      std::snprintf(suffix, sizeof suffix, "%08x%08x", unsigned(random()), unsigned(random()));
      tmp_name_ = prefix + suffix;
      // Private until its mode is set: a 0600 trace is never readable by others, not even half written.
      const int fd =
          ::openat(dir_fd_, tmp_name_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, replaced ? 0600 : 0666);
      if (fd >= 0) {
        if (replaced && ::fchmod(fd, replaced->st_mode & 0777) != 0) {
          const int saved = errno;
          ::close(fd);
          errno = saved;
          fail("cannot create");
        }
        return fd;
      }
      if (errno != EEXIST) {
        tmp_name_.clear();  // not ours to remove
        fail("cannot create");
      }
    }
    tmp_name_.clear();
    errno = EEXIST;
    fail("cannot create");
  }

  [[noreturn]] void fail(const char* what) {
    const int saved = errno;
    discard();
    std::string msg = std::string(what) + " '" + terminal_safe(path_) + "'";
    if (saved) msg += std::string(": ") + std::strerror(saved);
    throw error(msg);
  }
  void discard() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    if (!tmp_name_.empty()) ::unlinkat(dir_fd_, tmp_name_.c_str(), 0);
    tmp_name_.clear();
  }

  std::string path_;
  std::string name_;      // in the directory dir_fd_
  std::string tmp_name_;  // likewise
  bool gzip_;
  int dir_fd_ = -1;
  int fd_ = -1;
  bool ext4_ = false;  // ext2 and ext3 share the magic: their fallocate fails, at no cost
  std::uint64_t written_ = 0;
};

// The four functions of libdeflate's whole-buffer API (libdeflate.h) that
// gzip needs, loaded at run time as libcupti is: a program that includes cuprof does not
// link it and runs where it is absent, with zlib's gzip instead.
struct libdeflate_library {
  struct compressor;  // libdeflate_compressor
  compressor* (*alloc_compressor)(int level) = nullptr;
  std::size_t (*gzip_compress_bound)(compressor*, std::size_t in_bytes) = nullptr;
  std::size_t (*gzip_compress)(compressor*, const void* in, std::size_t in_bytes, void* out, std::size_t room) = nullptr;
  void (*free_compressor)(compressor*) = nullptr;
};

inline libdeflate_library load_libdeflate() {
  libdeflate_library lib;
  void* handle = ::dlopen("libdeflate.so.0", RTLD_NOW | RTLD_LOCAL);
  if (!handle) return {};
  if (bind(handle, lib.alloc_compressor, "libdeflate_alloc_compressor") &&
      bind(handle, lib.gzip_compress_bound, "libdeflate_gzip_compress_bound") &&
      bind(handle, lib.gzip_compress, "libdeflate_gzip_compress") &&
      bind(handle, lib.free_compressor, "libdeflate_free_compressor"))
    return lib;  // kept loaded for the process
  ::dlclose(handle);
  return {};
}

// libdeflate, loaded at the first call; null where libdeflate.so.0 is absent.
inline const libdeflate_library* libdeflate() {
  static const libdeflate_library lib = load_libdeflate();
  return lib.alloc_compressor ? &lib : nullptr;
}

// Compresses one block into one complete gzip member at level 1: with
// libdeflate when given (faster than zlib's level 1, and smaller:
// docs/performance.md), with zlib otherwise. One per thread; the member stays
// valid until the next compress().
class gzip_compressor {
 public:
  explicit gzip_compressor(const libdeflate_library* libdeflate) : libdeflate_(libdeflate) {
    if (libdeflate_ ? !(deflater_ = libdeflate_->alloc_compressor(1))
                    : deflateInit2(&zlib_, 1, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)  // +16: gzip
      throw error("cannot allocate a gzip compressor");
  }
  gzip_compressor(const gzip_compressor&) = delete;
  gzip_compressor& operator=(const gzip_compressor&) = delete;
  ~gzip_compressor() {
    if (libdeflate_) libdeflate_->free_compressor(deflater_);
    else deflateEnd(&zlib_);
  }

  std::string_view compress(const char* data, std::size_t n) {
    if (n > UINT_MAX / 2) throw error("gzip: a block over 2 GiB");  // zlib counts in 32 bits; blocks are ~1 MiB
    const std::size_t bound = libdeflate_ ? libdeflate_->gzip_compress_bound(deflater_, n) : deflateBound(&zlib_, uLong(n));
    if (bound > capacity_) {
      member_.reset(new char[bound]);
      capacity_ = bound;
    }
    std::size_t size = 0;
    if (libdeflate_) {
      size = libdeflate_->gzip_compress(deflater_, data, n, member_.get(), capacity_);
    } else if (deflateReset(&zlib_) == Z_OK) {
      zlib_.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data));
      zlib_.avail_in = uInt(n);
      zlib_.next_out = reinterpret_cast<Bytef*>(member_.get());
      zlib_.avail_out = uInt(bound);
      if (deflate(&zlib_, Z_FINISH) == Z_STREAM_END) size = bound - zlib_.avail_out;
    }
    if (size == 0) throw error("gzip compression failed");  // cannot happen with the bound's room
    return {member_.get(), size};
  }

 private:
  const libdeflate_library* libdeflate_;
  libdeflate_library::compressor* deflater_ = nullptr;
  z_stream zlib_{};
  std::unique_ptr<char[]> member_;
  std::size_t capacity_ = 0;
};

}  // namespace cuprof::detail
