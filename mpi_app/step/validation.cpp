// SPDX-License-Identifier: Apache-2.0
// validation: see the header. Every response (greedy and sampled) of every row goes to the engine
// at once, so they decode together in its slots; their texts then go to the scorer in one batch.
#include "step/validation.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "common/mpi_env.hpp"
#include "common/mpi_gather.hpp"
#include "rollout/engine.hpp"
#include "rollout/sampling.hpp"

namespace tagflow::sched {
namespace {

void add(ValScore& into, const ValScore& s) {
    into.n += s.n;
    into.greedy_sum += s.greedy_sum;
    into.sampled_sum += s.sampled_sum;
    into.sampled_n += s.sampled_n;
}

nlohmann::json to_json(const ValScore& s) { return {s.n, s.greedy_sum, s.sampled_sum, s.sampled_n}; }
ValScore score_of(const nlohmann::json& j) {
    ValScore s;
    s.n = j.at(0).get<int64_t>();
    s.greedy_sum = j.at(1).get<double>();
    s.sampled_sum = j.at(2).get<double>();
    s.sampled_n = j.at(3).get<int64_t>();
    return s;
}

}  // namespace

std::vector<int32_t> response_stop_ids(const data::Row& row, const text::Tokenizer& tok) {
    return row.prompt.is_string() ? tok.stop_ids() : tok.chat_stop_ids();
}

ValResult validate(rollout::InferenceEngine& engine, const text::Tokenizer& tok, const std::vector<data::Row>& rows,
                   reward::Scorer& scorer, const ValOptions& opt) {
    if (opt.samples < 1)
        throw ConfigError("validation: samples must be at least 1, got " + std::to_string(opt.samples));
    if (opt.max_tokens < 1) throw ConfigError("validation: max_tokens must be at least 1");
    ValResult res;
    res.k = opt.samples;
    const int64_t per_row = opt.samples > 1 ? 1 + opt.samples : 1;  // greedy, then the K samples
    std::vector<std::vector<int32_t>> stops(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) {
        const data::Row& r = rows[i];
        std::vector<int32_t> prompt = data::prompt_ids(r, tok);
        stops[i] = response_stop_ids(r, tok);
        int32_t budget = opt.max_tokens;
        if (opt.positions > 0) {
            const int64_t room = opt.positions + 1 - static_cast<int64_t>(prompt.size());
            if (room < 1)
                throw ConfigError("validation row " + std::to_string(r.index) + " (line " + std::to_string(r.line) +
                                  "): its prompt has " + std::to_string(prompt.size()) + " tokens, the model only " +
                                  std::to_string(opt.positions) + " positions");
            budget = static_cast<int32_t>(std::min<int64_t>(budget, room));
        }
        for (int64_t j = 0; j < per_row; ++j) {
            rollout::GenRequest q;
            q.id = static_cast<int64_t>(i) * per_row + j;
            q.prompt = prompt;
            q.params.max_tokens = budget;
            q.params.stop_ids = stops[i];
            if (j == 0) {
                q.params.temperature = 0.0;
            } else {
                q.params.temperature = opt.temperature;
                q.params.top_p = opt.top_p;
                q.params.top_k = opt.top_k;
                q.params.seed = rollout::derive_seed(rollout::derive_seed(opt.seed, r.index), static_cast<uint64_t>(j));
            }
            engine.submit(std::move(q));
        }
    }
    const std::vector<rollout::GenResult> gens = engine.run();
    if (gens.size() != rows.size() * static_cast<size_t>(per_row))
        throw InternalError("validation: the engine returned " + std::to_string(gens.size()) + " results for " +
                            std::to_string(rows.size() * static_cast<size_t>(per_row)) + " requests");

    std::vector<reward::Request> reqs;
    std::vector<std::string> texts(gens.size());
    for (const rollout::GenResult& g : gens) {
        const auto at = static_cast<size_t>(g.id);
        const data::Row& r = rows[at / static_cast<size_t>(per_row)];
        std::vector<int32_t> ids = g.response;
        const auto& st = stops[at / static_cast<size_t>(per_row)];
        if (!ids.empty() && std::find(st.begin(), st.end(), ids.back()) != st.end()) ids.pop_back();
        texts[at] = tok.decode(ids, /*skip_special=*/true);
        reward::Request q;
        q.id = static_cast<uint64_t>(g.id);
        q.row = static_cast<int64_t>(r.index);
        q.data_source = r.data_source;
        q.solution_str = texts[at];
        q.ground_truth = r.ground_truth.dump();
        q.extra_info = r.extra_info.dump();
        reqs.push_back(std::move(q));
    }
    scorer.submit(std::move(reqs));
    std::vector<reward::Result> results;
    scorer.drain(results);
    std::vector<double> score(gens.size(), 0.0);
    for (const reward::Result& x : results) {
        if (scorer.fatal(x)) throw Error("validation reward: " + x.cause);
        if (!x.ok) ++res.failed;
        score.at(static_cast<size_t>(x.id)) = x.ok ? x.score : 0.0;
    }
    for (size_t i = 0; i < rows.size(); ++i) {
        ValScore s;
        s.n = 1;
        s.greedy_sum = score[i * static_cast<size_t>(per_row)];
        for (int64_t j = 1; j < per_row; ++j) {
            s.sampled_sum += score[i * static_cast<size_t>(per_row) + static_cast<size_t>(j)];
            ++s.sampled_n;
        }
        add(res.sources[rows[i].data_source], s);
        add(res.overall, s);
        res.greedy.push_back(
            {rows[i].index, rows[i].data_source, texts[i * static_cast<size_t>(per_row)], s.greedy_sum});
    }
    return res;
}

ValResult reduce_validation(const ValResult& local, MPI_Comm comm) {
    nlohmann::json j = nlohmann::json::object();
    for (const auto& [k, v] : local.sources) j["s"][k] = to_json(v);
    j["f"] = local.failed;
    j["k"] = local.k;
    const std::string mine = j.dump();
    const GatheredBytes all = allgather_bytes(mine.data(), mine.size(), comm, "validation scores");
    ValResult out;
    out.k = local.k;
    out.greedy = local.greedy;
    for (int r = 0; r < all.ranks(); ++r) {
        const auto p = nlohmann::json::parse(all.part(r));
        out.failed += p.at("f").get<int64_t>();
        if (p.contains("s"))
            for (const auto& [k, v] : p.at("s").items()) {
                const ValScore s = score_of(v);
                add(out.sources[k], s);
                add(out.overall, s);
            }
    }
    return out;
}

std::vector<io::EvalRecord> eval_records(const ValResult& r, int32_t step, const std::string& task) {
    std::vector<io::EvalRecord> v;
    auto rows = [&](int32_t k) {
        auto mean = [&](const ValScore& s) { return static_cast<float>(k == 0 ? s.greedy() : s.mean_at_k()); };
        const bool only_unnamed = r.sources.size() == 1 && r.sources.begin()->first.empty();  // = the overall row
        if (!only_unnamed)
            for (const auto& [src, s] : r.sources)
                v.push_back({step, task, mean(s), static_cast<int32_t>(s.n), src, k});
        v.push_back({step, task, mean(r.overall), static_cast<int32_t>(r.overall.n), "", k});
    };
    rows(0);
    if (r.k > 1) rows(r.k);
    return v;
}

std::string val_task_name(const std::string& path) {
    const size_t slash = path.find_last_of('/');
    std::string n = slash == std::string::npos ? path : path.substr(slash + 1);
    for (const char* ext : {".gz", ".jsonl", ".json"})
        if (n.size() > std::strlen(ext) && n.compare(n.size() - std::strlen(ext), std::string::npos, ext) == 0)
            n.resize(n.size() - std::strlen(ext));
    return n;
}

std::string describe(const ValResult& r) {
    char b[64];
    std::snprintf(b, sizeof b, "%.3f", r.overall.greedy());
    std::string s = b;
    if (r.sources.size() > 1 || (r.sources.size() == 1 && !r.sources.begin()->first.empty())) {
        s += " (";
        bool first = true;
        for (const auto& [src, v] : r.sources) {
            std::snprintf(b, sizeof b, " %.3f", v.greedy());
            s += (first ? "" : ", ") + (src.empty() ? std::string("-") : src) + b;
            first = false;
        }
        s += ")";
    }
    if (r.k > 1) {
        std::snprintf(b, sizeof b, " mean@%d %.3f", r.k, r.overall.mean_at_k());
        s += b;
    }
    return s;
}

}  // namespace tagflow::sched
