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

#include "link_watch.h"

namespace tcp2rdma::preload {

class TrackedSocket;

namespace epoll_detail {

struct Record;
class EpollReport;

// One upgraded descriptor in one epoll set, as the application registered it.
struct Entry {
  int epfd;
  int fd;
  Record* record;      // the watch of the stream's link in this set, which tells of the stream's news
  const void* stream;  // the stream subscribed to the record's news (compared, never followed)
  uint32_t events;     // the application's
  epoll_data_t data;   // the application's
  bool disabled;       // EPOLLONESHOT fired; waits for EPOLL_CTL_MOD
  size_t slot;         // its place in g_entries while registered
  uint64_t pass = 0;   // the wait's pass that last reported it (epoll_report.h: once a pass)
  bool carried = false;  // on its set's list for the next wait (epoll_carried.cpp)
};

// One link's channels in one epoll set (docs/links.md, "Readiness per link"): what is registered in
// the kernel's set in their place, once, with the record's address as its data. Its news list holds
// the entries whose streams had news since the set last looked. Records are never freed (a waiter
// may come back with a record's event after it went; a lingering stream may still push into its
// list): retired ones are reused.
struct Record {
  int epfd = -1;
  transport::LinkWatch watch;
  size_t entries = 0;  // registered entries told through it
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
// The registered entries of each stream (Entry::stream): a move back to TCP finds its connection's
// registrations without walking every registration of the process (a fork moves every connection).
extern std::unordered_multimap<const void*, Entry*> g_by_stream;
inline uint64_t entry_key(int epfd, int fd) { return uint64_t{static_cast<uint32_t>(epfd)} << 32 | static_cast<uint32_t>(fd); }
// Entries no longer registered, kept for reuse and never freed: an entry's address is its tag in its
// stream's news (link_watch.h), and a stream that lingers after the registration went (a move back
// to TCP, a close) may still push it; epoll_wait must recognise such a tag as no registration of the
// record it came through, which needs the address to stay ours.
std::vector<Entry*>& retired();
extern std::atomic<int> g_count;
extern std::vector<Pending> g_pending;
extern std::atomic<int> g_pending_count;
extern std::vector<Prefixed> g_prefixed;
extern std::atomic<int> g_prefixed_count;

// The record of the link `stream` is on, in set epfd: found, or made and registered in the kernel's
// set (null, errno set, when that fails). Counted as one more entry's.
Record* join_record_locked(int epfd, transport::RdmaStream& stream);
// An entry of r's went: the last one leaves r idle in the kernel's set (epoll_records.cpp), or takes
// it out.
void leave_record_locked(Record* r);
// An event of set epfd came through `data`, an idle record of ours: it leaves the set (true).
bool drop_if_idle_locked(const void* data, int epfd);
// Idle records, in any set: a wait on a set that holds one takes the module's path.
extern std::atomic<int> g_idle_records;
// Whether the process ever made a record (set before its first registration in a kernel set).
extern std::atomic<bool> g_records_made;
// Before a fork: every idle record leaves its set. A child shares the kernel's sets with its parent
// but has a copy of the records: its wait must meet none of them, nor drop one from under the parent.
void drop_idle_records_locked();
// The record at an event's data when it is one of ours registered in set epfd; *ours says whether
// the data is a record of ours at all (registered or retired).
Record* live_record_locked(const void* data, int epfd, bool* ours);
// The set epfd is being closed: its records go (the kernel drops their registrations).
void forget_records_locked(int epfd);
// Entries and idle records registered in set epfd (a wait on a set without any takes the real call
// alone).
size_t registrations_in_set_locked(int epfd);

Entry* find_locked(int epfd, int fd);
// The registered entry at `data` (any set), or null.
Entry* live_locked(const void* data);
// Whether e is still registered (another thread may have deleted it; e is not dereferenced).
bool alive_locked(const Entry* e);
void retire_locked(Entry* e);
void erase_locked(Entry* e);
// A registration's entry, from the retired ones when there are (their addresses stay ours).
Entry* new_entry_locked(const Entry& value);
int fail(int error);
// The application's events for e now, or 0. *moved: e's stream has gone back to TCP (the entry is
// to leave its record for the socket).
uint32_t ready_events(const Entry& e, bool* moved = nullptr);
// After (re)registration: if it is ready already, it is looked at by the set's next wait, carried
// or pushed as a level-triggered report is (epoll_carried.cpp): epoll reports a descriptor that is
// ready when it is added.
void prime(Entry& e);
// Level-triggered entries just reported ready by a wait on epfd are looked at again on the set's
// next wait, as the kernel keeps a ready level-triggered socket on its ready list: carried to it in
// the module's state, or pushed on their records' lists where someone else must see the set readable
// (epoll_carried.cpp). report_carried_locked reports the carried ones that are still ready.
void keep_reported_locked(int epfd, const std::vector<Entry*>& reported);
void report_carried_locked(int epfd, EpollReport& report);
// A thread of ours goes to sleep in the kernel's wait on epfd (+1), or is back (-1).
void note_sleeper_locked(int epfd, int change);

// Who arms a link's completion queue (transport/stream_link.h, count_event_sleeper and make_eager): a wait of
// ours arms the queues of its set's records before it sleeps, so a take by an event loop may leave
// them unarmed. Not where a thread may sleep on a set without that: a set this process did not make
// (inherited), one a poller watches (nested in another set, or given to poll or select), or a wait
// that began while the set held no record of ours (EpollWaiter). A record of such a set makes its
// link eager (armed after every take), and a take is lazy only while no such wait is under way.
bool may_sleep_unarmed(int epfd);
bool takes_lazily();
// Whether a thread of ours sleeps in the kernel's wait on epfd now (note_sleeper_locked).
bool has_sleepers_locked(int epfd);
// A record joined set epfd: made eager (above), or, when threads of ours sleep in the set having
// armed the links of its other records, a wake for them, so that they arm this one's too.
void arm_joined_locked(Record* r, int epfd);
// The links of set epfd's records become eager (epoll_records.cpp).
void make_links_eager_locked(int epfd);
// The set's registered records, or null (idle ones included: Record::entries is 0).
const std::vector<Record*>* records_of_set_locked(int epfd);
// The set epfd is being closed: nothing is carried to it any more.
void forget_carried_locked(int epfd);
void erase_pending_locked(size_t i);
// A registration an upgrade is to move onto its stream (epoll_move_pending).
void note_pending_locked(const Pending& p);
void erase_prefixed_locked(size_t i);
void note_prefixed_locked(int epfd, int fd, const epoll_event& event);
// Every registration of `socket` leaves its stream's record for the socket (epoll_move_back).
void move_back_locked(TrackedSocket* socket);
// e's stream went back to TCP, as epoll_wait found: the socket is the kernel's again (complete_move_back
// without taking our lock twice). False when another thread of this process is moving it (a fork):
// that thread sets the prefix, then moves the registrations itself, which needs our lock.
bool move_back_now_locked(Entry* e);

}  // namespace epoll_detail
}  // namespace tcp2rdma::preload
