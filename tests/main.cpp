// The one translation unit that holds doctest's implementation and main().
// doctest's own signal handlers are off: the exit-path tests run cuprof's
// (SIGINT, SIGTERM, SIGABRT ...) in child processes of this binary, and a
// crash still fails the run through its exit status.
#define DOCTEST_CONFIG_NO_POSIX_SIGNALS
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
