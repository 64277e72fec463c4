// A link's setup slots (docs/links.md, "Opening a channel on a live link"). Each side of a link keeps
// kSetupSlots records after its first channel's mailbox, where the other side writes: a client writes
// each open into the server's slots, one slot an open, and the server answers in the client's slot of
// the same number. What each side keeps of them: where the two areas are, the client's opens that wait
// for their answers, and the server's opens that wait for its listener.
//
// No verbs here: StreamLink posts the records (post_setup_record) and LinkProgress takes the messages
// that say one arrived (link_messages.cpp). Used with the link's lock held, as everything of a link.
#pragma once

#include <sys/types.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "status.h"
#include "wire.h"

namespace tcp2rdma::transport {

class RdmaStream;

class LinkSetup {
 public:
  // Where the records go: our area (the peer writes into it), and the peer's, by its rkey and the
  // offset of its first slot. Set once, when the link's first channel starts.
  void set_areas(uint8_t* ours, uint32_t peer_rkey, uint64_t peer_offset) {
    own_ = ours;
    peer_rkey_ = peer_rkey;
    peer_offset_ = peer_offset;
  }
  bool has_areas() const { return own_ != nullptr; }
  // What the peer wrote into our `slot` (kSetupRecord bytes).
  const uint8_t* own_slot(uint32_t slot) const { return own_ + slot * kSetupRecord; }
  uint32_t peer_rkey() const { return peer_rkey_; }
  uint64_t peer_slot_offset(uint32_t slot) const { return peer_offset_ + slot * kSetupRecord; }

  // The client's side. An open that waits for its answer: the channel it opens and the nonce the
  // answer must repeat; `stream` is the channel's, until it stops waiting.
  struct Awaiting {
    RdmaStream* stream = nullptr;
    uint32_t index = 0;
    uint64_t client_nonce = 0;
  };
  // A free slot for an open, now taken (-1: every slot is taken). It waits for nothing yet.
  int take_free_slot();
  // The open in `slot` was sent, or is about to be: its answer is waited for.
  void await(uint32_t slot, const Awaiting& open) { awaiting_[slot] = {open, true}; }
  // The open that waits for its answer in `slot`; nothing when none does (an answer there is one
  // nobody asked for, which the peer must not send).
  std::optional<Awaiting> waiting_in(uint32_t slot) const;
  // The slot is free again: its answer came, or its open could not be sent. Only an answer frees a
  // slot whose open went: the server may still write into it.
  void give_back(uint32_t slot);
  // `stream` goes while its open may still be answered: the answer then finds no stream, and its
  // channel is ended.
  void forget_stream(uint32_t slot, const RdmaStream* stream);

  // The server's side. A listener that accepted the link's first channel answers the opens that come
  // on it, and rings `bell` (an eventfd; -1: none) for each, so that its engine wakes, then sets
  // *rung (the listener reads the eventfd only after a ring: a take without one makes no call).
  // `wake_set` is the listener's epoll set, which watches the link's completion channel
  // (`completion_fd`) while no event loop does (pollers_join).
  void serve_opens() { serves_ = true; }
  // The completion channel joins the set here (and leaves it in pollers_join and forget_listener),
  // and `counts` keeps the listener's tally of its links out of the set.
  struct SetCounts {
    std::atomic<int> left_to_loops{0};  // an event loop watches them (StreamListener::leaves_links_to_loops)
    std::atomic<int> unseen{0};  // no loop does and the set could not take them (no memory for the
                                 // entry): their opens are found only at timed looks
  };
  void set_bell(int bell, std::atomic<bool>* rung, int wake_set, int completion_fd, SetCounts* counts);
  // The listener lets the link go: its bell and set are forgotten here (under the link's lock, so
  // that no poller touches the set after), and the completion channel leaves the set.
  void forget_listener();
  // An application's event loop watches the link (LinkWatch::bind) or stops (unbind). While one
  // does, it takes the link's completions, finds the opens among them and rings the bell: the
  // listener's set stops watching the completion channel, whose every event would wake the
  // listener's thread as well as the loop's (docs/links.md, "The listener's wake"). The last loop to
  // stop gives the channel back to the set.
  void pollers_join(int change);
  // Whether an event loop watches the link (its takes find the opens).
  bool watched_by_pollers() const { return pollers_ > 0; }
  // An open came into `slot`: kept for the listener, and the bell rung. kProtocolError when this side
  // serves no opens, or more are kept than the client can have outstanding (its slots).
  Status keep_open(uint32_t slot);
  struct Open {
    uint32_t slot;
    ChannelOpen request;
  };
  // The opens kept so far, taken.
  std::vector<Open> take_opens() { return std::exchange(opens_, {}); }

 private:
  // The completion channel into the listener's set, or out of it (while no event loop watches).
  void join_set();
  void leave_set();
  struct Slot {
    Awaiting open;
    bool used = false;  // an open waits here for its answer
  };
  uint8_t* own_ = nullptr;
  uint32_t peer_rkey_ = 0;
  uint64_t peer_offset_ = 0;
  uint64_t taken_ = 0;  // bit s: slot s is taken (its open is being sent, or waits for its answer)
  std::array<Slot, kSetupSlots> awaiting_{};
  static_assert(kSetupSlots <= 64, "taken_ has a bit a slot");
  bool serves_ = false;
  int bell_ = -1;
  std::atomic<bool>* rung_ = nullptr;
  int wake_set_ = -1;      // the listener's set (-1: none, or forgotten)
  int completion_fd_ = -1;  // the link's completion channel, in wake_set_ while pollers_ is 0
  bool in_set_ = false;     // it is in wake_set_; while pollers_ is 0 and it is not, counts_->unseen counts it
  int pollers_ = 0;         // event loops' watches of the link (LinkWatch)
  SetCounts* counts_ = nullptr;  // the listener's tally of its links out of wake_set_
  pid_t listening_pid_ = 0;  // the listener's process: a forked child's copy of a watch leaves the set alone
  std::vector<Open> opens_;
};

}  // namespace tcp2rdma::transport
