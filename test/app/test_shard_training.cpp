// Training on sharded token files: a folder or a glob of .bin shards trains exactly
// as one file holding their concatenation, a run resumes on a stream that grew by a shard, and
// bad shards are refused with exit 2 and one line naming data.path and the file.
//
// The shards hold the bytes of the King James Bible as token ids (vocab 256), written with
// data/token_file.h's writer, as titan_tokenize would write them.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "data/token_file.h"
#include "support/metrics_file.h"
#include "support/process.h"
#include "support/training_run.h"

using namespace titan;
using namespace titan::testing;

namespace {

namespace fs = std::filesystem;

std::vector<int32_t> kjv_tokens(size_t count) {
  std::ifstream in(source_path("corpus/kjv.txt"), std::ios::binary);
  std::vector<int32_t> tokens;
  for (size_t i = 0; i < count; ++i) tokens.push_back(in.get());
  REQUIRE(in.good());
  return tokens;
}

std::vector<int32_t> slice(const std::vector<int32_t>& tokens, size_t begin, size_t end) {
  return {tokens.begin() + static_cast<std::ptrdiff_t>(begin),
          tokens.begin() + static_cast<std::ptrdiff_t>(end)};
}

std::string shard_dir(const std::string& name) {
  const std::string dir = scratch_dir("shard_training") + "/" + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

}  // namespace

TEST_SUITE("check") {
  TEST_CASE("shards: a folder or a glob of shards trains exactly as their concatenation") {
    const std::vector<int32_t> tokens = kjv_tokens(40000);
    const std::string one = shard_dir("one_file");
    data::write_token_file(one + "/all.bin", tokens, 256, 2);
    const std::string dir = shard_dir("three_shards");
    // Uneven sizes and widths; written last-first, read in name order.
    data::write_token_file(dir + "/shard_00002.bin", slice(tokens, 27000, 40000), 256, 2);
    data::write_token_file(dir + "/shard_00001.bin", slice(tokens, 10001, 27000), 256, 4);
    data::write_token_file(dir + "/shard_00000.bin", slice(tokens, 0, 10001), 256, 2);

    const std::string flags = "--training.steps 3 --training.seq_len 64 --data.path ";
    const TrainingRun file = train_debug_model("shard_training", "file", flags + one + "/all.bin");
    const TrainingRun folder = train_debug_model("shard_training", "folder", flags + dir);
    const TrainingRun glob =
        train_debug_model("shard_training", "glob", flags + "'" + dir + "/shard_*.bin'");
    REQUIRE(file.losses.size() == 3);
    CHECK(folder.losses == file.losses);
    CHECK(glob.losses == file.losses);
    CHECK(folder.process.out.find(dir + " (3 shards shard_00000.bin … shard_00002.bin, 40000 "
                                        "tokens, vocab 256): 624 windows") != std::string::npos);
  }

  TEST_CASE("shards: a run resumes on a stream that grew by a shard at its end") {
    const std::vector<int32_t> tokens = kjv_tokens(30000);
    const std::string dir = shard_dir("growing");
    const std::string dump = shard_dir("growing_outputs");
    data::write_token_file(dir + "/shard_00000.bin", slice(tokens, 0, 10000), 256, 2);
    data::write_token_file(dir + "/shard_00001.bin", slice(tokens, 10000, 20000), 256, 2);
    const std::string flags = "--training.seq_len 64 --data.path " + dir +
                              " --checkpoint.enable true --checkpoint.interval 2"
                              " --job.dump_folder " +
                              dump;
    const TrainingRun first =
        train_debug_model("shard_training", "before_growth", "--training.steps 2 " + flags);
    CHECK(first.process.out.find("(2 shards") != std::string::npos);
    CHECK(first.process.out.find("312 windows") != std::string::npos);

    data::write_token_file(dir + "/shard_00002.bin", slice(tokens, 20000, 30000), 256, 2);
    const TrainingRun resumed =
        train_debug_model("shard_training", "after_growth", "--training.steps 4 " + flags);
    CHECK(resumed.process.out.find("(3 shards") != std::string::npos);
    CHECK(resumed.process.out.find("468 windows") != std::string::npos);
    CHECK(resumed.process.out.find("checkpoint: resumed") != std::string::npos);
    CHECK(resumed.losses.size() == 2);  // steps 3 and 4
  }

  TEST_CASE("shards: an empty folder or glob — a bad shard and a too-large vocab exit 2") {
    const std::string dir = shard_dir("bad");
    check_train_rejected("--data.path " + dir, {"data.path", "holds no .bin token files"});
    check_train_rejected("--data.path '" + dir + "/*.bin'", {"data.path", "matches no file"});

    data::write_token_file(dir + "/a.bin", kjv_tokens(1000), 256, 2);
    std::ofstream(dir + "/b.bin") << std::string(200, 'x');
    data::write_token_file(dir + "/c.bin", kjv_tokens(1000), 256, 2);
    check_train_rejected("--data.path " + dir,
                         {"data.path", dir + "/b.bin", "no TTTOKENS header", "shard 2 of 3"});

    fs::remove(dir + "/b.bin");
    data::write_token_file(dir + "/b.bin", std::vector<int32_t>(1000, 5), 5000, 2);
    check_train_rejected("--data.path " + dir, {"model.vocab_size: 2048", "3 shards",
                                                "raise model.vocab_size to at least 5000"});
  }
}
