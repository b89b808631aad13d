# Included by llama.cpp's own project() while pip builds llama-cpp-python (make install passes
# it as CMAKE_PROJECT_llama.cpp_INCLUDE in CMAKE_ARGS). llama-cpp-python forces llama.cpp's
# `common` library on (a cache variable set with FORCE), yet its Python package loads only
# libllama and libggml: `common` and the cpp-httplib it pulls in are about a third of the
# objects the build compiles. A normal variable set here shadows that cache entry for
# llama.cpp's directory, so neither is built nor installed.
set(LLAMA_BUILD_COMMON OFF)

# No AMX code. Built for this CPU (-march=native), ggml compiles its AMX matrix kernels where
# the CPU reports AMX, and runs them without asking the kernel for the tile state first: on a
# machine that reports amx_tile (a Sapphire Rapids guest here), the first `ldtilecfg` killed
# the process with SIGSEGV. A 135M model gains nothing that matters from AMX. GCC and Clang
# let an explicit -mno-* win over what -march=native turns on, whatever their order.
if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
  add_compile_options(-mno-amx-tile -mno-amx-int8 -mno-amx-bf16)
endif()
