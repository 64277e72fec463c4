// The epoll bookkeeping shared by readiness/epoll_sets.cpp (registrations) and readiness/epoll_wait.cpp
// (the translation of a wait): internal to readiness/.
#pragma once

#include <sys/epoll.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace tcp2rdma::preload {

class TrackedSocket;

namespace epoll_detail {

// One upgraded descriptor in one epoll set, as the application registered it.
struct Entry {
  int epfd;
  int fd;
  int readiness_fd;  // what is registered in the kernel's set instead of the socket
  uint32_t events;   // the application's
  epoll_data_t data; // the application's
  bool disabled;     // EPOLLONESHOT fired; waits for EPOLL_CTL_MOD
  size_t slot;       // its place in g_entries while registered
};

// A registration of a socket whose upgrade is pending: the kernel set watches the socket itself
// until the upgrade moves it (a non-blocking connect added to epoll before it completed).
struct Pending {
  int epfd;
  int fd;
  epoll_event event;  // the application's
};

// A registration of a socket back on TCP with a prefix to read first (move_back.h): the kernel set
// watches the socket, and epoll_wait reports the prefix itself.
struct Prefixed {
  int epfd;
  int fd;
  epoll_event event;  // the application's
};


// The bookkeeping, under g_mutex. The counts let a set without any of them skip the lock entirely.
extern std::mutex g_mutex;
extern std::vector<Entry*> g_entries;
// The registered entries by (set, descriptor), and every entry ever made (registered or retired):
// lookups without walking g_entries, which holds every registration of the process (thousands for an
// event loop with thousands of connections).
extern std::unordered_map<uint64_t, Entry*> g_by_key;
extern std::unordered_set<const void*> g_made;
extern std::unordered_multimap<int, Entry*> g_by_fd;  // the registered entries of each descriptor
inline uint64_t entry_key(int epfd, int fd) { return uint64_t{static_cast<uint32_t>(epfd)} << 32 | static_cast<uint32_t>(fd); }
// Entries no longer registered, kept for reuse and never freed: a thread that was inside the real
// epoll_wait when another thread erased an entry (a move back to TCP at fork, a close) may return
// with that entry's readiness fd event, whose data is the entry's address. Such an event must be
// recognised as ours and dropped, never handed to the application as one of its own registrations
// (seen: a sleeper in epoll_wait got the old entry's address as its data after a fork).
std::vector<Entry*>& retired();
extern std::atomic<int> g_count;
extern std::vector<Pending> g_pending;
extern std::atomic<int> g_pending_count;
extern std::vector<Prefixed> g_prefixed;
extern std::atomic<int> g_prefixed_count;

Entry* find_locked(int epfd, int fd);
// The registered entry at `data` (any set), or null.
Entry* live_locked(const void* data);
// Whether e is still registered (another thread may have deleted it; e is not dereferenced).
bool alive_locked(const Entry* e);
void retire_locked(Entry* e);
void erase_locked(Entry* e);
// A registration's entry, from the retired ones when there are (their addresses stay ours).
Entry* new_entry_locked(const Entry& value);
// Whether an event's data is the address of one of our entries, registered or retired (in any set).
bool ours_locked(const void* data);
int fail(int error);
// What the readiness fd is registered with: it only says "look again"; edge-triggering is kept so
// that an edge-triggered application is woken per change, not continuously.
epoll_event proxy_event(Entry* e);
// The application's events for e now, or 0. *moved: e's stream has gone back to TCP (the entry is
// to leave the readiness fd for the socket).
uint32_t ready_events(const Entry& e, bool* moved = nullptr);
// After (re)registration: arm the stream so its fd fires on the next change, and if it is ready
// already, make it fire now: epoll reports a descriptor that is ready when it is added.
void prime(const Entry& e);
// A level-triggered entry was just reported ready: keep its readiness fd readable until the stream is
// looked at again. The application's own epoll_wait would report it anyway, but a set that is itself
// watched (epoll inside epoll, or poll on the epoll fd) is readable only while a registered fd is: the
// kernel must see the still-ready stream too, as it sees a socket with unread bytes.
void keep_signalled(const Entry& e);
void erase_pending_locked(size_t i);
void erase_prefixed_locked(size_t i);
void note_prefixed_locked(int epfd, int fd, const epoll_event& event);
// Every registration of `socket` leaves its readiness fd for the socket (epoll_move_back).
void move_back_locked(TrackedSocket* socket);
// e's stream went back to TCP, as epoll_wait found: the socket is the kernel's again (complete_move_back
// without taking our lock twice). False when another thread of this process is moving it (a fork):
// that thread sets the prefix, then moves the registrations itself, which needs our lock.
bool move_back_now_locked(Entry* e);

}  // namespace epoll_detail
}  // namespace tcp2rdma::preload
