// SPDX-License-Identifier: Apache-2.0
// sync_state: the sync scheduler's weights and state: weight sync to the rollout ranks, checkpoints,
// resume, clock re-measurement at checkpoints. The class is in sync_scheduler_impl.hpp.
#include "sched/sync_scheduler_impl.hpp"

namespace tagflow::sched::sync_impl {

// A fresh run: version-0 weights to every rollout rank, the step-0 evaluation. Returns 0.
int32_t SyncScheduler::start(RunSummary& sum) {
    // Version 0: every rollout rank starts from the train root's initial weights.
    sync_weights(0);
    if (data_) {  // no held-out set of a task; --val-data's rows instead
        std::vector<io::SyncRecord> syncs;
        if (roles_.is_train_root()) syncs.push_back(sync_record(0, last_sync_));
        print0("step %5d/%-5lld --data %s: %llu rows (%llu skipped over --max-prompt-tokens), %lld epoch%s\n", 0,
               static_cast<long long>(opt_.steps), opt_.data.c_str(),
               static_cast<unsigned long long>(data_->dataset().size()),
               static_cast<unsigned long long>(data_->dataset().skipped_over_limit()),
               static_cast<long long>(opt_.epochs), opt_.epochs == 1 ? "" : "s");
        std::vector<io::EvalRecord> evals;
        if (data_->has_val()) {
            print0("step %5d/%-5lld --val-data %s: %llu rows (%llu skipped over --max-prompt-tokens), greedy%s\n", 0,
                   static_cast<long long>(opt_.steps), opt_.val_data.c_str(),
                   static_cast<unsigned long long>(data_->val().size()),
                   static_cast<unsigned long long>(data_->val().skipped_over_limit()),
                   opt_.val_samples > 1 ? (" and mean@" + std::to_string(opt_.val_samples)).c_str() : "");
            const std::optional<ValResult> v = validate_data(0, &evals);
            if (!v) return 0;  // a failed reward: run() stops
            sum.first_eval = sum.best_eval = sum.last_eval = v->overall.greedy();
            print0("step %5d/%-5lld val %s\n", 0, static_cast<long long>(opt_.steps), describe(*v).c_str());
        }
        write_rows({}, {}, {}, evals, syncs);
        return 0;
    }
    double eval0 = evaluate_local(0);
    std::vector<io::EvalRecord> evals;
    if (is_eval_rank()) evals.push_back({0, task_->name(), static_cast<float>(eval0), opt_.eval_prompts});
    {
        profile::Span wait(timeline_, SpanKind::kIdle, 0);  // the other ranks wait for the evaluation
        TAGFLOW_MPI_CHECK(MPI_Bcast(&eval0, 1, MPI_DOUBLE, roles_.rollout_ranks.front(), MPI_COMM_WORLD));
    }
    sum.first_eval = sum.best_eval = sum.last_eval = eval0;
    std::vector<io::SyncRecord> syncs;
    if (roles_.is_train_root()) syncs.push_back(sync_record(0, last_sync_));
    write_rows({}, {}, {}, evals, syncs);
    print0("step %5d/%-5lld eval %.3f (held-out greedy; best constant output %.3f)\n", 0,
           static_cast<long long>(opt_.steps), eval0, sum.best_constant);

    return 0;
}

// Constructor, when resuming: every rank loads the policy weights, the trainer ranks their
// engine states (weights, AdamW moments, step); then the flat weight buffer is rebuilt
// (LibTorch's archive load gives the actor's parameters new storage).
void SyncScheduler::restore_weights() {
    const std::string& dir = ckpt_.dir;
    try {
        torch::NoGradGuard ng;
        policy_->load_hf_state_dict(model::load_safetensors(ckpt::policy_weights_file(ckpt_.manifest, dir)));
        trainer_->load_state(dir);
    } catch (const Error& e) {
        throw Error(std::string("resume: ") + e.what());
    }
    train::share_one_buffer(policy_->parameters());
}

// run(), when resuming: the summary so far from the manifest, a full (unrecorded) weight
// sync so every rank's WeightSync state matches its weights. Returns the first step to run.
int32_t SyncScheduler::resume_from(RunSummary& sum, double& total_samples) {
    const ckpt::Manifest& m = ckpt_.manifest;
    const auto step = static_cast<int32_t>(m.get_int("step"));
    get_run_summary(m, sum, total_samples);
    sync_weights(step);
    print0("tagflow: resumed from checkpoint at step %d (policy version %lld, next prompt group %lld)\n", step,
           static_cast<long long>(m.get_int("policy_version")), static_cast<long long>(m.get_int("next_group")));
    return step;
}

// COLLECTIVE over MPI_COMM_WORLD (and the run file's communicator): new /ranks rows with the
// clock offsets measured now (profile/clock_sync.hpp).
void SyncScheduler::remeasure_clocks() {
    const std::vector<profile::ClockOffset> clocks = profile::measure_clock_offsets(MPI_COMM_WORLD, 0);
    std::vector<io::RankRecord> rows;
    if (roles_.world_rank == 0)
        for (int r = 0; r < roles_.world_size; ++r) {
            const auto k = static_cast<size_t>(r);
            io::RankRecord rr;
            rr.rank = r;
            rr.host = roles_.hosts[k];
            rr.tags = cluster::tags_to_string(roles_.all_tags[k]);
            rr.tag_source = roles_.sources[k];
            rr.gpus = 0;
            rr.clock_offset = clocks[k].offset_s;
            rr.clock_error = clocks[k].error_s;
            rows.push_back(rr);
        }
    run_.append_ranks(rows);
    // On disk before the manifest records the sizes: a job killed after the checkpoint's commit and
    // before the next step's flush otherwise leaves a file with fewer /ranks rows than the manifest,
    // which resume refuses as another run's file (App.ckpt_kill_3 in CI, 2026-12-02).
    run_.flush();
}

// COLLECTIVE over MPI_COMM_WORLD, after a flush of the run file: `done` steps trained. The
// train root writes the policy (Hugging Face dir) and the trainer states, the first critic
// rank the critic; rank 0 writes the manifest and swaps the directory in atomically.
void SyncScheduler::write_checkpoint(int32_t done, const RunSummary& sum, double total_samples) {
    profile::Span span(timeline_, SpanKind::kCheckpoint, done);
    const std::string tmp = ckpt::staging_dir(ckpt_.out, done);
    const bool root = roles_.world_rank == 0;
    if (root) ckpt::prepare_staging(tmp);
    TAGFLOW_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    ckpt::StagingCleanup cleanup(tmp);  // a rank whose write fails (a full disk) removes the partial dir
    // Clocks drift: every rank measures its offset to rank 0 again here (all ranks are in the
    // checkpoint) and rank 0 appends the rows to /ranks before the manifest takes the sizes;
    // `tagflow trace` applies each rank's latest row. Not at a fresh run's step 0 (just measured).
    if (done > 0 || ckpt_.resume) remeasure_clocks();
    std::vector<ckpt::FileEntry> files;
    if (roles_.is_train_root()) {
        files = ckpt::write_policy(tmp, *policy_, policy_export(opt_, *task_, max_new_));
    }
    for (const std::string& name : trainer_->save_state(tmp)) files.push_back(ckpt::describe_file(tmp, name));
    std::vector<ckpt::FileEntry> all = ckpt::gather_files(MPI_COMM_WORLD, 0, files);
    if (root) {
        const int64_t P = opt_.prompts_per_step, G = opt_.group_size;
        ckpt::Manifest m;
        put_run_keys(m, opt_, task_->name(), roles_.world_size, done, done, sum, total_samples);
        m.set_int("next_group", static_cast<int64_t>(done) * P);  // the dataset cursor
        m.set_int("next_sample_id", static_cast<int64_t>(done) * P * G);
        if (data_) {
            m.set("data_sampler", sampler_->to_bytes());  // tickets taken but not trained come back first
            m.set_int("data_rows", static_cast<int64_t>(data_->dataset().size()));
        }
        m.set_double("t", clock_.now());
        ckpt::put_sizes(m, run_.sizes());
        m.files = all;
        ckpt::write_manifest(tmp, m);
        ckpt::commit(ckpt_.out, tmp);
    }
    TAGFLOW_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
}

// COLLECTIVE (sync communicator): train root -> every rollout rank, flat buckets (only the
// changed weights with --sync-delta). Version v = the weights after v training steps.
// Waiting for the train root to finish training is idle time (added to *idle), not sync:
// members first meet in a non-blocking barrier, tested with short sleeps, in an idle span.
train::WeightSyncStats SyncScheduler::sync_weights(int32_t version, double* idle) {
    train::WeightSyncStats st;
    if (roles_.sync.is_null()) return st;
    {
        profile::Span wait(timeline_, SpanKind::kIdle, std::max(0, version - 1));
        MPI_Request rq = MPI_REQUEST_NULL;
        TAGFLOW_MPI_CHECK(MPI_Ibarrier(roles_.sync.get(), &rq));
        for (int done = 0;;) {
            TAGFLOW_MPI_CHECK(MPI_Test(&rq, &done, MPI_STATUS_IGNORE));
            if (done) break;
            std::this_thread::sleep_for(std::chrono::microseconds(200));
        }
        const double waited = wait.end();
        if (idle) *idle += waited;
    }
    profile::Span span(timeline_, SpanKind::kWeightSync, version);
    st = wsync_->broadcast(params(), version, roles_.sync.get(), 0);
    last_sync_t0_ = clock_.now() - st.seconds;
    last_sync_t1_ = clock_.now();
    last_sync_ = st;
    return st;
}

io::SyncRecord SyncScheduler::sync_record(int32_t version, const train::WeightSyncStats& st) const {
    io::SyncRecord r;
    r.version = version;
    r.bytes = st.bytes;
    r.t_start = last_sync_t0_;
    r.t_end = last_sync_t1_;
    r.mode = wsync_->mode();
    r.dense_bytes = st.dense_bytes;
    r.buckets = st.buckets;  // gbps: the writer computes it from bytes and t_end - t_start
    return r;
}

}  // namespace tagflow::sched::sync_impl
