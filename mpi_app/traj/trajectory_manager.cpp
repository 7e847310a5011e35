// SPDX-License-Identifier: Apache-2.0
// trajectory_manager: the prefix tree behind traj::TrajectoryManager (rules in the header):
// matching walk, edge split, insert, rebuild, statistics and the segment export.
#include "traj/trajectory_manager.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "common/error.hpp"

namespace tagflow::traj {

const char* to_string(InsertKind k) {
    switch (k) {
        case InsertKind::kNew: return "new";
        case InsertKind::kExtend: return "extend";
        case InsertKind::kBranch: return "branch";
        case InsertKind::kDuplicate: return "duplicate";
    }
    return "unknown";
}

double Stats::saved_vs_requests() const {
    return tokens_requests > 0 ? 1.0 - static_cast<double>(tokens_stored) / tokens_requests : 0.0;
}
double Stats::saved_vs_leaves() const {
    return tokens_leaves > 0 ? 1.0 - static_cast<double>(tokens_stored) / tokens_leaves : 0.0;
}

/// The sequence being matched: input then output; at output positions the version must match
/// too (n_in == n: a pure token query).
struct TrajectoryManager::Query {
    const Token* in;
    const Token* out;
    const int32_t* ver;
    int64_t n_in, n;
    Token token(int64_t pos) const { return pos < n_in ? in[pos] : out[pos - n_in]; }
};

TrajectoryManager::TrajectoryManager() { clear(); }

void TrajectoryManager::clear() {
    tok_.clear();
    ver_.clear();
    lp_.clear();
    nodes_.clear();
    nodes_.push_back(Node{});  // the root: empty edge, no parent
    children_.clear();
    segs_.clear();
    requests_.clear();
    trajectories_ = sessions_ = tokens_requests_ = exported_ = 0;
}

namespace {

constexpr int64_t kBlock = 32;  // tokens compared per memcmp (128 bytes)

// Length of the common prefix of a[0, n) and b[0, n): whole blocks by memcmp (vectorised by
// libc; equality of int32 does not depend on byte order), then token by token.
int64_t equal_prefix(const int32_t* a, const int32_t* b, int64_t n) {
    int64_t k = 0;
    while (k + kBlock <= n && std::memcmp(a + k, b + k, kBlock * sizeof(int32_t)) == 0) k += kBlock;
    while (k < n && a[k] == b[k]) ++k;
    return k;
}

}  // namespace

// Tokens of c's edge that match the query from `pos` on.
int64_t TrajectoryManager::common(const Node& c, int64_t pos, const Query& q) const {
    const int64_t lim = std::min<int64_t>(c.len, q.n - pos);
    const Token* a = tok_.data() + c.start;
    const int64_t lim_in = std::clamp<int64_t>(q.n_in - pos, 0, lim);
    int64_t k = 0;
    if (lim_in > 0) {
        k = equal_prefix(a, q.in + pos, lim_in);
        if (k < lim_in) return k;
    }
    if (k < lim) {                           // output positions: ids and versions
        const int64_t o = pos + k - q.n_in;  // output index of position pos + k
        const int64_t t = equal_prefix(a + k, q.out + o, lim - k);
        k += equal_prefix(ver_.data() + c.start + k, q.ver + o, t);
    }
    return k;
}

// Follows the query down from `node` (matched up to `pos`). Where one child starts with the
// next token (the usual case) the walk just follows it; where several do (outputs that differ
// only in version) every candidate is followed and the deepest match wins (the most recent
// on a tie), so the result is the longest match over every stored path.
TrajectoryManager::Walk TrajectoryManager::walk(NodeId node, int64_t pos, const Query& q) const {
    while (pos < q.n) {
        NodeId c = children_.find(node, q.token(pos));
        if (c < 0) break;
        if (nodes_[c].next_same < 0) {
            const int64_t l = common(nodes_[c], pos, q);
            if (l == 0) break;
            pos += l;
            if (l < nodes_[c].len) return {node, c, l, pos};
            node = c;
            continue;
        }
        Walk best{node, -1, 0, pos};
        for (; c >= 0; c = nodes_[c].next_same) {
            const int64_t l = common(nodes_[c], pos, q);
            if (l == 0) continue;
            const Walk w = l < nodes_[c].len ? Walk{node, c, l, pos + l} : walk(c, pos + l, q);
            if (w.length > best.length) best = w;
        }
        return best;
    }
    return {node, -1, 0, pos};
}

NodeId TrajectoryManager::new_node(const Node& n) {
    if (nodes_.size() >= static_cast<size_t>(std::numeric_limits<NodeId>::max()))
        throw Error("traj: the prefix tree is full (2^31 nodes); clear() it");
    nodes_.push_back(n);
    return static_cast<NodeId>(nodes_.size() - 1);
}

// Splits c's edge after k tokens (0 < k < len): a new upper node takes c's place under its
// parent; c keeps the lower part (and its id). Returns the upper node.
NodeId TrajectoryManager::split(NodeId c, int64_t k) {
    Node up = nodes_[c];
    up.len = static_cast<int32_t>(k);
    up.children = 1;
    up.terminal = 0;
    const NodeId u = new_node(up);
    Node& x = nodes_[c];
    const Token first = tok_[static_cast<size_t>(x.start)];
    const NodeId head = children_.find(x.parent, first);
    if (head == c) {
        children_.set(x.parent, first, u);
    } else {
        NodeId prev = head;
        while (nodes_[prev].next_same != c) prev = nodes_[prev].next_same;
        nodes_[prev].next_same = u;
    }
    x.start += k;
    x.depth += k;
    x.len -= static_cast<int32_t>(k);
    x.parent = u;
    x.next_same = -1;
    children_.set(u, tok_[static_cast<size_t>(x.start)], c);
    return u;
}

bool TrajectoryManager::path_is_prefix(NodeId node, const Token* in) const {
    for (NodeId n = node; n > kRoot; n = nodes_[n].parent) {
        const Node& x = nodes_[n];
        if (equal_prefix(tok_.data() + x.start, in + x.depth, x.len) < x.len) return false;
    }
    return true;
}

InsertResult TrajectoryManager::insert(const Request& r, Span<NodeId> own) {
    const int64_t n_in = static_cast<int64_t>(r.input.size());
    const int64_t n_out = static_cast<int64_t>(r.output.size());
    const int64_t n = n_in + n_out;
    if (n == 0) throw Error("traj::insert: empty request (no input and no output tokens)");
    if (r.logprobs.size() != r.output.size() || r.versions.size() != r.output.size())
        throw Error("traj::insert: " + std::to_string(n_out) + " output tokens but " +
                    std::to_string(r.logprobs.size()) + " logprobs and " + std::to_string(r.versions.size()) +
                    " versions (need one per output token)");
    for (int64_t i = 0; i < n_out; ++i) {
        if (r.versions[i] < 0)
            throw Error("traj::insert: output token " + std::to_string(i) + " has version " +
                        std::to_string(r.versions[i]) + " (model tokens need a version >= 0)");
        if (std::isnan(r.logprobs[i]))
            throw Error("traj::insert: output token " + std::to_string(i) + " has a NaN logprob");
    }
    if (n > std::numeric_limits<int32_t>::max())
        throw Error("traj::insert: request of " + std::to_string(n) + " tokens is too long");

    // The longest of the session's own trajectories the input extends (a tie: the later in
    // `own`). From the back: the last one is usually the longest, so one path is compared.
    NodeId anchor = kRoot;
    int64_t at = 0;
    for (size_t i = own.size(); i-- > 0;) {
        const NodeId o = own[i];
        check_node(o, "insert (own trajectory)");  // before anything is stored
        const int64_t end = nodes_[o].depth + nodes_[o].len;
        if (end > n_in || end <= at) continue;
        if (path_is_prefix(o, r.input.data())) {
            anchor = o;
            at = end;
        }
    }
    const Query q{r.input.data(), r.output.data(), r.versions.data(), n_in, n};
    const Walk w = walk(anchor, at, q);
    const bool at_trajectory_end = w.child < 0 && w.node != kRoot && nodes_[w.node].terminal;
    const NodeId end = w.child >= 0 ? split(w.child, w.off) : w.node;
    const int64_t m = w.length;

    InsertResult res;
    res.length = n;
    res.matched = m;
    res.stored = n - m;
    if (m == n) {
        res.kind = InsertKind::kDuplicate;
        res.traj = end;
    } else {
        res.kind = m == 0 ? InsertKind::kNew : at_trajectory_end ? InsertKind::kExtend : InsertKind::kBranch;
        if (segs_.size() >= static_cast<size_t>(std::numeric_limits<int32_t>::max()))
            throw Error("traj: too many segments (2^31); clear() the manager");
        // The unmatched suffix becomes one arena segment and one leaf.
        const int64_t start = static_cast<int64_t>(tok_.size());
        if (m < n_in) {
            tok_.insert(tok_.end(), r.input.data() + m, r.input.data() + n_in);
            ver_.insert(ver_.end(), static_cast<size_t>(n_in - m), -1);
            lp_.insert(lp_.end(), static_cast<size_t>(n_in - m), std::nanf(""));
        }
        const int64_t o = std::max<int64_t>(0, m - n_in);
        tok_.insert(tok_.end(), r.output.data() + o, r.output.data() + n_out);
        ver_.insert(ver_.end(), r.versions.data() + o, r.versions.data() + n_out);
        lp_.insert(lp_.end(), r.logprobs.data() + o, r.logprobs.data() + n_out);

        const int32_t seg = static_cast<int32_t>(segs_.size());
        segs_.push_back({end == kRoot ? -1 : nodes_[end].seg, m, start, static_cast<int64_t>(tok_.size()), r.rank,
                         r.t_start, r.t_end, -1});
        Node leaf;
        leaf.start = start;
        leaf.depth = m;
        leaf.session = end == kRoot ? sessions_++ : nodes_[end].session;
        leaf.len = static_cast<int32_t>(n - m);
        leaf.parent = end;
        leaf.seg = seg;
        const Token first = tok_[static_cast<size_t>(start)];
        leaf.next_same = children_.find(end, first);  // siblings with the same first token
        const NodeId id = new_node(leaf);
        children_.set(end, first, id);
        ++nodes_[end].children;
        res.traj = id;
    }
    Node& t = nodes_[res.traj];
    if (!t.terminal) {
        t.terminal = 1;
        ++trajectories_;
    }
    res.session = t.session;
    res.request = static_cast<int64_t>(requests_.size());
    requests_.push_back({res.traj, n_in, n_out, m, res.kind, res.session, r.rank, r.t_start, r.t_end});
    tokens_requests_ += n;
    return res;
}

Match TrajectoryManager::longest_prefix_match(Span<Token> ids) const {
    const int64_t n = static_cast<int64_t>(ids.size());
    const Walk w = walk(kRoot, 0, Query{ids.data(), nullptr, nullptr, n, n});
    return {w.child >= 0 ? w.child : w.node, w.length};
}

void TrajectoryManager::check_node(NodeId node, const char* what) const {
    if (node <= kRoot || static_cast<size_t>(node) >= nodes_.size())
        throw Error(std::string("traj::") + what + ": no node " + std::to_string(node) + " (valid: 1.." +
                    std::to_string(nodes_.size() - 1) + ")");
}

void TrajectoryManager::rebuild_into(NodeId node, Trajectory& out) const {
    check_node(node, "rebuild");
    const size_t len = static_cast<size_t>(length(node));
    out.tokens.resize(len);
    out.logprobs.resize(len);
    out.versions.resize(len);
    out.loss_mask.resize(len);
    for (NodeId x = node; x != kRoot; x = nodes_[x].parent) {
        const Node& e = nodes_[x];
        const size_t a = static_cast<size_t>(e.start), d = static_cast<size_t>(e.depth);
        std::copy_n(tok_.data() + a, e.len, out.tokens.data() + d);
        std::copy_n(lp_.data() + a, e.len, out.logprobs.data() + d);
        std::copy_n(ver_.data() + a, e.len, out.versions.data() + d);
    }
    out.version_min = out.version_max = -1;
    for (size_t i = 0; i < len; ++i) {
        const int32_t v = out.versions[i];
        out.loss_mask[i] = v >= 0 ? 1 : 0;
        if (v >= 0) {
            out.version_min = out.version_min < 0 ? v : std::min(out.version_min, v);
            out.version_max = std::max(out.version_max, v);
        }
    }
}

Trajectory TrajectoryManager::rebuild(NodeId node) const {
    Trajectory t;
    rebuild_into(node, t);
    return t;
}

int64_t TrajectoryManager::length(NodeId node) const {
    if (node == kRoot) return 0;
    check_node(node, "length");
    return nodes_[node].depth + nodes_[node].len;
}

NodeId TrajectoryManager::parent(NodeId node) const {
    if (node == kRoot) return -1;
    check_node(node, "parent");
    return nodes_[node].parent;
}

bool TrajectoryManager::is_trajectory(NodeId node) const {
    return node > kRoot && static_cast<size_t>(node) < nodes_.size() && nodes_[node].terminal;
}

bool TrajectoryManager::is_leaf(NodeId node) const { return is_trajectory(node) && nodes_[node].children == 0; }

int32_t TrajectoryManager::rank(NodeId node) const {
    check_node(node, "rank");
    return segs_[static_cast<size_t>(nodes_[node].seg)].rank;
}

int64_t TrajectoryManager::session(NodeId node) const {
    check_node(node, "session");
    return nodes_[node].session;
}

std::vector<NodeId> TrajectoryManager::leaves() const {
    std::vector<NodeId> v;
    for (size_t i = 1; i < nodes_.size(); ++i)
        if (nodes_[i].terminal && nodes_[i].children == 0) v.push_back(static_cast<NodeId>(i));
    return v;
}

Stats TrajectoryManager::stats() const {
    Stats s;
    s.requests = static_cast<int64_t>(requests_.size());
    s.nodes = static_cast<int64_t>(nodes_.size());
    s.trajectories = trajectories_;
    s.sessions = sessions_;
    s.segments = segments();
    s.tokens_stored = static_cast<int64_t>(tok_.size());
    s.tokens_requests = tokens_requests_;
    for (size_t i = 1; i < nodes_.size(); ++i)
        if (nodes_[i].terminal && nodes_[i].children == 0) {
            ++s.leaves;
            s.tokens_leaves += nodes_[i].depth + nodes_[i].len;
        }
    s.memory_bytes = static_cast<int64_t>(tok_.capacity() * sizeof(Token) + ver_.capacity() * sizeof(int32_t) +
                                          lp_.capacity() * sizeof(float) + nodes_.capacity() * sizeof(Node) +
                                          children_.memory_bytes() + segs_.capacity() * sizeof(Segment) +
                                          requests_.capacity() * sizeof(RequestInfo));
    return s;
}

int64_t TrajectoryManager::segment_of(NodeId node) const {
    check_node(node, "segment_of");
    return nodes_[node].seg;
}

SegmentExport TrajectoryManager::export_segments(int64_t first) const {
    if (first < 0 || first > segments())
        throw Error("traj::export_segments: first segment " + std::to_string(first) + " outside [0, " +
                    std::to_string(segments()) + "]");
    SegmentExport e;
    e.first = first;
    const size_t n = segs_.size() - static_cast<size_t>(first);
    e.parent.reserve(n);
    e.depth.reserve(n);
    e.token_start.reserve(n);
    e.token_end.reserve(n);
    e.rank.reserve(n);
    e.t_start.reserve(n);
    e.t_end.reserve(n);
    for (size_t i = static_cast<size_t>(first); i < segs_.size(); ++i) {
        const Segment& s = segs_[i];
        e.parent.push_back(s.parent);
        e.depth.push_back(s.depth);
        e.token_start.push_back(s.start);
        e.token_end.push_back(s.end);
        e.rank.push_back(s.rank);
        e.t_start.push_back(s.t_start);
        e.t_end.push_back(s.t_end);
    }
    e.token_base = n ? segs_[static_cast<size_t>(first)].start : static_cast<int64_t>(tok_.size());
    const size_t a = static_cast<size_t>(e.token_base);
    e.tokens.assign(tok_.begin() + static_cast<std::ptrdiff_t>(a), tok_.end());
    e.logprobs.assign(lp_.begin() + static_cast<std::ptrdiff_t>(a), lp_.end());
    e.versions.assign(ver_.begin() + static_cast<std::ptrdiff_t>(a), ver_.end());
    e.loss_mask.resize(e.versions.size());
    for (size_t i = 0; i < e.versions.size(); ++i) e.loss_mask[i] = e.versions[i] >= 0 ? 1 : 0;
    return e;
}

int64_t TrajectoryManager::segment_row(int64_t seg) const {
    if (seg < 0 || seg >= segments()) throw Error("traj::segment_row: no segment " + std::to_string(seg));
    return segs_[static_cast<size_t>(seg)].row;
}

void TrajectoryManager::mark_exported(int64_t first_row) {
    if (first_row < 0 && exported_ < segments())
        throw Error("traj::mark_exported: negative first row " + std::to_string(first_row));
    for (int64_t i = exported_; i < segments(); ++i) segs_[static_cast<size_t>(i)].row = first_row + (i - exported_);
    exported_ = segments();
}

}  // namespace tagflow::traj
