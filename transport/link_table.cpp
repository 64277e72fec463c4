// The client's links by server address (link_table.h).
#include "link_table.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <vector>

#include "credential_epoch.h"
#include "stream_link.h"

namespace tcp2rdma::transport {
namespace {

struct Entry {
  sockaddr_storage address;
  std::shared_ptr<StreamLink> link;
  std::chrono::steady_clock::time_point idle_since{};  // when it was last seen without channels
};

// A link without channels is kept this long for the next stream to the same server (a burst of
// short connections then costs one queue pair), then let go: its queue pair disconnected.
constexpr auto kIdleLinger = std::chrono::seconds(2);

struct Table {
  std::mutex mu;
  std::condition_variable made;  // a making ended
  Epoch owner;  // the process, and its credentials, the links were made under
  std::vector<Entry> entries;
  std::vector<sockaddr_storage> making;  // addresses a thread is making a link to
};

Table& table() {
  static Table* t = new Table;  // never destroyed: streams may outlive static destructors at exit
  return *t;
}

size_t address_length(const sockaddr* a) {
  return a->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}

// With the table's lock held: forgets a parent's links in a forked child (leaked, never destroyed:
// the verbs resources are the parent's) and the links of older credentials (credential_epoch.h: they
// go with their last channel), and lets go of links that failed or stayed idle too long.
void tidy(Table& t) {
  Epoch now_epoch = current_epoch();
  std::vector<std::shared_ptr<StreamLink>> going;
  if (t.owner != now_epoch) {
    if (t.owner.pid != now_epoch.pid) {
      if (!t.entries.empty()) new std::vector<Entry>(std::move(t.entries));  // never freed: the parent's
      t.making.clear();  // the parent's threads, not in this process
    } else {
      for (Entry& e : t.entries) going.push_back(std::move(e.link));
    }
    t.entries.clear();
    t.owner = now_epoch;
  }
  auto now = std::chrono::steady_clock::now();
  std::erase_if(t.entries, [&](Entry& e) {
    std::unique_lock link_lock(e.link->mu());
    bool dead = e.link->stopped() || e.link->disconnected();
    if (e.link->attached() > 0 || e.link.use_count() > 1) {
      e.idle_since = {};
    } else if (e.idle_since == std::chrono::steady_clock::time_point{}) {
      e.idle_since = now;
    }
    bool expired = e.idle_since != std::chrono::steady_clock::time_point{} && now - e.idle_since > kIdleLinger;
    if (!dead && !expired) return false;
    link_lock.unlock();
    going.push_back(std::move(e.link));
    return true;
  });
  // Destroyed here, after the link locks and before the table's (their destructors take no lock).
}

bool same_address(const sockaddr_storage& a, const sockaddr* b) {
  return std::memcmp(&a, b, address_length(b)) == 0;
}

bool is_making(const Table& t, const sockaddr* address) {
  return std::any_of(t.making.begin(), t.making.end(), [&](const sockaddr_storage& a) { return same_address(a, address); });
}

std::shared_ptr<StreamLink> live_link(Table& t, const sockaddr* address, int depth) {
  for (Entry& e : t.entries) {
    if (!same_address(e.address, address)) continue;
    std::lock_guard link_lock(e.link->mu());
    if (!e.link->stopped() && !e.link->disconnected() && e.link->setup().has_areas() &&
        e.link->has_room_for(e.link->channel_depth(depth) + 1)) {
      // In use again: its idle time starts anew when its channels are gone. Without this, a link
      // seen idle once kept that moment through the use that followed (tidy runs only at lookups),
      // and went at the next lookup after a use longer than kIdleLinger: every other connection of
      // a process that makes one at a time paid for a queue pair by rdma_cm.
      e.idle_since = {};
      return e.link;
    }
  }
  return nullptr;
}

}  // namespace

std::shared_ptr<StreamLink> find_link(const sockaddr* address, int depth, std::chrono::milliseconds wait,
                                      bool* making) {
  Table& t = table();
  std::unique_lock lock(t.mu);
  tidy(t);
  *making = false;
  if (std::shared_ptr<StreamLink> link = live_link(t, address, depth)) return link;
  if (is_making(t, address)) {
    // Once: if that making fails, each caller tries its own (a server that refuses one refuses all
    // quickly; one that is slow to answer must not make the callers queue behind each other).
    t.made.wait_for(lock, wait, [&] { return !is_making(t, address); });
    tidy(t);
    if (std::shared_ptr<StreamLink> link = live_link(t, address, depth)) return link;
    if (is_making(t, address)) return nullptr;
  }
  sockaddr_storage a{};
  std::memcpy(&a, address, address_length(address));
  t.making.push_back(a);
  *making = true;
  return nullptr;
}

bool linked_to(const sockaddr* address) {
  Table& t = table();
  std::lock_guard lock(t.mu);
  if (t.owner != current_epoch()) return false;  // a forked child's parent's links, or older credentials'
  for (Entry& e : t.entries) {
    if (!same_address(e.address, address)) continue;
    std::lock_guard link_lock(e.link->mu());
    if (!e.link->stopped() && !e.link->disconnected() && e.link->setup().has_areas()) return true;
  }
  return false;
}

int crowded_to(const sockaddr* address, int depth) {
  Table& t = table();
  std::lock_guard lock(t.mu);
  if (t.owner != current_epoch()) return 0;
  int largest = 0;
  for (Entry& e : t.entries) {
    if (!same_address(e.address, address)) continue;
    std::lock_guard link_lock(e.link->mu());
    if (e.link->live_but_full(depth)) largest = std::max(largest, e.link->receive_capacity());
  }
  return largest;
}

void remember_link(const sockaddr* address, const std::shared_ptr<StreamLink>& link) {
  Table& t = table();
  std::lock_guard lock(t.mu);
  tidy(t);
  Entry e{};
  std::memcpy(&e.address, address, address_length(address));
  e.link = link;
  t.entries.push_back(e);
}

void let_go_of_idle_links() {
  Table& t = table();
  std::vector<std::shared_ptr<StreamLink>> going;
  std::lock_guard lock(t.mu);
  if (t.owner != current_epoch()) return;  // tidy's to forget
  std::erase_if(t.entries, [&](Entry& e) {
    std::unique_lock link_lock(e.link->mu());
    if (e.link->attached() > 0 || e.link.use_count() > 1) return false;
    link_lock.unlock();
    going.push_back(std::move(e.link));
    return true;
  });
  // Destroyed as this returns, after the table's lock (their destructors take no lock).
}

void link_made(const sockaddr* address) {
  Table& t = table();
  std::lock_guard lock(t.mu);
  std::erase_if(t.making, [&](const sockaddr_storage& a) { return same_address(a, address); });
  t.made.notify_all();
}

}  // namespace tcp2rdma::transport
