// SPDX-License-Identifier: Apache-2.0
// engine: the backend-independent half of the TrainEngine interface — building and counting
// training sequences, splitting them into micro-batches, packing them right-padded or several
// per row (plan_packed_micro_batches) onto a device and back, and the directory form of save/load. See engine.hpp.
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

namespace {

void check_seq(const std::vector<TrainSeq>& batch, size_t i) {
    const TrainSeq& s = batch[i];
    if (s.prompt_len < 1 || static_cast<size_t>(s.prompt_len) > s.tokens.size())
        throw Error("engine: sample " + std::to_string(i) + " has prompt_len " + std::to_string(s.prompt_len) +
                    " for " + std::to_string(s.tokens.size()) + " tokens (need 1 <= prompt_len <= tokens)");
    if (!s.loss_mask.empty() && s.loss_mask.size() != s.n_resp())
        throw Error("engine: sample " + std::to_string(i) + " has " + std::to_string(s.loss_mask.size()) +
                    " loss_mask entries for " + std::to_string(s.n_resp()) + " response tokens");
}

// Input slots of a sequence: tokens - 1 (its last token is only a target).
int64_t seq_slots(const TrainSeq& s) { return std::max<int64_t>(static_cast<int64_t>(s.tokens.size()) - 1, 0); }

// rows[r] = batch indices concatenated in row r; `packed` adds positions, seq ids, per-slot weights.
MicroBatch pack_layout(const std::vector<TrainSeq>& batch, const std::vector<std::vector<size_t>>& rows, bool packed,
                       const torch::Device& device) {
    int64_t T = 1;
    MicroBatch mb;
    mb.packed = packed;
    for (size_t r = 0; r < rows.size(); ++r) {
        int64_t off = 0;
        for (size_t i : rows[r]) {
            if (i >= batch.size()) throw InternalError("pack_micro_batch: bad index");
            check_seq(batch, i);
            mb.index.push_back(i);
            mb.row.push_back(static_cast<int64_t>(r));
            mb.offset.push_back(off);
            off += seq_slots(batch[i]);
        }
        T = std::max(T, off);
        mb.real_tokens += off;
    }
    const int64_t n = static_cast<int64_t>(rows.size());
    const auto K = static_cast<int64_t>(mb.index.size());
    torch::Tensor inputs = torch::zeros({n, T}, torch::kInt64);
    torch::Tensor targets = torch::zeros({n, T}, torch::kInt64);
    torch::Tensor mask = torch::zeros({n, T}, torch::kFloat32);
    torch::Tensor weight = torch::ones({n, packed ? T : 1}, torch::kFloat32);
    torch::Tensor positions, seq_id;
    if (packed) {
        positions = torch::zeros({n, T}, torch::kInt64);
        seq_id = torch::full({n, T}, K, torch::kInt64);
    }
    auto in = inputs.accessor<int64_t, 2>();
    auto tg = targets.accessor<int64_t, 2>();
    auto mk = mask.accessor<float, 2>();
    auto wt = weight.accessor<float, 2>();
    for (int64_t k = 0; k < K; ++k) {
        const TrainSeq& s = batch[mb.index[static_cast<size_t>(k)]];
        const int64_t b = mb.row[static_cast<size_t>(k)], o = mb.offset[static_cast<size_t>(k)];
        const int64_t len = seq_slots(s);
        if (packed) {
            for (int64_t t = 0; t < len; ++t) wt[b][o + t] = s.weight;
            positions[b].narrow(0, o, len).copy_(torch::arange(len, torch::kInt64));
            seq_id[b].narrow(0, o, len).fill_(k);
        } else {
            wt[b][0] = s.weight;
        }
        for (int64_t t = 0; t < len; ++t) {
            in[b][o + t] = s.tokens[static_cast<size_t>(t)];
            tg[b][o + t] = s.tokens[static_cast<size_t>(t) + 1];
        }
        for (size_t j = 0; j < s.n_resp(); ++j)
            mk[b][o + s.prompt_len - 1 + static_cast<int64_t>(j)] =
                (s.loss_mask.empty() || s.loss_mask[j]) ? 1.0f : 0.0f;
    }
    for (const Field& f : kFields) {
        bool any = false;
        for (size_t i : mb.index) any = any || !(batch[i].*f.member).empty();
        if (!any) continue;
        torch::Tensor x = torch::zeros({n, T}, torch::kFloat32);
        auto xa = x.accessor<float, 2>();
        for (int64_t k = 0; k < K; ++k) {
            const size_t i = mb.index[static_cast<size_t>(k)];
            const int64_t b = mb.row[static_cast<size_t>(k)], o = mb.offset[static_cast<size_t>(k)];
            const TrainSeq& s = batch[i];
            const std::vector<float>& v = s.*f.member;
            const size_t nr = s.n_resp();
            const bool scalar = f.allow_scalar && v.size() == 1;
            if (!scalar && v.size() != nr)
                throw Error("engine: sample " + std::to_string(i) + " has " + std::to_string(v.size()) + " " + f.name +
                            " for " + std::to_string(nr) + " response tokens" + (f.allow_scalar ? " (or 1)" : ""));
            for (size_t j = 0; j < nr; ++j)
                xa[b][o + s.prompt_len - 1 + static_cast<int64_t>(j)] = scalar ? v[0] : v[j];
        }
        mb.*f.dest = x.to(device);
    }
    mb.inputs = inputs.to(device);
    mb.targets = targets.to(device);
    mb.mask = mask.to(device);
    mb.weight = weight.to(device);
    if (packed) {
        mb.positions = positions.to(device);
        mb.seq_id = seq_id.to(device);
    }
    return mb;
}

}  // namespace

MicroBatch pack_micro_batch(const std::vector<TrainSeq>& batch, size_t begin, size_t end, const torch::Device& device) {
    if (begin >= end || end > batch.size()) throw InternalError("pack_micro_batch: bad range");
    std::vector<std::vector<size_t>> rows;
    for (size_t i = begin; i < end; ++i) rows.push_back({i});
    MicroBatch mb = pack_layout(batch, rows, /*packed=*/false, device);
    mb.begin = begin;
    mb.end = end;
    return mb;
}

std::vector<PackPlan> plan_packed_micro_batches(const std::vector<TrainSeq>& batch, int64_t max_seqs,
                                                int64_t max_tokens) {
    if (max_seqs < 1) throw ConfigError("engine: micro_batch must be >= 1");
    if (max_tokens < 0) throw ConfigError("engine: micro_batch_tokens must be >= 0");
    int64_t L = 1;
    size_t longest = 0;
    std::vector<int64_t> slots(batch.size());
    for (size_t i = 0; i < batch.size(); ++i) {
        slots[i] = seq_slots(batch[i]);
        if (slots[i] > L) {
            L = slots[i];
            longest = i;
        }
    }
    if (max_tokens > 0 && max_tokens < L)
        throw ConfigError("--micro-batch-tokens " + std::to_string(max_tokens) + " is smaller than sample " +
                          std::to_string(longest) + "'s " + std::to_string(L) +
                          " token slots (prompt + response - 1); packed sequences are never split");
    std::vector<std::vector<size_t>> rows = first_fit_rows(slots);  // rows of L slots
    const int64_t per_mb = max_tokens > 0 ? std::max<int64_t>(max_tokens / L, 1) : max_seqs;
    std::vector<PackPlan> out;
    for (size_t r = 0; r < rows.size(); ++r) {
        if (r % static_cast<size_t>(per_mb) == 0) out.emplace_back();
        out.back().rows.push_back(std::move(rows[r]));
    }
    return out;
}

MicroBatch pack_rows(const std::vector<TrainSeq>& batch, const PackPlan& plan, const torch::Device& device) {
    if (plan.rows.empty()) throw InternalError("pack_rows: empty plan");
    return pack_layout(batch, plan.rows, /*packed=*/true, device);
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

void unpack_response(const torch::Tensor& per_slot, const std::vector<TrainSeq>& batch, const MicroBatch& mb,
                     std::vector<std::vector<float>>& out) {
    torch::Tensor c = per_slot.detach().to(torch::kCPU).to(torch::kFloat32).contiguous();
    auto a = c.accessor<float, 2>();
    if (out.size() < batch.size()) out.resize(batch.size());
    for (size_t k = 0; k < mb.index.size(); ++k) {
        const TrainSeq& s = batch[mb.index[k]];
        std::vector<float> v(s.n_resp());
        for (size_t j = 0; j < v.size(); ++j)
            v[j] = a[mb.row[k]][mb.offset[k] + s.prompt_len - 1 + static_cast<int64_t>(j)];
        out[mb.index[k]] = std::move(v);
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

Shard parse_shard(const std::string& s) {
    if (s == "off") return Shard::kOff;
    if (s == "optimizer") return Shard::kOptimizer;
    if (s == "gradients") return Shard::kGradients;
    throw ConfigError("--shard " + s + ": expected off, optimizer or gradients");
}

std::string optim_shard_name(const std::string& prefix, int64_t lo, int64_t hi) {
    return prefix + "." + std::to_string(lo) + "-" + std::to_string(hi) + ".pt";
}

bool parse_optim_shard_name(const std::string& path, const std::string& prefix, int64_t* lo, int64_t* hi) {
    const std::string name = fs::path(path).filename().string();
    if (name.size() < 4 || name.compare(name.size() - 3, 3, ".pt") != 0) return false;
    const std::string stem = name.substr(0, name.size() - 3);
    const size_t dot = stem.rfind('.'), dash = stem.rfind('-');
    if (dot == std::string::npos || dash == std::string::npos || dash < dot) return false;
    if (!prefix.empty() && stem.compare(0, dot, prefix) != 0) return false;
    try {
        size_t used = 0;
        *lo = std::stoll(stem.substr(dot + 1, dash - dot - 1), &used);
        if (used != dash - dot - 1) return false;
        *hi = std::stoll(stem.substr(dash + 1), &used);
        return used == stem.size() - dash - 1 && *lo >= 0 && *hi >= *lo;
    } catch (const std::exception&) {
        return false;
    }
}

std::vector<std::string> list_optim_shards(const std::string& dir, const std::string& prefix) {
    std::vector<std::string> out;
    std::error_code ec;
    int64_t lo = 0, hi = 0;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
        if (parse_optim_shard_name(it->path().string(), prefix, &lo, &hi)) out.push_back(it->path().string());
    std::sort(out.begin(), out.end());
    return out;
}

}  // namespace tagflow::train
