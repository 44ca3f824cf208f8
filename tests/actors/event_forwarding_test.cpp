// tests/actors/event_forwarding_test.cpp — a learner node's event lines on their way to the
// syncer's copy (<run_dir>/nodes/<node>.events.jsonl): the sender's buffer
// (actors/nodes/event_forwarder.hpp) keeps a batch until the syncer answers it, and the
// receiver (node_recorder::forward) drops the part of a resent batch it already wrote. No
// sockets or CAF: the link's fate is an answered() / unanswered() call.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "actors/nodes/event_forwarder.hpp"
#include "actors/services/recorder.hpp"

namespace dd::actors {
namespace {

namespace fs = std::filesystem;

std::string read_all(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct temp_dir {
  fs::path path;
  temp_dir() {
    path = fs::temp_directory_path() /
           ("dd_event_forwarding_" +
            std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~temp_dir() { fs::remove_all(path); }
};

// The lines logged just before a pause went out in a batch on a link that was dead when the
// node woke up: no answer came, so the same lines (same offset) go out again after the rejoin.
TEST(event_forwarding, lines_sent_on_a_dead_link_are_sent_again_after_the_rejoin) {
  event_forwarder f;
  f.add("{\"event\":\"fault\"}\n");
  f.add("{\"event\":\"nonfinite\"}\n");
  auto b = f.next();
  ASSERT_TRUE(b);
  EXPECT_EQ(b->offset, 0u);
  EXPECT_EQ(b->lines, "{\"event\":\"fault\"}\n{\"event\":\"nonfinite\"}\n");
  EXPECT_TRUE(f.in_flight());
  EXPECT_FALSE(f.next()) << "one batch at a time";
  f.add("{\"event\":\"syncer_back\"}\n");  // logged while the link was down
  f.unanswered(b->id);
  auto again = f.next();
  ASSERT_TRUE(again);
  EXPECT_EQ(again->offset, 0u);
  EXPECT_EQ(again->lines,
            "{\"event\":\"fault\"}\n{\"event\":\"nonfinite\"}\n{\"event\":\"syncer_back\"}\n");
  f.answered(again->id);
  EXPECT_EQ(f.buffered(), 0u);
  EXPECT_FALSE(f.next());
  EXPECT_EQ(f.dropped(), 0u);
}

// An answered batch leaves the buffer; the next one starts where it ended.
TEST(event_forwarding, an_answered_batch_leaves_the_buffer_and_the_next_starts_after_it) {
  event_forwarder f;
  f.add("a\n");
  auto b = f.next();
  ASSERT_TRUE(b);
  f.add("bb\n");
  f.answered(b->id);
  auto c = f.next();
  ASSERT_TRUE(c);
  EXPECT_EQ(c->offset, 2u);
  EXPECT_EQ(c->lines, "bb\n");
  // A late answer to an older batch changes nothing.
  f.answered(b->id);
  EXPECT_EQ(f.buffered(), 3u);
  f.unanswered(b->id);
  EXPECT_TRUE(f.in_flight());
}

// The last sends before the node exits stop waiting for the batch in flight and send its lines
// again; an answer to the abandoned batch that comes after that changes nothing.
TEST(event_forwarding, abandon_sends_the_batch_in_flight_again) {
  event_forwarder f;
  f.add("a\n");
  auto b = f.next();
  ASSERT_TRUE(b);
  f.abandon();
  auto c = f.next();
  ASSERT_TRUE(c);
  EXPECT_EQ(c->offset, 0u);
  EXPECT_EQ(c->lines, "a\n");
  f.answered(b->id);
  EXPECT_EQ(f.buffered(), 2u);
  f.answered(c->id);
  EXPECT_EQ(f.buffered(), 0u);
}

// Batches hold whole lines up to the batch cap; a line longer than a batch is dropped and
// counted; beyond the buffer's cap lines are dropped and counted.
TEST(event_forwarding, batches_cut_at_whole_lines_and_caps_count_what_they_drop) {
  event_forwarder f(/*cap=*/24, /*batch_cap=*/8);
  f.add("aaa\n");
  f.add("bbb\n");
  f.add("ccc\n");
  f.add("0123456789\n");  // 23 bytes buffered
  f.add("dd\n");          // over the cap of 24
  EXPECT_EQ(f.dropped(), 1u);
  auto b = f.next();
  ASSERT_TRUE(b);
  EXPECT_EQ(b->lines, "aaa\nbbb\n");
  f.answered(b->id);
  b = f.next();
  ASSERT_TRUE(b);
  EXPECT_EQ(b->lines, "ccc\n");
  f.answered(b->id);
  EXPECT_FALSE(f.next()) << "the 11-byte line never fits an 8-byte batch";
  EXPECT_EQ(f.dropped(), 2u);
  f.add("e\n");
  b = f.next();
  ASSERT_TRUE(b);
  EXPECT_EQ(b->offset, 23u);
  EXPECT_EQ(b->lines, "e\n");
}

TEST(event_forwarding, the_receiver_writes_only_what_is_new_in_a_batch) {
  EXPECT_EQ(event_stream_new_from(std::nullopt, 40, 10), 0u);  // a stream not seen yet
  EXPECT_EQ(event_stream_new_from(40, 40, 10), 0u);            // the next batch
  EXPECT_EQ(event_stream_new_from(45, 40, 10), 5u);            // half of it written
  EXPECT_EQ(event_stream_new_from(50, 40, 10), 10u);           // all of it written
  EXPECT_EQ(event_stream_new_from(90, 40, 10), 10u);           // an old batch late
  EXPECT_EQ(event_stream_new_from(30, 40, 10), 0u);            // a gap (lines dropped)
}

// The syncer side: a batch sent again (its answer was lost) adds no duplicate line; a new
// process of the same node (another stream) appends all of its lines.
TEST(event_forwarding, a_resent_batch_adds_no_duplicate_line_to_the_syncers_copy) {
  temp_dir d;
  node_recorder r(nullptr, "", d.path.string());
  ASSERT_TRUE(r.forward("learner-0", "a\nb\n", "s1", 0));
  ASSERT_TRUE(r.forward("learner-0", "a\nb\nc\n", "s1", 0));
  ASSERT_TRUE(r.forward("learner-0", "a\nb\n", "s1", 0));  // a stale copy, late
  ASSERT_TRUE(r.forward("learner-0", "d\n", "s1", 6));
  ASSERT_TRUE(r.forward("learner-0", "a\n", "s2", 0));  // the node restarted
  ASSERT_TRUE(r.forward("learner-0", "x\n"));           // no stream: always written
  EXPECT_EQ(read_all(d.path / "learner-0.events.jsonl"), "a\nb\nc\nd\na\nx\n");
}

// Regression: learner_loss.csv was stamped with the syncer's clock when a heartbeat arrived, so a
// syncer that stalled 1.4 s on a loaded host made every learner look stopped (global downtime in
// dd-chaos report) while they stepped. A row carries the learner's own step-end time; a
// heartbeat without one (0) gets the syncer's clock.
TEST(recorder, a_learner_loss_row_carries_the_learners_step_end_time) {
  temp_dir d;
  const fs::path csv = d.path / "learner_loss.csv";
  {
    node_recorder r(nullptr, csv.string(), "");
    r.loss_row(1796598000.125, 2, 1, 40, 5120, 2.5, 3e-3);
    r.loss_row(0.0, 0, 0, 41, 5248, 2.25, 3e-3);
  }
  std::istringstream in(read_all(csv));
  std::string header, first, second;
  std::getline(in, header);
  std::getline(in, first);
  std::getline(in, second);
  EXPECT_EQ(header, "wall_time,learner,incarnation,step,tokens,loss,lr");
  EXPECT_EQ(first, "1796598000.125,2,1,40,5120,2.500000,0.003");
  const double stamped = std::stod(second.substr(0, second.find(',')));
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  EXPECT_NEAR(stamped, now, 5.0) << second;
  EXPECT_EQ(second.substr(second.find(',')), ",0,0,41,5248,2.250000,0.003");
}

}  // namespace
}  // namespace dd::actors
