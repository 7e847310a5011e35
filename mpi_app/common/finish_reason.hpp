// SPDX-License-Identifier: Apache-2.0
// finish_reason: why a generation ended. The one enum of the rollout engine, the schedulers,
// the gateway link (its wire code is the enum's value) and the run file. The values of kStop,
// kLength and kAbort are the run file's /samples finish_reason column (enum_names
// "stop,length,abort", share/doc/hdf5-schema.md): never renumber them. kCancelled and kError
// never reach the run file (a cancelled or refused request leaves no sample).
// Does not decide when a generation ends (rollout/engine.cpp) or store it (io/run_file.*).
#pragma once
#include <cstdint>

namespace tagflow {

enum class FinishReason : uint8_t {
    kStop = 0,       ///< a stop token (EOS) was sampled; it ends the response
    kLength = 1,     ///< the response budget ran out
    kAbort = 2,      ///< given up by the gateway backend (shutting down)
    kCancelled = 3,  ///< the partial result InferenceEngine::cancel() hands back (never passed to on_finish)
    kError = 4,      ///< the engine refused the request (gateway only)
};

/// "stop", "length", "abort" (the run file's enum_names, in order), "cancelled", "error".
constexpr const char* finish_reason_name(FinishReason r) {
    switch (r) {
        case FinishReason::kStop: return "stop";
        case FinishReason::kLength: return "length";
        case FinishReason::kAbort: return "abort";
        case FinishReason::kCancelled: return "cancelled";
        case FinishReason::kError: return "error";
    }
    return "unknown";
}

}  // namespace tagflow
