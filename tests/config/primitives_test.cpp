// Units, CIDR blocks, port ranges and globs: the pieces rules are built from.
#include <arpa/inet.h>

#include <gtest/gtest.h>

#include "test_endpoint.h"

#include "address_range.h"
#include "glob.h"
#include "options.h"
#include "units.h"

namespace tcp2rdma::config {
namespace {

TEST(Units, Sizes) {
  std::string why;
  EXPECT_EQ(parse_size("4096", &why), 4096u);
  EXPECT_EQ(parse_size("4096B", &why), 4096u);
  EXPECT_EQ(parse_size("64KiB", &why), 64 * kKiB);
  EXPECT_EQ(parse_size("64 KiB", &why), 64 * kKiB);
  EXPECT_EQ(parse_size("3MiB", &why), 3 * kMiB);
  EXPECT_EQ(parse_size("2GiB", &why), 2048 * kMiB);
  EXPECT_FALSE(parse_size("64KB", &why));
  EXPECT_NE(why.find("unknown unit 'KB'"), std::string::npos);
  EXPECT_FALSE(parse_size("-1", &why));
  EXPECT_FALSE(parse_size("KiB", &why));
  EXPECT_FALSE(parse_size("99999999999999999999", &why));
  EXPECT_FALSE(parse_size("17179869184GiB", &why));  // overflows 64 bits
  EXPECT_NE(why.find("too large"), std::string::npos);
}

TEST(Units, DurationsNeedAUnit) {
  std::string why;
  EXPECT_EQ(parse_duration_us("250us", &why), 250u);
  EXPECT_EQ(parse_duration_us("5ms", &why), 5000u);
  EXPECT_EQ(parse_duration_us("2s", &why), 2000000u);
  EXPECT_EQ(parse_duration_us("1m", &why), 60000000u);
  EXPECT_FALSE(parse_duration_us("5", &why));
  EXPECT_NE(why.find("needs a unit"), std::string::npos);
  EXPECT_FALSE(parse_duration_us("5h", &why));
}

TEST(Units, FormattingPicksTheLargestExactUnit) {
  EXPECT_EQ(format_size(64 * kKiB), "64KiB");
  EXPECT_EQ(format_size(1000), "1000B");
  EXPECT_EQ(format_size(0), "0B");
  EXPECT_EQ(format_duration_us(5000), "5ms");
  EXPECT_EQ(format_duration_us(1500), "1500us");
  EXPECT_EQ(format_duration_us(120000000), "2m");
}

bool cidr_contains(const char* cidr_text, const char* host) {
  std::string why;
  auto cidr = parse_cidr(cidr_text, &why);
  EXPECT_TRUE(cidr.has_value()) << why;
  sockaddr_storage s = endpoint(host, 1);
  Ip6 ip{};
  uint16_t port = 0;
  EXPECT_TRUE(to_ip6(reinterpret_cast<sockaddr*>(&s), &ip, &port));
  return cidr && cidr->contains(ip);
}

TEST(Cidr, Ipv4) {
  EXPECT_TRUE(cidr_contains("10.0.0.0/8", "10.255.1.2"));
  EXPECT_FALSE(cidr_contains("10.0.0.0/8", "11.0.0.1"));
  EXPECT_TRUE(cidr_contains("10.77.0.0/23", "10.77.1.9"));
  EXPECT_FALSE(cidr_contains("10.77.0.0/23", "10.77.2.0"));
  EXPECT_TRUE(cidr_contains("0.0.0.0/0", "192.0.2.1"));
  EXPECT_TRUE(cidr_contains("192.0.2.7", "192.0.2.7"));  // a host
  EXPECT_FALSE(cidr_contains("192.0.2.7", "192.0.2.8"));
}

TEST(Cidr, Ipv6AndMappedAddressesMatchAcrossFamilies) {
  EXPECT_TRUE(cidr_contains("fd00::/8", "fd12::1"));
  EXPECT_FALSE(cidr_contains("fd00::/8", "fe80::1"));
  EXPECT_TRUE(cidr_contains("::1/128", "::1"));
  EXPECT_TRUE(cidr_contains("10.0.0.0/8", "::ffff:10.1.2.3"));      // v4 rule, v4-mapped peer
  EXPECT_TRUE(cidr_contains("::ffff:10.0.0.0/104", "10.9.9.9"));    // mapped rule, v4 peer
  EXPECT_FALSE(cidr_contains("0.0.0.0/0", "2001:db8::1"));          // v4 "everything" is not v6
  EXPECT_TRUE(cidr_contains("::/0", "10.0.0.1"));                   // v6 "everything" includes mapped v4
}

TEST(Cidr, Mistakes) {
  std::string why;
  EXPECT_FALSE(parse_cidr("10.0.0.0/33", &why));
  EXPECT_FALSE(parse_cidr("fd00::/129", &why));
  EXPECT_FALSE(parse_cidr("10.0.0/8", &why));
  EXPECT_FALSE(parse_cidr("10.0.0.0/", &why));
  EXPECT_FALSE(parse_cidr("10.1.2.3/8", &why));
  EXPECT_NE(why.find("did you mean 10.0.0.0/8"), std::string::npos) << why;
  EXPECT_FALSE(parse_cidr("example.com", &why));
}

TEST(Cidr, PrintsInTheFamilyItWasWritten) {
  std::string why;
  EXPECT_EQ(parse_cidr("10.77.0.0/24", &why)->to_string(), "10.77.0.0/24");
  EXPECT_EQ(parse_cidr("fd00::/8", &why)->to_string(), "fd00::/8");
}

TEST(PortRange, SinglesRangesAndMistakes) {
  std::string why;
  auto one = parse_port_range("5201", &why);
  ASSERT_TRUE(one);
  EXPECT_TRUE(one->contains(5201));
  EXPECT_FALSE(one->contains(5202));
  auto range = parse_port_range("5000-5100", &why);
  ASSERT_TRUE(range);
  EXPECT_TRUE(range->contains(5000));
  EXPECT_TRUE(range->contains(5100));
  EXPECT_FALSE(range->contains(5101));
  EXPECT_TRUE(parse_port_range("1-65535", &why));
  EXPECT_FALSE(parse_port_range("0", &why));
  EXPECT_FALSE(parse_port_range("65536", &why));
  EXPECT_FALSE(parse_port_range("5100-5000", &why));
  EXPECT_NE(why.find("reversed"), std::string::npos);
  EXPECT_FALSE(parse_port_range("5000-", &why));
  EXPECT_FALSE(parse_port_range("http", &why));
}

TEST(Glob, Patterns) {
  EXPECT_TRUE(glob_match("iperf3", "iperf3"));
  EXPECT_FALSE(glob_match("iperf3", "iperf"));
  EXPECT_TRUE(glob_match("iperf*", "iperf"));
  EXPECT_TRUE(glob_match("iperf*", "iperf3"));
  EXPECT_TRUE(glob_match("*", ""));
  EXPECT_TRUE(glob_match("n?", "nc"));
  EXPECT_FALSE(glob_match("n?", "n"));
  EXPECT_TRUE(glob_match("redis-[sc]*", "redis-server"));
  EXPECT_FALSE(glob_match("redis-[!sc]*", "redis-server"));
  EXPECT_TRUE(glob_match("[a-c]x", "bx"));
  EXPECT_TRUE(glob_match("/usr/bin/*", "/usr/bin/nc.openbsd"));
  EXPECT_TRUE(glob_match("*a*b*c", "xaxxbxxxc"));
  EXPECT_FALSE(glob_match("*a*b*c", "xaxxbxxxcd"));
  EXPECT_TRUE(glob_valid("redis-[sc]*"));
  EXPECT_FALSE(glob_valid("redis-[sc"));
  EXPECT_FALSE(glob_valid(""));
}

}  // namespace
}  // namespace tcp2rdma::config
