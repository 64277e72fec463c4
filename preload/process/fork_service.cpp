#include "process/fork_service.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include "back_to_tcp/move_back.h"
#include "back_to_tcp/read_relay.h"
#include "keep_forever.h"
#include "libc/kept_descriptors.h"
#include "libc/real_calls.h"
#include "own_descriptors.h"
#include "process/claim_service.h"
#include "process/deferred_upgrade.h"
#include "process/fork_channel.h"
#include "registry/connection_path.h"
#include "registry/lent_streams.h"
#include "registry/stream_closer.h"
#include "registry/tracked_socket.h"
#include "util/log.h"
#include "util/saved_errno.h"

namespace tcp2rdma::preload {
namespace {

// How long a child waits for its parent's answer: the parent's move is bounded by the stream's
// timeout (and a hand-back under way by its own), so this is only for a parent that is stopped or hung.
constexpr int kAnswerWaitMs = 30000;
// How long a child's question whether the parent let go of a connection waits, on the application's
// thread. The parent's thread answers from its records, at once, but must first be scheduled, which
// in an emulated guest on a loaded host can take tens of milliseconds or more; and the question is
// asked only on the application's calls, so an application that then blocks in a read on TCP asks
// nothing more and its connection stays there. A parent that is stopped or hung costs this at most
// three times a connection.
constexpr int kAskWaitMs = 500;

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

// The parent's answer about `serial`, under the line's lock: one kept from earlier, or asked for now
// (`ask`: send_claim or send_ask), waiting up to `wait_ms`.
bool send_full_claim(int channel, uint64_t serial) { return send_claim(channel, serial, false); }
bool send_read_claim(int channel, uint64_t serial) { return send_claim(channel, serial, true); }

HandBack ask_parent(ParentLine* p, uint64_t serial, bool (*ask)(int, uint64_t) = send_full_claim,
                    int wait_ms = kAnswerWaitMs) {
  HandBack answer;  // kGone unless the parent says otherwise
  if (auto it = p->early.find(serial); it != p->early.end()) {
    answer = std::move(it->second);
    p->early.erase(it);
    return answer;
  }
  if (p->channel < 0) return answer;
  // A parent that has left cannot take the claim, but may have answered it unasked before it went:
  // what it sent is read either way.
  (void)ask(p->channel, serial);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
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
      case ChannelMessage::kAsk:
      case ChannelMessage::kClosed:
        release_to_application(p->channel);
        real().close(p->channel);
        p->channel = -1;
        return answer;
    }
  }
}

// The answer, applied to this process's copy of the connection.
void take_answer(TrackedSocket* socket, int fd, HandBack& answer) {
  if (answer.outcome == HandBack::Outcome::kRelayed) {
    // The parent keeps the connection on RDMA and relays the peer's bytes: it stays the parent's here
    // (stream_of_parent), and this process's reads take from the relay's queue.
    log_line("%s: reads from the parent's relay at this process's first use (the connection stays on rdma there)",
             connection_label(socket));
    return;
  }
  if (answer.outcome == HandBack::Outcome::kMoved && keep_answer_prefix(answer, &socket->prefix) &&
      socket->move_path(Path::kRdma, Path::kMovingBack)) {
    // Before the path says back on TCP: a connection this process holds alone plans its return there
    // (connection_path.h), as one the peer moved back does. One the parent still held may become
    // ours alone when the parent lets go: its return is planned too, and asks first (learn_if_alone).
    if (answer.alone) {
      socket->forks.note_alone();
    } else if (socket->returns.remembered()) {
      socket->forks.note_claimed_while_held();
      socket->returns.arm(std::chrono::steady_clock::now());
    }
    complete_move_back(socket, fd, /*by_mover=*/true);
    // This process is the connection's user from now on: its side of the return (a server's wait for
    // the client's request) is due at once.
    if (answer.alone) socket->returns.hurry(std::chrono::steady_clock::now());
    if (answer.write_shut) real().shutdown(fd, SHUT_WR);
    log_line("%s: back on tcp from the parent at this process's first use (%zu bytes of the peer's to read first%s%s)",
             connection_label(socket), socket->prefix.size(), answer.then_end ? ", then its end" : "",
             answer.alone ? "; the parent let go: it may go back to rdma here" : "");
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

// Each lent server connection keeps the listener that accepted it, when this child inherited that
// listener: should the parent let go of the connection, its return to RDMA here asks for the client's
// request through that listener's directory, and the child may close its copy of the listener long
// before (PostgreSQL's backends, inetd-style children).
void keep_listeners_for_returns(const std::vector<SocketHold>& servers, const std::vector<SocketHold>& listeners) {
  for (const SocketHold& server : servers) {
    for (const SocketHold& listener : listeners) {
      if (!server->forks.accepted_from(listener.get())) continue;
      server->forks.keep_return_listener(listener.get());
      break;
    }
  }
}

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
      deferred_ = deferred_ || lend_deferred;
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
  if (deferred_) plan_unused_take_up();
}

void ForkLending::in_child() noexcept {
  // The parent's service, its channels to our siblings and its lendings are not ours.
  forget_parents_service();
  lent_streams_after_fork();
  forget_read_relays_after_fork();
  ParentLine* grandparent = std::exchange(parent_slot(), new ParentLine);
  if (grandparent->channel >= 0) {  // claimed from before the fork
    release_to_application(grandparent->channel);
    real().close(grandparent->channel);
  }
  transport::keep_forever(grandparent);
  if (ends_[0] >= 0) real().close(std::exchange(ends_[0], -1));
  ParentLine* line = parent_slot();
  line->channel = std::exchange(ends_[1], -1);
  // The application may close every descriptor but 0 to 2 before it execs (inetd): the claim at the
  // exec still reaches the parent (libc/kept_descriptors.h).
  keep_from_application(line->channel);
  line->lent = std::move(serials_);
  drop_inherited_deferred_upgrades(lent_to_this_child);  // the parent could not hear our claim: TCP here
  // What was not lent (on_fork: parent, or no channel) is the parent's alone: it fails loudly here.
  std::vector<SocketHold> listeners, servers;
  for_each_tracked_fd([&](int fd, SocketHold& socket) {
    if (socket->stream_of_parent() && (line->channel < 0 || !lent_here(line, socket->serial()))) {
      replace_with_unconnected_socket(fd, socket->domain());
      return;
    }
    try {
      if (socket->role() == SocketRole::kListener) listeners.emplace_back(socket.get());
      if (socket->role() == SocketRole::kServer && socket->stream_of_parent()) servers.emplace_back(socket.get());
    } catch (const std::bad_alloc&) {
      // That connection cannot return to RDMA here, should it become this process's (return_to_rdma.h).
    }
  });
  keep_listeners_for_returns(servers, listeners);
}

// --- The child's claims -----------------------------------------------------------------------------

void claim_from_parent(TrackedSocket* socket, int fd, bool reading) noexcept {
  SavedErrno keep_errno;
  ParentLine* p = parent_slot();
  std::lock_guard lock(p->mutex);
  if (!socket->stream_of_parent()) return;  // another thread's claim came first
  if (reading && socket->prefix.relayed()) return;  // another thread's read claim got the relay
  HandBack answer;
  if (lent_here(p, socket->serial())) answer = ask_parent(p, socket->serial(), reading ? send_read_claim : send_full_claim);
  if (answer.outcome == HandBack::Outcome::kRelayed && !keep_answer_prefix(answer, &socket->prefix)) {
    // The relay's queue cannot be mapped here: the connection is claimed whole, as for a write.
    answer = ask_parent(p, socket->serial());
  }
  take_answer(socket, fd, answer);
}

void claim_all_from_parent() noexcept {
  for_each_tracked_fd([](int fd, SocketHold& socket) {
    if (socket->stream_of_parent()) claim_from_parent(socket.get(), fd);
  });
}

bool learn_if_alone(TrackedSocket* socket) noexcept {
  if (!socket->forks.awaits_parents_word()) return false;
  SavedErrno keep_errno;
  ParentLine* p = parent_slot();
  // Never behind another thread's claim (up to the parent's move): asked again at the next attempt.
  std::unique_lock lock(p->mutex, std::try_to_lock);
  if (!lock.owns_lock()) return false;
  auto asked = std::chrono::steady_clock::now();
  HandBack answer = ask_parent(p, socket->serial(), send_ask, kAskWaitMs);
  if (answer.outcome == HandBack::Outcome::kGone && p->channel >= 0 &&
      std::chrono::steady_clock::now() - asked >= std::chrono::milliseconds(kAskWaitMs)) {
    log_line("%s: the parent did not say within %d ms whether it let go of the connection: asked again later",
             connection_label(socket), kAskWaitMs);
  }
  if (answer.outcome != HandBack::Outcome::kMoved || !answer.alone) return false;
  socket->forks.note_alone();
  log_line("%s: the parent let go of the connection: it may go back to rdma here", connection_label(socket));
  return true;
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
  // A relay may hold a connection this process has no descriptor of left, which a child reads.
  for (SocketHold& relayed : relayed_sockets()) {
    bool listed = std::any_of(lent.begin(), lent.end(), [&](const SocketHold& s) { return s.get() == relayed.get(); });
    if (!listed && relayed->stream() != nullptr && is_lent(relayed->serial())) lent.push_back(std::move(relayed));
  }
  for (SocketHold& socket : lent) {
    if (socket->stream() == nullptr) continue;  // a dup'd descriptor's socket, moved already
    note_handing_back(socket->serial());
    HandBack answer = move_back_for_child(socket.get(), "the children that hold it, as this process leaves");
    // This process is leaving: a connection it could not move back cannot go on anywhere.
    if (answer.outcome == HandBack::Outcome::kParents) answer.outcome = HandBack::Outcome::kFailed;
    // Exit, or an exec whose program gets no descriptor of it: the children alone hold it now.
    answer.alone = survives == nullptr || !survives(socket.get());
    keep_handed_back(socket->serial(), std::move(answer));
  }
  finish_closing();  // the hand-backs of those closed before are kept by now
  // Connections children claimed while this process held them: let go of now (but those the new
  // program keeps), and each child that holds one alone is told unasked.
  let_go_of_claims(survives);
  for (auto [channel, serial] : claims_let_go()) {
    HandBack answer;
    answer.outcome = HandBack::Outcome::kMoved;
    answer.alone = true;
    send_answer(channel, serial, answer);
  }
  for (auto [channel, serial] : unclaimed_hand_backs()) {
    if (auto answer = handed_back_for(serial, 0)) {
      answer->alone = answer->alone && held_only_by(serial, channel);
      send_answer(channel, serial, *answer);
    }
  }
}

}  // namespace tcp2rdma::preload
