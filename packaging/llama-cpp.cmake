# Included by llama.cpp's own project() while pip builds llama-cpp-python (make install passes
# it as CMAKE_PROJECT_llama.cpp_INCLUDE in CMAKE_ARGS). llama-cpp-python forces llama.cpp's
# `common` library on (a cache variable set with FORCE), yet its Python package loads only
# libllama and libggml: `common` and the cpp-httplib it pulls in are about a third of the
# objects the build compiles. A normal variable set here shadows that cache entry for
# llama.cpp's directory, so neither is built nor installed.
set(LLAMA_BUILD_COMMON OFF)
