// Which devices do their work on this host's CPUs (device_context.h, runs_on_host_cpus): sysfs
// directories laid out as the kernel lays out a Soft-RoCE device's and a NIC's, in a scratch directory.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "device_context.h"

namespace tcp2rdma::transport {
namespace {

namespace fs = std::filesystem;

class DeviceKind : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("t2r-device-kind-" + std::to_string(getpid()));
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  fs::path root_;
};

// /sys/devices/virtual/infiniband/rxe0: ports, node_guid, parent (the netdev's name), no `device`.
TEST_F(DeviceKind, ASoftRoceDeviceHasNoBusDeviceAndRunsOnTheHostsCpus) {
  fs::path rxe = root_ / "rxe0";
  fs::create_directories(rxe / "ports" / "1");
  { std::FILE* f = std::fopen((rxe / "parent").c_str(), "w"); ASSERT_NE(f, nullptr); std::fclose(f); }
  EXPECT_TRUE(runs_on_host_cpus(rxe.c_str()));
}

// /sys/class/infiniband/mlx5_0/device -> ../../../0000:3b:00.0 (its PCI function), dangling here: the
// link itself is what counts, not where it leads.
TEST_F(DeviceKind, ANicHasItsBusDeviceAndDoesNot) {
  fs::path nic = root_ / "mlx5_0";
  fs::create_directories(nic / "ports" / "1");
  fs::create_directory_symlink("../../../0000:3b:00.0", nic / "device");
  EXPECT_FALSE(runs_on_host_cpus(nic.c_str()));
}

// No sysfs to read (a container without it): the spin yields, which costs calls but never takes the
// CPU from a software device's work.
TEST_F(DeviceKind, ADeviceWhoseDirectoryCannotBeReadCountsAsSoftware) {
  EXPECT_TRUE(runs_on_host_cpus((root_ / "absent").c_str()));
}

}  // namespace
}  // namespace tcp2rdma::transport
