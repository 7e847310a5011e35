// SPDX-License-Identifier: Apache-2.0
// Unit tests of traj::TrajectoryManager (Serial.traj.*): extension, branching inside an edge
// and inside an output, identical retries and retries at a new version, a request that
// matches nothing, bad requests, the segment export, and a randomised comparison against a
// flat reference model (every request kept whole, matches found by linear scan).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "common/error.hpp"
#include "traj/trajectory_manager.hpp"

using namespace tagflow::traj;

namespace {

/// A request owning its arrays (Request only views them).
struct Req {
    std::vector<Token> in, out;
    std::vector<float> lp;
    std::vector<int32_t> ver;
    int32_t rank = 0;
    Request view() const {
        Request r;
        r.input = in;
        r.output = out;
        r.logprobs = lp;
        r.versions = ver;
        r.rank = rank;
        r.t_start = 1.0;
        r.t_end = 2.0;
        return r;
    }
};

std::vector<Token> seq(Token from, int n) {
    std::vector<Token> v(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) v[static_cast<size_t>(i)] = from + i;
    return v;
}
std::vector<Token> cat(std::vector<Token> a, const std::vector<Token>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}
Req make(std::vector<Token> in, std::vector<Token> out, int32_t version, int32_t rank = 0) {
    Req r;
    r.in = std::move(in);
    r.out = std::move(out);
    for (size_t i = 0; i < r.out.size(); ++i) r.lp.push_back(-0.25f * static_cast<float>(i + 1));
    r.ver.assign(r.out.size(), version);
    r.rank = rank;
    return r;
}

/// The trajectory a request must rebuild to when it matched nothing stored.
Trajectory expected(const Req& r) {
    Trajectory t;
    for (Token x : r.in) {
        t.tokens.push_back(x);
        t.logprobs.push_back(std::nanf(""));
        t.versions.push_back(-1);
        t.loss_mask.push_back(0);
    }
    for (size_t i = 0; i < r.out.size(); ++i) {
        t.tokens.push_back(r.out[i]);
        t.logprobs.push_back(r.lp[i]);
        t.versions.push_back(r.ver[i]);
        t.loss_mask.push_back(1);
    }
    return t;
}

bool same_float(float a, float b) { return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, sizeof a) == 0; }

void expect_equal(const Trajectory& got, const Trajectory& want, size_t from = 0) {
    ASSERT_EQ(got.tokens.size(), want.tokens.size());
    for (size_t i = from; i < want.tokens.size(); ++i) {
        ASSERT_EQ(got.tokens[i], want.tokens[i]) << "token " << i;
        ASSERT_EQ(got.versions[i], want.versions[i]) << "version " << i;
        ASSERT_EQ(got.loss_mask[i], want.loss_mask[i]) << "loss_mask " << i;
        ASSERT_TRUE(same_float(got.logprobs[i], want.logprobs[i])) << "logprob " << i;
    }
}

/// Rebuilds the first `len` tokens through segment `seg` from an export, the way a reader of
/// /tree does (share/python/tagflow_run.py tree_tokens).
Trajectory from_export(const SegmentExport& e, int64_t seg, int64_t len) {
    Trajectory t;
    t.tokens.resize(static_cast<size_t>(len));
    t.versions.resize(static_cast<size_t>(len));
    t.logprobs.resize(static_cast<size_t>(len));
    t.loss_mask.resize(static_cast<size_t>(len));
    int64_t L = len;
    for (int64_t s = seg; s >= 0;) {
        const size_t i = static_cast<size_t>(s - e.first);
        const int64_t d = e.depth[i], k = L - d;
        EXPECT_GE(k, 0);
        EXPECT_LE(k, e.token_end[i] - e.token_start[i]);
        for (int64_t j = 0; j < k; ++j) {
            const size_t a = static_cast<size_t>(e.token_start[i] - e.token_base + j);
            const size_t o = static_cast<size_t>(d + j);
            t.tokens[o] = e.tokens[a];
            t.versions[o] = e.versions[a];
            t.logprobs[o] = e.logprobs[a];
            t.loss_mask[o] = e.loss_mask[a];
        }
        L = d;
        s = e.parent[i];
    }
    EXPECT_EQ(L, 0);
    return t;
}

}  // namespace

TEST(TrajectoryManager, RequestThatMatchesNothingStartsASession) {
    TrajectoryManager m;
    EXPECT_EQ(m.longest_prefix_match(seq(1, 5)).length, 0);
    const Req a = make(seq(100, 6), seq(200, 4), 3, /*rank=*/2);
    InsertResult ra = m.insert(a.view());
    EXPECT_EQ(ra.kind, InsertKind::kNew);
    EXPECT_EQ(ra.matched, 0);
    EXPECT_EQ(ra.stored, 10);
    EXPECT_EQ(ra.length, 10);
    EXPECT_EQ(ra.session, 0);
    EXPECT_EQ(m.rank(ra.traj), 2);
    expect_equal(m.rebuild(ra.traj), expected(a));
    EXPECT_EQ(m.rebuild(ra.traj).version_min, 3);
    // A second request sharing no first token: another session, lpm finds nothing.
    const Req b = make(seq(500, 3), seq(600, 2), 3);
    EXPECT_EQ(m.longest_prefix_match(b.in).length, 0);
    EXPECT_EQ(m.longest_prefix_match(b.in).node, kRoot);
    InsertResult rb = m.insert(b.view());
    EXPECT_EQ(rb.kind, InsertKind::kNew);
    EXPECT_EQ(rb.session, 1);
    EXPECT_TRUE(m.is_leaf(ra.traj));
    EXPECT_TRUE(m.is_leaf(rb.traj));
    Stats s = m.stats();
    EXPECT_EQ(s.sessions, 2);
    EXPECT_EQ(s.tokens_stored, 15);
    EXPECT_EQ(s.tokens_requests, 15);
    EXPECT_EQ(s.leaves, 2);
    EXPECT_DOUBLE_EQ(s.saved_vs_requests(), 0.0);
}

TEST(TrajectoryManager, ExtensionContinuesTheSessionAndKeepsTheEarlierTurn) {
    TrajectoryManager m;
    const std::vector<Token> P = seq(10, 8), O = seq(50, 5), T = seq(900, 3), O2 = seq(70, 4);
    const Req a = make(P, O, 1);
    InsertResult ra = m.insert(a.view());
    // Turn 2: input = turn 1's input + output + tool output; output at a newer version.
    const Req b = make(cat(cat(P, O), T), O2, 2);
    EXPECT_EQ(m.longest_prefix_match(b.in).length, 13);
    EXPECT_EQ(m.longest_prefix_match(b.in).node, ra.traj);
    InsertResult rb = m.insert(b.view());
    EXPECT_EQ(rb.kind, InsertKind::kExtend);
    EXPECT_EQ(rb.matched, 13);
    EXPECT_EQ(rb.stored, 7);
    EXPECT_EQ(rb.session, ra.session);
    EXPECT_EQ(m.parent(rb.traj), ra.traj);
    // The fed-back model tokens keep turn 1's versions/logprobs; the tool tokens are masked.
    Trajectory want = expected(a);
    Trajectory tail = expected(make(T, O2, 2));
    for (size_t i = 0; i < tail.tokens.size(); ++i) {
        want.tokens.push_back(tail.tokens[i]);
        want.logprobs.push_back(tail.logprobs[i]);
        want.versions.push_back(tail.versions[i]);
        want.loss_mask.push_back(tail.loss_mask[i]);
    }
    Trajectory got = m.rebuild(rb.traj);
    expect_equal(got, want);
    EXPECT_EQ(got.version_min, 1);
    EXPECT_EQ(got.version_max, 2);
    expect_equal(m.rebuild(ra.traj), expected(a));  // turn 1 is still a trajectory
    EXPECT_TRUE(m.is_trajectory(ra.traj));
    EXPECT_FALSE(m.is_leaf(ra.traj));
    EXPECT_EQ(m.leaves(), std::vector<NodeId>{rb.traj});
    Stats s = m.stats();
    EXPECT_EQ(s.tokens_stored, 20);
    EXPECT_EQ(s.tokens_requests, 33);
    EXPECT_EQ(s.tokens_leaves, 20);
}

TEST(TrajectoryManager, BranchInsideAnEdgeSplitsItAndKeepsIds) {
    TrajectoryManager m;
    const std::vector<Token> P = seq(10, 8), O = seq(50, 6);
    const Req a = make(P, O, 1);
    InsertResult ra = m.insert(a.view());
    const size_t nodes = m.nodes();
    // A memory rewrite: the first 5 prompt tokens, then something else.
    const Req b = make(cat(seq(10, 5), {777, 778}), seq(300, 3), 1);
    InsertResult rb = m.insert(b.view());
    EXPECT_EQ(rb.kind, InsertKind::kBranch);
    EXPECT_EQ(rb.matched, 5);
    EXPECT_EQ(rb.stored, 5);
    EXPECT_EQ(m.nodes(), nodes + 2);  // the split's upper node and the new leaf
    expect_equal(m.rebuild(ra.traj), expected(a));
    expect_equal(m.rebuild(rb.traj), expected(b));
    EXPECT_EQ(m.parent(ra.traj), m.parent(rb.traj));  // siblings under the split point
    EXPECT_EQ(m.length(m.parent(rb.traj)), 5);
    EXPECT_FALSE(m.is_trajectory(m.parent(rb.traj)));
    EXPECT_EQ(m.longest_prefix_match(cat(seq(10, 5), {777})).length, 6);
    Match mid = m.longest_prefix_match(seq(10, 7));  // ends inside a's remaining edge
    EXPECT_EQ(mid.length, 7);
    EXPECT_EQ(mid.node, ra.traj);
}

TEST(TrajectoryManager, TestTimeScalingSiblingsShareThePrompt) {
    TrajectoryManager m;
    const std::vector<Token> P = seq(1, 100);
    std::vector<NodeId> ids;
    for (int g = 0; g < 8; ++g) {
        InsertResult r = m.insert(make(P, seq(1000 * (g + 1), 50), 4).view());
        EXPECT_EQ(r.kind, g == 0 ? InsertKind::kNew : InsertKind::kBranch);
        EXPECT_EQ(r.matched, g == 0 ? 0 : 100);
        EXPECT_EQ(r.session, 0);
        ids.push_back(r.traj);
    }
    for (int g = 0; g < 8; ++g)
        expect_equal(m.rebuild(ids[static_cast<size_t>(g)]), expected(make(P, seq(1000 * (g + 1), 50), 4)));
    Stats s = m.stats();
    EXPECT_EQ(s.tokens_stored, 100 + 8 * 50);
    EXPECT_EQ(s.tokens_leaves, 8 * 150);
    EXPECT_NEAR(s.saved_vs_leaves(), 1.0 - 500.0 / 1200.0, 1e-12);
    EXPECT_EQ(s.leaves, 8);
}

TEST(TrajectoryManager, BranchInsideAnOutputInheritsTheFedBackTokens) {
    TrajectoryManager m;
    const std::vector<Token> P = seq(10, 4), O = seq(50, 6);
    InsertResult ra = m.insert(make(P, O, 3).view());
    // Partial-rollout resume / retry from mid-output: input = P + first 2 output tokens.
    const Req b = make(cat(P, seq(50, 2)), seq(400, 3), 5);
    InsertResult rb = m.insert(b.view());
    EXPECT_EQ(rb.kind, InsertKind::kBranch);
    EXPECT_EQ(rb.matched, 6);
    Trajectory t = m.rebuild(rb.traj);
    for (size_t i = 4; i < 6; ++i) {
        EXPECT_EQ(t.versions[i], 3) << "fed-back model token keeps its version";
        EXPECT_EQ(t.loss_mask[i], 1);
    }
    EXPECT_EQ(t.versions[6], 5);
    EXPECT_EQ(t.version_min, 3);
    EXPECT_EQ(t.version_max, 5);
    expect_equal(m.rebuild(ra.traj), expected(make(P, O, 3)));
}

TEST(TrajectoryManager, IdenticalRetryIsADuplicateOfTheSameTrajectory) {
    TrajectoryManager m;
    const Req a = make(seq(10, 6), seq(50, 4), 2);
    InsertResult r1 = m.insert(a.view());
    const Stats before = m.stats();
    InsertResult r2 = m.insert(a.view());
    EXPECT_EQ(r2.kind, InsertKind::kDuplicate);
    EXPECT_EQ(r2.traj, r1.traj);
    EXPECT_EQ(r2.matched, 10);
    EXPECT_EQ(r2.stored, 0);
    EXPECT_EQ(r2.session, r1.session);
    EXPECT_EQ(m.stats().tokens_stored, before.tokens_stored);
    EXPECT_EQ(m.stats().segments, before.segments);
    EXPECT_EQ(m.requests().size(), 2u);
    EXPECT_EQ(m.requests()[1].kind, InsertKind::kDuplicate);
    expect_equal(m.rebuild(r2.traj), expected(a));
    // A retry that stops earlier: a prefix of the stored path, split out as its own trajectory.
    const Req shorter = make(seq(10, 6), seq(50, 2), 2);
    InsertResult r3 = m.insert(shorter.view());
    EXPECT_EQ(r3.kind, InsertKind::kDuplicate);
    EXPECT_NE(r3.traj, r1.traj);
    EXPECT_EQ(m.length(r3.traj), 8);
    EXPECT_TRUE(m.is_trajectory(r3.traj));
    EXPECT_FALSE(m.is_leaf(r3.traj));
    expect_equal(m.rebuild(r3.traj), expected(shorter));
    expect_equal(m.rebuild(r1.traj), expected(a));
}

TEST(TrajectoryManager, RetryAtANewVersionIsASiblingWithItsOwnVersions) {
    TrajectoryManager m;
    const std::vector<Token> P = seq(10, 6), O = seq(50, 4);
    InsertResult r1 = m.insert(make(P, O, 1).view());
    const Req again = make(P, O, 2);  // same tokens, newer policy
    InsertResult r2 = m.insert(again.view());
    EXPECT_EQ(r2.kind, InsertKind::kBranch);
    EXPECT_EQ(r2.matched, 6);
    EXPECT_NE(r2.traj, r1.traj);
    expect_equal(m.rebuild(r2.traj), expected(again));
    expect_equal(m.rebuild(r1.traj), expected(make(P, O, 1)));
    // An output that equals stored environment tokens is not the environment's either.
    const Req env = make(cat(P, seq(900, 2)), {}, 0);
    InsertResult r3 = m.insert(env.view());
    const Req gen = make(P, seq(900, 2), 7);
    InsertResult r4 = m.insert(gen.view());
    EXPECT_NE(r4.traj, r3.traj);
    expect_equal(m.rebuild(r4.traj), expected(gen));
    expect_equal(m.rebuild(r3.traj), expected(env));
    // The next turn matches through either sibling (token ids); a tie goes to the most recent.
    const Req next = make(cat(cat(P, O), {5}), seq(60, 2), 3);
    InsertResult r5 = m.insert(next.view());
    EXPECT_EQ(r5.kind, InsertKind::kExtend);
    EXPECT_EQ(r5.matched, 10);
    EXPECT_EQ(m.parent(r5.traj), r2.traj);
    EXPECT_EQ(m.rebuild(r5.traj).versions[7], 2);
}

TEST(TrajectoryManager, LongestMatchLooksBehindEverySameTokenSibling) {
    TrajectoryManager m;
    const std::vector<Token> P = seq(10, 3), O = seq(50, 3);
    InsertResult old = m.insert(make(P, O, 1).view());
    m.insert(make(cat(cat(P, O), {7, 8}), seq(90, 3), 1).view());  // continues the v1 sibling
    m.insert(make(P, O, 2).view());                                // the most recent sibling
    const std::vector<Token> q = cat(cat(cat(P, O), {7, 8}), seq(90, 2));
    EXPECT_EQ(m.longest_prefix_match(q).length, 10);  // all of q, through the older sibling
    InsertResult r = m.insert(make(q, {}, 0).view());
    EXPECT_EQ(r.kind, InsertKind::kDuplicate);
    EXPECT_EQ(m.rebuild(r.traj).versions[4], 1);
    EXPECT_TRUE(m.is_trajectory(old.traj));
}

// Two sessions of one group generate the same answer at different versions (a weight update
// between them), then each feeds its answer back with the next question. Without naming its
// own trajectory, the second session's turn would go down the first one's deeper path (its
// answer tokens taken with the other session's versions and logprobs, its own turn left a
// separate trajectory); naming it keeps each session on its own path.
TEST(TrajectoryManager, OwnTrajectoryAnchorsTheNextTurn) {
    const std::vector<Token> P = seq(10, 5), O = seq(50, 4), Q = seq(10, 5);
    for (const bool named : {false, true}) {
        TrajectoryManager m;
        const Req a1 = make(P, O, 1);
        const NodeId ta1 = m.insert(a1.view()).traj;
        const Req a2 = make(cat(cat(P, O), Q), seq(70, 3), 1);
        const NodeId ta2 = m.insert(a2.view(), Span<NodeId>(&ta1, named ? 1 : 0)).traj;
        EXPECT_EQ(m.parent(ta2), ta1);
        const Req b1 = make(P, O, 2);
        const NodeId tb1 = m.insert(b1.view()).traj;
        ASSERT_NE(tb1, ta1);
        const Req b2 = make(cat(cat(P, O), Q), seq(80, 3), 2);
        const InsertResult rb2 = m.insert(b2.view(), Span<NodeId>(&tb1, named ? 1 : 0));
        const Trajectory t = m.rebuild(rb2.traj);
        if (!named) {  // the longest match: through a1's answer and a2's question
            EXPECT_EQ(rb2.matched, 14);
            EXPECT_EQ(t.versions[5], 1);
            continue;
        }
        EXPECT_EQ(rb2.kind, InsertKind::kExtend);
        EXPECT_EQ(rb2.matched, 9);
        EXPECT_EQ(m.parent(rb2.traj), tb1);
        Trajectory want = m.rebuild(tb1);  // b1's own answer (version 2, its logprobs), then Q and b2's output
        const Trajectory tail = expected(make(Q, seq(80, 3), 2));
        for (size_t i = 0; i < tail.tokens.size(); ++i) {
            want.tokens.push_back(tail.tokens[i]);
            want.versions.push_back(tail.versions[i]);
            want.logprobs.push_back(tail.logprobs[i]);
            want.loss_mask.push_back(tail.loss_mask[i]);
        }
        expect_equal(t, want);
        EXPECT_EQ(t.versions[5], 2);
        expect_equal(m.rebuild(ta2), expected(a2), 9);  // a's path unchanged
        // A named trajectory the input does not extend is ignored: the longest match decides.
        const Req c = make(cat(P, seq(60, 2)), seq(90, 1), 3);
        const InsertResult rc = m.insert(c.view(), Span<NodeId>(&ta2, 1));
        EXPECT_EQ(rc.matched, 5);
        expect_equal(m.rebuild(rc.traj), expected(c));
        // Of several, the longest the input extends wins (order does not matter).
        const std::vector<NodeId> both{ta2, ta1};
        const Req a3 = make(cat(cat(cat(cat(P, O), Q), seq(70, 3)), Q), seq(40, 2), 3);
        const InsertResult ra3 = m.insert(a3.view(), both);
        EXPECT_EQ(ra3.matched, 17);
        EXPECT_EQ(m.parent(ra3.traj), ta2);
        // An unknown node is an error, and nothing is recorded.
        const size_t before = m.nodes();
        const NodeId bad = static_cast<NodeId>(m.nodes() + 5);
        EXPECT_THROW(m.insert(b2.view(), Span<NodeId>(&bad, 1)), tagflow::Error);
        EXPECT_EQ(m.nodes(), before);
    }
}

TEST(TrajectoryManager, BadRequestsThrowAndRecordNothing) {
    TrajectoryManager m;
    m.insert(make(seq(1, 3), seq(5, 2), 0).view());
    const Stats before = m.stats();
    Req empty;
    EXPECT_THROW(m.insert(empty.view()), tagflow::Error);
    Req short_lp = make(seq(1, 3), seq(9, 3), 1);
    short_lp.lp.pop_back();
    EXPECT_THROW(m.insert(short_lp.view()), tagflow::Error);
    Req short_ver = make(seq(1, 3), seq(9, 3), 1);
    short_ver.ver.pop_back();
    EXPECT_THROW(m.insert(short_ver.view()), tagflow::Error);
    Req neg = make(seq(1, 3), seq(9, 3), 1);
    neg.ver[1] = -1;
    EXPECT_THROW(m.insert(neg.view()), tagflow::Error);
    Req nan = make(seq(1, 3), seq(9, 3), 1);
    nan.lp[2] = std::nanf("");
    EXPECT_THROW(m.insert(nan.view()), tagflow::Error);
    EXPECT_THROW(m.rebuild(kRoot), tagflow::Error);
    EXPECT_THROW(m.rebuild(99), tagflow::Error);
    EXPECT_THROW(m.export_segments(5), tagflow::Error);
    const Stats after = m.stats();
    EXPECT_EQ(after.requests, before.requests);
    EXPECT_EQ(after.nodes, before.nodes);
    EXPECT_EQ(after.tokens_stored, before.tokens_stored);
}

TEST(TrajectoryManager, ExportRebuildsEveryRequestAndTracksFileRows) {
    TrajectoryManager m;
    std::vector<InsertResult> rs;
    const std::vector<Token> P = seq(10, 8);
    rs.push_back(m.insert(make(P, seq(50, 4), 1).view()));
    rs.push_back(m.insert(make(seq(10, 3), seq(70, 2), 1).view()));  // splits P
    rs.push_back(m.insert(make(cat(cat(P, seq(50, 4)), {3}), seq(80, 2), 2).view()));
    rs.push_back(m.insert(make(P, seq(50, 2), 1).view()));  // duplicate prefix
    ASSERT_EQ(m.segments(), 3);
    SegmentExport e = m.export_segments(0);
    EXPECT_EQ(e.parent, (std::vector<int64_t>{-1, 0, 0}));
    EXPECT_EQ(e.depth, (std::vector<int64_t>{0, 3, 12}));
    EXPECT_EQ(e.token_start.front(), 0);
    for (size_t i = 0; i + 1 < e.size(); ++i) EXPECT_EQ(e.token_end[i], e.token_start[i + 1]);
    EXPECT_EQ(static_cast<size_t>(e.token_end.back()), e.tokens.size());
    for (const InsertResult& r : rs) expect_equal(from_export(e, m.segment_of(r.traj), r.length), m.rebuild(r.traj));
    // Incremental export: rows are handed out once, parents may be older rows.
    EXPECT_EQ(m.exported_segments(), 0);
    m.mark_exported(100);
    EXPECT_EQ(m.segment_row(2), 102);
    InsertResult r4 = m.insert(make(cat(P, {1}), seq(5, 2), 3).view());
    SegmentExport e2 = m.export_segments(m.exported_segments());
    ASSERT_EQ(e2.size(), 1u);
    EXPECT_EQ(e2.first, 3);
    EXPECT_EQ(e2.parent[0], 0);
    EXPECT_EQ(e2.token_base, e.token_end.back());
    EXPECT_EQ(m.segment_row(3), -1);
    m.mark_exported(7);
    EXPECT_EQ(m.segment_row(3), 7);
    EXPECT_EQ(m.exported_segments(), 4);
    (void)r4;
    m.clear();
    EXPECT_EQ(m.segments(), 0);
    EXPECT_EQ(m.nodes(), 1u);
    EXPECT_EQ(m.stats().tokens_stored, 0);
}

// Randomised: a tiny vocabulary and few versions make collisions, same-token siblings and
// splits frequent. Every insert is checked against a flat reference (all earlier sequences,
// linear scan with the same matching rule), and every trajectory is rebuilt again at the end.
TEST(TrajectoryManager, MatchesAFlatReferenceOnRandomSessions) {
    std::mt19937 rng(12345);
    TrajectoryManager m;
    std::vector<Trajectory> flat;  // every request's full sequence as rebuilt when inserted
    std::vector<NodeId> traj;
    int64_t stored = 0;
    for (int i = 0; i < 1500; ++i) {
        Req r;
        const int kind = static_cast<int>(rng() % 4);
        if (flat.empty() || kind == 0) {
            r.in = {};
            for (int k = 0, n = 1 + static_cast<int>(rng() % 6); k < n; ++k)
                r.in.push_back(static_cast<Token>(rng() % 4));
        } else {
            const Trajectory& base = flat[rng() % flat.size()];
            const size_t cut = kind == 1 ? base.tokens.size() : rng() % (base.tokens.size() + 1);
            r.in.assign(base.tokens.begin(), base.tokens.begin() + static_cast<long>(cut));
            for (int k = 0, n = static_cast<int>(rng() % 3); k < n; ++k) r.in.push_back(static_cast<Token>(rng() % 4));
        }
        const int32_t v = static_cast<int32_t>(rng() % 3);
        for (int k = 0, n = static_cast<int>(rng() % 5); k < n; ++k) {
            r.out.push_back(static_cast<Token>(rng() % 4));
            r.lp.push_back(-static_cast<float>(rng() % 100) / 10.f);
            r.ver.push_back(v);
        }
        if (r.in.empty() && r.out.empty()) r.in.push_back(1);
        const size_t n_in = r.in.size(), n = n_in + r.out.size();
        // Reference: the longest prefix over all earlier sequences; input positions compare
        // ids, output positions ids and versions.
        size_t best = 0;
        for (const Trajectory& s : flat) {
            size_t k = 0;
            while (k < n && k < s.tokens.size()) {
                const Token t = k < n_in ? r.in[k] : r.out[k - n_in];
                if (t != s.tokens[k] || (k >= n_in && s.versions[k] != r.ver[k - n_in])) break;
                ++k;
            }
            best = std::max(best, k);
        }
        size_t best_in = 0;  // longest_prefix_match(input): token ids only
        for (const Trajectory& s : flat) {
            size_t k = 0;
            while (k < n_in && k < s.tokens.size() && r.in[k] == s.tokens[k]) ++k;
            best_in = std::max(best_in, k);
        }
        ASSERT_EQ(static_cast<size_t>(m.longest_prefix_match(r.in).length), best_in) << i;
        InsertResult res = m.insert(r.view());
        ASSERT_EQ(static_cast<size_t>(res.matched), best) << "request " << i;
        ASSERT_EQ(res.kind == InsertKind::kDuplicate, best == n) << "request " << i;
        stored += res.stored;
        Trajectory got = m.rebuild(res.traj);
        Trajectory own = expected(r);
        expect_equal(got, own, best);  // the unmatched part is the request's own
        ASSERT_EQ(got.tokens, own.tokens);
        // The matched part is some earlier sequence's prefix, attributes included.
        bool found = best == 0;
        for (const Trajectory& s : flat) {
            if (found) break;
            if (s.tokens.size() < best) continue;
            const long b = static_cast<long>(best);
            found = std::equal(got.tokens.begin(), got.tokens.begin() + b, s.tokens.begin()) &&
                    std::equal(got.versions.begin(), got.versions.begin() + b, s.versions.begin());
        }
        ASSERT_TRUE(found) << "request " << i;
        flat.push_back(got);
        traj.push_back(res.traj);
    }
    SegmentExport e = m.export_segments(0);
    for (size_t i = 0; i < flat.size(); ++i) {
        expect_equal(m.rebuild(traj[i]), flat[i]);
        const int64_t len = static_cast<int64_t>(flat[i].tokens.size());
        expect_equal(from_export(e, m.segment_of(traj[i]), len), flat[i]);
    }
    Stats s = m.stats();
    EXPECT_EQ(s.tokens_stored, stored);
    EXPECT_EQ(s.requests, 1500);
    EXPECT_GT(s.saved_vs_requests(), 0.5);
}
