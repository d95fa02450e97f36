// cuprof: compile-time configuration shared by every header.
#pragma once

#define CUPROF_VERSION_MAJOR 0
#define CUPROF_VERSION_MINOR 1
#define CUPROF_VERSION_PATCH 0
#define CUPROF_VERSION_STRING "0.1.0"

#if defined(__GNUC__) || defined(__clang__)
#define CUPROF_LIKELY(x) __builtin_expect(!!(x), 1)
#define CUPROF_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define CUPROF_NOINLINE __attribute__((noinline))
#else
#define CUPROF_LIKELY(x) (x)
#define CUPROF_UNLIKELY(x) (x)
#define CUPROF_NOINLINE
#endif

#define CUPROF_CONCAT_IMPL(a, b) a##b
#define CUPROF_CONCAT(a, b) CUPROF_CONCAT_IMPL(a, b)
// A variable name of its own per use, so that two scopes can share a source
// line; __LINE__ where the compiler has no __COUNTER__.
#ifdef __COUNTER__
#define CUPROF_UNIQUE_NAME(prefix) CUPROF_CONCAT(prefix, __COUNTER__)
#else
#define CUPROF_UNIQUE_NAME(prefix) CUPROF_CONCAT(prefix, __LINE__)
#endif

// Define CUPROF_DISABLE before including cuprof to compile every scope and
// profiler call down to nothing (the API stays, the work goes).

// The runtime (the session, the CUPTI backend, the writer and CUPROF_TRACE's
// trace at exit) is compiled once per program, in the one TU that defines
// CUPROF_IMPLEMENTATION before including cuprof.hpp, as doctest's and stb's
// implementations are; every other TU sees declarations only, so including
// cuprof forces no code into its object file. The cuprof::runtime target is
// that TU compiled for you (src/runtime.cpp): it defines
// CUPROF_COMPILED_RUNTIME for its users, who must not define
// CUPROF_IMPLEMENTATION as well. CUPROF_NO_AUTOSTART keeps CUPROF_TRACE's
// start at load out of the implementation, for a program that starts it
// itself (runtime/runtime.hpp).
#if defined(CUPROF_IMPLEMENTATION) && defined(CUPROF_COMPILED_RUNTIME)
#error "cuprof: CUPROF_IMPLEMENTATION with the cuprof::runtime target, which already compiles the runtime; drop the define"
#endif
