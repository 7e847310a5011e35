// SPDX-License-Identifier: Apache-2.0
// url_scorer: libcurl (easy interface, one handle per sender thread) POSTing batches to
// --reward-url, retries with backoff, and the parsing of the response. See url_scorer.hpp.
#include "reward/url_scorer.hpp"

#include <curl/curl.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <utility>

#include "common/error.hpp"
#include "common/log.hpp"

namespace tagflow::reward {
namespace {

using nlohmann::json;
constexpr std::size_t kMaxResponse = 64u << 20;

std::once_flag g_curl_once;

std::size_t on_body(char* data, std::size_t size, std::size_t n, void* user) {
    auto* out = static_cast<std::string*>(user);
    if (out->size() + size * n > kMaxResponse) return 0;  // aborts the transfer (CURLE_WRITE_ERROR)
    out->append(data, size * n);
    return size * n;
}

std::string fmt_seconds(double s) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", s);
    return buf;
}

std::string clip(const std::string& s, std::size_t n) {
    std::string out;
    for (char c : s.substr(0, n)) out += (static_cast<unsigned char>(c) < 0x20) ? ' ' : c;
    return s.size() > n ? out + "..." : out;
}

}  // namespace

std::string read_token_file(const std::string& path) {
    const std::string what = "--reward-token-file " + path + ": ";
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw ConfigError(what + std::strerror(errno));
    struct stat st {};
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        throw ConfigError(what + "not a regular file");
    }
    if (st.st_mode & (S_IROTH | S_IWOTH)) {
        close(fd);
        char mode[8];
        std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
        throw ConfigError(what + "others may read or write it (mode " + mode + "); chmod 600 it");
    }
    std::string tok;
    char buf[4096];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0) {
        tok.append(buf, static_cast<std::size_t>(n));
        if (tok.size() > 65536) break;
    }
    close(fd);
    if (tok.size() > 65536) throw ConfigError(what + "over 64 KiB: not a token");
    while (!tok.empty() && (tok.back() == '\n' || tok.back() == '\r' || tok.back() == ' ' || tok.back() == '\t'))
        tok.pop_back();
    if (tok.empty()) throw ConfigError(what + "empty");
    for (char c : tok)
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
            throw ConfigError(what + "holds control characters (one token on one line expected)");
    return tok;
}

UrlScorer::UrlScorer(const Options& opt)
    : Scorer(opt.on_error),
      url_(opt.url),
      timeout_s_(opt.timeout_s),
      batch_(static_cast<std::size_t>(opt.batch)),
      retries_(opt.retries) {
    std::call_once(g_curl_once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
    const bool https = url_.rfind("https://", 0) == 0;
    if (!https && url_.rfind("http://", 0) != 0)
        throw ConfigError("--reward-url " + clip(url_, 200) + ": expected an http:// or https:// URL");
    for (char c : url_)
        if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f)
            throw ConfigError("--reward-url: holds spaces or control characters");
    if (https) {
        const curl_version_info_data* v = curl_version_info(CURLVERSION_NOW);
        if (!(v->features & CURL_VERSION_SSL))
            throw ConfigError("--reward-url " + url_ + ": this libcurl has no TLS; use http://");
    }
    if (!opt.token_file.empty()) token_ = read_token_file(opt.token_file);
    for (int i = 0; i < opt.concurrency; ++i) threads_.emplace_back([this] { run(); });
}

UrlScorer::~UrlScorer() {
    stop_waiters();
    for (std::thread& t : threads_) t.join();
}

std::string UrlScorer::describe() const { return "url " + url_; }

void UrlScorer::run() {
    CURL* curl = curl_easy_init();
    if (!curl) {
        mark_broken("curl_easy_init failed");
        return;
    }
    while (wait_for_work(std::chrono::milliseconds(500))) {
        std::vector<Request> reqs = take(batch_);
        if (!reqs.empty()) score_batch(curl, std::move(reqs));
    }
    curl_easy_cleanup(curl);
}

std::string UrlScorer::post(void* handle, const std::string& body, std::string& response, bool& retry) {
    CURL* curl = static_cast<CURL*>(handle);
    response.clear();
    retry = false;
    curl_easy_reset(curl);
    curl_slist* headers = curl_slist_append(nullptr, "Content-Type: application/json");
    headers = curl_slist_append(headers, "Expect:");
    std::string auth;
    if (!token_.empty()) {
        auth = "Authorization: Bearer " + token_;
        headers = curl_slist_append(headers, auth.c_str());
    }
    const long timeout_ms = static_cast<long>(timeout_s_ * 1000.0);
    curl_easy_setopt(curl, CURLOPT_URL, url_.c_str());
    curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, std::max(1L, timeout_ms));
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, std::max(1L, std::min(timeout_ms, 10000L)));
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body.data());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &response);
    curl_easy_setopt(curl, CURLOPT_USERAGENT, "tagflow-reward");
    const CURLcode rc = curl_easy_perform(curl);
    long status = 0;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, nullptr);
    curl_slist_free_all(headers);
    std::fill(auth.begin(), auth.end(), '\0');
    if (rc == CURLE_OPERATION_TIMEDOUT) {
        retry = true;
        return "timed out after " + fmt_seconds(timeout_s_) + " s";
    }
    if (rc == CURLE_WRITE_ERROR) return "response over 64 MiB";
    if (rc != CURLE_OK) {
        retry = rc == CURLE_COULDNT_CONNECT || rc == CURLE_RECV_ERROR || rc == CURLE_SEND_ERROR ||
                rc == CURLE_GOT_NOTHING || rc == CURLE_PARTIAL_FILE || rc == CURLE_COULDNT_RESOLVE_HOST;
        return curl_easy_strerror(rc);
    }
    if (status != 200) {
        retry = status == 429 || status >= 500;
        return "HTTP " + std::to_string(status) + (response.empty() ? "" : ": " + clip(response, 160));
    }
    return "";
}

void UrlScorer::score_batch(void* curl, std::vector<Request> reqs) {
    json frame = json::object();
    json& items = frame["batch"] = json::array();
    std::vector<Request> sent;
    for (Request& r : reqs) {
        json gt = json::parse(r.ground_truth, nullptr, false);
        json ei = json::parse(r.extra_info, nullptr, false);
        if (gt.is_discarded() || ei.is_discarded()) {
            fail(r, std::string(gt.is_discarded() ? "ground_truth" : "extra_info") + " is not JSON text");
            continue;
        }
        items.push_back({{"id", r.id},
                         {"data_source", r.data_source},
                         {"solution_str", r.solution_str},
                         {"ground_truth", std::move(gt)},
                         {"extra_info", std::move(ei)}});
        sent.push_back(std::move(r));
    }
    if (sent.empty()) return;
    count(&Stats::batches);
    const std::string body = frame.dump(-1, ' ', false, json::error_handler_t::replace);
    std::string response, problem;
    int tries = 0;
    for (;;) {
        bool retry = false;
        ++tries;
        problem = post(curl, body, response, retry);
        if (problem.empty() || !retry || tries > retries_ || stopping()) break;
        count(&Stats::retries);
        const double backoff = std::min(5.0, 0.25 * static_cast<double>(1u << std::min(tries - 1, 5)));
        const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(backoff);
        while (std::chrono::steady_clock::now() < until && !stopping())
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    const std::string where = "POST " + url_;
    if (!problem.empty()) {
        const std::string cause =
            where + ": " + problem + (tries > 1 ? " (after " + std::to_string(tries) + " tries)" : "");
        for (const Request& r : sent) fail(r, cause);
        return;
    }
    json j = json::parse(response, nullptr, false);
    if (!j.is_object() || !j.contains("results") || !j["results"].is_array()) {
        const bool nan = response.find("NaN") != std::string::npos || response.find("Infinity") != std::string::npos;
        const std::string cause = where + ": response is not {\"results\": [...]}" +
                                  (nan ? " (NaN and Infinity are not JSON)" : "") + ": " + clip(response, 120);
        for (const Request& r : sent) fail(r, cause);
        return;
    }
    const json& res = j["results"];
    if (res.size() != sent.size()) {
        const std::string cause =
            where + ": " + std::to_string(res.size()) + " results for " + std::to_string(sent.size()) + " requests";
        for (const Request& r : sent) fail(r, cause);
        return;
    }
    for (std::size_t i = 0; i < sent.size(); ++i) {
        const Request& req = sent[i];
        const json& e = res[i];
        json extras = json::object();
        const json* score = &e;
        if (e.is_object()) {
            if (e.contains("id") && !(e["id"].is_number_unsigned() && e["id"].get<std::uint64_t>() == req.id)) {
                fail(req, where + ": result " + std::to_string(i) + " has id " + clip(e["id"].dump(), 40) +
                              ", expected " + std::to_string(req.id));
                continue;
            }
            if (e.contains("error")) {
                const json& err = e["error"];
                fail(req, where + ": " + clip(err.is_string() ? err.get<std::string>() : err.dump(), 300));
                continue;
            }
            if (!e.contains("score")) {
                fail(req, where + ": result " + std::to_string(i) + " has no \"score\"");
                continue;
            }
            score = &e["score"];
            for (auto it = e.begin(); it != e.end(); ++it)
                if (it.key() != "score" && it.key() != "id") extras[it.key()] = it.value();
        }
        if (score->is_boolean()) {
            // true/false count as 1/0, as in veRL
        } else if (!score->is_number()) {
            fail(req, where + ": score " + clip(score->dump(), 60) + " is not a number");
            continue;
        }
        const double d = score->is_boolean() ? (score->get<bool>() ? 1.0 : 0.0) : score->get<double>();
        if (!finite_in_float32(d)) {
            fail(req, where + ": score " + clip(score->dump(), 60) + " is not finite in float32");
            continue;
        }
        Result r;
        r.id = req.id;
        r.row = req.row;
        r.ok = true;
        r.score = static_cast<float>(d);
        r.extras = extras.dump(-1, ' ', false, json::error_handler_t::replace);
        finish(std::move(r));
    }
}

}  // namespace tagflow::reward
