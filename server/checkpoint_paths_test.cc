#include "server/checkpoint_paths.h"

#include "gtest/gtest.h"

namespace trainyard::server {
namespace {

// A store that moved with its state dir: the job's directory and its
// checkpoints' paths follow the root it runs under now.
TEST(CheckpointPathsTest, AJobsPathsFollowTheCurrentRoot) {
  v1::Job job;
  job.set_id("j-000007");
  job.set_checkpoint_dir("/old/state/checkpoints/j-000007");
  job.mutable_last_checkpoint()->set_path(
      "/old/state/checkpoints/j-000007/step-00000300");
  job.mutable_result()->set_checkpoint_path(
      "/old/state/checkpoints/j-000007/step-00000300");
  job.mutable_result()->set_best_checkpoint_path(
      "/old/state/checkpoints/j-000007/step-00000200");
  job.mutable_spec()->mutable_warm_start()->set_job("j-000003");
  job.set_warm_start_checkpoint(
      "/old/state/checkpoints/j-000003/step-00000100");
  PlaceCheckpointsUnder("/new/ckpt", job);
  EXPECT_EQ(job.checkpoint_dir(), "/new/ckpt/j-000007");
  EXPECT_EQ(job.last_checkpoint().path(), "/new/ckpt/j-000007/step-00000300");
  EXPECT_EQ(job.result().checkpoint_path(), "/new/ckpt/j-000007/step-00000300");
  EXPECT_EQ(job.result().best_checkpoint_path(),
            "/new/ckpt/j-000007/step-00000200");
  EXPECT_EQ(job.warm_start_checkpoint(), "/new/ckpt/j-000003/step-00000100");

  // Whatever was stored, the directory is ROOT/<id>; a path outside the
  // old directory is left as the trainer wrote it.
  job.set_checkpoint_dir("/somewhere/else");
  job.mutable_last_checkpoint()->set_path("/tmp/elsewhere/step-1");
  PlaceCheckpointsUnder("/new/ckpt", job);
  EXPECT_EQ(job.checkpoint_dir(), "/new/ckpt/j-000007");
  EXPECT_EQ(job.last_checkpoint().path(), "/tmp/elsewhere/step-1");

  // A job that never started has no directory; no root changes nothing.
  v1::Job queued;
  queued.set_id("j-000008");
  PlaceCheckpointsUnder("/new/ckpt", queued);
  EXPECT_EQ(queued.checkpoint_dir(), "");
  job.set_checkpoint_dir("/old/j-000007");
  PlaceCheckpointsUnder("", job);
  EXPECT_EQ(job.checkpoint_dir(), "/old/j-000007");
}

}  // namespace
}  // namespace trainyard::server
