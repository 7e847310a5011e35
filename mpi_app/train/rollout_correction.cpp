// SPDX-License-Identifier: Apache-2.0
// rollout_correction: truncated importance weights and sequence rejection against the
// behaviour policy's log-probs. See rollout_correction.hpp.
#include "train/rollout_correction.hpp"

#include <algorithm>
#include <cmath>

#include "common/error.hpp"

namespace tagflow::train {

namespace {

constexpr double kLogBound = 20.0;  // veRL's safety bound: ratios in [e^-20, e^20]

double bounded_exp(double log_ratio) { return std::exp(std::clamp(log_ratio, -kLogBound, kLogBound)); }

}  // namespace

IsLevel parse_is_level(const std::string& name) {
    if (name == "off" || name == "none") return IsLevel::kOff;
    if (name == "token") return IsLevel::kToken;
    if (name == "sequence") return IsLevel::kSequence;
    throw ConfigError("--rollout-is '" + name + "': unknown value (choose off, token, sequence)");
}

RsLevel parse_rs_level(const std::string& name) {
    if (name == "off" || name == "none") return RsLevel::kOff;
    if (name == "sequence") return RsLevel::kSequence;
    if (name == "geometric") return RsLevel::kGeometric;
    throw ConfigError("--rollout-rs '" + name + "': unknown value (choose off, sequence, geometric)");
}

std::string to_string(IsLevel l) {
    switch (l) {
        case IsLevel::kOff: return "off";
        case IsLevel::kToken: return "token";
        case IsLevel::kSequence: return "sequence";
    }
    return "off";
}

std::string to_string(RsLevel l) {
    switch (l) {
        case RsLevel::kOff: return "off";
        case RsLevel::kSequence: return "sequence";
        case RsLevel::kGeometric: return "geometric";
    }
    return "off";
}

SeqCorrection correct_sequence(const std::vector<float>& old_logprobs, const std::vector<float>& behaviour_logprobs,
                               const std::vector<uint8_t>& mask, const RolloutCorrectionConfig& cfg) {
    const size_t n = old_logprobs.size();
    if (behaviour_logprobs.size() != n || (!mask.empty() && mask.size() != n))
        throw Error("rollout correction: " + std::to_string(n) + " proximal log-probs, " +
                    std::to_string(behaviour_logprobs.size()) + " behaviour log-probs and " +
                    std::to_string(mask.size()) + " mask entries (need equal lengths)");
    SeqCorrection out;
    const double cap = cfg.is_threshold;
    double log_sum = 0.0, valid = 0.0, token_max = 0.0;
    std::vector<float> token_w(n, 0.0f);
    double token_sum = 0.0;
    for (size_t j = 0; j < n; ++j) {
        if (!mask.empty() && mask[j] == 0) continue;
        const double lr = static_cast<double>(old_logprobs[j]) - static_cast<double>(behaviour_logprobs[j]);
        log_sum += lr;
        valid += 1.0;
        const double r = bounded_exp(lr);
        token_max = std::max(token_max, r);
        token_w[j] = static_cast<float>(std::min(r, cap));
        token_sum += token_w[j];
    }
    const double seq_ratio = bounded_exp(log_sum);
    switch (cfg.is) {
        case IsLevel::kOff:
        case IsLevel::kToken:
            out.ratio_max = valid > 0 ? token_max : 1.0;
            out.weight_sum = token_sum;
            out.weight_count = valid;
            if (cfg.is == IsLevel::kToken) out.weights = std::move(token_w);
            break;
        case IsLevel::kSequence: {
            out.ratio_max = seq_ratio;
            const double w = std::min(seq_ratio, cap);
            out.weights = {static_cast<float>(w)};
            out.weight_sum = valid > 0 ? w : 0.0;
            out.weight_count = valid > 0 ? 1.0 : 0.0;
            break;
        }
    }
    if (cfg.rs != RsLevel::kOff && valid > 0) {
        const double upper = cfg.rs_upper > 0 ? cfg.rs_upper : cfg.is_threshold;
        const double lower = cfg.rs_lower > 0 ? cfg.rs_lower : 1.0 / upper;
        const double r = cfg.rs == RsLevel::kSequence ? seq_ratio : bounded_exp(log_sum / valid);
        out.rejected = r > upper || r < lower;
    }
    return out;
}

void CorrectionStats::add(const SeqCorrection& c) {
    ratio_max = std::max(ratio_max, c.ratio_max);
    if (c.rejected) {
        ++rejected;
        return;
    }
    weight_sum += c.weight_sum;
    weight_count += c.weight_count;
}

}  // namespace tagflow::train
