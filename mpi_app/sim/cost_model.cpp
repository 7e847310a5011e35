// SPDX-License-Identifier: Apache-2.0
// cost_model: see the header.
#include "sim/cost_model.hpp"

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/error.hpp"

namespace tagflow::sim {

double HwCost::decode(double b) const {
    if (b <= 0) return 0.0;
    const auto& x = decode_batch;
    const auto& y = decode_s;
    if (x.size() == 1) return y[0];
    size_t i = 1;
    while (i + 1 < x.size() && b > x[i]) ++i;
    const double f = (b - x[i - 1]) / (x[i] - x[i - 1]);
    return std::max(0.0, y[i - 1] + f * (y[i] - y[i - 1]));
}

double HwCost::train_per_token(double seq) const {
    const auto& x = train_seq;
    const auto& y = train_s_per_token_seq;
    if (x.empty()) return train_s_per_token;
    if (seq <= x.front()) return y.front();
    if (seq >= x.back()) return y.back();
    size_t i = 1;
    while (seq > x[i]) ++i;
    const double f = (seq - x[i - 1]) / (x[i] - x[i - 1]);
    return y[i - 1] + f * (y[i] - y[i - 1]);
}

const HwCost& CostModel::at(const std::string& type) const {
    auto it = hw.find(type);
    if (it == hw.end()) {
        std::string known;
        for (const auto& [k, v] : hw) known += (known.empty() ? "" : ", ") + k;
        throw ConfigError("--hw: unknown hardware type '" + type + "' (known: " + known +
                          "; add it with --cost FILE.json)");
    }
    return it->second;
}

double CostModel::broadcast_s(int receivers) const {
    if (receivers <= 0) return 0.0;
    return std::ceil(std::log2(receivers + 1.0)) * latency_s + model_bytes / bandwidth_Bps;
}

double CostModel::allreduce_s(int n) const {
    if (n <= 1) return 0.0;
    return 2.0 * (n - 1) / n * model_bytes / bandwidth_Bps + 2.0 * std::ceil(std::log2(n)) * latency_s;
}

CostModel default_costs() {
    CostModel m;
    // h100: ~1.5B parameters in bf16 (3 GB): a decode step reads the weights once (~1 ms at
    // 3.3 TB/s, ~3 ms with kernel launches) plus the KV cache per sequence; prefill and training
    // at ~40% of 990 TFLOP/s (2 and 6 FLOPs per parameter and token).
    HwCost h100;
    h100.decode_batch = {1, 64, 256};
    h100.decode_s = {3e-3, 5e-3, 11e-3};
    h100.prefill_s_per_token = 7.5e-6;
    h100.train_s_per_token = 23e-6;
    h100.source = "default (illustrative)";
    m.hw["h100"] = h100;
    // t4: 320 GB/s and ~65 TFLOP/s fp16 peak at ~30%: ~10x an h100 per decode step and per token.
    HwCost t4;
    t4.decode_batch = {1, 64, 256};
    t4.decode_s = {12e-3, 30e-3, 90e-3};
    t4.prefill_s_per_token = 150e-6;
    t4.train_s_per_token = 460e-6;
    t4.max_batch = 128;
    t4.source = "default (illustrative)";
    m.hw["t4"] = t4;
    // cpu: one core of the 2-core dev VM, tagflow train's default model (d 64, 2 layers), as
    // measured once by tests/bench/sim_calibrate.sh (rerun it: this machine's load varies).
    HwCost cpu;
    cpu.decode_batch = {1, 4, 16, 64, 256};
    cpu.decode_s = {0.25e-3, 0.35e-3, 0.7e-3, 2.0e-3, 7.5e-3};
    cpu.prefill_s_per_token = 25e-6;
    cpu.train_s_per_token = 150e-6;
    cpu.source = "default (dev VM estimate)";
    m.hw["cpu"] = cpu;
    return m;
}

namespace {

double num(const nlohmann::json& j, const char* key, double dflt, const std::string& what, bool positive) {
    if (!j.contains(key)) return dflt;
    if (!j[key].is_number()) throw ConfigError(what + ": \"" + key + "\" must be a number");
    const double v = j[key].get<double>();
    if (!std::isfinite(v) || v < 0 || (positive && v <= 0))
        throw ConfigError(what + ": \"" + key + "\" must be " + (positive ? "> 0" : ">= 0") + ", got " +
                          std::to_string(v));
    return v;
}

// A measured curve: arrays `xk` (>= 1, ascending) and `yk` (seconds > 0) of the same nonzero
// length, both or neither. Leaves x and y alone when neither is given.
void read_points(const nlohmann::json& h, const char* xk, const char* yk, const char* xname, const std::string& w,
                 std::vector<double>& x, std::vector<double>& y) {
    if (!h.contains(xk) && !h.contains(yk)) return;
    if (!h.contains(xk) || !h.contains(yk) || !h[xk].is_array() || !h[yk].is_array() || h[xk].size() != h[yk].size() ||
        h[xk].empty())
        throw ConfigError(w + ": \"" + xk + "\" and \"" + yk + "\" must be arrays of the same nonzero length");
    x.clear();
    y.clear();
    for (size_t i = 0; i < h[xk].size(); ++i) {
        if (!h[xk][i].is_number() || !h[yk][i].is_number())
            throw ConfigError(w + ": \"" + xk + "\" points must be numbers");
        const double a = h[xk][i].get<double>(), b = h[yk][i].get<double>();
        if (!(a >= 1) || !(b > 0) || (!x.empty() && a <= x.back()))
            throw ConfigError(w + ": \"" + xk + "\" points need " + xname + " >= 1 ascending and seconds > 0");
        x.push_back(a);
        y.push_back(b);
    }
}

}  // namespace

void merge_cost_json(CostModel& m, const std::string& text, const std::string& what) {
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(text);
    } catch (const std::exception& e) {
        std::string msg = e.what();
        throw ConfigError(what + ": not valid JSON (" + msg.substr(0, msg.find('\n')) + ")");
    }
    if (!j.is_object()) throw ConfigError(what + ": expected a JSON object");
    m.model_bytes = num(j, "model_bytes", m.model_bytes, what, true);
    if (j.contains("train_padded")) {
        if (!j["train_padded"].is_boolean()) throw ConfigError(what + ": \"train_padded\" must be true or false");
        m.train_padded = j["train_padded"].get<bool>();
    }
    m.step_io_s = num(j, "step_io_s", m.step_io_s, what, false);
    if (j.contains("link")) {
        const auto& l = j["link"];
        if (!l.is_object()) throw ConfigError(what + ": \"link\" must be an object");
        m.latency_s = num(l, "latency_s", m.latency_s, what + " link", false);
        m.bandwidth_Bps = num(l, "bandwidth_Bps", m.bandwidth_Bps, what + " link", true);
    }
    if (j.contains("hw")) {
        if (!j["hw"].is_object()) throw ConfigError(what + ": \"hw\" must be an object of hardware types");
        for (const auto& [name, h] : j["hw"].items()) {
            const std::string w = what + " hw." + name;
            if (!h.is_object()) throw ConfigError(w + ": must be an object");
            HwCost c = m.hw.count(name) ? m.hw[name] : HwCost{};
            read_points(h, "decode_batch", "decode_s", "batches", w, c.decode_batch, c.decode_s);
            read_points(h, "train_seq", "train_s_per_token_seq", "sequence lengths", w, c.train_seq,
                        c.train_s_per_token_seq);
            c.decode_s_per_ctx_token = num(h, "decode_s_per_ctx_token", c.decode_s_per_ctx_token, w, false);
            c.prefill_s_per_token = num(h, "prefill_s_per_token", c.prefill_s_per_token, w, false);
            c.train_s_per_token = num(h, "train_s_per_token", c.train_s_per_token, w, true);
            c.train_first_s = num(h, "train_first_s", c.train_first_s, w, false);
            const double mb = num(h, "max_batch", c.max_batch, w, true);
            if (mb != std::floor(mb) || mb > 1e6) throw ConfigError(w + ": \"max_batch\" must be a whole number");
            c.max_batch = static_cast<int>(mb);
            c.source = h.contains("source") && h["source"].is_string() ? h["source"].get<std::string>() : what;
            m.hw[name] = c;
        }
    }
    m.source = what;
}

void merge_cost_file(CostModel& m, const std::string& path) {
    std::ifstream f(path);
    if (!f) throw ConfigError("--cost " + path + ": cannot open");
    std::stringstream ss;
    ss << f.rdbuf();
    merge_cost_json(m, ss.str(), "--cost " + path);
}

std::string to_json(const CostModel& m) {
    nlohmann::json j;
    j["model_bytes"] = m.model_bytes;
    j["train_padded"] = m.train_padded;
    j["step_io_s"] = m.step_io_s;
    j["link"] = {{"latency_s", m.latency_s}, {"bandwidth_Bps", m.bandwidth_Bps}};
    for (const auto& [k, c] : m.hw) {
        j["hw"][k] = {{"decode_batch", c.decode_batch},
                      {"decode_s", c.decode_s},
                      {"decode_s_per_ctx_token", c.decode_s_per_ctx_token},
                      {"prefill_s_per_token", c.prefill_s_per_token},
                      {"train_s_per_token", c.train_s_per_token},
                      {"train_first_s", c.train_first_s},
                      {"max_batch", c.max_batch},
                      {"source", c.source}};
        if (!c.train_seq.empty()) {
            j["hw"][k]["train_seq"] = c.train_seq;
            j["hw"][k]["train_s_per_token_seq"] = c.train_s_per_token_seq;
        }
    }
    return j.dump(2);
}

}  // namespace tagflow::sim
