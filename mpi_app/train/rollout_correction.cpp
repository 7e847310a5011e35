// SPDX-License-Identifier: Apache-2.0
// rollout_correction: truncated importance weights, token and sequence rejection and the token
// veto against the behaviour policy's log-probs. See rollout_correction.hpp.
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
    if (name == "token") return RsLevel::kToken;
    if (name == "sequence") return RsLevel::kSequence;
    if (name == "geometric") return RsLevel::kGeometric;
    throw ConfigError("--rollout-rs '" + name + "': unknown value (choose off, token, sequence, geometric)");
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
        case RsLevel::kToken: return "token";
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
    const double upper = cfg.rs_upper > 0 ? cfg.rs_upper : cfg.is_threshold;
    const double lower = cfg.rs_lower > 0 ? cfg.rs_lower : 1.0 / upper;
    const double veto_log = cfg.veto > 0 ? std::log(cfg.veto) : 0.0;
    double log_sum = 0.0, valid = 0.0, token_max = 0.0;
    std::vector<float> token_w(n, 0.0f);
    std::vector<uint8_t> keep;
    if (cfg.rs == RsLevel::kToken) keep.assign(n, 1);
    double token_sum = 0.0, kept_sum = 0.0, kept = 0.0;
    bool vetoed = false;
    for (size_t j = 0; j < n; ++j) {
        if (!mask.empty() && mask[j] == 0) continue;
        const double lr = static_cast<double>(old_logprobs[j]) - static_cast<double>(behaviour_logprobs[j]);
        log_sum += lr;
        valid += 1.0;
        if (cfg.veto > 0 && lr < veto_log) vetoed = true;  // the unclamped ratio, as veRL's veto
        const double r = bounded_exp(lr);
        token_max = std::max(token_max, r);
        token_w[j] = static_cast<float>(std::min(r, cap));
        token_sum += token_w[j];
        if (!keep.empty() && (r > upper || r < lower)) {
            keep[j] = 0;
            ++out.rejected_tokens;
        } else {
            kept_sum += token_w[j];
            kept += 1.0;
        }
    }
    const double seq_ratio = bounded_exp(log_sum);
    switch (cfg.is) {
        case IsLevel::kOff:
        case IsLevel::kToken:
            // Token rejection: the weights of the tokens left in the loss.
            out.ratio_max = valid > 0 ? token_max : 1.0;
            out.weight_sum = keep.empty() ? token_sum : kept_sum;
            out.weight_count = keep.empty() ? valid : kept;
            out.norm_sum = token_sum;
            out.norm_count = valid;
            if (cfg.is == IsLevel::kToken) out.weights = std::move(token_w);
            break;
        case IsLevel::kSequence: {
            out.ratio_max = seq_ratio;
            const double w = std::min(seq_ratio, cap);
            out.weights = {static_cast<float>(w)};
            const bool any = keep.empty() ? valid > 0 : kept > 0;  // a token of it still in the loss
            out.weight_sum = any ? w : 0.0;
            out.weight_count = any ? 1.0 : 0.0;
            out.norm_sum = valid > 0 ? w : 0.0;
            out.norm_count = valid > 0 ? 1.0 : 0.0;
            break;
        }
    }
    if ((cfg.rs == RsLevel::kSequence || cfg.rs == RsLevel::kGeometric) && valid > 0) {
        const double r = cfg.rs == RsLevel::kSequence ? seq_ratio : bounded_exp(log_sum / valid);
        out.rejected = r > upper || r < lower;
    }
    out.rejected = out.rejected || vetoed;
    if (out.rejected) {
        out.rejected_tokens = static_cast<int64_t>(valid);
    } else if (!keep.empty()) {
        out.token_keep = std::move(keep);
    }
    return out;
}

void CorrectionStats::add(const SeqCorrection& c) {
    ratio_max = std::max(ratio_max, c.ratio_max);
    norm_sum += c.norm_sum;
    norm_count += c.norm_count;
    rejected_tokens += c.rejected_tokens;
    if (c.rejected) {
        ++rejected;
        return;
    }
    weight_sum += c.weight_sum;
    weight_count += c.weight_count;
}

double batch_norm_factor(double norm_sum, double norm_count) {
    if (!(norm_count > 0)) return 1.0;
    const double mean = norm_sum / norm_count;
    return mean > 1e-8 ? mean : 1.0;
}

}  // namespace tagflow::train
