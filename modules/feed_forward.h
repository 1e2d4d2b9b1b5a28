// FeedForward: torchtune's SwiGLU MLP, out = w2(silu(w1(x)) * w3(x)).
// w1 (gate_proj) and w3 (up_proj) map d -> f; w2 (down_proj) maps f -> d.
#ifndef CCTUNE_MODULES_FEED_FORWARD_H_
#define CCTUNE_MODULES_FEED_FORWARD_H_

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "modules/activation_store.h"
#include "modules/linear.h"
#include "modules/module.h"
#include "modules/scratch.h"

namespace cctune {

class FeedForward : public Module {
 public:
  // Children "w1", "w2", "w3". InvalidArgument naming the dims when they do not chain
  // (gate_proj and up_proj d -> f, down_proj f -> d).
  static absl::StatusOr<std::unique_ptr<FeedForward>> Create(std::unique_ptr<Linear> gate_proj,
                                                             std::unique_ptr<Linear> down_proj,
                                                             std::unique_ptr<Linear> up_proj);

  int64_t dim() const { return w1_->in_dim(); }
  int64_t hidden_dim() const { return w1_->out_dim(); }
  const Linear& w1() const { return *w1_; }
  const Linear& w2() const { return *w2_; }
  const Linear& w3() const { return *w3_; }

  // What Backward reads, saved by a training Forward. The buffers are kept from one call to
  // the next (reused when the shape repeats).
  struct Activations {
    Tensor x;     // [..., d] the input (a view: the caller keeps it unchanged until Backward)
    Tensor gate;  // [..., f] w1(x)
    Tensor up;    // [..., f] w3(x)
    Tensor act;   // [..., f] silu(gate) · up
  };

  // out [..., d] = mlp(x [..., d]); out may be x itself. Training passes `acts` (filled for
  // Backward) and the step's store; evaluation and generation pass neither.
  absl::Status Forward(Tensor& out, const Tensor& x, Activations* acts = nullptr,
                       ActivationStore* store = nullptr);
  // dx [..., d] += d(mlp)/dx · dy, and the projections' gradients, from the saved `acts`.
  absl::Status Backward(Tensor& dx, const Tensor& dy, const Activations& acts,
                        ActivationStore& store) const;
  // A new f32 output on x's device.
  absl::StatusOr<Tensor> operator()(const Tensor& x);

  // Inference buffers (gate, up): slots [first_slot, first_slot + kScratchSlots) of `pool`
  // from now on (modules/scratch.h; TransformerSelfAttentionLayer::ShareScratch).
  static constexpr size_t kScratchSlots = 2;
  void ShareScratch(std::shared_ptr<Scratch> pool, size_t first_slot) {
    scratch_.Share(std::move(pool), first_slot);
  }

 private:
  FeedForward(std::unique_ptr<Linear> w1, std::unique_ptr<Linear> w2, std::unique_ptr<Linear> w3);

  std::unique_ptr<Linear> w1_;
  std::unique_ptr<Linear> w2_;
  std::unique_ptr<Linear> w3_;
  Scratch scratch_;
};

}  // namespace cctune

#endif  // CCTUNE_MODULES_FEED_FORWARD_H_
