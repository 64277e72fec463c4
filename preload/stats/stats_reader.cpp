// Reading stats segments (stats_reader.h). The writer never waits for a reader and a reader never
// writes: each file is mapped read-only, its header checked field by field, and each slot copied under
// its seqlock (stats_segment.h), so a slot rewritten meanwhile is copied again rather than shown mixed.
#include "stats/stats_reader.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>

#include "stats/stats_writer.h"

namespace tcp2rdma::stats {
namespace {

// A slot whose writer holds it odd this long was most likely left so by a process killed mid-write.
constexpr int kCopyAttempts = 100;
constexpr char kFilePrefix[] = "tcp2rdma.";

// Atomics that need a lock would write to it, and this mapping cannot be written.
static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free);

// Orders the copy's loads before the second read of seq. ThreadSanitizer builds reject fences (and the
// writer is another process it cannot see anyway): they keep only the compiler barrier.
inline void copy_fence() {
#if defined(__SANITIZE_THREAD__)
  std::atomic_signal_fence(std::memory_order_acquire);
#else
  std::atomic_thread_fence(std::memory_order_acquire);
#endif
}

// The identity fields a seq guards lie between `reason` and `ring_kib`; they are copied as whole
// aligned words, not field by field: the shorter the copy, the likelier it falls between two changes
// of a slot that its writer keeps rewriting. Volatile: each word is loaded once, where the code says,
// and none is moved past copy_fence(); what they hold is trusted only once seq agrees.
constexpr size_t kIdentityBegin = offsetof(Slot, fd) / 8 * 8;
constexpr size_t kIdentityEnd = (offsetof(Slot, switch_ms) + sizeof(uint32_t) + 7) / 8 * 8;
constexpr size_t kIdentityWords = (kIdentityEnd - kIdentityBegin) / 8;
static_assert(kIdentityEnd <= offsetof(Slot, ring_kib) && alignof(Slot) % 8 == 0);

struct Identity {
  uint64_t words[kIdentityWords];
  template <typename T>
  void get(size_t offset, T* field) const {
    std::memcpy(field, reinterpret_cast<const char*>(words) + offset - kIdentityBegin, sizeof *field);
  }
  template <typename T>
  T get(size_t offset) const {
    T value;
    get(offset, &value);
    return value;
  }
};

void copy_identity(const Slot& s, Identity* to) {
  const char* at = reinterpret_cast<const char*>(&s) + kIdentityBegin;
  const volatile auto* in = reinterpret_cast<const volatile uint64_t*>(at);
  for (size_t i = 0; i < kIdentityWords; ++i) to->words[i] = in[i];
}

// A slot as copied between two equal reads of its seq; `counts` holds its rings and byte counts.
struct SlotCopy {
  uint32_t path, reason;
  Identity identity;
  ConnectionView counts;
};

// False when the slot is free, or no consistent copy came within kCopyAttempts. The counters are read
// inside the window too: open_slot zeroes them under seq, so they belong to the connection copied.
bool copy_slot(const Slot& s, SlotCopy* c) {
  for (int attempt = 0; attempt < kCopyAttempts; ++attempt) {
    if (attempt > 0) sched_yield();  // let the writer finish (it may be on this very core)
    uint32_t before = s.seq.load(std::memory_order_acquire);
    if (before & 1) continue;
    c->path = s.path.load(std::memory_order_relaxed);
    if (c->path == static_cast<uint32_t>(SlotPath::kFree)) {
      if (s.seq.load(std::memory_order_acquire) == before) return false;
      continue;
    }
    c->reason = s.reason.load(std::memory_order_relaxed);
    copy_identity(s, &c->identity);
    c->counts.ring_kib = s.ring_kib.load(std::memory_order_relaxed);
    c->counts.peer_ring_kib = s.peer_ring_kib.load(std::memory_order_relaxed);
    c->counts.tcp_bytes_in = s.tcp_bytes_in.load(std::memory_order_relaxed);
    c->counts.tcp_bytes_out = s.tcp_bytes_out.load(std::memory_order_relaxed);
    c->counts.rdma_bytes_in = s.rdma_bytes_in.load(std::memory_order_relaxed);
    c->counts.rdma_bytes_out = s.rdma_bytes_out.load(std::memory_order_relaxed);
    c->counts.zcopy_bytes_out = s.zcopy_bytes_out.load(std::memory_order_relaxed);
    c->counts.credit_stalls = s.credit_stalls.load(std::memory_order_relaxed);
    c->counts.wakeups = s.wakeups.load(std::memory_order_relaxed);
    copy_fence();
    if (s.seq.load(std::memory_order_relaxed) == before) return true;
  }
  return false;
}

// A fixed-size text field as a string: up to its first NUL, never past its end.
std::string text_of(const char* field, size_t size) { return std::string(field, strnlen(field, size)); }

ConnectionView view_of(int32_t index, const SlotCopy& c) {
  const Identity& id = c.identity;  // each field out of the copied words by its offset in Slot
  uint8_t local_addr[16], remote_addr[16];
  char rule[kRuleNameSize], reason_text[kReasonSize];
  id.get(offsetof(Slot, local_addr), &local_addr);
  id.get(offsetof(Slot, remote_addr), &remote_addr);
  id.get(offsetof(Slot, rule), &rule);
  id.get(offsetof(Slot, reason_text), &reason_text);
  auto family = id.get<uint8_t>(offsetof(Slot, family));
  ConnectionView v = c.counts;
  v.slot = index;
  v.fd = id.get<int32_t>(offsetof(Slot, fd));
  v.client = id.get<uint8_t>(offsetof(Slot, role)) != 2;
  v.local = format_address(family, local_addr, id.get<uint16_t>(offsetof(Slot, local_port)));
  v.remote = format_address(family, remote_addr, id.get<uint16_t>(offsetof(Slot, remote_port)));
  v.rule = text_of(rule, sizeof rule);
  v.path = static_cast<SlotPath>(c.path);
  v.reason = c.reason < static_cast<uint32_t>(TcpReason::kCount) ? static_cast<TcpReason>(c.reason) : TcpReason::kOther;
  v.reason_text = text_of(reason_text, sizeof reason_text);
  v.opened_ms = id.get<uint64_t>(offsetof(Slot, opened_ms));
  v.setup_ms = id.get<uint32_t>(offsetof(Slot, setup_ms));
  v.switch_ms = id.get<uint32_t>(offsetof(Slot, switch_ms));
  return v;
}

TotalsView totals_of(const Totals& t) {
  auto get = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  TotalsView v;
  v.decided_rdma = get(t.decided_rdma);
  v.decided_tcp = get(t.decided_tcp);
  v.upgraded = get(t.upgraded);
  for (size_t i = 0; i < std::size(v.on_tcp_by_reason); ++i) v.on_tcp_by_reason[i] = get(t.on_tcp_by_reason[i]);
  v.tcp_bytes_in = get(t.tcp_bytes_in);
  v.tcp_bytes_out = get(t.tcp_bytes_out);
  v.rdma_bytes_in = get(t.rdma_bytes_in);
  v.rdma_bytes_out = get(t.rdma_bytes_out);
  v.zcopy_bytes_out = get(t.zcopy_bytes_out);
  for (size_t i = 0; i < std::size(v.setup_ms_log2); ++i) v.setup_ms_log2[i] = get(t.setup_ms_log2[i]);
  v.slots_exhausted = get(t.slots_exhausted);
  v.descriptors_at_top = get(t.descriptors_at_top);
  return v;
}

// "tcp2rdma.<pid>" -> pid; 0 for any other name (a pid is positive).
pid_t pid_of_name(const char* name) {
  size_t prefix = sizeof kFilePrefix - 1;
  if (std::strncmp(name, kFilePrefix, prefix) != 0) return 0;
  const char* digits = name + prefix;
  if (*digits < '1' || *digits > '9' || std::strlen(digits) > 10) return 0;
  char* end = nullptr;
  long long pid = std::strtoll(digits, &end, 10);
  return *end == '\0' && pid <= INT32_MAX ? static_cast<pid_t>(pid) : 0;
}

enum class StartTime { kRead, kNoProcess, kUnknown };

// Field 22 of /proc/<pid>/stat, starttime. Field 2 is the command in parentheses, which may itself
// hold spaces and ')': the fields are counted from the last ')'. A zombie (field 3, state Z or X) has
// exited: it will never write nor remove its segment (one that exits normally removes it first).
StartTime read_start_time(pid_t pid, uint64_t* start) {
  std::string path = "/proc/" + std::to_string(pid) + "/stat";
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    // Without /proc at all, nothing can be said; with it, a missing entry is a process gone.
    return errno == ENOENT && ::access("/proc/self/stat", R_OK) == 0 ? StartTime::kNoProcess : StartTime::kUnknown;
  }
  char text[1024];
  ssize_t n = ::read(fd, text, sizeof text - 1);
  ::close(fd);
  if (n <= 0) return StartTime::kUnknown;
  text[n] = '\0';
  const char* p = std::strrchr(text, ')');
  if (p != nullptr && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X')) return StartTime::kNoProcess;
  for (int field = 2; field < 22 && p != nullptr; ++field) p = std::strchr(p + 1, ' ');
  if (p == nullptr) return StartTime::kUnknown;
  *start = std::strtoull(p + 1, nullptr, 10);
  return StartTime::kRead;
}

// The process that made the segment is gone: no process has its pid, or the one that has it now
// started at another moment (the pid was reused). A start time of 0 is a writer that could not read
// its own, and is not compared.
bool process_gone(pid_t pid, uint64_t start_time) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;  // EPERM: it exists, as another user
  uint64_t now = 0;
  StartTime found = read_start_time(pid, &now);
  if (found == StartTime::kNoProcess) return true;
  return found == StartTime::kRead && start_time != 0 && now != start_time;
}

// The descriptor and the mapping of one file, released on every way out of read_segment.
struct Mapped {
  int fd = -1;
  void* at = MAP_FAILED;
  size_t size = 0;
  ~Mapped() {
    if (at != MAP_FAILED) ::munmap(at, size);
    if (fd >= 0) ::close(fd);
  }
};

enum class Outcome { kRead, kAbsent, kSkipped };

// `path` named tcp2rdma.<pid>. kAbsent: no such file; kSkipped: *why says what is wrong with it.
Outcome read_segment(const std::string& path, pid_t pid, ProcessView* out, std::string* why) {
  Mapped m;
  // O_NONBLOCK: a FIFO planted under this name must not hang us; O_NOFOLLOW: nor a link lead us away.
  m.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (m.fd < 0) {
    if (errno == ENOENT) return Outcome::kAbsent;
    *why = std::strerror(errno);
    return Outcome::kSkipped;
  }
  struct stat st{};
  if (::fstat(m.fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    *why = "not a regular file";
    return Outcome::kSkipped;
  }
  if (static_cast<uint64_t>(st.st_size) < segment_size()) {
    *why = "not a segment (" + std::to_string(st.st_size) + " bytes, a segment has " +
           std::to_string(segment_size()) + ")";
    return Outcome::kSkipped;
  }
  m.size = segment_size();
  m.at = ::mmap(nullptr, m.size, PROT_READ, MAP_SHARED, m.fd, 0);
  if (m.at == MAP_FAILED) {
    *why = std::string("cannot map it: ") + std::strerror(errno);
    return Outcome::kSkipped;
  }
  const auto* h = static_cast<const Header*>(m.at);
  static_assert(sizeof kMagic == sizeof(uint64_t));
  uint64_t magic = *reinterpret_cast<const volatile uint64_t*>(h->magic);
  copy_fence();  // the writer writes the magic last: the fields below were written before it
  if (std::memcmp(&magic, kMagic, sizeof kMagic) != 0) {
    *why = magic == 0 ? "not a segment yet (no magic: being made, or its process died making it)"
                      : "not a segment (wrong magic)";
    return Outcome::kSkipped;
  }
  if (h->version != kVersion || h->header_size != kHeaderSize || h->slot_size != kSlotSize ||
      h->slot_count != kSlotCount) {
    *why = "segment version " + std::to_string(h->version) + " or sizes not this reader's (version " +
           std::to_string(kVersion) + ")";
    return Outcome::kSkipped;
  }
  if (h->pid != pid) {
    *why = "its header names pid " + std::to_string(h->pid) + ", not the file name's";
    return Outcome::kSkipped;
  }
  out->pid = pid;
  out->program = text_of(h->program, sizeof h->program);
  out->path = path;
  out->start_time = h->start_time;
  out->owner = st.st_uid;
  out->stale = process_gone(pid, h->start_time);
  out->totals = totals_of(h->totals);
  out->connections.clear();
  uint32_t high = std::min(h->slots_high.load(std::memory_order_acquire), kSlotCount);
  const auto* slots = reinterpret_cast<const Slot*>(static_cast<const char*>(m.at) + kHeaderSize);
  SlotCopy copy;
  for (uint32_t i = 0; i < high; ++i) {
    if (!copy_slot(slots[i], &copy) || copy.path > static_cast<uint32_t>(SlotPath::kBackOnTcp)) continue;
    out->connections.push_back(view_of(static_cast<int32_t>(i), copy));
  }
  return Outcome::kRead;
}

std::string directory_or_default(const std::string& dir) { return dir.empty() ? segment_directory() : dir; }

}  // namespace

std::vector<ProcessView> read_all(const std::string& dir, std::vector<std::string>* skipped) {
  std::string where = directory_or_default(dir);
  std::vector<ProcessView> views;
  DIR* d = ::opendir(where.c_str());
  if (d == nullptr) {
    if (skipped != nullptr && errno != ENOENT) skipped->push_back(where + ": " + std::strerror(errno));
    return views;
  }
  while (const dirent* entry = ::readdir(d)) {
    pid_t pid = pid_of_name(entry->d_name);
    if (pid <= 0) continue;  // not a segment's name: not ours to judge
    std::string path = where + "/" + entry->d_name;
    ProcessView view;
    std::string why;
    Outcome outcome = read_segment(path, pid, &view, &why);
    if (outcome == Outcome::kRead) views.push_back(std::move(view));
    if (outcome == Outcome::kSkipped && skipped != nullptr) skipped->push_back(path + ": " + why);
  }
  ::closedir(d);
  std::sort(views.begin(), views.end(), [](const ProcessView& a, const ProcessView& b) { return a.pid < b.pid; });
  return views;
}

bool read_process(pid_t pid, ProcessView* out, const std::string& dir) {
  if (pid <= 0) return false;
  std::string why;
  std::string path = directory_or_default(dir) + "/" + kFilePrefix + std::to_string(pid);
  return read_segment(path, pid, out, &why) == Outcome::kRead;
}

std::string format_address(uint8_t family, const uint8_t* addr, uint16_t port) {
  bool blank = port == 0 && std::all_of(addr, addr + 16, [](uint8_t b) { return b == 0; });
  if (blank || (family != AF_INET && family != AF_INET6)) return "-";  // the writer did not know it
  // inet_ntop writes an IPv4-mapped address as ::ffff:a.b.c.d, which is how the socket has it.
  char text[INET6_ADDRSTRLEN] = "";
  ::inet_ntop(family, addr, text, sizeof text);
  std::string port_text = ":" + std::to_string(port);
  return family == AF_INET ? text + port_text : "[" + std::string(text) + "]" + port_text;
}

const char* to_string(SlotPath path) {
  switch (path) {
    case SlotPath::kFree: return "free";
    case SlotPath::kTcp: return "tcp";
    case SlotPath::kSwitching: return "switching";
    case SlotPath::kRdma: return "rdma";
    case SlotPath::kBackOnTcp: return "back-on-tcp";
  }
  return "unknown";
}

const char* to_string(TcpReason reason) {
  switch (reason) {
    case TcpReason::kNone: return "none";
    case TcpReason::kRule: return "rule";
    case TcpReason::kPeerDeclined: return "peer-declined";
    case TcpReason::kNoRdma: return "no-rdma";
    case TcpReason::kResources: return "resources";
    case TcpReason::kSwitchFailed: return "switch-failed";
    case TcpReason::kMovedBack: return "moved-back";
    case TcpReason::kFailedOver: return "failed-over";
    case TcpReason::kClosedEarly: return "closed-early";
    case TcpReason::kOther: return "other";
    case TcpReason::kCount: break;
  }
  return "other";
}

}  // namespace tcp2rdma::stats
