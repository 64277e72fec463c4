// The client's links by server address (link_table.h).
#include "link_table.h"

#include <unistd.h>

#include <cstring>
#include <mutex>
#include <vector>

#include "stream_link.h"

namespace tcp2rdma::transport {
namespace {

struct Entry {
  sockaddr_storage address;
  std::weak_ptr<StreamLink> link;
};

struct Table {
  std::mutex mu;
  pid_t owner = 0;  // the process the links belong to
  std::vector<Entry> entries;
};

Table& table() {
  static Table* t = new Table;  // never destroyed: streams may outlive static destructors at exit
  return *t;
}

size_t address_length(const sockaddr* a) {
  return a->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}

// With the table's lock held: forgets a parent's links in a forked child, and links that are gone.
void tidy(Table& t) {
  pid_t me = getpid();
  if (t.owner != me) {
    t.entries.clear();  // weak references: nothing of the parent's is touched
    t.owner = me;
  }
  std::erase_if(t.entries, [](const Entry& e) { return e.link.expired(); });
}

}  // namespace

std::shared_ptr<StreamLink> find_link(const sockaddr* address, int receives) {
  Table& t = table();
  std::lock_guard lock(t.mu);
  tidy(t);
  for (Entry& e : t.entries) {
    if (std::memcmp(&e.address, address, address_length(address)) != 0) continue;
    std::shared_ptr<StreamLink> link = e.link.lock();
    if (link == nullptr) continue;
    std::lock_guard link_lock(link->mu());
    if (!link->stopped() && !link->disconnected() && link->has_setup_areas() && link->has_room_for(receives) &&
        link->attached() > 0) {
      return link;
    }
  }
  return nullptr;
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

}  // namespace tcp2rdma::transport
