// SPDX-License-Identifier: Apache-2.0
// test_util: the scratch paths the llama tests (test_safetensors.cpp, test_llama.cpp) write to; nothing else.
#pragma once
#include <filesystem>
#include <string>

#include <unistd.h>

namespace tagflow::model::test {

/// A path under the temp directory, unique to this process and `name`, with nothing there.
inline std::filesystem::path scratch(const std::string& name) {
    std::filesystem::path p =
        std::filesystem::temp_directory_path() / ("tagflow_llama_" + std::to_string(::getpid()) + "_" + name);
    std::filesystem::remove_all(p);
    return p;
}

}  // namespace tagflow::model::test
