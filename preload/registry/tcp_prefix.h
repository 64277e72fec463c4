// The bytes a connection that moved back from RDMA to TCP still owes its application before the
// kernel's: what the peer had sent on the stream and this side had not read when it moved
// (docs/architecture.md, "Back to TCP"). They live in a shared mapping with a process-shared lock,
// so that a forked child and its parent consume them as they would a socket's queue: each byte goes
// to one reader, whichever process reads first.
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace tcp2rdma::preload {

class TcpPrefix {
 public:
  TcpPrefix() = default;
  ~TcpPrefix();  // this process's mapping goes; the bytes live on in other processes that share it
  TcpPrefix(const TcpPrefix&) = delete;
  TcpPrefix& operator=(const TcpPrefix&) = delete;

  // Called once per move back (a prefix read to its end may be replaced). `then_end`: the peer's sending side had ended on the stream: after the
  // bytes, reads find the end of the stream, whatever the kernel socket holds. False when no memory
  // could be mapped for the bytes (the caller must not go on as if they were there).
  bool set(const std::vector<uint8_t>& bytes, bool then_end);
  // The same, in the mapping of a new memfd that a process forked before can map too (adopt, given
  // shareable()): both then take from one queue, as from the socket's. False with nothing set.
  bool set_shared(const std::vector<uint8_t>& bytes, bool then_end);
  // This socket's prefix is the one set_shared made in another process, in the memfd `held`.
  bool adopt(const std::shared_ptr<const int>& held);
  // The memfd of a prefix made by set_shared or adopt, for a process that is to share it (held above
  // the application's descriptor range, close-on-exec; closed with the last holder), else null.
  std::shared_ptr<const int> shareable() const noexcept;
  // Something to report before the kernel: bytes, or the end after them. One load when there is no
  // prefix (every socket that never moved back), two otherwise.
  bool present() const noexcept;
  // Copies the next bytes into iov (and consumes them unless `peek`); *at_end: none are left and the
  // end follows.
  size_t take(const iovec* iov, int iovcnt, bool peek, bool* at_end);
  // Consumes every byte left (for another process that reads the connection from now on); false, with
  // nothing taken, when there is no memory for them.
  bool take_all(std::vector<uint8_t>* bytes);
  size_t size() const;
  bool then_end() const;

 private:
  struct Shared;
  bool publish(void* memory, size_t length, const std::vector<uint8_t>& bytes, bool then_end);
  std::atomic<Shared*> shared_{nullptr};
  size_t mapped_ = 0;
  bool replaceable() const noexcept;  // no prefix yet, or one read to its end
  // Set before shared_ is published; null for an anonymous mapping (set()).
  std::atomic<std::shared_ptr<const int>> memfd_;
};

// A memfd held by prefixes and answers (HandBack::shared_prefix): closed when the last one goes.
std::shared_ptr<const int> hold_memfd(int fd);

}  // namespace tcp2rdma::preload
