// The one list of tpu kernels: every operator the tpu device serves, how it
// is served and from which family. Built from the registrations themselves
// (the lowering registry, the derived variants, and the hand-written kernels
// registered through `KernelList`); torch_tpu._C._op_list() hands it to
// Python, where the coverage report and docs/ops.md read it.
#pragma once

#include <torch/library.h>

#include <source_location>
#include <string>
#include <utility>
#include <vector>

namespace torch_tpu::aten {

struct OpRow {
  std::string op;        // "aten::add.Tensor"; "*" for the fallback
  // lowered: a registry entry; derived: its in-place or out= variant;
  // host-synced: reads data on the host (data-dependent shapes);
  // core: allocation, views, copies; composite: composed of ATen ops;
  // collective: a c10d op PyTorch registers for every backend;
  // pytorch: an op a PyTorch module registers for every backend once it is
  // imported (FSDP2's `fsdp::` copy-in/out);
  // user: a user's StableHLO kernel (custom_kernels.h; left out of the
  // coverage counts and docs/ops.md);
  // external: another package's op in its own namespace with a tpu kernel
  // it registered (TorchRec's `torchrec::`; left out likewise);
  // fallback: every other op (NotImplementedError, or the CPU).
  std::string kind;
  std::string family;    // the lowering file ("elementwise") or aten file ("host_ops")
  std::string lowering;  // lowered/derived: the registry entry that serves it
  std::string key;       // the dispatch key ("PrivateUse1", "NestedTensorPrivateUse1")
};

// Registers hand-written kernels with `m` (which must outlive it) and notes
// each in the op list as `kind`, of the family named by the registering file.
class KernelList {
 public:
  KernelList(torch::Library& m, const char* kind, const char* key = "PrivateUse1",
             std::source_location where = std::source_location::current());
  template <class F>
  KernelList& impl(const char* name, F&& fn) {
    note(name);
    m_.impl(name, std::forward<F>(fn));
    return *this;
  }

 private:
  void note(const char* name);
  torch::Library& m_;
  std::string kind_, family_, key_;
};

// Every tpu kernel, sorted by operator and key.
std::vector<OpRow> op_list();

// The stem of a source file's name: "/x/csrc/aten/host_ops.cc" -> "host_ops".
std::string file_stem(const char* path);

}  // namespace torch_tpu::aten
