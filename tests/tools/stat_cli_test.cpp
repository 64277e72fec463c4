// `tcp2rdma stat` and `tcp2rdma stats` run as a user runs them, against the segment of a fixture
// process (stats_fixture.cpp: three connections of known content) in a directory of the test's own.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "../cli_process.h"

#include <cstdlib>
#include <fstream>
#include <string>

extern char** environ;

namespace {

using tcp2rdma::testing::CliResult;

size_t count_of(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

class StatCli : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/t2r-stat-cli-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
    fixture_ = start_fixture();
    ASSERT_GT(fixture_, 0);
  }
  void TearDown() override {
    if (fixture_ > 0) {
      kill(fixture_, SIGTERM);
      waitpid(fixture_, nullptr, 0);
    }
    std::system(("rm -rf " + dir_).c_str());
  }

  // The fixture with its segment in dir_, once it says "ready"; -1 if it does not within 10 s.
  pid_t start_fixture() {
    setenv("TCP2RDMA_STATS_DIR", dir_.c_str(), 1);
    int out[2];
    if (pipe2(out, O_CLOEXEC) != 0) return -1;
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
    char* argv[] = {const_cast<char*>(STATS_FIXTURE), nullptr};
    pid_t pid = -1;
    if (posix_spawn(&pid, STATS_FIXTURE, &actions, nullptr, argv, environ) != 0) pid = -1;
    posix_spawn_file_actions_destroy(&actions);
    close(out[1]);
    std::string said;
    pollfd p{out[0], POLLIN, 0};
    char buffer[64];
    while (pid > 0 && said.find("ready\n") == std::string::npos && poll(&p, 1, 10000) == 1) {
      ssize_t n = read(out[0], buffer, sizeof buffer);
      if (n <= 0) break;
      said.append(buffer, static_cast<size_t>(n));
    }
    close(out[0]);
    if (pid > 0 && said.find("ready\n") == std::string::npos) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      return -1;
    }
    return pid;
  }

  // The baseline in dir_ too ($XDG_RUNTIME_DIR): no test touches the user's own.
  CliResult run(const std::string& args) {
    return tcp2rdma::testing::run_cli(TCP2RDMA_CLI, args,
                                      "export TCP2RDMA_STATS_DIR=" + dir_ + " XDG_RUNTIME_DIR=" + dir_ + ";");
  }
  std::string segment(pid_t pid) const { return dir_ + "/tcp2rdma." + std::to_string(pid); }

  std::string dir_;
  pid_t fixture_ = -1;
};

TEST_F(StatCli, JsonHasTheFixturesConnectionOnRdmaExactly) {
  CliResult r = run("stat --json");
  EXPECT_EQ(r.status, 0) << r.output;
  std::string pid = std::to_string(fixture_);
  EXPECT_TRUE(r.output.starts_with("{\"processes\":[{\"pid\":" + pid + ",\"program\":\"tools_stats_fix\",\"start_time\":"))
      << r.output;
  EXPECT_TRUE(contains(r.output, "\"stale\":false,\"connections\":[{\"slot\":0,\"fd\":7,\"role\":\"client\","
                                 "\"local\":\"10.77.0.1:40000\",\"remote\":\"10.77.0.2:5201\",\"rule\":\"lab\","
                                 "\"path\":\"rdma\",\"reason\":\"none\",\"reason_text\":\"\""))
      << r.output;
  EXPECT_TRUE(contains(r.output, "\"setup_ms\":12,\"switch_ms\":3,\"ring_kib\":256,\"peer_ring_kib\":1024,"
                                 "\"rdma_bytes_in\":3000000,\"rdma_bytes_out\":5000000,\"zcopy_bytes_out\":4000000,"
                                 "\"credit_stalls\":0,\"wakeups\":0,\"tcp_bytes_in\":100,\"tcp_bytes_out\":200}]}]}\n"))
      << r.output;
  EXPECT_EQ(count_of(r.output, "\"slot\":"), 1u);  // those on TCP only with -a
  EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << r.output;  // one line, nothing on stderr

  CliResult all = run("stat --json -a");
  EXPECT_EQ(count_of(all.output, "\"slot\":"), 3u) << all.output;
  EXPECT_TRUE(contains(all.output, "\"local\":\"[fd77::2]:6379\",\"remote\":\"[fd77::1]:50000\",\"rule\":\"lab6\","
                                   "\"path\":\"tcp\",\"reason\":\"peer-declined\","
                                   "\"reason_text\":\"the peer declined: no tcp2rdma listener\""))
      << all.output;
  EXPECT_TRUE(contains(all.output, "\"local\":\"[::ffff:10.77.0.1]:8080\",\"remote\":\"[::ffff:10.77.0.3]:41000\","
                                   "\"rule\":\"\",\"path\":\"tcp\",\"reason\":\"rule\",\"reason_text\":\"the rules say tcp\""))
      << all.output;
}

TEST_F(StatCli, TheTableShowsRdmaByDefaultAndWithAllTheReasons) {
  CliResult r = run("stat");
  EXPECT_EQ(r.status, 0) << r.output;
  std::printf("%s", r.output.c_str());
  EXPECT_LT(r.output.find("PID  PROGRAM          FD  ROLE    LOCAL "), r.output.find('\n')) << r.output;
  EXPECT_FALSE(contains(r.output, "REASON")) << r.output;
  EXPECT_TRUE(contains(r.output, "  tools_stats_fix   7  client  10.77.0.1:40000  10.77.0.2:5201  lab   rdma     2.9M"
                                 "      4.8M     100      200  256K/1M")) << r.output;
  EXPECT_TRUE(contains(r.output, "tcp2rdma stat: 2 connections on TCP not shown (-a shows them)\n")) << r.output;

  CliResult all = run("stat -a");
  std::printf("%s", all.output.c_str());
  EXPECT_TRUE(contains(all.output, "  REASON\n")) << all.output;
  EXPECT_TRUE(contains(all.output, "  tcp   ")) << all.output;
  EXPECT_TRUE(contains(all.output, "  the peer declined: no tcp2rdma listener\n")) << all.output;
  EXPECT_TRUE(contains(all.output, "  the rules say tcp\n")) << all.output;
  EXPECT_FALSE(contains(all.output, "not shown")) << all.output;
}

TEST_F(StatCli, PidSelectsOneProcessAndAMissingOneExitsOne) {
  CliResult r = run("stat --json -a --pid " + std::to_string(fixture_));
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(count_of(r.output, "\"pid\":"), 1u) << r.output;
  EXPECT_EQ(count_of(r.output, "\"slot\":"), 3u) << r.output;
  r = run("stat --pid 2147483632");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "tcp2rdma stat: pid 2147483632 has no stats segment in " + dir_)) << r.output;
}

TEST_F(StatCli, StatsSumsTheCountersAndResetStartsThemFromZero) {
  CliResult r = run("stats --json");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(r.output,
            "{\"processes\":1,\"since_ms\":null,\"connections\":{\"decided_rdma\":2,\"decided_tcp\":1,\"upgraded\":1,"
            "\"slots_exhausted\":0},\"descriptors_at_top\":0,\"open\":{\"tcp\":2,\"switching\":0,\"rdma\":1,\"back-on-tcp\":0},"
            "\"on_tcp_by_reason\":{\"none\":0,\"rule\":1,\"peer-declined\":1,\"no-rdma\":0,\"resources\":0,"
            "\"switch-failed\":0,\"moved-back\":0,\"failed-over\":0,\"closed-early\":0,\"other\":0},"
            "\"bytes\":{\"tcp_in\":107,\"tcp_out\":209,\"rdma_in\":3000000,\"rdma_out\":5000000,\"zcopy_out\":4000000},"
            "\"setup_ms\":[{\"from\":8,\"to\":16,\"count\":1}]}\n");

  CliResult reset = run("stats --reset");
  std::printf("%s", reset.output.c_str());
  EXPECT_EQ(reset.status, 0) << reset.output;
  EXPECT_TRUE(contains(reset.output, "counts since each process's start\n")) << reset.output;  // what was, then the reset
  EXPECT_TRUE(contains(reset.output, "  upgraded to rdma                         1\n")) << reset.output;
  EXPECT_TRUE(contains(reset.output, "reset: later counts start from now (baseline " + dir_ + "/tcp2rdma-stats.baseline)\n"))
      << reset.output;
  struct stat st{};
  ASSERT_EQ(stat((dir_ + "/tcp2rdma-stats.baseline").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  CliResult after = run("stats");
  std::printf("%s", after.output.c_str());
  EXPECT_TRUE(contains(after.output, "counts since the reset of ")) << after.output;
  EXPECT_TRUE(contains(after.output, "  upgraded to rdma                         0\n")) << after.output;
  EXPECT_TRUE(contains(after.output, "  rdma                                     0                       0\n")) << after.output;
  EXPECT_TRUE(contains(after.output, "setup time of the upgrades\n  (none)\n")) << after.output;
  EXPECT_TRUE(contains(after.output, "  rdma                                     1\n")) << after.output;  // open now: not reset
  CliResult json = run("stats --json");
  EXPECT_TRUE(contains(json.output, "\"decided_rdma\":0,\"decided_tcp\":0,\"upgraded\":0")) << json.output;
  EXPECT_TRUE(contains(json.output, "\"bytes\":{\"tcp_in\":0,\"tcp_out\":0,\"rdma_in\":0,\"rdma_out\":0,\"zcopy_out\":0},"
                                    "\"setup_ms\":[]}"))
      << json.output;
}

// Killed, and not reaped yet: a zombie has its pid and its start time still, but is gone all the same.
TEST_F(StatCli, AProcessKilledLeavesAStaleSegmentThatCleanRemoves) {
  pid_t killed = start_fixture();
  ASSERT_GT(killed, 0);
  kill(killed, SIGKILL);
  siginfo_t info{};
  ASSERT_EQ(waitid(P_PID, static_cast<id_t>(killed), &info, WEXITED | WNOWAIT), 0);  // dead, not reaped
  ASSERT_EQ(access(segment(killed).c_str(), F_OK), 0);
  std::ofstream(dir_ + "/tcp2rdma.77") << "not a segment";

  CliResult r = run("stat --json");
  EXPECT_EQ(count_of(r.output, "\"pid\":"), 1u) << r.output;  // the stale one is not shown
  EXPECT_TRUE(contains(r.output, "tcp2rdma stat: 1 stale segment (process gone): remove with tcp2rdma stat --clean\n"))
      << r.output;
  EXPECT_TRUE(contains(r.output, "tcp2rdma stat: skipped " + dir_ + "/tcp2rdma.77: not a segment (13 bytes")) << r.output;
  CliResult stats = run("stats --json");
  EXPECT_TRUE(stats.output.starts_with("{\"processes\":1,")) << stats.output;  // nor counted
  EXPECT_TRUE(contains(stats.output, "tcp2rdma stats: 1 stale segment (process gone)")) << stats.output;

  CliResult clean = run("stat --clean");
  EXPECT_EQ(clean.status, 0) << clean.output;
  EXPECT_TRUE(contains(clean.output, "removed 1 stale segment\n")) << clean.output;
  EXPECT_NE(access(segment(killed).c_str(), F_OK), 0);
  EXPECT_EQ(access(segment(fixture_).c_str(), F_OK), 0);  // the live one stays
  EXPECT_EQ(access((dir_ + "/tcp2rdma.77").c_str(), F_OK), 0);  // and what is not a segment is not ours
  EXPECT_FALSE(contains(run("stat").output, "stale")) << run("stat").output;
  waitpid(killed, nullptr, 0);
}

TEST_F(StatCli, AProcessThatExitsRemovesItsSegment) {
  kill(fixture_, SIGTERM);
  waitpid(fixture_, nullptr, 0);
  EXPECT_NE(access(segment(fixture_).c_str(), F_OK), 0);
  fixture_ = -1;
  CliResult r = run("stat --json");
  EXPECT_EQ(r.output, "{\"processes\":[]}\n");
}

TEST_F(StatCli, WatchRedrawsWithATimestampWhenNotOnATerminal) {
  CliResult r = tcp2rdma::testing::run_cli("timeout 1.3 " + std::string(TCP2RDMA_CLI), "stat --watch 0.5",
                                           "export TCP2RDMA_STATS_DIR=" + dir_ + ";");
  EXPECT_EQ(r.status, 124) << r.output;  // until interrupted
  EXPECT_GE(count_of(r.output, "\n--- 20"), 1u) << r.output;
  EXPECT_TRUE(r.output.starts_with("--- 20")) << r.output;
  EXPECT_GE(count_of(r.output, "PID "), 2u) << r.output;
}

TEST_F(StatCli, UsageErrorsExitTwo) {
  for (const char* args : {"stat --bogus", "stat --pid", "stat --pid x", "stat --pid -3", "stat --watch 0",
                           "stat --watch x", "stat --clean --json", "stats --bogus", "stats extra"}) {
    CliResult r = run(args);
    EXPECT_EQ(r.status, 2) << args << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, "usage: tcp2rdma stat")) << args << "\n" << r.output;
  }
  EXPECT_EQ(run("stat --help").status, 0);
  EXPECT_TRUE(contains(run("--help").output, "stat [--pid P] [--json] [--watch S] [-a|--all] | --clean")) << run("--help").output;
}

}  // namespace
