// Shared by the VM test programs of the transport: the checked byte stream, and setup with retries.
#pragma once

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>

#include "rdma_stream.h"
#include "stream_listener.h"

namespace peer_util {

using tcp2rdma::transport::Pairing;
using tcp2rdma::transport::RdmaStream;
using tcp2rdma::transport::Status;
using tcp2rdma::transport::StreamListener;
using tcp2rdma::transport::StreamOptions;

// The byte at position i of stream `seed`: cheap, and any misplaced or repeated byte shows.
inline uint8_t stream_byte(uint64_t seed, uint64_t i) {
  uint64_t x = (i + 1) * 0x9e3779b97f4a7c15ull ^ seed;
  x ^= x >> 31;
  x *= 0xbf58476d1ce4e5b9ull;
  return static_cast<uint8_t>(x >> 56);
}

inline void fill(uint8_t* buf, size_t n, uint64_t seed, uint64_t pos) {
  for (size_t i = 0; i < n; ++i) buf[i] = stream_byte(seed, pos + i);
}

// Index of the first byte that differs from the stream, or n.
inline size_t first_difference(const uint8_t* buf, size_t n, uint64_t seed, uint64_t pos) {
  for (size_t i = 0; i < n; ++i) {
    if (buf[i] != stream_byte(seed, pos + i)) return i;
  }
  return n;
}

inline sockaddr_in ipv4(const char* host, const char* port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(std::atoi(port)));
  if (host != nullptr) inet_pton(AF_INET, host, &addr.sin_addr);
  return addr;
}

inline std::unique_ptr<StreamListener> listen_on(const char* port, const StreamOptions& options) {
  sockaddr_in addr = ipv4(nullptr, port);
  std::unique_ptr<StreamListener> listener;
  if (Status st = StreamListener::listen(reinterpret_cast<sockaddr*>(&addr), options, &listener); st != Status::kOk) {
    std::fprintf(stderr, "listen: %s\n", to_string(st));
  }
  return listener;
}

inline std::unique_ptr<RdmaStream> accept_one(StreamListener& listener, int timeout_s = 60) {
  std::unique_ptr<RdmaStream> s;
  if (Status st = listener.accept_any(std::chrono::seconds(timeout_s), &s); st != Status::kOk) {
    std::fprintf(stderr, "accept: %s\n", to_string(st));
  }
  return s;
}

inline std::unique_ptr<RdmaStream> connect_to(const char* host, const char* port, const StreamOptions& options) {
  sockaddr_in addr = ipv4(host, port);
  Pairing pairing;
  pairing.tuple.family = AF_INET;
  pairing.tuple.server_port = static_cast<uint16_t>(std::atoi(port));
  std::memcpy(pairing.tuple.server_addr, &addr.sin_addr, 4);
  pairing.client_nonce = tcp2rdma::transport::random_nonce();
  std::unique_ptr<RdmaStream> s;
  Status st = Status::kRejected;
  // The server may not be listening yet: retry what that looks like, and nothing else.
  for (int attempt = 0; attempt < 100 && st != Status::kOk; ++attempt) {
    st = RdmaStream::connect(reinterpret_cast<sockaddr*>(&addr), pairing, options, &s);
    if (st != Status::kRejected && st != Status::kNoRoute && st != Status::kTimeout) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  if (st != Status::kOk) std::fprintf(stderr, "connect: %s\n", to_string(st));
  return s;
}

// A second stream to the same server from a client port of its own (the listener refuses a second
// request for one tuple): it opens as a channel on the first one's link.
inline std::unique_ptr<RdmaStream> connect_on_link(const char* host, const char* port, uint16_t client_port,
                                                   const StreamOptions& options) {
  sockaddr_in addr = ipv4(host, port);
  Pairing pairing;
  pairing.tuple.family = AF_INET;
  pairing.tuple.client_port = client_port;
  pairing.tuple.server_port = static_cast<uint16_t>(std::atoi(port));
  std::memcpy(pairing.tuple.server_addr, &addr.sin_addr, 4);
  pairing.client_nonce = tcp2rdma::transport::random_nonce();
  std::unique_ptr<RdmaStream> s;
  if (Status st = RdmaStream::connect(reinterpret_cast<sockaddr*>(&addr), pairing, options, &s); st != Status::kOk) {
    std::fprintf(stderr, "connect on the link: %s\n", to_string(st));
  }
  return s;
}

// The two ends of a test in a pair (or loop) of guests meet through files in the shared work
// directory ($T2R_WORK).
inline std::string work_file(const char* name) {
  const char* work = std::getenv("T2R_WORK");
  return std::string(work != nullptr ? work : "/tmp") + "/" + name;
}

inline void write_work_file(const char* name, const std::string& text) {
  std::string tmp = work_file(name) + ".tmp";
  std::ofstream(tmp) << text << "\n";
  std::rename(tmp.c_str(), work_file(name).c_str());  // whole, or not there
}

inline bool wait_for_work_file(const char* name, int seconds) {
  struct stat st {};
  for (int i = 0; i < seconds * 100; ++i) {
    if (stat(work_file(name).c_str(), &st) == 0) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

inline unsigned long long ull(uint64_t v) { return static_cast<unsigned long long>(v); }

}  // namespace peer_util
