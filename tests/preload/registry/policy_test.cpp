// The decision and its log line for connections made through the wrappers (linked into this program).
// Each TEST runs in its own process with its own TCP2RDMA_LOG file (tests/preload/registry/CMakeLists.txt): the
// module decides where it logs when it loads, and loads the rules once per process.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "libc/interposed.h"
#include "test_sockets.h"

namespace {

class Policy : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/t2r-policy-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    const char* log_path = std::getenv("TCP2RDMA_LOG");
    ASSERT_NE(log_path, nullptr) << "run through ctest, which sets TCP2RDMA_LOG";
    log_ = log_path;
    std::ofstream(log_, std::ios::trunc);  // the module appends: this run's lines only
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }
  void use_rules(const std::string& yaml) {
    std::ofstream(dir_ + "/rules.yaml") << yaml;
    setenv("TCP2RDMA_RULES", (dir_ + "/rules.yaml").c_str(), 1);
  }
  std::string log() {
    std::ostringstream text;
    text << std::ifstream(log_).rdbuf();
    return text.str();
  }
  // A listener on loopback and a client connected to it (non-blocking connect when asked).
  void connect_pair(bool nonblocking) {
    listener_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    ASSERT_TRUE(tcp2rdma::test::bind_loopback(listener_, &addr));
    ASSERT_EQ(listen(listener_, 1), 0);
    client_ = socket(AF_INET, SOCK_STREAM | (nonblocking ? SOCK_NONBLOCK : 0), 0);
    int rc = connect(client_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    ASSERT_TRUE(rc == 0 || errno == EINPROGRESS);
    server_ = accept(listener_, nullptr, nullptr);
    ASSERT_GE(server_, 0);
    close(client_);
    close(server_);
    close(listener_);
  }
  std::string dir_, log_;
  int listener_ = -1, client_ = -1, server_ = -1;
};

TEST_F(Policy, EachConnectionGetsOneLineNamingItsRule) {
  use_rules("version: 1\nrules:\n  - {name: everything, transport: rdma}\n");
  connect_pair(false);
  std::string text = log();
  EXPECT_NE(text.find("client 127.0.0.1:"), std::string::npos) << text;
  EXPECT_NE(text.find("rule 'built-in: loopback stays tcp' says tcp: stays tcp"), std::string::npos) << text;
  EXPECT_NE(text.find(" server 127.0.0.1:"), std::string::npos) << text;
}

TEST_F(Policy, NonBlockingConnectIsDecidedOnTheAddressItWasGiven) {
  // While the connect is under way the kernel has no peer address: without the connect() argument
  // the loopback rule could not see the peer and "everything" would wrongly decide.
  use_rules("version: 1\nrules:\n  - {name: everything, transport: rdma}\n");
  connect_pair(true);
  std::string text = log();
  std::string client_line = text.substr(text.find(" client "));
  client_line = client_line.substr(0, client_line.find('\n'));
  EXPECT_NE(client_line.find("-> 127.0.0.1:"), std::string::npos) << client_line;
  EXPECT_NE(client_line.find("loopback stays tcp"), std::string::npos) << client_line;
}

TEST_F(Policy, ABrokenRuleFileIsReportedOnceAndTheProgramCarriesOn) {
  use_rules("version: 1\nrules:\n  - {name: x, transport: warp, buffer_size: 3MiB}\n");
  connect_pair(false);
  connect_pair(true);
  std::string text = log();
  size_t first = text.find("rules: ");
  ASSERT_NE(first, std::string::npos) << text;
  EXPECT_EQ(text.find("rules: ", first + 1), std::string::npos) << "reported more than once:\n" << text;
  EXPECT_NE(text.find("unknown transport 'warp'"), std::string::npos);
  EXPECT_NE(text.find("(and 1 more); every connection stays TCP"), std::string::npos) << text;
}

}  // namespace
