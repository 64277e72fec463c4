// What `tcp2rdma stat` and `stats` print, from views made by hand: the table, its JSON, the sums less
// a baseline, and the baseline file.
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "stats_view/baseline.h"
#include "stats_view/connection_table.h"
#include "stats_view/totals.h"
#include "text_format.h"

namespace tcp2rdma::tools::stats_view {
namespace {

using stats::ConnectionView;
using stats::ProcessView;
using stats::SlotPath;
using stats::TcpReason;

constexpr uint64_t kNow = 1'800'000'000'000;

ConnectionView on_rdma() {
  ConnectionView c;
  c.slot = 0;
  c.fd = 7;
  c.client = true;
  c.local = "10.77.0.1:40000";
  c.remote = "10.77.0.2:5201";
  c.rule = "lab";
  c.path = SlotPath::kRdma;
  c.opened_ms = kNow - 125'000;
  c.setup_ms = 12;
  c.ring_kib = 256;
  c.peer_ring_kib = 1024;
  c.rdma_bytes_in = 3'000'000;
  c.rdma_bytes_out = 5'000'000;
  c.zcopy_bytes_out = 4'000'000;
  c.credit_stalls = 9;
  c.wakeups = 4;
  c.tcp_bytes_in = 100;
  c.tcp_bytes_out = 200;
  return c;
}

ConnectionView on_tcp() {
  ConnectionView c;
  c.slot = 1;
  c.fd = 9;
  c.client = false;
  c.local = "[fd77::2]:6379";
  c.remote = "[fd77::1]:50000";
  c.rule = "lab6";
  c.path = SlotPath::kTcp;
  c.reason = TcpReason::kPeerDeclined;
  c.reason_text = "the peer declined:\tno listener";
  c.opened_ms = kNow - 3'700'000;
  c.tcp_bytes_in = 7;
  c.tcp_bytes_out = 9;
  return c;
}

ProcessView process(pid_t pid, uint64_t start_time, std::vector<ConnectionView> connections) {
  ProcessView p;
  p.pid = pid;
  p.program = "iperf3";
  p.start_time = start_time;
  p.connections = std::move(connections);
  return p;
}

TEST(StatTable, ShowsTheConnectionsRdmaIsInvolvedInAndWithAllTheOthersWithTheirReason) {
  std::vector<ProcessView> processes = {process(4242, 1, {on_rdma(), on_tcp()})};
  EXPECT_EQ(format_table(processes, {false, kNow}),
            " PID  PROGRAM  FD  ROLE    LOCAL            REMOTE          RULE  PATH  RDMA-IN  RDMA-OUT  TCP-IN  "
            "TCP-OUT    RINGS    AGE\n"
            "4242  iperf3    7  client  10.77.0.1:40000  10.77.0.2:5201  lab   rdma     2.9M      4.8M     100      "
            "200  256K/1M  2m05s\n");
  EXPECT_EQ(format_table(processes, {true, kNow}),
            " PID  PROGRAM  FD  ROLE    LOCAL            REMOTE           RULE  PATH  RDMA-IN  RDMA-OUT  TCP-IN  "
            "TCP-OUT    RINGS    AGE  REASON\n"
            "4242  iperf3    7  client  10.77.0.1:40000  10.77.0.2:5201   lab   rdma     2.9M      4.8M     100      "
            "200  256K/1M  2m05s\n"
            "4242  iperf3    9  server  [fd77::2]:6379   [fd77::1]:50000  lab6  tcp         0         0       7        "
            "9        -  1h01m  the peer declined:?no listener\n");
  EXPECT_EQ(format_table({}, {true, kNow}),
            "PID  PROGRAM  FD  ROLE  LOCAL  REMOTE  RULE  PATH  RDMA-IN  RDMA-OUT  TCP-IN  TCP-OUT  RINGS  AGE\n");
}

TEST(StatTable, JsonCarriesEveryFieldExactly) {
  std::vector<ProcessView> processes = {process(4242, 77, {on_rdma(), on_tcp()})};
  processes[0].stale = true;
  std::string json = format_json(processes, {false, kNow});
  EXPECT_EQ(json,
            "{\"processes\":[{\"pid\":4242,\"program\":\"iperf3\",\"start_time\":77,\"stale\":true,\"connections\":["
            "{\"slot\":0,\"fd\":7,\"role\":\"client\",\"local\":\"10.77.0.1:40000\",\"remote\":\"10.77.0.2:5201\","
            "\"rule\":\"lab\",\"path\":\"rdma\",\"reason\":\"none\",\"reason_text\":\"\",\"opened_ms\":1799999875000,"
            "\"age_ms\":125000,\"setup_ms\":12,\"switch_ms\":0,\"ring_kib\":256,\"peer_ring_kib\":1024,"
            "\"rdma_bytes_in\":3000000,\"rdma_bytes_out\":5000000,\"zcopy_bytes_out\":4000000,\"credit_stalls\":9,"
            "\"wakeups\":4,\"tcp_bytes_in\":100,"
            "\"tcp_bytes_out\":200}]}]}");
  std::string all = format_json(processes, {true, kNow});
  EXPECT_NE(all.find("\"reason\":\"peer-declined\",\"reason_text\":\"the peer declined:\\tno listener\""),
            std::string::npos)
      << all;
}

TEST(StatTable, SizesAgesAndRingsReadShort) {
  EXPECT_EQ(format_bytes_short(0), "0");
  EXPECT_EQ(format_bytes_short(1023), "1023");
  EXPECT_EQ(format_bytes_short(1024), "1.0K");
  EXPECT_EQ(format_bytes_short(10188), "9.9K");
  EXPECT_EQ(format_bytes_short(10200), "10K");
  EXPECT_EQ(format_bytes_short(uint64_t{1023} * 1024 + 1000), "1.0M");  // not "1024K"
  EXPECT_EQ(format_bytes_short(uint64_t{5} << 30), "5.0G");
  EXPECT_EQ(format_bytes_short(UINT64_MAX), "16E");
  EXPECT_EQ(format_age(999), "0s");
  EXPECT_EQ(format_age(59'999), "59s");
  EXPECT_EQ(format_age(60'000), "1m00s");
  EXPECT_EQ(format_age(3'599'000), "59m59s");
  EXPECT_EQ(format_age(3'600'000), "1h00m");
  EXPECT_EQ(format_age(90'000'000), "1d01h");
  EXPECT_EQ(format_rings(0, 0), "-");
  EXPECT_EQ(format_rings(64, 64), "64K/64K");
  EXPECT_EQ(format_rings(4096, 1536), "4M/1536K");
}

stats::TotalsView totals(uint64_t base) {
  stats::TotalsView t;
  for (uint64_t* c : counters(&t)) *c = base;
  return t;
}

TEST(StatsTotals, ALiveProcessCountsFromItsBaselineAReusedPidInFullAStaleOneNot) {
  ProcessView kept = process(100, 5, {on_rdma()});
  kept.totals = totals(10);
  ProcessView reused = process(200, 9, {on_tcp()});  // pid 200 started again since the reset
  reused.totals = totals(3);
  ProcessView gone = process(300, 1, {on_rdma()});
  gone.totals = totals(1000);
  gone.stale = true;
  Baseline baseline;
  baseline.processes[{100, 5}] = totals(4);
  baseline.processes[{200, 8}] = totals(2);
  baseline.processes[{400, 1}] = totals(7);  // exited since: no longer counts

  Sum sum = sum_live({kept, reused, gone}, &baseline);
  EXPECT_EQ(sum.processes, 2u);
  for (uint64_t value : counter_values(sum.totals)) EXPECT_EQ(value, 6u + 3u);
  EXPECT_EQ(sum.open[static_cast<size_t>(SlotPath::kRdma)], 1u);
  EXPECT_EQ(sum.open[static_cast<size_t>(SlotPath::kTcp)], 1u);

  baseline.processes[{100, 5}] = totals(50);  // a baseline above the counts never goes below zero
  EXPECT_EQ(counter_values(sum_live({kept}, &baseline).totals)[0], 0u);
  EXPECT_EQ(counter_values(sum_live({kept}, nullptr).totals)[0], 10u);
}

TEST(StatsTotals, TextAndJsonShowEachCategory) {
  Sum sum;
  sum.processes = 1;
  sum.totals.decided_rdma = 2;
  sum.totals.upgraded = 1;
  sum.totals.on_tcp_by_reason[static_cast<size_t>(TcpReason::kPeerDeclined)] = 1;
  sum.totals.rdma_bytes_in = 3'000'000;
  sum.totals.setup_ms_log2[4] = 1;
  sum.totals.setup_ms_log2[15] = 2;
  std::string text = format_text(sum, "each process's start");
  EXPECT_NE(text.find("  peer-declined                            1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  closed-early                             0\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("  none"), std::string::npos) << text;
  EXPECT_NE(text.find("  rdma                        3000000 (2.9M)                       0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  8-16 ms                                  1\n  16384 ms or more                         2\n"),
            std::string::npos)
      << text;
  std::string json = format_json(sum, nullptr);
  EXPECT_NE(json.find("\"since_ms\":null,\"connections\":{\"decided_rdma\":2,\"decided_tcp\":0,\"upgraded\":1,"
                      "\"slots_exhausted\":0}"),
            std::string::npos)
      << json;
  EXPECT_NE(json.find("\"setup_ms\":[{\"from\":8,\"to\":16,\"count\":1},{\"from\":16384,\"to\":null,\"count\":2}]"),
            std::string::npos)
      << json;
  EXPECT_EQ(bucket_label(0), "under 1 ms");
  EXPECT_EQ(bucket_label(1), "1-2 ms");
}

TEST(StatsBaseline, RoundTripsAndRefusesWhatItDidNotWrite) {
  ProcessView a = process(100, 5, {});
  a.totals = totals(10);
  a.totals.tcp_bytes_out = UINT64_MAX;
  ProcessView stale = process(300, 1, {});
  stale.stale = true;
  std::string text = format_baseline({a, stale}, 1234);
  EXPECT_EQ(text.substr(0, text.find('\n', text.find('\n') + 1) + 1), "tcp2rdma-stats-baseline 1\nwritten_ms 1234\n");
  std::string problem;
  std::optional<Baseline> read = parse_baseline(text, &problem);
  ASSERT_TRUE(read) << problem;
  EXPECT_EQ(read->written_ms, 1234u);
  ASSERT_EQ(read->processes.size(), 1u);
  EXPECT_EQ(counter_values(read->processes.at({100, 5})), counter_values(a.totals));

  EXPECT_FALSE(parse_baseline("something else\n", &problem));
  EXPECT_EQ(problem, "line 1 is not \"tcp2rdma-stats-baseline 1\"");
  EXPECT_FALSE(parse_baseline("tcp2rdma-stats-baseline 1\nwritten_ms 1\n100 5 1 2 3\n", &problem));
  EXPECT_EQ(problem, "line 3 is not a pid, a start time and 35 counters");
}

TEST(StatsBaseline, TheFileIsTheUsersAlone) {
  char pattern[] = "/tmp/t2r-baseline-XXXXXX";
  ASSERT_NE(mkdtemp(pattern), nullptr);
  std::string dir = pattern;
  setenv("XDG_RUNTIME_DIR", dir.c_str(), 1);
  std::string path = baseline_path();
  EXPECT_EQ(path, dir + "/tcp2rdma-stats.baseline");
  unsetenv("XDG_RUNTIME_DIR");
  EXPECT_EQ(baseline_path(), "/tmp/tcp2rdma-stats.baseline." + std::to_string(getuid()));

  std::string problem;
  EXPECT_FALSE(read_baseline(path, &problem));  // none yet: not a problem
  EXPECT_EQ(problem, "");
  ASSERT_TRUE(write_baseline(path, format_baseline({}, 99), &problem)) << problem;
  struct stat st{};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  std::optional<Baseline> read = read_baseline(path, &problem);
  ASSERT_TRUE(read) << problem;
  EXPECT_EQ(read->written_ms, 99u);

  std::ofstream(path) << "garbage\n";
  EXPECT_FALSE(read_baseline(path, &problem));
  EXPECT_EQ(problem, path + ": line 1 is not \"tcp2rdma-stats-baseline 1\"");
  unlink(path.c_str());
  ASSERT_EQ(symlink("/etc/passwd", path.c_str()), 0);
  EXPECT_FALSE(read_baseline(path, &problem));  // never followed
  EXPECT_NE(problem, "");
  ASSERT_TRUE(write_baseline(path, format_baseline({}, 5), &problem)) << problem;  // replaces the link itself
  EXPECT_TRUE(read_baseline(path, &problem)) << problem;
  std::system(("rm -rf " + dir).c_str());
}

}  // namespace
}  // namespace tcp2rdma::tools::stats_view
