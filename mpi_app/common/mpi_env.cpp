// SPDX-License-Identifier: Apache-2.0
#include "common/mpi_env.hpp"

#include <time.h>

#include <cstdio>
#include <utility>

#include "common/error.hpp"

namespace tagflow {

std::string mpi_error_message(int code, const char* call, const char* file, int line) {
    char msg[MPI_MAX_ERROR_STRING] = {0};
    int len = 0;
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized || MPI_Error_string(code, msg, &len) != MPI_SUCCESS)
        snprintf(msg, sizeof msg, "MPI error %d", code);
    char buf[1024];
    snprintf(buf, sizeof buf, "%s failed at %s:%d: %s", call, file, line, msg);
    return buf;
}

MpiEnvironment::MpiEnvironment(int& argc, char**& argv, int required) {
    TAGFLOW_MPI_CHECK(MPI_Init_thread(&argc, &argv, required, &provided_));
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if (provided_ < required)
        throw MpiError("MPI_Init_thread granted thread level " + std::to_string(provided_) + " but tagflow needs " +
                           std::to_string(required),
                       0);
}

MpiEnvironment::~MpiEnvironment() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
}

Comm::Comm(Comm&& o) noexcept
    : comm_(std::exchange(o.comm_, MPI_COMM_NULL)), owning_(std::exchange(o.owning_, false)) {}

Comm& Comm::operator=(Comm&& o) noexcept {
    if (this != &o) {
        reset();
        comm_ = std::exchange(o.comm_, MPI_COMM_NULL);
        owning_ = std::exchange(o.owning_, false);
    }
    return *this;
}

Comm::~Comm() { reset(); }

void Comm::reset() noexcept {
    if (owning_ && comm_ != MPI_COMM_NULL) {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (!finalized) MPI_Comm_free(&comm_);
    }
    comm_ = MPI_COMM_NULL;
    owning_ = false;
}

Comm Comm::dup() const {
    MPI_Comm c = MPI_COMM_NULL;
    TAGFLOW_MPI_CHECK(MPI_Comm_dup(comm_, &c));
    return Comm(c, true);
}

Comm Comm::split(int color, int key) const {
    MPI_Comm c = MPI_COMM_NULL;
    TAGFLOW_MPI_CHECK(MPI_Comm_split(comm_, color, key, &c));
    return Comm(c, c != MPI_COMM_NULL);
}

int Comm::rank() const {
    int r = -1;
    TAGFLOW_MPI_CHECK(MPI_Comm_rank(comm_, &r));
    return r;
}

int Comm::size() const {
    int s = 0;
    TAGFLOW_MPI_CHECK(MPI_Comm_size(comm_, &s));
    return s;
}

std::string processor_name() {
    char name[MPI_MAX_PROCESSOR_NAME] = {0};
    int len = 0;
    TAGFLOW_MPI_CHECK(MPI_Get_processor_name(name, &len));
    return std::string(name, static_cast<size_t>(len));
}

void wait_polling(MPI_Request* req) {
    int done = 0;
    long sleep_ns = 1000;
    for (;;) {
        TAGFLOW_MPI_CHECK(MPI_Test(req, &done, MPI_STATUS_IGNORE));
        if (done) return;
        timespec ts{0, sleep_ns};
        nanosleep(&ts, nullptr);
        if (sleep_ns < 1000000) sleep_ns *= 2;
    }
}

}  // namespace tagflow
