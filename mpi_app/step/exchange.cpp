// SPDX-License-Identifier: Apache-2.0
#include "step/exchange.hpp"

#include <cstddef>
#include <stdexcept>
#include <string_view>

#include "common/error.hpp"
#include "common/mpi_gather.hpp"

namespace tagflow::sched {

std::vector<RolloutSample> allgather_samples(const std::vector<RolloutSample>& mine, MPI_Comm comm) {
    const std::vector<char> send = pack_samples(mine);
    const GatheredBytes got = allgather_bytes(send.data(), send.size(), comm, "allgather_samples (the step's batch)");
    std::vector<RolloutSample> all;
    for (int r = 0; r < got.ranks(); ++r) {
        const std::string_view b = got.part(r);
        for (auto& s : unpack_samples(b.data(), b.size())) all.push_back(std::move(s));
    }
    return all;
}

void allgather_rows(std::vector<std::vector<float>>& rows, const std::vector<int>& owner,
                    const std::vector<size_t>& lengths, MPI_Comm comm) {
    int n = 0, me = 0;
    TAGFLOW_MPI_CHECK(MPI_Comm_size(comm, &n));
    TAGFLOW_MPI_CHECK(MPI_Comm_rank(comm, &me));
    if (owner.size() != rows.size() || lengths.size() != rows.size())
        throw InternalError("allgather_rows: rows, owner and lengths differ in size");
    std::vector<int> counts(static_cast<size_t>(n), 0), displs(static_cast<size_t>(n), 0);
    for (size_t i = 0; i < rows.size(); ++i) {
        if (owner[i] < 0 || owner[i] >= n) throw InternalError("allgather_rows: bad owner rank");
        counts[static_cast<size_t>(owner[i])] += static_cast<int>(lengths[i]);
    }
    for (int r = 1; r < n; ++r)
        displs[static_cast<size_t>(r)] = displs[static_cast<size_t>(r - 1)] + counts[static_cast<size_t>(r - 1)];
    std::vector<float> send;
    send.reserve(static_cast<size_t>(counts[static_cast<size_t>(me)]));
    for (size_t i = 0; i < rows.size(); ++i) {
        if (owner[i] != me) continue;
        if (rows[i].size() != lengths[i])
            throw InternalError("allgather_rows: row " + std::to_string(i) + " has " + std::to_string(rows[i].size()) +
                                " values, expected " + std::to_string(lengths[i]));
        send.insert(send.end(), rows[i].begin(), rows[i].end());
    }
    std::vector<float> recv(static_cast<size_t>(displs.back() + counts.back()));
    TAGFLOW_MPI_CHECK(MPI_Allgatherv(send.data(), static_cast<int>(send.size()), MPI_FLOAT, recv.data(), counts.data(),
                                     displs.data(), MPI_FLOAT, comm));
    std::vector<size_t> pos(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) pos[static_cast<size_t>(r)] = static_cast<size_t>(displs[static_cast<size_t>(r)]);
    for (size_t i = 0; i < rows.size(); ++i) {
        size_t& p = pos[static_cast<size_t>(owner[i])];
        rows[i].assign(recv.begin() + static_cast<std::ptrdiff_t>(p),
                       recv.begin() + static_cast<std::ptrdiff_t>(p + lengths[i]));
        p += lengths[i];
    }
}

}  // namespace tagflow::sched
