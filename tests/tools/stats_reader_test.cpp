// The stats reader against segments made by the writer itself: this test process's own (its
// connections made up through the writer's API), copies of it made stale, and files that are not
// segments. Every test is its own process (gtest_discover_tests), so each starts with a fresh segment.
#include "stats/stats_reader.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../config/test_endpoint.h"
#include "stats/stats_writer.h"

namespace tcp2rdma::stats {
namespace {

// The writer reads TCP2RDMA_STATS_DIR once, on its first call: set before main, and removed after it.
struct SegmentDir {
  SegmentDir() {
    char pattern[] = "/tmp/t2r-stats-reader-XXXXXX";
    path = mkdtemp(pattern) != nullptr ? pattern : "/tmp";
    setenv("TCP2RDMA_STATS_DIR", path.c_str(), 1);
  }
  ~SegmentDir() {
    remove_segment();
    if (path != "/tmp") std::system(("rm -rf " + path).c_str());
  }
  std::string path;
};
const SegmentDir g_dir;

constexpr pid_t kNoSuchPid = 0x7ffffff0;  // above any pid_max (at most 2^22)

using tcp2rdma::config::endpoint;  // tests/config/test_endpoint.h

template <typename Address>
int32_t open_connection(int fd, bool client, const Address& local, const Address& remote, const char* rule, bool rdma) {
  return open_slot({fd, client, reinterpret_cast<const sockaddr*>(&local), reinterpret_cast<const sockaddr*>(&remote),
                    rule, rdma});
}

ProcessView read_self() {
  ProcessView view;
  EXPECT_TRUE(read_process(getpid(), &view));
  return view;
}

std::string own_segment() { return g_dir.path + "/tcp2rdma." + std::to_string(getpid()); }

std::string first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// Field 22 of /proc/self/stat, as a test reads it (the command in parentheses may hold spaces).
uint64_t own_start_time() {
  std::string stat = first_line("/proc/self/stat");
  std::istringstream fields(stat.substr(stat.rfind(')') + 2));
  std::string field;
  for (int i = 3; i <= 22; ++i) fields >> field;
  return std::stoull(field);
}

// A copy of this process's segment under another pid's name, its header saying that pid (and, when
// given, another start time): sparse, as the writer's is, with the header and the slots in use.
std::string copy_segment_as(pid_t pid, const uint64_t* start_time = nullptr) {
  std::string to = g_dir.path + "/tcp2rdma." + std::to_string(pid);
  int in = open(own_segment().c_str(), O_RDONLY);
  int out = open(to.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  EXPECT_GE(in, 0);
  EXPECT_GE(out, 0);
  EXPECT_EQ(ftruncate(out, static_cast<off_t>(segment_size())), 0);
  std::vector<char> used(kHeaderSize + 64 * kSlotSize);
  EXPECT_EQ(pread(in, used.data(), used.size(), 0), static_cast<ssize_t>(used.size()));
  auto* header = reinterpret_cast<Header*>(used.data());
  header->pid = pid;
  if (start_time != nullptr) header->start_time = *start_time;
  EXPECT_EQ(pwrite(out, used.data(), used.size(), 0), static_cast<ssize_t>(used.size()));
  close(in);
  close(out);
  return to;
}

const ConnectionView* find_fd(const ProcessView& view, int fd) {
  for (const ConnectionView& c : view.connections) {
    if (c.fd == fd) return &c;
  }
  return nullptr;
}

TEST(StatsReader, NoSegmentBeforeTheFirstConnection) {
  ProcessView view;
  EXPECT_FALSE(read_process(getpid(), &view));
  std::vector<std::string> skipped;
  EXPECT_TRUE(read_all(g_dir.path, &skipped).empty());
  EXPECT_TRUE(skipped.empty());
}

TEST(StatsReader, SeesExactlyWhatTheWriterWrote) {
  sockaddr_storage local = endpoint("10.77.0.1", 40000), remote = endpoint("10.77.0.2", 5201);
  int32_t up = open_connection(5, true, local, remote, "iperf3-over-rdma", true);
  ASSERT_NE(up, kNoSlot);
  slot_add_tcp(up, 100, 200);
  slot_on_rdma(up, 256, 1024, 12, 3);
  slot_add_rdma(up, 3000, 5000, 4000);
  slot_refresh(up, 512, 1024, 7, 3);
  sockaddr_storage local6 = endpoint("fd77::2", 6379), remote6 = endpoint("fd77::1", 50000);
  int32_t kept = open_connection(6, false, local6, remote6, "", false);
  slot_add_tcp(kept, 7, 9);
  sockaddr_storage mapped = endpoint("::ffff:10.77.0.1", 8080), mapped_peer = endpoint("::ffff:10.77.0.3", 41000);
  open_connection(8, false, mapped, mapped_peer, "lab", true);

  ProcessView view = read_self();
  EXPECT_EQ(view.pid, getpid());
  EXPECT_EQ(view.program, first_line("/proc/self/comm"));
  EXPECT_EQ(view.path, own_segment());
  EXPECT_EQ(view.start_time, own_start_time());
  EXPECT_EQ(view.owner, geteuid());
  EXPECT_FALSE(view.stale);
  ASSERT_EQ(view.connections.size(), 3u);

  const ConnectionView& c = view.connections[0];
  EXPECT_EQ(c.fd, 5);
  EXPECT_TRUE(c.client);
  EXPECT_EQ(c.local, "10.77.0.1:40000");
  EXPECT_EQ(c.remote, "10.77.0.2:5201");
  EXPECT_EQ(c.rule, "iperf3-over-rdma");
  EXPECT_EQ(c.path, SlotPath::kRdma);
  EXPECT_EQ(c.reason, TcpReason::kNone);
  EXPECT_EQ(c.reason_text, "");
  EXPECT_EQ(c.setup_ms, 12u);
  EXPECT_EQ(c.switch_ms, 3u);
  EXPECT_EQ(c.ring_kib, 512u);
  EXPECT_EQ(c.peer_ring_kib, 1024u);
  EXPECT_EQ(c.credit_stalls, 7u);
  EXPECT_EQ(c.wakeups, 3u);
  EXPECT_EQ(c.tcp_bytes_in, 100u);
  EXPECT_EQ(c.tcp_bytes_out, 200u);
  EXPECT_EQ(c.rdma_bytes_in, 3000u);
  EXPECT_EQ(c.rdma_bytes_out, 5000u);
  EXPECT_EQ(c.zcopy_bytes_out, 4000u);
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  uint64_t now_ms = static_cast<uint64_t>(now.tv_sec) * 1000 + static_cast<uint64_t>(now.tv_nsec) / 1000000;
  EXPECT_LE(c.opened_ms, now_ms);
  EXPECT_GT(c.opened_ms + 60000, now_ms);

  const ConnectionView& t = view.connections[1];
  EXPECT_EQ(t.fd, 6);
  EXPECT_FALSE(t.client);
  EXPECT_EQ(t.local, "[fd77::2]:6379");
  EXPECT_EQ(t.remote, "[fd77::1]:50000");
  EXPECT_EQ(t.rule, "");
  EXPECT_EQ(t.path, SlotPath::kTcp);
  EXPECT_EQ(t.reason, TcpReason::kRule);
  EXPECT_EQ(t.reason_text, "the rules say tcp");
  EXPECT_EQ(t.tcp_bytes_in, 7u);
  EXPECT_EQ(t.tcp_bytes_out, 9u);
  EXPECT_EQ(t.rdma_bytes_in + t.rdma_bytes_out + t.ring_kib, 0u);

  const ConnectionView& m = view.connections[2];
  EXPECT_EQ(m.local, "[::ffff:10.77.0.1]:8080");
  EXPECT_EQ(m.remote, "[::ffff:10.77.0.3]:41000");
  EXPECT_EQ(m.path, SlotPath::kSwitching);

  const TotalsView& totals = view.totals;
  EXPECT_EQ(totals.decided_rdma, 2u);
  EXPECT_EQ(totals.decided_tcp, 1u);
  EXPECT_EQ(totals.upgraded, 1u);
  EXPECT_EQ(totals.on_tcp_by_reason[static_cast<size_t>(TcpReason::kRule)], 1u);
  EXPECT_EQ(totals.tcp_bytes_in, 107u);
  EXPECT_EQ(totals.tcp_bytes_out, 209u);
  EXPECT_EQ(totals.rdma_bytes_in, 3000u);
  EXPECT_EQ(totals.rdma_bytes_out, 5000u);
  EXPECT_EQ(totals.zcopy_bytes_out, 4000u);
  for (size_t i = 0; i < std::size(totals.setup_ms_log2); ++i) {
    EXPECT_EQ(totals.setup_ms_log2[i], i == 4 ? 1u : 0u) << "bucket " << i;  // 12 ms: [8, 16)
  }
  EXPECT_EQ(totals.slots_exhausted, 0u);
}

TEST(StatsReader, AClosedSlotIsGoneAndABackOnTcpOneSaysWhy) {
  sockaddr_storage local = endpoint("10.77.0.1", 40000), remote = endpoint("10.77.0.2", 5201);
  int32_t first = open_connection(5, true, local, remote, "lab", true);
  int32_t second = open_connection(6, true, local, remote, "lab", true);
  slot_on_rdma(second, 64, 64, 900, 15);
  slot_on_tcp(second, TcpReason::kFailedOver, "rdma path failed: retry exceeded; 4096 bytes resent");
  close_slot(first);

  ProcessView view = read_self();
  ASSERT_EQ(view.connections.size(), 1u);
  const ConnectionView& c = view.connections[0];
  EXPECT_EQ(c.fd, 6);
  EXPECT_EQ(c.path, SlotPath::kBackOnTcp);
  EXPECT_EQ(c.reason, TcpReason::kFailedOver);
  EXPECT_EQ(c.reason_text, "rdma path failed: retry exceeded; 4096 bytes resent");
  EXPECT_EQ(view.totals.on_tcp_by_reason[static_cast<size_t>(TcpReason::kFailedOver)], 1u);
  EXPECT_EQ(view.totals.setup_ms_log2[10], 1u);  // 900 ms: [512, 1024)

  close_slot(second);
  EXPECT_TRUE(read_self().connections.empty());
  EXPECT_EQ(read_self().totals.decided_rdma, 2u);  // the counts stay
}

TEST(StatsReader, AReasonLongerThanItsFieldIsCut) {
  sockaddr_storage local = endpoint("10.0.0.1", 1), remote = endpoint("10.0.0.2", 2);
  int32_t slot = open_connection(5, true, local, remote, "a-rule-name-longer-than-thirty-two-bytes", true);
  std::string why(300, 'x');
  slot_on_tcp(slot, TcpReason::kNoRdma, why.c_str());
  ProcessView view = read_self();
  ASSERT_EQ(view.connections.size(), 1u);
  EXPECT_EQ(view.connections[0].reason_text, std::string(kReasonSize - 1, 'x'));
  EXPECT_EQ(view.connections[0].rule, std::string("a-rule-name-longer-than-thirty-two-bytes").substr(0, kRuleNameSize - 1));
}

TEST(StatsReader, FilesThatAreNotSegmentsAreSkippedWithAReason) {
  sockaddr_storage local = endpoint("10.0.0.1", 1), remote = endpoint("10.0.0.2", 2);
  open_connection(5, true, local, remote, "", true);
  std::string dir = g_dir.path;
  std::ofstream(dir + "/tcp2rdma.1000001") << "too short";
  int wrong_magic = open((dir + "/tcp2rdma.1000002").c_str(), O_RDWR | O_CREAT, 0600);
  ASSERT_EQ(ftruncate(wrong_magic, static_cast<off_t>(segment_size())), 0);
  ASSERT_EQ(pwrite(wrong_magic, "NOTSTATS", 8, 0), 8);
  close(wrong_magic);
  std::string other = copy_segment_as(1000003);
  ASSERT_EQ(rename(other.c_str(), (dir + "/tcp2rdma.1000004").c_str()), 0);  // its header says 1000003
  mkdir((dir + "/tcp2rdma.1000005").c_str(), 0700);
  std::ofstream(dir + "/unrelated.txt") << "not named as a segment: not looked at";
  std::ofstream(dir + "/tcp2rdma.12x") << "nor this";

  std::vector<std::string> skipped;
  std::vector<ProcessView> views = read_all(dir, &skipped);
  ASSERT_EQ(views.size(), 1u);
  EXPECT_EQ(views[0].pid, getpid());
  std::sort(skipped.begin(), skipped.end());
  EXPECT_EQ(skipped, (std::vector<std::string>{
                         dir + "/tcp2rdma.1000001: not a segment (9 bytes, a segment has 16781312)",
                         dir + "/tcp2rdma.1000002: not a segment (wrong magic)",
                         dir + "/tcp2rdma.1000004: its header names pid 1000003, not the file name's",
                         dir + "/tcp2rdma.1000005: not a regular file",
                     }));
  ProcessView view;
  EXPECT_FALSE(read_process(1000002, &view));
  EXPECT_FALSE(read_process(1000006, &view));  // no file
}

TEST(StatsReader, ASegmentWhoseProcessIsGoneOrWhosePidWasReusedIsStale) {
  sockaddr_storage local = endpoint("10.0.0.1", 1), remote = endpoint("10.0.0.2", 2);
  open_connection(5, true, local, remote, "", true);
  ASSERT_EQ(kill(kNoSuchPid, 0), -1);
  copy_segment_as(kNoSuchPid);
  // The parent (ctest, or a shell) lives, but started at another moment than this header says.
  uint64_t other_start = own_start_time() + 1;
  pid_t parent = getppid();
  copy_segment_as(parent, &other_start);

  std::vector<std::string> skipped;
  std::vector<ProcessView> views = read_all(g_dir.path, &skipped);
  EXPECT_TRUE(skipped.empty()) << skipped.front();
  ASSERT_EQ(views.size(), 3u);
  for (const ProcessView& v : views) {
    EXPECT_EQ(v.stale, v.pid != getpid()) << v.pid;
    EXPECT_EQ(v.connections.size(), 1u) << v.pid;  // a stale segment is still read
  }
  EXPECT_EQ(views.back().pid, kNoSuchPid);  // by pid
  ProcessView gone;
  ASSERT_TRUE(read_process(kNoSuchPid, &gone));
  EXPECT_TRUE(gone.stale);
}

TEST(StatsReader, FormatsAddressesAsTheSocketHasThem) {
  uint8_t addr[16] = {};
  EXPECT_EQ(format_address(AF_INET, addr, 0), "-");  // unknown
  inet_pton(AF_INET, "10.77.0.2", addr);
  EXPECT_EQ(format_address(AF_INET, addr, 5201), "10.77.0.2:5201");
  inet_pton(AF_INET6, "fd77::2", addr);
  EXPECT_EQ(format_address(AF_INET6, addr, 5201), "[fd77::2]:5201");
  inet_pton(AF_INET6, "::ffff:10.77.0.2", addr);
  EXPECT_EQ(format_address(AF_INET6, addr, 5201), "[::ffff:10.77.0.2]:5201");
  EXPECT_EQ(format_address(0, addr, 5201), "-");
}

TEST(StatsReader, NamesEveryPathAndReason) {
  EXPECT_STREQ(to_string(SlotPath::kTcp), "tcp");
  EXPECT_STREQ(to_string(SlotPath::kSwitching), "switching");
  EXPECT_STREQ(to_string(SlotPath::kRdma), "rdma");
  EXPECT_STREQ(to_string(SlotPath::kBackOnTcp), "back-on-tcp");
  std::vector<std::string> names;
  for (uint32_t i = 0; i < static_cast<uint32_t>(TcpReason::kCount); ++i) names.push_back(to_string(static_cast<TcpReason>(i)));
  EXPECT_EQ(names, (std::vector<std::string>{"none", "rule", "peer-declined", "no-rdma", "resources", "switch-failed",
                                             "moved-back", "failed-over", "closed-early", "other"}));
}

// A thread rewrites one slot's identity fields as fast as it can, with two reasons whose texts differ
// in every byte and in length; the reader never sees a text that is neither, nor one beside the other's
// category. The writer rests a moment after each burst of 1001 rewrites (odd: the text left at rest
// alternates): a reader slower than one rewrite (a sanitizer's build) would otherwise never find the
// slot still, and skip it every time.
TEST(StatsReader, AReaderNeverSeesAHalfWrittenSlot) {
  sockaddr_storage local = endpoint("10.0.0.1", 1), remote = endpoint("10.0.0.2", 2);
  int32_t slot = open_connection(5, true, local, remote, "", true);
  const std::string a(kReasonSize - 1, 'a');
  const std::string b = "b: short";
  slot_on_tcp(slot, TcpReason::kNoRdma, a.c_str());
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> writes{0};
  std::thread writer([&] {
    for (uint64_t n = 0; !stop.load(std::memory_order_relaxed); ++n) {
      bool even = n % 2 == 0;
      slot_on_tcp(slot, even ? TcpReason::kResources : TcpReason::kNoRdma, even ? b.c_str() : a.c_str());
      writes.fetch_add(1, std::memory_order_relaxed);
      if (n % 1001 == 1000) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  });
  int seen_a = 0, seen_b = 0, missed = 0, wrong = 0;
  for (int i = 0; i < 10000; ++i) {
    ProcessView view;
    ASSERT_TRUE(read_process(getpid(), &view));
    const ConnectionView* c = find_fd(view, 5);
    if (c == nullptr) {
      ++missed;  // no consistent copy within the reader's attempts: left out, never shown mixed
      continue;
    }
    if (c->reason == TcpReason::kNoRdma && c->reason_text == a) {
      ++seen_a;
    } else if (c->reason == TcpReason::kResources && c->reason_text == b) {
      ++seen_b;
    } else {
      ++wrong;
      ADD_FAILURE() << "mixed copy: " << to_string(c->reason) << " '" << c->reason_text << "'";
      if (wrong > 5) break;
    }
  }
  stop = true;
  writer.join();
  EXPECT_EQ(wrong, 0);
  // Left out only when the writer changed the slot during every attempt.
  EXPECT_GT(seen_a + seen_b, 1000) << "missed " << missed << ", writes " << writes.load();
  EXPECT_GT(seen_a, 0);
  EXPECT_GT(seen_b, 0);
  std::printf("seen a %d, b %d, missed %d, writes meanwhile %llu\n", seen_a, seen_b, missed,
              static_cast<unsigned long long>(writes.load()));
}

}  // namespace
}  // namespace tcp2rdma::stats
