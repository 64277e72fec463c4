// Which channels have news for one poller: a list of tags (what the poller registered each channel
// under), and an eventfd that is readable while the list is not empty, for the poller to sleep on.
// Channels push into it from any thread (ChannelReadiness::look_again, under their leaf lock); the
// poller takes the whole list at once. It is how an event loop holding thousands of channels of a
// link looks, per wakeup, at the channels that changed rather than at all of them (docs/links.md,
// "Readiness per link").
#pragma once

#include <mutex>
#include <thread>
#include <unordered_set>
#include <vector>

namespace tcp2rdma::transport {

class NewsList {
 public:
  NewsList() = default;
  ~NewsList();
  NewsList(const NewsList&) = delete;
  NewsList& operator=(const NewsList&) = delete;

  // Makes the eventfd (above the application's range), anew in a forked child (news_lists_after_fork:
  // the parent's is the same open file, and a take in one process would drain the other's news).
  // False, errno set, when it cannot be had.
  bool make();
  int fd() const { return fd_; }

  // Adds `tag` unless it is in the list already (a link's progress may tell the same channel many
  // times before the poller looks).
  void push(void* tag);
  // The calling thread is about to take: what it pushes itself until its take() needs no eventfd
  // write (it takes it at once), which spares a write and a read per wakeup of an event loop whose
  // own look at the link finds the news.
  void begin_take();
  // Everything pushed so far, each once, in order, and the eventfd made quiet; news during the
  // taker's look is pushed again. Returns false when a push found no memory: the taker must look at
  // every channel it holds.
  bool take(std::vector<void*>* tags);
  // Ends begin_take() without a take: whether the list holds news now (the taker's own pushes wrote
  // no eventfd, and others' found the list not quiet: the taker must look again before it sleeps).
  bool end_take();
  // Whether the list holds news now, the take going on (a poller's spin between begin_take() and
  // end_take(): its own pushes write no eventfd).
  bool holds_news();

 private:
  std::mutex mu_;  // a leaf lock
  std::vector<void*> tags_;
  std::unordered_set<void*> listed_;  // what tags_ holds
  bool lost_ = false;  // a push found no memory since the last take
  int fd_ = -1;
  bool signalled_ = false;    // the eventfd was written since its last read
  std::thread::id taker_{};   // the thread between begin_take() and take(), if any
  unsigned generation_ = 0;  // the process's fork generation when fd_ was made
};

// In a forked child, before anything else of the module runs: every list's eventfd is the parent's
// too, and is made anew at its next make().
void news_lists_after_fork() noexcept;

}  // namespace tcp2rdma::transport
