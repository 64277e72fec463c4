// The transport opens libibverbs and librdmacm on its first call to them (rdma_libraries.h). This
// program links neither library, as the module does not: they come in through that call alone.
#include "rdma_libraries.h"

#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <cerrno>
#include <fstream>
#include <sstream>

namespace tcp2rdma::transport {
namespace {

bool mapped(const char* library) {
  std::ifstream maps("/proc/self/maps");
  std::stringstream text;
  text << maps.rdbuf();
  return text.str().find(library) != std::string::npos;
}

TEST(RdmaLibraries, OpenedByTheFirstCallNotBefore) {
  EXPECT_FALSE(mapped("/libibverbs.so"));
  EXPECT_FALSE(mapped("/librdmacm.so"));
  errno = 0;
  rdma_event_channel* channel = rdma_create_event_channel();  // the forwarder, then librdmacm's
  int error = errno;
  EXPECT_TRUE(mapped("/libibverbs.so"));
  EXPECT_TRUE(mapped("/librdmacm.so"));
  std::string why = "unchanged";
  EXPECT_TRUE(rdma_libraries_loaded(&why));
  EXPECT_EQ(why, "unchanged");  // said only when they are missing
  if (channel != nullptr) {
    rdma_destroy_event_channel(channel);
  } else {
    // A host without RDMA: librdmacm's own failure, not the forwarder's "no library" (ENOSYS).
    EXPECT_NE(error, ENOSYS);
  }
}

TEST(RdmaLibraries, AForwarderReturnsWhatTheLibrarysFunctionReturns) {
  // Pure functions of libibverbs: its own texts arrive, not the forwarder's fallback.
  EXPECT_STREQ(ibv_wc_status_str(IBV_WC_SUCCESS), "success");
  EXPECT_STREQ(ibv_wc_status_str(IBV_WC_RETRY_EXC_ERR), "transport retry counter exceeded");
}

}  // namespace
}  // namespace tcp2rdma::transport
