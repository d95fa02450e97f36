// libcuprof_inject.so: cuprof for programs that do not include it.
//
//   cuprof run -- ./program      (or CUDA_INJECTION64_PATH=/path/libcuprof_inject.so ./program)
//
// Three ways in, all set up by `cuprof run`:
//   CUDA_INJECTION64_PATH  the driver loads this library during cuInit and calls
//       InitializeInjection, which starts the environment's profile
//       (CUPROF_TRACE and friends, see runtime/autostart.hpp);
//   NVTX_INJECTION64_PATH  NVTX calls InitializeInjectionNvtx2 at the program's
//       first range; it is handed to the libcupti cuprof traces with; and
//       InitializeInjectionNvtxExtension at an extension's first call;
//   LD_PRELOAD  so that a program that never initialises CUDA, or runs where
//       there is no driver, still gets a trace and a line saying why.
// It links the runtime compiled once (the cuprof::runtime target, shared with
// the examples); the environment's profile is started from the entry points
// above, not by the runtime at load time (runtime/autostart.hpp).
#include <cuprof/cuprof.hpp>
#include <cuprof/cupti/libraries.hpp>
#include <cuprof/cupti/nvtx_recorder.hpp>
#include <cuprof/runtime/autostart.hpp>

#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <string>

#define CUPROF_EXPORT extern "C" __attribute__((visibility("default")))

extern "C" __attribute__((visibility("hidden"))) const bool cuprof_started_by_injection = true;

namespace {
void mark_traced_in_run();
}

CUPROF_EXPORT int InitializeInjection(void) {
  static std::once_flag once;
  std::call_once(once, [] {
    mark_traced_in_run();
    auto& inside = cuprof::detail::process().inside_cuda_init;
    inside.store(true);
    cuprof::detail::start_environment_profile(/*injected=*/true);
    inside.store(false);
  });
  return 1;  // non-zero: loaded; a CUPTI failure is reported and the program runs on
}

// NVTX's injection entry point (nvtx3/nvtxDetail/nvtxInit.h). Forwarded to
// the libcupti cuprof traces with: were NVTX given a libcupti path of its
// own, a program that loaded another copy (PyTorch wheels ship one) would
// send its ranges to a CUPTI instance cuprof never reads.
using nvtx_get_export_table = const void* (*)(std::uint32_t);
CUPROF_EXPORT int InitializeInjectionNvtx2(nvtx_get_export_table get_export_table) {
  std::string error;
  void* cupti = cuprof::detail::cupti::open_cupti_library(error);
  if (!cupti) return 0;  // NVTX then runs without an injection; tracing says why CUDA is off
  using nvtx_init = int (*)(nvtx_get_export_table);
  const auto init = reinterpret_cast<nvtx_init>(::dlsym(cupti, "InitializeInjectionNvtx2"));
  return init ? init(get_export_table) : 0;
}

// NVTX's extensions' entry point (nvtx3/nvtxDetail/nvtxExtInit.h), looked up
// in the same library at an extension's first call: cuprof serves the payload
// module's range push and pop, which carry NCCL's communicators
// (cupti/nvtx_recorder.hpp). Other modules, and the payload module's other
// functions, stay no-ops, as they were before cuprof served any.
CUPROF_EXPORT int InitializeInjectionNvtxExtension(nvtxExtModuleInfo_t* module) {
  if (!module || !cuprof::detail::cupti::nvtx_recorder::install_payload_extension(*module)) return 0;
  if (cuprof::detail::read_switch("CUPROF_DEBUG", std::getenv("CUPROF_DEBUG"), false).value)
    cuprof::detail::log_line("NVTX payload extension served: range push and pop (NCCL's communicators)");
  return 1;
}

namespace {

// A launcher (torchrun, mpirun, a shell script) that `cuprof run` started
// puts no work on a GPU; the processes it starts do, and write their own
// traces. So the process `cuprof run` started makes a private directory
// (CUPROF_RUN_DIR, inherited by everything it starts), every process of the
// run that initialises CUDA leaves its pid there, and the first process asks
// leave_out_launcher (runtime/autostart.hpp) before writing its own trace.
// The directory this process made, removed at its exit.
std::string& made_run_directory() {
  static std::string* dir = new std::string;  // read by an exit handler
  return *dir;
}

void mark_traced_in_run() {
  const char* dir = cuprof::detail::run_directory();
  if (!dir) return;
  const std::string mark = std::string(dir) + "/" + std::to_string(::getpid());
  const int fd = ::open(mark.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd >= 0) ::close(fd);
}

// Removes the run's directory: its pid-named entries, then itself.
void close_run_directory() {
  std::string& dir = made_run_directory();
  if (dir.empty()) return;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (!name.empty() && name.find_first_not_of("0123456789") == std::string::npos) ::unlinkat(::dirfd(d), name.c_str(), 0);
    }
    ::closedir(d);
  }
  ::rmdir(dir.c_str());
  dir.clear();
}

// Named after the process, so that a program the first process exec's (a
// shell script's last command) keeps the directory rather than leaving it behind.
void open_run_directory() {
  const std::string prefix = "/cuprof-run." + std::to_string(::getpid()) + ".";
  if (const char* dir = cuprof::detail::run_directory(); dir && std::string(dir).find(prefix) != std::string::npos) {
    made_run_directory() = dir;
    return;
  }
  const char* tmp = std::getenv("TMPDIR");
  std::string path = std::string(tmp && *tmp == '/' ? tmp : "/tmp") + prefix + "XXXXXX";
  if (!::mkdtemp(path.data())) return;  // no directory: the launcher's trace is written as before
  made_run_directory() = path;
  ::setenv("CUPROF_RUN_DIR", path.c_str(), 1);
}

// Whether any copy of cuprof started the environment's profile in this
// process (the program may include cuprof too); set by start_environment_profile.
bool traced_here() {
  const char* started = std::getenv("CUPROF_STARTED_PID");
  return started && std::to_string(::getpid()) == started;
}

// The process `cuprof run` started (it exec'd the program, keeping its pid).
bool started_by_cuprof_run() {
  const char* root = std::getenv("CUPROF_ROOT_PID");
  return root && std::to_string(::getpid()) == root;
}

// At exit of that process, when CUDA was never traced: the CPU-only trace
// and one line saying why.
void trace_untraced_program() {
  struct removed_at_end {
    ~removed_at_end() { close_run_directory(); }
  } run_directory_removed;
  if (!started_by_cuprof_run() || traced_here()) return;
  if (cuprof::detail::leave_out_launcher(/*run_root=*/true, /*put_gpu_work=*/false)) return;
  const bool driver = ::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD) || ::dlopen("libcuda.so.1", RTLD_LAZY);
  cuprof::detail::log_line(std::string("CUDA tracing is off: ") +
                           (driver ? "the program never initialised CUDA" : "no CUDA driver (libcuda.so.1 not found)") +
                           "; the trace holds the CPU side only");
  ::setenv("CUPROF_ACTIVITIES", "cpu", 1);  // at exit, CUPTI is not to be started
  if (cuprof::detail::start_environment_profile(/*injected=*/true)) cuprof::detail::finish_environment_profile();
}

// Registered when the library is preloaded, before the program's own start-up:
// it runs after every other exit handler, CUDA's teardown included. Processes
// the program starts inherit LD_PRELOAD; they are not its business.
__attribute__((constructor)) void when_preloaded() {
  if (!started_by_cuprof_run()) return;
  open_run_directory();
  std::atexit(&trace_untraced_program);
}

}  // namespace
