// ByteSource: a write call's iovecs read in order, gathered across pieces (transport/byte_source.h).
#include "byte_source.h"

#include <gtest/gtest.h>

#include <string>

namespace tcp2rdma::transport {
namespace {

iovec piece(std::string& s) { return {s.data(), s.size()}; }

TEST(ByteSource, GathersAcrossPiecesAndSkipsEmptyOnes) {
  std::string a = "VALUE k 0 5\r\n", b, c = "hello", d = "\r\nEND\r\n";
  iovec iov[] = {piece(a), piece(b), piece(c), piece(d)};
  ByteSource src(iov, 4);
  EXPECT_EQ(src.left(), a.size() + c.size() + d.size());
  EXPECT_FALSE(src.one_piece());
  std::string out(src.left(), '\0');
  auto* dst = reinterpret_cast<uint8_t*>(out.data());
  src.copy_to(dst, 10);        // inside the first piece
  src.copy_to(dst + 10, 6);    // the first's end, past the empty one, into the third
  src.copy_to(dst + 16, out.size() - 16);
  EXPECT_EQ(out, a + c + d);
  EXPECT_EQ(src.left(), 0u);
  EXPECT_TRUE(src.one_piece());
}

TEST(ByteSource, SkipsLikeACopyAndKnowsWhenOnePieceIsLeft) {
  std::string a = "abc", b = "defgh";
  iovec iov[] = {piece(a), piece(b)};
  ByteSource src(iov, 2);
  src.skip(2);
  EXPECT_EQ(*src.here(), 'c');
  EXPECT_FALSE(src.one_piece());
  src.skip(1);
  EXPECT_TRUE(src.one_piece());
  EXPECT_EQ(*src.here(), 'd');
  uint8_t rest[5];
  src.copy_to(rest, 5);
  EXPECT_EQ(std::string(reinterpret_cast<char*>(rest), 5), b);
}

TEST(ByteSource, NoPiecesIsNothingLeft) {
  ByteSource none(nullptr, 0);
  EXPECT_EQ(none.left(), 0u);
  EXPECT_TRUE(none.one_piece());
  std::string empty;
  iovec iov[] = {piece(empty), piece(empty)};
  ByteSource blanks(iov, 2);
  EXPECT_EQ(blanks.left(), 0u);
}

}  // namespace
}  // namespace tcp2rdma::transport
