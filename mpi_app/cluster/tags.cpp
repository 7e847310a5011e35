// SPDX-License-Identifier: Apache-2.0
#include "cluster/tags.hpp"

#include <cctype>
#include <cstdlib>
#include <string_view>

#include "common/error.hpp"

namespace tagflow::cluster {
namespace {

std::string trim(std::string_view s) {
    size_t b = 0, e = s.size();
    while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
    while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
    return std::string(s.substr(b, e - b));
}

}  // namespace

uint32_t parse_tag_list(const std::string& list, const std::string& what) {
    uint32_t bits = 0;
    size_t start = 0;
    if (trim(list).empty()) throw ConfigError(what + ": empty tag list (allowed: rollout, train, critic)");
    while (start <= list.size()) {
        size_t comma = list.find(',', start);
        if (comma == std::string::npos) comma = list.size();
        std::string tag = trim(std::string_view(list).substr(start, comma - start));
        if (tag == "rollout") bits |= kRollout;
        else if (tag == "train") bits |= kTrain;
        else if (tag == "critic") bits |= kCritic;
        else if (tag.empty()) throw ConfigError(what + " '" + list + "': empty tag in list");
        else throw ConfigError(what + " '" + list + "': unknown tag '" + tag + "' (allowed: rollout, train, critic)");
        start = comma + 1;
    }
    return bits;
}

std::string tags_to_string(uint32_t bits) {
    std::string s;
    auto add = [&](uint32_t b, const char* n) {
        if (!(bits & b)) return;
        if (!s.empty()) s += ',';
        s += n;
    };
    add(kRollout, "rollout");
    add(kTrain, "train");
    add(kCritic, "critic");
    return s;
}

RankTags resolve_rank_tags(int rank, int world_size, const std::string& tags, const std::string& tags_origin,
                           const std::string& plugin_source, const std::string& rank_tags) {
    RankTags r;
    if (!rank_tags.empty()) {
        // "0=rollout;1=rollout,train": validate every entry on every rank (same error everywhere).
        bool found = false;
        size_t start = 0;
        while (start <= rank_tags.size()) {
            size_t semi = rank_tags.find(';', start);
            if (semi == std::string::npos) semi = rank_tags.size();
            std::string entry = trim(std::string_view(rank_tags).substr(start, semi - start));
            start = semi + 1;
            if (entry.empty()) continue;
            size_t eq = entry.find('=');
            if (eq == std::string::npos) throw ConfigError("--rank-tags '" + entry + "': expected RANK=TAGS");
            std::string num = trim(std::string_view(entry).substr(0, eq));
            char* end = nullptr;
            long n = std::strtol(num.c_str(), &end, 10);
            if (num.empty() || *end != '\0' || n < 0)
                throw ConfigError("--rank-tags '" + entry + "': '" + num + "' is not a rank number");
            if (n >= world_size)
                throw ConfigError("--rank-tags '" + entry + "': rank " + num + " does not exist (" +
                                  std::to_string(world_size) + " ranks)");
            uint32_t bits = parse_tag_list(entry.substr(eq + 1), "--rank-tags " + num);
            if (n == rank) {
                if (found) throw ConfigError("--rank-tags: rank " + num + " listed twice");
                found = true;
                r.bits = bits;
                r.source = "rank-tags";
            }
        }
        if (found) return r;
    }
    if (!tags.empty()) {
        bool from_env = tags_origin == "env";
        r.bits = parse_tag_list(tags, from_env ? "TAGFLOW_TAGS" : "--tags");
        r.source = from_env ? (plugin_source.empty() ? "env" : plugin_source) : "option";
        return r;
    }
    r.bits = kRollout | kTrain;
    r.source = "default";
    return r;
}

}  // namespace tagflow::cluster
