// The records of epoll's translation: one per (epoll set, link), registered in the kernel's set in
// place of the link's channels there (epoll_entries.h, Record). Under epoll_detail::g_mutex.
#include <sys/epoll.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <new>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "libc/real_calls.h"
#include "rdma_stream.h"
#include "readiness/epoll_entries.h"

namespace tcp2rdma::preload::epoll_detail {
namespace {

// A record whose last entry went stays registered, idle, for the next entry of its link in the same
// set: an event loop with one connection deletes its registration after each write and adds it again
// for the reply (redis-benchmark -c 1, ae and libevent programs), and a record made and dropped each
// time cost 14 system calls a request. At most kIdlePerSet a set; one that fires goes (nothing of the
// application's is behind it), as does one whose link ended.
constexpr size_t kIdlePerSet = 4;

// Made on first use and never destroyed (a wrapper may run before this file's constructors; records
// stay reachable at exit for LeakSanitizer).
struct Records {
  std::unordered_map<int, std::vector<Record*>> by_set;  // registered ones, by epoll set
  std::unordered_set<const void*> made;                  // every record ever made
  std::vector<Record*> retired;                          // for reuse
  std::unordered_map<int, size_t> entries;               // registered entries by epoll set
  std::unordered_map<int, std::vector<Record*>> idle;    // registered ones without entries, by set
};
Records& records() {
  static auto* r = new Records;
  return *r;
}

// A record to use: a retired one (its address stays ours), else a new one.
Record* new_record_locked() {
  Records& all = records();
  if (!all.retired.empty()) {
    Record* r = all.retired.back();
    all.retired.pop_back();
    return r;
  }
  auto* r = new (std::nothrow) Record;
  if (r == nullptr) return nullptr;
  try {
    all.made.insert(r);
  } catch (const std::bad_alloc&) {
    delete r;
    return nullptr;
  }
  g_records_made.store(true, std::memory_order_release);  // before the kernel's set ever holds one
  return r;
}

void retire_record_locked(Record* r) {
  r->watch.unbind();
  r->epfd = -1;
  r->entries = 0;
  try {
    records().retired.push_back(r);
  } catch (const std::bad_alloc&) {
    // Leaked rather than freed: its address stays ours.
  }
}

// Takes r out of the set's lists, the kernel's set and the idle ones, and retires it.
void drop_locked(Record* r) {
  Records& all = records();
  auto it = all.by_set.find(r->epfd);
  if (it != all.by_set.end()) {
    std::vector<Record*>& mine = it->second;
    for (size_t i = 0; i < mine.size(); ++i) {
      if (mine[i] != r) continue;
      mine[i] = mine.back();
      mine.pop_back();
      break;
    }
    if (mine.empty()) all.by_set.erase(it);
  }
  if (auto idle = all.idle.find(r->epfd); idle != all.idle.end() && std::erase(idle->second, r) > 0) {
    g_idle_records.fetch_sub(1, std::memory_order_release);
  }
  // Our own descriptor: taking it out of the application's set touches nothing of the application's.
  real().epoll_ctl(r->epfd, EPOLL_CTL_DEL, r->watch.fd(), nullptr);
  retire_record_locked(r);
}

// r's last entry went: kept idle (true), once the set's idle records whose link ended are gone.
bool keep_idle_locked(Record* r) {
  if (r->watch.link_gone()) return false;
  std::vector<Record*>& idle = records().idle[r->epfd];
  std::vector<Record*> ended;
  for (Record* other : idle) {
    if (other->watch.link_gone()) ended.push_back(other);
  }
  for (Record* other : ended) drop_locked(other);  // may take the set's list away: looked up again
  std::vector<Record*>& now = records().idle[r->epfd];
  if (now.size() >= kIdlePerSet) return false;
  try {
    now.push_back(r);
  } catch (const std::bad_alloc&) {
    return false;
  }
  g_idle_records.fetch_add(1, std::memory_order_release);
  return true;
}

}  // namespace

std::atomic<int> g_idle_records{0};
std::atomic<bool> g_records_made{false};

Record* join_record_locked(int epfd, transport::RdmaStream& stream) {
  Records& all = records();
  std::vector<Record*>& mine = all.by_set[epfd];
  for (Record* r : mine) {
    if (!r->watch.watches_link_of(stream)) continue;
    // Idle: in use again. The set's idle list stays, empty, until the set goes (no allocation each
    // time an event loop deletes and adds its connection).
    if (auto idle = all.idle.find(epfd); r->entries == 0 && idle != all.idle.end() && std::erase(idle->second, r) > 0) {
      g_idle_records.fetch_sub(1, std::memory_order_release);
    }
    ++r->entries;
    ++all.entries[epfd];
    arm_joined_locked(r, epfd);
    return r;
  }
  Record* r = new_record_locked();
  if (r == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  if (r->watch.bind(stream) != transport::Status::kOk) {
    int error = errno;
    retire_record_locked(r);
    errno = error == EMFILE || error == ENFILE ? ENOMEM : error;  // epoll_ctl says ENOMEM for a lack
    return nullptr;
  }
  // Level-triggered: readable while the link has an event to take or a channel news not looked at.
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = r;
  if (real().epoll_ctl(epfd, EPOLL_CTL_ADD, r->watch.fd(), &ev) != 0) {
    int error = errno;  // a bad epfd, or the kernel's own limits: the application's error
    retire_record_locked(r);
    errno = error;
    return nullptr;
  }
  try {
    mine.push_back(r);
  } catch (const std::bad_alloc&) {
    real().epoll_ctl(epfd, EPOLL_CTL_DEL, r->watch.fd(), nullptr);
    retire_record_locked(r);
    errno = ENOMEM;
    return nullptr;
  }
  r->epfd = epfd;
  r->entries = 1;
  ++all.entries[epfd];
  arm_joined_locked(r, epfd);
  return r;
}

void leave_record_locked(Record* r) {
  Records& all = records();
  if (auto it = all.entries.find(r->epfd); it != all.entries.end() && --it->second == 0) all.entries.erase(it);
  if (--r->entries > 0 || keep_idle_locked(r)) return;
  drop_locked(r);
}

bool drop_if_idle_locked(const void* data, int epfd) {
  if (records().made.count(data) == 0) return false;
  auto* r = static_cast<Record*>(const_cast<void*>(data));
  if (r->epfd != epfd || r->entries != 0) return false;
  drop_locked(r);
  return true;
}

Record* live_record_locked(const void* data, int epfd, bool* ours) {
  *ours = records().made.count(data) != 0;
  if (!*ours) return nullptr;
  auto* r = static_cast<Record*>(const_cast<void*>(data));
  return r->epfd == epfd && r->entries > 0 ? r : nullptr;
}

void forget_records_locked(int epfd) {
  Records& all = records();
  auto it = all.by_set.find(epfd);
  if (it == all.by_set.end()) return;
  std::vector<Record*> going = std::move(it->second);
  all.by_set.erase(it);
  all.entries.erase(epfd);
  if (auto idle = all.idle.find(epfd); idle != all.idle.end()) {
    g_idle_records.fetch_sub(static_cast<int>(idle->second.size()), std::memory_order_release);
    all.idle.erase(idle);
  }
  for (Record* r : going) retire_record_locked(r);
}

void drop_idle_records_locked() {
  if (g_idle_records.load(std::memory_order_acquire) == 0) return;
  std::vector<Record*> idle;
  for (auto& [set, of_set] : records().idle) idle.insert(idle.end(), of_set.begin(), of_set.end());
  for (Record* r : idle) drop_locked(r);
}

const std::vector<Record*>* records_of_set_locked(int epfd) {
  auto it = records().by_set.find(epfd);
  return it == records().by_set.end() ? nullptr : &it->second;
}

void arm_joined_locked(Record* r, int epfd) {
  if (may_sleep_unarmed(epfd)) {
    r->watch.make_eager();
  } else if (has_sleepers_locked(epfd)) {
    r->watch.push(r);  // no entry's tag: the sleepers wake, find nothing, and arm every record
  }
}

void make_links_eager_locked(int epfd) {
  if (const std::vector<Record*>* mine = records_of_set_locked(epfd)) {
    for (Record* r : *mine) r->watch.make_eager();
  }
}

size_t registrations_in_set_locked(int epfd) {
  Records& all = records();
  auto it = all.entries.find(epfd);
  auto idle = all.idle.find(epfd);
  return (it == all.entries.end() ? 0 : it->second) + (idle == all.idle.end() ? 0 : idle->second.size());
}

}  // namespace tcp2rdma::preload::epoll_detail
