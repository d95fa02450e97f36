// Found first on the include path of the header check (tests/CMakeLists.txt):
// an installed cuprof header that includes this fails to compile.
#error "cuprof: an installed header includes <doctest/doctest.h>, which programs using cuprof need not have"
