// SPDX-License-Identifier: Apache-2.0
// http_parser: an HTTP/1.1 request parser as a pure function over bytes, so that a fuzzer can
// call it directly. Parses the request line, the header fields (names lower-cased, values
// trimmed) and a Content-Length body, enforcing limits on header bytes, header count and body
// size. Does NOT do I/O, chunked request bodies (rejected with 501), multi-line (obs-fold)
// headers (rejected), or anything after the first complete request (the caller keeps the
// remaining bytes for the next request on a keep-alive connection).
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tagflow::gateway {

struct HttpLimits {
    std::size_t max_header_bytes = 16 * 1024;  ///< request line + headers + blank line
    std::size_t max_headers = 64;              ///< header fields
    std::size_t max_body_bytes = 1 << 20;      ///< Content-Length above this -> 413
};

struct HttpRequest {
    std::string method;     ///< as sent ("GET", "POST", ...; case-sensitive per RFC 9110)
    std::string target;     ///< request target as sent ("/v1/models?x=1")
    std::string path;       ///< target without the query string
    std::string query;      ///< after '?', may be empty
    int version_minor = 1;  ///< HTTP/1.<minor>: 0 or 1
    std::vector<std::pair<std::string, std::string>> headers;  ///< lower-case names, trimmed values
    std::string body;
    bool keep_alive = true;        ///< HTTP/1.1 unless "Connection: close"; HTTP/1.0 only with keep-alive
    bool expect_continue = false;  ///< "Expect: 100-continue"

    /// The first header with this (lower-case) name, or nullptr.
    const std::string* header(std::string_view lower_name) const;
};

enum class ParseStatus {
    kIncomplete,  ///< need more bytes (headers_complete tells whether the body is what is missing)
    kComplete,    ///< `request` holds a full request of `consumed` bytes
    kError,       ///< malformed or over a limit: answer `error_status` with `error` and close
};

struct ParseResult {
    ParseStatus status = ParseStatus::kIncomplete;
    HttpRequest request;            ///< complete: everything; incomplete with headers: all but body
    std::size_t consumed = 0;       ///< bytes of this request (complete only)
    bool headers_complete = false;  ///< the blank line after the headers was seen
    int error_status = 0;           ///< 400, 413, 414, 431, 501, 505 (error only)
    std::string error;              ///< one line (error only)
};

/// Parses the first request in `bytes`. Pure: no allocation beyond the result, no global state,
/// never throws, never reads past `bytes`.
ParseResult parse_http_request(std::string_view bytes, const HttpLimits& limits);

/// Reason phrase of a status code ("OK", "Bad Request", ...).
const char* http_reason(int status);

}  // namespace tagflow::gateway
