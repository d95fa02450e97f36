// Kernel-name decoding, for the analyses that judge kernels by what their
// names say (insights, throughput): declared in the public header, section
// "Kernel names", defined in kernel_names.cpp. The decoder's token helpers are
// private to kernel_names.cpp.
#pragma once

#include <cuprof/analysis.hpp>
