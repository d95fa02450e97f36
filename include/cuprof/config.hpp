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

// The runtime (the session, the CUPTI backend, the writer) is header-only by
// default: its functions are inline and compiled in each TU that uses them.
// CUPROF_TRACE's autostart (trace at exit without code) is compiled into the
// one TU that defines CUPROF_IMPLEMENTATION before including cuprof.hpp, as
// stb's and doctest's implementations are, so that including cuprof forces no
// code into every object file.
// The cuprof::runtime target compiles it once instead: it defines
// CUPROF_COMPILED_RUNTIME for its users, whose TUs then see declarations only,
// and CUPROF_RUNTIME_IMPLEMENTATION in its own TU (src/runtime.cpp).
#if defined(CUPROF_COMPILED_RUNTIME) && defined(CUPROF_RUNTIME_IMPLEMENTATION)
#define CUPROF_RUNTIME_INLINE
#else
#define CUPROF_RUNTIME_INLINE inline
#endif
