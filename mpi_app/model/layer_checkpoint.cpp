// SPDX-License-Identifier: Apache-2.0
// layer_checkpoint: recompute-in-backward for one decoder layer. See layer_checkpoint.hpp.
#include "model/layer_checkpoint.hpp"

#include <ATen/autocast_mode.h>

#include <utility>

namespace tagflow::model {
namespace {

// The layer and the autocast state of its forward, kept by the autograd context until the backward.
struct Saved : torch::CustomClassHolder {
    LayerFn f;
    bool cpu_autocast = false, gpu_autocast = false;
    at::ScalarType cpu_dtype = at::kBFloat16, gpu_dtype = at::kHalf;
};

// Replays a forward's autocast state for one scope (thread-local ATen state), then restores it.
class AutocastAs {
public:
    explicit AutocastAs(const Saved& s)
        : cpu_(at::autocast::is_cpu_enabled()),
          gpu_(at::autocast::is_enabled()),
          cpu_dtype_(at::autocast::get_autocast_cpu_dtype()),
          gpu_dtype_(at::autocast::get_autocast_gpu_dtype()) {
        at::autocast::set_autocast_cpu_dtype(s.cpu_dtype);
        at::autocast::set_autocast_gpu_dtype(s.gpu_dtype);
        at::autocast::set_cpu_enabled(s.cpu_autocast);
        at::autocast::set_enabled(s.gpu_autocast);
    }
    ~AutocastAs() {
        at::autocast::set_cpu_enabled(cpu_);
        at::autocast::set_enabled(gpu_);
        at::autocast::set_autocast_cpu_dtype(cpu_dtype_);
        at::autocast::set_autocast_gpu_dtype(gpu_dtype_);
    }
    AutocastAs(const AutocastAs&) = delete;
    AutocastAs& operator=(const AutocastAs&) = delete;

private:
    bool cpu_, gpu_;
    at::ScalarType cpu_dtype_, gpu_dtype_;
};

struct LayerCheckpoint : torch::autograd::Function<LayerCheckpoint> {
    // Function::apply runs this with grad mode off: nothing inside the layer is recorded.
    static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& h,
                                 c10::intrusive_ptr<Saved> saved) {
        ctx->save_for_backward({h});
        torch::Tensor out = saved->f(h);
        ctx->saved_data["layer"] = c10::IValue::make_capsule(std::move(saved));
        return out;
    }

    static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                   torch::autograd::variable_list grad_out) {
        const auto saved = c10::static_intrusive_pointer_cast<Saved>(ctx->saved_data["layer"].toCapsule());
        torch::Tensor x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
        torch::Tensor y;
        {
            torch::AutoGradMode grad(true);
            AutocastAs autocast(*saved);
            y = saved->f(x);
        }
        torch::autograd::backward({y}, {grad_out[0]});
        return {x.grad(), torch::Tensor()};
    }
};

}  // namespace

torch::Tensor run_layer(bool on, const LayerFn& f, const torch::Tensor& h) {
    if (!on || !torch::GradMode::is_enabled() || !h.requires_grad()) return f(h);
    auto saved = c10::make_intrusive<Saved>();
    saved->f = f;
    saved->cpu_autocast = at::autocast::is_cpu_enabled();
    saved->gpu_autocast = at::autocast::is_enabled();
    saved->cpu_dtype = at::autocast::get_autocast_cpu_dtype();
    saved->gpu_dtype = at::autocast::get_autocast_gpu_dtype();
    return LayerCheckpoint::apply(h, std::move(saved));
}

}  // namespace tagflow::model
