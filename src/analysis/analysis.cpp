// Interim translation unit: the parts are still inline in their headers.
#include <cuprof/analysis.hpp>
