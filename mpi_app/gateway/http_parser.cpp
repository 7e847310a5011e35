// SPDX-License-Identifier: Apache-2.0
// http_parser: the request parser (see http_parser.hpp). Strict about syntax (token characters
// in method and header names, one Content-Length, no whitespace before the colon) because a
// lenient parser in front of a service is how request smuggling starts.
#include "gateway/http_parser.hpp"

#include <cctype>

namespace tagflow::gateway {

namespace {

bool is_tchar(unsigned char c) {
    if (std::isalnum(c)) return true;
    switch (c) {
        case '!':
        case '#':
        case '$':
        case '%':
        case '&':
        case '\'':
        case '*':
        case '+':
        case '-':
        case '.':
        case '^':
        case '_':
        case '`':
        case '|':
        case '~': return true;
        default: return false;
    }
}

std::string lower(std::string_view s) {
    std::string out(s);
    for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
}

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
}

bool has_token(std::string_view list, std::string_view token) {
    // Comma-separated, case-insensitive.
    while (!list.empty()) {
        const std::size_t comma = list.find(',');
        std::string_view item = trim(list.substr(0, comma));
        if (lower(item) == token) return true;
        if (comma == std::string_view::npos) break;
        list.remove_prefix(comma + 1);
    }
    return false;
}

ParseResult fail(int status, std::string msg) {
    ParseResult r;
    r.status = ParseStatus::kError;
    r.error_status = status;
    r.error = std::move(msg);
    return r;
}

}  // namespace

const std::string* HttpRequest::header(std::string_view lower_name) const {
    for (const auto& [k, v] : headers)
        if (k == lower_name) return &v;
    return nullptr;
}

ParseResult parse_http_request(std::string_view bytes, const HttpLimits& limits) {
    // Tolerate (and skip) empty lines before the request line (RFC 9112 2.2).
    std::size_t start = 0;
    while (start + 1 < bytes.size() && bytes[start] == '\r' && bytes[start + 1] == '\n') start += 2;
    const std::size_t end = bytes.find("\r\n\r\n", start);
    if (end == std::string_view::npos) {
        if (bytes.size() - start > limits.max_header_bytes)
            return fail(431,
                        "request header section larger than " + std::to_string(limits.max_header_bytes) + " bytes");
        // A bare LF line ending would never complete: reject early once a line is visible.
        const std::size_t lf = bytes.find('\n', start);
        if (lf != std::string_view::npos && (lf == start || bytes[lf - 1] != '\r'))
            return fail(400, "malformed request: lines must end with CRLF");
        return ParseResult{};
    }
    const std::size_t head_len = end + 4 - start;
    if (head_len > limits.max_header_bytes)
        return fail(431, "request header section larger than " + std::to_string(limits.max_header_bytes) + " bytes");
    std::string_view head = bytes.substr(start, end - start);  // without the final CRLFCRLF

    ParseResult r;
    HttpRequest& q = r.request;
    // ---- request line: METHOD SP target SP HTTP/1.x ----
    std::size_t eol = head.find("\r\n");
    std::string_view line = head.substr(0, eol);
    const std::size_t sp1 = line.find(' ');
    if (sp1 == std::string_view::npos || sp1 == 0) return fail(400, "malformed request line");
    const std::size_t sp2 = line.find(' ', sp1 + 1);
    if (sp2 == std::string_view::npos || sp2 == sp1 + 1) return fail(400, "malformed request line");
    std::string_view method = line.substr(0, sp1);
    std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
    std::string_view version = line.substr(sp2 + 1);
    for (unsigned char c : method)
        if (!is_tchar(c)) return fail(400, "malformed request line: bad method");
    for (unsigned char c : target)
        if (c <= 0x20 || c >= 0x7f) return fail(400, "malformed request line: bad character in target");
    if (target.size() > 8192) return fail(414, "request target longer than 8192 bytes");
    if (target.front() != '/' && target != "*") return fail(400, "request target must start with '/'");
    if (version.size() != 8 || version.substr(0, 7) != "HTTP/1." || (version[7] != '0' && version[7] != '1')) {
        if (version.substr(0, 5) == "HTTP/") return fail(505, "only HTTP/1.0 and HTTP/1.1 are supported");
        return fail(400, "malformed request line: bad version");
    }
    q.method = std::string(method);
    q.target = std::string(target);
    const std::size_t qm = target.find('?');
    q.path = std::string(target.substr(0, qm));
    if (qm != std::string_view::npos) q.query = std::string(target.substr(qm + 1));
    q.version_minor = version[7] - '0';

    // ---- header fields ----
    std::string_view rest = eol == std::string_view::npos ? std::string_view{} : head.substr(eol + 2);
    while (eol != std::string_view::npos) {
        eol = rest.find("\r\n");
        std::string_view h = rest.substr(0, eol);
        if (eol != std::string_view::npos) rest.remove_prefix(eol + 2);
        if (h.empty()) return fail(400, "malformed header: empty line");
        if (h.front() == ' ' || h.front() == '\t') return fail(400, "malformed header: obsolete line folding");
        const std::size_t colon = h.find(':');
        if (colon == std::string_view::npos || colon == 0) return fail(400, "malformed header: no field name");
        std::string_view name = h.substr(0, colon);
        for (unsigned char c : name)
            if (!is_tchar(c)) return fail(400, "malformed header: bad character in field name");
        std::string_view value = trim(h.substr(colon + 1));
        for (unsigned char c : value)
            if ((c < 0x20 && c != '\t') || c == 0x7f) return fail(400, "malformed header: control character in value");
        if (q.headers.size() >= limits.max_headers)
            return fail(431, "more than " + std::to_string(limits.max_headers) + " header fields");
        q.headers.emplace_back(lower(name), std::string(value));
    }

    // ---- framing ----
    if (const std::string* te = q.header("transfer-encoding"))
        return fail(501, "Transfer-Encoding '" + *te + "' in requests is not supported; send Content-Length");
    std::size_t body_len = 0;
    bool have_len = false;
    for (const auto& [k, v] : q.headers) {
        if (k != "content-length") continue;
        if (v.empty() || v.size() > 18) return fail(400, "malformed Content-Length");
        std::size_t n = 0;
        for (unsigned char c : v) {
            if (!std::isdigit(c)) return fail(400, "malformed Content-Length");
            n = n * 10 + (c - '0');
        }
        if (have_len && n != body_len) return fail(400, "conflicting Content-Length headers");
        body_len = n;
        have_len = true;
    }
    if (body_len > limits.max_body_bytes)
        return fail(413, "request body of " + std::to_string(body_len) + " bytes exceeds the limit of " +
                             std::to_string(limits.max_body_bytes) + " bytes");
    if (q.version_minor == 1) q.keep_alive = true;
    else q.keep_alive = false;
    if (const std::string* c = q.header("connection")) {
        if (has_token(*c, "close")) q.keep_alive = false;
        else if (has_token(*c, "keep-alive")) q.keep_alive = true;
    }
    if (const std::string* e = q.header("expect")) {
        if (lower(*e) != "100-continue") return fail(417, "unsupported Expect: " + *e);
        q.expect_continue = true;
    }
    r.headers_complete = true;
    const std::size_t body_start = end + 4;
    if (bytes.size() - body_start < body_len) {
        r.status = ParseStatus::kIncomplete;
        return r;
    }
    q.body = std::string(bytes.substr(body_start, body_len));
    r.consumed = body_start + body_len;
    r.status = ParseStatus::kComplete;
    return r;
}

const char* http_reason(int status) {
    switch (status) {
        case 100: return "Continue";
        case 200: return "OK";
        case 202: return "Accepted";
        case 400: return "Bad Request";
        case 401: return "Unauthorized";
        case 404: return "Not Found";
        case 405: return "Method Not Allowed";
        case 408: return "Request Timeout";
        case 411: return "Length Required";
        case 413: return "Payload Too Large";
        case 414: return "URI Too Long";
        case 417: return "Expectation Failed";
        case 422: return "Unprocessable Entity";
        case 429: return "Too Many Requests";
        case 431: return "Request Header Fields Too Large";
        case 500: return "Internal Server Error";
        case 501: return "Not Implemented";
        case 503: return "Service Unavailable";
        case 505: return "HTTP Version Not Supported";
        default: return "Unknown";
    }
}

}  // namespace tagflow::gateway
