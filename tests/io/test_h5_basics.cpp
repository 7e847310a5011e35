// SPDX-License-Identifier: Apache-2.0
// test_h5_basics: H5Handle ownership, the error stack walked into H5Error, fixed-length string
// packing (UTF-8 safe), a collective slab write whose I/O mode is really collective.
#include <gtest/gtest.h>

#include "io/h5_dataset.hpp"
#include "io/h5_file.hpp"
#include "io_test_util.hpp"

namespace tagflow::io::test {
namespace {

TEST(H5Basics, FailingCallBecomesH5ErrorWithStack) {
    try {
        File f = open_file_serial(temp_dir() + "/does-not-exist.h5");
        ADD_FAILURE() << "no exception";
    } catch (const H5Error& e) {
        EXPECT_NE(std::string(e.what()).find("H5Fopen"), std::string::npos) << e.what();
        EXPECT_FALSE(e.stack.empty());
        EXPECT_GE(e.min, 0);
    }
    try {
        TAGFLOW_H5_CHECK(H5Dopen2(H5I_INVALID_HID, "nope", H5P_DEFAULT));
        ADD_FAILURE() << "no exception";
    } catch (const Error& e) {  // H5Error is a tagflow::Error
        EXPECT_NE(std::string(e.what()).find("test_h5_basics.cpp"), std::string::npos);
    }
    EXPECT_TRUE(all_ranks(!::testing::Test::HasFailure()));
}

TEST(H5Basics, HandlesAreMoveOnlyOwners) {
    Datatype a = fixed_string_type(8);
    hid_t id = a.get();
    Datatype b = std::move(a);
    EXPECT_FALSE(a.valid());
    EXPECT_EQ(b.get(), id);
    EXPECT_GT(H5Iis_valid(id), 0);
    b.reset();
    EXPECT_FALSE(b.valid());
    EXPECT_LE(H5Iis_valid(id), 0);
    static_assert(!std::is_copy_constructible_v<Dataset>);
    EXPECT_TRUE(all_ranks(!::testing::Test::HasFailure()));
}

TEST(H5Basics, FixedStringsCutOnUtf8Boundaries) {
    auto buf = pack_fixed_strings({"abc", "abcdef", "ab\xc3\xa9", ""}, 3);
    ASSERT_EQ(buf.size(), 12u);
    EXPECT_EQ(std::string(buf.data(), 3), std::string("abc"));
    EXPECT_EQ(std::string(buf.data() + 3, 3), std::string("abc"));
    EXPECT_EQ(std::string(buf.data() + 6, 3), std::string("ab\0", 3));  // é not split
    EXPECT_EQ(std::string(buf.data() + 9, 3), std::string(3, '\0'));
    EXPECT_TRUE(all_ranks(!::testing::Test::HasFailure()));
}

TEST(H5Basics, CollectiveSlabWriteIsReallyCollective) {
    const int r = world_rank(), n = world_size();
    const std::string path = test_file();
    H5D_mpio_actual_io_mode_t mode = H5D_MPIO_NO_COLLECTIVE;
    {
        File f = create_file(MPI_COMM_WORLD, path);  // declared first: closed last
        Dataset d = create_column(f.get(), "x", H5T_NATIVE_INT32, 16);
        PropList dxpl = mpio_dxpl(true);
        // rank r writes r elements (rank 0 none) of value r, after all lower ranks'.
        std::vector<int32_t> v(static_cast<size_t>(r), r);
        hsize_t start = static_cast<hsize_t>(r * (r - 1) / 2), total = static_cast<hsize_t>(n * (n - 1) / 2);
        mode = write_slab(d.get(), dxpl.get(), H5T_NATIVE_INT32, total, start, v.size(), v.data());
    }
    EXPECT_NE(mode, H5D_MPIO_NO_COLLECTIVE);
    File f = open_file_serial(path);
    auto got = read_ds<int32_t>(f.get(), "/x");
    std::vector<int32_t> want;
    for (int k = 0; k < n; ++k) want.insert(want.end(), static_cast<size_t>(k), k);
    EXPECT_EQ(got, want);
    EXPECT_TRUE(all_ranks(!::testing::Test::HasFailure()));
}

}  // namespace
}  // namespace tagflow::io::test
