// `tcp2rdma doctor` run as a user runs it, on this host: no RDMA device here (nor in CI), so the
// machine fails, and says so in the devices line first.
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "../cli_process.h"

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

using tcp2rdma::testing::CliResult;

// No rule file from the environment of whoever runs the tests: each test says which one it means.
CliResult run(const std::string& args, const std::string& env = "") {
  return tcp2rdma::testing::run_cli(TCP2RDMA_CLI, args, "unset TCP2RDMA_RULES TCP2RDMA_MODULE; " + env);
}

// The check names of the lines that carry a verdict, in order.
std::vector<std::string> check_names(const std::string& output) {
  std::vector<std::string> names;
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("ok    ", 0) != 0 && line.rfind("warn  ", 0) != 0 && line.rfind("FAIL  ", 0) != 0) continue;
    names.push_back(line.substr(6, line.find(':') - 6));
  }
  return names;
}

bool has_line_starting(const std::string& output, const std::string& start) {
  return output.rfind(start, 0) == 0 || output.find("\n" + start) != std::string::npos;
}

class Doctor : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/t2r-doctor-cli-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }
  std::string file(const std::string& name, const std::string& text) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }
  std::string dir_;
};

TEST_F(Doctor, AHostWithoutRdmaFailsAtTheDevicesCheck) {
  CliResult r = run("doctor");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_TRUE(has_line_starting(r.output, "FAIL  devices: no RDMA device")) << r.output;
  EXPECT_NE(r.output.find("-- fix: load the driver of the RDMA NIC"), std::string::npos) << r.output;
  EXPECT_EQ(check_names(r.output), (std::vector<std::string>{"devices", "ports", "addresses", "rule addresses",
                                                             "device files", "memlock", "descriptors", "rdma_cm", "module", "rules"}))
      << r.output;
  EXPECT_TRUE(has_line_starting(r.output, "ok    module: ")) << r.output;  // built beside the tool
  EXPECT_TRUE(has_line_starting(r.output, "ok    rules: no rule file: every connection stays TCP")) << r.output;
}

TEST_F(Doctor, JsonIsOneObjectWithTheSameVerdicts) {
  CliResult r = run("doctor --json");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_TRUE(r.output.starts_with("{\"checks\":[{\"name\":\"devices\",\"status\":\"fail\",\"finding\":\"no RDMA"))
      << r.output;
  EXPECT_NE(r.output.find("{\"name\":\"module\",\"status\":\"ok\","), std::string::npos) << r.output;
  EXPECT_TRUE(r.output.ends_with("}],\"ok\":false}\n")) << r.output;
  EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << r.output;  // one line: nothing else on stdout or stderr
}

TEST_F(Doctor, UsageErrorsExitTwo) {
  for (const char* args : {"doctor --bogus", "doctor extra", "doctor --rules", "doctor --peer",
                           "doctor --peer example.com", "doctor --peer 10.0.0.300", "doctor --peer 10.1"}) {
    CliResult r = run(args);
    EXPECT_EQ(r.status, 2) << args << "\n" << r.output;
    EXPECT_NE(r.output.find("usage: tcp2rdma doctor"), std::string::npos) << args << "\n" << r.output;
    EXPECT_EQ(r.output.find("devices:"), std::string::npos) << args;  // no check ran
  }
  EXPECT_NE(run("doctor --peer example.com").output.find("--peer wants an IPv4 or IPv6 address, not 'example.com'"),
            std::string::npos);
  CliResult help = run("doctor --help");
  EXPECT_EQ(help.status, 0);
  EXPECT_NE(help.output.find("usage: tcp2rdma doctor [--rules FILE] [--peer ADDR] [--json]"), std::string::npos);
  EXPECT_NE(run("--help").output.find("doctor [--rules FILE] [--peer ADDR] [--json]"), std::string::npos);
}

TEST_F(Doctor, AModuleThatDoesNotLoadFailsTheModuleCheck) {
  CliResult r = run("doctor", "TCP2RDMA_MODULE=" + dir_ + "/missing.so");
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(has_line_starting(r.output, "FAIL  module: cannot load " + dir_ + "/missing.so: ")) << r.output;
  std::string not_elf = file("not-elf.so", "text\n");
  r = run("doctor", "TCP2RDMA_MODULE=" + not_elf);
  EXPECT_TRUE(has_line_starting(r.output, "FAIL  module: cannot load " + not_elf + ": ")) << r.output;
}

TEST_F(Doctor, RulesComeFromTheOptionElseTheEnvironment) {
  std::string bad = file("bad.yaml", "version: 1\nrules:\n  - transport: rdma\n    match: {ports: 9-1}\n");
  CliResult r = run("doctor --rules " + bad);
  EXPECT_TRUE(has_line_starting(r.output, "FAIL  rules: " + bad + " (--rules) has 1 error: " + bad +
                                              ":4:20: port range '9-1' is reversed"))
      << r.output;
  std::string good = file("good.yaml", "version: 1\nrules:\n  - name: lab\n    match: {ports: 5201}\n"
                                       "    transport: rdma\n    buffer_size: 4MiB\n");
  r = run("doctor", "TCP2RDMA_RULES=" + good);
  EXPECT_TRUE(has_line_starting(r.output, "ok    rules: " + good + " (TCP2RDMA_RULES): 1 rule, 1 selects RDMA (lab)"))
      << r.output;
  // Its buffer_size is the size rings may grow to, which the memlock line weighs.
  EXPECT_NE(r.output.find("the rules' 4 MiB"), std::string::npos) << r.output;
}

TEST_F(Doctor, APeerWithoutRdmaCmFailsThePeerCheckLast) {
  CliResult r = run("doctor --peer 10.77.0.2");
  EXPECT_EQ(r.status, 1);
  std::vector<std::string> names = check_names(r.output);
  ASSERT_FALSE(names.empty());
  EXPECT_EQ(names.back(), "peer") << r.output;
  EXPECT_TRUE(has_line_starting(r.output, "FAIL  peer: cannot ask rdma_cm about 10.77.0.2: ")) << r.output;
}

}  // namespace
