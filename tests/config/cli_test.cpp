// The tcp2rdma tool run as a user runs it: a real process, its exit status and what it prints.
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "../cli_process.h"

#include <array>
#include <cstdio>
#include <fstream>
#include <string>

namespace {

using tcp2rdma::testing::CliResult;

CliResult run(const std::string& args) { return tcp2rdma::testing::run_cli(TCP2RDMA_CLI, args); }

class Cli : public ::testing::Test {
 protected:
  std::string file(const std::string& name, const std::string& text) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }
  void SetUp() override {
    char pattern[] = "/tmp/t2r-cli-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }
  std::string dir_;
};

TEST_F(Cli, CheckAcceptsTheInstalledExample) {
  CliResult r = run("check " + std::string(TCP2RDMA_EXAMPLE_RULES));
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find(": ok (3 rules)"), std::string::npos) << r.output;
}

TEST_F(Cli, CheckListsEveryErrorOfEveryFileAndFails) {
  std::string good = file("good.yaml", "version: 1\nrules: []\n");
  std::string bad = file("bad.yaml", "version: 1\nrules:\n  - transport: rdma\n    match: {ports: 9-1, role: peer}\n");
  CliResult r = run("check " + good + " " + bad);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find(good + ": ok (0 rules)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(bad + ":4:20: port range '9-1' is reversed"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(bad + ":4:31: unknown role 'peer'"), std::string::npos) << r.output;
}

TEST_F(Cli, CheckWithoutFilesIsAUsageError) {
  CliResult r = run("check");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("usage: tcp2rdma check FILE"), std::string::npos);
}

TEST_F(Cli, ExplainNamesTheRuleItsLineAndTheOptions) {
  std::string rules = file("r.yaml",
                           "version: 1\nrules:\n  - name: tcp-for-ssh\n    match: {ports: 22}\n    transport: tcp\n"
                           "  - name: lab\n    match: {remote: 'fd00::/8'}\n    transport: rdma\n    buffer_size: 2MiB\n");
  CliResult r = run("explain --rules " + rules + " --program nc --role client --remote '[fd00::7]:5201'");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("decision: rdma"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rule:     lab (" + rules + ":6)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("buffer_size       2MiB"), std::string::npos) << r.output;
  r = run("explain --rules " + rules + " --program ssh --role client --remote 10.1.1.1:22");
  EXPECT_NE(r.output.find("decision: tcp\nrule:     tcp-for-ssh"), std::string::npos) << r.output;
  r = run("explain --rules " + rules + " --program nc --role server --remote 10.1.1.1:22 --local 10.1.1.2:9");
  EXPECT_NE(r.output.find("rule:     none matched"), std::string::npos) << r.output;
}

TEST_F(Cli, ExplainShowsTheAddressRdmaCmIsGivenForAnIpv4MappedOne) {
  std::string rules = file("m.yaml", "version: 1\nrules:\n  - name: lab\n    match: {remote: 10.0.0.0/8}\n"
                                     "    transport: rdma\n  - {name: local-lab, match: {local: 10.0.0.0/8}, transport: rdma}\n");
  CliResult r = run("explain --rules " + rules + " --program java --role client --remote '[::ffff:10.77.0.1]:5000'");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("rule:     lab"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rdma_cm:  connects to 10.77.0.1:5000 ([::ffff:10.77.0.1]:5000 is IPv4-mapped"),
            std::string::npos) << r.output;
  r = run("explain --rules " + rules + " --program java --role server --remote '[fd00::2]:40000' --local '[::ffff:10.77.0.1]:5000'");
  EXPECT_NE(r.output.find("rule:     local-lab"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rdma_cm:  listens at 10.77.0.1:5000 ([::ffff:10.77.0.1]:5000 is IPv4-mapped"),
            std::string::npos) << r.output;
  r = run("explain --rules " + rules + " --program nc --role client --remote 10.1.2.3:22");
  EXPECT_NE(r.output.find("rdma_cm:  connects to 10.1.2.3:22\n"), std::string::npos) << r.output;
  r = run("explain --rules " + rules + " --program nc --role client --remote 192.168.1.1:22");
  EXPECT_EQ(r.output.find("rdma_cm:"), std::string::npos) << r.output;  // TCP: no rdma_cm at all
}

TEST_F(Cli, ExplainUsageAndRuleErrors) {
  EXPECT_EQ(run("explain --program nc --role client").status, 2);
  EXPECT_EQ(run("explain --program nc --role peer --remote 1.2.3.4:5").status, 2);
  EXPECT_EQ(run("explain --program nc --role client --remote 1.2.3.4").status, 2);
  EXPECT_EQ(run("explain --program nc --role client --remote 1.2.3.4:5 --user no-such-user-t2r").status, 2);
  std::string bad = file("bad.yaml", "version: 3\n");
  CliResult r = run("explain --rules " + bad + " --program nc --role client --remote 1.2.3.4:5");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find(bad + ":1:10: unsupported version '3'"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("would keep every connection on TCP"), std::string::npos) << r.output;
}

TEST_F(Cli, ExplainWithoutRulesUsesTheEnvironment) {
  std::string rules = file("env.yaml", "version: 1\nrules:\n  - {name: envrule, transport: rdma}\n");
  CliResult r = run("explain --program nc --role client --remote 10.9.9.9:1 </dev/null; TCP2RDMA_RULES=" + rules +
              " TCP2RDMA_BUFFER_SIZE=16MiB " + TCP2RDMA_CLI + " explain --program nc --role client --remote 10.9.9.9:1");
  EXPECT_NE(r.output.find("rule:     envrule"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("buffer_size       16MiB"), std::string::npos) << r.output;
}

TEST_F(Cli, RunPreloadsTheModuleAndPassesTheRules) {
  std::string rules = file("ok.yaml", "version: 1\nrules: []\n");
  CliResult r = run("run --rules " + rules + " -- sh -c 'echo \"$LD_PRELOAD|$TCP2RDMA_RULES\"'");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("libtcp2rdma.so|" + rules), std::string::npos) << r.output;
  // The module really loads into the command, and a preload the user already had stays, after ours.
  r = run("run --log 1 -- env LD_PRELOAD_CHECK=1 sh -c 'echo \"$LD_PRELOAD\"'");
  EXPECT_NE(r.output.find("tcp2rdma["), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("]: loaded"), std::string::npos) << r.output;
  r = run("run -- sh -c 'echo \"$LD_PRELOAD\"' </dev/null; LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libdl.so.2 " +
          std::string(TCP2RDMA_CLI) + " run -- sh -c 'echo \"$LD_PRELOAD\"'");
  EXPECT_NE(r.output.find("libtcp2rdma.so:/usr/lib/x86_64-linux-gnu/libdl.so.2"), std::string::npos) << r.output;
}

TEST_F(Cli, RunRefusesABrokenRuleFileAndReportsCommandsItCannotRun) {
  std::string bad = file("bad.yaml", "version: 1\nrules:\n  - {transport: warp}\n");
  CliResult r = run("run --rules " + bad + " -- echo should-not-run");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.output.find("should-not-run"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(bad + ":3:17: unknown transport 'warp'"), std::string::npos) << r.output;
  r = run("run -- /nonexistent/program");
  EXPECT_EQ(r.status, 127);
  EXPECT_NE(r.output.find("cannot run '/nonexistent/program'"), std::string::npos) << r.output;
  EXPECT_EQ(run("run").status, 2);
  EXPECT_EQ(run("run --rules").status, 2);
  EXPECT_EQ(run("run echo no-separator").status, 2);
}

TEST_F(Cli, RunRefusesAModulePathThatLdPreloadCannotCarry) {
  // ld.so would split the path at the space, skip the module with a warning and run the command on
  // kernel TCP: refused instead, before the command runs.
  ASSERT_EQ(std::system(("mkdir -p '" + dir_ + "/a b'").c_str()), 0);
  std::string module = file("a b/libtcp2rdma.so", "");
  CliResult r = tcp2rdma::testing::run_cli(TCP2RDMA_CLI, "run -- echo should-not-run",
                                           "export TCP2RDMA_MODULE='" + module + "';");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.output.find("should-not-run"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("which LD_PRELOAD cannot carry"), std::string::npos) << r.output;
}

TEST_F(Cli, HelpVersionAndUnknownCommands) {
  CliResult r = run("--help");
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.output.find("usage: tcp2rdma COMMAND"), std::string::npos);
  r = run("--version");
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.output.rfind("tcp2rdma ", 0), 0u);
  EXPECT_EQ(run("frobnicate").status, 2);
  EXPECT_EQ(run("").status, 2);
}

}  // namespace
