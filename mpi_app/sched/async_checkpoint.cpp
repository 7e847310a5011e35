// SPDX-License-Identifier: Apache-2.0
// async_checkpoint: checkpoints and resume, the coordinator's alone (share/doc/checkpoints.md):
// first receipts of samples, the checkpoint's files and manifest keys, and the state restored.
// Part of the async scheduler (sched/async_scheduler_impl.hpp).
#include "sched/async_scheduler_impl.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>

#include "ckpt/policy_dir.hpp"
#include "common/safe_file.hpp"
#include "profile/clock_sync.hpp"

namespace tagflow::sched::async {

bool AsyncScheduler::first_receipt(int64_t id, int64_t g) {
    const auto n = static_cast<int64_t>(gens_.size());
    if (n == 0 || g < 0) return true;
    const int64_t i = g % n, k = g / n, G = opt_.group_size;
    int64_t& lo = lo_[static_cast<size_t>(i)];
    if (k < lo || !recv_ids_.insert(id).second) return false;
    ++recv_count_[g];
    for (;;) {
        const int64_t low = lo * n + i;
        auto it = recv_count_.find(low);
        if (it == recv_count_.end() || it->second < G) break;
        for (int64_t j = 0; j < G; ++j) recv_ids_.erase(low * G + j);
        recv_count_.erase(it);
        ++lo;
    }
    return true;
}

std::string AsyncScheduler::join(const std::vector<int64_t>& v) {
    std::string out;
    for (int64_t x : v) out += (out.empty() ? "" : ",") + std::to_string(x);
    return out.empty() ? "-" : out;
}

std::vector<int64_t> AsyncScheduler::split_ints(const std::string& s) {
    std::vector<int64_t> out;
    if (s == "-") return out;
    std::stringstream in(s);
    std::string t;
    while (std::getline(in, t, ',')) {
        try {
            out.push_back(std::stoll(t));
        } catch (const std::exception&) {
            throw ConfigError("checkpoint: malformed list value '" + s.substr(0, 60) + "'");
        }
    }
    return out;
}

void AsyncScheduler::checkpoint_now(const RunSummary& sum) {
    wait_weight_sends();
    enter(SpanKind::kIo);
    // Clocks drift: measured again here, as sync mode does at its checkpoints; `tagflow trace`
    // applies each rank's latest /ranks row. Not at a fresh run's step 0 (just measured).
    if (step_ > 0 || resumed_) remeasure_clocks();
    std::vector<io::SpanRecord> spans = take_spans();
    spans.insert(spans.end(), other_spans_.begin(), other_spans_.end());
    other_spans_.clear();
    write({}, {}, spans);
    write_checkpoint(sum);
}

void AsyncScheduler::remeasure_clocks() {
    // Offsets to the coordinator (theta[r]: add to rank r's clock to read the coordinator's),
    // then to rank 0, the run's reference: theta[r] - theta[0], within both bounds.
    const auto n = static_cast<size_t>(roles_.world_size);
    std::vector<profile::ClockOffset> to_coord(n);
    for (int r = 0; r < roles_.world_size; ++r)
        if (r != coord_) to_coord[static_cast<size_t>(r)] = profile::ping_peer(clk_.get(), r, kTagClock);
    std::vector<io::RankRecord> rows;
    for (size_t r = 0; r < n; ++r) {
        io::RankRecord rr;
        rr.rank = static_cast<int32_t>(r);
        rr.host = roles_.hosts[r];
        rr.tags = cluster::tags_to_string(roles_.all_tags[r]);
        rr.tag_source = roles_.sources[r];
        rr.gpus = 0;
        rr.clock_offset = r == 0 ? 0.0 : to_coord[r].offset_s - to_coord[0].offset_s;
        rr.clock_error = r == 0 ? 0.0 : to_coord[r].error_s + to_coord[0].error_s;
        rows.push_back(rr);
    }
    run_->append_ranks(rows);  // on disk with the checkpoint's flush, before its manifest takes the sizes
}

void AsyncScheduler::poll_clock() {
    if (profile::clock_ping_waiting(clk_.get(), coord_, kTagClock))
        profile::answer_clock_pings(clk_.get(), coord_, kTagClock);
}

ckpt::FileEntry AsyncScheduler::write_staged(const std::string& tmp, const std::string& name, const char* data,
                                             size_t n) {
    const std::string path = tmp + "/" + name;
    const int fd = create_new_file(path, 0640);  // the staging dir is fresh: nothing may be there
    try {
        write_all(fd, std::string_view(data, n), "checkpoint: " + path);
    } catch (...) {
        ::close(fd);
        throw;
    }
    if (::close(fd) != 0) throw Error("checkpoint: " + path + ": " + std::strerror(errno));
    return ckpt::describe_file(tmp, name);
}

void AsyncScheduler::write_checkpoint(const RunSummary& sum) {
    if (!written_.empty()) throw InternalError("checkpoint: samples not yet in the run file");
    enter(SpanKind::kCheckpoint, static_cast<int32_t>(step_));
    const std::string tmp = ckpt::staging_dir(ckpt_.out, step_);
    ckpt::prepare_staging(tmp);
    ckpt::StagingCleanup cleanup(tmp);  // a failed write (a full disk) leaves no partial dir
    std::vector<ckpt::FileEntry> files;
    for (ckpt::FileEntry& f : ckpt::write_policy(tmp, *policy_, policy_export(opt_, *task_, max_new_)))
        files.push_back(f);
    for (const std::string& name : trainer_->save_state(tmp)) files.push_back(ckpt::describe_file(tmp, name));
    if (critic_root_ != coord_) {  // the critic is on ranks of its own: its state as it sent it
        while (critic_step_ != step_) {
            poll_messages();
            nap();
        }
        files.push_back(write_staged(tmp, "critic_state.pt", critic_bytes_.data(), critic_bytes_.size()));
    }
    if (ships_shards())  // --shard: every other step member's share of the moments, as it sent it
        for (int r : step_members_) {
            if (r == coord_) continue;
            while (shards_[r].step != step_) {
                poll_messages();
                nap();
            }
            for (const auto& [name, bytes] : shards_[r].files)
                files.push_back(write_staged(tmp, name, bytes.data(), bytes.size()));
        }
    std::vector<RolloutSample> pooled;
    for (const auto& [g, v] : pool_.groups()) pooled.insert(pooled.end(), v.begin(), v.end());
    const int64_t partial = pool_.partial_groups();
    const std::vector<char> b = pack_samples(pooled);
    files.push_back(write_staged(tmp, "pool.bin", b.data(), b.size()));
    ckpt::Manifest m;
    put_run_keys(m, opt_, task_->name(), roles_.world_size, step_, version_, sum, total_);
    const auto n = static_cast<int64_t>(gens_.size());
    int64_t next_group = std::numeric_limits<int64_t>::max();
    for (int64_t i = 0; i < n; ++i) next_group = std::min(next_group, lo_[static_cast<size_t>(i)] * n + i);
    m.set_int("next_group", n ? next_group : 0);  // the dataset cursor: every group below it is complete
    m.set("sched.gens", join(std::vector<int64_t>(gens_.begin(), gens_.end())));
    // --rebalance-every: the ranks that may train (all of them load the actor state on a resume and
    // start as the train group); the group at the checkpoint for the record.
    const std::vector<int>& group = rebalance_ ? eligible_ : members_;
    m.set("sched.members", join(std::vector<int64_t>(group.begin(), group.end())));
    m.set("sched.train_group", join(std::vector<int64_t>(members_.begin(), members_.end())));
    m.set("sched.lo", join(lo_));  // generator i resumes at its group lo[i]*n+i
    m.set("sched.received", join(std::vector<int64_t>(recv_ids_.begin(), recv_ids_.end())));
    m.set("sched.ready", join(std::vector<int64_t>(pool_.ready().begin(), pool_.ready().end())));
    m.set_int("sched.pool_samples", static_cast<int64_t>(pooled.size()));
    m.set_int("sched.pool_groups", static_cast<int64_t>(pool_.groups().size()));
    m.set_int("sched.pool_partial_groups", partial);
    m.set_int("sched.finished", finished_);
    m.set_int("sched.consumed", consumed_count_);
    m.set_int("sched.dropped", dropped_);
    m.set_int("sched.weighted", weighted_);
    m.set_int("sched.discarded", discarded_);
    // Gateway sample/group ids continue after these on resume (kept through a resume
    // without --gateway too, so a later one with it cannot reuse ids of the pool or file).
    if (gw_rec_) gw_next_ = gw_rec_->next_ids();
    m.set_int("sched.gw_next_id", gw_next_.first);
    m.set_int("sched.gw_next_group", gw_next_.second);
    if (data_) put_data_checkpoint(m);
    m.set_double("t", clock_.now());
    ckpt::put_sizes(m, run_->sizes());
    m.files = files;
    ckpt::write_manifest(tmp, m);
    ckpt::commit(ckpt_.out, tmp);
    cut();
}

void AsyncScheduler::restore(const ckpt::Manifest& m, const std::string& dir) {
    check_async_resume(opt_, roles_, m);  // train_command checked it already, before touching the run file
    if (split_ints(m.get("sched.gens")) != std::vector<int64_t>(gens_.begin(), gens_.end()))
        throw InternalError("resume: generating ranks differ from check_async_resume's");
    lo_ = split_ints(m.get("sched.lo"));
    if (lo_.size() != gens_.size()) throw ConfigError("checkpoint " + m.path + ": sched.lo does not match sched.gens");
    try {
        torch::NoGradGuard ng;
        policy_->load_hf_state_dict(model::load_safetensors(ckpt::policy_weights_file(m, dir)));
        if (trainer_) trainer_->load_state(dir);
    } catch (const Error& e) {
        throw Error(std::string("resume: ") + e.what());
    }
    flat_ = train::share_one_buffer(policy_->parameters());
    step_ = m.get_int("step");
    trained_ = step_;
    if (is_gen_) next_local_ = lo_[static_cast<size_t>(gen_index_)];
    resumed_ = true;
    resume_manifest_ = m;
    if (me_ != coord_) return;
    std::ifstream f(dir + "/pool.bin", std::ios::binary);
    std::vector<char> b((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    std::vector<RolloutSample> pooled = unpack_samples(b.data(), b.size());
    std::vector<int64_t> ready = split_ints(m.get("sched.ready"));
    if (data_) restore_data(m, pooled, ready);  // keeps the ready groups only; claims their tickets back
    pool_.restore(std::move(pooled), ready);
    for (int64_t id : split_ints(m.get("sched.received"))) {
        recv_ids_.insert(id);
        ++recv_count_[id / opt_.group_size];
    }
    finished_ = m.get_int("sched.finished");
    consumed_count_ = m.get_int("sched.consumed");
    dropped_ = m.get_int("sched.dropped");
    weighted_ = m.get_int("sched.weighted");
    discarded_ = m.get_int("sched.discarded");
    if (m.has("sched.gw_next_id"))  // absent: an older checkpoint, written without gateway ids
        gw_next_ = {m.get_int("sched.gw_next_id"), m.get_int("sched.gw_next_group")};
    if (gw_rec_) gw_rec_->resume_ids(gw_next_.first, gw_next_.second);
}

void AsyncScheduler::resume_summary(RunSummary& sum) {
    const ckpt::Manifest& m = resume_manifest_;
    get_run_summary(m, sum, total_);
    say("tagflow: resumed from checkpoint at step %lld (policy version %lld, next prompt group %lld; %lld "
        "untrained samples in the pool)\n",
        static_cast<long long>(step_), static_cast<long long>(m.get_int("policy_version")),
        static_cast<long long>(m.get_int("next_group")), static_cast<long long>(m.get_int("sched.pool_samples")));
}

bool AsyncScheduler::ships_shards() const { return opt_.shard != "off" && step_members_.size() > 1; }

void AsyncScheduler::send_trainer_state() {
    if (!have_ckpt_ || me_ == coord_ || !trainer_) return;
    if (me_ == critic_root_) {
        const std::string st = trainer_->critic_state();
        wire::Writer w;
        w.put<int64_t>(trained_);
        w.raw(st.data(), st.size());
        queue_send(w.take(), kTagCritic);
    }
    if (ships_shards() && in_step_) {
        const auto shards = trainer_->optim_shards();
        wire::Writer w;
        w.put<int64_t>(trained_);
        w.put<int64_t>(static_cast<int64_t>(shards.size()));
        for (const auto& [name, bytes] : shards) {
            w.str(name);
            w.str(bytes);
        }
        queue_send(w.take(), kTagShards);
    }
}

}  // namespace tagflow::sched::async
