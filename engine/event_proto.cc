// TrainerEvent conversions. See event_proto.h.
#include "engine/event_proto.h"

#include <google/protobuf/util/json_util.h>

#include <type_traits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace trainyard::engine {
namespace {

template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

}  // namespace

trainyard::v1::TrainerEvent ToProto(const TrainerEvent& event) {
  trainyard::v1::TrainerEvent out;
  std::visit(Overloaded{
                 [&](const TrainStartedEvent& e) {
                   auto* p = out.mutable_started();
                   p->set_start_step(e.start_step);
                   p->set_total_steps(e.total_steps);
                   p->set_parameters(e.parameters);
                   p->set_resumed_from(e.resumed_from);
                   p->set_backend(e.backend);
                 },
                 [&](const TrainProgressEvent& e) {
                   auto* p = out.mutable_progress();
                   p->set_step(e.step);
                   p->set_total_steps(e.total_steps);
                   p->set_loss(e.loss);
                   p->set_lr(e.lr);
                   p->set_grad_norm(e.grad_norm);
                   p->set_samples_per_second(e.samples_per_second);
                   p->set_tokens_per_second(e.tokens_per_second);
                   p->set_memory_bytes(e.memory_bytes);
                 },
                 [&](const EvalResultEvent& e) {
                   auto* p = out.mutable_eval();
                   p->set_step(e.step);
                   p->set_loss(e.loss);
                   p->set_accuracy(e.accuracy);
                   p->set_examples(e.examples);
                 },
                 [&](const CheckpointSavedEvent& e) {
                   auto* p = out.mutable_checkpoint();
                   p->set_step(e.step);
                   p->set_path(e.path);
                 },
                 [&](const TrainFinishedEvent& e) {
                   auto* p = out.mutable_finished();
                   p->set_step(e.step);
                   p->set_train_loss(e.train_loss);
                   p->set_eval_loss(e.eval_loss);
                   p->set_eval_accuracy(e.eval_accuracy);
                   p->set_checkpoint_path(e.checkpoint_path);
                   p->set_wall_seconds(e.wall_seconds);
                   p->set_stopped_early(e.stopped_early);
                   p->set_best_checkpoint_path(e.best_checkpoint_path);
                   p->set_best_step(e.best_step);
                   p->set_best_eval_loss(e.best_eval_loss);
                 },
                 [&](const TrainInterruptedEvent& e) {
                   auto* p = out.mutable_interrupted();
                   p->set_step(e.step);
                   p->set_checkpoint_path(e.checkpoint_path);
                 },
             },
             event);
  return out;
}

std::string ToJsonLine(const trainyard::v1::TrainerEvent& event) {
  std::string json;
  // Cannot fail for a message we built ourselves (no Any fields).
  (void)google::protobuf::util::MessageToJsonString(event, &json);
  return json;
}

std::string ToTextLine(const TrainerEvent& event) {
  return std::visit(
      Overloaded{
          [](const TrainStartedEvent& e) {
            return absl::StrFormat(
                "started: step %d of %d, %d parameters, backend %s%s",
                e.start_step, e.total_steps, e.parameters, e.backend,
                e.resumed_from.empty() ? ""
                                       : ", resumed from " + e.resumed_from);
          },
          [](const TrainProgressEvent& e) {
            return absl::StrFormat(
                "step %d/%d  loss %.4f  lr %.3e  grad_norm %.3f  %.0f "
                "samples/s%s",
                e.step, e.total_steps, e.loss, e.lr, e.grad_norm,
                e.samples_per_second,
                e.tokens_per_second > 0
                    ? absl::StrFormat("  %.0f tokens/s", e.tokens_per_second)
                    : "");
          },
          [](const EvalResultEvent& e) {
            return absl::StrFormat(
                "eval at step %d: loss %.4f  accuracy %.2f%% (%d examples)",
                e.step, e.loss, 100 * e.accuracy, e.examples);
          },
          [](const CheckpointSavedEvent& e) {
            return absl::StrFormat("checkpoint at step %d: %s", e.step, e.path);
          },
          [](const TrainFinishedEvent& e) {
            // No evaluation ran (no eval set): no eval figures, not zeros.
            const std::string eval =
                e.eval_loss > 0
                    ? absl::StrFormat(", eval loss %.4f, eval accuracy %.2f%%",
                                      e.eval_loss, 100 * e.eval_accuracy)
                    : "";
            return absl::StrFormat(
                       "finished: step %d, train loss %.4f%s, "
                       "%.1f s; checkpoint %s",
                       e.step, e.train_loss, eval, e.wall_seconds,
                       e.checkpoint_path) +
                   (e.stopped_early.empty()
                        ? ""
                        : absl::StrCat(" (stopped early: ", e.stopped_early,
                                       ")")) +
                   // checkpoint.keep_best: the one to sample or export.
                   (e.best_checkpoint_path.empty()
                        ? ""
                        : absl::StrFormat(
                              "; best checkpoint %s (step %d, eval loss %.4f)",
                              e.best_checkpoint_path, e.best_step,
                              e.best_eval_loss));
          },
          [](const TrainInterruptedEvent& e) {
            return absl::StrFormat("interrupted at step %d; checkpoint %s",
                                   e.step, e.checkpoint_path);
          },
      },
      event);
}

}  // namespace trainyard::engine
