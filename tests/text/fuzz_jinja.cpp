// SPDX-License-Identifier: Apache-2.0
// fuzz_jinja: libFuzzer target: any bytes as a chat template, compiled and rendered with a
// fixed conversation. Only TemplateError may come out; anything else (another exception:
// std::terminate; a crash; a sanitizer report) is a bug. Replayed by ctest Fuzz.jinja.replay
// over tests/text/fixtures and tests/text/fuzz_corpus (linked with tests/fuzz/fuzz_replay.c);
// fuzzing: clang++ -fsanitize=fuzzer,address,undefined with the mpi_app/text/jinja_*.cpp files.
#include <cstddef>
#include <cstdint>
#include <string>

#include "text/jinja.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size > 16384) return 0;
    static const nlohmann::ordered_json vars = nlohmann::ordered_json::parse(R"({
      "messages": [{"role": "system", "content": "sys é"}, {"role": "user", "content": "hi\n there"},
                   {"role": "assistant", "content": "<think>\nr\n</think>\n\nok", "reasoning_content": "r",
                    "tool_calls": [{"type": "function",
                                    "function": {"name": "f", "arguments": {"b": 1.5, "a": [1, null]}}}]},
                   {"role": "tool", "content": "42"}],
      "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}],
      "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>", "n": 3, "f": 0.5})");
    try {
        tagflow::text::JinjaTemplate t(std::string(reinterpret_cast<const char*>(data), size));
        t.render(vars);
    } catch (const tagflow::text::TemplateError&) {}
    return 0;
}
