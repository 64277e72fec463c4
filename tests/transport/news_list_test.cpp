// A poller's news list (news_list.h) on the host: each channel named once until taken, in order, the
// eventfd readable exactly while something is listed, and a forked child's list its own.
#include "news_list.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "channel_readiness.h"

namespace tcp2rdma::transport {
namespace {

// The module's descriptors live above the application's soft RLIMIT_NOFILE (own_descriptors.h): with
// the soft limit at the hard one and no privilege to raise it, there is no room for them. Half the
// hard limit leaves room, as most applications' limits do.
class NewsListEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    rlimit r{};
    ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &r), 0);
    if (r.rlim_cur + 64 > r.rlim_max) r.rlim_cur = r.rlim_max / 2;
    ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &r), 0);
  }
};
const auto* const g_environment = ::testing::AddGlobalTestEnvironment(new NewsListEnvironment);

bool readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) == 1;
}

TEST(NewsList, EachTagIsListedOnceUntilTakenAndTheEventfdSaysWhetherAnyIs) {
  NewsList list;
  ASSERT_TRUE(list.make());
  int a = 0, b = 0;
  EXPECT_FALSE(readable(list.fd()));
  list.push(&a);
  list.push(&b);
  list.push(&a);  // a link's progress may tell a channel many times before the poller looks
  EXPECT_TRUE(readable(list.fd()));
  std::vector<void*> tags;
  ASSERT_TRUE(list.take(&tags));
  ASSERT_EQ(tags.size(), 2u);
  EXPECT_EQ(tags[0], &a);
  EXPECT_EQ(tags[1], &b);
  EXPECT_FALSE(readable(list.fd()));
  // News during the taker's look is listed again.
  list.push(&a);
  EXPECT_TRUE(readable(list.fd()));
  ASSERT_TRUE(list.take(&tags));
  ASSERT_EQ(tags.size(), 1u);
  ASSERT_TRUE(list.take(&tags));
  EXPECT_TRUE(tags.empty());
}

// A poll call's round (stream_sleeper.h, take_news_for_looks): its own looks' news writes no eventfd,
// another thread's news while the list holds some writes none either, and end_take() says there is
// news to look at; once it ended, a push wakes the sleeper again.
TEST(NewsList, ALooksOwnNewsWritesNoEventfdAndEndTakeSaysItIsThere) {
  NewsList list;
  ASSERT_TRUE(list.make());
  int a = 0, b = 0;
  std::vector<void*> tags;
  list.take(&tags);
  list.begin_take();
  list.push(&a);
  EXPECT_FALSE(readable(list.fd()));
  std::thread([&] { list.push(&b); }).join();  // the list was not quiet: no write either
  EXPECT_FALSE(readable(list.fd()));
  EXPECT_TRUE(list.end_take());
  EXPECT_TRUE(list.take(&tags));
  EXPECT_EQ(tags, (std::vector<void*>{&a, &b}));
  list.begin_take();
  EXPECT_FALSE(list.end_take());  // nothing came: the caller may sleep
  list.push(&a);                  // after the round, the thread's own push wakes its next sleep
  EXPECT_TRUE(readable(list.fd()));
}

TEST(NewsList, NewsPushedBeforeTheEventfdIsMadeMakesItReadable) {
  NewsList list;
  int a = 0;
  list.push(&a);
  ASSERT_TRUE(list.make());
  EXPECT_TRUE(readable(list.fd()));
}

TEST(NewsList, AChannelTellsEverySubscribedListAndNoneAfterItLeft) {
  NewsList first, second;
  ASSERT_TRUE(first.make() && second.make());
  ChannelReadiness channel;
  int tag1 = 0, tag2 = 0;
  ASSERT_TRUE(channel.subscribe(&first, &tag1));
  ASSERT_TRUE(channel.subscribe(&second, &tag2));
  channel.look_again();
  std::vector<void*> tags;
  first.take(&tags);
  EXPECT_EQ(tags, std::vector<void*>{&tag1});
  second.take(&tags);
  EXPECT_EQ(tags, std::vector<void*>{&tag2});
  // One subscription a tag: subscribing tag1 again moves it.
  ASSERT_TRUE(channel.subscribe(&second, &tag1));
  channel.unsubscribe(&tag2);
  channel.look_again();
  first.take(&tags);
  EXPECT_TRUE(tags.empty());
  second.take(&tags);
  EXPECT_EQ(tags, std::vector<void*>{&tag1});
}

// The child's copy of a list shares the parent's eventfd (one open file): without a list of its own,
// the child's take would drain the parent's news, and the parent's poller would sleep beside it.
TEST(NewsList, AForkedChildMakesItsOwnEventfdSoThatItsTakesLeaveTheParentsNews) {
  NewsList list;
  ASSERT_TRUE(list.make());
  int tag = 0;
  list.push(&tag);  // the parent's news, not yet taken
  ASSERT_TRUE(readable(list.fd()));
  pid_t pid = fork();
  if (pid == 0) {
    news_lists_after_fork();
    if (!list.make()) _exit(1);
    int child_tag = 0;
    list.push(&child_tag);
    std::vector<void*> tags;
    list.take(&tags);
    _exit(tags.size() == 1 && tags[0] == &child_tag ? 0 : 2);  // the child's own news only
  }
  ASSERT_GT(pid, 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_TRUE(readable(list.fd()));
  std::vector<void*> tags;
  list.take(&tags);
  EXPECT_EQ(tags, std::vector<void*>{&tag});
}

}  // namespace
}  // namespace tcp2rdma::transport
