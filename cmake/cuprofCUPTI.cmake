# cuprofCUPTI.cmake: find the CUPTI headers that cuprof compiles against.
#
# cuprof dlopens libcupti.so.13 at run time, so only the headers are needed.
# They sit in the toolkit's include directory in the pip-style layout
# (nvidia-cuda-cupti) and under <toolkit>/extras/CUPTI/include in the standard
# runfile/deb layout. Call after find_package(CUDAToolkit).
#
#   cuprof_find_cupti(<out_var>)
#     Sets <out_var> to the directory holding cupti.h, or stops with a
#     FATAL_ERROR that says where it looked.
#
#   cuprof_cupti_extra_include_dirs(<out_var>)
#     Sets <out_var> to the include directories cuprof needs beyond
#     CUDA::toolkit's: the extras/CUPTI/include directory when it exists,
#     empty when cupti.h already lies in the toolkit include directory.

include_guard(GLOBAL)

function(_cuprof_cupti_search_dirs out_var)
  set(dirs ${CUDAToolkit_INCLUDE_DIRS})
  set(roots "${CUDAToolkit_ROOT}" "$ENV{CUDAToolkit_ROOT}" "${CUDAToolkit_LIBRARY_ROOT}")
  if(CUDAToolkit_BIN_DIR)
    list(APPEND roots "${CUDAToolkit_BIN_DIR}/..")
  endif()
  foreach(root IN LISTS roots)
    if(root)
      list(APPEND dirs "${root}/extras/CUPTI/include")
    endif()
  endforeach()
  foreach(inc IN LISTS CUDAToolkit_INCLUDE_DIRS)
    list(APPEND dirs "${inc}/../extras/CUPTI/include" "${inc}/../../../extras/CUPTI/include")
  endforeach()
  list(REMOVE_DUPLICATES dirs)
  set(${out_var} ${dirs} PARENT_SCOPE)
endfunction()

function(cuprof_find_cupti out_var)
  if(NOT CUDAToolkit_FOUND)
    message(FATAL_ERROR
      "cuprof: the CUDA toolkit was not found. Install CUDA 13 (or pip's "
      "nvidia-cuda-runtime/nvidia-cuda-cupti layout) and point CMake at it with "
      "-DCUDAToolkit_ROOT=/path/to/cuda or put its nvcc on PATH.")
  endif()
  _cuprof_cupti_search_dirs(dirs)
  find_path(CUPROF_CUPTI_INCLUDE_DIR cupti.h PATHS ${dirs} NO_DEFAULT_PATH
            DOC "Directory holding cupti.h (CUDA Profiling Tools Interface)")
  if(NOT CUPROF_CUPTI_INCLUDE_DIR)
    string(REPLACE ";" "\n    " shown "${dirs}")
    message(FATAL_ERROR
      "cuprof: cupti.h (the CUPTI header) was not found. Looked in:\n    ${shown}\n"
      "Install the toolkit's CUPTI component (cuda-cupti-dev-13-*, or pip's "
      "nvidia-cuda-cupti) or pass -DCUPROF_CUPTI_INCLUDE_DIR=/dir/with/cupti.h.")
  endif()
  set(${out_var} "${CUPROF_CUPTI_INCLUDE_DIR}" PARENT_SCOPE)
endfunction()

function(cuprof_cupti_extra_include_dirs out_var)
  cuprof_find_cupti(cupti_dir)
  set(extra "${cupti_dir}")
  get_filename_component(cupti_real "${cupti_dir}" REALPATH)
  foreach(inc IN LISTS CUDAToolkit_INCLUDE_DIRS)
    get_filename_component(inc "${inc}" REALPATH)
    if(inc STREQUAL cupti_real)
      set(extra "")
    endif()
  endforeach()
  set(${out_var} "${extra}" PARENT_SCOPE)
endfunction()
