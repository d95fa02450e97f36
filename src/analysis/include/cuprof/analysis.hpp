// cuprof::analysis: reading cuprof and torch.profiler traces back, and what
// the `cuprof` command says about them (insights, diff, kernel names,
// throughput). A compiled library (target cuprof::analysis), apart from the
// header-only instrumentation: programs that record never compile or link it,
// and only it needs simdjson.
#pragma once

// Interim: the library's parts, until each has its declarations here and its
// definitions in src/analysis/*.cpp.
#include "../../diff.hpp"
#include "../../insights.hpp"
#include "../../kernel_names.hpp"
#include "../../throughput.hpp"
#include "../../trace_reader.hpp"
