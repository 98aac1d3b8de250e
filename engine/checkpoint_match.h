// Whether the checkpoint a run would resume from was written for the run's
// own spec, told before any training: a checkpoint of another model (a
// spec edited between runs, a checkpoint dir reused) is the request's
// mistake and fails again however often it is tried, so yard-train refuses
// it as a bad spec (exit 2) with what differs, not as a run failure.
// Reads meta.json only; the tensors are checked again when the trainer
// restores them. Thread-safe (reads files only).
#ifndef TRAINYARD_ENGINE_CHECKPOINT_MATCH_H_
#define TRAINYARD_ENGINE_CHECKPOINT_MATCH_H_

#include <vector>

#include "absl/status/status.h"
#include "engine/core/model.h"
#include "engine/job_config.h"

namespace trainyard::engine {

// OK when job.trainer.checkpoint.dir holds no checkpoint with a readable
// meta.json, or its newest one was written for this spec (same fingerprint).
// INVALID_ARGUMENT otherwise, naming the checkpoint and what differs: the
// model's sizes (model.gpt.*), else the first tensor whose shape differs
// from `parameters`' (this job's model), else the parts of the spec the
// fingerprint covers. Also INVALID_ARGUMENT when it was written by a run of
// another number of data-parallel ranks than `world_size`: every rank holds
// the whole AdamW state and the data cursor counts examples, so such a
// resume would run, but on a global batch (micro_batch x grad_accum x
// ranks) other than the one the run so far trained with, silently; a run
// that means to change it warm-starts from the checkpoint instead.
// Checkpoints written before the rank count was kept pass. Errors listing
// the dir are returned as they are.
absl::Status CheckCheckpointMatchesSpec(
    const EngineJob& job, const std::vector<Parameter>& parameters,
    int world_size);

}  // namespace trainyard::engine

#endif  // TRAINYARD_ENGINE_CHECKPOINT_MATCH_H_
