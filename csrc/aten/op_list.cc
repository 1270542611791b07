#include "op_list.h"

#include <ATen/core/dispatch/Dispatcher.h>

#include <algorithm>
#include <mutex>
#include <set>
#include <tuple>

#include "../lowering/registry.h"
#include "arguments.h"
#include "dispatch.h"

namespace torch_tpu::aten {

namespace {

std::mutex g_mu;
std::vector<OpRow>& noted() {
  static std::vector<OpRow> rows;
  return rows;
}

}  // namespace

std::string file_stem(const char* path) {
  std::string s(path);
  s = s.substr(s.find_last_of('/') + 1);
  return s.substr(0, s.find('.'));
}

KernelList::KernelList(torch::Library& m, const char* kind, const char* key,
                       std::source_location where)
    : m_(m), kind_(kind), family_(file_stem(where.file_name())), key_(key) {}

void KernelList::note(const char* name) {
  std::string op(name);
  if (op.find("::") == std::string::npos) op = "aten::" + op;
  std::lock_guard<std::mutex> lock(g_mu);
  noted().push_back({std::move(op), kind_, family_, "", key_});
}

std::vector<OpRow> op_list() {
  const auto& registry = lowering::Registry::get();
  std::vector<OpRow> rows;
  for (const auto& [op, lowering] : native_lowerings()) {
    if (lowering.rfind("stablehlo:", 0) == 0)  // a user's kernel (custom_kernels.h)
      rows.push_back({op, "user", "stablehlo", lowering, "PrivateUse1"});
    else
      rows.push_back({op, op == lowering ? "lowered" : "derived", registry.family(lowering),
                      lowering, "PrivateUse1"});
  }
  {
    std::lock_guard<std::mutex> lock(g_mu);
    rows.insert(rows.end(), noted().begin(), noted().end());
  }
  std::set<std::string> listed;
  for (const OpRow& r : rows)
    if (r.key == "PrivateUse1") listed.insert(r.op);
  // Kernels registered by others: PyTorch's c10d ops serve every backend,
  // and FSDP2 registers its copy-in/out ops (`fsdp::`) for every backend
  // when torch.distributed.fsdp is imported; other packages register their
  // own namespaces' ops for tpu (TorchRec's `torchrec::` embedding ops, in
  // Python). An unlisted `aten::` or `tpu::` kernel is a registration that
  // bypassed KernelList.
  auto& dispatcher = c10::Dispatcher::singleton();
  for (const c10::OperatorName& n :
       dispatcher.getRegistrationsForDispatchKey(c10::DispatchKey::PrivateUse1)) {
    std::string op = full_name(n);
    if (listed.count(op)) continue;
    if (op.rfind("c10d::", 0) == 0)
      rows.push_back({op, "collective", "c10d", "", "PrivateUse1"});
    else if (op.rfind("fsdp::", 0) == 0)
      rows.push_back({op, "pytorch", "fsdp", "", "PrivateUse1"});
    else if (op.rfind("aten::", 0) != 0 && op.rfind("tpu::", 0) != 0)  // e.g. torchrec::
      rows.push_back({op, "external", op.substr(0, op.find("::")), "", "PrivateUse1"});
    else
      rows.push_back({op, "unlisted", "", "", "PrivateUse1"});
  }
  rows.push_back({"*", "fallback", "fallback", "", "PrivateUse1"});
  std::sort(rows.begin(), rows.end(), [](const OpRow& a, const OpRow& b) {
    return std::tie(a.op, a.key) < std::tie(b.op, b.key);
  });
  return rows;
}

}  // namespace torch_tpu::aten
