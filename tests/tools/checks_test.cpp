// doctor's checks judged on machines described by hand: this host has no RDMA device, so the device
// checks see here what the Soft-RoCE guest (rdma.tools.doctor.loop) shows for real.
#include <arpa/inet.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <fstream>

#include "doctor/checks.h"

namespace tcp2rdma::tools::doctor {
namespace {

in6_addr gid_of(const char* address) {
  in6_addr out{};
  in_addr v4{};
  if (inet_pton(AF_INET, address, &v4) == 1) {
    out.s6_addr[10] = out.s6_addr[11] = 0xff;
    std::memcpy(&out.s6_addr[12], &v4, 4);
  } else {
    EXPECT_EQ(inet_pton(AF_INET6, address, &out), 1) << address;
  }
  return out;
}

Gid gid(uint32_t index, const char* address, const std::string& netdev, bool v2 = true) {
  return Gid{index, gid_of(address), v2, netdev};
}

InterfaceAddress address(const std::string& interface, const char* text) {
  return InterfaceAddress{interface, text, gid_of(text)};
}

// rxe0 on eth0 with 10.77.0.1 and fd77::1, as the guest has it; lo beside it.
Inventory soft_roce() {
  Port port{1, "ACTIVE", true, PortKind::kRoce, "eth0",
            {gid(0, "fe80::5054:ff:fe12:3456", "eth0"), gid(1, "10.77.0.1", "eth0", false), gid(2, "10.77.0.1", "eth0"),
             gid(3, "fd77::1", "eth0")}};
  Inventory inventory;
  inventory.devices.push_back(Device{"rxe0", "", {port}, true});
  inventory.addresses = {address("lo", "127.0.0.1"), address("eth0", "10.77.0.1"), address("eth0", "fd77::1")};
  return inventory;
}

TEST(DoctorChecks, NoDeviceFailsWithTheDriverFix) {
  Inventory none;
  Check c = check_devices(none);
  EXPECT_EQ(c.verdict, Verdict::kFail);
  EXPECT_EQ(c.finding, "no RDMA device");
  EXPECT_NE(c.fix.find("modprobe rdma_rxe && rdma link add rxe0 type rxe netdev <iface>"), std::string::npos);
  none.list_error = "Function not implemented";
  EXPECT_EQ(check_devices(none).finding, "no RDMA device (libibverbs: Function not implemented)");
  EXPECT_EQ(check_ports(none).verdict, Verdict::kFail);
  EXPECT_EQ(check_addresses(none).verdict, Verdict::kFail);
}

TEST(DoctorChecks, ASoftRoceDeviceOnAnAddressedInterfacePasses) {
  Inventory inventory = soft_roce();
  EXPECT_EQ(format_line(check_devices(inventory)), "ok    devices: rxe0 (1 port, software: runs on this host's CPUs)");
  inventory.devices.front().software = false;  // a NIC's
  EXPECT_EQ(format_line(check_devices(inventory)), "ok    devices: rxe0 (1 port)");
  inventory.devices.front().software = true;
  EXPECT_EQ(format_line(check_ports(inventory)), "ok    ports: rxe0 port 1 ACTIVE (eth0)");
  Check c = check_addresses(inventory);
  EXPECT_EQ(c.verdict, Verdict::kOk) << c.finding;
  // The RoCE v2 GID of the two for 10.77.0.1 (rdma_cm's choice); lo has no device, so it is not listed.
  EXPECT_EQ(c.finding,
            "connections go over RDMA only between such addresses: 10.77.0.1 (rxe0 port 1, GID 2, RoCE v2), "
            "fd77::1 (rxe0 port 1, GID 3, RoCE v2)");
}

TEST(DoctorChecks, APortThatIsNotActiveFailsNamingItsInterface) {
  Inventory inventory = soft_roce();
  Port& port = inventory.devices[0].ports[0];
  port.active = false;
  port.state = "DOWN";
  Check c = check_ports(inventory);
  EXPECT_EQ(c.verdict, Verdict::kFail);
  EXPECT_EQ(c.finding, "rxe0 port 1 is DOWN (eth0)");
  EXPECT_NE(c.fix.find("ip link set eth0 up"), std::string::npos) << c.fix;
}

TEST(DoctorChecks, ADeviceThatCannotBeOpenedFailsThePorts) {
  Inventory inventory;
  inventory.devices.push_back(Device{"rxe0", "cannot open it: Permission denied", {}});
  EXPECT_EQ(check_devices(inventory).verdict, Verdict::kOk);
  Check c = check_ports(inventory);
  EXPECT_EQ(c.verdict, Verdict::kFail);
  EXPECT_EQ(c.finding, "rxe0: cannot open it: Permission denied");
  EXPECT_EQ(c.fix, "see device files");
}

TEST(DoctorChecks, AnAddressWithoutAGidWarnsAndNoneAtAllFails) {
  Inventory inventory = soft_roce();
  inventory.addresses.push_back(address("eth0", "192.168.5.1"));
  Check some = check_addresses(inventory);
  EXPECT_EQ(some.verdict, Verdict::kWarn);
  EXPECT_NE(some.finding.find("; no GID holds 192.168.5.1 on eth0"), std::string::npos) << some.finding;
  inventory.devices[0].ports[0].gids.clear();
  Check none = check_addresses(inventory);
  EXPECT_EQ(none.verdict, Verdict::kFail);
  EXPECT_NE(none.finding.find("no address of an RDMA device's interface has a GID"), std::string::npos);
  EXPECT_NE(none.fix.find("ip addr add"), std::string::npos);
  inventory.addresses = {address("lo", "127.0.0.1")};  // the device's interface has no address at all
  EXPECT_EQ(check_addresses(inventory).verdict, Verdict::kFail);
}

TEST(DoctorChecks, AGidOfAnotherInterfaceDoesNotCount) {
  Inventory inventory = soft_roce();
  inventory.addresses = {address("eth1", "10.77.0.1")};  // same address on an interface without RDMA
  Check c = check_addresses(inventory);
  EXPECT_EQ(c.verdict, Verdict::kFail) << c.finding;
}

TEST(DoctorChecks, InfinibandPortsAreNotJudgedByGids) {
  Inventory inventory;
  inventory.devices.push_back(Device{"mlx5_0", "", {Port{1, "ACTIVE", true, PortKind::kInfiniband, "", {}}}});
  Check c = check_addresses(inventory);
  EXPECT_EQ(c.verdict, Verdict::kWarn) << c.finding;
  EXPECT_NE(c.finding.find("mlx5_0 port 1 (InfiniBand: via IPoIB)"), std::string::npos) << c.finding;
}

class DeviceFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/t2r-doctor-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }
  void make(const std::string& name, mode_t mode) {
    std::ofstream(dir_ + "/" + name) << "";
    ASSERT_EQ(chmod((dir_ + "/" + name).c_str(), mode), 0);
  }
  std::string dir_;
};

TEST_F(DeviceFiles, MissingDirectoryOrFilesFailWithTheModuleToLoad) {
  Check gone = check_device_files(dir_ + "/none");
  EXPECT_EQ(gone.verdict, Verdict::kFail);
  EXPECT_NE(gone.fix.find("modprobe ib_uverbs rdma_ucm"), std::string::npos);
  EXPECT_EQ(check_device_files(dir_).finding, "no " + dir_ + "/uverbs*");
  make("uverbs0", 0666);
  Check no_cm = check_device_files(dir_);
  EXPECT_EQ(no_cm.finding, "no " + dir_ + "/rdma_cm");
  EXPECT_EQ(no_cm.fix, "`modprobe rdma_ucm`");
  make("rdma_cm", 0666);
  EXPECT_EQ(format_line(check_device_files(dir_)),
            "ok    device files: uverbs0, rdma_cm in " + dir_ + ": this user can read and write them");
}

TEST_F(DeviceFiles, FilesTheUserCannotOpenFailWithTheirOwnerAndTheFix) {
  make("uverbs0", 0600);
  make("rdma_cm", 0666);
  // Root opens anything: judge as nobody then, in a child, as a user of the machine would be judged.
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  ASSERT_EQ(chmod(dir_.c_str(), 0755), 0);
  pid_t child = fork();
  if (child == 0) {
    if (geteuid() == 0) {
      const passwd* nobody = getpwnam("nobody");
      if (nobody == nullptr || setgid(nobody->pw_gid) != 0 || setuid(nobody->pw_uid) != 0) _exit(3);
    } else if (chmod((dir_ + "/uverbs0").c_str(), 0) != 0) {
      _exit(3);
    }
    std::string line = format_line(check_device_files(dir_));
    ssize_t ignored = write(pipe_fds[1], line.data(), line.size());
    (void)ignored;
    _exit(0);
  }
  close(pipe_fds[1]);
  std::string line;
  char buf[1024];
  for (ssize_t n; (n = read(pipe_fds[0], buf, sizeof buf)) > 0;) line.append(buf, static_cast<size_t>(n));
  close(pipe_fds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_EQ(line.rfind("FAIL  device files: this user (", 0), 0u) << line;
  EXPECT_NE(line.find("cannot open for reading and writing in " + dir_ + ": uverbs0 (mode 0"), std::string::npos)
      << line;
  EXPECT_EQ(line.find("rdma_cm ("), std::string::npos) << line;  // the one it can open is not blamed
  EXPECT_NE(line.find("-- fix: add the user to the group that owns them"), std::string::npos) << line;
}

class RuleFiles : public DeviceFiles {
 protected:
  std::string rules(const std::string& text) {
    std::string path = dir_ + "/rules.yaml";
    std::ofstream(path) << text;
    return path;
  }
};

TEST_F(RuleFiles, NoFileKeepsEverythingOnTcp) {
  EXPECT_EQ(format_line(check_rules(RuleFile{})), "ok    rules: no rule file: every connection stays TCP");
  EXPECT_EQ(largest_rdma_buffer(RuleFile{}), 0u);
}

TEST_F(RuleFiles, ErrorsFailWithTheirPositions) {
  std::string path = rules("version: 1\nrules:\n  - transport: rdma\n    match: {ports: 9-1}\n");
  RuleFile file = find_rule_file(path);
  EXPECT_EQ(file.source, "--rules");
  Check c = check_rules(file);
  EXPECT_EQ(c.verdict, Verdict::kFail);
  EXPECT_NE(c.finding.find(path + ":4:20: port range '9-1' is reversed"), std::string::npos) << c.finding;
  EXPECT_NE(c.fix.find("tcp2rdma check"), std::string::npos);
  EXPECT_EQ(largest_rdma_buffer(file), 0u);
}

TEST_F(RuleFiles, CountsTheRulesThatSelectRdmaAndTheirLargestBuffer) {
  std::string path = rules(
      "version: 1\nrules:\n  - name: ssh\n    match: {ports: 22}\n    transport: tcp\n"
      "  - name: lab\n    match: {remote: 10.77.0.0/24}\n    transport: rdma\n    buffer_size: 4MiB\n"
      "  - name: bulk\n    match: {ports: 5201}\n    transport: rdma\n");
  RuleFile file = find_rule_file(path);
  EXPECT_EQ(format_line(check_rules(file)), "ok    rules: " + path + " (--rules): 3 rules, 2 select RDMA (lab, bulk)");
  EXPECT_EQ(largest_rdma_buffer(file), 4u << 20);
}

TEST_F(RuleFiles, NoRuleSelectingRdmaWarns) {
  RuleFile file = find_rule_file(rules("version: 1\nrules:\n  - match: {ports: 22}\n    transport: tcp\n"));
  Check c = check_rules(file);
  EXPECT_EQ(c.verdict, Verdict::kWarn);
  EXPECT_NE(c.finding.find("1 rule, none selects RDMA"), std::string::npos) << c.finding;
}

TEST_F(RuleFiles, LocalBlocksOfRdmaRulesMustHoldAnAddressWithAGid) {
  RuleFile file = find_rule_file(rules(
      "version: 1\nrules:\n  - name: lab\n    match: {local: [10.77.0.0/24, 'fd77::/64'], remote: 10.77.0.0/24}\n"
      "    transport: rdma\n  - name: ssh\n    match: {local: 10.9.0.0/16}\n    transport: tcp\n"));
  EXPECT_EQ(format_line(check_rule_addresses(soft_roce(), file)),
            "ok    rule addresses: RoCE has GIDs in lab: local 10.77.0.0/24 (10.77.0.1), lab: local fd77::/64 (fd77::1); "
            "remote 10.77.0.0/24: the peers' (check one with --peer ADDR)");
  // lo's 127.0.0.1 has no GID, and no address at all is in 10.9.0.0/16: both warn; a TCP rule is not judged.
  file = find_rule_file(rules(
      "version: 1\nrules:\n  - name: far\n    match: {local: [10.9.0.0/16, 10.77.0.1]}\n    transport: rdma\n"
      "  - name: here\n    match: {local: 127.0.0.0/8}\n    transport: rdma\n"));
  Check c = check_rule_addresses(soft_roce(), file);
  EXPECT_EQ(c.verdict, Verdict::kWarn);
  EXPECT_EQ(c.finding,
            "no address RoCE has a GID for in far: local 10.9.0.0/16, here: local 127.0.0.0/8: such connections stay "
            "TCP on this machine; GIDs in far: local 10.77.0.1/32 (10.77.0.1)");
  EXPECT_EQ(format_line(check_rule_addresses(soft_roce(), RuleFile{})),
            "ok    rule addresses: no rule that selects RDMA names local addresses");
}

TEST(DoctorChecks, AModuleThatCannotLoadFailsWithTheLoadersWords) {
  Check c = check_module("/nonexistent/libtcp2rdma.so");
  EXPECT_EQ(c.verdict, Verdict::kFail);
  EXPECT_NE(c.finding.find("cannot load /nonexistent/libtcp2rdma.so: /nonexistent/libtcp2rdma.so: cannot open shared "
                           "object file"),
            std::string::npos)
      << c.finding;
  EXPECT_NE(c.fix.find("TCP2RDMA_MODULE"), std::string::npos);
}

TEST(DoctorChecks, AModulePathThatLdPreloadCannotCarryFails) {
  // dlopen would load it; LD_PRELOAD would split the path and skip it.
  Check c = check_module("/opt/my tools/libtcp2rdma.so");
  EXPECT_EQ(c.verdict, Verdict::kFail);
  EXPECT_NE(c.finding.find("which LD_PRELOAD cannot carry"), std::string::npos) << c.finding;
}

}  // namespace
}  // namespace tcp2rdma::tools::doctor

namespace tcp2rdma::tools::doctor {
namespace {

TEST(DoctorDescriptors, SoftEqualToHardWithoutPrivilegeWarnsOfTheTopReserve) {
  Check c = judge_descriptors(2048, 2048, false);
  EXPECT_EQ(c.verdict, Verdict::kWarn);
  EXPECT_NE(c.finding.find("up to 64 descriptors from the top"), std::string::npos) << c.finding;
  EXPECT_EQ(judge_descriptors(128, 128, false).finding.find("up to 16 descriptors") != std::string::npos, true);
}

TEST(DoctorDescriptors, RoomAboveTheLimitPasses) {
  EXPECT_EQ(judge_descriptors(1024, 4096, false).verdict, Verdict::kOk);
  EXPECT_EQ(judge_descriptors(2048, 2048, true).verdict, Verdict::kOk);
}

}  // namespace
}  // namespace tcp2rdma::tools::doctor
