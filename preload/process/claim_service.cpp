// The parent's side of the fork service (fork_service.h): one thread answers every child's claims.
#include "process/claim_service.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "back_to_tcp/move_back.h"
#include "back_to_tcp/read_relay.h"
#include "keep_forever.h"
#include "libc/real_calls.h"
#include "own_descriptors.h"
#include "process/deferred_upgrade.h"
#include "process/fork_channel.h"
#include "registry/lent_streams.h"
#include "registry/tracked_socket.h"
#include "util/quiet_thread.h"

namespace tcp2rdma::preload {
namespace {

// How long an answer's hand-back under way is waited for: half of the child's wait for the answer
// (fork_service.cpp), so that the answer reaches the child in time.
constexpr int kHandBackWaitMs = 15000;

// Made on first use, never destroyed (the thread uses it), anew in a forked child.
struct Service {
  std::mutex mutex;
  std::vector<int> channels;  // this process's ends, one per child that holds something
  int wake = -1;              // an eventfd: a channel was added, or a take-up planned
  bool running = false;
  // When upgrades a fork deferred are next due to be taken up here, unused (deferred_upgrade.h).
  std::chrono::steady_clock::time_point take_up_at = std::chrono::steady_clock::time_point::max();
};
Service*& service_slot() {
  static Service* service = new Service;
  return service;
}

// `reading`: the call that claims only reads (a read relay may answer it: back_to_tcp/read_relay.h).
void answer_claim(int channel, uint64_t serial, bool reading) {
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
      if (auto handed = handed_back_for(serial, kHandBackWaitMs)) {
        bool kept = handed->outcome == HandBack::Outcome::kResume || handed->outcome == HandBack::Outcome::kStaysTcp;
        answer = kept ? answer_deferred_claim(serial) : std::move(*handed);  // kept ones go once
        break;
      }
      if (SocketHold socket = SocketHold::live(serial)) {
        if (reading && start_read_relay(socket.get(), channel, &answer)) break;
        // This process still holds it: the child may ask later whether it let go since. Noted before
        // the move, so that a fork meanwhile counts.
        note_claimed(serial, channel);
        answer = move_back_for_child(socket.get(), "a child that uses it");
        if (answer.outcome != HandBack::Outcome::kMoved) forget_claimed(serial);
        break;
      }
      usleep(10000);
    }
  }
  // The kept answer of a parent that let go says so; the child holds the connection alone only if no
  // other child alive holds it too.
  answer.alone = answer.alone && held_only_by(serial, channel);
  send_answer(channel, serial, answer);
  // A child that reads through a relay holds the connection still: anything else it does claims it again.
  if (answer.outcome != HandBack::Outcome::kRelayed) note_answered(serial, channel);
}

// A child asks about a connection it claimed while this process still held it (note_claimed).
void answer_ask(int channel, uint64_t serial) {
  HandBack answer;
  answer.outcome = HandBack::Outcome::kMoved;
  answer.alone = claimed_alone_by(serial, channel);
  send_answer(channel, serial, answer);
}

void drop_channel(Service* s, int channel) {
  forget_channel(channel);
  std::lock_guard lock(s->mutex);
  s->channels.erase(std::remove(s->channels.begin(), s->channels.end(), channel), s->channels.end());
  real().close(channel);
}

// The poll's timeout: until the next take-up of unused deferred upgrades is due (-1: none is
// planned), after taking up those that are due now.
int take_up_due(Service* s) {
  using Clock = std::chrono::steady_clock;
  Clock::time_point at;
  {
    std::lock_guard lock(s->mutex);
    at = s->take_up_at;
    if (at == Clock::time_point::max()) return -1;
    if (at <= Clock::now()) s->take_up_at = Clock::time_point::max();  // planned anew below (or by a fork)
  }
  if (at <= Clock::now()) {
    Clock::time_point next = take_up_unused_deferred_upgrades();
    std::lock_guard lock(s->mutex);
    at = s->take_up_at = std::min(s->take_up_at, next);
    if (at == Clock::time_point::max()) return -1;
  }
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(at - Clock::now()).count() + 1;
  return static_cast<int>(std::clamp<long long>(ms, 0, 60 * 1000));
}

void serve(Service* s) {
  std::vector<pollfd> fds;
  for (;;) {
    int timeout_ms = take_up_due(s);
    fds.clear();
    {
      std::lock_guard lock(s->mutex);
      fds.push_back({s->wake, POLLIN, 0});
      for (int channel : s->channels) fds.push_back({channel, POLLIN, 0});
    }
    if (real().poll(fds.data(), fds.size(), timeout_ms) <= 0) continue;  // EINTR, or a take-up due
    if (fds[0].revents & POLLIN) {
      uint64_t added;
      (void)!read(s->wake, &added, sizeof added);
    }
    for (size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      uint64_t serial = 0;
      HandBack claim;
      switch (receive_message(fds[i].fd, 0, &serial, &claim)) {
        case ChannelMessage::kClaim: answer_claim(fds[i].fd, serial, claim.outcome == HandBack::Outcome::kRelayed); break;
        case ChannelMessage::kAsk: answer_ask(fds[i].fd, serial); break;
        case ChannelMessage::kNone: break;
        case ChannelMessage::kAnswer:  // a child answers nothing: the format is broken
        case ChannelMessage::kClosed: drop_channel(s, fds[i].fd); break;
      }
    }
  }
}

}  // namespace

bool serve_channel(int channel) noexcept {
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

void plan_unused_take_up() noexcept {
  Service* s = service_slot();
  std::lock_guard lock(s->mutex);
  s->take_up_at = std::min(s->take_up_at, std::chrono::steady_clock::now() + kUnusedTakeUpAfter);
  uint64_t one = 1;
  (void)!write(s->wake, &one, sizeof one);
}

void forget_parents_service() noexcept {
  Service* parents = std::exchange(service_slot(), new Service);
  for (int channel : parents->channels) real().close(channel);
  if (parents->wake >= 0) real().close(parents->wake);
  transport::keep_forever(parents);
}

}  // namespace tcp2rdma::preload
