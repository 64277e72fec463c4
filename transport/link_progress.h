// The link's progress (docs/links.md): one completion queue serves every channel of a link, so
// whichever thread holds the link's lock takes its completions and hands each to the channel it
// names, serves the channels that got news and tells their pollers; arms the queue for a thread about
// to sleep on its event; and fails every channel when the link fails. The channel (RdmaStream) keeps
// its byte stream; what it does with a completion handed to it is its own (handle_completion, serve).
// Every function here runs with the link's lock held.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <mutex>
#include <optional>

#include "status.h"

namespace tcp2rdma::transport {

class RdmaStream;
class StreamLink;

class LinkProgress {
 public:
  LinkProgress() = delete;

  // Hands one completion to the channel it names (`caller`, another, or every channel for a flushed
  // receive, which names none). Returns the caller's status; another's failure is that channel's.
  // `caller` may be null (a thread that is none of the link's channels': the listener's, a watcher's).
  // A send's completion first completes the unsignalled sends before it (StreamLink::post_send).
  static Status dispatch(StreamLink& link, const ibv_wc& wc, RdmaStream* caller);
  // Serves every channel a completion touched, but `except` (which serves itself), and tells their
  // pollers; first the channels that waited for room in the link's send queue, once there is room.
  static void serve_touched(StreamLink& link, RdmaStream* except);
  // Takes every completion of the link for a thread that is none of its channels' (the listener's,
  // which collects the opens): kReset when the link failed.
  static Status take_all(StreamLink& link);
  // For an application's poller that watches the link as a whole (link_watch.h): takes the link's
  // connection events and completion event, hands every completion to its channel and arms the queue
  // again; every channel with news is told (its pollers woken, its sinks pushed).
  // `arm`: arm the queue even when no event was taken (a watcher that starts watching: the listener,
  // whose set must wake at the next completion). `cm_when_quiet`: the connection events are taken
  // only when no completion event was (a watcher whose set holds the link's connection-event channel,
  // level-triggered: an event left there fires the set again at once, and is taken then), which
  // spares an event loop a system call that finds nothing at each wakeup.
  // `lazy`: an event loop's take (LinkWatch::take): when nobody else relies on the link's event
  // (StreamLink::relied_on), the queue is polled empty and left unarmed.
  static void drain(StreamLink& link, bool arm = false, bool cm_when_quiet = false, bool lazy = false);
  // Every completion on the queue handed to its channel, without arming (the count; a failed queue
  // fails the link). `caller`: as dispatch's.
  static int poll(StreamLink& link, RdmaStream* caller = nullptr);
  // An event loop's spin before it sleeps (LinkWatch::spin): the completions on the queue handed out
  // and their channels served and told; nothing else (no system call when there is none). Returns
  // how many there were.
  static int spin(StreamLink& link);
  // Before a thread sleeps on the link's event: the queue armed, and what came before the arming
  // handed out (true when anything did: the caller looks before it sleeps).
  static bool arm_for_sleep(StreamLink& link);
  // The queue armed, and the completions that came before the arming handed out (true when any did;
  // a failed arming fails the link). `caller`: as dispatch's; a status of its own that is a failure
  // fails it.
  static bool arm_and_hand_out(StreamLink& link, RdmaStream* caller = nullptr);
  // The link's connection events, taken and told to every channel (once they are the link's own).
  static void tell_cm_news(StreamLink& link);
  // Every channel of the link fails with `s` (kReset: the path's failure, which a failover may ride
  // out), and the link is disconnected: it takes no channel again.
  static void fail(StreamLink& link, const char* what, const char* detail, Status s);

  // A channel's own thread with the link (link_wait.cpp): a blocking call of `caller`'s, or a look at
  // its readiness. The caller serves itself (RdmaStream::serve); every other channel a completion
  // touched is served here.
  // Every completion on the queue handed out. kOk, or the caller's failure (the caller failed with
  // it; the rest of the batch still handed out), or the caller's failure when the queue failed (the
  // link failed).
  static Status hand_out(StreamLink& link, RdmaStream& caller);
  // The link's connection events taken for the caller: told to every channel, the others served,
  // and the caller's pollers told (whoever watches those events may not see them now).
  static void take_cm_events(StreamLink& link, RdmaStream& caller);
  // The link's events taken for the caller's look (its readiness, or after its sleep): the connection
  // events, the kicks, and the completion event, after which the queue is armed again with what came
  // before the arming handed out (the pollers of every channel may sleep on that event).
  // `only_fired`: a poll or select call's look takes only what its sleep saw fire (note_fired).
  static void take_events(StreamLink& link, RdmaStream& caller, bool only_fired = false);
  // Before the caller sleeps on the link's event: the queue armed, and what came before the arming
  // handed out (*news: the caller looks before it sleeps).
  static Status arm(StreamLink& link, RdmaStream& caller, bool* news);
  // A blocked call of the caller's waits for the link's next news: it polls the queue for up to
  // `spin_us` (one thread a link spins), then sleeps on the link's event for up to `sleep_ms` (-1:
  // for ever), as its sleeper; or, while another thread is the sleeper, on the link's condition for
  // up to `cv_ms` (-1: until told), for the sleeper tells everyone after its progress.
  // How the wait ended, for the caller to act on:
  enum class Woke {
    kLook,         // something may have changed: the caller looks again
    kFailed,       // the caller failed (status)
    kTouched,      // another thread handed the caller news: its serve() is due
    kEvent,        // the sleep ended at an event of the link's, now taken
    kQuiet,        // the sleep reached sleep_ms with nothing
    kInterrupted,  // a signal handler ran during the sleep
  };
  struct WaitEnd {
    Woke woke = Woke::kLook;
    Status status = Status::kOk;  // kFailed's
  };
  static WaitEnd wait(StreamLink& link, RdmaStream& caller, std::unique_lock<std::mutex>& lock, int spin_us,
                      int sleep_ms, int cv_ms);

  // Posts one of the link's own records (an open, an answer: link_messages.cpp) into the peer's setup
  // slot, first making room in the link's send queue if it is full.
  static Status post_record(StreamLink& link, const void* record, uint32_t op, uint32_t slot);

 private:
  static Status dispatch_one(StreamLink& link, const ibv_wc& wc, RdmaStream* caller);
  // A message of the link itself (an open or an answer in a setup slot; link_messages.cpp).
  static Status on_link_message(StreamLink& link, uint32_t arg);
  // The link's connection events taken and told to every channel; true when any was news (a
  // disconnect, a device removal).
  static bool take_cm_news(StreamLink& link);
  // The caller's spin in wait(): how the wait ended, or nothing when the caller is to sleep (the spin
  // ran out, or another thread spins).
  static std::optional<WaitEnd> spin_for(StreamLink& link, RdmaStream& caller, std::unique_lock<std::mutex>& lock,
                                         int spin_us, uint64_t seen);
  // Sleeps on the link's condition while another thread is the link's sleeper.
  static WaitEnd wait_for_sleeper(StreamLink& link, std::unique_lock<std::mutex>& lock, int cv_ms);
  // Channels that left something undone for want of room in the link's send queue (shared by all its
  // channels, so a send completion of one channel may be what another waits for) are served and their
  // pollers told once there is room again.
  static void touch_room_waiters(StreamLink& link);
};

}  // namespace tcp2rdma::transport
