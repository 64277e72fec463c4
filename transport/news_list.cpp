// A poller's list of channels with news (news_list.h).
#include "news_list.h"

#include <sys/eventfd.h>

#include <atomic>
#include <new>

#include "os_calls.h"
#include "own_descriptors.h"

namespace tcp2rdma::transport {
namespace {
std::atomic<unsigned> g_generation{0};
}  // namespace

void news_lists_after_fork() noexcept { g_generation.fetch_add(1, std::memory_order_relaxed); }

bool NewsList::make() {
  std::lock_guard lock(mu_);
  unsigned now = g_generation.load(std::memory_order_relaxed);
  if (fd_ >= 0 && generation_ == now) return true;
  if (fd_ >= 0) {
    // The parent's eventfd, inherited: ours to close (the parent keeps its own copy), with the news
    // the parent pushed before the fork, which is not this process's.
    os().close(fd_);
    fd_ = -1;
    tags_.clear();
    listed_.clear();
    lost_ = false;
  }
  generation_ = now;
  OwnDescriptors window;
  signalled_ = !tags_.empty() || lost_;
  fd_ = window.place(::eventfd(signalled_ ? 1 : 0, EFD_NONBLOCK | EFD_CLOEXEC));
  return fd_ >= 0;
}

void NewsList::push(void* tag) {
  std::lock_guard lock(mu_);
  bool was_quiet = tags_.empty() && !lost_;
  try {
    if (!listed_.insert(tag).second) return;
    tags_.push_back(tag);
  } catch (const std::bad_alloc&) {
    lost_ = true;  // the taker looks at everything instead
  }
  // eventfd_write is libc's own call, never the module's wrapper (own_calls.h). The taker's own news
  // is in the list when it takes: no wakeup is due for it.
  if (was_quiet && fd_ >= 0 && taker_ != std::this_thread::get_id()) {
    (void)eventfd_write(fd_, 1);
    signalled_ = true;
  }
}

void NewsList::begin_take() {
  std::lock_guard lock(mu_);
  taker_ = std::this_thread::get_id();
}

bool NewsList::take(std::vector<void*>* tags) {
  std::lock_guard lock(mu_);
  tags->clear();
  tags->swap(tags_);
  listed_.clear();
  bool whole = !lost_;
  lost_ = false;
  taker_ = std::thread::id{};
  eventfd_t count = 0;
  if (fd_ >= 0 && signalled_) (void)eventfd_read(fd_, &count);
  signalled_ = false;
  return whole;
}

bool NewsList::end_take() {
  std::lock_guard lock(mu_);
  taker_ = std::thread::id{};
  return !tags_.empty() || lost_;
}

bool NewsList::holds_news() {
  std::lock_guard lock(mu_);
  return !tags_.empty() || lost_;
}

NewsList::~NewsList() {
  if (fd_ >= 0) os().close(fd_);
}

}  // namespace tcp2rdma::transport
