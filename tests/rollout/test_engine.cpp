// SPDX-License-Identifier: Apache-2.0
// test_engine: the rollout engine against the plain full forward of LlamaModel (greedy
// tokens = argmax loop, logprobs = log_softmax of the full forward), per-request random
// streams (same completions for any batch size), continuous batching (slots really refilled),
// stop tokens, max_tokens, top-k/top-p/temperature on hand-made logits and on a tiny-vocab
// model, bf16, weight changes, request errors and the evaluate() helper.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "common/error.hpp"
#include "fixtures.hpp"
#include "model/llama.hpp"
#include "rollout/engine.hpp"
#include "rollout/sampling.hpp"
#include "rollout/task.hpp"

using namespace tagflow;
using namespace tagflow::rollout;
using tagflow::model::HfConfig;
using tagflow::model::LlamaModel;

namespace {

LlamaModel make_model(const HfConfig& c, uint64_t seed, double std = 0.1) {
    LlamaModel m(c, 0);
    m->reset_parameters(seed, std);
    return m;
}

std::vector<std::vector<int32_t>> prompts_for(int64_t vocab, const std::vector<int>& lengths, int salt = 0) {
    std::vector<std::vector<int32_t>> out;
    for (std::size_t i = 0; i < lengths.size(); ++i) {
        std::vector<int32_t> p;
        for (int t = 0; t < lengths[i]; ++t)
            p.push_back(
                static_cast<int32_t>((7 * i + 13 * static_cast<std::size_t>(t) + 3 + static_cast<std::size_t>(salt)) %
                                     static_cast<std::size_t>(vocab)));
        out.push_back(p);
    }
    return out;
}

/// log_softmax(full forward / T) over prompt + response: row t = distribution of token t+1.
torch::Tensor full_logprobs(LlamaModel& m, const std::vector<int32_t>& prompt, const std::vector<int32_t>& response,
                            double temperature) {
    torch::NoGradGuard ng;
    std::vector<int64_t> seq(prompt.begin(), prompt.end());
    seq.insert(seq.end(), response.begin(), response.end());
    const torch::Tensor tok = torch::tensor(seq, torch::kLong).view({1, -1});
    torch::Tensor logits = m->forward(tok).squeeze(0);
    if (temperature > 0) logits = logits / temperature;
    return torch::log_softmax(logits, -1);
}

/// Checks every engine logprob against the full forward; returns the max |diff|.
double check_logprobs(LlamaModel& m, const std::vector<int32_t>& prompt, const GenResult& r, double temperature) {
    const torch::Tensor lp = full_logprobs(m, prompt, r.response, temperature);
    double worst = 0;
    for (std::size_t i = 0; i < r.response.size(); ++i) {
        const double ref = lp[static_cast<int64_t>(prompt.size() + i) - 1][r.response[i]].item<double>();
        worst = std::max(worst, std::abs(ref - static_cast<double>(r.logprobs[i])));
    }
    return worst;
}

GenParams greedy(int32_t max_tokens) {
    GenParams p;
    p.temperature = 0;
    p.max_tokens = max_tokens;
    return p;
}

}  // namespace

// ---- the sampler on hand-made logits ----

TEST(Sampling, StreamsAreDeterministicAndUniform) {
    EXPECT_EQ(stream_uniform(5, 3), stream_uniform(5, 3));
    EXPECT_NE(stream_uniform(5, 3), stream_uniform(5, 4));
    EXPECT_NE(stream_uniform(5, 3), stream_uniform(6, 3));
    EXPECT_NE(derive_seed(1, 0), derive_seed(1, 1));
    double sum = 0;
    int low = 0;
    for (uint64_t t = 0; t < 20000; ++t) {
        const double u = stream_uniform(42, t);
        ASSERT_GE(u, 0.0);
        ASSERT_LT(u, 1.0);
        sum += u;
        low += u < 0.25;
    }
    EXPECT_NEAR(sum / 20000, 0.5, 0.01);
    EXPECT_NEAR(low / 20000.0, 0.25, 0.01);
}

TEST(Sampling, InverseCdfWithTopKAndTopP) {
    // probs of a 4-token row: 0.5, 0.3, 0.15, 0.05 (in shuffled index order).
    const std::vector<float> p{0.15f, 0.5f, 0.05f, 0.3f};
    torch::Tensor logits = torch::log(torch::tensor(p)).view({1, 4});
    for (int i = 0; i <= 100; ++i) {
        const double u = std::min(i / 100.0, 0.999999);
        torch::Tensor lp;
        // no filter: cumulative in index order 0.15, 0.65, 0.70, 1.0
        int64_t t = sample_rows(logits, {RowSampling{1.0, 1.0, 0, u}}, lp).item<int64_t>();
        const int64_t want = u < 0.15 ? 0 : u < 0.65 ? 1 : u < 0.70 ? 2 : 3;
        if (std::abs(u - 0.15) > 1e-6 && std::abs(u - 0.65) > 1e-6 && std::abs(u - 0.70) > 1e-6) {
            EXPECT_EQ(t, want) << "u=" << u;
        }
        EXPECT_NEAR(lp.item<double>(), std::log(p[static_cast<std::size_t>(t)]), 1e-6);
        // top-k 2: tokens 1 (0.5) then 3 (0.3) in sorted order: token 1 iff u * 0.8 < 0.5
        t = sample_rows(logits, {RowSampling{1.0, 1.0, 2, u}}, lp).item<int64_t>();
        if (std::abs(u * 0.8 - 0.5) > 1e-6) {
            EXPECT_EQ(t, u * 0.8 < 0.5 ? 1 : 3) << "u=" << u;
        }
        // log-probability before filtering
        EXPECT_NEAR(lp.item<double>(), std::log(p[static_cast<std::size_t>(t)]), 1e-6);
        // top-p 0.7: mass before token 3 is 0.5 < 0.7 (kept), before token 0 is 0.8 (dropped)
        t = sample_rows(logits, {RowSampling{1.0, 0.7, 0, u}}, lp).item<int64_t>();
        EXPECT_TRUE(t == 1 || t == 3) << "u=" << u;
        // top-p 0.4: only the most likely token
        EXPECT_EQ(sample_rows(logits, {RowSampling{1.0, 0.4, 0, u}}, lp).item<int64_t>(), 1);
        // top-k 1 at any temperature = greedy
        EXPECT_EQ(sample_rows(logits, {RowSampling{3.0, 1.0, 1, u}}, lp).item<int64_t>(), 1);
    }
}

TEST(Sampling, TemperatureShapesTheFrequencies) {
    const torch::Tensor row = torch::tensor({1.0f, 0.0f, -1.0f, 0.5f});
    const int64_t n = 20000;
    for (double T : {0.5, 1.0, 2.0}) {
        std::vector<RowSampling> rows;
        for (int64_t i = 0; i < n; ++i)
            rows.push_back(RowSampling{T, 1.0, 0, stream_uniform(7, static_cast<uint64_t>(i))});
        torch::Tensor lp;
        const torch::Tensor tok = sample_rows(row.view({1, 4}).expand({n, 4}), rows, lp);
        const torch::Tensor want = torch::softmax(row / T, -1);
        for (int64_t v = 0; v < 4; ++v) {
            const double freq = (tok == v).sum().item<double>() / static_cast<double>(n);
            EXPECT_NEAR(freq, want[v].item<double>(), 0.012) << "T=" << T << " token " << v;
        }
        EXPECT_TRUE(torch::allclose(lp, torch::log_softmax(row / T, -1).index_select(0, tok), 1e-5, 1e-6));
    }
}

TEST(Sampling, MixedRowsInOneBatch) {
    const torch::Tensor logits = torch::randn({3, 50}, torch::TensorOptions().dtype(torch::kFloat));
    torch::Tensor lp;
    const std::vector<RowSampling> rows{{0.0, 1.0, 0, 0.9}, {0.8, 0.9, 5, 0.3}, {1.5, 1.0, 0, 0.6}};
    const torch::Tensor tok = sample_rows(logits, rows, lp);
    for (int64_t i = 0; i < 3; ++i) {  // each row as if alone
        torch::Tensor lp1;
        const int64_t t1 =
            sample_rows(logits.narrow(0, i, 1), {rows[static_cast<std::size_t>(i)]}, lp1).item<int64_t>();
        EXPECT_EQ(tok[i].item<int64_t>(), t1);
        EXPECT_FLOAT_EQ(lp[i].item<float>(), lp1.item<float>());
    }
    EXPECT_EQ(tok[0].item<int64_t>(), logits[0].argmax().item<int64_t>());
    EXPECT_NEAR(lp[0].item<double>(), torch::log_softmax(logits[0], -1).max().item<double>(), 1e-6);
}

// ---- the engine against the full forward ----

TEST(Engine, GreedyEqualsArgmaxLoopOverFullForward) {
    HfConfig abs_pos = model::fixtures::llama_tied_config();
    abs_pos.abs_positions = true;  // tagflow's learned absolute positions
    for (const HfConfig& c : {model::fixtures::qwen2_config(), model::fixtures::llama_tied_config(), abs_pos}) {
        LlamaModel m = make_model(c, 11);
        const auto prompts = prompts_for(c.vocab_size, {3, 9, 1, 14, 6});
        InferenceConfig ec;
        ec.max_batch = 2;  // forces refills while other rows decode
        const auto res = generate(m, prompts, greedy(12), ec);
        ASSERT_EQ(res.size(), prompts.size());
        for (std::size_t i = 0; i < prompts.size(); ++i) {
            std::vector<int64_t> seq(prompts[i].begin(), prompts[i].end());
            torch::NoGradGuard ng;
            ASSERT_EQ(res[i].response.size(), 12u);
            EXPECT_EQ(res[i].finish, FinishReason::kLength);
            EXPECT_EQ(res[i].num_tokens, 12);
            EXPECT_EQ(res[i].prompt_tokens, static_cast<int32_t>(prompts[i].size()));
            for (int step = 0; step < 12; ++step) {
                const torch::Tensor logits = m->forward(torch::tensor(seq, torch::kLong).view({1, -1}))[0][-1];
                const int64_t want = logits.argmax().item<int64_t>();
                ASSERT_EQ(res[i].response[static_cast<std::size_t>(step)], want)
                    << c.model_type << " prompt " << i << " step " << step;
                EXPECT_NEAR(res[i].logprobs[static_cast<std::size_t>(step)],
                            torch::log_softmax(logits, -1)[want].item<double>(), 1e-4);
                seq.push_back(want);
            }
        }
    }
}

TEST(Engine, SampledLogprobsEqualFullForward) {
    const HfConfig c = model::fixtures::qwen2_config();
    LlamaModel m = make_model(c, 5);
    const auto prompts = prompts_for(c.vocab_size, {4, 11, 2, 7, 5, 8}, 1);
    for (const GenParams& base :
         {GenParams{0.7, 0.9, 0, 10, {}, 3}, GenParams{1.3, 1.0, 8, 10, {}, 4}, GenParams{1.0, 1.0, 0, 10, {}, 5}}) {
        InferenceConfig ec;
        ec.max_batch = 4;
        const auto res = generate(m, prompts, base, ec);
        for (std::size_t i = 0; i < prompts.size(); ++i)
            EXPECT_LT(check_logprobs(m, prompts[i], res[i], base.temperature), 1e-4) << "T=" << base.temperature;
    }
}

TEST(Engine, SameCompletionsForAnyBatchSize) {
    const HfConfig c = model::fixtures::llama_tied_config();
    LlamaModel m = make_model(c, 21);
    const auto prompts = prompts_for(c.vocab_size, {5, 1, 12, 3, 8, 2, 9, 4, 6, 10, 7, 3}, 2);
    std::vector<std::vector<GenResult>> runs;
    for (int64_t mb : {1, 3, 16}) {
        InferenceEngine engine(m, InferenceConfig{mb, false});
        for (std::size_t i = 0; i < prompts.size(); ++i) {
            GenRequest r;
            r.id = static_cast<int64_t>(100 + i);
            r.prompt = prompts[i];
            r.params.temperature = i % 3 == 0 ? 0.0 : 1.0;
            r.params.top_p = i % 4 == 1 ? 0.8 : 1.0;
            r.params.top_k = i % 5 == 2 ? 6 : 0;
            r.params.max_tokens = 4 + static_cast<int32_t>((i * 5) % 13);
            r.params.stop_ids = {7, 40};
            r.params.seed = derive_seed(99, i);
            engine.submit(r);
        }
        runs.push_back(engine.run());
        EXPECT_EQ(engine.stats().max_active, std::min<int64_t>(mb, static_cast<int64_t>(prompts.size())));
    }
    for (std::size_t k = 1; k < runs.size(); ++k) {
        ASSERT_EQ(runs[k].size(), prompts.size());
        for (std::size_t i = 0; i < prompts.size(); ++i) {
            EXPECT_EQ(runs[k][i].id, static_cast<int64_t>(100 + i));
            EXPECT_EQ(runs[k][i].response, runs[0][i].response) << "request " << i << " run " << k;
            EXPECT_EQ(runs[k][i].finish, runs[0][i].finish);
            ASSERT_EQ(runs[k][i].logprobs.size(), runs[0][i].logprobs.size());
            for (std::size_t t = 0; t < runs[0][i].logprobs.size(); ++t)
                EXPECT_NEAR(runs[k][i].logprobs[t], runs[0][i].logprobs[t], 1e-5);
        }
    }
    // The streams are really random: sampled requests do not all agree with greedy decoding.
    const auto g = generate(m, prompts, greedy(6));
    int differ = 0;
    for (std::size_t i = 0; i < prompts.size(); ++i)
        if (i % 3 != 0 && runs[0][i].response.size() >= 2 && g[i].response[0] != runs[0][i].response[0]) ++differ;
    EXPECT_GT(differ, 0);
}

TEST(Engine, StopTokensAndMaxTokens) {
    const HfConfig c = model::fixtures::qwen2_config();
    LlamaModel m = make_model(c, 8);
    const auto prompts = prompts_for(c.vocab_size, {6, 3, 9}, 3);
    const auto free_run = generate(m, prompts, greedy(16));
    for (std::size_t i = 0; i < prompts.size(); ++i) {
        const auto& g = free_run[i].response;
        ASSERT_EQ(g.size(), 16u);
        GenParams p = greedy(16);
        p.stop_ids = {g[9], g[5], 96};  // several stop ids; the earliest occurrence ends the response
        std::size_t end = 0;
        while (std::find(p.stop_ids.begin(), p.stop_ids.end(), g[end]) == p.stop_ids.end()) ++end;
        const auto r = generate(m, {prompts[i]}, p).at(0);
        EXPECT_EQ(r.finish, FinishReason::kStop);
        EXPECT_EQ(r.response, std::vector<int32_t>(g.begin(), g.begin() + static_cast<std::ptrdiff_t>(end) + 1));
        EXPECT_EQ(r.logprobs.size(), r.response.size());
        const auto r5 = generate(m, {prompts[i]}, greedy(5)).at(0);
        EXPECT_EQ(r5.finish, FinishReason::kLength);
        EXPECT_EQ(r5.response, std::vector<int32_t>(g.begin(), g.begin() + 5));
    }
    // max_tokens 1: the token sampled from the prefill only; 0: nothing.
    EXPECT_EQ(generate(m, {prompts[0]}, greedy(1)).at(0).response, std::vector<int32_t>{free_run[0].response[0]});
    EXPECT_TRUE(generate(m, {prompts[0]}, greedy(0)).at(0).response.empty());
    EXPECT_STREQ(finish_reason_name(FinishReason::kStop), "stop");
    EXPECT_STREQ(finish_reason_name(FinishReason::kLength), "length");
}

TEST(Engine, TopK1IsGreedyAndFiltersNeverLeak) {
    HfConfig c = model::fixtures::qwen2_config();
    c.vocab_size = 8;  // tiny vocabulary: filtered-out tokens would be drawn often if they leaked
    LlamaModel m = make_model(c, 3, 0.3);
    const auto prompts = prompts_for(c.vocab_size, {2, 5, 3, 7, 1, 4, 6, 2}, 4);
    const auto g = generate(m, prompts, greedy(12));
    GenParams k1{1.7, 1.0, 1, 12, {}, 1};
    const auto s = generate(m, prompts, k1);
    for (std::size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(s[i].response, g[i].response);

    int checked = 0;
    std::set<int32_t> seen;
    for (const GenParams& p :
         {GenParams{1.5, 1.0, 3, 12, {}, 2}, GenParams{1.5, 0.6, 0, 12, {}, 3}, GenParams{2.0, 0.7, 2, 12, {}, 4}}) {
        for (int rep = 0; rep < 4; ++rep) {
            GenParams q = p;
            q.seed += static_cast<uint64_t>(rep) * 1000;
            const auto res = generate(m, prompts, q);
            for (std::size_t i = 0; i < prompts.size(); ++i) {
                const torch::Tensor lp = full_logprobs(m, prompts[i], res[i].response, p.temperature);
                for (std::size_t t = 0; t < res[i].response.size(); ++t) {
                    const torch::Tensor probs = lp[static_cast<int64_t>(prompts[i].size() + t) - 1].exp();
                    const auto sorted = probs.sort(-1, /*descending=*/true);
                    const torch::Tensor vals = std::get<0>(sorted), idx = std::get<1>(sorted);
                    const int32_t tok = res[i].response[t];
                    seen.insert(tok);
                    int64_t rank = (idx == tok).nonzero().item<int64_t>();
                    const double before = rank == 0 ? 0.0 : vals.narrow(0, 0, rank).sum().item<double>();
                    if (p.top_k > 0) {
                        EXPECT_LT(rank, p.top_k);
                    }
                    if (p.top_p < 1.0 && std::abs(before - p.top_p) > 1e-4) {
                        EXPECT_LT(before, p.top_p);
                    }
                    ++checked;
                }
            }
        }
    }
    EXPECT_GT(checked, 1000);
    EXPECT_GT(seen.size(), 2u);  // sampling really explored
}

TEST(Engine, SlotsAreRefilledWhileOthersDecode) {
    const HfConfig c = model::fixtures::llama_tied_config();
    LlamaModel m = make_model(c, 4);
    InferenceEngine engine(m, InferenceConfig{4, false});
    const int n = 16;
    std::vector<int32_t> max_tokens;
    int64_t per_request_steps = 0;
    for (int i = 0; i < n; ++i) {
        GenRequest r;
        r.id = i;
        r.prompt = prompts_for(c.vocab_size, {2 + i % 5}, i).at(0);
        r.params = greedy(i % 2 == 0 ? 30 : 2);  // long, short, long, short, ...
        max_tokens.push_back(r.params.max_tokens);
        per_request_steps += r.params.max_tokens - 1;  // the first token comes from the prefill
        engine.submit(r);
    }
    std::vector<int64_t> order;
    const auto res = engine.run([&](const GenResult& r) { order.push_back(r.id); });
    const InferenceStats& st = engine.stats();
    // Static batches of 4 in submission order would each take 29 decode steps: 4 * 29 = 116.
    int64_t static_steps = 0;
    for (int b = 0; b < n; b += 4)
        static_steps += *std::max_element(max_tokens.begin() + b, max_tokens.begin() + b + 4) - 1;
    EXPECT_LT(st.decode_steps, static_steps);
    EXPECT_LT(st.decode_steps, per_request_steps);
    EXPECT_EQ(st.decode_rows, per_request_steps);  // no idle rows are ever decoded
    EXPECT_EQ(st.max_active, 4);
    EXPECT_GT(st.prefills, 4);  // admissions happened while others were decoding
    // Request 5 (short) was admitted into a slot freed by request 1 or 3 while request 0 (long,
    // in the first batch) kept decoding, and finished long before it.
    const auto pos = [&](int64_t id) { return std::find(order.begin(), order.end(), id) - order.begin(); };
    EXPECT_LT(pos(5), pos(0));
    EXPECT_LT(pos(0), pos(4));
    ASSERT_EQ(order.size(), static_cast<std::size_t>(n));
    // Same tokens as one request at a time.
    std::vector<std::vector<int32_t>> prompts;
    for (int i = 0; i < n; ++i) prompts.push_back(prompts_for(c.vocab_size, {2 + i % 5}, i).at(0));
    for (int i = 0; i < n; ++i) {
        const auto one =
            generate(m, {prompts[static_cast<std::size_t>(i)]}, greedy(max_tokens[static_cast<std::size_t>(i)]));
        EXPECT_EQ(res[static_cast<std::size_t>(i)].response, one.at(0).response) << "request " << i;
    }
}

TEST(Engine, CallbackCanSubmitMoreWork) {
    const HfConfig c = model::fixtures::qwen2_config();
    LlamaModel m = make_model(c, 9);
    InferenceEngine engine(m, InferenceConfig{2, false});
    GenRequest r;
    r.prompt = {1, 2, 3};
    r.params = greedy(4);
    engine.submit(r);
    int calls = 0;
    const auto res = engine.run([&](const GenResult& done) {
        ++calls;
        if (done.id < 3) {
            GenRequest next = r;
            next.id = done.id + 1;
            next.prompt.push_back(static_cast<int32_t>(done.id + 10));
            engine.submit(next);
        }
    });
    EXPECT_EQ(calls, 4);
    ASSERT_EQ(res.size(), 4u);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(res[static_cast<std::size_t>(i)].id, i);
    EXPECT_FALSE(engine.step());
}

TEST(Engine, Bf16IsCloseToFp32) {
    const HfConfig c = model::fixtures::qwen2_config();
    LlamaModel m = make_model(c, 13);
    const auto prompts = prompts_for(c.vocab_size, {5, 9, 2}, 5);
    InferenceConfig ec;
    ec.bf16 = true;
    for (double T : {0.0, 1.0}) {
        GenParams p{T, 1.0, 0, 10, {}, 17};
        const auto res = generate(m, prompts, p, ec);
        for (std::size_t i = 0; i < prompts.size(); ++i) {
            ASSERT_EQ(res[i].response.size(), 10u);
            const double d = check_logprobs(m, prompts[i], res[i], T);
            EXPECT_LT(d, 0.08) << "bf16 vs fp32 logprob, T=" << T;
            EXPECT_GT(d, 0.0);  // it really ran in bf16
        }
    }
}

TEST(Engine, NoticesWeightChanges) {
    const HfConfig c = model::fixtures::qwen2_config();
    LlamaModel m = make_model(c, 1);
    InferenceEngine engine(m, InferenceConfig{4, false});
    const auto prompts = prompts_for(c.vocab_size, {4, 6}, 6);
    auto submit_all = [&]() {
        for (std::size_t i = 0; i < prompts.size(); ++i)
            engine.submit(GenRequest{static_cast<int64_t>(i), prompts[i], greedy(8)});
    };
    submit_all();
    const auto before = engine.run();
    m->reset_parameters(2, 0.1);  // in place, as an optimiser step or a weight sync would
    submit_all();
    const auto after = engine.run();
    EXPECT_EQ(engine.stats().weight_refreshes, 1);
    const auto fresh = generate(m, prompts, greedy(8));
    bool any_change = false;
    for (std::size_t i = 0; i < prompts.size(); ++i) {
        EXPECT_EQ(after[i].response, fresh[i].response);
        any_change |= after[i].response != before[i].response;
    }
    EXPECT_TRUE(any_change);
}

TEST(Engine, RejectsBadRequests) {
    const HfConfig c = model::fixtures::qwen2_config();  // vocab 97, 64 positions
    LlamaModel m = make_model(c, 1);
    InferenceEngine engine(m);
    auto req = [](std::vector<int32_t> prompt, GenParams p) { return GenRequest{7, std::move(prompt), p}; };
    EXPECT_THROW(engine.submit(req({}, greedy(4))), Error);
    EXPECT_THROW(engine.submit(req({1, 97}, greedy(4))), Error);
    EXPECT_THROW(engine.submit(req({1, -1}, greedy(4))), Error);
    EXPECT_THROW(engine.submit(req(std::vector<int32_t>(60, 1), greedy(6))), Error);
    EXPECT_NO_THROW(engine.submit(req(std::vector<int32_t>(60, 1), greedy(5))));
    EXPECT_THROW(engine.submit(req({1}, GenParams{-1.0, 1.0, 0, 4, {}, 0})), Error);
    EXPECT_THROW(engine.submit(req({1}, GenParams{1.0, 0.0, 0, 4, {}, 0})), Error);
    EXPECT_THROW(engine.submit(req({1}, GenParams{1.0, 1.0, -2, 4, {}, 0})), Error);
    try {
        engine.submit(req({1, 500}, greedy(4)));
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("request 7"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("500"), std::string::npos) << e.what();
    }
    EXPECT_THROW(generate(m, {{1}}, greedy(2), std::vector<uint64_t>{1, 2}), Error);
    EXPECT_EQ(engine.run().size(), 1u);  // the one valid request
}

TEST(Engine, EvaluateOnATask) {
    const auto task = make_task("reverse", 3);
    HfConfig c = model::fixtures::llama_tied_config();
    c.vocab_size = task->vocab_size();
    c.max_position_embeddings = task->max_prompt_tokens() + task->max_response_tokens() + 2;
    LlamaModel m = make_model(c, 2);
    const double a = evaluate(m, *task, 10, /*batch_size=*/3);
    const double b = evaluate(m, *task, 10, /*batch_size=*/10);
    EXPECT_NEAR(a, b, 1e-12);
    // By hand: greedy completions stopped at EOS, mean reward.
    std::vector<std::vector<int32_t>> prompts;
    for (int i = 0; i < 10; ++i) prompts.push_back(task->eval_prompt(i));
    GenParams p = greedy(task->max_response_tokens());
    p.stop_ids = {task->eos_token()};
    const auto res = generate(m, prompts, p);
    double sum = 0;
    for (int i = 0; i < 10; ++i)
        sum += task->reward(prompts[static_cast<std::size_t>(i)], res[static_cast<std::size_t>(i)].response);
    EXPECT_NEAR(a, sum / 10, 1e-12);
    EXPECT_GE(a, 0.0);
    EXPECT_LE(a, 1.0);
}
