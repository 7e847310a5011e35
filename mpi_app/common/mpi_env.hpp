// SPDX-License-Identifier: Apache-2.0
// mpi_env: MPI start-up/shutdown (MpiEnvironment) and an owning communicator (Comm).
// Does not decide roles (see cluster/roles.hpp).
#pragma once
#include <mpi.h>

#include <string>
#include <vector>

namespace tagflow {

/// Exactly one, first thing in main(). MPI_Init_thread with `required`; throws if the
/// library grants less. Sets MPI_ERRORS_RETURN on MPI_COMM_WORLD so TAGFLOW_MPI_CHECK sees errors.
class MpiEnvironment {
public:
    MpiEnvironment(int& argc, char**& argv, int required = MPI_THREAD_FUNNELED);
    ~MpiEnvironment();
    MpiEnvironment(const MpiEnvironment&) = delete;
    MpiEnvironment& operator=(const MpiEnvironment&) = delete;
    int provided() const noexcept { return provided_; }

private:
    int provided_ = 0;
};

/// A communicator; owning ones are freed on destruction. Move-only.
class Comm {
public:
    Comm() = default;
    static Comm world() noexcept { return Comm(MPI_COMM_WORLD, false); }
    static Comm adopt(MPI_Comm c) noexcept { return Comm(c, true); }
    Comm(Comm&& o) noexcept;
    Comm& operator=(Comm&& o) noexcept;
    Comm(const Comm&) = delete;
    Comm& operator=(const Comm&) = delete;
    ~Comm();

    /// COLLECTIVE over this communicator.
    Comm dup() const;
    /// COLLECTIVE over this communicator; color MPI_UNDEFINED gives a null Comm.
    Comm split(int color, int key) const;

    bool is_null() const noexcept { return comm_ == MPI_COMM_NULL; }
    int rank() const;
    int size() const;
    MPI_Comm get() const noexcept { return comm_; }
    void reset() noexcept;

private:
    Comm(MPI_Comm c, bool owning) noexcept : comm_(c), owning_(owning) {}
    MPI_Comm comm_ = MPI_COMM_NULL;
    bool owning_ = false;
};

/// The processor (host) name of this rank.
std::string processor_name();

/// Sleep-polls `req` until it completes (ranks may be oversubscribed: no busy spin).
void wait_polling(MPI_Request* req);

}  // namespace tagflow
