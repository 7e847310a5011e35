// SPDX-License-Identifier: Apache-2.0
// engine: the backend-independent half of the TrainEngine interface — building and counting
// training sequences, splitting them into micro-batches, packing them right-padded onto a
// device and back, and the directory form of save/load. See engine.hpp.
#include "train/engine.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <torch/torch.h>

#include "common/error.hpp"

namespace tagflow::train {
namespace fs = std::filesystem;

TrainSeq make_train_seq(const std::vector<int32_t>& prompt, const std::vector<int32_t>& response,
                        const std::vector<float>& rollout_logprobs) {
    TrainSeq s;
    s.tokens = prompt;
    s.tokens.insert(s.tokens.end(), response.begin(), response.end());
    s.prompt_len = static_cast<int32_t>(prompt.size());
    s.old_logprobs = rollout_logprobs;
    s.rollout_logprobs = rollout_logprobs;
    return s;
}

BatchCounts count_batch(const std::vector<TrainSeq>& batch) {
    BatchCounts c;
    for (const TrainSeq& s : batch) {
        const size_t n = s.n_resp();
        double k = 0;
        for (size_t j = 0; j < n; ++j) k += (s.loss_mask.empty() || s.loss_mask[j]) ? 1 : 0;
        c.tokens += k;
        c.seqs += k > 0 ? 1 : 0;
    }
    return c;
}

BatchCounts allreduce_counts(const BatchCounts& local, Collectives* comm, const torch::Device& device) {
    if (comm == nullptr || comm->size() == 1) return local;
    // fp32 holds these integer counts exactly up to 2^24, far above any batch here.
    torch::Tensor t = torch::tensor({static_cast<float>(local.tokens), static_cast<float>(local.seqs)}).to(device);
    comm->allreduce_sum({t});
    t = t.to(torch::kCPU);
    return {static_cast<double>(t[0].item<float>()), static_cast<double>(t[1].item<float>())};
}

std::vector<std::pair<size_t, size_t>> split_micro_batches(const std::vector<TrainSeq>& batch, int64_t max_seqs,
                                                           int64_t max_tokens) {
    if (max_seqs < 1) throw ConfigError("engine: micro_batch must be >= 1");
    std::vector<std::pair<size_t, size_t>> out;
    size_t begin = 0;
    int64_t longest = 0;
    for (size_t i = 0; i < batch.size(); ++i) {
        const int64_t len = std::max<int64_t>(static_cast<int64_t>(batch[i].tokens.size()) - 1, 1);
        const int64_t rows = static_cast<int64_t>(i - begin);
        const bool full =
            rows >= max_seqs || (max_tokens > 0 && rows > 0 && (rows + 1) * std::max(longest, len) > max_tokens);
        if (full) {
            out.emplace_back(begin, i);
            begin = i;
            longest = 0;
        }
        longest = std::max(longest, len);
    }
    if (begin < batch.size()) out.emplace_back(begin, batch.size());
    return out;
}

namespace {

// One optional per-token field: packed when any row has it; then all rows must.
struct Field {
    const char* name;
    std::vector<float> TrainSeq::*member;
    torch::Tensor MicroBatch::*dest;
    bool allow_scalar;
};

const Field kFields[] = {
    {"old_logprobs", &TrainSeq::old_logprobs, &MicroBatch::old_logp, false},
    {"rollout_logprobs", &TrainSeq::rollout_logprobs, &MicroBatch::rollout_logp, false},
    {"ref_logprobs", &TrainSeq::ref_logprobs, &MicroBatch::ref_logp, false},
    {"advantages", &TrainSeq::advantages, &MicroBatch::adv, true},
    {"returns", &TrainSeq::returns, &MicroBatch::returns, false},
    {"old_values", &TrainSeq::old_values, &MicroBatch::old_values, false},
    {"is_weights", &TrainSeq::is_weights, &MicroBatch::is_w, true},
};

}  // namespace

MicroBatch pack_micro_batch(const std::vector<TrainSeq>& batch, size_t begin, size_t end, const torch::Device& device) {
    if (begin >= end || end > batch.size()) throw InternalError("pack_micro_batch: bad range");
    size_t lmax = 0;
    for (size_t i = begin; i < end; ++i) {
        const TrainSeq& s = batch[i];
        if (s.prompt_len < 1 || static_cast<size_t>(s.prompt_len) > s.tokens.size())
            throw Error("engine: sample " + std::to_string(i) + " has prompt_len " + std::to_string(s.prompt_len) +
                        " for " + std::to_string(s.tokens.size()) + " tokens (need 1 <= prompt_len <= tokens)");
        if (!s.loss_mask.empty() && s.loss_mask.size() != s.n_resp())
            throw Error("engine: sample " + std::to_string(i) + " has " + std::to_string(s.loss_mask.size()) +
                        " loss_mask entries for " + std::to_string(s.n_resp()) + " response tokens");
        lmax = std::max(lmax, s.tokens.size());
    }
    const int64_t n = static_cast<int64_t>(end - begin);
    const int64_t T = std::max<int64_t>(static_cast<int64_t>(lmax) - 1, 1);
    MicroBatch mb;
    mb.begin = begin;
    mb.end = end;
    torch::Tensor inputs = torch::zeros({n, T}, torch::kInt64);
    torch::Tensor targets = torch::zeros({n, T}, torch::kInt64);
    torch::Tensor mask = torch::zeros({n, T}, torch::kFloat32);
    torch::Tensor weight = torch::ones({n, 1}, torch::kFloat32);
    auto in = inputs.accessor<int64_t, 2>();
    auto tg = targets.accessor<int64_t, 2>();
    auto mk = mask.accessor<float, 2>();
    for (int64_t b = 0; b < n; ++b) {
        const TrainSeq& s = batch[begin + static_cast<size_t>(b)];
        weight[b][0] = s.weight;
        for (size_t t = 0; t + 1 < s.tokens.size(); ++t) {
            in[b][static_cast<int64_t>(t)] = s.tokens[t];
            tg[b][static_cast<int64_t>(t)] = s.tokens[t + 1];
        }
        for (size_t j = 0; j < s.n_resp(); ++j)
            mk[b][s.prompt_len - 1 + static_cast<int64_t>(j)] = (s.loss_mask.empty() || s.loss_mask[j]) ? 1.0f : 0.0f;
    }
    for (const Field& f : kFields) {
        bool any = false;
        for (size_t i = begin; i < end; ++i) any = any || !(batch[i].*f.member).empty();
        if (!any) continue;
        torch::Tensor x = torch::zeros({n, T}, torch::kFloat32);
        auto xa = x.accessor<float, 2>();
        for (int64_t b = 0; b < n; ++b) {
            const size_t i = begin + static_cast<size_t>(b);
            const TrainSeq& s = batch[i];
            const std::vector<float>& v = s.*f.member;
            const size_t nr = s.n_resp();
            const bool scalar = f.allow_scalar && v.size() == 1;
            if (!scalar && v.size() != nr)
                throw Error("engine: sample " + std::to_string(i) + " has " + std::to_string(v.size()) + " " + f.name +
                            " for " + std::to_string(nr) + " response tokens" + (f.allow_scalar ? " (or 1)" : ""));
            for (size_t j = 0; j < nr; ++j) xa[b][s.prompt_len - 1 + static_cast<int64_t>(j)] = scalar ? v[0] : v[j];
        }
        mb.*f.dest = x.to(device);
    }
    mb.inputs = inputs.to(device);
    mb.targets = targets.to(device);
    mb.mask = mask.to(device);
    mb.weight = weight.to(device);
    return mb;
}

void unpack_response(const torch::Tensor& per_slot, const std::vector<TrainSeq>& batch, size_t begin,
                     std::vector<std::vector<float>>& out) {
    torch::Tensor c = per_slot.detach().to(torch::kCPU).to(torch::kFloat32).contiguous();
    auto a = c.accessor<float, 2>();
    for (int64_t b = 0; b < c.size(0); ++b) {
        const TrainSeq& s = batch[begin + static_cast<size_t>(b)];
        std::vector<float> v(s.n_resp());
        for (size_t j = 0; j < v.size(); ++j) v[j] = a[b][s.prompt_len - 1 + static_cast<int64_t>(j)];
        out.push_back(std::move(v));
    }
}

void TrainEngine::save_dir(const std::string& dir) const {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) throw Error("engine: cannot create " + dir + ": " + ec.message());
    const fs::path p = fs::path(dir) / "engine_state.pt";
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    if (!out) throw Error("engine: cannot write " + p.string());
    save(out);
    out.flush();
    if (!out) throw Error("engine: cannot write " + p.string());
}

void TrainEngine::load_dir(const std::string& dir) {
    const fs::path p = fs::path(dir) / "engine_state.pt";
    std::ifstream in(p, std::ios::binary);
    if (!in) throw Error("engine: cannot read " + p.string());
    load(in);
}

}  // namespace tagflow::train
