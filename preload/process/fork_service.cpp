#include "process/fork_service.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "back_to_tcp/move_back.h"
#include "keep_forever.h"
#include "libc/real_calls.h"
#include "own_descriptors.h"
#include "process/deferred_upgrade.h"
#include "process/fork_channel.h"
#include "registry/connection_path.h"
#include "registry/lent_streams.h"
#include "registry/stream_closer.h"
#include "registry/tracked_socket.h"
#include "util/log.h"
#include "util/quiet_thread.h"
#include "util/saved_errno.h"

namespace tcp2rdma::preload {
namespace {

// How long a child waits for its parent's answer: the parent's move is bounded by the stream's
// timeout (and a hand-back under way by its own), so this is only for a parent that is stopped or hung.
constexpr int kAnswerWaitMs = 30000;

// --- The parent's side: one thread answers every child's claims ---------------------------------

// Made on first use, never destroyed (the thread uses it), anew in a forked child.
struct Service {
  std::mutex mutex;
  std::vector<int> channels;  // this process's ends, one per child that holds something
  int wake = -1;              // an eventfd: a channel was added
  bool running = false;
};
Service*& service_slot() {
  static Service* service = new Service;
  return service;
}

void answer_claim(int channel, uint64_t serial) {
  HandBack answer;
  if (!is_lent_to(serial, channel)) {
    answer.outcome = HandBack::Outcome::kGone;  // not this child's to ask for
  } else {
    // Let go of already (its answer is kept), still this process's, or between the two (the last
    // close under way: moments); a socket gone for good answers kGone after them.
    for (int look = 0; look < 100; ++look) {
      // A connection whose upgrade was on TCP at the fork (deferred_upgrade.h): answered without a hold.
      bool deferred = false;
      if (SocketHold held = SocketHold::live(serial)) deferred = held->own_stream() == nullptr;
      if (deferred) {
        answer = answer_deferred_claim(serial);
        break;
      }
      if (auto handed = handed_back_for(serial, kAnswerWaitMs / 2)) {
        bool kept = handed->outcome == HandBack::Outcome::kResume || handed->outcome == HandBack::Outcome::kStaysTcp;
        answer = kept ? answer_deferred_claim(serial) : std::move(*handed);  // kept ones go once
        break;
      }
      if (SocketHold socket = SocketHold::live(serial)) {
        answer = move_back_for_child(socket.get(), "a child that uses it");
        break;
      }
      usleep(10000);
    }
  }
  send_answer(channel, serial, answer);
  note_answered(serial, channel);
}

void drop_channel(Service* s, int channel) {
  forget_channel(channel);
  std::lock_guard lock(s->mutex);
  s->channels.erase(std::remove(s->channels.begin(), s->channels.end(), channel), s->channels.end());
  real().close(channel);
}

void serve(Service* s) {
  std::vector<pollfd> fds;
  for (;;) {
    fds.clear();
    {
      std::lock_guard lock(s->mutex);
      fds.push_back({s->wake, POLLIN, 0});
      for (int channel : s->channels) fds.push_back({channel, POLLIN, 0});
    }
    if (real().poll(fds.data(), fds.size(), -1) < 0) continue;  // EINTR
    if (fds[0].revents & POLLIN) {
      uint64_t added;
      (void)!read(s->wake, &added, sizeof added);
    }
    for (size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      uint64_t serial = 0;
      HandBack ignored;
      switch (receive_message(fds[i].fd, 0, &serial, &ignored)) {
        case ChannelMessage::kClaim: answer_claim(fds[i].fd, serial); break;
        case ChannelMessage::kNone: break;
        case ChannelMessage::kAnswer:  // a child answers nothing: the format is broken
        case ChannelMessage::kClosed: drop_channel(s, fds[i].fd); break;
      }
    }
  }
}

// Adds this process's end of a new child's channel to the thread's watch (starting the thread).
// False when there is no thread to be had: nobody would answer that child.
bool serve_channel(int channel) {
  Service* s = service_slot();
  std::lock_guard lock(s->mutex);
  if (s->wake < 0) {
    transport::OwnDescriptors window;
    s->wake = window.place(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (s->wake < 0) return false;
  }
  if (!s->running) {
    std::thread thread = start_quiet_thread([s] { serve(s); });
    if (!thread.joinable()) return false;
    thread.detach();
    s->running = true;
  }
  s->channels.push_back(channel);
  uint64_t one = 1;
  (void)!write(s->wake, &one, sizeof one);
  return true;
}

// --- The child's side ----------------------------------------------------------------------------

// Made anew in each forked child.
struct ParentLine {
  std::mutex mutex;
  int channel = -1;
  std::vector<uint64_t> lent;                     // what the parent lent this process
  std::unordered_map<uint64_t, HandBack> early;   // answers that came while waiting for another
};
ParentLine*& parent_slot() {
  static ParentLine* line = new ParentLine;
  return line;
}

// The parent's answer about `serial`, under the line's lock: one kept from earlier, or asked for now.
HandBack ask_parent(ParentLine* p, uint64_t serial) {
  HandBack answer;  // kGone unless the parent says otherwise
  if (auto it = p->early.find(serial); it != p->early.end()) {
    answer = std::move(it->second);
    p->early.erase(it);
    return answer;
  }
  if (p->channel < 0) return answer;
  // A parent that has left cannot take the claim, but may have answered it unasked before it went:
  // what it sent is read either way.
  (void)send_claim(p->channel, serial);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kAnswerWaitMs);
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return answer;
    uint64_t about = 0;
    HandBack got;
    switch (receive_message(p->channel, static_cast<int>(left.count()), &about, &got)) {
      case ChannelMessage::kAnswer:
        if (about == serial) return got;
        try {
          p->early[about] = std::move(got);
        } catch (const std::bad_alloc&) {
        }
        break;
      case ChannelMessage::kNone: return answer;  // a parent that never answers: the copy is not ours
      case ChannelMessage::kClaim:
      case ChannelMessage::kClosed:
        real().close(p->channel);
        p->channel = -1;
        return answer;
    }
  }
}

// The answer, applied to this process's copy of the connection.
void take_answer(TrackedSocket* socket, int fd, HandBack& answer) {
  if (answer.outcome == HandBack::Outcome::kMoved &&
      ((answer.bytes.empty() && !answer.then_end) || socket->prefix.set(answer.bytes, answer.then_end)) &&
      socket->move_path(Path::kRdma, Path::kMovingBack)) {
    complete_move_back(socket, fd, /*by_mover=*/true);
    if (answer.write_shut) real().shutdown(fd, SHUT_WR);
    log_line("%s: back on tcp from the parent at this process's first use (%zu bytes of the peer's to read first%s)",
             connection_label(socket), answer.bytes.size(), answer.then_end ? ", then its end" : "");
    return;
  }
  // Bytes that cannot be kept here (no memory) are lost to this process: reset, as after a failed move.
  refuse_parents_copy(socket, fd, answer.outcome);
}

bool lent_here(const ParentLine* p, uint64_t serial) {
  return std::find(p->lent.begin(), p->lent.end(), serial) != p->lent.end();
}

// In the child, before any other thread of it runs: what the parent lent this process.
bool lent_to_this_child(uint64_t serial) { return lent_here(parent_slot(), serial); }

}  // namespace

// --- The fork wrapper's part ------------------------------------------------------------------------

ForkLending::~ForkLending() {
  for (int end : ends_) {
    if (end >= 0) real().close(end);
  }
}

bool ForkLending::prepare() noexcept {
  try {
    unsigned here = fork_generation();
    for_each_tracked_fd([&](int, SocketHold& socket) {
      // An upgrade this process deferred at this fork (or an earlier one) is lent as a stream is.
      const TrackedSocket::DeferredUpgrade* deferred = socket->deferred_upgrade();
      bool lend_deferred = deferred != nullptr && deferred->generation == here;
      if (!lend_deferred && (socket->stream() == nullptr || !socket->path_is(Path::kRdma))) return;
      if (!lend_deferred && !socket->follows_fork.load(std::memory_order_relaxed)) return;
      if (std::find(serials_.begin(), serials_.end(), socket->serial()) == serials_.end()) {
        serials_.push_back(socket->serial());
      }
    });
  } catch (const std::bad_alloc&) {
    return false;
  }
  if (serials_.empty()) return true;
  int ends[2];
  if (!open_fork_channel(ends)) {
    log_line("fork: no channel for the child (%s): its connections go back to tcp first", strerror(errno));
    serials_.clear();
    return false;
  }
  transport::OwnDescriptors window;
  ends_[0] = window.place(ends[0]);
  ends_[1] = window.place(ends[1]);
  if (ends_[0] < 0 || ends_[1] < 0) {
    log_line("fork: no descriptor for the child's channel: its connections go back to tcp first");
    serials_.clear();
    return false;
  }
  return true;
}

void ForkLending::in_parent(pid_t child) noexcept {
  if (ends_[1] >= 0) real().close(std::exchange(ends_[1], -1));
  if (ends_[0] < 0) return;
  if (child < 0) return;  // the destructor closes our end
  SavedErrno keep_errno;
  lend_streams(ends_[0], serials_);
  if (!serve_channel(ends_[0])) {
    // Nobody would answer: the child's claims find the channel closed and fail loudly, and the
    // parent's own use goes on; its last close ends the connection (it is not lent).
    log_line("fork: no thread to answer the child: its copies of our rdma connections cannot be used");
    forget_channel(ends_[0]);
    return;  // the destructor closes our end
  }
  log_line("fork: %zu connections lent to child %d (on rdma, or with their upgrade deferred: they stay here until it "
           "uses one)", serials_.size(), static_cast<int>(child));
  ends_[0] = -1;  // the service's now
}

void ForkLending::in_child() noexcept {
  // The parent's service, its channels to our siblings and its lendings are not ours.
  Service* parents = std::exchange(service_slot(), new Service);
  for (int channel : parents->channels) real().close(channel);
  if (parents->wake >= 0) real().close(parents->wake);
  transport::keep_forever(parents);
  lent_streams_after_fork();
  ParentLine* grandparent = std::exchange(parent_slot(), new ParentLine);
  if (grandparent->channel >= 0) real().close(grandparent->channel);  // claimed from before the fork
  transport::keep_forever(grandparent);
  if (ends_[0] >= 0) real().close(std::exchange(ends_[0], -1));
  ParentLine* line = parent_slot();
  line->channel = std::exchange(ends_[1], -1);
  line->lent = std::move(serials_);
  drop_inherited_deferred_upgrades(lent_to_this_child);  // the parent could not hear our claim: TCP here
  // What was not lent (on_fork: parent, or no channel) is the parent's alone: it fails loudly here.
  for_each_tracked_fd([&](int fd, SocketHold& socket) {
    if (socket->stream_of_parent() && (line->channel < 0 || !lent_here(line, socket->serial()))) {
      replace_with_unconnected_socket(fd, socket->domain());
    }
  });
}

// --- The child's claims -----------------------------------------------------------------------------

void claim_from_parent(TrackedSocket* socket, int fd) noexcept {
  SavedErrno keep_errno;
  ParentLine* p = parent_slot();
  std::lock_guard lock(p->mutex);
  if (!socket->stream_of_parent()) return;  // another thread's claim came first
  HandBack answer;
  if (lent_here(p, socket->serial())) answer = ask_parent(p, socket->serial());
  take_answer(socket, fd, answer);
}

void claim_all_from_parent() noexcept {
  for_each_tracked_fd([](int fd, SocketHold& socket) {
    if (socket->stream_of_parent()) claim_from_parent(socket.get(), fd);
  });
}

HandBack claim_deferred_from_parent(uint64_t serial) noexcept {
  SavedErrno keep_errno;
  ParentLine* p = parent_slot();
  std::lock_guard lock(p->mutex);
  if (!lent_here(p, serial)) return HandBack{};  // kGone
  return ask_parent(p, serial);
}

void answer_children_before_leaving(bool (*survives)(const TrackedSocket*)) noexcept {
  SavedErrno keep_errno;
  hand_back_deferred_before_leaving(survives);
  // Lent connections this process still uses: back to TCP now, their answers kept.
  std::vector<SocketHold> lent;
  for_each_tracked_fd([&](int, SocketHold& socket) {
    if (socket->stream() != nullptr && is_lent(socket->serial())) lent.emplace_back(socket.get());
  });
  for (SocketHold& socket : lent) {
    if (socket->stream() == nullptr) continue;  // a dup'd descriptor's socket, moved already
    note_handing_back(socket->serial());
    HandBack answer = move_back_for_child(socket.get(), "the children that hold it, as this process leaves");
    // This process is leaving: a connection it could not move back cannot go on anywhere.
    if (answer.outcome == HandBack::Outcome::kParents) answer.outcome = HandBack::Outcome::kFailed;
    keep_handed_back(socket->serial(), std::move(answer));
  }
  finish_closing();  // the hand-backs of those closed before are kept by now
  for (auto [channel, serial] : unclaimed_hand_backs()) {
    if (auto answer = handed_back_for(serial, 0)) send_answer(channel, serial, *answer);
  }
}

}  // namespace tcp2rdma::preload
