// On a host without RDMA (the project's build machines have none): setup says so with its own status,
// which the preload layer takes as "stay on TCP".
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "rdma_stream.h"
#include "stream_listener.h"

namespace tcp2rdma::transport {
namespace {

bool host_has_rdma() {
  std::error_code ec;
  auto it = std::filesystem::directory_iterator("/sys/class/infiniband", ec);
  return !ec && it != std::filesystem::directory_iterator();
}

sockaddr_in loopback(uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

TEST(NoDevice, ConnectSaysNoDevice) {
  if (host_has_rdma()) GTEST_SKIP() << "this host has an RDMA device";
  sockaddr_in a = loopback(7499);
  std::unique_ptr<RdmaStream> s;
  EXPECT_EQ(RdmaStream::connect(reinterpret_cast<sockaddr*>(&a), Pairing{}, StreamOptions{}, &s), Status::kNoDevice);
  EXPECT_EQ(s, nullptr);
}

TEST(NoDevice, ListenSaysNoDevice) {
  if (host_has_rdma()) GTEST_SKIP() << "this host has an RDMA device";
  sockaddr_in a = loopback(7499);
  std::unique_ptr<StreamListener> l;
  EXPECT_EQ(StreamListener::listen(reinterpret_cast<sockaddr*>(&a), StreamOptions{}, &l), Status::kNoDevice);
}

TEST(Options, InvalidOptionsAreRefusedBeforeAnyDeviceIsTouched) {
  sockaddr_in a = loopback(7499);
  std::unique_ptr<RdmaStream> s;
  StreamOptions bad;
  bad.ring_size_log2 = 31;
  EXPECT_EQ(RdmaStream::connect(reinterpret_cast<sockaddr*>(&a), Pairing{}, bad, &s), Status::kInvalid);
  bad = StreamOptions{};
  bad.recv_queue_depth = 300;  // the setup carries it in one byte
  EXPECT_EQ(RdmaStream::connect(reinterpret_cast<sockaddr*>(&a), Pairing{}, bad, &s), Status::kInvalid);
}

}  // namespace
}  // namespace tcp2rdma::transport
