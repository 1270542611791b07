// PyTorch's accelerator graph interface (ATen/core/GraphImplInterface.h) for
// tpu: `torch.accelerator.Graph` and `torch.tpu.TPUGraph` capture and replay
// steps through StepGraph.
#include <ATen/core/GraphImplInterface.h>
#include <c10/core/DeviceType.h>
#include <c10/util/Exception.h>

#include <fstream>

#include "step_capture.h"

namespace torch_tpu::aten {

namespace {

class TpuGraphImpl final : public at::GraphImplInterface {
 public:
  explicit TpuGraphImpl(const at::GraphImplArgs&) {}
  ~TpuGraphImpl() override {
    if (capturing_) StepGraph::abort();
  }

  // There are no memory pools (a storage's device array is freed with it)
  // and capture is always global: `pool` and `mode` change nothing.
  void capture_begin(c10::MempoolId_t, at::GraphCaptureMode) override {
    TORCH_CHECK(!graph_, "tpu: this graph already holds a captured step; reset() it first");
    StepGraph::begin();
    capturing_ = true;
  }
  void capture_end() override {
    TORCH_CHECK(capturing_, "tpu: capture_end() on a graph that is not capturing");
    capturing_ = false;
    graph_ = StepGraph::end();
  }
  void instantiate() override {}  // the program is compiled by capture_end
  void replay() override {
    TORCH_CHECK(graph_, "tpu: replay() of a graph that holds no captured step");
    graph_->replay();
  }
  void reset() override {
    if (capturing_) StepGraph::abort();
    capturing_ = false;
    graph_.reset();
  }
  c10::MempoolId_t pool() const override { return {0, 0}; }
  void enable_debug_mode() override {}  // the program's text is always kept
  // Writes the captured program's StableHLO text.
  void debug_dump(const std::string& path) override {
    TORCH_CHECK(graph_, "tpu: debug_dump() of a graph that holds no captured step");
    std::ofstream out(path);
    TORCH_CHECK(out, "tpu: debug_dump() cannot write ", path);
    out << graph_->text();
  }

 private:
  std::shared_ptr<StepGraph> graph_;
  bool capturing_ = false;
};

}  // namespace

void register_graph_impl() {
  static bool done = [] {
    at::GraphImplRegistry()->Register(
        c10::DeviceTypeName(c10::DeviceType::PrivateUse1, /*lower_case=*/false),
        [](at::GraphImplArgs args) -> std::unique_ptr<at::GraphImplInterface> {
          return std::make_unique<TpuGraphImpl>(args);
        });
    return true;
  }();
  (void)done;
}

}  // namespace torch_tpu::aten
