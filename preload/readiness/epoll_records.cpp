// The records of epoll's translation: one per (epoll set, link), registered in the kernel's set in
// place of the link's channels there (epoll_entries.h, Record). Under epoll_detail::g_mutex.
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

// Made on first use and never destroyed (a wrapper may run before this file's constructors; records
// stay reachable at exit for LeakSanitizer).
struct Records {
  std::unordered_map<int, std::vector<Record*>> by_set;  // registered ones, by epoll set
  std::unordered_set<const void*> made;                  // every record ever made
  std::vector<Record*> retired;                          // for reuse
  std::unordered_map<int, size_t> entries;               // registered entries by epoll set
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

}  // namespace

Record* join_record_locked(int epfd, transport::RdmaStream& stream) {
  Records& all = records();
  std::vector<Record*>& mine = all.by_set[epfd];
  for (Record* r : mine) {
    if (!r->watch.watches_link_of(stream)) continue;
    ++r->entries;
    ++all.entries[epfd];
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
  return r;
}

void leave_record_locked(Record* r) {
  Records& all = records();
  if (auto it = all.entries.find(r->epfd); it != all.entries.end() && --it->second == 0) all.entries.erase(it);
  if (--r->entries > 0) return;
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
  // Our own descriptor: taking it out of the application's set touches nothing of the application's.
  real().epoll_ctl(r->epfd, EPOLL_CTL_DEL, r->watch.fd(), nullptr);
  retire_record_locked(r);
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
  for (Record* r : going) retire_record_locked(r);
}

size_t entries_in_set_locked(int epfd) {
  auto it = records().entries.find(epfd);
  return it == records().entries.end() ? 0 : it->second;
}

}  // namespace tcp2rdma::preload::epoll_detail
