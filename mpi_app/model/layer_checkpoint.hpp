// SPDX-License-Identifier: Apache-2.0
// layer_checkpoint: activation checkpointing of one decoder layer (--activation-checkpointing;
// Hugging Face's gradient_checkpointing, veRL's enable_gradient_checkpointing). The layer's forward
// runs without recording its graph and keeps only its input; the backward pass runs the layer
// again with gradients on and back-propagates through that copy, so a training step holds one
// hidden state per layer instead of every activation inside it (attention scores, MLP inputs),
// for about one more forward of compute.
//
// Design: a torch::autograd::Function whose backward recomputes and calls
// torch::autograd::backward on the recomputed output (PyTorch's reentrant checkpoint): the
// layer's parameter gradients accumulate into their .grad, as loss.backward() does elsewhere. The
// bf16 autocast state of the forward is replayed in the recompute, so the numbers are the same.
// Does NOT: support torch::autograd::grad on parameters (it only fills .grad), random layers (the
// recompute must give the same output: tagflow's decoder has no dropout), or a layer whose output
// is a view of its input.
#pragma once
#include <torch/torch.h>

#include <functional>

namespace tagflow::model {

/// One layer: hidden states in, hidden states out. Runs once in the forward and once more in the
/// backward: capture what it needs by value (tensors, module pointers), never by reference to a
/// local of the caller.
using LayerFn = std::function<torch::Tensor(const torch::Tensor&)>;

/// f(h), checkpointed when `on` and the call records a graph (grad mode on, h requiring grad);
/// f(h) as it is otherwise (a frozen reference, inference, an input without gradient).
torch::Tensor run_layer(bool on, const LayerFn& f, const torch::Tensor& h);

}  // namespace tagflow::model
