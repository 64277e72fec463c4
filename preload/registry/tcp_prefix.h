// The bytes a connection owes its application before the kernel's socket (docs/architecture.md, "Back
// to TCP" and "Forks"): what the peer had sent on the stream and this side had not read when it moved
// back; or, while a forked child reads a connection its parent keeps on RDMA, what the parent's read
// relay (back_to_tcp/read_relay.h) has taken off the stream for both. They live in a shared mapping
// with a process-shared lock, so that a forked child and its parent consume them as they would a socket's
// queue: each byte goes to one reader, whichever process reads first.
//
// The mapping is a ring: a prefix set once fills it exactly and never wraps; a relay's queue is fed
// (feed_space, commit) while readers take, until finish() says what follows the last byte: the
// kernel's socket, the end of the stream, or an error.
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace tcp2rdma::preload {

class TcpPrefix {
 public:
  // What a reader finds after the last byte once nothing more is fed.
  enum class Then : uint8_t { kKernel, kEnd, kError };

  TcpPrefix() = default;
  ~TcpPrefix();  // this process's mapping goes; the bytes live on in other processes that share it
  TcpPrefix(const TcpPrefix&) = delete;
  TcpPrefix& operator=(const TcpPrefix&) = delete;

  // Called once per move back (a prefix read to its end may be replaced). `then_end`: the peer's
  // sending side had ended on the stream: after the bytes, reads find the end of the stream, whatever
  // the kernel socket holds. False when no memory could be mapped for the bytes (the caller must not
  // go on as if they were there). On a relay's queue still fed, the bytes are added after the
  // relay's and the feeding ends (the move back or failover that stopped the relay).
  bool set(const std::vector<uint8_t>& bytes, bool then_end);
  // The same, in the mapping of a new memfd that a process forked before can map too (adopt, given
  // shareable()): both then take from one queue, as from the socket's. False with nothing set.
  bool set_shared(const std::vector<uint8_t>& bytes, bool then_end);
  // This socket's prefix is the one set_shared made in another process, in the memfd `held`.
  bool adopt(const std::shared_ptr<const int>& held);
  // The memfd of a prefix made by set_shared, start_relay or adopt, for a process that is to share it
  // (held above the application's descriptor range, close-on-exec; closed with the last holder), else
  // null.
  std::shared_ptr<const int> shareable() const noexcept;
  // Whether `held` is the memfd of the queue this prefix maps already (a child's answer that names the
  // relay's queue it reads).
  bool maps(const std::shared_ptr<const int>& held) const noexcept;
  // Something to report before the kernel: bytes, the end or an error after them, or a relay that may
  // add more. One load when there is no prefix (every socket that never moved back), two otherwise.
  bool present() const noexcept;
  // Copies the next bytes into iov (and consumes them unless `peek`); *at_end: none are left and the
  // end follows.
  size_t take(const iovec* iov, int iovcnt, bool peek, bool* at_end);
  // Nothing is left and an error follows: its errno, reported once (the end follows it, as a reset
  // socket reads 0 after its ECONNRESET); else 0.
  int take_error();
  // Consumes every byte left (for another process that reads the connection from now on); false, with
  // nothing taken, when there is no memory for them.
  bool take_all(std::vector<uint8_t>* bytes);
  size_t size() const;
  bool then_end() const;

  // --- A read relay's queue (back_to_tcp/read_relay.h) ------------------------------------------
  // The parent's side: a new shared queue of `capacity` bytes that a relay feeds, with an eventfd
  // that rings when bytes (or the last word) come. False with nothing set.
  bool start_relay(size_t capacity);
  // The child's side: the relay's queue in `held`, rung by `wake`.
  bool adopt_relay(const std::shared_ptr<const int>& held, const std::shared_ptr<const int>& wake);
  // The eventfd of a relay's queue (shared with the processes that read it), else null.
  std::shared_ptr<const int> wake() const noexcept;
  // Whether this queue is a relay's (fed now or once).
  bool relayed() const noexcept;
  // Whether a relay still adds bytes: a reader that finds none waits rather than reading the kernel.
  bool fed() const noexcept;
  // Bytes to read, or the last word (end, error, the kernel's turn): poll's POLLIN.
  bool readable() const noexcept;
  // A reader that found nothing: waits up to `timeout_ms` (-1: for ever) for the relay's bell, after
  // making sure nothing came meanwhile. 1: rung (or something came); 0: timed out; -1: poll's error
  // (EINTR).
  int wait_for_bytes(int timeout_ms);
  // The same, for poll: true when the queue is readable now; else the bell is emptied (a ring after
  // this look wakes the caller) and the caller sleeps on wake().
  bool readable_or_arm();
  // The process that feeds the queue is gone (killed: one that exits or execs ends the feeding first).
  bool feeder_gone() const noexcept;
  // The feeder's side, with feed_lock() held: the free space up to `window` bytes queued (two pieces
  // around the ring's end), then how much of it was filled.
  int feed_space(iovec out[2], size_t window);
  void commit(size_t n);
  // No more bytes come from the relay: `then` follows them (`error` its errno). Rings the bell.
  void finish(Then then, int error = 0);
  // Waits up to `timeout_ms` while `window` bytes or more are queued, for a reader to take some.
  void wait_room(size_t window, int timeout_ms);
  // Ends a wait_room at once (the relay is asked to stop).
  void wake_feeder();
  // Held around each read from the stream and its commit, and by set() on a fed queue: the bytes a
  // failover adds come after every byte the relay took off the stream.
  std::mutex& feed_lock() noexcept { return feed_mutex_; }

 private:
  struct Shared;
  bool publish(void* memory, size_t length, const std::vector<uint8_t>& bytes, bool then_end);
  bool map_memfd(size_t capacity, const char* name, void** memory, size_t* length);
  bool adopt_mapping(const std::shared_ptr<const int>& held);
  bool append_and_finish(const std::vector<uint8_t>& bytes, bool then_end);
  void ring_bell() const noexcept;
  std::atomic<Shared*> shared_{nullptr};
  size_t mapped_ = 0;
  bool replaceable() const noexcept;  // no prefix yet, or one read to its end
  // Set before shared_ is published; null for an anonymous mapping (set()).
  std::atomic<std::shared_ptr<const int>> memfd_;
  std::atomic<std::shared_ptr<const int>> wake_;  // a relay's eventfd
  std::mutex feed_mutex_;
};

// A memfd held by prefixes and answers (HandBack::shared_prefix): closed when the last one goes.
std::shared_ptr<const int> hold_memfd(int fd);

}  // namespace tcp2rdma::preload
