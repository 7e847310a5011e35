// SPDX-License-Identifier: Apache-2.0
// checkpoint_mpi: see checkpoint_mpi.hpp. Messages are plain text (the manifest format), so the
// same parser serves disk and wire.
#include "ckpt/checkpoint_mpi.hpp"

#include <cinttypes>
#include <cstdio>
#include <sstream>

#include "common/error.hpp"

namespace tagflow::ckpt {

std::string bcast_string(MPI_Comm comm, int root, const std::string& s) {
    int rank = 0;
    TAGFLOW_MPI_CHECK(MPI_Comm_rank(comm, &rank));
    long long n = static_cast<long long>(s.size());
    TAGFLOW_MPI_CHECK(MPI_Bcast(&n, 1, MPI_LONG_LONG, root, comm));
    std::string r = rank == root ? s : std::string(static_cast<size_t>(n), '\0');
    if (n > 0) TAGFLOW_MPI_CHECK(MPI_Bcast(&r[0], static_cast<int>(n), MPI_CHAR, root, comm));
    return r;
}

std::vector<FileEntry> gather_files(MPI_Comm comm, int root, const std::vector<FileEntry>& mine) {
    int rank = 0, size = 1;
    TAGFLOW_MPI_CHECK(MPI_Comm_rank(comm, &rank));
    TAGFLOW_MPI_CHECK(MPI_Comm_size(comm, &size));
    std::ostringstream s;
    for (const auto& f : mine) s << f.name << ' ' << f.bytes << ' ' << f.crc32 << '\n';
    const std::string text = s.str();
    int n = static_cast<int>(text.size());
    std::vector<int> counts(static_cast<size_t>(size)), displs(static_cast<size_t>(size));
    TAGFLOW_MPI_CHECK(MPI_Gather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, root, comm));
    int total = 0;
    for (int r = 0; r < size; ++r) {
        displs[static_cast<size_t>(r)] = total;
        total += counts[static_cast<size_t>(r)];
    }
    std::string all(static_cast<size_t>(rank == root ? total : 0), '\0');
    TAGFLOW_MPI_CHECK(MPI_Gatherv(text.data(), n, MPI_CHAR, all.empty() ? nullptr : &all[0], counts.data(),
                                  displs.data(), MPI_CHAR, root, comm));
    std::vector<FileEntry> out;
    if (rank != root) return out;
    std::istringstream in(all);
    FileEntry e;
    while (in >> e.name >> e.bytes >> e.crc32) out.push_back(e);
    return out;
}

void put_sizes(Manifest& m, const io::TableSizes& s) {
    m.set_int("rows.samples", s.samples);
    m.set_int("rows.tokens", s.tokens);
    m.set_int("rows.consumed", s.consumed);
    m.set_int("rows.steps", s.steps);
    m.set_int("rows.eval", s.eval);
    m.set_int("rows.syncs", s.syncs);
    m.set_int("rows.timeline", s.timeline);
    m.set_int("rows.ranks", s.ranks);
    m.set_int("rows.resumes", s.resumes);
    m.set_int("rows.tree", s.tree);
    m.set_int("rows.tree_tokens", s.tree_tokens);
}

io::TableSizes get_sizes(const Manifest& m) {
    io::TableSizes s;
    s.samples = m.get_int("rows.samples");
    s.tokens = m.get_int("rows.tokens");
    s.consumed = m.get_int("rows.consumed");
    s.steps = m.get_int("rows.steps");
    s.eval = m.get_int("rows.eval");
    s.syncs = m.get_int("rows.syncs");
    s.timeline = m.get_int("rows.timeline");
    s.ranks = m.get_int("rows.ranks");
    s.resumes = m.get_int("rows.resumes");
    s.tree = m.get_int("rows.tree");
    s.tree_tokens = m.get_int("rows.tree_tokens");
    return s;
}

void check_on_root(MPI_Comm comm, int root, const std::function<void()>& check) {
    int rank = 0;
    TAGFLOW_MPI_CHECK(MPI_Comm_rank(comm, &rank));
    std::string err;
    if (rank == root) {
        try {
            check();
        } catch (const std::exception& e) {
            err = e.what();
            if (err.empty()) err = "checkpoint check failed";
        }
    }
    err = bcast_string(comm, root, err);
    if (!err.empty()) throw ConfigError(err);
}

Manifest read_verified(MPI_Comm comm, int root, const std::string& dir,
                       const std::function<void(const Manifest&)>& check) {
    int rank = 0;
    TAGFLOW_MPI_CHECK(MPI_Comm_rank(comm, &rank));
    Manifest m;
    check_on_root(comm, root, [&] {
        m = read_manifest(dir);
        verify_files(dir, m);
        if (check) check(m);
    });
    // Every rank parses the same text, so every rank holds the same manifest.
    std::ostringstream s;
    if (rank == root) {
        for (const auto& [k, v] : m.values) s << k << ' ' << v << '\n';
        for (const auto& f : m.files) s << "file " << f.name << ' ' << f.bytes << ' ' << f.crc32 << '\n';
    }
    const std::string text = bcast_string(comm, root, s.str());
    if (rank != root) {
        m = Manifest();
        m.path = dir + "/manifest.txt";
        std::istringstream in(text);
        std::string line;
        while (std::getline(in, line)) {
            const size_t sp = line.find(' ');
            const std::string key = line.substr(0, sp), value = line.substr(sp + 1);
            if (key == "file") {
                std::istringstream f(value);
                FileEntry e;
                f >> e.name >> e.bytes >> e.crc32;
                m.files.push_back(e);
            } else {
                m.values[key] = value;
            }
        }
    }
    return m;
}

}  // namespace tagflow::ckpt
